//! What the server test files share: a deterministic fake executor, an in-process server
//! on 127.0.0.1 with a chosen tokenizer, and small HTTP helpers. A test file that includes it
//! also includes `common`.
#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use servesim::engine::server::{EngineHandle, Executor, StepInputs, Tokenizer, serve};
use servesim::scenario::Policy;
use servesim::sched::{Batch, SchedulerConfig};

/// Next token = f(last token, its position), always a printable character of the shipped
/// tokenizers and of the byte-level one (ids 32..=126).
pub fn echo_next(last: u32, pos: u32) -> u32 {
    32 + (last.wrapping_mul(31).wrapping_add(pos.wrapping_mul(7)).wrapping_add(11)) % 95
}

/// The `n` tokens the fake executor generates after `prompt`.
pub fn expected(prompt: &[u32], n: usize) -> Vec<u32> {
    let mut seq = prompt.to_vec();
    for _ in 0..n {
        let t = echo_next(*seq.last().unwrap(), seq.len() as u32 - 1);
        seq.push(t);
    }
    seq[prompt.len()..].to_vec()
}

/// A fake forward pass: [`echo_next`] for each sampled row, `step` a step, no log-probabilities.
pub struct Echo {
    pub eos: Option<u32>,
    pub step: Duration,
}

impl Executor for Echo {
    fn forward(&mut self, batch: &Batch, inputs: &StepInputs) -> Result<Vec<u32>, String> {
        std::thread::sleep(self.step);
        let sampled = batch.seqs.iter().zip(&inputs.seqs).filter(|(w, _)| w.samples_token);
        Ok(sampled.map(|(_, i)| echo_next(*i.token_ids.last().unwrap(), *i.positions.last().unwrap())).collect())
    }
    fn vocab_size(&self) -> u32 {
        32_000
    }
    fn eos_token(&self) -> Option<u32> {
        self.eos
    }
}

/// The scheduler the servers here run: 8 sequences, 128 blocks of 16 tokens.
pub fn config() -> SchedulerConfig {
    crate::common::sim::scheduler(256, 8, 128)
}

pub struct Server {
    pub base: String,
    pub engine: EngineHandle,
    _shutdown: tokio::sync::oneshot::Sender<()>,
}

/// Serves `engine` on a free port until the [`Server`] is dropped.
pub async fn serve_engine(engine: EngineHandle) -> Server {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let handle = engine.clone();
    tokio::spawn(async move {
        serve(listener, handle, async move {
            let _ = rx.await;
        })
        .await
        .unwrap();
    });
    Server { base, engine, _shutdown: tx }
}

/// The fake executor named "echo", with `tokenizer` (none: the byte-level default, which has no
/// chat template).
pub async fn start_echo(eos: Option<u32>, context_len: u32, tokenizer: Option<Tokenizer>) -> Server {
    let mut engine = EngineHandle::start(Echo { eos, step: Duration::from_millis(1) }, config(), Policy::VllmV1, 64, context_len).with_model_name("echo");
    if let Some(t) = tokenizer {
        engine = engine.with_tokenizer(Arc::new(t));
    }
    serve_engine(engine).await
}

/// The shipped 32,000-id tokenizer, with its chat template.
pub fn shipped() -> Tokenizer {
    Tokenizer::shipped(32_000).unwrap()
}

pub async fn post(base: &str, path: &str, body: &Value) -> (u16, String) {
    let resp = reqwest::Client::new().post(format!("{base}{path}")).json(body).send().await.unwrap();
    (resp.status().as_u16(), resp.text().await.unwrap())
}

/// POSTs `body` and returns the 200 response's JSON.
pub async fn post_ok(base: &str, path: &str, body: &Value) -> Value {
    let (status, text) = post(base, path, body).await;
    assert_eq!(status, 200, "{path} {body}: {text}");
    serde_json::from_str(&text).unwrap()
}

/// The `data: ` payloads of an OpenAI SSE body, `[DONE]` included.
pub fn sse_data(body: &str) -> Vec<String> {
    let lines: Vec<&str> = body.split('\n').filter(|l| !l.is_empty()).collect();
    assert!(lines.iter().all(|l| l.starts_with("data: ")), "{body}");
    lines.iter().map(|l| l["data: ".len()..].to_string()).collect()
}

/// The JSON chunks of a streamed OpenAI response (it must end with `[DONE]`).
pub async fn stream_chunks(base: &str, path: &str, body: &Value) -> Vec<Value> {
    let (status, text) = post(base, path, body).await;
    assert_eq!(status, 200, "{text}");
    let data = sse_data(&text);
    assert_eq!(data.last().map(String::as_str), Some("[DONE]"), "{text}");
    data[..data.len() - 1].iter().map(|d| serde_json::from_str(d).unwrap()).collect()
}

/// The events of a TGI stream (`data:{json}` lines).
pub async fn tgi_events(base: &str, body: &Value) -> Vec<Value> {
    let (status, text) = post(base, "/generate_stream", body).await;
    assert_eq!(status, 200, "{text}");
    text.split('\n').filter(|l| !l.is_empty()).map(|l| serde_json::from_str(l.strip_prefix("data:").expect("data:")).unwrap()).collect()
}

/// The error message of a refused request, after checking its status.
pub async fn refusal(base: &str, path: &str, body: &Value) -> String {
    let (status, text) = post(base, path, body).await;
    assert_eq!(status, 400, "{path} {body}: {text}");
    let v: Value = serde_json::from_str(&text).unwrap();
    v["error"]["message"].as_str().unwrap().to_string()
}

/// Runs a test body with a time limit so a hang fails instead of blocking CI.
pub async fn bounded<F: std::future::Future<Output = ()>>(f: F) {
    tokio::time::timeout(Duration::from_secs(180), f).await.expect("test timed out");
}

/// Waits (at most 60 s) until `done` holds.
pub async fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while !done() {
        assert!(tokio::time::Instant::now() < deadline, "{what}: not after 60 s");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
