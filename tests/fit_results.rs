//! `servesim fit --results`: benchmark results as users have them (vLLM `--save-result` JSON, one
//! file per rate; `servesim bench` output; a CSV table) read into one series, fitted as one
//! scenario with a request rate per point.

mod common;
use common::*;

use std::path::{Path, PathBuf};

use serde_json::{Value, json};
use servesim::fit::results::{Defaults, Series, read_series};
use servesim::fit::series::targets;
use servesim::metrics::LatencyMetric;
use servesim::metrics::format::{ReportOptions, insert_request_arrays, to_json};
use servesim::run::{cost_model, run_point, sim_config};
use servesim::scenario::Scenario;

fn data(rel: &str) -> PathBuf {
    repo().join("tests/data/fit").join(rel)
}

fn vllm_sweep() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> =
        std::fs::read_dir(data("vllm-sweep")).unwrap().map(|e| e.unwrap().path()).filter(|p| p.extension().is_some_and(|e| e == "json")).collect();
    files.sort();
    files
}

const NO_DEFAULT: Defaults = Defaults { request_rate: None };

fn read_err(paths: &[PathBuf]) -> String {
    read_series(paths, NO_DEFAULT).expect_err("malformed input must be refused").to_string()
}

#[test]
fn vllm_save_result_files_are_one_point_each() {
    let series = read_series(&vllm_sweep(), NO_DEFAULT).unwrap();
    let loads: Vec<(u32, f64, f64, Option<u32>)> =
        series.points.iter().map(|p| (p.num_prompts, p.request_rate, p.burstiness, p.max_concurrency)).collect();
    // Sorted by name: 1.0qps, 4.0qps, infqps ("inf" saved as a string, as vLLM saves it).
    assert_eq!(loads, vec![(8, 1.0, 1.0, None), (8, 4.0, 1.0, None), (8, f64::INFINITY, 1.0, None)]);
    let burst = &series.points[2];
    assert!(burst.is_burst());
    assert_eq!((burst.input_tokens_total, burst.output_tokens_total), (Some(4096), Some(953)));
    assert_eq!(burst.metrics.get("mean_ttft_ms"), Some(&61.02));
    assert_eq!(burst.metrics.get("p99_itl_ms").map(|v| (v * 1e6).round() / 1e6), Some(14.304));
    // Load fields are the point's load, not metrics; arrays and texts are not metrics either.
    for key in ["request_rate", "num_prompts", "ttfts", "generated_texts", "date"] {
        assert!(!burst.metrics.contains_key(key), "{key}");
    }
    assert!(series.notes.is_empty(), "{:?}", series.notes);
}

#[test]
fn servesim_bench_output_is_read_and_a_missing_rate_takes_the_scenarios() {
    let file = [data("servesim-bench/bench-openai-4.json")];
    // Written before bench saved its rate: the scenario's single rate stands in, and says so.
    let series = read_series(&file, Defaults { request_rate: Some(2.0) }).unwrap();
    let p = &series.points[0];
    assert_eq!((p.num_prompts, p.request_rate, p.max_concurrency), (4, 2.0, None));
    assert_eq!((p.input_tokens_total, p.output_tokens_total), (Some(1024), Some(256)));
    assert_eq!(p.metrics.get("mean_tpot_ms"), Some(&37.6));
    assert!(series.notes.iter().any(|n| n.contains("bench-openai-4.json") && n.contains("request_rate")), "{:?}", series.notes);
    // Without one to assume, the error names the file and the field.
    let err = read_err(&file);
    assert!(err.contains("bench-openai-4.json") && err.contains("request_rate") && err.contains("missing"), "{err}");
}

#[test]
fn csv_rows_are_points_and_lengths_become_totals() {
    let series = read_series(&[data("results.csv")], NO_DEFAULT).unwrap();
    let loads: Vec<(u32, f64, Option<u32>)> = series.points.iter().map(|p| (p.num_prompts, p.request_rate, p.max_concurrency)).collect();
    assert_eq!(loads, vec![(200, 1.0, None), (200, 4.0, None), (200, f64::INFINITY, None), (200, f64::INFINITY, Some(16))]);
    let p = &series.points[2];
    assert_eq!((p.input_tokens_total, p.output_tokens_total), (Some(200 * 1024), Some(200 * 128)));
    assert_eq!(p.metrics.get("p99_tpot_ms"), Some(&25.7));
    assert_eq!(p.metrics.get("request_throughput"), Some(&11.92));
    assert_eq!(p.line, 4);
    assert!(p.source.ends_with("results.csv line 4"), "{}", p.source);
    // Columns that are neither load nor metric are named, not silently dropped.
    assert!(series.notes.iter().any(|n| n.contains("date") && n.contains("notes")), "{:?}", series.notes);
}

