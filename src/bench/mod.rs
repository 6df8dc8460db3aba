//! `servesim bench`: an async load generator for any OpenAI-, TGI- or SGLang-compatible endpoint,
//! with the semantics of vLLM's `benchmark_serving.py`, or of SGLang's `bench_serving.py` (0.4.9)
//! for its backends.
//!
//! ```text
//!  Vec<RequestSpec> ──► dispatcher: sleep until arrival_ns ──► FIFO semaphore (max_concurrency)
//!                                                                │ permit; send time recorded
//!                                                                ▼
//!                          task per request: POST, stream SSE, time every chunk with output
//!                                                                │
//!   RunRecords (send, first token, end, tokens, ITL, 1-s token buckets) ──► crate::metrics
//! ```
//!
//! Every figure comes from [`crate::metrics`], the same code that summarises the simulator, so a
//! measured run and a simulated one compare one-to-one. Times are nanoseconds since the benchmark
//! started (just before the first request is dispatched).
//!
//! Definitions, as in vLLM: TTFT is the first chunk that carries output; ITL is every gap between
//! consecutive such chunks; output tokens are the server's `usage.completion_tokens` when it
//! reports them (OpenAI), else the generated text re-encoded by `--tokenizer` when one is given,
//! else the number of output chunks (one per token for TGI). A request
//! fails on an HTTP error status, a transport error, an error event in the stream, a timeout, or a
//! stream with no output; the failure keeps its error text.
//!
//! SGLang's client differs ([`Backend::Sglang`], [`Backend::SglangOai`]): its native stream's
//! ITL is per token, a chunk's gap split evenly over the tokens it adds (a chunk adding none is
//! skipped); output tokens are `meta_info.completion_tokens` (native) or, on the OpenAI route,
//! the usage of a chunk with text, else the `max_tokens` asked; the text is also re-encoded by
//! `--tokenizer` (its "retokenized" count). It sends warm-up requests first and waits 1 s, and
//! its duration ends after it asks the server for its speculative accept length.

pub mod protocol;
pub mod sse;

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use thiserror::Error;
use tokio::sync::Semaphore;
use tokio::time::Instant;

use crate::metrics::{RequestRecord, RunRecords, TokenBuckets, WeightedSamples};
use crate::workload::RequestSpec;

use protocol::{parse_chunk, request_body, truncate};
use sse::SseLines;

/// Which API the endpoint speaks, and whose client measures it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// OpenAI completions (`POST /v1/completions`, streaming), measured as vLLM's client does.
    OpenAi,
    /// Hugging Face TGI (`POST /generate_stream`).
    Tgi,
    /// SGLang's native `POST /generate`, streaming, measured as SGLang's client does.
    Sglang,
    /// OpenAI completions measured as SGLang's client does (its `sglang-oai`).
    SglangOai,
}

impl Backend {
    /// The endpoint the client uses for this backend.
    pub fn default_endpoint(self) -> &'static str {
        match self {
            Backend::OpenAi | Backend::SglangOai => "/v1/completions",
            Backend::Tgi => "/generate_stream",
            Backend::Sglang => "/generate",
        }
    }

    /// Parses vLLM's `--backend` names (`openai`, `vllm` — an alias vLLM also accepts — and `tgi`)
    /// and SGLang's (`sglang`, its alias `sglang-native`, and `sglang-oai`).
    pub fn parse(name: &str) -> Option<Backend> {
        match name {
            "openai" | "vllm" => Some(Backend::OpenAi),
            "tgi" => Some(Backend::Tgi),
            "sglang" | "sglang-native" => Some(Backend::Sglang),
            "sglang-oai" => Some(Backend::SglangOai),
            _ => None,
        }
    }

    /// Whether SGLang's client measures it (its definitions, its report).
    pub fn is_sglang(self) -> bool {
        matches!(self, Backend::Sglang | Backend::SglangOai)
    }
}

/// The most tokens a warm-up request asks for (SGLang's `min(output_len, 32)`).
const WARMUP_TOKENS_MAX: u32 = 32;

