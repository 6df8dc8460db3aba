//! The HTTP front end (axum): OpenAI completions, TGI generate, health and Prometheus metrics.
//!
//! SSE bodies are written by hand so that every line is exactly `data: {json}` (OpenAI) or
//! `data:{json}` (TGI, as TGI itself writes), with no comment or keep-alive lines.

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use futures_util::{StreamExt, stream};
use serde_json::{Value, json};
use tokio::sync::Semaphore;

use super::connection::{Drained, serve_app};
use super::engine::{EngineHandle, Event, FinishReason, GenerateParams, RequestStream, STEP_TIME_BUCKETS_S};
use super::limits::{REQUEST_BODY_BYTES_MAX, ServerLimits};
use super::request::{Api, ApiError, MODEL_NAME_ALIAS, ParsedRequest, PromptInput, ReplyOptions, error_body, parse_request};
use super::tokenizer::{StreamDecoder, Tokenizer};

/// Seconds a client is asked to wait after a 503 (`Retry-After`): about a few engine steps.
const RETRY_AFTER_S: &str = "1";

/// Serves the engine on `listener` with the default [`ServerLimits`] until `shutdown`
/// completes (e.g. on SIGTERM); see [`serve_with`].
pub async fn serve(listener: tokio::net::TcpListener, engine: EngineHandle, shutdown: impl Future<Output = ()> + Send + 'static) -> std::io::Result<()> {
    serve_with(listener, engine, ServerLimits::default(), shutdown).await;
    Ok(())
}

/// Serves the engine on `listener` until `shutdown` completes; then stops accepting, lets
/// requests in flight finish for at most `limits.drain_timeout`, and closes every connection.
pub async fn serve_with(
    listener: tokio::net::TcpListener,
    engine: EngineHandle,
    limits: ServerLimits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Drained {
    serve_app(listener, router_with(engine, limits), limits, shutdown).await
}

/// The routes with the default [`ServerLimits`], for callers that want to embed them.
pub fn router(engine: EngineHandle) -> Router {
    router_with(engine, ServerLimits::default())
}

/// What every handler sees.
#[derive(Clone)]
struct Front {
    engine: EngineHandle,
    limits: ServerLimits,
    /// One permit a core: tokenizing is CPU work, and a burst of long text prompts must queue
    /// rather than each take a thread and its memory at once.
    tokenizing: Arc<Semaphore>,
}

/// The routes under `limits`.
pub fn router_with(engine: EngineHandle, limits: ServerLimits) -> Router {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let front = Front { engine, limits, tokenizing: Arc::new(Semaphore::new(cores)) };
    Router::new()
        .route("/v1/completions", post(completions))
        .route("/v1/models", get(models))
        .route("/generate", post(generate))
        .route("/generate_stream", post(generate_stream))
        .route("/health", get(health))
        .route("/metrics", get(metrics))
        .fallback(not_found)
        // The body is already whole and within the limit (read_body); the extractor's own
        // default limit (2 MB) must not cut it shorter.
        .layer(axum::extract::DefaultBodyLimit::max(REQUEST_BODY_BYTES_MAX))
        .layer(middleware::from_fn_with_state(limits, read_body))
        .layer(middleware::map_response(json_errors))
        .with_state(front)
}

fn error_response(status: StatusCode, message: &str) -> Response {
    let mut response = (status, [(header::CONTENT_TYPE, "application/json")], error_body(status, message)).into_response();
    if status == StatusCode::SERVICE_UNAVAILABLE {
        response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static(RETRY_AFTER_S));
    }
    response
}

async fn not_found(method: Method, uri: Uri) -> Response {
    error_response(StatusCode::NOT_FOUND, &format!("no route for {method} {}", uri.path()))
}

