//! What every route shares: the server's state, error and JSON responses, tokenizing off the
//! async workers, and queueing a request with what it asks beyond its tokens.

use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::Value;
use tokio::sync::Semaphore;

use super::engine::{EngineHandle, GenerateParams, LogprobsAsk, RequestOptions};
use super::generation::Generation;
use super::limits::ServerLimits;
use super::metrics::{FrontMetrics, RequestRecord};
use super::request::{ApiError, OutputOptions, PromptInput, error_body};
use crate::engine::model::SamplingParams;

/// Seconds a client is asked to wait after a 503 (`Retry-After`): about a few engine steps.
const RETRY_AFTER_S: &str = "1";

/// What every handler sees.
#[derive(Clone)]
pub struct Front {
    pub engine: EngineHandle,
    pub limits: ServerLimits,
    /// One permit a core: tokenizing is CPU work, and a burst of long text prompts must queue
    /// rather than each take a thread and its memory at once.
    tokenizing: Arc<Semaphore>,
    pub metrics: Arc<FrontMetrics>,
}

impl Front {
    pub fn new(engine: EngineHandle, limits: ServerLimits) -> Front {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let metrics = Arc::new(FrontMetrics::new(engine.context_len()));
        Front { engine, limits, tokenizing: Arc::new(Semaphore::new(cores)), metrics }
    }

    /// The model name a response repeats: the request's, else the served one.
    pub fn model_name(&self, asked: Option<String>) -> String {
        asked.unwrap_or_else(|| self.engine.model_name().to_string())
    }
}

pub fn error_response(status: StatusCode, message: &str) -> Response {
    let mut response = (status, [(header::CONTENT_TYPE, "application/json")], error_body(status, message)).into_response();
    if status == StatusCode::SERVICE_UNAVAILABLE {
        response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static(RETRY_AFTER_S));
    }
    response
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        error_response(self.status, &self.message)
    }
}

pub fn json_response(body: &Value) -> Response {
    (StatusCode::OK, [(header::CONTENT_TYPE, "application/json")], body.to_string()).into_response()
}

pub fn unix_time_s() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

/// The ids of a prompt: as given, or its text tokenized.
pub async fn prompt_ids(front: &Front, prompt: PromptInput, add_special_tokens: bool) -> Result<Vec<u32>, ApiError> {
    match prompt {
        PromptInput::Text(text) => tokenize(front, text, add_special_tokens).await,
        PromptInput::Tokens(ids) => Ok(ids),
    }
}

/// The ids of a text prompt (already within the byte limit). Tokenizing runs on a blocking
/// thread: a long prompt takes seconds, and on an async worker it would stall every other
/// request that worker serves.
pub async fn tokenize(front: &Front, text: String, add_special_tokens: bool) -> Result<Vec<u32>, ApiError> {
    let internal = |e: String| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e);
    // The permit goes with the work: a client that leaves does not stop its tokenizing.
    let permit = front.tokenizing.clone().acquire_owned().await.map_err(|e| internal(e.to_string()))?;
    let tokenizer = front.engine.tokenizer().clone();
    let context_len = front.engine.context_len() as usize;
    let encoded = tokio::task::spawn_blocking(move || {
        // A prompt past the context is refused before it is tokenized whole (which held hundreds
        // of MB for a 1 MB prompt): the count stops a piece past the limit.
        let ids = match tokenizer.count_past(&text, context_len) {
            Some(counted) => Err(format!(
                "this model's maximum context length is {context_len} tokens, but the prompt has over {counted} tokens \
                 (counted a piece at a time, and stopped there)"
            )),
            None => tokenizer.encode(&text, add_special_tokens),
        };
        drop(permit);
        ids
    });
    encoded.await.map_err(|e| internal(format!("the tokenizer failed: {e}")))?.map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, e))
}

/// What a route asks the engine for one request.
pub struct Ask<'a> {
    pub prompt: Vec<u32>,
    pub max_tokens: u32,
    pub ignore_eos: bool,
    pub sampling: SamplingParams,
    pub output: &'a OutputOptions,
    pub logprobs: Option<LogprobsAsk>,
}

/// Queues a request; its output comes from the [`Generation`].
pub async fn start(front: &Front, ask: Ask<'_>) -> Result<Generation, ApiError> {
    let engine = &front.engine;
    // `serve --ignore-eos` runs every request to its max_tokens: a stop it would not honour is
    // refused rather than dropped.
    if engine.ignores_eos() {
        let named = if !ask.output.stop.is_empty() { Some("stop") } else if !ask.output.stop_token_ids.is_empty() { Some("stop_token_ids") } else { None };
        if let Some(field) = named {
            return Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                format!("`{field}` is not applied by this server: it runs with --ignore-eos, every request to its max_tokens"),
            ));
        }
    }
    let prompt_tokens = ask.prompt.len() as u32;
    let params = GenerateParams { prompt: ask.prompt, max_tokens: ask.max_tokens, ignore_eos: ask.ignore_eos, sampling: ask.sampling };
    let options = RequestOptions { stop_token_ids: ask.output.stop_token_ids.clone(), logprobs: ask.logprobs };
    let queued = Instant::now();
    let stream = engine.submit_with(params, options).await?;
    let record = RequestRecord::new(front.metrics.clone(), prompt_tokens, ask.max_tokens, queued);
    Ok(Generation::new(stream, engine.tokenizer().clone(), ask.output, record, prompt_tokens))
}
