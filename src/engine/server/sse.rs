//! Server-sent events, written by hand so that every line is exactly `data: {json}` (OpenAI) or
//! `data:{json}` (TGI, as TGI itself writes), with no comment or keep-alive lines; and the one
//! stream of pieces that the OpenAI routes and SGLang's write, each with its own events.

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

/// What one route's stream writes: the lines before the first piece, those of each piece, and
/// an engine error's event. [`piece_stream`] runs every route's stream the same way around them.
pub trait Events: Send + 'static {
    /// Lines before the first piece's.
    fn opening(&mut self, _generation: &Generation) -> Vec<Bytes> {
        Vec::new()
    }
    /// The lines of `piece`; for the last piece (the one with a finish), also any the route writes
    /// after it, before `[DONE]`.
    fn piece(&mut self, generation: &Generation, piece: &Piece) -> Vec<Bytes>;
    /// The event an engine error ends the stream with.
    fn error(&self, message: &str) -> Bytes;
}

struct PieceStream<E> {
    generation: Generation,
    events: E,
    queued: VecDeque<Bytes>,
    opened: bool,
    over: bool,
}

/// The SSE response of `generation` as `events` writes it: the opening, the lines of each piece
/// (the tokens the engine delivered together: a multi-step window's or a speculative step's go
/// out as one, as vLLM and SGLang stream them) until the last, or an error event; then
/// `data: [DONE]`.
pub fn piece_stream<E: Events>(generation: Generation, events: E) -> Response {
    let state = PieceStream { generation, events, queued: VecDeque::new(), opened: false, over: false };
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
                s.queued.extend(s.events.opening(&s.generation));
                continue;
            }
            match s.generation.next().await {
                Some(Ok(piece)) => {
                    s.queued.extend(s.events.piece(&s.generation, &piece));
                    if piece.finish.is_none() {
                        continue;
                    }
                }
                Some(Err(m)) => s.queued.push_back(s.events.error(&m)),
                None => {}
            }
            s.queued.push_back(Bytes::from_static(b"data: [DONE]\n\n"));
            s.over = true;
        }
    }))
}

struct OpenAiEvents<C> {
    chunks: C,
    include_usage: bool,
    continuous_usage: bool,
}

impl<C: Chunks> Events for OpenAiEvents<C> {
    fn opening(&mut self, generation: &Generation) -> Vec<Bytes> {
        let continuous_usage = self.continuous_usage;
        let chunks = self.chunks.opening();
        chunks
            .into_iter()
            .map(|mut chunk| {
                if continuous_usage {
                    chunk["usage"] = usage(generation);
                }
                data_line(&chunk)
            })
            .collect()
    }

    fn piece(&mut self, generation: &Generation, piece: &Piece) -> Vec<Bytes> {
        let mut chunk = self.chunks.piece(piece);
        if self.continuous_usage {
            chunk["usage"] = usage(generation);
        }
        let mut lines = vec![data_line(&chunk)];
        if piece.finish.is_some() && self.include_usage {
            lines.push(data_line(&self.chunks.usage(usage(generation))));
        }
        lines
    }

    fn error(&self, message: &str) -> Bytes {
        data_line(&openai_error(message))
    }
}

/// The SSE response of an OpenAI request ([`piece_stream`]): `chunks`' opening, a chunk a piece,
/// the usage chunk with `include_usage`, then `data: [DONE]`. With `continuous_usage` (vLLM's
/// `continuous_usage_stats`) every chunk also carries the usage so far.
pub fn openai_stream<C: Chunks>(generation: Generation, chunks: C, include_usage: bool, continuous_usage: bool) -> Response {
    piece_stream(generation, OpenAiEvents { chunks, include_usage, continuous_usage })
}