/// Every error status gets a JSON body: axum's own (405, a rejected extractor) come as plain
/// text or nothing, and keep their other headers (405's `Allow`).
async fn json_errors(response: Response) -> Response {
    let status = response.status();
    let is_json = response.headers().get(header::CONTENT_TYPE).is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
    if !(status.is_client_error() || status.is_server_error()) || is_json {
        return response;
    }
    let (parts, body) = response.into_parts();
    // axum's rejection texts are a line or two; anything longer is cut.
    let text = axum::body::to_bytes(body, 4096).await.map(|b| String::from_utf8_lossy(&b).trim().to_string()).unwrap_or_default();
    let message = if text.is_empty() { status.canonical_reason().unwrap_or("error").to_string() } else { text };
    let mut json = error_response(status, &message);
    for (name, value) in &parts.headers {
        if name != header::CONTENT_TYPE && name != header::CONTENT_LENGTH {
            json.headers_mut().insert(name, value.clone());
        }
    }
    json
}

/// Reads the whole request body before any handler runs: at most [`REQUEST_BODY_BYTES_MAX`]
/// bytes (413), within `limits.body_read_timeout` (408), and well framed (400).
async fn read_body(State(limits): State<ServerLimits>, request: Request, next: Next) -> Response {
    let (parts, body) = request.into_parts();
    let too_large = || {
        error_response(StatusCode::PAYLOAD_TOO_LARGE, &format!("the request body is larger than {REQUEST_BODY_BYTES_MAX} bytes"))
    };
    // A declared length over the limit is refused before a byte of it is read.
    if content_length(&parts.headers).is_some_and(|n| n > REQUEST_BODY_BYTES_MAX as u64) {
        return too_large();
    }
    let read = async {
        let mut data = Vec::new();
        let mut chunks = body.into_data_stream();
        while let Some(chunk) = chunks.next().await {
            let chunk = chunk.map_err(|e| error_response(StatusCode::BAD_REQUEST, &format!("malformed request body: {}", error_chain(&e))))?;
            if data.len() + chunk.len() > REQUEST_BODY_BYTES_MAX {
                return Err(too_large());
            }
            data.extend_from_slice(&chunk);
        }
        Ok(data)
    };
    match tokio::time::timeout(limits.body_read_timeout, read).await {
        Ok(Ok(data)) => next.run(Request::from_parts(parts, Body::from(data))).await,
        Ok(Err(response)) => response,
        Err(_) => error_response(
            StatusCode::REQUEST_TIMEOUT,
            &format!("the request body did not arrive within {} s", limits.body_read_timeout.as_secs_f64()),
        ),
    }
}

/// An error and its sources: hyper's framing errors say what was wrong only in a source.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        // axum's wrapper repeats its source's text.
        let part = s.to_string();
        if !text.ends_with(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
        source = s.source();
    }
    text
}

fn content_length(headers: &HeaderMap) -> Option<u64> {
    headers.get(header::CONTENT_LENGTH)?.to_str().ok()?.trim().parse().ok()
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        error_response(self.status, &self.message)
    }
}

fn unix_time_s() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

fn sse_response<S>(events: S) -> Response
where
    S: futures_util::Stream<Item = Result<Bytes, Infallible>> + Send + 'static,
{
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "text/event-stream")
        .header(header::CACHE_CONTROL, "no-cache")
        .body(Body::from_stream(events))
        .unwrap_or_else(|_| error_response(StatusCode::INTERNAL_SERVER_ERROR, "response"))
}

// ---------------------------------------------------------------- OpenAI

/// Parses, tokenizes and queues a request of `api`: its stream of events, what the response
/// needs, and the prompt's length in tokens.
async fn submit(front: &Front, api: Api, body: &[u8]) -> Result<(RequestStream, ReplyOptions, u32), ApiError> {
    let ParsedRequest { prompt, max_tokens, ignore_eos, sampling, reply } =
        parse_request(api, body, front.engine.model_name(), front.limits.prompt_bytes_max)?;
    let prompt = match prompt {
        PromptInput::Text(text) => tokenize(front, text).await?,
        PromptInput::Tokens(ids) => ids,
    };
    let prompt_len = prompt.len() as u32;
    let stream = front.engine.submit(GenerateParams { prompt, max_tokens, ignore_eos, sampling }).await?;
    Ok((stream, reply, prompt_len))
}

