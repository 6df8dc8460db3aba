//! SGLang's own client, `bench_serving.py` from the SGLang 0.4.9 wheel (it runs without SGLang
//! installed), against `servesim serve` with the shipped tokenizer directory (the copy whose
//! added tokens are not special, as for vLLM's client): its native `/generate` backend and its
//! OpenAI one, every count agreeing with the server's, and its printed block and
//! `--output-file` record read back by servesim's reader.
//!
//! Needs `SERVESIM_SGLANG_BENCH_SERVING`, the path of that `bench_serving.py`, and a python3 that
//! imports aiohttp, numpy, requests, tqdm and transformers (`.ci/run` downloads and installs
//! them). Without them the tests print why and pass, unless `SERVESIM_REQUIRE_SGLANG_CLIENT=1`
//! (CI) makes that a failure.

mod common;
use common::*;

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;
use servesim::metrics::recorded::{RecordedBlock, parse_jsonl, parse_text};

/// The client script, or `None` (after saying why) when this machine cannot run it.
fn bench_serving() -> Option<PathBuf> {
    let require = required("SERVESIM_REQUIRE_SGLANG_CLIENT");
    let skip = |why: String| {
        assert!(!require, "SERVESIM_REQUIRE_SGLANG_CLIENT=1 but {why}");
        eprintln!("skipping the SGLang client test: {why}");
        None
    };
    let Some(script) = std::env::var_os("SERVESIM_SGLANG_BENCH_SERVING").map(PathBuf::from) else {
        return skip("SERVESIM_SGLANG_BENCH_SERVING is not set (see .ci/run)".into());
    };
    if !script.is_file() {
        return skip(format!("{} is missing", script.display()));
    }
    match python_modules(&["aiohttp", "numpy", "requests", "tqdm", "transformers"]) {
        Ok(_) => Some(script),
        Err(why) => skip(format!("{why}, one of the client's packages")),
    }
}

/// What one run of the client left: its stdout, its record read as JSON (the per-request lists
/// included) and as servesim reads it.
struct ClientRun {
    stdout: String,
    record: Value,
    block: RecordedBlock,
}

/// Runs `bench_serving.py` offline against `base`, counting with the tokenizer directory.
fn run_client(script: &Path, base: &str, tokenizer: &Path, args: &[&str]) -> ClientRun {
    let results = tempfile::tempdir().unwrap();
    let file = results.path().join("out.jsonl");
    let out = Command::new("python3")
        .arg(script)
        .args(["--base-url", base, "--model", "random-tiny", "--tokenizer", tokenizer.to_str().unwrap(), "--seed", "3"])
        .args(["--output-file", file.to_str().unwrap(), "--output-details", "--disable-tqdm"])
        .args(args)
        // The tokenizer is a local directory: nothing may come from the Hugging Face Hub.
        .env("HF_HUB_OFFLINE", "1")
        .env("TRANSFORMERS_OFFLINE", "1")
        // In SGLang's CI the client asks the server to flush its cache: not here.
        .env_remove("SGLANG_IS_IN_CI")
        .output()
        .expect("run python3");
    assert!(out.status.success(), "bench_serving.py {args:?} failed:\n{}\n{}", stdout(&out), stderr(&out));
    let text = std::fs::read_to_string(&file).expect("the --output-file record");
    assert_eq!(text.lines().count(), 1, "{text}");
    // Python writes a burst's rate as `Infinity`, which serde_json reads as too large a number.
    let record: Value = serde_json::from_str(&text.replace("Infinity", "1e999")).expect("record JSON");
    let block = parse_jsonl(&text, &file).expect("servesim reads the record").remove(0);
    ClientRun { stdout: stdout(&out), record, block }
}

fn counts(v: &Value, key: &str) -> Vec<u64> {
    v[key].as_array().unwrap_or_else(|| panic!("no {key} in {v}")).iter().map(|n| n.as_u64().unwrap()).collect()
}