/// How long SGLang's client sleeps between its warm-up and the run.
const WARMUP_PAUSE: Duration = Duration::from_secs(1);

/// Everything one benchmark run needs.
#[derive(Clone, Debug)]
pub struct BenchConfig {
    pub backend: Backend,
    /// Scheme, host and port, e.g. `http://127.0.0.1:8000` (plain HTTP: no TLS is built in).
    pub base_url: String,
    /// Path appended to `base_url`; see [`Backend::default_endpoint`].
    pub endpoint: String,
    /// The `model` field of OpenAI requests.
    pub model: String,
    /// Requests in arrival order (as [`crate::workload::generate`] returns them).
    pub requests: Vec<RequestSpec>,
    /// Most requests in flight at once; `None` for no limit. Must not be 0.
    pub max_concurrency: Option<u32>,
    /// Ask the server to generate every request's `max_tokens` (OpenAI `ignore_eos`).
    pub ignore_eos: bool,
    /// Limit on one request from send to its last byte; past it the request fails.
    pub request_timeout: Duration,
    /// `--tokenizer`: prompts become text made by it, and output tokens without a server count
    /// are counted by re-encoding the generated text, as vLLM's client does.
    pub tokenizer: Option<Arc<crate::engine::server::Tokenizer>>,
    /// Requests sent before the run, all at once, each the first request asking at most 32
    /// tokens, followed by a 1 s pause: SGLang's warm-up. The run does not start unless one
    /// succeeds.
    pub warmup_requests: u32,
}

impl BenchConfig {
    /// A configuration with the backend's default endpoint, no concurrency limit, EOS honoured,
    /// and vLLM's 6-hour request timeout.
    pub fn new(
        backend: Backend,
        base_url: impl Into<String>,
        model: impl Into<String>,
        requests: Vec<RequestSpec>,
    ) -> Self {
        BenchConfig {
            backend,
            base_url: base_url.into(),
            endpoint: backend.default_endpoint().to_owned(),
            model: model.into(),
            requests,
            max_concurrency: None,
            ignore_eos: false,
            request_timeout: Duration::from_secs(6 * 60 * 60),
            tokenizer: None,
            warmup_requests: 0,
        }
    }

    /// `base_url` and `endpoint` joined with exactly one `/`.
    pub fn url(&self) -> String {
        let base = self.base_url.trim_end_matches('/');
        let endpoint = self.endpoint.trim_start_matches('/');
        format!("{base}/{endpoint}")
    }
}

/// A run that could not start. Failures of single requests are not errors: they are recorded.
#[derive(Debug, Error)]
pub enum BenchError {
    #[error("invalid URL {url:?}: {reason}")]
    InvalidUrl { url: String, reason: String },
    #[error("max_concurrency must be at least 1")]
    ZeroConcurrency,
    #[error("request_timeout must be positive")]
    ZeroTimeout,
    #[error("cannot build the HTTP client: {0}")]
    Client(String),
    #[error("a request task ended abnormally: {0}")]
    Task(String),
    #[error("every warm-up request failed; the first: {0}")]
    Warmup(String),
}

/// What the client saw of one request, beyond its [`RequestRecord`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RequestDetail {
    /// Gaps between consecutive output chunks, ns (SGLang's native backend: between tokens, a
    /// chunk's gap split over the tokens it added).
    pub itl_ns: Vec<u64>,
    /// Why the request failed; `None` on success.
    pub error: Option<String>,
    /// The generated text, as the stream carried it.
    pub text: String,
    /// SGLang's backends with a tokenizer: the text re-encoded (without special tokens).
    pub output_tokens_retokenized: Option<u32>,
}

/// The result of [`run`]: records for [`crate::metrics`] plus per-request details, both in the
/// order of [`BenchConfig::requests`].
#[derive(Clone, Debug, Default)]
pub struct BenchRun {
    pub records: RunRecords,
    pub details: Vec<RequestDetail>,
    /// SGLang's backends: the server's `avg_spec_accept_length` (`/get_server_info`), if it
    /// reports one.
    pub accept_length: Option<f64>,
}

