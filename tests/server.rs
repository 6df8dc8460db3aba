//! The engine's HTTP server end to end over 127.0.0.1, with a deterministic fake executor:
//! OpenAI and TGI wire formats, exact usage counts, cancellation, overload, bad input, and
//! batch invariance.

use std::time::Duration;

use futures_util::StreamExt;
use serde_json::{Value, json};
use servesim::engine::model::SamplingParams;
use servesim::engine::server::{EngineHandle, Event, Executor, FinishReason, GenerateParams, StepInputs, serve};
use servesim::scenario::Policy;
use servesim::sched::{Batch, SchedulerConfig};

mod common;
mod server_support;
use server_support::{Server, echo_next, expected, serve_engine};

/// A deterministic fake forward pass that sleeps `step_delay` per step.
struct EchoExecutor {
    step_delay: Duration,
    eos: Option<u32>,
}

impl Executor for EchoExecutor {
    fn forward(&mut self, batch: &Batch, inputs: &StepInputs) -> Result<Vec<u32>, String> {
        std::thread::sleep(self.step_delay);
        assert_eq!(batch.seqs.len(), inputs.seqs.len());
        let mut out = Vec::new();
        for (work, input) in batch.seqs.iter().zip(&inputs.seqs) {
            assert_eq!(input.token_ids.len(), work.new_tokens as usize);
            assert_eq!(input.positions.first().copied(), Some(work.context_tokens));
            assert!(input.block_table.len() as u32 * 16 >= work.context_tokens + work.new_tokens);
            if work.samples_token {
                out.push(echo_next(*input.token_ids.last().unwrap(), *input.positions.last().unwrap()));
            }
        }
        Ok(out)
    }
    fn vocab_size(&self) -> u32 {
        32_000
    }
    fn eos_token(&self) -> Option<u32> {
        self.eos
    }
}


fn config(max_num_seqs: u32, num_gpu_blocks: u32) -> SchedulerConfig {
    common::sim::scheduler(256, max_num_seqs, num_gpu_blocks)
}

async fn start(step_delay_ms: u64, eos: Option<u32>, max_num_seqs: u32, max_waiting: u32, context_len: u32) -> Server {
    let exec = EchoExecutor { step_delay: Duration::from_millis(step_delay_ms), eos };
    start_with(exec, config(max_num_seqs, 128), max_waiting, context_len).await
}

async fn start_with<E: Executor>(exec: E, config: SchedulerConfig, max_waiting: u32, context_len: u32) -> Server {
    let engine = EngineHandle::start(exec, config, Policy::VllmV1, max_waiting, context_len).with_model_name("echo");
    serve_engine(engine).await
}

async fn post(base: &str, path: &str, body: &Value) -> (u16, String) {
    let resp = reqwest::Client::new().post(format!("{base}{path}")).json(body).send().await.unwrap();
    (resp.status().as_u16(), resp.text().await.unwrap())
}

fn ids(text: &str) -> Vec<u32> {
    text.bytes().map(u32::from).collect()
}

/// Runs a test body with a time limit so a hang fails instead of blocking CI.
async fn bounded<F: std::future::Future<Output = ()>>(f: F) {
    tokio::time::timeout(Duration::from_secs(180), f).await.expect("test timed out");
}

