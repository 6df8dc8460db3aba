//! The bench client against an in-test mock server (axum on 127.0.0.1:0) that streams OpenAI
//! completions and TGI `generate_stream` events, fails on purpose on some routes, and counts the
//! requests it serves at once. Every stream is a few events a few milliseconds apart, so each
//! test takes well under a second and stops by itself. What is asserted holds however slow the
//! machine: latencies are bounded below by the mock's sleeps, never above, and the waits that
//! could fail are 30 s or more.

use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Json;
use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::{Value, json};

use servesim::bench::{self, Backend, BenchConfig, BenchError, BenchRun};
use servesim::metrics::Summary;
use servesim::workload::RequestSpec;

/// Gap between two streamed events of the mock.
const EVENT_GAP: Duration = Duration::from_millis(5);

/// What the mock saw.
#[derive(Default)]
struct Mock {
    in_flight: AtomicUsize,
    in_flight_peak: AtomicUsize,
    /// Prompt length of every request (token ids for OpenAI, words for TGI), in arrival order.
    prompt_lens: Mutex<Vec<usize>>,
}

/// Counts one request as in flight until its response stream ends (it lives in the stream).
struct InFlight(Arc<Mock>);

impl InFlight {
    fn new(mock: &Arc<Mock>) -> Self {
        let now = mock.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        mock.in_flight_peak.fetch_max(now, Ordering::SeqCst);
        InFlight(mock.clone())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

/// An event-stream response that sends `events` one by one, each after `gap`.
fn sse(events: Vec<String>, gap: Duration, guard: InFlight) -> Response {
    let stream = futures_util::stream::unfold(
        (events.into_iter(), guard),
        move |(mut events, guard)| async move {
            let event = events.next()?;
            tokio::time::sleep(gap).await;
            Some((Ok::<_, Infallible>(Bytes::from(event)), (events, guard)))
        },
    );
    Response::builder()
        .header(header::CONTENT_TYPE, "text/event-stream")
        .body(Body::from_stream(stream))
        .unwrap()
}

fn openai_chunk(text: &str) -> String {
    format!(
        "data: {}\n\n",
        json!({"object": "text_completion", "choices": [{"index": 0, "text": text}]})
    )
}

/// An OpenAI completion stream: an empty first chunk (not a token), `max_tokens` tokens in
/// chunks of `tokens_per_chunk`, the usage chunk when asked, `[DONE]`.
fn openai_stream(mock: &Arc<Mock>, body: &Value, tokens_per_chunk: u64) -> Response {
    openai_stream_counted(InFlight::new(mock), body, tokens_per_chunk)
}

/// [`openai_stream`] for a request already counted in flight.
fn openai_stream_counted(guard: InFlight, body: &Value, tokens_per_chunk: u64) -> Response {
    let mock = guard.0.clone();
    let prompt_len = body["prompt"].as_array().map_or(0, Vec::len);
    mock.prompt_lens.lock().unwrap().push(prompt_len);
    let max_tokens = body["max_tokens"].as_u64().unwrap();
    let mut events = vec![openai_chunk("")];
    for _ in 0..max_tokens / tokens_per_chunk {
        events.push(openai_chunk(&" tok".repeat(tokens_per_chunk as usize)));
    }
    if body["stream_options"]["include_usage"] == json!(true) {
        let usage = json!({"choices": [], "usage": {"prompt_tokens": prompt_len, "completion_tokens": max_tokens}});
        events.push(format!("data: {usage}\n\n"));
    }
    events.push("data: [DONE]\n\n".to_owned());
    sse(events, EVENT_GAP, guard)
}

async fn openai(State(mock): State<Arc<Mock>>, Json(body): Json<Value>) -> Response {
    openai_stream(&mock, &body, 1)
}

/// A normal stream that starts only once two requests have been in flight at once (or after
/// 30 s): a client that sends two at a time makes the peak 2 however slow the machine.
async fn gated(State(mock): State<Arc<Mock>>, Json(body): Json<Value>) -> Response {
    let guard = InFlight::new(&mock);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while mock.in_flight_peak.load(Ordering::SeqCst) < 2 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    openai_stream_counted(guard, &body, 1)
}

async fn openai_pairs(State(mock): State<Arc<Mock>>, Json(body): Json<Value>) -> Response {
    openai_stream(&mock, &body, 2)
}

/// 503 for prompts of odd length, a normal stream otherwise.
async fn flaky(State(mock): State<Arc<Mock>>, Json(body): Json<Value>) -> Response {
    if body["prompt"].as_array().map_or(0, Vec::len) % 2 == 1 {
        return overloaded().await;
    }
    openai_stream(&mock, &body, 1)
}

async fn overloaded() -> Response {
    (
        StatusCode::SERVICE_UNAVAILABLE,
        Json(json!({"error": {"message": "waiting queue is full"}})),
    )
        .into_response()
}

/// One token, then an error event.
async fn broken(State(mock): State<Arc<Mock>>) -> Response {
    let error = json!({"error": {"message": "engine crashed", "type": "InternalError"}});
    sse(
        vec![openai_chunk(" tok"), format!("data: {error}\n\n")],
        EVENT_GAP,
        InFlight::new(&mock),
    )
}

/// A stream whose first event comes after a minute (for the timeout test).
async fn slow(State(mock): State<Arc<Mock>>) -> Response {
    sse(
        vec![openai_chunk(" tok")],
        Duration::from_secs(60),
        InFlight::new(&mock),
    )
}

/// TGI's `generate_stream`: `data:` with no space, one event per token, the last with
/// `generated_text` and `details`, and no `[DONE]`.
async fn tgi(State(mock): State<Arc<Mock>>, Json(body): Json<Value>) -> Response {
    let guard = InFlight::new(&mock);
    let words = body["inputs"].as_str().unwrap().split_whitespace().count();
    mock.prompt_lens.lock().unwrap().push(words);
    let tokens = body["parameters"]["max_new_tokens"].as_u64().unwrap();
    let events = (1..=tokens)
        .map(|i| {
            let last = i == tokens;
            let event = json!({
                "index": i,
                "token": {"id": 100 + i, "text": " tok", "logprob": -0.5, "special": false},
                "generated_text": if last { json!(" tok".repeat(tokens as usize)) } else { Value::Null },
                "details": if last { json!({"finish_reason": "length", "generated_tokens": tokens}) } else { Value::Null },
            });
            format!("data:{event}\n\n")
        })
        .collect();
    sse(events, EVENT_GAP, guard)
}

/// Starts the mock on an ephemeral loopback port; it stops with the test's runtime.
async fn start_mock() -> (String, Arc<Mock>) {
    let mock = Arc::new(Mock::default());
    let app = Router::new()
        .route("/v1/completions", post(openai))
        .route("/pairs/v1/completions", post(openai_pairs))
        .route("/gated/v1/completions", post(gated))
        .route("/flaky/v1/completions", post(flaky))
        .route("/overloaded/v1/completions", post(overloaded))
        .route("/broken/v1/completions", post(broken))
        .route("/slow/v1/completions", post(slow))
        .route("/generate_stream", post(tgi))
        .with_state(mock.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{addr}"), mock)
}

/// `inputs.len()` requests `gap_ms` apart, each generating `output_tokens`.
fn specs(inputs: &[u32], output_tokens: u32, gap_ms: u64) -> Vec<RequestSpec> {
    inputs
        .iter()
        .enumerate()
        .map(|(i, &input_tokens)| RequestSpec {
            arrival_ns: i as u64 * gap_ms * 1_000_000,
            input_tokens,
            output_tokens,
            max_tokens: output_tokens,
            prefix: Default::default(),
            follows: None,
        })
        .collect()
}

fn config(backend: Backend, base_url: &str, requests: Vec<RequestSpec>) -> BenchConfig {
    let mut config = BenchConfig::new(backend, base_url, "mock-model", requests);
    // Bounded: no test waits forever for a misbehaving stream; generous for a busy machine.
    config.request_timeout = Duration::from_secs(60);
    config
}

fn summary(run: &BenchRun) -> Summary {
    Summary::from_records(&run.records, &[50.0, 99.0])
}

/// Checks what holds for every successful request: send at or after arrival, then first token,
/// then end; positive gaps; `output_tokens` tokens.
fn check_timing(run: &BenchRun, requests: &[RequestSpec], output_tokens: u32, chunks: usize) {
    for ((record, detail), spec) in run.records.requests.iter().zip(&run.details).zip(requests) {
        assert!(record.success, "{detail:?}");
        assert_eq!(record.output_tokens, output_tokens);
        assert_eq!(record.input_tokens, spec.input_tokens);
        assert!(record.send_ns >= spec.arrival_ns);
        let first_ns = record.first_token_ns.expect("a first token");
        assert!(first_ns > record.send_ns, "TTFT must be positive");
        assert!(record.end_ns >= first_ns);
        assert_eq!(detail.itl_ns.len(), chunks - 1);
        assert!(
            detail.itl_ns.iter().all(|&gap| gap > 0),
            "{:?}",
            detail.itl_ns
        );
        assert!(record.end_ns <= run.records.duration_ns);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_stream_is_timed_and_counted() {
    let (base_url, mock) = start_mock().await;
    let requests = specs(&[8, 8, 8, 8], 5, 5);
    let run = bench::run(&config(Backend::OpenAi, &base_url, requests.clone()))
        .await
        .unwrap();

    check_timing(&run, &requests, 5, 5);
    assert_eq!(*mock.prompt_lens.lock().unwrap(), vec![8; 4]);
    assert_eq!(run.records.itl_ns.len(), 4 * 4);
    assert_eq!(
        run.records.tokens_per_second.total(),
        4 * 5
    );
    let summary = summary(&run);
    assert_eq!((summary.completed, summary.failed), (4, 0));
    assert_eq!(summary.total_input_tokens, 32);
    assert_eq!(summary.total_output_tokens, 20);
    // The first token waits behind the empty chunk, so TTFT exceeds one event gap; every
    // latency is positive and TTFT < E2EL.
    assert!(summary.ttft.mean_ms >= EVENT_GAP.as_secs_f64() * 1000.0);
    assert!(summary.itl.mean_ms > 0.0 && summary.tpot.mean_ms > 0.0);
    assert!(summary.ttft.mean_ms < summary.e2el.mean_ms);
    assert!(summary.output_throughput > 0.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_counts_tokens_not_chunks() {
    let (base_url, _mock) = start_mock().await;
    let requests = specs(&[4, 4], 6, 0);
    let mut config = config(Backend::OpenAi, &base_url, requests.clone());
    config.endpoint = "/pairs/v1/completions".to_owned();
    let run = bench::run(&config).await.unwrap();

    // Three chunks of two tokens each: the server's usage says 6.
    check_timing(&run, &requests, 6, 3);
    assert_eq!(summary(&run).total_output_tokens, 12);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_concurrency_is_respected() {
    let (base_url, mock) = start_mock().await;
    let requests = specs(&[4; 6], 4, 0);
    let mut config = config(Backend::OpenAi, &base_url, requests.clone());
    config.endpoint = "/gated/v1/completions".to_owned();
    config.max_concurrency = Some(2);
    let finished = Arc::new(AtomicUsize::new(0));
    let counter = finished.clone();
    let progress: bench::Progress = Arc::new(move |_| {
        counter.fetch_add(1, Ordering::SeqCst);
    });
    let run = bench::run_with_progress(&config, progress).await.unwrap();
    assert_eq!(
        finished.load(Ordering::SeqCst),
        6,
        "progress sees every request"
    );

    check_timing(&run, &requests, 4, 4);
    assert_eq!(mock.in_flight_peak.load(Ordering::SeqCst), 2);
    let records = &run.records.requests;
    // First come, first served: sends follow arrival order.
    assert!(records.is_sorted_by_key(|r| r.send_ns));
    // The client never has more than two requests between send and end.
    for record in records {
        let active = records
            .iter()
            .filter(|r| r.send_ns <= record.send_ns && record.send_ns < r.end_ns)
            .count();
        assert!(active <= 2, "{active} requests in flight");
    }
    assert_eq!(summary(&run).completed, 6);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tgi_events_count_tokens() {
    let (base_url, mock) = start_mock().await;
    let requests = specs(&[12, 12, 12], 4, 3);
    let run = bench::run(&config(Backend::Tgi, &base_url, requests.clone()))
        .await
        .unwrap();

    check_timing(&run, &requests, 4, 4);
    assert_eq!(*mock.prompt_lens.lock().unwrap(), vec![12; 3]);
    let summary = summary(&run);
    assert_eq!(
        (
            summary.completed,
            summary.failed,
            summary.total_output_tokens
        ),
        (3, 0, 12)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failures_are_recorded_with_their_error() {
    let (base_url, _mock) = start_mock().await;
    let run_at = |endpoint: &str, inputs: &[u32], timeout: Duration| {
        let mut config = config(Backend::OpenAi, &base_url, specs(inputs, 3, 1));
        config.endpoint = endpoint.to_owned();
        config.request_timeout = timeout;
        async move { bench::run(&config).await.unwrap() }
    };
    let errors = |run: &BenchRun| -> Vec<String> {
        run.details
            .iter()
            .map(|d| d.error.clone().unwrap_or_default())
            .collect()
    };

    // Half the requests get 503: the summary counts only the others.
    let run = run_at(
        "/flaky/v1/completions",
        &[4, 5, 6, 7],
        Duration::from_secs(60),
    )
    .await;
    let flaky = summary(&run);
    assert_eq!(
        (flaky.completed, flaky.failed, flaky.total_output_tokens),
        (2, 2, 6)
    );
    assert_eq!(flaky.total_input_tokens, 10);
    let flaky_errors = errors(&run);
    assert!(flaky_errors[1].contains("503") && flaky_errors[1].contains("waiting queue is full"));
    assert!(flaky_errors[0].is_empty() && flaky_errors[2].is_empty());
    assert_eq!(
        run.records.itl_ns.len(),
        2 * 2,
        "failed requests add no ITL"
    );
    assert_eq!(run.failed(), 2);

    let run = run_at("/broken/v1/completions", &[4, 4], Duration::from_secs(60)).await;
    assert_eq!(run.failed(), 2);
    assert!(
        errors(&run).iter().all(|e| e.contains("engine crashed")),
        "{:?}",
        errors(&run)
    );
    assert_eq!(summary(&run).total_output_tokens, 0);

    let run = run_at("/slow/v1/completions", &[4], Duration::from_millis(100)).await;
    assert_eq!(run.failed(), 1);
    assert!(errors(&run)[0].contains("timed out"), "{:?}", errors(&run));
    let record = run.records.requests[0];
    assert!(record.end_ns >= record.send_ns + 100_000_000);
    // The stream's first event is a minute away: ended well before it, the timeout cut it.
    assert!(
        record.end_ns < record.send_ns + 30_000_000_000,
        "the timeout cut the request short"
    );

    let run = run_at("/missing", &[4], Duration::from_secs(60)).await;
    assert!(errors(&run)[0].contains("404"), "{:?}", errors(&run));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_connection_is_a_failed_request() {
    // A port that was just free: nothing listens there now.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let base_url = format!("http://{}", listener.local_addr().unwrap());
    drop(listener);
    let run = bench::run(&config(Backend::OpenAi, &base_url, specs(&[4], 2, 0)))
        .await
        .unwrap();
    assert_eq!(run.failed(), 1);
    assert!(
        run.details[0]
            .error
            .as_deref()
            .unwrap()
            .starts_with("request failed")
    );
}

#[tokio::test]
async fn bad_configurations_are_errors() {
    let mut config = config(Backend::OpenAi, "http://127.0.0.1:9", specs(&[4], 2, 0));
    config.max_concurrency = Some(0);
    assert!(matches!(
        bench::run(&config).await,
        Err(BenchError::ZeroConcurrency)
    ));
    config.max_concurrency = None;
    config.base_url = "https://example.com".to_owned();
    assert!(matches!(
        bench::run(&config).await,
        Err(BenchError::InvalidUrl { .. })
    ));
    config.base_url = "not a url".to_owned();
    assert!(matches!(
        bench::run(&config).await,
        Err(BenchError::InvalidUrl { .. })
    ));
}

/// `servesim bench` end to end: the binary against the mock, a two-point sweep, the vLLM block
/// printed per point, and `--save-result` JSON with vLLM's per-request arrays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_prints_vllm_blocks_and_saves_results() {
    let (base, _mock) = start_mock().await;
    let dir = tempfile::tempdir().unwrap();
    let result_dir = dir.path().to_path_buf();
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new(env!("CARGO_BIN_EXE_servesim"))
            .args(["bench", "--backend", "openai", "--base-url", &base, "--dataset-name", "random"])
            .args(["--random-input-len", "8", "--random-output-len", "5", "--num-prompts", "2,3"])
            .args(["--max-concurrency", "2", "--save-result", "--result-dir", result_dir.to_str().unwrap()])
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(stdout.matches("Serving Benchmark Result").count(), 2, "{stdout}");
    assert!(stdout.contains("Successful requests:                     3         \n"), "{stdout}");
    assert!(stdout.contains("Total generated tokens:                  15        \n"), "{stdout}");
    assert!(stdout.contains("Maximum request concurrency:             2         \n"), "{stdout}");
    let saved: Value = serde_json::from_str(&std::fs::read_to_string(dir.path().join("bench-openai-3.json")).unwrap()).unwrap();
    assert_eq!(saved["completed"], json!(3));
    assert_eq!(saved["output_lens"], json!([5, 5, 5]));
    assert_eq!(saved["itls"].as_array().unwrap().len(), 3);
    // The load is saved as vLLM saves it, so `servesim fit --results` reads the file as it is.
    assert_eq!((&saved["request_rate"], &saved["max_concurrency"], &saved["burstiness"]), (&json!("inf"), &json!(2), &json!(1.0)));
    let files = [dir.path().join("bench-openai-3.json")];
    let series = servesim::fit::results::read_series(&files, servesim::fit::results::Defaults { request_rate: None }).unwrap();
    let point = &series.points[0];
    assert_eq!((point.num_prompts, point.request_rate, point.max_concurrency), (3, f64::INFINITY, Some(2)));
    assert_eq!(point.metrics.get("completed"), Some(&3.0));
    // The per-request CSV beside it: simulate's requests.csv columns, one row per request.
    let csv = std::fs::read_to_string(dir.path().join("bench-openai-3.csv")).unwrap();
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines[0], "point,num_prompts,request_id,replica,send_s,first_token_s,end_s,input_tokens,output_tokens,preemptions,success,error");
    assert_eq!(lines.len(), 4, "{csv}");
    for (i, line) in lines[1..].iter().enumerate() {
        // The second sweep point (--num-prompts 2,3), of 3 requests.
        let cells: Vec<&str> = line.split(',').collect();
        assert_eq!((cells[0], cells[1], cells[2], cells[7], cells[8], cells[10], cells[11]), ("2", "3", &*i.to_string(), "8", "5", "true", ""), "{line}");
        let (send, first, end): (f64, f64, f64) = (cells[4].parse().unwrap(), cells[5].parse().unwrap(), cells[6].parse().unwrap());
        assert!(send <= first && first <= end, "{line}");
    }
}

/// `--dataset-name sharegpt`: lengths from a conversation file, counted with the tokenizer (the
/// shipped character-level one: one token per character), sent as prompts of those lengths.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_samples_sharegpt_lengths_with_the_tokenizer() {
    let (base, _mock) = start_mock().await;
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("sharegpt.json");
    std::fs::write(
        &data,
        r#"[{"conversations": [{"from": "human", "value": "abcde"}, {"from": "gpt", "value": "1234"}]},
            {"conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "too short a prompt"}]},
            {"conversations": [{"from": "human", "value": "abcdefg"}, {"from": "gpt", "value": "123456"}]}]"#,
    )
    .unwrap();
    let tokenizer = format!("{}/tokenizers/servesim-char-256", env!("CARGO_MANIFEST_DIR"));
    let run = |n: &'static str| {
        let (base, data, tokenizer) = (base.clone(), data.clone(), tokenizer.clone());
        tokio::task::spawn_blocking(move || {
            std::process::Command::new(env!("CARGO_BIN_EXE_servesim"))
                .args(["bench", "--backend", "openai", "--base-url", &base, "--dataset-name", "sharegpt"])
                .args(["--dataset-path", data.to_str().unwrap(), "--tokenizer", &tokenizer, "--num-prompts", n])
                .output()
                .unwrap()
        })
    };
    let out = run("2").await.unwrap();
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("Total input tokens:                      12        \n"), "{stdout}");
    assert!(stdout.contains("Total generated tokens:                  10        \n"), "{stdout}");
    // ShareGPT text cannot be counted without the server's tokenizer, nor read without a file.
    for (flag, args) in [("--tokenizer", vec!["--dataset-path", data.to_str().unwrap()]), ("--dataset-path", vec![])] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_servesim"))
            .args(["bench", "--base-url", &base, "--dataset-name", "sharegpt", "--num-prompts", "1"])
            .args(&args)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(err.contains(flag) && !err.contains("panicked"), "{err}");
    }
    // Only two conversations pass vLLM's filters.
    let out = run("3").await.unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("only 2 of its 3 conversations"), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn the_cli_rejects_bad_flags() {
    for args in [
        ["--backend", "grpc", "--num-prompts", "1"],
        ["--num-prompts", "0", "--request-rate", "inf"],
        ["--request-rate=-1", "--num-prompts", "1", "--seed=0"],
        ["--base-url", "https://x", "--num-prompts", "1"],
    ] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_servesim"))
            .args(["bench", "--random-input-len", "4", "--random-output-len", "2"])
            .args(args)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        let flag = args[0].split('=').next().unwrap();
        assert!(err.contains(flag), "the error names the flag {flag}: {err}");
        assert!(!err.contains("panicked"));
    }
}

/// `bench` refuses bad flags by their own names before sending anything, and exits 1 when no
/// request of a sweep point succeeded, printing the first error (issue 17).
#[test]
fn bench_names_bad_flags_and_fails_when_nothing_succeeds() {
    let servesim = |args: &[&str]| std::process::Command::new(env!("CARGO_BIN_EXE_servesim")).args(args).output().unwrap();
    let stderr = |out: &std::process::Output| String::from_utf8_lossy(&out.stderr).into_owned();
    // A port nobody listens on: bound, then released.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let base = format!("http://127.0.0.1:{port}");
    for (flag, value) in [("--max-concurrency", "0"), ("--random-input-len", "0"), ("--random-output-len", "0"), ("--num-prompts", "20000000")] {
        let out = servesim(&["bench", "--base-url", &base, flag, value]);
        assert_eq!(out.status.code(), Some(2), "{flag}: {}", stderr(&out));
        assert!(stderr(&out).contains(&format!("error: {flag}: \"{value}\"")), "{flag}: {}", stderr(&out));
    }
    let out = servesim(&["bench", "--base-url", &base, "--num-prompts", "3", "--random-input-len", "4", "--random-output-len", "2"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("3 request(s) failed; the first: ") && err.contains("no request succeeded at num_prompts 3"), "{err}");
}