impl BenchRun {
    /// Number of failed requests.
    pub fn failed(&self) -> usize {
        self.records.requests.iter().filter(|r| !r.success).count()
    }
}

/// Runs the benchmark: sends every request at its arrival time (delayed by the concurrency gate)
/// and measures the streamed responses.
///
/// # Errors
///
/// Only for a configuration that cannot run (bad URL, zero concurrency or timeout) or a request
/// task that panicked; request failures are recorded in the result instead.
pub async fn run(config: &BenchConfig) -> Result<BenchRun, BenchError> {
    run_with_progress(config, Arc::new(|_| {})).await
}

/// Called once per finished request (successful or not) with its index in
/// [`BenchConfig::requests`], from the task that ran it: drives a progress bar.
pub type Progress = Arc<dyn Fn(usize) + Send + Sync>;

/// [`run`], calling `progress` as each request finishes.
///
/// # Errors
///
/// As [`run`].
pub async fn run_with_progress(
    config: &BenchConfig,
    progress: Progress,
) -> Result<BenchRun, BenchError> {
    let url = config.url();
    let parsed = reqwest::Url::parse(&url).map_err(|e| BenchError::InvalidUrl {
        url: url.clone(),
        reason: e.to_string(),
    })?;
    if !matches!(parsed.scheme(), "http") {
        return Err(BenchError::InvalidUrl {
            url,
            reason: "only http:// is supported (no TLS is built in)".to_owned(),
        });
    }
    if config.max_concurrency == Some(0) {
        return Err(BenchError::ZeroConcurrency);
    }
    if config.request_timeout.is_zero() {
        return Err(BenchError::ZeroTimeout);
    }
    let client = reqwest::Client::builder()
        .build()
        .map_err(|e| BenchError::Client(e.to_string()))?;
    // tokio's semaphore is fair: permits go out in the order acquire was called. The dispatcher
    // acquires in arrival order, so requests are sent first come, first served, like asyncio's.
    let gate = config
        .max_concurrency
        .map(|n| Arc::new(Semaphore::new(n as usize)));
    let shared = Arc::new(Shared {
        backend: config.backend,
        url,
        client,
        timeout: config.request_timeout,
    });
    warm_up(config, &shared).await?;

    let start = Instant::now();
    let mut tasks = Vec::with_capacity(config.requests.len());
    for (index, spec) in config.requests.iter().enumerate() {
        tokio::time::sleep_until(start + Duration::from_nanos(spec.arrival_ns)).await;
        let body = request_body(config.backend, &config.model, index, spec, config.ignore_eos, config.tokenizer.as_deref());
        // A prompt that cannot be made fails its request (before sending), not the run.
        let (body, input_tokens) = match body {
            Ok((body, tokens)) => (Ok(body), tokens),
            Err(e) => (Err(e), spec.input_tokens),
        };
        let permit = match &gate {
            // The semaphore is never closed, so acquire cannot fail.
            Some(gate) => Some(
                gate.clone()
                    .acquire_owned()
                    .await
                    .expect("semaphore never closed"),
            ),
            None => None,
        };
        // The send time is taken here, in the dispatcher, after the gate: sends are then
        // timestamped in the order they were allowed, whichever worker thread runs the task.
        let send_at = Instant::now();
        let shared = shared.clone();
        let progress = progress.clone();
        let max_tokens = spec.max_tokens;
        tasks.push(tokio::spawn(async move {
            let outcome = send(&shared, body, start, send_at, input_tokens, max_tokens).await;
            drop(permit);
            progress(index);
            outcome
        }));
    }
    let mut outcomes = Vec::with_capacity(tasks.len());
    for task in tasks {
        outcomes.push(task.await.map_err(|e| BenchError::Task(e.to_string()))?);
    }
    // SGLang's client asks for the accept length before it reads the clock for the duration.
    let accept_length = if config.backend.is_sglang() { server_accept_length(&shared.client, &config.base_url).await } else { None };
    let finished_ns = u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX);
    let mut run = assemble(outcomes, config.tokenizer.as_deref(), config.backend);
    if config.backend.is_sglang() {
        run.records.duration_ns = finished_ns;
        run.accept_length = accept_length;
    }
    Ok(run)
}