/// Waits (at most 60 s, so that a busy machine cannot fail it) until `done` holds.
async fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while !done() {
        assert!(tokio::time::Instant::now() < deadline, "{what}: not after 60 s");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Every KV block is back in the pool. A client has its last token a moment before the engine
/// frees the request's blocks (the step ends after its outputs are sent), and on a busy machine
/// that moment can be long: wait for it rather than read the count once.
async fn assert_all_blocks_freed(engine: &EngineHandle) {
    wait_until("every KV block freed after the last response", || engine.stats().kv_blocks_used == 0).await;
}

/// A streamed request of `max_tokens` that occupies the engine until it is dropped: with the
/// step delay of the server, far longer than any test takes (≥ 40 s), so what a test does
/// meanwhile happens while it runs, however slow the machine.
async fn hold_engine(base: &str, max_tokens: u32) -> impl futures_util::Stream {
    let resp = reqwest::Client::new()
        .post(format!("{base}/v1/completions"))
        .json(&json!({"prompt": "hold", "max_tokens": max_tokens, "stream": true}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let mut body = Box::pin(resp.bytes_stream());
    body.next().await.unwrap().unwrap();
    body
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn non_streaming_completion_has_exact_usage() {
    bounded(async {
        let s = start(0, None, 8, 64, 1024).await;
        let (status, body) = post(&s.base, "/v1/completions", &json!({"model": "echo", "prompt": "hello", "max_tokens": 10})).await;
        assert_eq!(status, 200, "{body}");
        let v: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["usage"], json!({"prompt_tokens": 5, "completion_tokens": 10, "total_tokens": 15}));
        assert_eq!(v["choices"][0]["finish_reason"], "length");
        let want: String = expected(&ids("hello"), 10).iter().map(|&t| t as u8 as char).collect();
        assert_eq!(v["choices"][0]["text"], want);

        // Token-id prompts, and the default model name.
        let (status, body) = post(&s.base, "/v1/completions", &json!({"prompt": [104, 105], "max_tokens": 3, "temperature": 0.0, "seed": 7})).await;
        assert_eq!(status, 200, "{body}");
        let v: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["usage"]["prompt_tokens"], 2);
        assert_eq!(v["usage"]["completion_tokens"], 3);
        assert_eq!(v["model"], "echo");
    })
    .await;
}

fn sse_lines(body: &str) -> Vec<&str> {
    body.split('\n').filter(|l| !l.is_empty()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streaming_completion_is_wire_exact() {
    bounded(async {
        let s = start(1, None, 8, 64, 1024).await;
        for include_usage in [true, false] {
            let mut req = json!({"prompt": "abc", "max_tokens": 7, "stream": true});
            if include_usage {
                req["stream_options"] = json!({"include_usage": true});
            }
            let resp = reqwest::Client::new().post(format!("{}/v1/completions", s.base)).json(&req).send().await.unwrap();
            assert_eq!(resp.status().as_u16(), 200);
            assert_eq!(resp.headers()["content-type"], "text/event-stream");
            let body = resp.text().await.unwrap();
            let lines = sse_lines(&body);
            assert!(lines.iter().all(|l| l.starts_with("data: ")), "{body}");
            assert_eq!(*lines.last().unwrap(), "data: [DONE]");
            let chunks: Vec<Value> = lines[..lines.len() - 1].iter().map(|l| serde_json::from_str(&l[6..]).unwrap()).collect();
            let (token_chunks, usage_chunk) = if include_usage {
                let (last, rest) = chunks.split_last().unwrap();
                assert_eq!(last["choices"], json!([]));
                assert_eq!(last["usage"], json!({"prompt_tokens": 3, "completion_tokens": 7, "total_tokens": 10}));
                (rest.to_vec(), true)
            } else {
                (chunks.clone(), false)
            };
            assert!(usage_chunk == include_usage);
            assert!(token_chunks.iter().all(|c| c.get("usage").is_none()));
            assert_eq!(token_chunks.len(), 7);
            let text: String = token_chunks.iter().map(|c| c["choices"][0]["text"].as_str().unwrap().to_string()).collect();
            let want: String = expected(&ids("abc"), 7).iter().map(|&t| t as u8 as char).collect();
            assert_eq!(text, want);
            assert_eq!(token_chunks.last().unwrap()["choices"][0]["finish_reason"], "length");
            assert!(token_chunks[..6].iter().all(|c| c["choices"][0]["finish_reason"].is_null()));
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tgi_generate_and_generate_stream_formats() {
    bounded(async {
        let s = start(1, None, 8, 64, 1024).await;
        let want = expected(&ids("xyz"), 5);
        let want_text: String = want.iter().map(|&t| t as u8 as char).collect();
        let (status, body) =
            post(&s.base, "/generate", &json!({"inputs": "xyz", "parameters": {"max_new_tokens": 5, "details": true}})).await;
        assert_eq!(status, 200, "{body}");
        let v: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["generated_text"], want_text);
        assert_eq!(v["details"]["generated_tokens"], 5);
        assert_eq!(v["details"]["finish_reason"], "length");
        let got: Vec<u32> = v["details"]["tokens"].as_array().unwrap().iter().map(|t| t["id"].as_u64().unwrap() as u32).collect();
        assert_eq!(got, want);

        let (status, body) = post(&s.base, "/generate_stream", &json!({"inputs": "xyz", "parameters": {"max_new_tokens": 5}})).await;
        assert_eq!(status, 200, "{body}");
        let lines = sse_lines(&body);
        assert_eq!(lines.len(), 5, "{body}");
        let events: Vec<Value> = lines
            .iter()
            .map(|l| {
                assert!(l.starts_with("data:{"), "{l}");
                serde_json::from_str(&l[5..]).unwrap()
            })
            .collect();
        for (i, e) in events.iter().enumerate() {
            assert_eq!(e["token"]["id"], want[i]);
            assert_eq!(e["token"]["special"], false);
            assert!(e["token"]["text"].is_string() && e["token"].get("logprob").is_some());
            if i < 4 {
                assert!(e["generated_text"].is_null() && e["details"].is_null());
            }
        }
        let last = events.last().unwrap();
        assert_eq!(last["generated_text"], want_text);
        assert_eq!(last["details"]["generated_tokens"], 5);
        assert_eq!(last["details"]["finish_reason"], "length");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eos_stops_unless_ignored() {
    bounded(async {
        let want = expected(&ids("q"), 20);
        let eos = want[2];
        let stop_at = want.iter().position(|&t| t == eos).unwrap() + 1;
        let s = start(0, Some(eos), 8, 64, 1024).await;
        let (_, body) = post(&s.base, "/v1/completions", &json!({"prompt": "q", "max_tokens": 20})).await;
        let v: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["usage"]["completion_tokens"], stop_at);
        assert_eq!(v["choices"][0]["finish_reason"], "stop");
        let (_, body) = post(&s.base, "/v1/completions", &json!({"prompt": "q", "max_tokens": 20, "ignore_eos": true})).await;
        let v: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["usage"]["completion_tokens"], 20);
        assert_eq!(v["choices"][0]["finish_reason"], "length");
        assert_all_blocks_freed(&s.engine).await;
    })
    .await;
}

/// `serve --ignore-eos`: a request that does not ask to ignore EOS still runs to `max_tokens`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_engine_can_ignore_eos_for_every_request() {
    bounded(async {
        let want = expected(&ids("q"), 20);
        let exec = EchoExecutor { step_delay: Duration::ZERO, eos: Some(want[2]) };
        let engine = EngineHandle::start(exec, config(8, 128), Policy::VllmV1, 64, 1024).with_ignore_eos(true);
        let params = GenerateParams { prompt: ids("q"), max_tokens: 20, ignore_eos: false, sampling: SamplingParams::GREEDY };
        let mut stream = engine.submit(params).await.unwrap();
        let mut tokens = Vec::new();
        let mut finish = None;
        while let Some(Event::Tokens { ids, finish: f }) = stream.events.recv().await {
            tokens.extend(ids);
            finish = f;
            if f.is_some() {
                break;
            }
        }
        assert_eq!(tokens, want);
        assert_eq!(finish, Some(FinishReason::Length));
    })
    .await;
}

fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name).and_then(|r| r.strip_prefix(' ')))
        .unwrap_or_else(|| panic!("no {name} in\n{text}"))
        .parse()
        .unwrap()
}

async fn metrics(base: &str) -> String {
    reqwest::get(format!("{base}/metrics")).await.unwrap().text().await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disconnect_cancels_and_frees_kv_blocks() {
    bounded(async {
        // 1000 steps of 40 ms: the request cannot end by itself before it is cancelled.
        let s = start(40, None, 8, 64, 1024).await;
        let resp = reqwest::Client::new()
            .post(format!("{}/v1/completions", s.base))
            .json(&json!({"prompt": "cancel me", "max_tokens": 1000, "stream": true}))
            .send()
            .await
            .unwrap();
        let mut body = resp.bytes_stream();
        let mut seen = 0;
        while seen < 3 {
            let chunk = body.next().await.unwrap().unwrap();
            seen += chunk.iter().filter(|&&b| b == b'\n').count() / 2;
        }
        let m = metrics(&s.base).await;
        assert_eq!(metric(&m, "servesim_num_requests_running"), 1.0);
        assert!(metric(&m, "servesim_kv_cache_blocks_used") > 0.0);
        drop(body);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        loop {
            let m = metrics(&s.base).await;
            if metric(&m, "servesim_kv_cache_blocks_used") == 0.0 && metric(&m, "servesim_num_requests_running") == 0.0 {
                assert_eq!(metric(&m, "servesim_kv_cache_usage_ratio"), 0.0);
                assert_eq!(metric(&m, "servesim_requests_cancelled_total"), 1.0);
                assert!(metric(&m, "servesim_step_time_seconds_count") >= 3.0);
                break;
            }
            assert!(tokio::time::Instant::now() < deadline, "KV blocks not freed:\n{m}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // Cut short: fewer than the 1000 tokens asked for.
        assert!(s.engine.stats().generation_tokens_total < 1000);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn full_queue_gets_503_with_json_error() {
    bounded(async {
        // One sequence running (held), one waiting: the queue is full, whatever the timing.
        let s = start(40, None, 1, 1, 1024).await;
        let held = hold_engine(&s.base, 1000).await;
        let base = s.base.clone();
        let waiting = tokio::spawn(async move { post(&base, "/v1/completions", &json!({"prompt": "waits", "max_tokens": 2})).await });
        wait_until("the second request waiting", || s.engine.stats().waiting == 1).await;
        for i in 0..3 {
            let (status, body) = post(&s.base, "/v1/completions", &json!({"prompt": format!("p{i}"), "max_tokens": 2})).await;
            assert_eq!(status, 503, "{body}");
            let v: Value = serde_json::from_str(&body).expect("every response is JSON");
            assert!(v["error"]["message"].as_str().unwrap().contains("overloaded"), "{body}");
        }
        // Freed, the engine serves the waiting request.
        drop(held);
        let (status, body) = waiting.await.unwrap();
        assert_eq!(status, 200, "{body}");
        let m = metrics(&s.base).await;
        assert_eq!(metric(&m, "servesim_requests_rejected_total"), 3.0);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gets_400_with_json_error() {
    bounded(async {
        let s = start(0, None, 8, 64, 64).await;
        for path in ["/v1/completions", "/generate", "/generate_stream"] {
            let resp = reqwest::Client::new()
                .post(format!("{}{path}", s.base))
                .header("content-type", "application/json")
                .body("{\"prompt\": ")
                .send()
                .await
                .unwrap();
            assert_eq!(resp.status().as_u16(), 400, "{path}");
            let v: Value = resp.json().await.unwrap();
            assert!(v["error"]["message"].as_str().unwrap().contains("JSON"));
        }
        let (status, _) = post(&s.base, "/v1/completions", &json!({"max_tokens": 3})).await;
        assert_eq!(status, 400);
        let (status, _) = post(&s.base, "/v1/completions", &json!({"prompt": "", "max_tokens": 3})).await;
        assert_eq!(status, 400);
        let (status, _) = post(&s.base, "/v1/completions", &json!({"prompt": [32_000], "max_tokens": 3})).await;
        assert_eq!(status, 400);

        // 60 + 10 > 64: the message names the numbers.
        let (status, body) = post(&s.base, "/v1/completions", &json!({"prompt": "a".repeat(60), "max_tokens": 10})).await;
        assert_eq!(status, 400);
        let v: Value = serde_json::from_str(&body).unwrap();
        let msg = v["error"]["message"].as_str().unwrap();
        for n in ["64", "70", "60", "10"] {
            assert!(msg.contains(n), "{msg}");
        }
        let (status, _) = post(&s.base, "/generate", &json!({"inputs": "a".repeat(60), "parameters": {"max_new_tokens": 10}})).await;
        assert_eq!(status, 400);
        // Still serving.
        let (status, _) = post(&s.base, "/v1/completions", &json!({"prompt": "ok", "max_tokens": 2})).await;
        assert_eq!(status, 200);
    })
    .await;
}

async fn generate_ids(base: &str, inputs: &str, n: u32) -> Vec<u32> {
    let (status, body) = post(base, "/generate", &json!({"inputs": inputs, "parameters": {"max_new_tokens": n, "details": true}})).await;
    assert_eq!(status, 200, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    v["details"]["tokens"].as_array().unwrap().iter().map(|t| t["id"].as_u64().unwrap() as u32).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_prompt_alone_and_inside_a_batch_gives_the_same_tokens() {
    bounded(async {
        let s = start(40, None, 8, 64, 1024).await;
        let prompt = "the same prompt";
        let alone = generate_ids(&s.base, prompt, 24).await;
        assert_eq!(alone, expected(&ids(prompt), 24));
        // A request held running meanwhile: every step below batches at least two sequences,
        // however the others' arrivals spread out.
        let held = hold_engine(&s.base, 1000).await;
        let mut tasks = Vec::new();
        for i in 0..6 {
            let base = s.base.clone();
            let p = if i % 2 == 0 { prompt.to_string() } else { format!("another prompt number {i}") };
            tasks.push(tokio::spawn(async move { (p.clone(), generate_ids(&base, &p, 24).await) }));
        }
        for t in tasks {
            let (p, got) = t.await.unwrap();
            if p == prompt {
                assert_eq!(got, alone);
            } else {
                assert_eq!(got, expected(&ids(&p), 24));
            }
        }
        drop(held);
        let trace = s.engine.trace();
        assert!(trace.iter().any(|r| r.batch_seqs >= 2), "no step batched two sequences");
        assert!(trace.windows(2).all(|w| w[0].start_ns <= w[1].start_ns));
        assert!(trace.iter().all(|r| r.cost.total_ns > 0));
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn models_health_and_metrics() {
    bounded(async {
        let s = start(0, None, 8, 64, 1024).await;
        let v: Value = reqwest::get(format!("{}/v1/models", s.base)).await.unwrap().json().await.unwrap();
        assert_eq!(v["data"][0]["id"], "echo");
        assert_eq!(v["data"][0]["max_model_len"], 1024);
        assert_eq!(reqwest::get(format!("{}/health", s.base)).await.unwrap().status().as_u16(), 200);
        let m = metrics(&s.base).await;
        for name in ["servesim_num_requests_running", "servesim_num_requests_waiting", "servesim_kv_cache_usage_ratio", "servesim_step_time_seconds_count"] {
            metric(&m, name);
        }
        assert!(m.contains("servesim_step_time_seconds_bucket{le=\"+Inf\"}"));
        assert!(m.contains("# TYPE servesim_step_time_seconds histogram"));
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn preemption_by_recompute_keeps_the_tokens() {
    bounded(async {
        // 8 blocks of 16 tokens: four 50-token sequences cannot all stay resident.
        let exec = EchoExecutor { step_delay: Duration::from_millis(1), eos: None };
        let s = start_with(exec, config(8, 8), 64, 128).await;
        let tasks: Vec<_> = (0..4)
            .map(|i| {
                let base = s.base.clone();
                tokio::spawn(async move {
                    let p = format!("prompt #{i}");
                    (p.clone(), generate_ids(&base, &p, 40).await)
                })
            })
            .collect();
        for t in tasks {
            let (p, got) = t.await.unwrap();
            assert_eq!(got, expected(&ids(&p), 40));
        }
        assert!(s.engine.trace().iter().any(|r| r.kv_blocks_used == 8), "the cache never filled");
        assert_all_blocks_freed(&s.engine).await;
    })
    .await;
}

/// Fails every step: requests get a JSON error, and the server keeps serving.
struct FailingExecutor;

impl Executor for FailingExecutor {
    fn forward(&mut self, _: &Batch, _: &StepInputs) -> Result<Vec<u32>, String> {
        Err("device lost".into())
    }
    fn vocab_size(&self) -> u32 {
        256
    }
    fn eos_token(&self) -> Option<u32> {
        None
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn executor_errors_reach_the_client_and_free_blocks() {
    bounded(async {
        let s = start_with(FailingExecutor, config(8, 64), 64, 512).await;
        for _ in 0..2 {
            let (status, body) = post(&s.base, "/v1/completions", &json!({"prompt": "x", "max_tokens": 4})).await;
            assert_eq!(status, 500);
            let v: Value = serde_json::from_str(&body).unwrap();
            assert!(v["error"]["message"].as_str().unwrap().contains("device lost"));
        }
        let (status, body) = post(&s.base, "/v1/completions", &json!({"prompt": "x", "max_tokens": 4, "stream": true})).await;
        assert_eq!(status, 200);
        let lines = sse_lines(&body);
        assert!(lines.iter().all(|l| l.starts_with("data: ")));
        assert_eq!(*lines.last().unwrap(), "data: [DONE]");
        assert!(lines[0].contains("device lost"));
        assert_all_blocks_freed(&s.engine).await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_returns_after_shutdown() {
    bounded(async {
        let exec = EchoExecutor { step_delay: Duration::ZERO, eos: None };
        let engine = EngineHandle::start(exec, config(8, 64), Policy::VllmV1, 64, 512);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(serve(listener, engine, async move {
            let _ = rx.await;
        }));
        let (status, _) = post(&base, "/v1/completions", &json!({"prompt": "x", "max_tokens": 2})).await;
        assert_eq!(status, 200);
        tx.send(()).unwrap();
        server.await.unwrap().unwrap();
    })
    .await;
}

/// The bench client (src/bench/) against the server: every request completes with exactly the
/// tokens it asked for, over both APIs.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bench_client_counts_the_servers_tokens() {
    use servesim::bench::{self, Backend, BenchConfig};
    use servesim::metrics::Summary;
    use servesim::workload::RequestSpec;
    bounded(async {
        let s = start(1, None, 8, 64, 1024).await;
        for backend in [Backend::OpenAi, Backend::Tgi] {
            let requests: Vec<RequestSpec> = (0..4)
                .map(|i| RequestSpec { arrival_ns: i * 2_000_000, input_tokens: 8, output_tokens: 5, max_tokens: 5, prefix: Default::default(), follows: None })
                .collect();
            let mut config = BenchConfig::new(backend, &s.base, "echo", requests);
            config.request_timeout = Duration::from_secs(60);
            let run = bench::run(&config).await.unwrap();
            for (record, detail) in run.records.requests.iter().zip(&run.details) {
                assert!(record.success, "{backend:?}: {detail:?}");
                assert_eq!(record.output_tokens, 5, "{backend:?}");
            }
            let summary = Summary::from_records(&run.records, &[50.0, 99.0]);
            assert_eq!((summary.completed, summary.failed), (4, 0), "{backend:?}");
            assert_eq!(summary.total_output_tokens, 20, "{backend:?}");
        }
        assert_all_blocks_freed(&s.engine).await;
    })
    .await;
}
