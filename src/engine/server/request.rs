//! A request body to what the engine is asked, or why it is refused: everything the server
//! checks that needs neither the network, the tokenizer nor the engine's queue. The handlers
//! (http.rs) call [`parse_request`] first; the fuzzer (`crate::fuzz`, target `http-body`) calls
//! it on mutated bodies.

use axum::http::StatusCode;
use serde::Deserialize;
use serde_json::json;

use super::engine::SubmitError;
use crate::engine::model::SamplingParams;

/// `max_tokens` when a request gives none (OpenAI's default).
pub const MAX_TOKENS_DEFAULT: u32 = 16;

/// The model name every server also answers to besides its own: `servesim bench`'s default
/// `--model`, so that a bench run without `--model` is not a 404.
pub const MODEL_NAME_ALIAS: &str = "servesim";

/// A refusal before a response starts: a status and a message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
}

impl ApiError {
    pub fn new(status: StatusCode, message: impl Into<String>) -> ApiError {
        ApiError { status, message: message.into() }
    }

    fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, message)
    }

    /// The JSON body the client gets with the status.
    pub fn body(&self) -> String {
        error_body(self.status, &self.message)
    }
}

/// An error's JSON: OpenAI's shape, plus TGI's top-level `error_type` for TGI clients. Here
/// with [`ApiError`] rather than in http.rs, as the connection layer writes it too.
pub(super) fn error_body(status: StatusCode, message: &str) -> String {
    let kind = match status {
        StatusCode::SERVICE_UNAVAILABLE => "overloaded_error",
        StatusCode::NOT_FOUND => "not_found_error",
        StatusCode::REQUEST_TIMEOUT => "timeout_error",
        s if s.is_client_error() => "invalid_request_error",
        _ => "server_error",
    };
    json!({"error": {"message": message, "type": kind, "code": status.as_u16()}, "error_type": kind, "object": "error", "message": message}).to_string()
}

impl From<SubmitError> for ApiError {
    fn from(e: SubmitError) -> ApiError {
        let status = match e {
            SubmitError::Invalid(_) => StatusCode::BAD_REQUEST,
            SubmitError::Overloaded { .. } | SubmitError::EngineStopped => StatusCode::SERVICE_UNAVAILABLE,
        };
        ApiError::new(status, e.to_string())
    }
}

/// Which JSON API a body is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Api {
    /// OpenAI's `/v1/completions`.
    Completions,
    /// TGI's `/generate` and `/generate_stream` (the same body).
    Generate,
}

/// A prompt as the request gave it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PromptInput {
    /// Text still to tokenize, already within the server's byte limit.
    Text(String),
    Tokens(Vec<u32>),
}

/// How the response is shaped and what it echoes; nothing the engine needs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReplyOptions {
    /// The model the request named (OpenAI's responses repeat it).
    pub model: Option<String>,
    /// OpenAI's `stream` (TGI picks it by route).
    pub stream: bool,
    /// OpenAI's `stream_options.include_usage`.
    pub include_usage: bool,
    /// TGI's `details`.
    pub details: bool,
    /// The client's seed (TGI's details repeat it).
    pub seed: Option<u64>,
}

/// A request body, parsed and checked as far as it can be before tokenizing.
#[derive(Clone, Debug, PartialEq)]
pub struct ParsedRequest {
    pub prompt: PromptInput,
    pub max_tokens: u32,
    pub ignore_eos: bool,
    pub sampling: SamplingParams,
    pub reply: ReplyOptions,
}

/// Parses and checks a body of `api` for a server serving `served_model` whose text prompts may
/// hold at most `prompt_bytes_max` bytes. Every refusal is a 4xx with a message naming the
/// field and its value. What is left for later needs the tokenizer (a text prompt's ids) or the
/// engine (context length, vocabulary, queue: `EngineHandle::submit`).
pub fn parse_request(api: Api, body: &[u8], served_model: &str, prompt_bytes_max: usize) -> Result<ParsedRequest, ApiError> {
    match api {
        Api::Completions => parse_completion(body, served_model, prompt_bytes_max),
        Api::Generate => parse_generate(body, prompt_bytes_max),
    }
}

fn parse_json<T: for<'de> Deserialize<'de>>(body: &[u8]) -> Result<T, ApiError> {
    serde_json::from_slice(body).map_err(|e| ApiError::bad_request(format!("malformed JSON request: {e}")))
}

// ---------------------------------------------------------------- OpenAI

