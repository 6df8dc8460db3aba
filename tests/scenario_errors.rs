//! Bad input: every malformed or inconsistent scenario gets an error that names the file, the
//! field and the value, exit code 2, and no panic.

mod common;
use common::*;

/// Runs `simulate` on SMALL with `find` replaced by `replace` and checks the error.
fn assert_rejected(find: &str, replace: &str, expected: &[&str]) {
    let dir = tempfile::tempdir().unwrap();
    assert!(SMALL.contains(find), "test bug: {find:?} not in the base scenario");
    let path = write_file(dir.path(), "broken.toml", &SMALL.replacen(find, replace, 1));
    let out = servesim(&["simulate", path.to_str().unwrap()]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "exit code; stderr: {err}");
    assert!(!err.contains("panicked"), "panicked: {err}");
    assert!(err.contains("broken.toml"), "error does not name the file: {err}");
    for needle in expected {
        assert!(err.contains(needle), "error does not mention {needle:?}: {err}");
    }
    assert!(stdout(&out).is_empty(), "printed results despite the error");
}

#[test]
fn the_base_scenario_is_valid() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_file(dir.path(), "ok.toml", SMALL);
    let out = servesim(&["simulate", path.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
}

#[test]
fn unknown_key() {
    assert_rejected("max_num_seqs = 16", "max_num_seqs = 16\nmax_num_seq = 3", &["max_num_seq"]);
}

#[test]
fn malformed_toml() {
    assert_rejected("seed = 7", "seed = = 7", &["seed"]);
}

#[test]
fn negative_rate() {
    assert_rejected("request_rate = 8.0", "request_rate = -2.0", &["workload.request_rate", "-2"]);
}

#[test]
fn tensor_parallel_not_dividing_heads() {
    assert_rejected("max_num_seqs = 16", "max_num_seqs = 16\ntensor_parallel = 3", &["engine.tensor_parallel", "3"]);
}

#[test]
fn model_that_does_not_fit() {
    assert_rejected("preset = \"Llama-3.2-1B\"", "preset = \"Llama-3.1-405B\"", &["GiB", "short by"]);
}

#[test]
fn request_longer_than_max_model_len() {
    assert_rejected("input_len = 256", "input_len = 5000", &["workload.dataset.input_len", "7500", "7548", "4096"]);
}

#[test]
fn unknown_model_preset() {
    assert_rejected("Llama-3.2-1B", "Llama-9", &["model.preset", "Llama-9", "Llama-3.1-8B"]);
}

#[test]
fn unknown_gpu() {
    assert_rejected("H100-SXM", "H1000", &["hardware.gpu", "H1000"]);
}

#[test]
fn unknown_policy() {
    assert_rejected("vllm-v1", "vllm-v9", &["engine.policy", "vllm-v9"]);
}

#[test]
fn zero_prompts() {
    assert_rejected("num_prompts = [4, 16]", "num_prompts = [4, 0]", &["workload.num_prompts", "0"]);
}

#[test]
fn missing_file_is_an_error_not_a_panic() {
    let out = servesim(&["simulate", "does/not/exist.toml"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("does/not/exist.toml"));
}

#[test]
fn malformed_set_override() {
    let path = repo().join("scenarios/quickstart.toml");
    let out = servesim(&["simulate", path.to_str().unwrap(), "--set", "engine.max_num_seqs"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("engine.max_num_seqs"), "{}", stderr(&out));
}

#[test]
fn invalid_override_value_names_the_field() {
    let path = repo().join("scenarios/quickstart.toml");
    let out = servesim(&["simulate", path.to_str().unwrap(), "--set", "engine.max_num_seqs=0"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("engine.max_num_seqs"), "{}", stderr(&out));
}

#[test]
fn bad_report_flags() {
    let path = repo().join("scenarios/quickstart.toml");
    for args in [["--report-layout", "fancy"], ["--metric-percentiles", "50,x"], ["--percentile-metrics", "ttft,foo"]] {
        let out = servesim(&["simulate", path.to_str().unwrap(), args[0], args[1]]);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        assert!(stderr(&out).contains(args[0]), "{args:?}: {}", stderr(&out));
    }
}
