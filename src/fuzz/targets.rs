//! What is fuzzed: every parser of a user's or a server's bytes, each from its public entry
//! point, with seeds that are valid inputs (so mutants reach past the first check).

use std::io::Cursor;
use std::path::{Path, PathBuf};

use crate::bench::Backend;
use crate::bench::protocol::parse_chunk;
use crate::bench::sse::SseLines;
use crate::calibrate::backend::Peak;
use crate::calibrate::profile::{parse_csv, parse_provenance};
use crate::engine::model::{LlamaConfig, LlamaWeights, WeightDtype};
use crate::engine::server::{Api, ApiError, GenerateParams, ParsedRequest, PromptInput, Tokenizer, check_request_fits, parse_request, parse_sglang};
use crate::metrics::recorded::{parse_json, parse_jsonl, parse_text};
use crate::plan::file::Plan;
use crate::scenario::{ModelSpec, Scenario};
use crate::scenario::trace::read_trace_from;

/// One fuzz target: seeds, and a run that must return (any error is fine) without panicking.
pub struct Target {
    pub name: &'static str,
    /// Valid inputs to start from (given the scratch directory below).
    pub seeds: fn(&Path) -> Vec<Vec<u8>>,
    /// Runs the input through the parser: whether it accepted the input. `scratch` is a
    /// directory of this target's own for parsers that read files.
    pub run: fn(&[u8], &Path) -> bool,
}

/// Every target, in a fixed order.
pub fn all() -> Vec<Target> {
    vec![
        Target { name: "scenario", seeds: scenario_seeds, run: run_scenario },
        Target { name: "plan", seeds: plan_seeds, run: run_plan },
        Target { name: "trace", seeds: trace_seeds, run: run_trace },
        Target { name: "recorded-text", seeds: recorded_text_seeds, run: run_recorded_text },
        Target { name: "recorded-json", seeds: recorded_json_seeds, run: run_recorded_json },
        Target { name: "profile", seeds: profile_seeds, run: run_profile },
        Target { name: "hf-config", seeds: hf_config_seeds, run: run_hf_config },
        Target { name: "safetensors", seeds: safetensors_seeds, run: run_safetensors },
        Target { name: "tokenizer", seeds: tokenizer_seeds, run: run_tokenizer },
        Target { name: "sse", seeds: sse_seeds, run: run_sse },
        Target { name: "http-body", seeds: http_body_seeds, run: run_http_body },
        Target { name: "parquet", seeds: parquet_seeds, run: run_parquet },
        Target { name: "plan-merge", seeds: plan_merge_seeds, run: run_plan_merge },
        Target { name: "plan-resume", seeds: plan_resume_seeds, run: run_plan_resume },
    ]
}

fn text(input: &[u8]) -> std::borrow::Cow<'_, str> {
    String::from_utf8_lossy(input)
}

fn seeds(texts: &[&str]) -> Vec<Vec<u8>> {
    texts.iter().map(|t| t.as_bytes().to_vec()).collect()
}

fn scenario_seeds(_: &Path) -> Vec<Vec<u8>> {
    seeds(&[
        include_str!("../../scenarios/quickstart.toml"),
        include_str!("../../scenarios/mixtral-8x7b.toml"),
        include_str!("../../scenarios/prefix-caching.toml"),
        include_str!("../../scenarios/chat-sessions.toml"),
        include_str!("../../scenarios/multi-step.toml"),
        include_str!("../../scenarios/speculative.toml"),
        include_str!("../../scenarios/disaggregated.toml"),
        include_str!("../../tests/data/golden.toml"),
        "[model]\nnum_layers = 2\nhidden_size = 64\nnum_heads = 4\nnum_kv_heads = 2\nffn_size = 128\nvocab_size = 256\n\
         max_position_embeddings = 512\n[hardware]\ngpu = \"H100-SXM\"\n[engine]\npolicy = \"tgi\"\n[workload]\nnum_prompts = 5\n\
         request_rate = 1\n[workload.dataset]\nkind = \"random\"\ninput_len = 10\noutput_len = 5\nrange_ratio = 0.5\n",
    ])
}

