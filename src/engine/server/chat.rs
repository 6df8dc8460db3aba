//! OpenAI's `POST /v1/chat/completions`, as vLLM's OpenAI server answers it: the messages
//! rendered by the model's chat template, the prompt tokenized without special tokens (the
//! template writes its own), and the reply as a `chat.completion`, or streamed as
//! `chat.completion.chunk`s: the role first, then the content, the finish reason with the last
//! content, and the usage chunk when `stream_options.include_usage` asks.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::chat_request::parse_chat;
use super::chat_template::ChatTemplateState;
use super::completions::clamped;
use super::engine::{LogprobsAsk, TokenLogprobs};
use super::front::{Ask, Front, json_response, start, tokenize, unix_time_s};
use super::generation::Piece;
use super::request::{ApiError, check_prompt_bytes};
use super::sse::{Chunks, openai_stream, usage};
use super::tokenizer::Tokenizer;

pub async fn chat_completions(State(front): State<Front>, body: Bytes) -> Response {
    match respond(&front, &body).await {
        Ok(r) => r,
        Err(e) => e.into_response(),
    }
}

async fn respond(front: &Front, body: &[u8]) -> Result<Response, ApiError> {
    let engine = &front.engine;
    let chat = parse_chat(body, engine.model_name(), front.limits.prompt_bytes_max)?;
    let template = match engine.tokenizer().chat_template() {
        ChatTemplateState::Ready(t) => t,
        // As vLLM: transformers 4.44 dropped the default template, so a model without one has no
        // chat route.
        ChatTemplateState::Missing(where_) => {
            return Err(ApiError::bad_request(format!(
                "this model has no chat template ({where_}), and there is no default one (as in vLLM since transformers 4.44): use /v1/completions, or serve a tokenizer directory with a chat template (--tokenizer DIR)"
            )));
        }
        ChatTemplateState::Broken(why) => return Err(ApiError::internal(format!("this model's chat template cannot be used: {why}"))),
    };
    let prompt = template
        .render(&chat.messages, chat.add_generation_prompt, &chat.template_kwargs)
        .map_err(|e| ApiError::bad_request(format!("the chat template ({}) refused the messages: {}", template.origin(), e.0)))?;
    check_prompt_bytes(prompt.len(), front.limits.prompt_bytes_max)?;
    let prompt = tokenize(front, prompt, chat.add_special_tokens).await?;
    // vLLM's default for chat: whatever room the context leaves (at least 1, so that a prompt
    // that fills the context is refused with its numbers).
    let max_tokens = chat.max_tokens.unwrap_or_else(|| engine.context_len().saturating_sub(prompt.len() as u32).max(1));
    let logprobs = chat.output.logprobs.map(|top| LogprobsAsk { top, sampled: false });
    let ask = Ask { prompt, max_tokens, ignore_eos: chat.ignore_eos, sampling: chat.sampling, output: &chat.output, logprobs };
    let mut generation = start(front, ask).await?;
    let mut chunks = ChatChunks {
        id: format!("chatcmpl-{}", generation.id()),
        model: front.model_name(chat.reply.model),
        created: unix_time_s(),
        tokenizer: engine.tokenizer().clone(),
        role: chat.role,
        echo: chat.echo_text.filter(|t| !t.is_empty()),
        logprobs: chat.output.logprobs.is_some(),
    };
    if chat.reply.stream {
        return Ok(openai_stream(generation, chunks, chat.reply.include_usage, chat.reply.continuous_usage));
    }
    let whole = generation.collect().await.map_err(ApiError::internal)?;
    let content = chunks.echo.take().unwrap_or_default() + &whole.text;
    let body = json!({
        "id": chunks.id, "object": "chat.completion", "created": chunks.created, "model": chunks.model,
        "choices": [{
            "index": 0,
            "message": {"role": chunks.role, "content": content},
            "logprobs": chunks.logprobs_of(&whole),
            "finish_reason": whole.finish.as_ref().map(|f| f.openai()),
            "stop_reason": whole.finish.as_ref().map_or(Value::Null, |f| f.stop_reason()),
        }],
        "usage": usage(&generation),
    });
    Ok(json_response(&body))
}

struct ChatChunks {
    id: String,
    model: String,
    created: u64,
    tokenizer: Arc<Tokenizer>,
    role: String,
    /// Text the response starts with (`echo`).
    echo: Option<String>,
    logprobs: bool,
}

impl ChatChunks {
    fn chunk(&self, delta: Value, logprobs: Value, piece: Option<&Piece>) -> Value {
        let finish = piece.and_then(|p| p.finish.as_ref());
        json!({
            "id": self.id, "object": "chat.completion.chunk", "created": self.created, "model": self.model,
            "choices": [{
                "index": 0, "delta": delta, "logprobs": logprobs,
                "finish_reason": finish.map(|f| f.openai()),
                "stop_reason": finish.map_or(Value::Null, |f| f.stop_reason()),
            }],
        })
    }

    /// OpenAI's chat `logprobs` of a piece's tokens: each token's text, log-probability and
    /// UTF-8 bytes, with the most likely tokens' (`top_logprobs` of them) alike.
    fn logprobs_of(&self, piece: &Piece) -> Value {
        if !self.logprobs {
            return Value::Null;
        }
        let entry = |id: u32, logprob: f32| {
            let text = self.tokenizer.token_text(id);
            json!({"token": text, "logprob": clamped(logprob), "bytes": text.as_bytes()})
        };
        let content: Vec<Value> = piece
            .ids
            .iter()
            .zip(&piece.logprobs)
            .map(|(&id, lp): (&u32, &TokenLogprobs)| {
                let mut e = entry(id, lp.logprob);
                e["top_logprobs"] = lp.top.iter().map(|&(alt, alt_lp)| entry(alt, alt_lp)).collect();
                e
            })
            .collect();
        json!({"content": content})
    }
}

impl Chunks for ChatChunks {
    fn opening(&mut self) -> Vec<Value> {
        let mut chunks = vec![self.chunk(json!({"role": self.role, "content": ""}), Value::Null, None)];
        if let Some(text) = self.echo.take() {
            chunks.push(self.chunk(json!({"content": text}), Value::Null, None));
        }
        chunks
    }

    fn piece(&mut self, piece: &Piece) -> Value {
        self.chunk(json!({"content": piece.text}), self.logprobs_of(piece), Some(piece))
    }

    fn usage(&self, usage: Value) -> Value {
        json!({"id": self.id, "object": "chat.completion.chunk", "created": self.created, "model": self.model, "choices": [], "usage": usage})
    }
}
