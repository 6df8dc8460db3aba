//! A soak test of `servesim serve` (issue 17): a real (tiny, random-weight) server under about
//! 30 s of mixed traffic over loopback: valid requests of both APIs, invalid ones, cancelled
//! streams, bursts past the waiting queue, malformed HTTP and half-open connections. Afterwards
//! nothing is running, waiting or holding a KV block, the resident memory is under 200 MiB after
//! a warm-up (half-megabyte prompts included) and within 20% of that level after the rest, and
//! stderr holds no panic.
//!
//! `SERVESIM_SOAK_S` sets the traffic's length in seconds (default 30) for a longer campaign.
//! Nothing here asserts a timing: every wait polls under a generous deadline.

mod common;
use common::*;

use std::io::Write;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use serde_json::{Value, json};

/// Resident memory of process `pid`, in KiB.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("read /proc/PID/status");
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).expect("VmRSS line");
    line.split_whitespace().nth(1).and_then(|v| v.parse().ok()).expect("VmRSS value")
}

/// Waits (at most 120 s) until the server is idle: nothing running or waiting, no KV block used.
async fn wait_idle(base: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let m = reqwest::get(format!("{base}/metrics")).await.unwrap().text().await.unwrap();
        let value = |name| metric(&m, name).unwrap_or_else(|| panic!("no {name} in {m}"));
        let idle = ["servesim_num_requests_running", "servesim_num_requests_waiting", "servesim_kv_cache_blocks_used"];
        if idle.iter().all(|name| value(name) == 0.0) {
            return m;
        }
        assert!(Instant::now() < deadline, "not idle 120 s after the traffic:\n{m}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// What one request of the mix got, by kind.
#[derive(Default, Debug)]
struct Tally {
    ok: u64,
    refused: u64,
    overloaded: u64,
    cancelled: u64,
    raw: u64,
}

/// Every error body is the server's JSON error, with its status as the code.
fn check_error(status: u16, body: &str) {
    let v: Value = serde_json::from_str(body).unwrap_or_else(|e| panic!("status {status}, not JSON ({e}): {body}"));
    assert_eq!(v["error"]["code"], status, "{body}");
}

async fn send(client: &reqwest::Client, base: &str, path: &str, body: &Value) -> (u16, String) {
    let resp = client.post(format!("{base}{path}")).json(body).send().await.unwrap_or_else(|e| panic!("{path} {body}: {e}"));
    let status = resp.status().as_u16();
    (status, resp.text().await.unwrap_or_else(|e| panic!("{path} {body}: {e}")))
}

/// A valid request: 200, or 503 when the queue is full.
fn valid(tally: &mut Tally, status: u16, body: &str) {
    match status {
        200 => tally.ok += 1,
        503 => {
            check_error(status, body);
            tally.overloaded += 1;
        }
        _ => panic!("status {status}: {body}"),
    }
}

/// Request number `i` of client `c` (the mix is fixed by the numbers).
async fn one(client: &reqwest::Client, base: &str, addr: &str, c: u64, i: u64, tally: &mut Tally) {
    let len = 4 + (c * 7 + i * 13) % 60;
    let out = 1 + (c + i * 3) % 24;
    match i % MIX_LEN {
        0 => {
            let (status, body) = send(client, base, "/v1/completions", &json!({"prompt": vec![65; len as usize], "max_tokens": out})).await;
            valid(tally, status, &body);
        }
        1 => {
            let (status, body) = send(client, base, "/generate", &json!({"inputs": "x".repeat(len as usize), "parameters": {"max_new_tokens": out}})).await;
            valid(tally, status, &body);
        }
        2 => {
            let req = json!({"model": "servesim", "prompt": "y".repeat(len as usize), "max_tokens": out, "stream": true});
            let (status, body) = send(client, base, "/v1/completions", &req).await;
            valid(tally, status, &body);
            if status == 200 {
                assert!(body.ends_with("data: [DONE]\n\n"), "{body}");
            }
        }
        3 => {
            // Invalid, one way or another.
            let bad = [
                json!({"prompt": "x", "n": 2}),
                json!({"prompt": "x", "model": "nope"}),
                json!({"prompt": "x", "temperature": -1.0}),
                json!({"prompt": "z".repeat(5000)}),
                // Half a megabyte of words, under the body limit and past the context: counted
                // a piece at a time and refused, not tokenized whole (issue 34: such prompts
                // held 650 MB where the server otherwise sits near 40 MB).
                json!({"prompt": "many words ".repeat(48_000)}),
                json!({"prompt": "x", "max_tokens": 5000}),
                json!({"prompt": []}),
                json!("not a request"),
            ];
            let (status, body) = send(client, base, "/v1/completions", &bad[(i / MIX_LEN % bad.len() as u64) as usize]).await;
            assert!(status == 400 || status == 404, "status {status}: {body}");
            check_error(status, &body);
            tally.refused += 1;
        }
        4 | 5 => {
            // Cancelled: read a chunk or two of a long stream, then leave.
            let resp = client
                .post(format!("{base}/v1/completions"))
                .json(&json!({"prompt": vec![66; len as usize], "max_tokens": 400, "stream": true}))
                .send()
                .await
                .unwrap();
            if resp.status().as_u16() == 503 {
                tally.overloaded += 1;
                return;
            }
            let mut chunks = resp.bytes_stream();
            for _ in 0..1 + i % 2 {
                chunks.next().await.unwrap().unwrap();
            }
            tally.cancelled += 1;
        }
        6 => {
            // A burst past the waiting queue.
            let burst: Vec<_> = (0..8)
                .map(|k| {
                    let (client, base) = (client.clone(), base.to_string());
                    tokio::spawn(async move { send(&client, &base, "/v1/completions", &json!({"prompt": vec![67; 8 + k], "max_tokens": 16})).await })
                })
                .collect();
            for b in burst {
                let (status, body) = b.await.unwrap();
                valid(tally, status, &body);
            }
        }
        7 => {
            // Not HTTP at all, or a body's framing broken: a JSON 400 each.
            let request: &[u8] = if i.is_multiple_of(2) { b"BREW /pot HTCPCP\r\n\r\n" } else { b"POST /generate HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nQQ\r\n" };
            let (addr, request) = (addr.to_string(), request.to_vec());
            let response = tokio::task::spawn_blocking(move || {
                use std::io::Read;
                let mut tcp = std::net::TcpStream::connect(&addr).unwrap();
                tcp.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
                tcp.write_all(&request).unwrap();
                let mut response = String::new();
                tcp.read_to_string(&mut response).unwrap();
                response
            })
            .await
            .unwrap();
            let (head, body) = response.split_once("\r\n\r\n").unwrap_or_else(|| panic!("{response:?}"));
            assert!(head.starts_with("HTTP/1.1 400 "), "{response}");
            check_error(400, body);
            tally.raw += 1;
        }
        _ => {
            // Half-open: part of a request line, then gone (or left to the header timeout).
            let addr = addr.to_string();
            tokio::task::spawn_blocking(move || {
                let mut tcp = std::net::TcpStream::connect(&addr).unwrap();
                tcp.write_all(b"POST /v1/comple").unwrap();
                std::thread::sleep(Duration::from_millis(50));
            })
            .await
            .unwrap();
            tally.raw += 1;
        }
    }
}

/// Requests in the mix (`one`'s cases).
const MIX_LEN: u64 = 9;

/// `clients` clients each send the mix until `until`, and the whole mix at least once however
/// slow the machine.
async fn traffic(base: &str, addr: &str, clients: u64, until: Instant) -> Tally {
    let tasks: Vec<_> = (0..clients)
        .map(|c| {
            let (base, addr) = (base.to_string(), addr.to_string());
            tokio::spawn(async move {
                let client = reqwest::Client::builder().timeout(Duration::from_secs(120)).build().unwrap();
                let mut tally = Tally::default();
                let mut i = c;
                while i < c + MIX_LEN || Instant::now() < until {
                    one(&client, &base, &addr, c, i, &mut tally).await;
                    i += 1;
                }
                tally
            })
        })
        .collect();
    let mut all = Tally::default();
    for t in tasks {
        let t = t.await.unwrap();
        all.ok += t.ok;
        all.refused += t.refused;
        all.overloaded += t.overloaded;
        all.cancelled += t.cancelled;
        all.raw += t.raw;
    }
    all
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn soak_leaves_no_work_no_blocks_no_growth_and_no_panic() {
    let soak_s: u64 = std::env::var("SERVESIM_SOAK_S").ok().and_then(|v| v.parse().ok()).unwrap_or(30);
    let (mut server, base, log) = spawn_serve_logged(&[
        "--random-weights", "tiny", "--threads", "1", "--max-num-seqs", "4", "--max-waiting", "4", "--max-prompt-bytes", "4096",
        "--header-read-timeout", "1", "--body-read-timeout", "1", "--drain-timeout", "10",
    ]);
    let addr = base.strip_prefix("http://").unwrap().to_string();
    let pid = server.0.id();

    // Warm-up: a quarter of the time, the same traffic; then the baseline, idle.
    let warm_up = Duration::from_secs(soak_s.div_ceil(4));
    let warm = traffic(&base, &addr, 4, Instant::now() + warm_up).await;
    println!("warm-up: {warm:?}");
    wait_idle(&base).await;
    let rss_warm_kib = rss_kib(pid);
    // The whole server, tiny model and half-megabyte prompts included, stays small: a bound with
    // room over the ~40 MB it holds, far under the 650 MB such prompts once took.
    assert!(rss_warm_kib <= 200 * 1024, "RSS after warm-up {rss_warm_kib} KiB, over 200 MiB");

    let t = traffic(&base, &addr, 4, Instant::now() + Duration::from_secs(soak_s)).await;
    println!("soak: {t:?}");
    assert!(t.ok > 0 && t.refused > 0 && t.cancelled > 0 && t.raw > 0, "the mix did not run: {t:?}");
    let m = wait_idle(&base).await;
    let rss_end_kib = rss_kib(pid);
    println!("RSS after warm-up {rss_warm_kib} KiB, after the soak {rss_end_kib} KiB");
    assert!(rss_end_kib * 5 <= rss_warm_kib * 6, "RSS grew more than 20%: {rss_warm_kib} KiB after warm-up, {rss_end_kib} KiB after");
    // Every request the server admitted (a 200) ended once, finished or cancelled; a stream a
    // client left may have finished before the server saw it go, so only the sum is exact.
    let ended = metric(&m, "servesim_requests_finished_total").unwrap() + metric(&m, "servesim_requests_cancelled_total").unwrap();
    let admitted = warm.ok + warm.cancelled + t.ok + t.cancelled;
    assert_eq!(ended, admitted as f64, "finished + cancelled in /metrics; 200s the clients got: {warm:?}, {t:?}");

    let status = tokio::task::spawn_blocking(move || {
        let status = sigterm_and_wait(&mut server, Duration::from_secs(120));
        drop(server);
        status
    })
    .await
    .unwrap();
    let log = log.lock().unwrap().clone();
    assert!(status.success(), "exit status {status}: {log}");
    assert!(!log.contains("panicked") && !log.contains("RUST_BACKTRACE"), "{log}");
}