/// SGLang's warm-up: [`BenchConfig::warmup_requests`] copies of the first request, at most
/// 32 tokens each, sent at once; then a 1 s pause. Fails when none succeeds.
async fn warm_up(config: &BenchConfig, shared: &Shared) -> Result<(), BenchError> {
    let Some(first) = config.requests.first().filter(|_| config.warmup_requests > 0) else {
        return Ok(());
    };
    let spec = RequestSpec { max_tokens: first.max_tokens.min(WARMUP_TOKENS_MAX), ..first.clone() };
    let start = Instant::now();
    let sends = (0..config.warmup_requests).map(|_| {
        let body = request_body(config.backend, &config.model, 0, &spec, config.ignore_eos, config.tokenizer.as_deref())
            .map(|(body, _)| body);
        send(shared, body, start, start, spec.input_tokens, spec.max_tokens)
    });
    let outcomes = futures_util::future::join_all(sends).await;
    if outcomes.iter().all(|o| o.error.is_some()) {
        return Err(BenchError::Warmup(outcomes.into_iter().find_map(|o| o.error).unwrap_or_default()));
    }
    tokio::time::sleep(WARMUP_PAUSE).await;
    Ok(())
}

/// The server's `internal_states[0].avg_spec_accept_length` from SGLang's `/get_server_info`;
/// `None` for any other answer (SGLang's client too reports none for a status other than 200).
async fn server_accept_length(client: &reqwest::Client, base_url: &str) -> Option<f64> {
    let url = format!("{}/get_server_info", base_url.trim_end_matches('/'));
    let response = client.get(url).send().await.ok().filter(|r| r.status().is_success())?;
    let info: serde_json::Value = response.json().await.ok()?;
    info.get("internal_states")?.get(0)?.get("avg_spec_accept_length")?.as_f64()
}

/// What every request task shares.
struct Shared {
    backend: Backend,
    url: String,
    client: reqwest::Client,
    timeout: Duration,
}

/// One request's raw measurements, ns since the benchmark start.
struct Outcome {
    send_ns: u64,
    /// Arrival time of every chunk with output, in order.
    token_times_ns: Vec<u64>,
    /// Tokens each of those chunks added (SGLang's native stream says; 1 for the others).
    chunk_tokens: Vec<u32>,
    /// The request's `max_tokens`: SGLang's OpenAI client counts it as the output when the
    /// server reports no usage beside text.
    max_tokens: u32,
    /// The server's count of generated tokens, if it gave one.
    completion_tokens: Option<u32>,
    /// Generated text, as the stream carried it.
    text: String,
    end_ns: u64,
    input_tokens: u32,
    error: Option<String>,
}

/// Sends one request and streams its response, never failing: errors end up in the outcome.
async fn send(
    shared: &Shared,
    body: Result<serde_json::Value, String>,
    start: Instant,
    send_at: Instant,
    input_tokens: u32,
    max_tokens: u32,
) -> Outcome {
    let since_start = |t: Instant| u64::try_from((t - start).as_nanos()).unwrap_or(u64::MAX);
    let mut outcome = Outcome {
        send_ns: since_start(send_at),
        token_times_ns: Vec::new(),
        chunk_tokens: Vec::new(),
        max_tokens,
        completion_tokens: None,
        text: String::new(),
        end_ns: 0,
        input_tokens,
        error: None,
    };
    let result = match body {
        Ok(body) => {
            tokio::time::timeout_at(
                send_at + shared.timeout,
                stream(shared, body, &mut outcome, &since_start),
            )
            .await
        }
        Err(e) => Ok(Err(e)),
    };
    outcome.error = match result {
        Err(_) => Some(format!("request timed out after {:?}", shared.timeout)),
        Ok(Err(e)) => Some(e),
        // vLLM: a stream that ends without output never yields a TTFT, so it is a failure.
        Ok(Ok(())) if outcome.token_times_ns.is_empty() => {
            Some("never received a chunk with output to calculate TTFT".to_owned())
        }
        Ok(Ok(())) => None,
    };
    outcome.end_ns = since_start(Instant::now());
    outcome
}

