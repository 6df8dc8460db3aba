//! Each bad command-line value is refused before any work, exit code 2, by the flag's own name
//! (issue 17: some blamed another flag, or named one that does not exist).

mod common;
use common::*;

fn assert_refused(args: &[&str], flag: &str, value: &str) {
    let out = servesim(args);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
    assert!(!err.contains("panicked"), "{args:?}: {err}");
    assert!(err.contains(&format!("error: {flag}: \"{value}\"")), "{args:?} should name {flag}: {err}");
}

#[test]
fn calibrate_serve_and_fit_name_their_own_flags() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("x");
    let out = out.to_str().unwrap();
    assert_refused(&["calibrate", "--device", "cpu", "--threads", "0", "--out", out], "--threads", "0");
    let scenario = repo().join("scenarios/recorded/run-000-decode.toml");
    let scenario = scenario.to_str().unwrap();
    assert_refused(&["fit", scenario, "--params", "gemm_efficiency", "--out", out, "--max-evals", "0"], "--max-evals", "0");
    assert_refused(&["serve", "--random-weights", "tiny", "--port", "0", "--max-waiting", "0"], "--max-waiting", "0");
    // More KV cache than any machine here has (30,000 GiB for the tiny model).
    assert_refused(&["serve", "--random-weights", "tiny", "--port", "0", "--num-gpu-blocks", "4000000000"], "--num-gpu-blocks", "4000000000");
    let serve = ["serve", "--random-weights", "tiny", "--port", "0"];
    assert_refused(&[&serve[..], &["--num-scheduler-steps", "0"]].concat(), "--num-scheduler-steps", "0");
    assert_refused(&[&serve[..], &["--num-speculative-tokens", "99"]].concat(), "--num-speculative-tokens", "99");
    assert_refused(&[&serve[..], &["--num-speculative-tokens", "4", "--prompt-lookup-min", "5"]].concat(), "--prompt-lookup-min", "5");
    assert_refused(&[&serve[..], &["--num-speculative-tokens", "4", "--num-scheduler-steps", "8"]].concat(), "--num-speculative-tokens", "4");
    assert_refused(&["validate", "--engine", "--num-speculative-tokens", "4"], "--num-speculative-tokens", "4");
}

/// An output path that cannot be written is refused before the work (it used to fail after a
/// whole run, losing it).
#[test]
fn output_paths_are_checked_before_the_work() {
    let dir = tempfile::tempdir().unwrap();
    let file = write_file(dir.path(), "a-file", "");
    let under_a_file = file.join("out");
    let under_a_file = under_a_file.to_str().unwrap();
    let quickstart = repo().join("scenarios/quickstart.toml");
    let plan = repo().join("plans/llama70b-chat.toml");
    assert_refused(&["simulate", quickstart.to_str().unwrap(), "--out", under_a_file], "--out", under_a_file);
    assert_refused(&["plan", plan.to_str().unwrap(), "--out", under_a_file], "--out", under_a_file);
    assert_refused(&["validate", quickstart.to_str().unwrap(), "--out", under_a_file], "--out", under_a_file);
    assert_refused(&["report", dir.path().to_str().unwrap(), "--out", under_a_file], "--out", under_a_file);
    let in_a_file = format!("{under_a_file}/p.csv");
    assert_refused(&["calibrate", "--device", "cpu", "--out", &in_a_file], "--out", &in_a_file);
    assert_refused(&["serve", "--random-weights", "tiny", "--port", "0", "--timeline", &in_a_file], "--timeline", &in_a_file);
    let a_dir = dir.path().to_str().unwrap();
    assert_refused(&["calibrate", "--device", "cpu", "--out", a_dir], "--out", a_dir);
}