/// Runs the client against a fresh server and checks every count: all requests completed, the
/// totals add up, the retokenized count is the server's, and the server counted what the client
/// did plus the client's warm-up request (the first prompt, at most 32 tokens).
fn check_exact(script: &Path, args: &[&str], num_prompts: u64) -> ClientRun {
    let tokenizer = tokenizer_without_specials();
    let (server, base) = spawn_serve(&["--random-weights", "tiny", "--threads", "1", "--max-num-seqs", "8", "--tokenizer", tokenizer.path().to_str().unwrap()]);
    let run = run_client(script, &base, tokenizer.path(), args);
    let m = http_get(&base, "/metrics");
    drop(server);
    let v = &run.record;
    let (input_lens, output_lens) = (counts(v, "input_lens"), counts(v, "output_lens"));
    assert_eq!(v["completed"], num_prompts, "{v}");
    assert_eq!(v["total_input_tokens"], input_lens.iter().sum::<u64>());
    assert_eq!(v["total_output_tokens"], output_lens.iter().sum::<u64>());
    assert_eq!(v["total_output_tokens_retokenized"], v["total_output_tokens"], "{v}");
    let warmup_output = output_lens[0].min(32);
    assert_eq!(metric(&m, "servesim_prompt_tokens_total"), Some((input_lens.iter().sum::<u64>() + input_lens[0]) as f64), "{v}");
    assert_eq!(metric(&m, "servesim_generation_tokens_total"), Some((output_lens.iter().sum::<u64>() + warmup_output) as f64), "{v}");
    // servesim's reader: SGLang's names as vLLM's, and the request count from the lists.
    let b = &run.block;
    assert_eq!((b.get("completed"), b.get("num_prompts"), b.get("failed")), (Some(num_prompts as f64), Some(num_prompts as f64), Some(0.0)));
    for (sglang, vllm) in [("mean_e2e_latency_ms", "mean_e2el_ms"), ("p99_e2e_latency_ms", "p99_e2el_ms"), ("mean_ttft_ms", "mean_ttft_ms"), ("concurrency", "concurrency")] {
        assert_eq!(b.get(vllm), v[sglang].as_f64(), "{vllm}");
    }
    // The printed block, read from the client's stdout among its other lines, says the same.
    let printed = parse_text(&run.stdout, Path::new("stdout")).expect("servesim reads the printed block");
    assert_eq!(printed.len(), 1, "{}", run.stdout);
    for key in ["mean_ttft_ms", "p99_ttft_ms", "mean_itl_ms", "p95_itl_ms", "mean_e2el_ms", "concurrency", "duration"] {
        let (shown, saved) = (printed[0].get(key).unwrap(), b.get(key).unwrap());
        assert!((shown - saved).abs() <= 0.005 + 1e-9 * saved, "{key}: printed {shown}, saved {saved}");
    }
    run
}

/// The native backend with token-id prompts (`--tokenize-prompt`): lengths exact, output
/// counted from `meta_info.completion_tokens`, ITL a sample a token.
#[test]
fn sglang_native_backend_counts_exactly() {
    let Some(script) = bench_serving() else { return };
    let args = [
        "--backend", "sglang", "--dataset-name", "random-ids", "--tokenize-prompt", "--random-input-len", "24",
        "--random-output-len", "6", "--random-range-ratio", "1.0", "--num-prompts", "8", "--max-concurrency", "4",
    ];
    let run = check_exact(&script, &args, 8);
    assert_eq!(counts(&run.record, "output_lens"), [6; 8]);
    assert!(run.record["itls"].as_array().unwrap().iter().all(|l| l.as_array().unwrap().len() == 5), "{}", run.record);
    assert_eq!(run.block.context_value("backend"), Some("sglang"));
    assert_eq!(run.block.get("max_concurrency"), Some(4.0));
}

/// The OpenAI backend with text prompts (`random-ids` decoded, as vLLM's random dataset makes
/// them): the server counts the text as the client did.
#[test]
fn sglang_oai_backend_counts_exactly() {
    let Some(script) = bench_serving() else { return };
    let args = [
        "--backend", "sglang-oai", "--dataset-name", "random-ids", "--random-input-len", "32", "--random-output-len", "5",
        "--random-range-ratio", "0.5", "--num-prompts", "6", "--request-rate", "20",
    ];
    let run = check_exact(&script, &args, 6);
    assert!(counts(&run.record, "input_lens").iter().all(|&n| (16..=32).contains(&n)), "{}", run.record);
    assert_eq!(run.block.get("request_rate"), Some(20.0));
}
