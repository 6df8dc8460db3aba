//! One request in flight, as every route reads it: the engine's deliveries turned into text
//! pieces, ended by the engine (EOS, a stop token, `max_tokens`) or by a stop string, with the
//! tokens counted for usage and `/metrics`. The routes only shape the pieces into their API's
//! JSON, so the three APIs stop, count and decode alike.

use std::sync::Arc;

use serde_json::Value;

use super::engine::{Delivery, FinishReason, Output, OutputStream, TokenLogprobs};
use super::metrics::{Ended, RequestRecord};
use super::request::OutputOptions;
use super::stop::StopMatcher;
use super::tokenizer::{StreamDecoder, Tokenizer};

/// Why the output ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Finish {
    /// `max_tokens`, or the context.
    Length,
    /// The model's end of sequence.
    Eos,
    /// One of the request's `stop_token_ids`.
    StopToken(u32),
    /// One of the request's stop strings.
    StopText(String),
}

impl Finish {
    /// OpenAI's `finish_reason`.
    pub fn openai(&self) -> &'static str {
        match self {
            Finish::Length => "length",
            _ => "stop",
        }
    }

    /// vLLM's `stop_reason`: the stop token or string that ended the output, else null.
    pub fn stop_reason(&self) -> Value {
        match self {
            Finish::StopToken(t) => Value::from(*t),
            Finish::StopText(s) => Value::from(s.as_str()),
            _ => Value::Null,
        }
    }

    /// TGI's `finish_reason`.
    pub fn tgi(&self) -> &'static str {
        match self {
            Finish::Length => "length",
            Finish::Eos | Finish::StopToken(_) => "eos_token",
            Finish::StopText(_) => "stop_sequence",
        }
    }
}

/// Tokens that arrived together and the text they add.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Piece {
    /// Text that may be sent now (some may be held back for a stop string or a split character).
    pub text: String,
    pub ids: Vec<u32>,
    /// Parallel to `ids` when the request asked for log-probabilities.
    pub logprobs: Vec<TokenLogprobs>,
    /// Set on the last piece.
    pub finish: Option<Finish>,
}

/// A request's output as it arrives.
pub struct Generation {
    /// Dropped once the output ends, which cancels the request in the engine if it is still
    /// running (past a stop string).
    stream: Option<OutputStream>,
    id: u32,
    decoder: StreamDecoder,
    stop: StopMatcher,
    stop_token_ids: Vec<u32>,
    include_stop: bool,
    record: RequestRecord,
    prompt_tokens: u32,
    completion_tokens: u32,
    over: bool,
}

impl Generation {
    pub fn new(stream: OutputStream, tokenizer: Arc<Tokenizer>, output: &OutputOptions, record: RequestRecord, prompt_tokens: u32) -> Generation {
        Generation {
            id: stream.id(),
            stream: Some(stream),
            decoder: StreamDecoder::new(tokenizer, !output.keep_special),
            stop: StopMatcher::new(output.stop.clone(), output.include_stop),
            stop_token_ids: output.stop_token_ids.clone(),
            include_stop: output.include_stop,
            record,
            prompt_tokens,
            completion_tokens: 0,
            over: false,
        }
    }

    /// The engine's id for the request.
    pub fn id(&self) -> u32 {
        self.id
    }

    pub fn prompt_tokens(&self) -> u32 {
        self.prompt_tokens
    }

    /// Tokens generated so far, up to the one that ended the output.
    pub fn completion_tokens(&self) -> u32 {
        self.completion_tokens
    }

    /// The next piece; `None` after the last. An error ends the output.
    pub async fn next(&mut self) -> Option<Result<Piece, String>> {
        if self.over {
            return None;
        }
        let output = self.stream.as_mut()?.outputs.recv().await;
        let result = match output {
            Some(Output::Tokens(d)) => self.take(d),
            Some(Output::Error(m)) => Err(m),
            None => Err("the engine stopped before the request finished".to_string()),
        };
        if result.is_err() {
            self.end(Ended::Error);
        }
        Some(result)
    }

    /// Every piece, joined: the whole output, or the error that ended it.
    pub async fn collect(&mut self) -> Result<Piece, String> {
        let mut whole = Piece::default();
        while let Some(piece) = self.next().await {
            let piece = piece?;
            whole.text.push_str(&piece.text);
            whole.ids.extend(piece.ids);
            whole.logprobs.extend(piece.logprobs);
            whole.finish = piece.finish;
        }
        Ok(whole)
    }

    fn take(&mut self, d: Delivery) -> Result<Piece, String> {
        let mut piece = Piece::default();
        let n = d.ids.len();
        let mut logprobs = d.logprobs.into_iter();
        for (i, id) in d.ids.into_iter().enumerate() {
            let last = i + 1 == n;
            piece.ids.push(id);
            piece.logprobs.extend(logprobs.next());
            self.completion_tokens += 1;
            let stopped = last && d.finish == Some(FinishReason::Stop);
            let stop_token = stopped && self.stop_token_ids.contains(&id);
            // The token that stopped the output (the model's EOS or a stop token) adds no text
            // unless asked to keep it, as vLLM's detokenizer skips it; kept, a special token's
            // text still shows only with `skip_special_tokens: false`.
            let mut text = if stopped && !self.include_stop { String::new() } else { self.decoder.push(id)? };
            if last && d.finish.is_some() {
                text.push_str(&self.decoder.flush()?);
            }
            let step = self.stop.push(&text);
            piece.text.push_str(&step.emit);
            if let Some(s) = step.matched {
                piece.finish = Some(Finish::StopText(s));
                break;
            }
            if last {
                piece.finish = match d.finish {
                    None => None,
                    Some(FinishReason::Length) => Some(Finish::Length),
                    Some(FinishReason::Stop) if stop_token => Some(Finish::StopToken(id)),
                    Some(FinishReason::Stop) => Some(Finish::Eos),
                };
                if piece.finish.is_some() {
                    piece.text.push_str(&self.stop.finish());
                }
            }
        }
        self.record.tokens(piece.ids.len() as u32, d.scheduled);
        if let Some(f) = &piece.finish {
            self.end(if *f == Finish::Length { Ended::Length } else { Ended::Stop });
        }
        Ok(piece)
    }

    fn end(&mut self, how: Ended) {
        self.over = true;
        self.stream = None;
        self.record.end(how);
    }
}
