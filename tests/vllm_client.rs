//! vLLM's own client, `benchmark_serving.py` from the vLLM 0.6.3.post1 source distribution,
//! against `servesim serve` with the shipped tokenizer directory (a copy whose added tokens are
//! not special: `tests/common`'s `tokenizer_without_specials`): the client makes prompts and
//! counts tokens with transformers, the server with the `tokenizers` crate, and every count must
//! agree exactly.
//!
//! Needs `SERVESIM_VLLM_BENCHMARKS`, a directory with `benchmark_serving.py`,
//! `backend_request_func.py` and `sonnet.txt`, and a python3 that imports aiohttp, numpy, tqdm,
//! transformers, datasets, PIL and jinja2 (`.ci/run` downloads and installs them). Without them the tests
//! print why and pass, unless `SERVESIM_REQUIRE_VLLM_CLIENT=1` (CI) makes that a failure.

mod common;
use common::*;

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

/// The benchmarks directory, or `None` (after saying why) when this machine cannot run it.
fn vllm_benchmarks() -> Option<PathBuf> {
    let require = required("SERVESIM_REQUIRE_VLLM_CLIENT");
    let skip = |why: String| {
        assert!(!require, "SERVESIM_REQUIRE_VLLM_CLIENT=1 but {why}");
        eprintln!("skipping the vLLM client test: {why}");
        None
    };
    let Some(dir) = std::env::var_os("SERVESIM_VLLM_BENCHMARKS").map(PathBuf::from) else {
        return skip("SERVESIM_VLLM_BENCHMARKS is not set (see .ci/run)".into());
    };
    for file in ["benchmark_serving.py", "backend_request_func.py", "sonnet.txt"] {
        if !dir.join(file).is_file() {
            return skip(format!("{} is missing", dir.join(file).display()));
        }
    }
    match python_modules(&["aiohttp", "numpy", "tqdm", "transformers", "datasets", "PIL", "jinja2"]) {
        Ok(_) => Some(dir),
        Err(why) => skip(format!("{why}, one of the client's packages")),
    }
}

/// Runs `benchmark_serving.py` offline against `base`, counting with the tokenizer directory
/// `tokenizer`, and returns its `--save-result` JSON.
fn run_client(dir: &Path, base: &str, tokenizer: &Path, args: &[&str]) -> Value {
    let results = tempfile::tempdir().unwrap();
    let out = Command::new("python3")
        .current_dir(dir)
        .arg("benchmark_serving.py")
        .args(["--base-url", base, "--model", "random-tiny", "--tokenizer", tokenizer.to_str().unwrap(), "--seed", "3"])
        .args(["--save-result", "--result-dir", results.path().to_str().unwrap(), "--result-filename", "result.json"])
        .args(args)
        // The tokenizer is a local directory: nothing may come from the Hugging Face Hub.
        .env("HF_HUB_OFFLINE", "1")
        .env("TRANSFORMERS_OFFLINE", "1")
        .env("HF_DATASETS_OFFLINE", "1")
        .output()
        .expect("run python3");
    assert!(out.status.success(), "benchmark_serving.py {args:?} failed:\n{}\n{}", stdout(&out), stderr(&out));
    let text = std::fs::read_to_string(results.path().join("result.json")).expect("the saved result");
    serde_json::from_str(&text).expect("result JSON")
}

fn counts(v: &Value, key: &str) -> Vec<u64> {
    v[key].as_array().unwrap_or_else(|| panic!("no {key} in {v}")).iter().map(|n| n.as_u64().unwrap()).collect()
}

/// The server's prompt and generated token totals.
fn server_tokens(base: &str) -> (f64, f64) {
    let m = http_get(base, "/metrics");
    (metric(&m, "servesim_prompt_tokens_total").unwrap(), metric(&m, "servesim_generation_tokens_total").unwrap())
}

/// Runs the client and checks its counts: every request completed, totals add up, and the
/// server counted exactly what the client did (plus vLLM's initial test request, which repeats
/// the first prompt and is not in the results).
fn check_exact(dir: &Path, args: &[&str], num_prompts: u64) -> Value {
    // Server and client share a copy of the shipped tokenizer whose added tokens are plain, so
    // that a `<s>` the random model samples is in the text the client re-encodes.
    let tokenizer = tokenizer_without_specials();
    let (server, base) = spawn_serve(&["--random-weights", "tiny", "--threads", "1", "--max-num-seqs", "8", "--tokenizer", tokenizer.path().to_str().unwrap()]);
    let v = run_client(dir, &base, tokenizer.path(), args);
    let (prompt, generated) = server_tokens(&base);
    drop(server);
    let input_lens = counts(&v, "input_lens");
    let output_lens = counts(&v, "output_lens");
    assert_eq!(v["completed"], num_prompts, "{v}");
    assert_eq!(v["total_input_tokens"], input_lens.iter().sum::<u64>());
    assert_eq!(v["total_output_tokens"], output_lens.iter().sum::<u64>());
    assert_eq!(prompt, (input_lens.iter().sum::<u64>() + input_lens[0]) as f64, "server and client disagree on prompt tokens: {v}");
    assert_eq!(generated, (output_lens.iter().sum::<u64>() + output_lens[0]) as f64, "server and client disagree on output tokens: {v}");
    v
}

/// The random dataset: prompts are `tokenizer.decode` of random ids, outputs re-encoded text.
#[test]
fn vllm_random_dataset_counts_exactly() {
    let Some(dir) = vllm_benchmarks() else { return };
    let args = [
        "--backend", "vllm", "--dataset-name", "random", "--random-input-len", "32", "--random-output-len", "8",
        "--random-range-ratio", "0.5", "--num-prompts", "8", "--ignore-eos",
    ];
    let v = check_exact(&dir, &args, 8);
    // With `--ignore-eos`, the server generates each request's `max_tokens` (4..=8 here) and
    // the client's re-encoded count of the text must be that number.
    assert!(counts(&v, "output_lens").iter().all(|&n| (4..=8).contains(&n)), "{v}");
    assert!(counts(&v, "input_lens").iter().all(|&n| (16..=32).contains(&n)), "{v}");
}

/// TGI's `generate_stream`: vLLM 0.6.3 sends no ignore_eos, and the tiny random model has no
/// EOS, so every request still runs to `max_new_tokens`.
#[test]
fn vllm_tgi_backend_counts_exactly() {
    let Some(dir) = vllm_benchmarks() else { return };
    let args = [
        "--backend", "tgi", "--endpoint", "/generate_stream", "--dataset-name", "random", "--random-input-len", "24",
        "--random-output-len", "6", "--num-prompts", "6",
    ];
    let v = check_exact(&dir, &args, 6);
    assert_eq!(counts(&v, "output_lens"), [6; 6]);
}

/// The sonnet dataset formats prompts with the tokenizer's chat template and counts them with
/// `tokenizer(prompt_formatted)`, which adds special tokens: the shipped tokenizer adds none,
/// so the server's count still agrees.
#[test]
fn vllm_sonnet_dataset_uses_the_chat_template() {
    let Some(dir) = vllm_benchmarks() else { return };
    let args = [
        "--backend", "vllm", "--dataset-name", "sonnet", "--dataset-path", "sonnet.txt", "--sonnet-input-len", "300",
        "--sonnet-prefix-len", "100", "--sonnet-output-len", "4", "--num-prompts", "4", "--ignore-eos",
    ];
    check_exact(&dir, &args, 4);
}
