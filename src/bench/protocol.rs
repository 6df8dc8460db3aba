//! The wire protocols: request bodies, and what each streamed `data:` payload means.
//!
//! Follows vLLM's `backend_request_func.py`: OpenAI completions stream chunks whose
//! `choices[0].text` carries generated text, an optional usage chunk (empty `choices`) when
//! `stream_options.include_usage` is sent, and `data: [DONE]`; TGI's `generate_stream` sends one
//! event per token (`token`), the last with `generated_text` and `details`. SGLang's native
//! `/generate` (as SGLang 0.4.9's `bench_serving.py` sends and reads it) streams chunks whose
//! `text` is the whole output so far and `meta_info.completion_tokens` its token count, then
//! `data: [DONE]`.

use serde_json::{Value, json};

use super::Backend;
use crate::engine::server::Tokenizer;
use crate::workload::RequestSpec;

/// Smallest synthetic prompt token id: ids 0–9 are left alone because tokenizers put their
/// special tokens (BOS, EOS, UNK, PAD) there, and a stray EOS in a prompt changes nothing but
/// confuses readers of server logs.
const PROMPT_TOKEN_ID_MIN: u32 = 10;
/// Number of distinct synthetic ids (10..250): inside any real vocabulary, and inside the
/// 256 ids of servesim's byte-level tokenizer and tiny test model.
const PROMPT_TOKEN_ID_SPAN: u32 = 240;

/// Words of synthetic TGI prompts: common English words that every BPE vocabulary holds as one
/// token with a leading space, so `N` words are close to `N` tokens.
const PROMPT_WORDS: [&str; 16] = [
    "the", "of", "and", "to", "in", "is", "it", "that", "for", "on", "was", "with", "as", "at",
    "by", "this",
];

/// Synthetic prompt of `len` token ids for request `index`. Each request starts at a different
/// offset so that a server's prefix cache cannot make later requests cheaper (vLLM's random
/// dataset does the same with random offsets).
pub fn prompt_token_ids(index: usize, len: u32) -> Vec<u32> {
    consecutive_ids(index, len, PROMPT_TOKEN_ID_MIN, PROMPT_TOKEN_ID_SPAN)
}

/// `len` consecutive ids (wrapping) among the `span` ids from `min`, from an offset that differs
/// per request.
fn consecutive_ids(index: usize, len: u32, min: u32, span: u32) -> Vec<u32> {
    let span = span.max(1);
    // 7919 is prime, so consecutive requests start far apart for any span not a multiple of it.
    let offset = (index as u64 * 7919 % u64::from(span)) as u32;
    (0..len)
        .map(|pos| min + ((u64::from(offset) + u64::from(pos)) % u64::from(span)) as u32)
        .collect()
}

/// With a tokenizer (`--tokenizer`), vLLM's random-dataset prompt: the text of `len`
/// consecutive ids below the tokenizer's `vocab_size`, and its token count as a server with the
/// same tokenizer counts it (`len` exactly for tokenizers whose decode re-encodes to the same
/// ids, as the shipped ones do).
pub fn prompt_text_with(
    tokenizer: &Tokenizer,
    index: usize,
    len: u32,
) -> Result<(String, u32), String> {
    let text = tokenizer.decode(&consecutive_ids(index, len, 0, tokenizer.base_vocab_size()))?;
    let tokens = tokenizer.encode(&text, true)?.len();
    Ok((text, u32::try_from(tokens).unwrap_or(u32::MAX)))
}

/// Synthetic prompt of `len` words for request `index`, separated by single spaces.
pub fn prompt_text(index: usize, len: u32) -> String {
    let offset = index % PROMPT_WORDS.len();
    let words: Vec<&str> = (0..len as usize)
        .map(|pos| PROMPT_WORDS[(offset + pos) % PROMPT_WORDS.len()])
        .collect();
    words.join(" ")
}

