//! Fit tests on synthetic recorded runs: the "recorded" values are simulated with known
//! parameters, so a correct fit must recover them.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::*;
use crate::metrics::recorded::RecordedBlock;

/// Llama-3.2-1B on one H100 under vLLM 0.6.3's scheduler without chunked prefill: prefills run
/// eagerly as their own steps (so TTFT sees `step_overhead_eager_us`), decodes replay graphs and
/// grow with the batch (so TPOT sees `seq_overhead_us`), and prompts of 1024 tokens make prefill
/// compute-bound (so TTFT sees `gemm_efficiency`). The step token budget is 4096 (V0 without
/// chunking: `max(max_model_len, 2048)`), so 2 prompts prefill in one step of 2048 tokens and
/// 8 or 48 in steps of 4096: steps of two sizes are what separate the per-step overhead from the
/// per-token GEMM time (with one size, only their sum would be identifiable). Three batch sizes
/// separate fixed from per-sequence costs in decode.
const SCENARIO: &str = r#"
name = "fit-test"

[model]
preset = "Llama-3.2-1B"

[hardware]
gpu = "H100-SXM"

[engine]
policy = "vllm-v0"
enable_chunked_prefill = false
max_model_len = 4096

[workload]
num_prompts = [2, 8, 48]
request_rate = inf

[workload.dataset]
kind = "fixed"
input_len = 1024
output_len = 24
"#;

const FITTED: [&str; 3] = ["gemm_efficiency", "step_overhead_eager_us", "seq_overhead_us"];
/// The values the synthetic recorded run is simulated with.
const TRUE_VALUES: [f64; 3] = [0.45, 4000.0, 30.0];

fn scenario_from(text: &str) -> Scenario {
    Scenario::from_toml_str(text, Path::new("scenarios/fit-test.toml"), &[]).unwrap_or_else(|e| panic!("{e}"))
}

