//! SGLang's own client, `bench_serving.py` from the SGLang 0.4.9 wheel (it runs without SGLang
//! installed), against `servesim serve` with the shipped tokenizer directory (the copy whose
//! added tokens are not special, as for vLLM's client): its native `/generate` backend and its
//! OpenAI one, every count agreeing with the server's; its printed block and `--output-file`
//! record read back by servesim's reader, and written again byte for byte by servesim's writer
//! from the same numbers.
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
    /// The record's line, as the client wrote it.
    line: String,
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
    // Python writes a burst's rate as `Infinity`, which is not JSON.
    let record: Value = serde_json::from_str(&text.replace("Infinity", "\"inf\"")).expect("record JSON");
    let block = parse_jsonl(&text, &file).expect("servesim reads the record").remove(0);
    ClientRun { stdout: stdout(&out), line: text.trim_end().to_string(), record, block }
}

/// `"concurrency": <its digits>` in `text` replaced by a mark: SGLang sums the E2E latencies
/// (numpy), servesim multiplies their mean back, which may differ in the last bit.
fn without_concurrency(text: &str) -> String {
    let Some(at) = text.find("\"concurrency\": ") else { return text.to_string() };
    let end = text[at..].find(',').map_or(text.len(), |i| at + i);
    format!("{}\"concurrency\": …{}", &text[..at], &text[end..])
}

/// servesim's writer, given the numbers the client saved (and the maximum ITL it printed, which
/// its record lacks), writes the client's record and block byte for byte.
fn check_same_layout(run: &ClientRun, printed: &RecordedBlock) {
    use servesim::metrics::sglang::{self, SglangReport};
    use servesim::metrics::{Stat, Summary};
    let v = &run.record;
    let f = |key: &str| v[key].as_f64().unwrap_or_else(|| panic!("no {key} in {v}"));
    let stat = |prefix: &str, suffix: &str, percentiles: &[(f64, f64)]| Stat {
        mean_ms: f(&format!("mean_{prefix}{suffix}")),
        median_ms: f(&format!("median_{prefix}{suffix}")),
        std_ms: f(&format!("std_{prefix}{suffix}")),
        percentiles_ms: percentiles.to_vec(),
    };
    let (input, output, duration) = (f("total_input_tokens"), f("total_output_tokens"), f("duration"));
    let summary = Summary {
        completed: f("completed") as u64,
        duration_s: duration,
        total_input_tokens: input as u64,
        total_output_tokens: output as u64,
        request_throughput: f("request_throughput"),
        output_throughput: f("output_throughput"),
        total_token_throughput: (input + output) / duration,
        ttft: stat("ttft", "_ms", &[(99.0, f("p99_ttft_ms"))]),
        tpot: stat("tpot", "_ms", &[(99.0, f("p99_tpot_ms"))]),
        itl: stat("itl", "_ms", &[(95.0, f("p95_itl_ms")), (99.0, f("p99_itl_ms")), (100.0, printed.get("p100_itl_ms").unwrap())]),
        e2el: stat("e2e", "_latency_ms", &[(99.0, f("p99_e2e_latency_ms"))]),
        ..Summary::default()
    };
    let text = |key: &str| v[key].as_str().unwrap().to_string();
    let count = |key: &str| v[key].as_u64().map(|n| n as u32);
    let report = SglangReport {
        backend: text("backend"),
        dataset_name: text("dataset_name"),
        request_rate: v["request_rate"].as_f64().unwrap_or(f64::INFINITY),
        max_concurrency: count("max_concurrency"),
        sharegpt_output_len: count("sharegpt_output_len"),
        random_input_len: count("random_input_len").unwrap(),
        random_output_len: count("random_output_len").unwrap(),
        random_range_ratio: f("random_range_ratio"),
        accept_length: v["accept_length"].as_f64(),
        output_tokens_retokenized: v["total_output_tokens_retokenized"].as_u64(),
    };
    // The client's line holds its `--output-details` lists after the record's own keys.
    let ours = sglang::record(&summary, &report);
    let theirs = run.line.split(", \"input_lens\": ").next().unwrap().to_string() + "}";
    assert_eq!(without_concurrency(&ours), without_concurrency(&theirs));
    let block = sglang::render_block(&summary, &report);
    assert!(run.stdout.contains(&block), "servesim's block:\n{block}\nthe client's output:\n{}", run.stdout);
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
    check_same_layout(&run, &printed[0]);
    run
}

/// A ShareGPT-shaped file of `n` two-turn conversations, for SGLang's `random` dataset, which
/// takes its prompts' tokens from one (repeated or cut to each request's length).
fn sharegpt_file(dir: &Path, n: usize) -> PathBuf {
    let conversations: Vec<Value> = (0..n)
        .map(|i| {
            serde_json::json!({"conversations": [
                {"from": "human", "value": format!("Question {i}: what is the weather like on the coast in spring?")},
                {"from": "gpt", "value": "Mild and windy."},
            ]})
        })
        .collect();
    write_file(dir, "sharegpt.json", &Value::from(conversations).to_string())
}

/// The native backend with token-id prompts (`--tokenize-prompt`): lengths exact, output
/// counted from `meta_info.completion_tokens`, ITL a sample a token. (SGLang 0.4.9's
/// `random-ids` dataset cannot be sent as token ids: its ids are numpy integers, which its
/// client's JSON encoder refuses; its `random` dataset's are Python's.)
#[test]
fn sglang_native_backend_counts_exactly() {
    let Some(script) = bench_serving() else { return };
    let dir = tempfile::tempdir().unwrap();
    let data = sharegpt_file(dir.path(), 8);
    let args = [
        "--backend", "sglang", "--dataset-name", "random", "--dataset-path", data.to_str().unwrap(), "--tokenize-prompt",
        "--random-input-len", "24", "--random-output-len", "6", "--random-range-ratio", "1.0", "--num-prompts", "8",
        "--max-concurrency", "4",
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