/// The JSON body for request `index` and its prompt's token count. `max_tokens` is the spec's
/// `max_tokens` (the client's limit); with `ignore_eos` a server generates exactly that many.
/// Without a tokenizer, OpenAI prompts are token ids and TGI prompts words (counted as the
/// spec's `input_tokens`); with one, both are text made and counted by it
/// ([`prompt_text_with`]).
pub fn request_body(
    backend: Backend,
    model: &str,
    index: usize,
    spec: &RequestSpec,
    ignore_eos: bool,
    tokenizer: Option<&Tokenizer>,
) -> Result<(Value, u32), String> {
    let (prompt, input_tokens) = match (tokenizer, backend) {
        (Some(t), _) => {
            let (text, tokens) = prompt_text_with(t, index, spec.input_tokens)?;
            (json!(text), tokens)
        }
        (None, Backend::OpenAi | Backend::Sglang | Backend::SglangOai) => (
            json!(prompt_token_ids(index, spec.input_tokens)),
            spec.input_tokens,
        ),
        (None, Backend::Tgi) => (
            json!(prompt_text(index, spec.input_tokens)),
            spec.input_tokens,
        ),
    };
    let body = match backend {
        Backend::OpenAi => {
            let mut body = json!({
                "model": model,
                "prompt": prompt,
                "max_tokens": spec.max_tokens,
                "temperature": 0.0,
                "stream": true,
                // Ask for the server's own token count: counting chunks undercounts when a
                // chunk carries several tokens.
                "stream_options": { "include_usage": true },
            });
            // Sent only when asked: OpenAI's own API rejects unknown fields.
            if ignore_eos {
                body["ignore_eos"] = json!(true);
            }
            body
        }
        // SGLang's client: no stream_options (so no usage chunk) and `ignore_eos` always sent.
        Backend::SglangOai => json!({
            "model": model,
            "prompt": prompt,
            "temperature": 0.0,
            "best_of": 1,
            "max_tokens": spec.max_tokens,
            "stream": true,
            "ignore_eos": ignore_eos,
        }),
        // As SGLang's `async_request_sglang_generate`: a text prompt as `text`, token ids (its
        // `--tokenize-prompt`) as `input_ids`.
        Backend::Sglang => {
            let key = if prompt.is_string() { "text" } else { "input_ids" };
            let mut body = json!({
                "sampling_params": {
                    "temperature": 0.0,
                    "max_new_tokens": spec.max_tokens,
                    "ignore_eos": ignore_eos,
                },
                "stream": true,
                "lora_path": null,
                "return_logprob": false,
                "logprob_start_len": -1,
            });
            body[key] = prompt;
            body
        }
        // TGI has no ignore-EOS parameter; a server that should run every request to its
        // limit is started with `--ignore-eos` instead (issue 5).
        Backend::Tgi => json!({
            "inputs": prompt,
            "parameters": {
                "max_new_tokens": spec.max_tokens,
                "details": true,
            },
        }),
    };
    Ok((body, input_tokens))
}

/// What one streamed payload tells the client.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Chunk {
    /// It carries generated output: a timing point for TTFT and ITL.
    pub token: bool,
    /// The server's count of generated tokens (OpenAI usage; SGLang's
    /// `meta_info.completion_tokens`, the count so far).
    pub completion_tokens: Option<u32>,
    /// Generated text it adds: OpenAI's `choices[0].text`, TGI's final `generated_text` (as
    /// vLLM's client reads them), for counting output tokens with `--tokenizer`.
    pub text: Option<String>,
    /// SGLang's native stream: the whole output so far, which replaces the text before it.
    pub whole_text: Option<String>,
    /// The stream is complete (`[DONE]`, or TGI's final event).
    pub done: bool,
    /// The server reported an error in the stream.
    pub error: Option<String>,
}

