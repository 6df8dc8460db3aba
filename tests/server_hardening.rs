//! The server's limits over 127.0.0.1 (issue 17): a JSON body on every error status, 503 with
//! `Retry-After`, refused request fields, the prompt byte limit, header and body read timeouts,
//! and a shutdown that a half-open connection cannot hold up. No test asserts a timing: each
//! waits for an outcome under a generous deadline.

mod common;

use std::time::Duration;

use futures_util::StreamExt;
use serde_json::{Value, json};
use servesim::engine::server::{Drained, EngineHandle, Executor, HEADER_BYTES_MAX, ServerLimits, StepInputs, serve_with};
use servesim::scenario::Policy;
use servesim::sched::Batch;
use std::io::{Read, Write};

/// Every sampled token is `b'a'`, after `step_delay`.
struct SlowExecutor {
    step_delay: Duration,
}

impl Executor for SlowExecutor {
    fn forward(&mut self, batch: &Batch, _: &StepInputs) -> Result<Vec<u32>, String> {
        std::thread::sleep(self.step_delay);
        Ok(batch.seqs.iter().filter(|w| w.samples_token).map(|_| u32::from(b'a')).collect())
    }
    fn vocab_size(&self) -> u32 {
        256
    }
    fn eos_token(&self) -> Option<u32> {
        None
    }
}

struct Server {
    base: String,
    addr: String,
    engine: EngineHandle,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    served: tokio::task::JoinHandle<Drained>,
}

impl Server {
    /// Triggers the shutdown and waits (at most 60 s) for `serve_with` to return.
    async fn shut_down(mut self) -> Drained {
        let _ = self.stop.take().unwrap().send(());
        tokio::time::timeout(Duration::from_secs(60), self.served).await.expect("the server did not stop").unwrap()
    }
}

async fn start(limits: ServerLimits, max_num_seqs: u32, max_waiting: u32, step_delay: Duration) -> Server {
    let config = common::sim::scheduler(256, max_num_seqs, 64);
    let engine = EngineHandle::start(SlowExecutor { step_delay }, config, Policy::VllmV1, max_waiting, 1024).with_model_name("slow");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let served = tokio::spawn(serve_with(listener, engine.clone(), limits, async move {
        let _ = stopped.await;
    }));
    Server { base: format!("http://{addr}"), addr, engine, stop: Some(stop), served }
}

async fn start_default() -> Server {
    start(ServerLimits::default(), 8, 64, Duration::ZERO).await
}

/// Runs a test body with a time limit so a hang fails instead of blocking CI.
async fn bounded<F: std::future::Future<Output = ()>>(f: F) {
    tokio::time::timeout(Duration::from_secs(120), f).await.expect("test timed out");
}