/// The ids of a text prompt (already within the byte limit: [`parse_request`]). Tokenizing runs
/// on a blocking thread: a long prompt takes seconds, and on an async worker it would stall every
/// other request that worker serves.
async fn tokenize(front: &Front, text: String) -> Result<Vec<u32>, ApiError> {
    let internal = |e: String| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e);
    // The permit goes with the work: a client that leaves does not stop its tokenizing.
    let permit = front.tokenizing.clone().acquire_owned().await.map_err(|e| internal(e.to_string()))?;
    let tokenizer = front.engine.tokenizer().clone();
    let encoded = tokio::task::spawn_blocking(move || {
        let ids = tokenizer.encode(&text, true);
        drop(permit);
        ids
    });
    encoded.await.map_err(|e| internal(format!("the tokenizer failed: {e}")))?.map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, e))
}

// ---------------------------------------------------------------- OpenAI

async fn completions(State(front): State<Front>, body: Bytes) -> Response {
    let (stream, reply, prompt_len) = match submit(&front, Api::Completions, &body).await {
        Ok(x) => x,
        Err(e) => return e.into_response(),
    };
    let engine = &front.engine;
    let id = format!("cmpl-{}", stream.id());
    let model = reply.model.unwrap_or_else(|| engine.model_name().to_string());
    let created = unix_time_s();
    let decoder = StreamDecoder::new(engine.tokenizer().clone());
    if reply.stream {
        completion_stream(stream, decoder, id, model, created, prompt_len, reply.include_usage)
    } else {
        completion_whole(stream, decoder, id, model, created, prompt_len).await
    }
}

async fn completion_whole(mut stream: RequestStream, mut decoder: StreamDecoder, id: String, model: String, created: u64, prompt_len: u32) -> Response {
    let mut text = String::new();
    let mut completion_tokens = 0u32;
    let mut finish_reason = None;
    while let Some(event) = stream.events.recv().await {
        match event {
            Event::Tokens { ids, finish } => {
                completion_tokens += ids.len() as u32;
                for id in ids {
                    match decoder.push(id) {
                        Ok(piece) => text.push_str(&piece),
                        Err(m) => return error_response(StatusCode::INTERNAL_SERVER_ERROR, &m),
                    }
                }
                if let Some(f) = finish {
                    finish_reason = Some(f);
                    break;
                }
            }
            Event::Error(m) => return error_response(StatusCode::INTERNAL_SERVER_ERROR, &m),
        }
    }
    match decoder.flush() {
        Ok(rest) => text.push_str(&rest),
        Err(m) => return error_response(StatusCode::INTERNAL_SERVER_ERROR, &m),
    }
    let body = json!({
        "id": id, "object": "text_completion", "created": created, "model": model,
        "choices": [{"index": 0, "text": text, "logprobs": null, "finish_reason": finish_reason.map(FinishReason::as_str)}],
        "usage": {"prompt_tokens": prompt_len, "completion_tokens": completion_tokens, "total_tokens": prompt_len + completion_tokens},
    });
    (StatusCode::OK, [(header::CONTENT_TYPE, "application/json")], body.to_string()).into_response()
}

fn data_line(v: &Value) -> Bytes {
    Bytes::from(format!("data: {v}\n\n"))
}

struct OpenAiStream {
    stream: RequestStream,
    decoder: StreamDecoder,
    id: String,
    model: String,
    created: u64,
    prompt_len: u32,
    completion_tokens: u32,
    include_usage: bool,
    /// 0: tokens, 1: usage (if asked), 2: [DONE], 3: over.
    phase: u8,
}

