//! Server-sent events, written by hand so that every line is exactly `data: {json}` (OpenAI) or
//! `data:{json}` (TGI, as TGI itself writes), with no comment or keep-alive lines; and the one
//! stream both OpenAI routes write: chunks of the pieces, the usage chunk when asked, `[DONE]`.

use std::collections::VecDeque;
use std::convert::Infallible;

use axum::body::{Body, Bytes};
use axum::http::{StatusCode, header};
use axum::response::Response;
use futures_util::stream;
use serde_json::{Value, json};

use super::front::error_response;
use super::generation::{Generation, Piece};

pub fn sse_response<S>(events: S) -> Response
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

pub fn data_line(v: &Value) -> Bytes {
    Bytes::from(format!("data: {v}\n\n"))
}

/// An error event inside an OpenAI stream.
pub fn openai_error(message: &str) -> Value {
    json!({"error": {"message": message, "type": "server_error", "code": 500}})
}

/// OpenAI's `usage` of a request so far.
pub fn usage(generation: &Generation) -> Value {
    let (prompt, completion) = (generation.prompt_tokens(), generation.completion_tokens());
    json!({"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion})
}

/// What an OpenAI route writes around the pieces: completions and chat differ only here.
pub trait Chunks: Send + 'static {
    /// Chunks before the first piece's (chat: the role, and echoed text).
    fn opening(&mut self) -> Vec<Value>;
    /// The chunk of one piece.
    fn piece(&mut self, piece: &Piece) -> Value;
    /// The last chunk when `stream_options.include_usage` asks: `usage`, and no choices.
    fn usage(&self, usage: Value) -> Value;
}

struct OpenAiStream<C> {
    generation: Generation,
    chunks: C,
    include_usage: bool,
    continuous_usage: bool,
    queued: VecDeque<Bytes>,
    opened: bool,
    over: bool,
}

/// The SSE response of an OpenAI request: `chunks`' opening, a chunk a piece (the tokens the
/// engine delivered together: a multi-step window's or a speculative step's go out as one, as
/// vLLM streams them), the usage chunk with `include_usage`, then `data: [DONE]`. With
/// `continuous_usage` (vLLM's `continuous_usage_stats`) every chunk also carries the usage so
/// far. An engine error is an error event, then `[DONE]`.
pub fn openai_stream<C: Chunks>(generation: Generation, chunks: C, include_usage: bool, continuous_usage: bool) -> Response {
    let state = OpenAiStream { generation, chunks, include_usage, continuous_usage, queued: VecDeque::new(), opened: false, over: false };
    sse_response(stream::unfold(state, |mut s| async move {
        loop {
            if let Some(line) = s.queued.pop_front() {
                return Some((Ok(line), s));
            }
            if s.over {
                return None;
            }
            if !s.opened {
                s.opened = true;
                for mut chunk in s.chunks.opening() {
                    if s.continuous_usage {
                        chunk["usage"] = usage(&s.generation);
                    }
                    s.queued.push_back(data_line(&chunk));
                }
                continue;
            }
            match s.generation.next().await {
                Some(Ok(piece)) => {
                    let mut chunk = s.chunks.piece(&piece);
                    if s.continuous_usage {
                        chunk["usage"] = usage(&s.generation);
                    }
                    s.queued.push_back(data_line(&chunk));
                    if piece.finish.is_none() {
                        continue;
                    }
                    if s.include_usage {
                        let chunk = s.chunks.usage(usage(&s.generation));
                        s.queued.push_back(data_line(&chunk));
                    }
                }
                Some(Err(m)) => s.queued.push_back(data_line(&openai_error(&m))),
                None => {}
            }
            s.queued.push_back(Bytes::from_static(b"data: [DONE]\n\n"));
            s.over = true;
        }
    }))
}