/// Interprets one `data:` payload for `backend`.
pub fn parse_chunk(backend: Backend, payload: &str) -> Chunk {
    if payload.trim() == "[DONE]" {
        return Chunk {
            done: true,
            ..Chunk::default()
        };
    }
    let value: Value = match serde_json::from_str(payload) {
        Ok(value) => value,
        Err(e) => {
            return Chunk {
                error: Some(format!(
                    "malformed stream event ({e}): {}",
                    truncate(payload)
                )),
                ..Chunk::default()
            };
        }
    };
    if let Some(error) = value.get("error").filter(|e| !e.is_null()) {
        return Chunk {
            error: Some(error_text(error)),
            ..Chunk::default()
        };
    }
    match backend {
        Backend::OpenAi | Backend::SglangOai => {
            let text = value
                .get("choices")
                .and_then(|c| c.get(0))
                .and_then(|c| c.get("text"))
                .and_then(Value::as_str)
                .unwrap_or("");
            let completion_tokens = value
                .get("usage")
                .and_then(|u| u.get("completion_tokens"))
                .and_then(Value::as_u64)
                .map(|n| u32::try_from(n).unwrap_or(u32::MAX));
            // vLLM 0.6 times only chunks with text: an initial role or empty chunk is not a token.
            // SGLang's client reads a usage count only from a chunk with text.
            Chunk {
                token: !text.is_empty(),
                completion_tokens: completion_tokens.filter(|_| backend == Backend::OpenAi || !text.is_empty()),
                text: Some(text.to_owned()).filter(|t| !t.is_empty()),
                ..Chunk::default()
            }
        }
        // SGLang's client times a chunk whose `text` is not empty, and counts its tokens from
        // `meta_info.completion_tokens` (a chunk without it fails the request, as there).
        Backend::Sglang => {
            let text = value.get("text").and_then(Value::as_str).unwrap_or("");
            if text.is_empty() {
                return Chunk::default();
            }
            let Some(tokens) = value.get("meta_info").and_then(|m| m.get("completion_tokens")).and_then(Value::as_u64) else {
                return Chunk {
                    error: Some(format!("SGLang stream chunk without meta_info.completion_tokens: {}", truncate(payload))),
                    ..Chunk::default()
                };
            };
            Chunk {
                token: true,
                completion_tokens: Some(u32::try_from(tokens).unwrap_or(u32::MAX)),
                whole_text: Some(text.to_owned()),
                ..Chunk::default()
            }
        }
        Backend::Tgi => {
            let generated_text = value.get("generated_text").and_then(Value::as_str);
            Chunk {
                // Every token event counts, even a special token with empty text: TGI sends
                // exactly one event per generated token.
                token: value.get("token").is_some_and(|t| !t.is_null()),
                done: generated_text.is_some(),
                text: generated_text.map(str::to_owned),
                ..Chunk::default()
            }
        }
    }
}

/// Readable text of an error value: OpenAI's `{"message": ...}`, TGI's string, or the JSON.
fn error_text(error: &Value) -> String {
    match error {
        Value::String(s) => s.clone(),
        Value::Object(map) => match map.get("message").and_then(Value::as_str) {
            Some(message) => message.to_owned(),
            None => error.to_string(),
        },
        other => other.to_string(),
    }
}