async fn post(base: &str, path: &str, body: &Value) -> (u16, Value) {
    let resp = reqwest::Client::new().post(format!("{base}{path}")).json(body).send().await.unwrap();
    let status = resp.status().as_u16();
    let text = resp.text().await.unwrap();
    (status, serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: not JSON ({e}): {text}")))
}

/// Writes `request` on a new connection and reads until the server closes it (at most 30 s).
async fn raw(addr: &str, request: &[u8]) -> String {
    let (addr, request) = (addr.to_string(), request.to_vec());
    let read = tokio::task::spawn_blocking(move || {
        let mut tcp = std::net::TcpStream::connect(&addr).unwrap();
        tcp.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        tcp.write_all(&request).unwrap();
        let mut response = Vec::new();
        let read = tcp.read_to_end(&mut response);
        assert!(read.is_ok(), "{read:?}: the server kept the connection open 30 s; so far: {}", String::from_utf8_lossy(&response));
        String::from_utf8_lossy(&response).into_owned()
    });
    read.await.unwrap()
}

/// The status and JSON body of a raw HTTP/1.1 response; the body must be the server's error JSON.
fn json_error(response: &str) -> (u16, Value) {
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or_else(|| panic!("no head end: {response:?}"));
    let status = head.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or_else(|| panic!("no status: {head}"));
    assert!(head.to_ascii_lowercase().contains("\r\ncontent-type: application/json\r\n"), "{head}");
    let v: Value = serde_json::from_str(body).unwrap_or_else(|e| panic!("not JSON ({e}): {response}"));
    assert_eq!(v["error"]["code"], status, "{response}");
    assert!(!v["error"]["message"].as_str().unwrap().is_empty(), "{response}");
    (status, v)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_error_status_has_a_json_body() {
    bounded(async {
        let s = start_default().await;
        let a = &s.addr;
        let cases: Vec<(Vec<u8>, u16, &str)> = vec![
            (b"GET /nowhere HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".to_vec(), 404, "GET /nowhere"),
            (b"DELETE /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".to_vec(), 405, "Method Not Allowed"),
            (b"POST /generate HTTP/1.1\r\nHost: x\r\nContent-Length: 999999999\r\n\r\n".to_vec(), 413, "larger than"),
            (b"NOT AN HTTP REQUEST\r\n\r\n".to_vec(), 400, "malformed HTTP request"),
            (b"POST /generate HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nZZ\r\nabc\r\n".to_vec(), 400, "chunk size"),
            (format!("GET /health HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\n\r\n", "b".repeat(HEADER_BYTES_MAX)).into_bytes(), 431, "too large"),
            (format!("GET /health HTTP/1.1\r\n{}\r\n", "X-N: 1\r\n".repeat(200)).into_bytes(), 431, "too large"),
        ];
        for (request, want, words) in cases {
            let response = raw(a, &request).await;
            let (status, v) = json_error(&response);
            assert_eq!(status, want, "{response}");
            assert!(v["error"]["message"].as_str().unwrap().contains(words), "{response}");
            if status == 405 {
                assert!(response.to_ascii_lowercase().contains("\r\nallow: post"), "405 keeps Allow: {response}");
            }
        }
        // Still serving.
        let (status, _) = post(&s.base, "/v1/completions", &json!({"prompt": "ok", "max_tokens": 2})).await;
        assert_eq!(status, 200);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overload_503_says_when_to_retry() {
    bounded(async {
        // One long request running (at least 40 s of steps), one waiting: a third is refused.
        let s = start(ServerLimits::default(), 1, 1, Duration::from_millis(40)).await;
        let client = reqwest::Client::new();
        let long = client
            .post(format!("{}/v1/completions", s.base))
            .json(&json!({"prompt": "x", "max_tokens": 1000, "stream": true}))
            .send()
            .await
            .unwrap();
        let mut long = long.bytes_stream();
        long.next().await.unwrap().unwrap();
        let base = s.base.clone();
        let waiting = tokio::spawn(async move { post(&base, "/v1/completions", &json!({"prompt": "y", "max_tokens": 2})).await });
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        while s.engine.stats().waiting < 1 {
            assert!(tokio::time::Instant::now() < deadline, "the second request never waited: {:?}", s.engine.stats());
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let resp = client.post(format!("{}/v1/completions", s.base)).json(&json!({"prompt": "z", "max_tokens": 2})).send().await.unwrap();
        assert_eq!(resp.status().as_u16(), 503);
        assert_eq!(resp.headers()["retry-after"], "1");
        let v: Value = resp.json().await.unwrap();
        assert!(v["error"]["message"].as_str().unwrap().contains("overloaded"), "{v}");
        // The long one leaves; the waiting one is served.
        drop(long);
        assert_eq!(waiting.await.unwrap().0, 200);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unsupported_request_fields_are_refused() {
    bounded(async {
        let s = start_default().await;
        let refused = [
            ("/v1/completions", json!({"prompt": "x", "n": 2}), 400, "n = 2"),
            ("/v1/completions", json!({"prompt": "x", "n": 0}), 400, "n = 0"),
            ("/v1/completions", json!({"prompt": "x", "best_of": 3}), 400, "best_of = 3"),
            ("/v1/completions", json!({"prompt": "x", "temperature": -0.5}), 400, "temperature"),
            ("/v1/completions", json!({"prompt": "x", "model": "gpt-4"}), 404, "`gpt-4` does not exist"),
            ("/generate", json!({"inputs": "x", "parameters": {"best_of": 2}}), 400, "best_of = 2"),
            ("/generate_stream", json!({"inputs": "x", "parameters": {"temperature": -1.0}}), 400, "temperature"),
        ];
        for (path, body, want, words) in refused {
            let (status, v) = post(&s.base, path, &body).await;
            assert_eq!(status, want, "{path} {body}: {v}");
            assert!(v["error"]["message"].as_str().unwrap().contains(words), "{v}");
        }
        // The served name, its alias, none, and n = best_of = 1 are fine.
        for body in [
            json!({"prompt": "x", "max_tokens": 2, "model": "slow", "n": 1, "best_of": 1}),
            json!({"prompt": "x", "max_tokens": 2, "model": "servesim"}),
            json!({"prompt": "x", "max_tokens": 2}),
        ] {
            let (status, v) = post(&s.base, "/v1/completions", &body).await;
            assert_eq!(status, 200, "{body}: {v}");
        }
        let models: Value = reqwest::get(format!("{}/v1/models", s.base)).await.unwrap().json().await.unwrap();
        let ids: Vec<&str> = models["data"].as_array().unwrap().iter().map(|m| m["id"].as_str().unwrap()).collect();
        assert_eq!(ids, ["slow", "servesim"]);
        // Nothing refused reached the engine.
        assert_eq!(s.engine.stats().prompt_tokens_total, 3, "one token a prompt, three prompts admitted");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prompt_bytes_are_limited_before_tokenizing() {
    bounded(async {
        let limits = ServerLimits { prompt_bytes_max: 100, ..ServerLimits::default() };
        let s = start(limits, 8, 64, Duration::ZERO).await;
        for (path, body) in [
            ("/v1/completions", json!({"prompt": "a".repeat(101), "max_tokens": 1})),
            ("/v1/completions", json!({"prompt": ["b".repeat(5000)], "max_tokens": 1})),
            ("/generate", json!({"inputs": "c".repeat(101)})),
        ] {
            let (status, v) = post(&s.base, path, &body).await;
            assert_eq!(status, 400, "{v}");
            let message = v["error"]["message"].as_str().unwrap();
            assert!(message.contains("limit of 100 bytes") && message.contains("--max-prompt-bytes"), "{message}");
        }
        let (status, v) = post(&s.base, "/v1/completions", &json!({"prompt": "a".repeat(100), "max_tokens": 1})).await;
        assert_eq!(status, 200, "{v}");
        // Token ids are not text: only the context length bounds them.
        let (status, v) = post(&s.base, "/v1/completions", &json!({"prompt": vec![97; 300], "max_tokens": 1})).await;
        assert_eq!(status, 200, "{v}");

        // With the default limit, a 15 MB prompt (issue 17: 14 s and 540 MB to tokenize) is
        // refused for its bytes, not for its tokens after tokenizing.
        let d = start_default().await;
        let (status, v) = post(&d.base, "/generate", &json!({"inputs": "x".repeat(15_000_000)})).await;
        assert_eq!(status, 400, "{v}");
        assert!(v["error"]["message"].as_str().unwrap().contains("15000000 bytes, more than this server's limit of 1048576 bytes"), "{v}");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_headers_are_cut_and_slow_bodies_get_408() {
    bounded(async {
        // Each server has one short timeout and one long: a busy machine that reads the headers
        // late cannot turn the body's 408 into a closed connection.
        let limits = ServerLimits { header_read_timeout: Duration::from_millis(300), body_read_timeout: Duration::from_secs(600), ..ServerLimits::default() };
        let s = start(limits, 8, 64, Duration::ZERO).await;
        // Half a request line, then silence: the connection is closed with no response.
        assert_eq!(raw(&s.addr, b"POST /generate HT").await, "");
        // Connected and silent: closed too.
        assert_eq!(raw(&s.addr, b"").await, "");
        // Headers, then 1 byte of a 100-byte body.
        let limits = ServerLimits { header_read_timeout: Duration::from_secs(600), body_read_timeout: Duration::from_millis(300), ..ServerLimits::default() };
        let s = start(limits, 8, 64, Duration::ZERO).await;
        let response = raw(&s.addr, b"POST /generate HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{").await;
        let (status, v) = json_error(&response);
        assert_eq!(status, 408, "{response}");
        assert!(v["error"]["message"].as_str().unwrap().contains("did not arrive within 0.3 s"), "{v}");
    })
    .await;
}

/// A client that sends part of a body and then nothing, under read timeouts longer than the test.
fn half_open(addr: &str) -> std::net::TcpStream {
    let mut tcp = std::net::TcpStream::connect(addr).unwrap();
    tcp.write_all(b"POST /generate HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{").unwrap();
    tcp
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_drains_then_closes_what_is_left() {
    bounded(async {
        let patient = ServerLimits { header_read_timeout: Duration::from_secs(600), body_read_timeout: Duration::from_secs(600), ..ServerLimits::default() };

        // A request in flight finishes within the drain; an idle kept-alive connection does not
        // hold the server.
        let s = start(ServerLimits { drain_timeout: Duration::from_secs(60), ..patient }, 8, 64, Duration::from_millis(5)).await;
        let client = reqwest::Client::new();
        assert_eq!(client.get(format!("{}/health", s.base)).send().await.unwrap().status().as_u16(), 200);
        let resp = client
            .post(format!("{}/v1/completions", s.base))
            .json(&json!({"prompt": "x", "max_tokens": 40, "stream": true}))
            .send()
            .await
            .unwrap();
        let mut body = resp.bytes_stream();
        let first = body.next().await.unwrap().unwrap();
        assert!(first.starts_with(b"data: "));
        let engine = s.engine.clone();
        let drained = tokio::spawn(s.shut_down());
        let mut rest = Vec::new();
        while let Some(chunk) = body.next().await {
            rest.extend_from_slice(&chunk.unwrap());
        }
        assert!(rest.ends_with(b"data: [DONE]\n\n"), "{}", String::from_utf8_lossy(&rest));
        assert_eq!(drained.await.unwrap().connections_closed, 0);
        // The client has [DONE] a moment before the engine counts the request finished (its
        // step ends after the outputs are sent): wait for it, as long as a busy machine needs.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        while engine.stats().requests_finished_total == 0 {
            assert!(tokio::time::Instant::now() < deadline, "not counted finished: {:?}", engine.stats());
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(engine.stats().requests_finished_total, 1);

        // A half-open connection and an endless stream (1000 steps of 50 ms): closed when the
        // drain time runs out, and the stream's request is cancelled in the engine.
        let s = start(ServerLimits { drain_timeout: Duration::from_millis(500), ..patient }, 8, 64, Duration::from_millis(50)).await;
        let _stalled = half_open(&s.addr);
        let resp = client
            .post(format!("{}/v1/completions", s.base))
            .json(&json!({"prompt": "x", "max_tokens": 1000, "stream": true}))
            .send()
            .await
            .unwrap();
        let mut body = resp.bytes_stream();
        body.next().await.unwrap().unwrap();
        let engine = s.engine.clone();
        let drained = s.shut_down().await;
        assert_eq!(drained.connections_closed, 2, "{drained:?}");
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        while engine.stats().kv_blocks_used != 0 || engine.stats().running != 0 {
            assert!(tokio::time::Instant::now() < deadline, "not cancelled: {:?}", engine.stats());
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(engine.stats().requests_cancelled_total, 1);
    })
    .await;
}
