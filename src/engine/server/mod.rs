//! The engine's HTTP server and its continuous-batching loop, generic over the forward pass.
//!
//! ```text
//!   axum routes (http.rs)                    ──submit/cancel──► engine thread (engine.rs)
//!     /v1/completions (completions.rs)                          Scheduler (src/sched, the simulator's own)
//!     /v1/chat/completions (chat*.rs)                           + Executor::forward (model executor or a fake)
//!     /generate, /generate_stream (tgi.rs)   ◄──tokens─────────  per-step trace as timeline.csv rows
//!     /generate with SGLang's body (sglang.rs)
//!     /v1/models, /health, /metrics (metrics.rs)
//!   each request: body checked field by field (request.rs, fields.rs), queued (front.rs), its
//!   tokens turned into text pieces, stop strings and counts (generation.rs, stop.rs)
//! ```
//!
//! Text is tokenized by the handle's [`Tokenizer`] (a Hugging Face `tokenizer.json`; one token per
//! UTF-8 byte when none was given). The server never panics on a request: bad input is a 400 with a
//! JSON error, a full waiting queue a 503, an executor error (or panic) a 500 for the requests of
//! that step only.

mod chat;
mod chat_request;
mod chat_template;
mod completions;
mod connection;
mod engine;
mod fields;
mod front;
mod generation;
mod http;
mod knobs;
mod limits;
mod logprobs;
mod metrics;
mod model_executor;
mod ngram;
mod request;
mod sglang;
mod sse;
mod stop;
mod tgi;
mod tokenizer;

pub use chat_request::{ParsedChat, parse_chat};
pub use chat_template::{ChatTemplate, ChatTemplateState};
pub use engine::{
    CancelOnDrop, Delivery, EngineHandle, EngineStats, Event, Executor, FinishReason, GenerateParams, LogprobsAsk, Output, OutputStream,
    RequestOptions, RequestStream, STEP_TIME_BUCKETS_S, SeqInput, StepInputs, SubmitError, TRACE_ROWS_MAX, TokenLogprobs, check_request_fits,
};
pub use knobs::EngineKnobs;
pub use ngram::NgramLookup;
pub use connection::{Drained, HEADER_BYTES_MAX, HEADERS_MAX};
pub use http::{router, router_with, serve, serve_with};
pub use logprobs::TOP_LOGPROBS_MAX;
pub use sglang::{GenerateApi, SGLANG_MAX_NEW_TOKENS_DEFAULT, SglangParsed, generate_api, parse_sglang};
pub use request::{
    Api, ApiError, MAX_TOKENS_DEFAULT, MODEL_NAME_ALIAS, OutputOptions, ParsedRequest, PromptInput, ReplyOptions, STOP_STRING_BYTES_MAX,
    STOP_STRINGS_MAX, parse_request,
};
pub use limits::{
    BODY_READ_TIMEOUT_DEFAULT, DRAIN_TIMEOUT_DEFAULT, HEADER_READ_TIMEOUT_DEFAULT, PROMPT_BYTES_MAX_DEFAULT, REQUEST_BODY_BYTES_MAX, ServerLimits,
};
pub use model_executor::{CudaModelEngine, LogitsModel, ModelEngine, sample_rows};
pub use tokenizer::{StreamDecoder, Tokenizer, TokenizerError};

/// The async runtime for HTTP (and an in-process client): a worker for each core that
/// `engine_threads` compute threads leave, at least one. A worker per core would put one on a
/// core the engine computes on, and each streamed token would then preempt a compute thread.
pub fn http_runtime(engine_threads: usize) -> std::io::Result<tokio::runtime::Runtime> {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    tokio::runtime::Builder::new_multi_thread().worker_threads(cores.saturating_sub(engine_threads).max(1)).enable_all().build()
}