fn completion_stream(stream: RequestStream, decoder: StreamDecoder, id: String, model: String, created: u64, prompt_len: u32, include_usage: bool) -> Response {
    let state = OpenAiStream { stream, decoder, id, model, created, prompt_len, completion_tokens: 0, include_usage, phase: 0 };
    sse_response(stream::unfold(state, |mut s| async move {
        loop {
            match s.phase {
                0 => match s.stream.events.recv().await {
                    Some(Event::Tokens { ids, finish }) => {
                        // The tokens the engine delivers together (a multi-step window's) go out
                        // as one chunk, as vLLM's server streams a window's output.
                        let mut text = String::new();
                        let last = ids.len().saturating_sub(1);
                        for (i, id) in ids.into_iter().enumerate() {
                            s.completion_tokens += 1;
                            match decoded(&mut s.decoder, id, i == last && finish.is_some()) {
                                Ok(piece) => text.push_str(&piece),
                                Err(m) => {
                                    s.phase = 2;
                                    return Some((Ok(data_line(&openai_error(&m))), s));
                                }
                            }
                        }
                        if finish.is_some() {
                            s.phase = 1;
                        }
                        let chunk = json!({
                            "id": s.id, "object": "text_completion", "created": s.created, "model": s.model,
                            "choices": [{"index": 0, "text": text, "logprobs": null, "finish_reason": finish.map(FinishReason::as_str)}],
                        });
                        return Some((Ok(data_line(&chunk)), s));
                    }
                    Some(Event::Error(m)) => {
                        s.phase = 2;
                        return Some((Ok(data_line(&openai_error(&m))), s));
                    }
                    None => s.phase = 2,
                },
                1 => {
                    s.phase = 2;
                    if s.include_usage {
                        let chunk = json!({
                            "id": s.id, "object": "text_completion", "created": s.created, "model": s.model, "choices": [],
                            "usage": {"prompt_tokens": s.prompt_len, "completion_tokens": s.completion_tokens, "total_tokens": s.prompt_len + s.completion_tokens},
                        });
                        return Some((Ok(data_line(&chunk)), s));
                    }
                }
                2 => {
                    s.phase = 3;
                    return Some((Ok(Bytes::from_static(b"data: [DONE]\n\n")), s));
                }
                _ => return None,
            }
        }
    }))
}

/// An error event inside an OpenAI stream.
fn openai_error(message: &str) -> Value {
    json!({"error": {"message": message, "type": "server_error", "code": 500}})
}

/// The text a streamed token adds: what became stable, plus everything held back on the last.
fn decoded(decoder: &mut StreamDecoder, id: u32, last: bool) -> Result<String, String> {
    let mut text = decoder.push(id)?;
    if last {
        text.push_str(&decoder.flush()?);
    }
    Ok(text)
}

async fn models(State(front): State<Front>) -> Response {
    let engine = &front.engine;
    let mut names = vec![engine.model_name()];
    if engine.model_name() != MODEL_NAME_ALIAS {
        names.push(MODEL_NAME_ALIAS);
    }
    let data: Vec<Value> = names
        .iter()
        .map(|name| json!({"id": name, "object": "model", "created": 0, "owned_by": "servesim", "max_model_len": engine.context_len()}))
        .collect();
    let body = json!({"object": "list", "data": data});
    (StatusCode::OK, [(header::CONTENT_TYPE, "application/json")], body.to_string()).into_response()
}

// ---------------------------------------------------------------- TGI

fn tgi_token(tokenizer: &Tokenizer, id: u32) -> Value {
    json!({"id": id, "text": tokenizer.token_text(id), "logprob": 0.0, "special": tokenizer.is_special(id)})
}