/// Resolution, then the first requests of the workload (lengths and arrivals are sampled from
/// the scenario's distributions, which is where extreme parameters used to panic).
fn run_scenario(input: &[u8], _: &Path) -> bool {
    let Ok(scenario) = Scenario::from_toml_str(&text(input), Path::new("fuzz.toml"), &[]) else { return false };
    let _ = crate::workload::generate(&scenario.workload, 20);
    true
}

fn plan_seeds(_: &Path) -> Vec<Vec<u8>> {
    seeds(&[include_str!("../../plans/llama70b-chat.toml"), include_str!("../../plans/disaggregated-8b.toml")])
}

fn run_plan(input: &[u8], _: &Path) -> bool {
    Plan::from_toml_str(&text(input), Path::new("fuzz-plan.toml")).is_ok()
}

fn trace_seeds(_: &Path) -> Vec<Vec<u8>> {
    seeds(&["arrival_s,input_tokens,output_tokens\n0.0,100,20\n0.5,2000,1\n0.5,7,300\n12.25,64,64\n"])
}

fn run_trace(input: &[u8], _: &Path) -> bool {
    read_trace_from(Cursor::new(input), Path::new("fuzz.csv")).is_ok()
}

fn recorded_text_seeds(_: &Path) -> Vec<Vec<u8>> {
    seeds(&[
        include_str!("../../tests/data/recorded/run-000-prefill-decode.txt"),
        include_str!("../../tests/data/golden.txt"),
    ])
}

fn run_recorded_text(input: &[u8], _: &Path) -> bool {
    parse_text(&text(input), Path::new("fuzz.txt")).is_ok()
}

fn recorded_json_seeds(_: &Path) -> Vec<Vec<u8>> {
    seeds(&[
        include_str!("../../tests/data/fit/vllm-sweep/vllm-4.0qps-Llama-3.1-8B-Instruct-20250114-101612.json"),
        include_str!("../../tests/data/fit/servesim-bench/bench-openai-4.json"),
        include_str!("../../tests/data/sglang/bench_serving-0.4.9.jsonl"),
    ])
}

/// The input as one JSON document and as JSON Lines (SGLang's `--output-file`).
fn run_recorded_json(input: &[u8], _: &Path) -> bool {
    let text = text(input);
    let json = parse_json(&text, Path::new("fuzz.json")).is_ok();
    parse_jsonl(&text, Path::new("fuzz.jsonl")).is_ok() || json
}

fn profile_seeds(_: &Path) -> Vec<Vec<u8>> {
    // The CSV's first rows (the whole file makes each run slow), and its provenance.
    let csv: String = include_str!("../../tests/data/cpu-profile/tiny.csv").lines().take(40).map(|l| format!("{l}\n")).collect();
    vec![csv.into_bytes(), include_bytes!("../../tests/data/cpu-profile/tiny.provenance.toml").to_vec()]
}

fn run_profile(input: &[u8], _: &Path) -> bool {
    let text = text(input);
    // Either half of a profile: the CSV, or the provenance sidecar.
    let provenance = parse_provenance(&text, Path::new("fuzz.provenance.toml")).is_ok();
    let csv = parse_csv(&text, Path::new("fuzz.csv"), &Peak { flops_per_s: 1e12, memory_bytes_per_s: 1e11 }).is_ok();
    provenance || csv
}

fn hf_config_seeds(_: &Path) -> Vec<Vec<u8>> {
    seeds(&[
        r#"{"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2,
            "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 256,
            "max_position_embeddings": 1024, "rope_theta": 10000.0, "rms_norm_eps": 1e-5, "tie_word_embeddings": false,
            "torch_dtype": "bfloat16"}"#,
        r#"{"model_type": "mixtral", "hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
            "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 32000, "max_position_embeddings": 32768,
            "num_local_experts": 8, "num_experts_per_tok": 2, "quantization_config": {"quant_method": "fp8"}}"#,
    ])
}

fn run_hf_config(input: &[u8], _: &Path) -> bool {
    let text = text(input);
    let spec = ModelSpec::from_hf_config_json(&text, Path::new("config.json"), "fuzz").is_ok();
    let engine = LlamaConfig::from_json(&text).is_ok();
    spec || engine
}