#[derive(Deserialize)]
#[serde(untagged)]
enum Prompt {
    Text(String),
    Tokens(Vec<u32>),
    Texts(Vec<String>),
    TokenLists(Vec<Vec<u32>>),
}

#[derive(Deserialize, Default)]
struct StreamOptions {
    #[serde(default)]
    include_usage: bool,
}

#[derive(Deserialize)]
struct CompletionRequest {
    #[serde(default)]
    model: Option<String>,
    prompt: Prompt,
    #[serde(default)]
    max_tokens: Option<u32>,
    #[serde(default)]
    stream: bool,
    #[serde(default)]
    stream_options: Option<StreamOptions>,
    #[serde(default)]
    ignore_eos: bool,
    #[serde(default)]
    temperature: Option<f32>,
    #[serde(default)]
    top_p: Option<f32>,
    /// vLLM's extension of the OpenAI API; −1 or 0 is every token.
    #[serde(default)]
    top_k: Option<i64>,
    #[serde(default)]
    seed: Option<u64>,
    #[serde(default)]
    n: Option<u32>,
    #[serde(default)]
    best_of: Option<u32>,
}

fn parse_completion(body: &[u8], served_model: &str, prompt_bytes_max: usize) -> Result<ParsedRequest, ApiError> {
    let req: CompletionRequest = parse_json(body)?;
    check_model(served_model, req.model.as_deref())?;
    check_one_completion("n", req.n)?;
    check_one_completion("best_of", req.best_of)?;
    let prompt = one_prompt(req.prompt, prompt_bytes_max)?;
    let sampling = sampling(req.temperature, req.top_p, req.top_k, req.seed)?;
    let reply = ReplyOptions {
        model: req.model,
        stream: req.stream,
        include_usage: req.stream_options.unwrap_or_default().include_usage,
        details: false,
        seed: req.seed,
    };
    Ok(ParsedRequest { prompt, max_tokens: req.max_tokens.unwrap_or(MAX_TOKENS_DEFAULT), ignore_eos: req.ignore_eos, sampling, reply })
}

/// The request's one prompt: OpenAI allows a list of them, this server one a request.
fn one_prompt(prompt: Prompt, prompt_bytes_max: usize) -> Result<PromptInput, ApiError> {
    let one = |n: usize| if n == 1 { Ok(()) } else { Err(ApiError::bad_request(format!("a request must hold exactly one prompt, got {n}"))) };
    Ok(match prompt {
        Prompt::Text(t) => text_prompt(t, prompt_bytes_max)?,
        Prompt::Tokens(t) => PromptInput::Tokens(t),
        Prompt::Texts(mut v) => {
            one(v.len())?;
            text_prompt(v.remove(0), prompt_bytes_max)?
        }
        Prompt::TokenLists(mut v) => {
            one(v.len())?;
            PromptInput::Tokens(v.remove(0))
        }
    })
}

/// A text prompt within the byte limit, checked before any tokenizing: a long prompt takes
/// seconds and hundreds of MB to tokenize (issue 17).
fn text_prompt(text: String, prompt_bytes_max: usize) -> Result<PromptInput, ApiError> {
    if text.len() > prompt_bytes_max {
        return Err(ApiError::bad_request(format!(
            "the prompt is {} bytes, more than this server's limit of {prompt_bytes_max} bytes (serve --max-prompt-bytes)",
            text.len()
        )));
    }
    Ok(PromptInput::Text(text))
}

/// A request may name the served model, its alias, or none; vLLM answers any other name 404.
fn check_model(served_model: &str, model: Option<&str>) -> Result<(), ApiError> {
    match model {
        None => Ok(()),
        Some(m) if m == served_model || m == MODEL_NAME_ALIAS => Ok(()),
        Some(m) => Err(ApiError::new(
            StatusCode::NOT_FOUND,
            format!("The model `{m}` does not exist: this server serves `{served_model}` (also answering to `{MODEL_NAME_ALIAS}`)"),
        )),
    }
}

/// One completion a request: `n` or `best_of` other than 1 is refused rather than ignored.
fn check_one_completion(field: &str, value: Option<u32>) -> Result<(), ApiError> {
    match value {
        None | Some(1) => Ok(()),
        Some(v) => Err(ApiError::bad_request(format!(
            "{field} = {v} is not supported: this server returns exactly one completion per request ({field} must be 1)"
        ))),
    }
}