/// At most 200 characters of `text`, for error messages that quote a server's output.
pub fn truncate(text: &str) -> String {
    const CHARS_MAX: usize = 200;
    match text.char_indices().nth(CHARS_MAX) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prompts_have_the_requested_length() {
        assert_eq!(prompt_token_ids(3, 5).len(), 5);
        assert!(
            prompt_token_ids(9, 1000)
                .iter()
                .all(|&id| (10..266).contains(&id))
        );
        assert_ne!(prompt_token_ids(0, 4), prompt_token_ids(1, 4));
        assert_eq!(prompt_text(2, 7).split(' ').count(), 7);
        assert_eq!(prompt_text(0, 0), "");
    }

    #[test]
    fn tokenizer_prompts_are_text_of_exactly_the_requested_tokens() {
        let t = Tokenizer::shipped(256).unwrap();
        let spec = RequestSpec {
            arrival_ns: 0,
            input_tokens: 300,
            output_tokens: 4,
            max_tokens: 4,
            prefix: Default::default(),
            follows: None,
        };
        for backend in [Backend::OpenAi, Backend::Tgi] {
            let (body, tokens) = request_body(backend, "m", 3, &spec, false, Some(&t)).unwrap();
            assert_eq!(
                tokens, 300,
                "more than the 254 base ids: the ids wrap around"
            );
            let text = body
                .get("prompt")
                .or(body.get("inputs"))
                .and_then(Value::as_str)
                .unwrap();
            assert_eq!(t.encode(text, true).unwrap().len(), 300);
        }
        let (a, _) = prompt_text_with(&t, 0, 8).unwrap();
        let (b, _) = prompt_text_with(&t, 1, 8).unwrap();
        assert_ne!(a, b, "requests start at different offsets");
    }

    #[test]
    fn openai_chunks() {
        let chunk = |p| parse_chunk(Backend::OpenAi, p);
        assert!(chunk(r#"{"choices":[{"text":"hi"}]}"#).token);
        assert_eq!(
            chunk(r#"{"choices":[{"text":"hi"}]}"#).text.as_deref(),
            Some("hi")
        );
        assert!(!chunk(r#"{"choices":[{"text":""}]}"#).token);
        let usage = chunk(r#"{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":7}}"#);
        assert_eq!(usage.completion_tokens, Some(7));
        assert!(!usage.token);
        assert!(chunk("[DONE]").done);
        assert_eq!(
            chunk(r#"{"error":{"message":"boom"}}"#).error.as_deref(),
            Some("boom")
        );
        assert!(chunk("{not json").error.is_some());
    }

    #[test]
    fn sglang_chunks_carry_the_whole_text_and_count() {
        let chunk = |p| parse_chunk(Backend::Sglang, p);
        let c = chunk(r#"{"text": "ab", "meta_info": {"id": "x", "completion_tokens": 3, "finish_reason": null}}"#);
        assert!(c.token && !c.done);
        assert_eq!((c.completion_tokens, c.whole_text.as_deref(), c.text), (Some(3), Some("ab"), None));
        // Empty text is no token; [DONE] ends; an error chunk fails; a count is required.
        assert_eq!(chunk(r#"{"text": "", "meta_info": {"completion_tokens": 0}}"#), Chunk::default());
        assert!(chunk("[DONE]").done);
        assert_eq!(chunk(r#"{"error": {"message": "boom"}}"#).error.as_deref(), Some("boom"));
        assert!(chunk(r#"{"text": "a"}"#).error.unwrap().contains("meta_info.completion_tokens"));
        // sglang-oai: a usage count only beside text, as SGLang's client reads it.
        let oai = |p| parse_chunk(Backend::SglangOai, p);
        assert_eq!(oai(r#"{"choices":[],"usage":{"completion_tokens":7}}"#).completion_tokens, None);
        assert_eq!(oai(r#"{"choices":[{"text":"x"}],"usage":{"completion_tokens":7}}"#).completion_tokens, Some(7));
    }

    #[test]
    fn sglang_bodies_are_its_clients() {
        let spec = RequestSpec { arrival_ns: 0, input_tokens: 3, output_tokens: 4, max_tokens: 4, prefix: Default::default(), follows: None };
        let (body, tokens) = request_body(Backend::Sglang, "m", 0, &spec, true, None).unwrap();
        assert_eq!(tokens, 3);
        assert_eq!(
            body,
            json!({"input_ids": prompt_token_ids(0, 3), "sampling_params": {"temperature": 0.0, "max_new_tokens": 4, "ignore_eos": true},
                   "stream": true, "lora_path": null, "return_logprob": false, "logprob_start_len": -1})
        );
        let t = Tokenizer::shipped(256).unwrap();
        let (body, _) = request_body(Backend::Sglang, "m", 0, &spec, false, Some(&t)).unwrap();
        assert!(body["text"].is_string() && body.get("input_ids").is_none());
        let (body, _) = request_body(Backend::SglangOai, "m", 0, &spec, true, None).unwrap();
        assert_eq!(
            body,
            json!({"model": "m", "prompt": prompt_token_ids(0, 3), "temperature": 0.0, "best_of": 1, "max_tokens": 4, "stream": true, "ignore_eos": true})
        );
    }

    #[test]
    fn tgi_chunks() {
        let chunk = |p| parse_chunk(Backend::Tgi, p);
        let token = chunk(r#"{"token":{"id":5,"text":"","special":true},"generated_text":null}"#);
        assert!(token.token && !token.done);
        let last = chunk(r#"{"token":{"id":6,"text":"x"},"generated_text":"xy","details":{}}"#);
        assert!(last.token && last.done);
        assert_eq!(last.text.as_deref(), Some("xy"));
        assert_eq!(
            chunk(r#"{"error":"overloaded","error_type":"x"}"#)
                .error
                .as_deref(),
            Some("overloaded")
        );
    }
}