async fn generate(State(front): State<Front>, body: Bytes) -> Response {
    let (mut stream, p, _) = match submit(&front, Api::Generate, &body).await {
        Ok(x) => x,
        Err(e) => return e.into_response(),
    };
    let tokenizer = front.engine.tokenizer();
    let mut decoder = StreamDecoder::new(tokenizer.clone());
    let mut text = String::new();
    let mut tokens = Vec::new();
    let mut finish_reason = FinishReason::Length;
    while let Some(event) = stream.events.recv().await {
        match event {
            Event::Tokens { ids, finish } => {
                let last = ids.len().saturating_sub(1);
                for (i, id) in ids.into_iter().enumerate() {
                    tokens.push(tgi_token(tokenizer, id));
                    match decoded(&mut decoder, id, i == last && finish.is_some()) {
                        Ok(piece) => text.push_str(&piece),
                        Err(m) => return error_response(StatusCode::INTERNAL_SERVER_ERROR, &m),
                    }
                }
                if let Some(f) = finish {
                    finish_reason = f;
                    break;
                }
            }
            Event::Error(m) => return error_response(StatusCode::INTERNAL_SERVER_ERROR, &m),
        }
    }
    let mut body = json!({"generated_text": text});
    if p.details {
        body["details"] = json!({
            "finish_reason": finish_reason.tgi_str(), "generated_tokens": tokens.len(), "seed": p.seed, "prefill": [], "tokens": tokens,
        });
    }
    (StatusCode::OK, [(header::CONTENT_TYPE, "application/json")], body.to_string()).into_response()
}

struct TgiStream {
    stream: RequestStream,
    decoder: StreamDecoder,
    tokenizer: std::sync::Arc<Tokenizer>,
    text: String,
    generated: u32,
    seed: Option<u64>,
    done: bool,
    /// Tokens received and not yet streamed, with the finish reason of the last: TGI streams
    /// one event per token, even where the engine delivers several at once.
    queued: std::collections::VecDeque<(u32, Option<FinishReason>)>,
}

async fn generate_stream(State(front): State<Front>, body: Bytes) -> Response {
    let (stream, p, _) = match submit(&front, Api::Generate, &body).await {
        Ok(x) => x,
        Err(e) => return e.into_response(),
    };
    let tokenizer = front.engine.tokenizer().clone();
    let state = TgiStream { stream, decoder: StreamDecoder::new(tokenizer.clone()), tokenizer, text: String::new(), generated: 0, seed: p.seed, done: false, queued: Default::default() };
    sse_response(stream::unfold(state, |mut s| async move {
        if s.done {
            return None;
        }
        if s.queued.is_empty() {
            match s.stream.events.recv().await {
                Some(Event::Tokens { ids, finish }) => {
                    let last = ids.len().saturating_sub(1);
                    s.queued.extend(ids.into_iter().enumerate().map(|(i, id)| (id, if i == last { finish } else { None })));
                }
                Some(Event::Error(m)) => {
                    s.done = true;
                    return Some((Ok(Bytes::from(format!("data:{}\n\n", json!({"error": m, "error_type": "generation"})))), s));
                }
                None => return None,
            }
        }
        let line = match s.queued.pop_front() {
            Some((id, finish)) => {
                s.generated += 1;
                match decoded(&mut s.decoder, id, finish.is_some()) {
                    Ok(piece) => s.text.push_str(&piece),
                    Err(m) => {
                        s.done = true;
                        return Some((Ok(Bytes::from(format!("data:{}\n\n", json!({"error": m, "error_type": "generation"})))), s));
                    }
                }
                let token = tgi_token(&s.tokenizer, id);
                let index = s.generated;
                match finish {
                    None => json!({"index": index, "token": token, "top_tokens": null, "generated_text": null, "details": null}),
                    Some(f) => {
                        s.done = true;
                        json!({"index": index, "token": token, "top_tokens": null, "generated_text": s.text,
                               "details": {"finish_reason": f.tgi_str(), "generated_tokens": s.generated, "seed": s.seed}})
                    }
                }
            }
            // An engine delivery holds at least one token.
            None => return None,
        };
        Some((Ok(Bytes::from(format!("data:{line}\n\n"))), s))
    }))
}

// ---------------------------------------------------------------- health, metrics

async fn health() -> Response {
    (StatusCode::OK, [(header::CONTENT_TYPE, "application/json")], "{}").into_response()
}