fn sampling(temperature: Option<f32>, top_p: Option<f32>, top_k: Option<i64>, seed: Option<u64>) -> Result<SamplingParams, ApiError> {
    SamplingParams::from_request(temperature, top_p, top_k, seed).map_err(ApiError::bad_request)
}

// ---------------------------------------------------------------- TGI

#[derive(Deserialize, Default)]
struct TgiParameters {
    #[serde(default)]
    max_new_tokens: Option<u32>,
    #[serde(default)]
    details: bool,
    #[serde(default)]
    temperature: Option<f32>,
    #[serde(default)]
    top_p: Option<f32>,
    #[serde(default)]
    top_k: Option<i64>,
    #[serde(default)]
    seed: Option<u64>,
    #[serde(default)]
    ignore_eos: bool,
    #[serde(default)]
    best_of: Option<u32>,
}

#[derive(Deserialize)]
struct TgiRequest {
    inputs: String,
    #[serde(default)]
    parameters: Option<TgiParameters>,
}

fn parse_generate(body: &[u8], prompt_bytes_max: usize) -> Result<ParsedRequest, ApiError> {
    let req: TgiRequest = parse_json(body)?;
    let p = req.parameters.unwrap_or_default();
    check_one_completion("best_of", p.best_of)?;
    let sampling = sampling(p.temperature, p.top_p, p.top_k, p.seed)?;
    let prompt = text_prompt(req.inputs, prompt_bytes_max)?;
    let reply = ReplyOptions { model: None, stream: false, include_usage: false, details: p.details, seed: p.seed };
    Ok(ParsedRequest { prompt, max_tokens: p.max_new_tokens.unwrap_or(MAX_TOKENS_DEFAULT), ignore_eos: p.ignore_eos, sampling, reply })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn completion(body: &str) -> Result<ParsedRequest, ApiError> {
        parse_request(Api::Completions, body.as_bytes(), "tiny", 8)
    }

    fn generate(body: &str) -> Result<ParsedRequest, ApiError> {
        parse_request(Api::Generate, body.as_bytes(), "tiny", 8)
    }

    #[test]
    fn a_valid_completion_is_parsed_with_defaults() {
        let req = completion(r#"{"model": "tiny", "prompt": [1, 2, 3], "stream": true, "stream_options": {"include_usage": true}}"#).unwrap();
        assert_eq!(req.prompt, PromptInput::Tokens(vec![1, 2, 3]));
        assert_eq!(req.max_tokens, MAX_TOKENS_DEFAULT);
        assert_eq!(req.sampling, SamplingParams::from_request(None, None, None, None).unwrap());
        assert!(req.reply.stream && req.reply.include_usage);
        assert_eq!(completion(r#"{"prompt": ["hi"]}"#).unwrap().prompt, PromptInput::Text("hi".into()));
    }

    #[test]
    fn a_valid_generate_is_parsed() {
        let req = generate(r#"{"inputs": "hello", "parameters": {"max_new_tokens": 3, "details": true, "seed": 5}}"#).unwrap();
        assert_eq!(req.prompt, PromptInput::Text("hello".into()));
        assert_eq!(req.max_tokens, 3);
        assert!(req.reply.details);
        assert_eq!(req.reply.seed, Some(5));
    }

    /// Each refusal's status, and a word of its message that names what was wrong.
    #[test]
    fn refusals_name_the_field() {
        let cases = [
            (completion("{"), 400, "malformed JSON"),
            (completion(r#"{"model": "other", "prompt": "a"}"#), 404, "`other`"),
            (completion(r#"{"prompt": "a", "n": 2}"#), 400, "n = 2"),
            (completion(r#"{"prompt": "a", "best_of": 3}"#), 400, "best_of = 3"),
            (completion(r#"{"prompt": ["a", "b"]}"#), 400, "exactly one prompt, got 2"),
            (completion(r#"{"prompt": "123456789"}"#), 400, "9 bytes"),
            (completion(r#"{"prompt": "a", "temperature": -1}"#), 400, "temperature"),
            (generate(r#"{"inputs": "a", "parameters": {"top_p": 0}}"#), 400, "top_p"),
            (generate(r#"{"inputs": "123456789"}"#), 400, "limit of 8 bytes"),
        ];
        for (result, status, word) in cases {
            let e = result.unwrap_err();
            assert_eq!(e.status.as_u16(), status, "{e:?}");
            assert!(e.message.contains(word), "{:?} lacks {word:?}", e.message);
        }
    }
}
