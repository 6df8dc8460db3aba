//! TGI's `POST /generate` and `/generate_stream`: one event per token, even where the engine
//! delivers several at once, with each token's log-probability from the step's logits.

use std::collections::VecDeque;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use futures_util::stream;
use serde_json::{Value, json};

use super::completions::clamped;
use super::engine::{LogprobsAsk, TokenLogprobs};
use super::front::{Ask, Front, json_response, prompt_ids, start};
use super::generation::{Finish, Generation};
use super::request::{Api, ApiError, ParsedRequest, PromptInput, parse_request};
use super::sse::sse_response;
use super::tokenizer::Tokenizer;

/// A TGI request queued: its output, and what shapes the response.
struct Started {
    generation: Generation,
    /// The prompt's text, when `return_full_text` asks for it in front of the output.
    full_text_prefix: String,
    seed: Option<u64>,
    details: bool,
    /// `top_n_tokens`, when the log-probabilities are there to rank them.
    top_n: Option<u32>,
}

async fn submit(front: &Front, body: &[u8], stream: bool) -> Result<Started, ApiError> {
    let req: ParsedRequest = parse_request(Api::Generate, body, front.engine.model_name(), front.limits.prompt_bytes_max)?;
    let full_text_prefix = match (&req.prompt, req.output.echo) {
        (PromptInput::Text(text), true) => text.clone(),
        _ => String::new(),
    };
    // TGI reports every shown token's log-probability, of the distribution it samples from (its
    // warpers', then log-softmax); an executor that computes none (a test's fake) reports null,
    // not a made-up number.
    let shown = stream || req.reply.details;
    let logprobs = req.output.logprobs.filter(|_| shown && front.engine.computes_logprobs()).map(|top| LogprobsAsk { top, sampled: true });
    let prompt = prompt_ids(front, req.prompt, req.add_special_tokens).await?;
    let ask = Ask { prompt, max_tokens: req.max_tokens, ignore_eos: req.ignore_eos, sampling: req.sampling, output: &req.output, logprobs };
    let generation = start(front, ask).await?;
    let top_n = logprobs.map(|a| a.top).filter(|&n| n > 0);
    Ok(Started { generation, full_text_prefix, seed: req.reply.seed, details: req.reply.details, top_n })
}

/// A token as TGI writes it; `logprob` is null where none was computed.
fn token(tokenizer: &Tokenizer, id: u32, logprob: Option<f32>) -> Value {
    json!({"id": id, "text": tokenizer.token_text(id), "logprob": logprob.map(clamped), "special": tokenizer.is_special(id)})
}

fn top_tokens(tokenizer: &Tokenizer, lp: Option<&TokenLogprobs>) -> Value {
    lp.map_or(Value::Null, |lp| lp.top.iter().map(|&(id, l)| token(tokenizer, id, Some(l))).collect())
}

pub async fn generate(State(front): State<Front>, body: Bytes) -> Response {
    let mut s = match submit(&front, &body, false).await {
        Ok(s) => s,
        Err(e) => return e.into_response(),
    };
    let whole = match s.generation.collect().await {
        Ok(w) => w,
        Err(m) => return ApiError::internal(m).into_response(),
    };
    let tokenizer = front.engine.tokenizer();
    let mut body = json!({"generated_text": s.full_text_prefix + &whole.text});
    if s.details {
        let lps: Vec<Option<&TokenLogprobs>> = (0..whole.ids.len()).map(|i| whole.logprobs.get(i)).collect();
        let tokens: Vec<Value> = whole.ids.iter().zip(&lps).map(|(&id, lp)| token(tokenizer, id, lp.map(|l| l.logprob))).collect();
        body["details"] = json!({
            "finish_reason": whole.finish.as_ref().map_or("length", Finish::tgi),
            "generated_tokens": s.generation.completion_tokens(),
            "seed": s.seed, "prefill": [], "tokens": tokens,
        });
        if s.top_n.is_some() {
            body["details"]["top_tokens"] = lps.iter().map(|lp| top_tokens(tokenizer, *lp)).collect();
        }
    }
    json_response(&body)
}

struct TgiStream {
    generation: Generation,
    tokenizer: Arc<Tokenizer>,
    text: String,
    index: u32,
    seed: Option<u64>,
    top_n: bool,
    done: bool,
    /// Tokens received and not yet streamed, the last with the output's end.
    queued: VecDeque<(u32, Option<TokenLogprobs>, Option<Finish>)>,
}

pub async fn generate_stream(State(front): State<Front>, body: Bytes) -> Response {
    let s = match submit(&front, &body, true).await {
        Ok(s) => s,
        Err(e) => return e.into_response(),
    };
    let state = TgiStream {
        generation: s.generation,
        tokenizer: front.engine.tokenizer().clone(),
        text: s.full_text_prefix,
        index: 0,
        seed: s.seed,
        top_n: s.top_n.is_some(),
        done: false,
        queued: VecDeque::new(),
    };
    sse_response(stream::unfold(state, |mut s| async move {
        if s.done {
            return None;
        }
        while s.queued.is_empty() {
            match s.generation.next().await {
                Some(Ok(piece)) => {
                    s.text.push_str(&piece.text);
                    let n = piece.ids.len();
                    let mut lps = piece.logprobs.into_iter();
                    for (i, id) in piece.ids.into_iter().enumerate() {
                        let finish = if i + 1 == n { piece.finish.clone() } else { None };
                        s.queued.push_back((id, lps.next(), finish));
                    }
                }
                Some(Err(m)) => {
                    s.done = true;
                    return Some((Ok(Bytes::from(format!("data:{}\n\n", json!({"error": m, "error_type": "generation"})))), s));
                }
                None => return None,
            }
        }
        let (id, lp, finish) = s.queued.pop_front()?;
        s.index += 1;
        let tok = token(&s.tokenizer, id, lp.as_ref().map(|l| l.logprob));
        let top = if s.top_n { top_tokens(&s.tokenizer, lp.as_ref()) } else { Value::Null };
        let line = match finish {
            None => json!({"index": s.index, "token": tok, "top_tokens": top, "generated_text": null, "details": null}),
            Some(f) => {
                s.done = true;
                json!({"index": s.index, "token": tok, "top_tokens": top, "generated_text": s.text,
                       "details": {"finish_reason": f.tgi(), "generated_tokens": s.generation.completion_tokens(), "seed": s.seed}})
            }
        };
        Some((Ok(Bytes::from(format!("data:{line}\n\n"))), s))
    }))
}