/// Posts the request and reads its stream into `outcome` until the end or an error.
async fn stream(
    shared: &Shared,
    body: serde_json::Value,
    outcome: &mut Outcome,
    since_start: &impl Fn(Instant) -> u64,
) -> Result<(), String> {
    let response = shared
        .client
        .post(&shared.url)
        .json(&body)
        .send()
        .await
        .map_err(|e| format!("request failed: {}", error_chain(&e)))?;
    let status = response.status();
    if !status.is_success() {
        let text = response.text().await.unwrap_or_default();
        return Err(format!("HTTP {status}: {}", truncate(&text)));
    }
    let mut lines = SseLines::new();
    let mut payloads = Vec::new();
    let mut bytes = response.bytes_stream();
    while let Some(chunk) = bytes.next().await {
        let chunk = chunk.map_err(|e| format!("stream broke: {}", error_chain(&e)))?;
        // One timestamp per network chunk, as vLLM's client takes it: lines that arrive
        // together arrived at the same time.
        let now_ns = since_start(Instant::now());
        lines.feed(&chunk, &mut payloads)?;
        for payload in payloads.drain(..) {
            if apply(shared.backend, &payload, now_ns, outcome)? {
                return Ok(());
            }
        }
    }
    if let Some(payload) = lines.finish()? {
        apply(
            shared.backend,
            &payload,
            since_start(Instant::now()),
            outcome,
        )?;
    }
    Ok(())
}

/// Applies one payload to `outcome`; `Ok(true)` when the stream is complete.
fn apply(
    backend: Backend,
    payload: &str,
    now_ns: u64,
    outcome: &mut Outcome,
) -> Result<bool, String> {
    let chunk = parse_chunk(backend, payload);
    if let Some(error) = chunk.error {
        return Err(error);
    }
    if backend == Backend::Sglang {
        apply_sglang(chunk, now_ns, outcome);
        return Ok(false);
    }
    if chunk.token {
        outcome.token_times_ns.push(now_ns);
        outcome.chunk_tokens.push(1);
    }
    if let Some(tokens) = chunk.completion_tokens {
        outcome.completion_tokens = Some(tokens);
    }
    if let Some(text) = chunk.text {
        outcome.text.push_str(&text);
    }
    Ok(chunk.done)
}

/// A chunk of SGLang's native stream, as its client reads one: the text and count replace the
/// ones before; the first chunk with text is the first token; a later one is timed with the
/// tokens it added, and skipped (no timestamp) when it added none. `[DONE]` ends nothing
/// early: the stream's end does.
fn apply_sglang(chunk: protocol::Chunk, now_ns: u64, outcome: &mut Outcome) {
    if !chunk.token {
        return;
    }
    let before = outcome.completion_tokens.unwrap_or(0);
    let total = chunk.completion_tokens.unwrap_or(before);
    if let Some(text) = chunk.whole_text {
        outcome.text = text;
    }
    outcome.completion_tokens = Some(total);
    let added = if outcome.token_times_ns.is_empty() { total } else { total.saturating_sub(before) };
    if outcome.token_times_ns.is_empty() || added > 0 {
        outcome.token_times_ns.push(now_ns);
        outcome.chunk_tokens.push(added);
    }
}