fn names(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

/// A plan whose blocks are `scenario` simulated with `truth` substituted: block i is point i.
fn synthetic_plan(scenario: &Scenario, truth: &[(&str, f64)], fit_points: Vec<u32>) -> Plan {
    // Block i is point i, so the blocks to fit are the positions of the wanted num_prompts.
    let sweep = scenario.workload.num_prompts.clone();
    let fit_blocks = fit_points.iter().map(|n| 1 + sweep.iter().position(|m| m == n).expect("point in sweep")).collect();
    let mut s = scenario.clone();
    for (name, value) in truth {
        params::lookup(name).unwrap().set(&mut s.cost, *value);
    }
    let metrics = names(&DEFAULT_FIT_METRICS);
    let points = s.workload.points();
    let simulated = simulate_metrics(&s, &points, &metrics).unwrap();
    let blocks = simulated
        .into_iter()
        .enumerate()
        .map(|(i, row)| RecordedBlock {
            line: 1 + 30 * i,
            index: i + 1,
            labels: Vec::new(),
            context: vec![("num_prompts".into(), points[i].num_prompts.to_string())],
            values: metrics.iter().cloned().zip(row).collect::<BTreeMap<_, _>>(),
        })
        .collect();
    Plan {
        recorded: PathBuf::from("synthetic.txt"),
        blocks,
        block_of_point: (1..=points.len()).collect(),
        metrics,
        fit_blocks,
    }
}

fn synthetic_config(max_evaluations: usize) -> FitConfig {
    let scenario = scenario_from(SCENARIO);
    let truth: Vec<(&str, f64)> = FITTED.iter().copied().zip(TRUE_VALUES).collect();
    let plan = synthetic_plan(&scenario, &truth, Vec::new());
    FitConfig { targets: vec![FitTarget { scenario, plan, reported_only: false }], params: names(&FITTED), metrics: Vec::new(), max_evaluations, frontend_on_bursts: false, kernels: false, warm_start: None, robust: false }
}

#[test]
fn recovers_known_parameters() {
    let config = synthetic_config(600);
    let start = &config.targets[0].scenario.cost;
    // Start from the defaults (the vLLM 0.6.3 V0 engine profile's CPU time), well away from the
    // truth.
    assert_eq!((start.gemm_efficiency, start.step_overhead_eager_us, start.seq_overhead_us), (0.7, 1513.0, 42.3));

    let result = fit(&config).unwrap();
    println!(
        "fit: objective {:.3e} → {:.3e} in {} evaluations ({} restarts, converged {})",
        result.start_objective, result.objective, result.evaluations, result.restarts, result.converged
    );
    for ((name, value), truth) in result.values.iter().zip(TRUE_VALUES) {
        println!("  {name:<24} fitted {value:>14.8}  true {truth:>8}  error {:+.3}%", (value / truth - 1.0) * 100.0);
        assert!((value / truth - 1.0).abs() < 0.03, "{name}: fitted {value}, true {truth}");
    }
    assert!(result.start_objective > 1e-2, "the start should be clearly wrong: {}", result.start_objective);
    assert!(
        result.objective < result.start_objective * 1e-4,
        "objective {} should drop by orders of magnitude from {}",
        result.objective,
        result.start_objective
    );
    assert!(result.pinned_parameters().is_empty());
    // No fit points named: every point is fitted, and the result says so.
    let target = &result.targets[0];
    assert!(target.all_points);
    assert_eq!(target.fit_points, vec![2, 8, 48]);
    assert!(target.points.iter().all(|p| p.fitted && p.metrics.len() == 3));
    for p in &target.points {
        for m in &p.metrics {
            assert!(m.relative_error().abs() < 0.01, "{} at {}: {m:?}", m.key, p.num_prompts);
        }
    }
}

#[test]
fn held_out_points_are_reported_but_not_fitted() {
    let scenario = scenario_from(SCENARIO);
    let truth = [("seq_overhead_us", 30.0)];
    let plan = synthetic_plan(&scenario, &truth, vec![2, 48]);
    let config =
        FitConfig { targets: vec![FitTarget { scenario, plan, reported_only: false }], params: names(&["seq_overhead_us"]), metrics: Vec::new(), max_evaluations: 60, frontend_on_bursts: false, kernels: false, warm_start: None, robust: false };
    let result = fit(&config).unwrap();
    let target = &result.targets[0];
    assert!(!target.all_points);
    assert_eq!(target.fit_points, vec![2, 48]);
    let roles: Vec<(u32, bool)> = target.points.iter().map(|p| (p.num_prompts, p.fitted)).collect();
    assert_eq!(roles, vec![(2, true), (8, false), (48, true)]);
    let (_, value) = &result.values[0];
    assert!((value / 30.0 - 1.0).abs() < 0.03, "seq_overhead_us {value}");
}

#[test]
fn fit_is_deterministic() {
    let config = synthetic_config(25);
    let a = fit(&config).unwrap();
    let b = fit(&config).unwrap();
    assert_eq!(a, b);
    assert_eq!(a.evaluations, 25 * super::START_POINTS, "each starting point spends its budget");
    let base = &config.targets[0].scenario.cost;
    assert_eq!(profile_toml(&a, &config, base, "servesim fit x"), profile_toml(&b, &config, base, "servesim fit x"));
}

#[test]
fn profile_round_trips_through_a_scenario() {
    let config = synthetic_config(1);
    // A result as the fit would return it, with values that are not short decimals.
    let mut result = fit(&config).unwrap();
    result.values = vec![
        ("gemm_efficiency".into(), 0.451_234_567_890_123),
        ("step_overhead_eager_us".into(), 4_001.000_000_000_1),
        ("seq_overhead_us".into(), 1.0 / 3.0),
    ];
    let base = config.targets[0].scenario.cost.clone();
    let text = profile_toml(&result, &config, &base, "servesim fit scenarios/fit-test.toml --params \"a,b\"");
    println!("{text}");
    assert!(text.contains("fitted_parameters = [\"gemm_efficiency\", \"step_overhead_eager_us\", \"seq_overhead_us\"]"), "{text}");
    let table: toml::Table = toml::from_str(&text).unwrap();
    assert_eq!(table["provenance"]["command_line"].as_str(), Some("servesim fit scenarios/fit-test.toml --params \"a,b\""));

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("profile.toml");
    std::fs::write(&path, &text).unwrap();
    let profile_line = format!("[cost]\nprofile = {}\n\n[workload]\n", toml::Value::String(path.display().to_string()));
    let with_profile = SCENARIO.replace("[workload]\n", &profile_line);
    let loaded = scenario_from(&with_profile);

    let mut expected = base;
    for (name, value) in &result.values {
        params::lookup(name).unwrap().set(&mut expected, *value);
    }
    // Exact equality: floats are written in shortest round-trip form.
    assert_eq!(loaded.cost, expected);
}

#[test]
fn unknown_parameter_is_an_error() {
    let mut config = synthetic_config(10);
    config.params = names(&["gemm_efficiency", "flux_capacitance_us"]);
    let err = fit(&config).unwrap_err().to_string();
    assert!(err.contains("flux_capacitance_us"), "{err}");
    assert!(err.contains("step_overhead_graph_us"), "the error lists the known names: {err}");
}

#[test]
fn missing_or_negative_recorded_metric_is_an_error() {
    let mut config = synthetic_config(10);
    config.targets[0].plan.blocks[1].values.remove("mean_tpot_ms");
    let err = fit(&config).unwrap_err().to_string();
    assert!(err.contains("block 2") && err.contains("mean_tpot_ms"), "{err}");

    let mut config = synthetic_config(10);
    config.targets[0].plan.blocks[0].values.insert("mean_ttft_ms".into(), -1.0);
    let err = fit(&config).unwrap_err().to_string();
    assert!(err.contains("mean_ttft_ms") && err.contains("positive"), "{err}");
}

#[test]
fn a_recorded_zero_is_left_out_of_the_objective() {
    // TPOT of one-token outputs is recorded as 0: no relative figure, so it must not count.
    let config = synthetic_config(10);
    let base = fit(&config).unwrap();
    let mut zeroed = synthetic_config(10);
    zeroed.targets[0].plan.blocks[0].values.insert("mean_tpot_ms".into(), 0.0);
    let result = fit(&zeroed).unwrap();
    assert!(result.objective.is_finite());
    assert_ne!(result.start_objective, base.start_objective, "the zeroed metric changed nothing");
}

#[test]
fn values_at_either_end_of_their_range_are_flagged_in_the_profile() {
    let config = synthetic_config(1);
    let mut result = fit(&config).unwrap();
    // Values a fit once returned unflagged: a 0.995 efficiency and a 0.17 µs overhead.
    result.values = vec![
        ("gemm_efficiency".into(), 0.995),
        ("step_overhead_eager_us".into(), 0.17),
        ("seq_overhead_us".into(), 30.0),
    ];
    let edges: Vec<(String, params::Side)> = result.range_edges().into_iter().map(|(n, _, e)| (n, e.side)).collect();
    assert_eq!(
        edges,
        vec![("gemm_efficiency".to_string(), params::Side::Upper), ("step_overhead_eager_us".to_string(), params::Side::Lower)]
    );
    let text = profile_toml(&result, &config, &config.targets[0].scenario.cost, "servesim fit x");
    assert!(text.contains("pinned_at_range_edge = [\"gemm_efficiency\", \"step_overhead_eager_us\"]"), "{text}");
    let line = |name: &str| text.lines().find(|l| l.starts_with(&format!("{name} = "))).unwrap().to_string();
    assert!(line("gemm_efficiency").contains("FLAGGED: at the upper end"), "{text}");
    assert!(line("step_overhead_eager_us").contains("FLAGGED: at the lower end"), "{text}");
    assert!(!line("seq_overhead_us").contains("FLAGGED"), "{text}");
}

#[test]
fn a_burst_in_the_fit_set_adds_the_front_end() {
    // The synthetic scenario sends everything at once (request_rate = inf).
    let mut config = synthetic_config(1);
    config.frontend_on_bursts = true;
    let result = fit(&config).unwrap();
    let names: Vec<&str> = result.values.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, vec!["gemm_efficiency", "step_overhead_eager_us", "seq_overhead_us", FRONTEND_PARAM]);
    assert_eq!(result.added.len(), 1);
    let text = profile_toml(&result, &config, &config.targets[0].scenario.cost, "servesim fit x");
    assert!(text.contains("added_parameters = [\"frontend_overhead_us\"]"), "{text}");
    // Named already, it is not added twice; and without bursts, not at all.
    config.params.push(FRONTEND_PARAM.into());
    assert!(fit(&config).unwrap().added.is_empty());
    let mut paced = synthetic_config(1);
    paced.frontend_on_bursts = true;
    paced.targets[0].scenario.workload.request_rate = vec![50.0; 3];
    assert!(fit(&paced).unwrap().added.is_empty());
}

#[test]
fn the_robust_loss_is_the_square_near_zero_and_grows_slowly_beyond() {
    use super::robust_loss;
    let small = 0.05f64 * 0.05;
    assert!((robust_loss(small) - small).abs() < 0.01 * small, "{}", robust_loss(small));
    // A run 100× off weighs less than three runs 3× off, and still more than one.
    let (three, hundred) = (robust_loss(3f64.ln().powi(2)), robust_loss(100f64.ln().powi(2)));
    assert!(three < hundred && hundred < 3.0 * three, "{three} {hundred}");
}
