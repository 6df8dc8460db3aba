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

/// Sizes and parameters that used to panic, abort on an allocation, or run silently wrong
/// (issue 17); each is refused up front, naming its field.
#[test]
fn absurd_sizes_and_parameters() {
    let sharegpt = "kind = \"random\"\ninput_len = 256\noutput_len = 32\nrange_ratio = 0.5";
    let lognormal = |mean: &str, std: &str| {
        format!("kind = \"sharegpt\"\ninput = {{ dist = \"lognormal\", mean = {mean}, std = {std}, min = 1, max = 512 }}\noutput = {{ dist = \"fixed\", value = 8 }}")
    };
    // The log-normal's own parameters overflow (a sampler panic before).
    assert_rejected(sharegpt, &lognormal("1e-300", "1"), &["workload.dataset.input.std", "overflow", "1e-300"]);
    assert_rejected(sharegpt, &lognormal("100", "1e300"), &["workload.dataset.input.std", "1e300"]);
    // An allocation per request (an abort before).
    assert_rejected("num_prompts = [4, 16]", "num_prompts = 4000000000", &["workload.num_prompts", "4000000000", "10000000"]);
    // Arrivals past a u64 of nanoseconds (a 21 s run before, silently).
    assert_rejected("request_rate = 8.0", "request_rate = 1e-12", &["workload.request_rate", "1e-12", "1e9 s"]);
    assert_rejected("seed = 7", "seed = 7\nburstiness = 1e-300", &["workload.burstiness", "1e-300"]);
    // Memory no GPU has, KV blocks its memory cannot hold, replicas past any cluster.
    assert_rejected("gpu = \"H100-SXM\"", "gpu = \"H100-SXM\"\nmemory_gib = 1e15", &["hardware.memory_gib", "1e15"]);
    assert_rejected("max_num_seqs = 16", "max_num_seqs = 16\nnum_gpu_blocks = 4000000000", &["engine.num_gpu_blocks", "4000000000", "GiB"]);
    assert_rejected("max_num_seqs = 16", "max_num_seqs = 16\nreplicas = 100000000", &["engine.replicas", "65536"]);
}

/// A run at a tiny rate spans half a billion simulated seconds in bounded memory: the throughput
/// buckets and the concurrency sweep follow the requests, not the seconds.
#[test]
fn a_tiny_rate_runs_in_bounded_memory() {
    let dir = tempfile::tempdir().unwrap();
    let text = SMALL.replacen("request_rate = 8.0", "request_rate = 4e-9", 1).replacen("num_prompts = [4, 16]", "num_prompts = 3", 1);
    let path = write_file(dir.path(), "slow.toml", &text);
    let out = servesim(&["simulate", path.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let report = stdout(&out);
    assert!(report.contains("Successful requests:                     3"), "{report}");
    // The three arrive about 2.5 × 10⁸ s apart.
    let duration: f64 = report.lines().find(|l| l.starts_with("Benchmark duration")).unwrap().split_whitespace().last().unwrap().parse().unwrap();
    assert!(duration > 1e8, "{duration}");
    // A trace row past the horizon is refused with its line.
    let trace = write_file(dir.path(), "far.csv", "arrival_s,input_tokens,output_tokens\n0,10,5\n1e15,10,5\n");
    let text = SMALL.replacen("kind = \"random\"\ninput_len = 256\noutput_len = 32\nrange_ratio = 0.5", &format!("kind = \"trace\"\npath = {:?}", trace.to_str().unwrap()), 1).replacen("num_prompts = [4, 16]\n", "", 1);
    let path = write_file(dir.path(), "trace.toml", &text);
    let out = servesim(&["simulate", path.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("far.csv:3: arrival_s `1e15`"), "{}", stderr(&out));
}
