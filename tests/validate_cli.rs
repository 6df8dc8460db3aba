//! `servesim validate` and `servesim fit` through the real binary: the comparison table, and
//! clear errors (exit 2) for scenarios or recorded files that cannot be compared.

mod common;
use common::*;

#[test]
fn validate_prints_recorded_simulated_and_error_per_point() {
    let scenario = repo().join("scenarios/recorded/run-002-vllm-10k.toml");
    let out = servesim(&["validate", scenario.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("num_prompts 1 (block 13, fitted)"), "{text}");
    assert!(text.contains("num_prompts 64 (block 19, held out)"), "{text}");
    // The recorded column carries the recorded file's numbers.
    assert!(text.contains("12286.18"), "recorded mean TTFT of block 13 missing: {text}");
    assert!(text.contains("absolute error over held-out points (6):"), "{text}");
}

#[test]
fn validate_writes_reports() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = repo().join("scenarios/recorded/run-000-decode.toml");
    let out = servesim(&["validate", scenario.to_str().unwrap(), "--out", dir.path().to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let summary = std::fs::read_to_string(dir.path().join("README.md")).unwrap();
    assert!(summary.contains("| mean_tpot_ms |"), "{summary}");
    assert!(dir.path().join("run-000-decode.txt").exists());
}

#[test]
fn scenario_without_validation_needs_recorded() {
    let scenario = repo().join("scenarios/quickstart.toml");
    let out = servesim(&["validate", scenario.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("--recorded"), "{}", stderr(&out));
}

#[test]
fn malformed_recorded_file_names_the_line() {
    let dir = tempfile::tempdir().unwrap();
    let recorded = write_file(
        dir.path(),
        "bad.txt",
        "============ Serving Benchmark Result ============\nSuccessful requests:                     1\nMean TTFT (ms):                          abc\n==================================================\n",
    );
    let scenario = repo().join("tests/data/golden.toml");
    let out = servesim(&["validate", scenario.to_str().unwrap(), "--recorded", recorded.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("bad.txt:3"), "error does not name line 3: {err}");
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn too_few_recorded_blocks_is_an_error() {
    let scenario = repo().join("tests/data/golden.toml");
    let recorded = repo().join("tests/data/recorded/run-001-mixed-3000.txt");
    let out = servesim(&["validate", scenario.to_str().unwrap(), "--recorded", recorded.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("block 2"), "{}", stderr(&out));
}

#[test]
fn fit_rejects_unknown_parameters() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = repo().join("scenarios/recorded/run-000-decode.toml");
    let profile = dir.path().join("p.toml");
    let out = servesim(&[
        "fit",
        scenario.to_str().unwrap(),
        "--params",
        "gemm_efficiency,warp_speed",
        "--out",
        profile.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("warp_speed"), "{}", stderr(&out));
    assert!(!profile.exists());
}

#[test]
fn fit_writes_a_profile_that_scenarios_load() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = repo().join("scenarios/recorded/run-000-decode.toml");
    let profile = dir.path().join("p.toml");
    let out = servesim(&[
        "fit",
        scenario.to_str().unwrap(),
        "--set",
        "cost.profile=",
        "--params",
        "step_overhead_graph_us",
        "--max-evals",
        "60",
        "--out",
        profile.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = std::fs::read_to_string(&profile).unwrap();
    assert!(text.contains("[provenance]") && text.contains("recorded_blocks_fitted = [2]"), "{text}");
    let run = servesim(&["simulate", scenario.to_str().unwrap(), "--set", &format!("cost.profile={}", profile.display())]);
    assert!(run.status.success(), "{}", stderr(&run));
}