fn safetensors_seeds(scratch: &Path) -> Vec<Vec<u8>> {
    let path = scratch.join("seed.safetensors");
    LlamaWeights::random(&LlamaConfig::tiny(), 0).save_safetensors(&path, WeightDtype::F32).expect("the tiny model saves");
    vec![std::fs::read(&path).expect("the tiny model reads back")]
}

fn run_safetensors(input: &[u8], scratch: &Path) -> bool {
    let path: PathBuf = scratch.join("model.safetensors");
    std::fs::write(&path, input).is_ok() && LlamaWeights::from_safetensors(&LlamaConfig::tiny(), &[path]).is_ok()
}

fn tokenizer_seeds(_: &Path) -> Vec<Vec<u8>> {
    seeds(&[include_str!("../../tokenizers/servesim-char-256/tokenizer.json")])
}

fn run_tokenizer(input: &[u8], _: &Path) -> bool {
    let Ok(tokenizer) = Tokenizer::from_json(&text(input), "fuzz") else { return false };
    match tokenizer.encode("Hello, world: 42 é ∑", true) {
        Ok(ids) => tokenizer.decode(&ids).is_ok(),
        Err(_) => false,
    }
}

fn sse_seeds(_: &Path) -> Vec<Vec<u8>> {
    seeds(&[
        "data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"text\":\"He\",\"finish_reason\":null}]}\n\n\
         data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"text\":\"llo\",\"finish_reason\":\"length\"}],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":2}}\n\n\
         data: [DONE]\n\n",
        "data:{\"token\":{\"id\":5,\"text\":\"a\",\"logprob\":-0.1,\"special\":false},\"generated_text\":null,\"details\":null}\n\n\
         data:{\"token\":{\"id\":6,\"text\":\"b\",\"logprob\":-0.2,\"special\":false},\"generated_text\":\"ab\",\"details\":{\"finish_reason\":\"length\",\"generated_tokens\":2}}\n\n",
        ": keep-alive\n\ndata: {\"error\": \"overloaded\"}\n\n",
    ])
}

fn run_sse(input: &[u8], _: &Path) -> bool {
    let mut accepted = false;
    // Split where the network might: after every 7th byte, then all at once.
    for chunk_bytes in [7, input.len().max(1)] {
        let mut lines = SseLines::new();
        let mut payloads = Vec::new();
        for chunk in input.chunks(chunk_bytes) {
            if lines.feed(chunk, &mut payloads).is_err() {
                break;
            }
        }
        if let Ok(Some(last)) = lines.finish() {
            payloads.push(last);
        }
        for payload in &payloads {
            for backend in [Backend::OpenAi, Backend::Tgi, Backend::Sglang, Backend::SglangOai] {
                accepted |= parse_chunk(backend, payload).error.is_none();
            }
        }
    }
    accepted
}

/// The server the `http-body` target pretends to be. The byte limit is small so that mutants
/// cross it; the context is twice as long, so that a prompt at the limit fits.
const HTTP_MODEL: &str = "tiny";
const HTTP_PROMPT_BYTES_MAX: usize = 512;
const HTTP_CONTEXT_LEN: u32 = 1024;
/// The byte-level tokenizer's (the server's default).
const HTTP_VOCAB_SIZE: u32 = 256;

