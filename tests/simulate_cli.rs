//! End-to-end `servesim simulate`: the printed report byte for byte, byte-identical reruns,
//! overrides and output files.

mod common;
use common::*;

const GOLDEN_SCENARIO: &str = "tests/data/golden.toml";
const GOLDEN_REPORT: &str = "tests/data/golden.txt";

#[test]
fn golden_report_byte_for_byte() {
    let scenario = repo().join(GOLDEN_SCENARIO);
    let out = servesim(&[
        "simulate",
        scenario.to_str().unwrap(),
        "--metric-percentiles",
        "50,90,99",
        "--percentile-metrics",
        "ttft,tpot,itl,e2el",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let expected = std::fs::read_to_string(repo().join(GOLDEN_REPORT)).unwrap_or_default();
    if stdout(&out) != expected && std::env::var_os("SERVESIM_BLESS").is_some() {
        std::fs::write(repo().join(GOLDEN_REPORT), stdout(&out)).unwrap();
        return;
    }
    assert_eq!(stdout(&out), expected, "report changed; if intended, rerun with SERVESIM_BLESS=1");
}

#[test]
fn two_runs_are_byte_identical() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = repo().join("scenarios/quickstart.toml");
    let mut printed = Vec::new();
    for run in ["a", "b"] {
        let out_dir = dir.path().join(run);
        let out = servesim(&["simulate", scenario.to_str().unwrap(), "--out", out_dir.to_str().unwrap()]);
        assert!(out.status.success(), "{}", stderr(&out));
        printed.push(out.stdout);
    }
    assert_eq!(printed[0], printed[1]);
    for file in ["summary.json", "requests.csv", "timeline.csv"] {
        let a = std::fs::read(dir.path().join("a").join(file)).unwrap();
        let b = std::fs::read(dir.path().join("b").join(file)).unwrap();
        assert!(!a.is_empty(), "{file} is empty");
        assert!(a == b, "{file} differs between identical runs");
    }
}

#[test]
fn seed_changes_results_and_set_overrides_fields() {
    let scenario = repo().join("scenarios/quickstart.toml");
    let path = scenario.to_str().unwrap();
    let base = stdout(&servesim(&["simulate", path]));
    let reseeded = servesim(&["simulate", path, "--seed", "12345"]);
    assert!(reseeded.status.success());
    assert_ne!(base, stdout(&reseeded), "--seed had no effect");
    let one_point = servesim(&["simulate", path, "--set", "workload.num_prompts=3", "--set", "workload.request_rate=20"]);
    assert!(one_point.status.success(), "{}", stderr(&one_point));
    let text = stdout(&one_point);
    assert_eq!(text.matches("Serving Benchmark Result").count(), 1);
    assert!(text.contains("Successful requests:                     3         \n"), "{text}");
}

#[test]
fn fewer_seqs_means_more_queueing() {
    // An override that matters: capping the batch at 1 sequence must raise TTFT.
    let scenario = repo().join("scenarios/quickstart.toml");
    let path = scenario.to_str().unwrap();
    let mean_ttft = |extra: &[&str]| -> f64 {
        let mut args = vec!["simulate", path, "--set", "workload.num_prompts=50"];
        args.extend_from_slice(extra);
        let text = stdout(&servesim(&args));
        let line = text.lines().find(|l| l.starts_with("Mean TTFT (ms):")).expect("TTFT line");
        line["Mean TTFT (ms):".len()..].trim().parse().unwrap()
    };
    assert!(mean_ttft(&["--set", "engine.max_num_seqs=1"]) > 2.0 * mean_ttft(&[]));
}

#[test]
fn legacy_layout_matches_vllm_0_6() {
    let scenario = repo().join(GOLDEN_SCENARIO);
    let out = servesim(&["simulate", scenario.to_str().unwrap(), "--report-layout", "legacy"]);
    assert!(out.status.success());
    let text = stdout(&out);
    assert!(text.contains("Total Token throughput (tok/s):"));
    assert!(!text.contains("Failed requests:"));
    assert!(!text.contains("Peak output token throughput"));
    let current = stdout(&servesim(&["simulate", scenario.to_str().unwrap()]));
    assert!(current.contains("Failed requests:                         0         \n"));
    assert!(current.contains("Peak concurrent requests:"));
}

#[test]
fn output_files_have_one_row_per_request_and_per_step() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = repo().join(GOLDEN_SCENARIO);
    let out = servesim(&["simulate", scenario.to_str().unwrap(), "--out", dir.path().to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("summary.json")).unwrap()).unwrap();
    let results = summary["results"].as_array().unwrap();
    let total_requests: u64 = results.iter().map(|r| r["num_prompts"].as_u64().unwrap()).sum();
    for key in ["duration", "completed", "total_input_tokens", "total_output_tokens", "request_throughput", "mean_ttft_ms", "p99_itl_ms"] {
        assert!(results[0].get(key).is_some(), "summary.json lacks vLLM key {key}");
    }
    let requests = std::fs::read_to_string(dir.path().join("requests.csv")).unwrap();
    assert_eq!(requests.lines().count() as u64, total_requests + 1);
    let steps: u64 = results.iter().map(|r| r["engine_steps"].as_u64().unwrap()).sum();
    let timeline = std::fs::read_to_string(dir.path().join("timeline.csv")).unwrap();
    assert_eq!(timeline.lines().count() as u64, steps + 1);
    // Every generated token is accounted for in the timeline's step counts.
    let generated: u64 = results.iter().map(|r| r["total_output_tokens"].as_u64().unwrap()).sum();
    assert!(generated > 0);
}

/// The mixture-of-experts example runs, reruns byte for byte, and prices expert parallelism and
/// routing skew differently; on one GPU the error names tensor parallelism.
#[test]
fn the_mixture_of_experts_example_runs() {
    let scenario = repo().join("scenarios/mixtral-8x7b.toml");
    let run = |extra: &[&str]| {
        let mut args = vec!["simulate", scenario.to_str().unwrap(), "--set", "workload.num_prompts=200", "--set", "workload.request_rate=5"];
        args.extend_from_slice(extra);
        let out = servesim(&args);
        assert!(out.status.success(), "{}", stderr(&out));
        stdout(&out)
    };
    let tp = run(&[]);
    assert_eq!(run(&[]), tp);
    assert!(tp.contains("Successful requests:                     200"), "{tp}");
    let ep = run(&["--set", "engine.expert_parallel=true"]);
    let skewed = run(&["--set", "engine.expert_parallel=true", "--set", "model.expert_routing_skew=1"]);
    assert!(ep != tp && skewed != ep);
    let out = servesim(&["simulate", scenario.to_str().unwrap(), "--set", "engine.tensor_parallel=1", "--set", "hardware.count=1"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("`engine.tensor_parallel` = 1: model weights need"), "{}", stderr(&out));
}
