//! OpenAI's `POST /v1/completions`: prompts of text or token ids, streamed or whole.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};

use super::engine::{LogprobsAsk, TokenLogprobs};
use super::front::{Ask, Front, json_response, prompt_ids, start, unix_time_s};
use super::generation::Piece;
use super::request::{Api, PromptInput, parse_request};
use super::sse::{Chunks, openai_stream, usage};
use super::tokenizer::Tokenizer;

pub async fn completions(State(front): State<Front>, body: Bytes) -> Response {
    match respond(&front, &body).await {
        Ok(r) => r,
        Err(e) => e.into_response(),
    }
}

async fn respond(front: &Front, body: &[u8]) -> Result<Response, super::request::ApiError> {
    let engine = &front.engine;
    let req = parse_request(Api::Completions, body, engine.model_name(), front.limits.prompt_bytes_max)?;
    // vLLM echoes a text prompt as given and a token prompt decoded.
    let echo = match (&req.prompt, req.output.echo) {
        (_, false) => None,
        (PromptInput::Text(text), true) => Some(text.clone()),
        (PromptInput::Tokens(ids), true) => Some(engine.tokenizer().decode(ids).unwrap_or_default()),
    };
    let prompt = prompt_ids(front, req.prompt, req.add_special_tokens).await?;
    // vLLM V1's default: the log-probabilities of the model's own distribution.
    let logprobs = req.output.logprobs.map(|top| LogprobsAsk { top, sampled: false });
    let ask = Ask { prompt, max_tokens: req.max_tokens, ignore_eos: req.ignore_eos, sampling: req.sampling, output: &req.output, logprobs };
    let mut generation = start(front, ask).await?;
    let chunks = CompletionChunks {
        id: format!("cmpl-{}", generation.id()),
        model: front.model_name(req.reply.model),
        created: unix_time_s(),
        tokenizer: engine.tokenizer().clone(),
        echo,
        logprobs: req.output.logprobs,
        text_offset: 0,
    };
    if req.reply.stream {
        return Ok(openai_stream(generation, chunks, req.reply.include_usage, req.reply.continuous_usage));
    }
    let mut chunks = chunks;
    let whole = generation.collect().await.map_err(super::request::ApiError::internal)?;
    let mut body = chunks.piece(&whole);
    body["usage"] = usage(&generation);
    Ok(json_response(&body))
}

/// A completion's chunks: the same shape whole or streamed, the whole being one piece.
struct CompletionChunks {
    id: String,
    model: String,
    created: u64,
    tokenizer: Arc<Tokenizer>,
    /// The prompt's text, sent before the first piece's.
    echo: Option<String>,
    logprobs: Option<u32>,
    /// Characters of text sent so far: where the next token's text starts.
    text_offset: usize,
}

impl Chunks for CompletionChunks {
    fn opening(&mut self) -> Vec<Value> {
        Vec::new()
    }

    fn piece(&mut self, piece: &Piece) -> Value {
        let text = match self.echo.take() {
            Some(prompt) => prompt + &piece.text,
            None => piece.text.clone(),
        };
        let logprobs = match self.logprobs {
            Some(_) => completion_logprobs(&self.tokenizer, &piece.ids, &piece.logprobs, &mut self.text_offset),
            None => Value::Null,
        };
        json!({
            "id": self.id, "object": "text_completion", "created": self.created, "model": self.model,
            "choices": [{
                "index": 0, "text": text, "logprobs": logprobs,
                "finish_reason": piece.finish.as_ref().map(|f| f.openai()),
                "stop_reason": piece.finish.as_ref().map_or(Value::Null, |f| f.stop_reason()),
            }],
        })
    }

    fn usage(&self, usage: Value) -> Value {
        json!({"id": self.id, "object": "text_completion", "created": self.created, "model": self.model, "choices": [], "usage": usage})
    }
}

/// The legacy completions `logprobs` object of tokens `ids`: each token's text, its
/// log-probability, the most likely tokens' (with the sampled one, as OpenAI and vLLM report
/// them) by text, and where each token's text starts in the output. −∞ is written as −9999,
/// as vLLM writes it, since JSON has no infinity.
fn completion_logprobs(tokenizer: &Tokenizer, ids: &[u32], logprobs: &[TokenLogprobs], text_offset: &mut usize) -> Value {
    let (mut tokens, mut values, mut tops, mut offsets) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for (&id, lp) in ids.iter().zip(logprobs) {
        let text = tokenizer.token_text(id);
        let mut top = Map::new();
        for &(alt, alt_lp) in &lp.top {
            top.insert(tokenizer.token_text(alt), json!(clamped(alt_lp)));
        }
        top.insert(text.clone(), json!(clamped(lp.logprob)));
        offsets.push(*text_offset);
        *text_offset += text.chars().count();
        tokens.push(json!(text));
        values.push(json!(clamped(lp.logprob)));
        tops.push(Value::Object(top));
    }
    json!({"text_offset": offsets, "token_logprobs": values, "tokens": tokens, "top_logprobs": tops})
}

/// A log-probability JSON can hold: vLLM's floor for −∞.
pub fn clamped(logprob: f32) -> f32 {
    logprob.max(-9999.0)
}