async fn metrics(State(front): State<Front>) -> Response {
    use std::fmt::Write;
    let s = front.engine.stats();
    let mut out = String::new();
    let mut gauge = |name: &str, help: &str, v: f64| {
        let _ = write!(out, "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {v}\n");
    };
    gauge("servesim_num_requests_running", "Sequences in the running batch.", s.running as f64);
    gauge("servesim_num_requests_waiting", "Sequences waiting to be scheduled.", s.waiting as f64);
    gauge("servesim_kv_cache_blocks_used", "KV-cache blocks allocated.", s.kv_blocks_used as f64);
    gauge("servesim_kv_cache_blocks_total", "KV-cache blocks in the pool.", s.kv_blocks_total as f64);
    let usage = if s.kv_blocks_total == 0 { 0.0 } else { s.kv_blocks_used as f64 / s.kv_blocks_total as f64 };
    gauge("servesim_kv_cache_usage_ratio", "Fraction of KV-cache blocks allocated (0 to 1).", usage);
    let mut counter = |name: &str, help: &str, v: u64| {
        let _ = write!(out, "# HELP {name} {help}\n# TYPE {name} counter\n{name} {v}\n");
    };
    counter("servesim_requests_finished_total", "Requests that finished (length or stop).", s.requests_finished_total);
    counter("servesim_requests_cancelled_total", "Requests cancelled by a client disconnect.", s.requests_cancelled_total);
    counter("servesim_requests_rejected_total", "Requests refused on arrival.", s.requests_rejected_total);
    counter("servesim_prompt_tokens_total", "Prompt tokens admitted.", s.prompt_tokens_total);
    counter("servesim_generation_tokens_total", "Tokens generated.", s.generation_tokens_total);
    if let Some(spec) = &s.spec_decode {
        // vLLM's `vllm:spec_decode_num_drafts`, `..._num_draft_tokens`, `..._num_accepted_tokens`.
        counter("servesim_spec_decode_num_drafts_total", "Sequence-steps that verified draft tokens.", spec.drafts);
        counter("servesim_spec_decode_num_draft_tokens_total", "Draft tokens verified.", spec.draft_tokens);
        counter("servesim_spec_decode_num_accepted_tokens_total", "Draft tokens accepted.", spec.accepted_tokens);
    }
    if let Some(prefix) = s.prefix_cache {
        // vLLM's names (`vllm:prefix_cache_queries`, `vllm:prefix_cache_hits`): tokens.
        counter("servesim_prefix_cache_queries_total", "Prompt tokens looked up in the prefix cache.", prefix.prompt_tokens);
        counter("servesim_prefix_cache_hits_total", "Prompt tokens found in the prefix cache.", prefix.hit_tokens);
        let _ = write!(
            out,
            "# HELP servesim_prefix_cache_hit_rate Prompt tokens found over looked up (0 to 1).\n# TYPE servesim_prefix_cache_hit_rate gauge\nservesim_prefix_cache_hit_rate {}\n",
            prefix.hit_rate()
        );
    }
    if let Some(spec) = &s.spec_decode {
        let name = "servesim_spec_decode_num_accepted_tokens_per_pos_total";
        let _ = write!(out, "# HELP {name} Steps whose draft at this position was accepted.\n# TYPE {name} counter\n");
        for (position, count) in spec.accepted_by_position.iter().enumerate() {
            let _ = writeln!(out, "{name}{{position=\"{position}\"}} {count}");
        }
    }
    let name = "servesim_step_time_seconds";
    let _ = write!(out, "# HELP {name} Wall time of one engine step.\n# TYPE {name} histogram\n");
    let mut cumulative = 0;
    for (bound, count) in STEP_TIME_BUCKETS_S.iter().zip(s.step_time_bucket_counts) {
        cumulative += count;
        let _ = writeln!(out, "{name}_bucket{{le=\"{bound}\"}} {cumulative}");
    }
    let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {}", s.steps_total);
    let _ = writeln!(out, "{name}_sum {}", s.step_time_sum_s);
    let _ = writeln!(out, "{name}_count {}", s.steps_total);
    (StatusCode::OK, [(header::CONTENT_TYPE, "text/plain; version=0.0.4")], out).into_response()
}