#[test]
fn malformed_files_name_file_field_and_value() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let header = "num_prompts,request_rate,max_concurrency,mean_ttft_ms\n";
    let cases: Vec<(PathBuf, Vec<&str>)> = vec![
        (write_file(d, "rate.csv", &format!("{header}100,2,,30.1\n100,fast,,31.0\n")), vec!["rate.csv line 3", "request_rate", "fast"]),
        (write_file(d, "metric.csv", &format!("{header}100,2,,thirty\n")), vec!["metric.csv line 2", "mean_ttft_ms", "thirty"]),
        (write_file(d, "count.csv", &format!("{header}0,2,,30\n")), vec!["count.csv line 2", "num_prompts", "0"]),
        (write_file(d, "cap.csv", &format!("{header}10,2,1.5,30\n")), vec!["cap.csv line 2", "max_concurrency", "1.5"]),
        (write_file(d, "huge.csv", &format!("{header}99999999999,2,,30\n")), vec!["huge.csv line 2", "num_prompts", "1..=1000000"]),
        (write_file(d, "nocol.csv", "request_rate,mean_ttft_ms\n2,30\n"), vec!["nocol.csv", "line 1", "num_prompts"]),
        (write_file(d, "twice.csv", "num_prompts,request_rate,request_rate\n1,2,3\n"), vec!["twice.csv", "request_rate", "twice"]),
        (write_file(d, "ragged.csv", &format!("{header}100,2\n")), vec!["ragged.csv"]),
        (write_file(d, "rate.json", r#"{"num_prompts": 10, "request_rate": "soon", "mean_ttft_ms": 3}"#), vec!["rate.json", "request_rate", "soon"]),
        (write_file(d, "n.json", r#"{"num_prompts": 2.5, "request_rate": 1}"#), vec!["n.json", "num_prompts", "2.5"]),
        (write_file(d, "burst.json", r#"{"num_prompts": 2, "request_rate": 1, "burstiness": -1}"#), vec!["burst.json", "burstiness", "-1"]),
        (write_file(d, "conc.json", r#"{"num_prompts": 2, "request_rate": 1, "max_concurrency": "lots"}"#), vec!["conc.json", "max_concurrency", "lots"]),
        (write_file(d, "syntax.json", "{\"num_prompts\": 2,\n \"request_rate\": }"), vec!["syntax.json:2", "valid JSON"]),
        (write_file(d, "results.txt", "num_prompts,request_rate\n"), vec!["results.txt", ".json", ".csv"]),
    ];
    for (path, wanted) in cases {
        let err = read_err(std::slice::from_ref(&path));
        for w in wanted {
            assert!(err.contains(w), "{}: error lacks {w:?}: {err}", path.display());
        }
    }
}

/// A small vLLM-style deployment whose steps are short enough to fit quickly: Llama-3.2-1B on an
/// H100, vLLM 0.6 without chunked prefill, 1024-token prompts (prefill is compute-bound, so
/// TTFT sees gemm_efficiency) and 24-token outputs (TPOT sees the per-sequence overhead).
const BASE: &str = r#"
name = "fit-results"

[model]
preset = "Llama-3.2-1B"

[hardware]
gpu = "H100-SXM"

[engine]
policy = "vllm-v0"
enable_chunked_prefill = false
max_model_len = 4096

[cost]
profile = "roofline"

[workload]
num_prompts = 48
request_rate = inf

[workload.dataset]
kind = "fixed"
input_len = 1024
output_len = 24
"#;

/// Simulates `base` with `truth` at `rates` and writes each point as vLLM's
/// `benchmark_serving.py --save-result` writes it, one file per rate.
fn vllm_files(dir: &Path, base: &Path, truth: &[(&str, f64)], rates: &[f64]) -> Vec<PathBuf> {
    let mut set: Vec<String> = truth.iter().map(|(k, v)| format!("cost.{k}={v}")).collect();
    let rate_list: Vec<String> = rates.iter().map(|r| if r.is_finite() { format!("{r:?}") } else { "inf".into() }).collect();
    set.push(format!("workload.request_rate=[{}]", rate_list.join(", ")));
    let scenario = Scenario::load(base, &set).unwrap();
    let config = sim_config(&scenario);
    let cost = cost_model(&scenario);
    let opts = ReportOptions { percentile_metrics: LatencyMetric::ALL.to_vec(), percentiles: vec![99.0], ..ReportOptions::default() };
    scenario
        .workload
        .points()
        .iter()
        .map(|point| {
            let result = run_point(&scenario, &config, &cost, point, &[99.0]);
            let mut json = to_json(&result.summary, &opts);
            let obj = json.as_object_mut().unwrap();
            let rate = if point.request_rate.is_finite() { json!(point.request_rate) } else { json!("inf") };
            for (k, v) in [
                ("date", json!("20250101-000000")),
                ("backend", json!("vllm")),
                ("model_id", json!("meta-llama/Llama-3.2-1B")),
                ("tokenizer_id", json!("meta-llama/Llama-3.2-1B")),
                ("num_prompts", json!(point.num_prompts)),
                ("request_rate", rate),
                ("burstiness", json!(1.0)),
                ("max_concurrency", Value::Null),
            ] {
                obj.insert(k.into(), v);
            }
            insert_request_arrays(obj, &result.output.records.requests);
            let n = result.output.records.requests.len();
            obj.insert("itls".into(), json!(vec![Vec::<f64>::new(); n]));
            obj.insert("generated_texts".into(), json!(vec![""; n]));
            obj.insert("errors".into(), json!(vec![""; n]));
            let name = format!("vllm-{}qps-Llama-3.2-1B-20250101-000000.json", if point.request_rate.is_finite() { format!("{:?}", point.request_rate) } else { "inf".into() });
            let path = dir.join(name);
            std::fs::write(&path, serde_json::to_string(&json).unwrap()).unwrap();
            path
        })
        .collect()
}

/// `servesim fit BASE --results FILES… --params PARAMS --max-evals N --out OUT`.
fn fit_cli(base: &Path, params: &str, max_evals: u32, out: &Path, files: &[PathBuf]) -> std::process::Output {
    let mut args: Vec<String> = vec!["fit".into(), base.display().to_string(), "--params".into(), params.into()];
    args.extend(["--max-evals".into(), max_evals.to_string(), "--out".into(), out.display().to_string(), "--results".into()]);
    args.extend(files.iter().map(|f| f.display().to_string()));
    servesim(&args.iter().map(String::as_str).collect::<Vec<_>>())
}

fn profile_values(path: &Path) -> toml::Table {
    toml::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

#[test]
fn a_vllm_rate_sweep_is_one_scenario_and_recovers_known_parameters() {
    let dir = tempfile::tempdir().unwrap();
    let base = write_file(dir.path(), "base.toml", BASE);
    // A front end short enough that the burst's prefill, not its intake, sets its TTFT: with
    // 2 ms a request, every first token waits for the 96 ms intake to end, and the burst then
    // says nothing of gemm_efficiency (the fit lands 3.5% off it at an objective of 1e-5).
    let truth = [("gemm_efficiency", 0.45), ("seq_overhead_us", 30.0), ("frontend_overhead_us", 100.0)];
    let files = vllm_files(dir.path(), &base, &truth, &[8.0, 32.0, f64::INFINITY]);
    let out = dir.path().join("profile.toml");
    let run = fit_cli(&base, "gemm_efficiency,seq_overhead_us", 300, &out, &files);
    let err = stderr(&run);
    println!("{err}");
    assert!(run.status.success(), "{err}");
    // The burst made the fit take the front end's per-request time too, without being asked.
    assert!(err.contains("frontend_overhead_us fitted too"), "{err}");
    let profile = profile_values(&out);
    let cost = profile["cost"].as_table().unwrap();
    let provenance = profile["provenance"].as_table().unwrap();
    assert_eq!(provenance["added_parameters"].as_array().unwrap().len(), 1);
    // One scenario, one point per rate.
    let targets = provenance["targets"].as_array().unwrap();
    assert_eq!(targets.len(), 1);
    assert_eq!(targets[0]["request_rates"].as_array().unwrap().len(), 3);
    for (name, true_value) in truth {
        let fitted = cost[name].as_float().unwrap();
        let error = fitted / true_value - 1.0;
        println!("{name:<22} fitted {fitted:>12.4}  true {true_value:>8}  error {:+.2}%", error * 100.0);
        // 2%: the simulator's steps are discrete, so the objective is flat over small moves
        // (measured: within 0.01%).
        assert!(error.abs() < 0.02, "{name}: fitted {fitted}, true {true_value}");
    }
    assert!(provenance["pinned_at_range_edge"].as_array().unwrap().is_empty());
}

#[test]
fn a_front_end_the_data_does_not_show_is_flagged_at_the_edge() {
    // Recorded with no front-end time at all: the fit drives frontend_overhead_us to the floor
    // of its range, and the profile and the output say so.
    let dir = tempfile::tempdir().unwrap();
    let base = write_file(dir.path(), "base.toml", BASE);
    let truth = [("seq_overhead_us", 30.0), ("frontend_overhead_us", 0.0)];
    let files = vllm_files(dir.path(), &base, &truth, &[f64::INFINITY]);
    let out = dir.path().join("profile.toml");
    let run = fit_cli(&base, "seq_overhead_us", 120, &out, &files);
    let err = stderr(&run);
    println!("{err}");
    assert!(run.status.success(), "{err}");
    let profile = profile_values(&out);
    let flagged: Vec<&str> = profile["provenance"]["pinned_at_range_edge"].as_array().unwrap().iter().filter_map(|v| v.as_str()).collect();
    assert_eq!(flagged, vec!["frontend_overhead_us"]);
    assert!(profile["cost"]["frontend_overhead_us"].as_float().unwrap() < 1.0);
    assert!(err.contains("frontend_overhead_us") && err.contains("FLAGGED") && err.contains("lower end"), "{err}");
}

#[test]
fn points_differing_in_client_cap_become_separate_scenarios_with_their_rates() {
    let dir = tempfile::tempdir().unwrap();
    let base = write_file(dir.path(), "base.toml", &BASE.replace("input_len = 1024", "input_len = 1000").replace("output_len = 24", "output_len = 100"));
    let series: Series = read_series(&[data("results.csv")], NO_DEFAULT).unwrap();
    let metrics = vec!["mean_ttft_ms".to_string(), "mean_tpot_ms".to_string()];
    let t = targets(&base, &[], &series, &[2], &metrics).unwrap();
    assert_eq!(t.len(), 2);
    let w = &t[0].scenario.workload;
    assert_eq!(w.request_rate, vec![1.0, 4.0, f64::INFINITY]);
    assert_eq!(w.num_prompts, vec![200, 200, 200]);
    assert_eq!(w.max_concurrency, None);
    // The CSV's mean lengths became exact totals, which the sampled lengths are scaled to.
    assert_eq!(w.input_tokens_total, Some(vec![204_800; 3]));
    assert_eq!(t[0].plan.fit_blocks, vec![1, 3], "point 2 is held out");
    assert_eq!(t[1].scenario.workload.max_concurrency, Some(16));
    assert_eq!(t[1].scenario.workload.request_rate, vec![f64::INFINITY]);
    assert!(t[1].plan.fit_blocks.is_empty() && !t[1].reported_only, "its one point is fitted");
    assert!(t.iter().all(|t| t.scenario.validation.is_none()));

    // A metric the fit compares must be in every fitted point; the error names the row.
    let err = targets(&base, &[], &series, &[], &["p99_e2el_ms".to_string()]).unwrap_err().to_string();
    assert!(err.contains("results.csv line 2") && err.contains("p99_e2el_ms"), "{err}");
    let err = targets(&base, &[], &series, &[5], &metrics).unwrap_err().to_string();
    assert!(err.contains("--hold-out") && err.contains("1..=4"), "{err}");
    let err = targets(&base, &[], &series, &[1, 2, 3, 4], &metrics).unwrap_err().to_string();
    assert!(err.contains("every point"), "{err}");
}
