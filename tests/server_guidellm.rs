//! guidellm, a load generator whose default request type is chat, against `servesim serve` on
//! the built-in `tiny` model: every request completes, and the token counts it reports (taken from
//! the server's streamed usage, which it asks for in every chunk with vLLM's
//! `continuous_usage_stats`) equal the server's own `/metrics` and what was asked.
//!
//! Needs a python3 that imports `guidellm` (`pip install guidellm`); without it the test prints
//! why and passes, unless `SERVESIM_REQUIRE_GUIDELLM=1` makes that a failure.

mod common;
use common::*;

use serde_json::{Map, Value, json};
use servesim::engine::server::{ChatTemplateState, Tokenizer};

#[test]
fn guidellms_chat_requests_complete_with_exact_counts() {
    if let Err(why) = python_modules(&["guidellm"]) {
        assert!(!required("SERVESIM_REQUIRE_GUIDELLM"), "SERVESIM_REQUIRE_GUIDELLM=1 but {why}");
        eprintln!("skipping the guidellm test: {why} (pip install guidellm)");
        return;
    }
    let (server, base) = spawn_serve(&["--random-weights", "tiny", "--threads", "1"]);
    let tokenizer_dir = repo().join("tokenizers/servesim-char-256");
    let out_dir = tempfile::tempdir().unwrap();
    let report = out_dir.path().join("report.json");
    let out = std::process::Command::new("python3")
        .args(["-m", "guidellm", "run", "--backend", &format!("kind=openai_http,target={base},model=random-tiny")])
        .args(["--profile", "kind=synchronous", "--constraint", "kind=max_requests,count=6"])
        .args(["--data", "kind=synthetic_text,prompt_tokens=24,output_tokens=7"])
        .args(["--tokenizer", &format!("kind=hf_auto,model={}", tokenizer_dir.display())])
        .args(["--output", &format!("kind=json,path={}", report.display()), "--disable-console-interactive"])
        .current_dir(out_dir.path())
        .env("HF_HUB_OFFLINE", "1")
        .env("TRANSFORMERS_OFFLINE", "1")
        .output()
        .expect("run python3 -m guidellm");
    let page = http_get(&base, "/metrics");
    drop(server);
    assert!(out.status.success(), "guidellm failed:\n{}\n{}", stdout(&out), stderr(&out));
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    let requests = &v["benchmarks"][0]["requests"];
    assert_eq!(requests["errored"].as_array().map(Vec::len), Some(0), "{requests}");
    let done = requests["successful"].as_array().unwrap();
    assert_eq!(done.len(), 6, "{requests}");
    // Its default request type is chat, and it asks for usage in every chunk.
    let body: Value = serde_json::from_str(done[0]["request_args"].as_str().unwrap()).unwrap();
    assert!(body["body"]["messages"].is_array() && body["body"]["stream_options"]["continuous_usage_stats"] == json!(true), "{body}");
    let t = Tokenizer::load(&tokenizer_dir).unwrap();
    let ChatTemplateState::Ready(template) = t.chat_template() else { panic!("{:?}", t.chat_template()) };
    let around = t.encode(&template.render(&[json!({"role": "user", "content": ""})], true, &Map::new()).unwrap(), false).unwrap().len() as u64;
    let (mut prompt, mut generated) = (0, 0);
    for r in done {
        let (input, output) = (r["input_metrics"]["text_tokens"].as_u64().unwrap(), r["output_metrics"]["text_tokens"].as_u64().unwrap());
        assert_eq!(output, 7, "{r}");
        assert_eq!(input, 24 + around, "the 24-token prompt inside the chat template: {r}");
        prompt += input;
        generated += output;
    }
    let served = |name: &str| metric(&page, &format!("{name}{{model_name=\"random-tiny\",engine=\"0\"}}")).unwrap_or_else(|| panic!("no {name}:\n{page}"));
    assert_eq!(served("vllm:generation_tokens_total"), generated as f64);
    assert_eq!(served("vllm:prompt_tokens_total"), prompt as f64);
}
