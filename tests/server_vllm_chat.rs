//! vLLM's own client in chat mode: `benchmark_serving.py --backend openai-chat` from the vLLM
//! 0.6.3.post1 source distribution against `servesim serve`'s `/v1/chat/completions`, with the
//! shipped tokenizer directory. Every request must complete, and the server's vLLM-named counts
//! must equal the client's: generated tokens as the client re-encodes them, prompt tokens as the
//! client's prompts rendered by the chat template.
//!
//! Needs what `tests/vllm_client.rs` needs (`SERVESIM_VLLM_BENCHMARKS` and a python3 with the
//! client's packages, which `.ci/run` provides); without them it prints why and passes, unless
//! `SERVESIM_REQUIRE_VLLM_CLIENT=1` makes that a failure.

mod common;
use common::*;

use std::path::PathBuf;
use std::process::Command;

use serde_json::{Map, Value, json};
use servesim::engine::server::{ChatTemplateState, Tokenizer};

fn vllm_benchmarks() -> Option<PathBuf> {
    let skip = |why: String| {
        assert!(!required("SERVESIM_REQUIRE_VLLM_CLIENT"), "SERVESIM_REQUIRE_VLLM_CLIENT=1 but {why}");
        eprintln!("skipping vLLM's chat client test: {why}");
        None
    };
    let Some(dir) = std::env::var_os("SERVESIM_VLLM_BENCHMARKS").map(PathBuf::from) else {
        return skip("SERVESIM_VLLM_BENCHMARKS is not set (see .ci/run)".into());
    };
    if !dir.join("benchmark_serving.py").is_file() {
        return skip(format!("{} is missing", dir.join("benchmark_serving.py").display()));
    }
    match python_modules(&["aiohttp", "numpy", "tqdm", "transformers", "datasets", "PIL", "jinja2"]) {
        Ok(_) => Some(dir),
        Err(why) => skip(format!("{why}, one of the client's packages")),
    }
}

fn counts(v: &Value, key: &str) -> Vec<u64> {
    v[key].as_array().unwrap_or_else(|| panic!("no {key} in {v}")).iter().map(|n| n.as_u64().unwrap()).collect()
}

#[test]
fn vllm_openai_chat_backend_completes_every_request_with_exact_counts() {
    let Some(dir) = vllm_benchmarks() else { return };
    // The shipped tokenizer with plain added tokens, so that the text the client re-encodes holds
    // a `<s>` the random model samples (`tokenizer_without_specials`).
    let tokenizer = tokenizer_without_specials();
    let tokenizer_dir = tokenizer.path().to_path_buf();
    let (server, base) = spawn_serve(&["--random-weights", "tiny", "--threads", "1", "--max-num-seqs", "8", "--tokenizer", tokenizer_dir.to_str().unwrap()]);
    let results = tempfile::tempdir().unwrap();
    let out = Command::new("python3")
        .current_dir(&dir)
        .arg("benchmark_serving.py")
        .args(["--backend", "openai-chat", "--endpoint", "/v1/chat/completions", "--base-url", &base, "--model", "random-tiny"])
        .args(["--tokenizer", tokenizer_dir.to_str().unwrap(), "--seed", "5", "--dataset-name", "random"])
        .args(["--random-input-len", "24", "--random-output-len", "6", "--random-range-ratio", "0.5", "--num-prompts", "8", "--ignore-eos"])
        .args(["--save-result", "--result-dir", results.path().to_str().unwrap(), "--result-filename", "result.json"])
        .env("HF_HUB_OFFLINE", "1")
        .env("TRANSFORMERS_OFFLINE", "1")
        .env("HF_DATASETS_OFFLINE", "1")
        .output()
        .expect("run python3");
    assert!(out.status.success(), "benchmark_serving.py failed:\n{}\n{}", stdout(&out), stderr(&out));
    let v: Value = serde_json::from_str(&std::fs::read_to_string(results.path().join("result.json")).unwrap()).unwrap();
    let page = http_get(&base, "/metrics");
    drop(server);
    assert_eq!(v["completed"], 8, "{v}");
    let input_lens = counts(&v, "input_lens");
    let output_lens = counts(&v, "output_lens");
    assert!(output_lens.iter().all(|&n| (3..=6).contains(&n)), "with --ignore-eos each request runs to its max_tokens: {v}");
    // vLLM's initial test request repeats the first prompt; it is not in the results.
    let served = |name: &str| metric(&page, &format!("{name}{{model_name=\"random-tiny\",engine=\"0\"}}")).unwrap_or_else(|| panic!("no {name}:\n{page}"));
    let generated: u64 = output_lens.iter().sum::<u64>() + output_lens[0];
    assert_eq!(served("vllm:generation_tokens_total"), generated as f64, "server and client disagree on output tokens: {v}");
    // The client counts its prompts bare; the server counts them inside the chat template.
    let t = Tokenizer::load(&tokenizer_dir).unwrap();
    let ChatTemplateState::Ready(template) = t.chat_template() else { panic!("{:?}", t.chat_template()) };
    let around = t.encode(&template.render(&[json!({"role": "user", "content": ""})], true, &Map::new()).unwrap(), false).unwrap().len() as u64;
    let prompts: u64 = input_lens.iter().map(|n| n + around).sum::<u64>() + input_lens[0] + around;
    assert_eq!(served("vllm:prompt_tokens_total"), prompts as f64, "server and client disagree on prompt tokens: {v}");
}