fn http_body_seeds(_: &Path) -> Vec<Vec<u8>> {
    let at_limit = "a".repeat(HTTP_PROMPT_BYTES_MAX);
    let mut bodies = seeds(&[
        // OpenAI /v1/completions: text, ids, a list of one of each, every field.
        r#"{"model": "tiny", "prompt": "Hello, my name is", "max_tokens": 16, "temperature": 0, "stream": false}"#,
        r#"{"model": "servesim", "prompt": [1, 2, 3, 4], "max_tokens": 4, "stream": true, "stream_options": {"include_usage": true},
            "ignore_eos": true, "temperature": 0.8, "top_p": 0.9, "top_k": -1, "seed": 42, "n": 1, "best_of": 1}"#,
        r#"{"prompt": ["one text \u00e9 \ud83d\ude00"], "max_tokens": 1}"#,
        r#"{"prompt": [[5, 6, 7]], "max_tokens": 200, "top_k": 50}"#,
        // TGI /generate and /generate_stream.
        r#"{"inputs": "What is Deep Learning?", "parameters": {"max_new_tokens": 20, "details": true, "temperature": 0.7,
            "top_p": 0.95, "top_k": 50, "seed": 1, "ignore_eos": false, "best_of": 1}}"#,
        r#"{"inputs": "x", "parameters": null}"#,
        // SGLang /generate, as its bench client sends it, and with text.
        r#"{"input_ids": [5, 6, 7], "sampling_params": {"temperature": 0.0, "max_new_tokens": 4, "ignore_eos": true},
            "stream": true, "lora_path": null, "return_logprob": false, "logprob_start_len": -1}"#,
        r#"{"text": "Once upon a time", "rid": "r", "sampling_params": {"top_k": -1, "stop": ["."], "no_stop_trim": true}}"#,
        // Edge cases: refused, each for one reason.
        r#"{"model": "tiny", "messages": [{"role": "user", "content": "a chat body"}], "max_tokens": 8}"#,
        r#"{"prompt": [], "max_tokens": 0}"#,
        r#"{"prompt": [256], "max_tokens": 4294967295}"#,
        r#"{"prompt": ["a", "b"], "n": 2, "best_of": 0}"#,
        r#"{"model": "other", "prompt": "a", "temperature": -1, "top_p": 0}"#,
        r#"{"inputs": "", "parameters": {"max_new_tokens": 0, "top_k": -2, "best_of": 2}}"#,
    ]);
    bodies.push(format!(r#"{{"inputs": "{at_limit}", "parameters": {{"max_new_tokens": 1}}}}"#).into_bytes());
    bodies.push(format!(r#"{{"prompt": "{at_limit}b", "max_tokens": 1}}"#).into_bytes());
    bodies
}

/// The body as each API: parsed and checked as the server does before queueing it (the
/// tokenizer included), with what a refusal and an acceptance must satisfy asserted.
fn run_http_body(input: &[u8], _: &Path) -> bool {
    let mut accepted = false;
    for api in [Api::Completions, Api::Generate] {
        accepted |= http_body_accepted(parse_request(api, input, HTTP_MODEL, HTTP_PROMPT_BYTES_MAX));
    }
    accepted |= http_body_accepted(parse_sglang(input, HTTP_PROMPT_BYTES_MAX).map(|p| p.request));
    accepted
}

fn http_body_accepted(parsed: Result<ParsedRequest, ApiError>) -> bool {
    let request = match parsed {
        Ok(request) => request,
        Err(e) => return assert_refusal(&e),
    };
    let sampling = request.sampling;
    assert!(sampling.temperature.is_finite() && sampling.temperature >= 0.0, "accepted temperature {}", sampling.temperature);
    assert!(sampling.top_p > 0.0 && sampling.top_p <= 1.0, "accepted top_p {}", sampling.top_p);
    let prompt = match request.prompt {
        PromptInput::Text(text) => {
            assert!(text.len() <= HTTP_PROMPT_BYTES_MAX, "accepted a prompt of {} bytes", text.len());
            match http_tokenizer().encode(&text, true) {
                Ok(ids) => ids,
                Err(message) => return assert_refusal(&ApiError::new(axum::http::StatusCode::BAD_REQUEST, message)),
            }
        }
        PromptInput::Tokens(ids) => ids,
    };
    let params = GenerateParams { prompt, max_tokens: request.max_tokens, ignore_eos: request.ignore_eos, sampling };
    if let Err(e) = check_request_fits(&params, HTTP_VOCAB_SIZE, HTTP_CONTEXT_LEN) {
        return assert_refusal(&e.into());
    }
    let tokens = params.prompt.len() as u64 + params.max_tokens as u64;
    assert!(!params.prompt.is_empty() && params.max_tokens >= 1, "accepted {} prompt tokens, max_tokens {}", params.prompt.len(), params.max_tokens);
    assert!(tokens <= HTTP_CONTEXT_LEN as u64, "accepted {tokens} tokens in a context of {HTTP_CONTEXT_LEN}");
    true
}

/// A refusal is a client error with a message, and its JSON body carries both. Returns false
/// (not accepted).
fn assert_refusal(e: &ApiError) -> bool {
    assert!(matches!(e.status.as_u16(), 400 | 404 | 413 | 422), "refused with status {}: {}", e.status, e.message);
    assert!(!e.message.trim().is_empty(), "refused with status {} and no message", e.status);
    let body: serde_json::Value = serde_json::from_str(&e.body()).expect("an error body is JSON");
    assert_eq!(body["error"]["message"].as_str(), Some(e.message.as_str()), "error body {body}");
    assert_eq!(body["error"]["code"].as_u64(), Some(e.status.as_u16() as u64), "error body {body}");
    false
}

/// The server's default tokenizer, built once: building it costs more than a parse.
fn http_tokenizer() -> &'static Tokenizer {
    static TOKENIZER: std::sync::OnceLock<Tokenizer> = std::sync::OnceLock::new();
    TOKENIZER.get_or_init(Tokenizer::bytes)
}

fn parquet_seeds(_: &Path) -> Vec<Vec<u8>> {
    vec![include_bytes!("../../tests/data/public/aiconfigurator/h100_sxm/comm/vllm/0.24.0/custom_allreduce_perf.parquet").to_vec()]
}

/// `calibrate import`'s parquet reader: the `parquet` crate panics on some corrupt files, and
/// the reader must turn each panic into an error naming the file.
fn run_parquet(input: &[u8], scratch: &Path) -> bool {
    let path = scratch.join("table.parquet");
    std::fs::write(&path, input).is_ok() && crate::calibrate::import::table::Table::read_parquet(&path).is_ok()
}

/// A plan of one candidate that evaluates in well under a second, for the shard file and the
/// progress log that `plan merge` and `plan --resume` read back.
const FUZZ_PLAN: &str = "name = \"fuzz\"\n[model]\npreset = \"Llama-3.2-1B\"\n[workload]\nseed = 1\n[workload.dataset]\n\
    kind = \"fixed\"\ninput_len = 64\noutput_len = 4\n[target]\nrate = 50.0\n[slo]\nttft_mean_ms = 50\n[search]\n\
    tensor_parallel = [1]\nmax_num_seqs = [8]\n[[search.gpu]]\nname = \"H100-SXM\"\nprice_per_gpu_hour = 3.0\n";

/// The plan, its candidates and their evaluations (probes of 200 requests).
fn fuzz_plan_evaluated() -> (Plan, Vec<crate::plan::candidate::Candidate>, Vec<crate::plan::evaluate::Evaluation>) {
    let plan = Plan::from_toml_str(FUZZ_PLAN, Path::new("fuzz-plan.toml")).expect("the fuzz plan loads");
    let candidates = plan.space.candidates();
    let options = crate::plan::search::SearchOptions { min_requests: 200, ..Default::default() };
    let evaluations = crate::plan::evaluate::evaluate(&plan, &candidates, &options).expect("the fuzz plan evaluates");
    (plan, candidates, evaluations)
}

fn plan_merge_seeds(_: &Path) -> Vec<Vec<u8>> {
    let (plan, candidates, evaluations) = fuzz_plan_evaluated();
    let shard = crate::plan::shard::Shard::parse("1/1").expect("1/1 is a shard");
    vec![crate::plan::shard::shard_json(FUZZ_PLAN, &plan, shard, candidates.len(), &evaluations).into_bytes()]
}

fn run_plan_merge(input: &[u8], scratch: &Path) -> bool {
    let dir = scratch.join("shard");
    std::fs::create_dir_all(&dir).is_ok()
        && std::fs::write(dir.join(crate::plan::shard::FILE), input).is_ok()
        && crate::plan::shard::merge(&[dir]).is_ok()
}

fn plan_resume_seeds(_: &Path) -> Vec<Vec<u8>> {
    let (_, _, evaluations) = fuzz_plan_evaluated();
    let mut log = crate::plan::shard::progress_header(FUZZ_PLAN);
    evaluations.iter().for_each(|e| log.push_str(&crate::plan::shard::progress_line(e)));
    vec![log.into_bytes()]
}

fn run_plan_resume(input: &[u8], scratch: &Path) -> bool {
    let Ok(plan) = Plan::from_toml_str(FUZZ_PLAN, Path::new("fuzz-plan.toml")) else { return false };
    let path = scratch.join(crate::plan::shard::PROGRESS_FILE);
    std::fs::write(&path, input).is_ok() && crate::plan::shard::read_progress(&path, FUZZ_PLAN, &plan, &plan.space.candidates()).is_ok()
}