/// reqwest's error with its sources, so "error sending request" says why (refused, reset, ...).
fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// Turns outcomes into [`RunRecords`] the way vLLM's `calculate_metrics` reads its outputs.
/// Output tokens: the server's count if it gave one, else the generated text re-encoded by
/// `tokenizer` (vLLM's `len(tokenizer(text, add_special_tokens=False).input_ids)`), else the
/// number of output chunks.
fn assemble(
    mut outcomes: Vec<Outcome>,
    tokenizer: Option<&crate::engine::server::Tokenizer>,
    backend: Backend,
) -> BenchRun {
    let mut text_tokens = vec![None; outcomes.len()];
    if let Some(t) = tokenizer {
        for (outcome, count) in outcomes.iter_mut().zip(&mut text_tokens) {
            // SGLang's client re-encodes every text (its retokenized count); vLLM's only those
            // without a server count.
            if outcome.error.is_none() && (backend.is_sglang() || outcome.completion_tokens.is_none()) {
                match t.encode(&outcome.text, false) {
                    Ok(ids) => *count = Some(u32::try_from(ids.len()).unwrap_or(u32::MAX)),
                    Err(e) => outcome.error = Some(e),
                }
            }
        }
    }
    let mut itl_ns = WeightedSamples::new();
    let mut tokens_per_second = TokenBuckets::new();
    // vLLM's peak-throughput buckets start at the earliest send of a successful request.
    let origin_ns = outcomes
        .iter()
        .filter(|o| o.error.is_none())
        .map(|o| o.send_ns)
        .min()
        .unwrap_or(0);
    let mut requests = Vec::with_capacity(outcomes.len());
    let mut details = Vec::with_capacity(outcomes.len());
    for (outcome, text_tokens) in outcomes.iter().zip(text_tokens) {
        let success = outcome.error.is_none();
        let gaps_ns: Vec<u64> = match backend {
            // SGLang's native client: each token of a chunk gets an equal share of its gap.
            Backend::Sglang => outcome
                .token_times_ns
                .windows(2)
                .zip(&outcome.chunk_tokens[1..])
                .flat_map(|(w, &n)| std::iter::repeat_n(share_ns(w[1] - w[0], n), n as usize))
                .collect(),
            _ => outcome.token_times_ns.windows(2).map(|w| w[1] - w[0]).collect(),
        };
        // Only successful requests contribute to ITL and token buckets, as in vLLM.
        if success {
            gaps_ns.iter().for_each(|&gap| itl_ns.push(gap));
            for (&time_ns, &tokens) in outcome.token_times_ns.iter().zip(&outcome.chunk_tokens) {
                tokens_per_second.add(time_ns.saturating_sub(origin_ns), u64::from(tokens));
            }
        }
        let chunks = u32::try_from(outcome.token_times_ns.len()).unwrap_or(u32::MAX);
        requests.push(RequestRecord {
            send_ns: outcome.send_ns,
            first_token_ns: outcome.token_times_ns.first().copied(),
            end_ns: outcome.end_ns,
            input_tokens: outcome.input_tokens,
            output_tokens: match (success, backend) {
                (false, _) => 0,
                (true, Backend::Sglang) => outcome.completion_tokens.unwrap_or(chunks),
                (true, Backend::SglangOai) => outcome.completion_tokens.unwrap_or(outcome.max_tokens),
                (true, Backend::OpenAi | Backend::Tgi) => outcome.completion_tokens.or(text_tokens).unwrap_or(chunks),
            },
            success,
        });
        details.push(RequestDetail {
            itl_ns: gaps_ns,
            error: outcome.error.clone(),
            text: outcome.text.clone(),
            output_tokens_retokenized: text_tokens.filter(|_| backend.is_sglang() && success),
        });
    }
    // vLLM: duration runs from the benchmark start to the moment every request has finished.
    let duration_ns = outcomes.iter().map(|o| o.end_ns).max().unwrap_or(0);
    BenchRun {
        records: RunRecords {
            requests,
            itl_ns,
            tokens_per_second,
            duration_ns,
        },
        details,
        accept_length: None,
    }
}

/// `gap_ns / tokens`, rounded to the nearest ns (SGLang divides in floating point).
fn share_ns(gap_ns: u64, tokens: u32) -> u64 {
    let tokens = u64::from(tokens.max(1));
    (gap_ns + tokens / 2) / tokens
}
