//! A request body to what the engine is asked, or why it is refused: everything the server
//! checks that needs neither the network, the tokenizer nor the engine's queue. The handlers
//! (http.rs) call [`parse_request`] first; the fuzzer (`crate::fuzz`, target `http-body`) calls
//! it on mutated bodies.

use axum::http::StatusCode;
use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::engine::SubmitError;
use super::fields::{self, NEUTRAL_SAMPLING, REFUSED_VLLM, Rule, Table};
use super::logprobs::TOP_LOGPROBS_MAX;
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

    pub(super) fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, message)
    }

    /// The server's own failure (an engine error, a model's unusable template).
    pub(super) fn internal(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, message)
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
    /// vLLM's `stream_options.continuous_usage_stats`: every chunk carries the usage so far.
    pub continuous_usage: bool,
    /// TGI's `details`.
    pub details: bool,
    /// The client's seed (TGI's details repeat it).
    pub seed: Option<u64>,
}

/// What the output holds and where it ends, beyond the engine's own stop (EOS, `max_tokens`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OutputOptions {
    /// Strings that end the output where one first appears (OpenAI `stop`, TGI `parameters.stop`).
    pub stop: Vec<String>,
    /// Tokens that end it when sampled (vLLM's `stop_token_ids`).
    pub stop_token_ids: Vec<u32>,
    /// Whether the stop string (or stop token's text) stays in the output: vLLM's
    /// `include_stop_str_in_output`; always for TGI, which keeps its stop sequences.
    pub include_stop: bool,
    /// The output text starts with the prompt's (OpenAI `echo`, TGI `return_full_text`).
    pub echo: bool,
    /// Log-probabilities of each generated token, with this many most likely alternatives
    /// (OpenAI `logprobs`/`top_logprobs`, TGI `top_n_tokens`).
    pub logprobs: Option<u32>,
    /// Special tokens' text stays in the output (vLLM's `skip_special_tokens: false`); by
    /// default it is left out, as vLLM and TGI decode.
    pub keep_special: bool,
}

/// A request body, parsed and checked as far as it can be before tokenizing.
#[derive(Clone, Debug, PartialEq)]
pub struct ParsedRequest {
    pub prompt: PromptInput,
    pub max_tokens: u32,
    pub ignore_eos: bool,
    pub sampling: SamplingParams,
    pub reply: ReplyOptions,
    pub output: OutputOptions,
    /// Whether a text prompt is tokenized with the tokenizer's special tokens (a Llama BOS).
    pub add_special_tokens: bool,
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

/// A body as a JSON object, its fields checked against `table` ([`fields::check`]).
pub(super) fn parse_object(body: &[u8], table: &Table, request: &str) -> Result<Map<String, Value>, ApiError> {
    let value: Value = serde_json::from_slice(body).map_err(|e| ApiError::bad_request(format!("malformed JSON request: {e}")))?;
    let Value::Object(map) = value else {
        return Err(ApiError::bad_request(format!("{request} must be a JSON object, got {}", fields::shown(&value))));
    };
    fields::check(&map, table, request).map_err(ApiError::bad_request)?;
    Ok(map)
}

/// A checked object as the route's typed request. A field of the wrong type is named: serde
/// names none behind `#[serde(flatten)]` ("invalid type: string \"yes\", expected a boolean").
/// The field is the one whose absence clears the error; else a required one whose absence turns
/// the error into its own absence (a missing required field masks any other error).
pub(super) fn typed<T: for<'de> Deserialize<'de>>(map: Map<String, Value>) -> Result<T, ApiError> {
    let mut value = Value::Object(map);
    let error = match T::deserialize(&value) {
        Ok(t) => return Ok(t),
        Err(e) => e.to_string(),
    };
    let keys: Vec<String> = value.as_object().map(|m| m.keys().cloned().collect()).unwrap_or_default();
    for required in [false, true] {
        for key in &keys {
            let Some(field) = value.as_object_mut().and_then(|m| m.remove(key)) else { continue };
            let culprit = match T::deserialize(&value) {
                Ok(_) => !required,
                Err(e) => required && e.to_string().starts_with(&format!("missing field `{key}`")),
            };
            if culprit {
                return Err(ApiError::bad_request(format!("invalid request: `{key}` = {}: {error}", fields::shown(&field))));
            }
            if let Some(m) = value.as_object_mut() {
                m.insert(key.clone(), field);
            }
        }
    }
    Err(ApiError::bad_request(format!("invalid request: {error}")))
}

// ---------------------------------------------------------------- OpenAI, both routes

/// Most stop strings a request may give, and the longest: each generated token's text is
/// searched for all of them.
pub const STOP_STRINGS_MAX: usize = 32;
pub const STOP_STRING_BYTES_MAX: usize = 1024;

#[derive(Deserialize)]
#[serde(untagged)]
pub(super) enum StopField {
    One(String),
    Many(Vec<String>),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct StreamOptions {
    #[serde(default)]
    include_usage: Option<bool>,
    #[serde(default)]
    continuous_usage_stats: Option<bool>,
}

/// The fields the completions and chat routes share (vLLM's names).
#[derive(Deserialize)]
pub(super) struct OpenAiCommon {
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    stream: Option<bool>,
    #[serde(default)]
    stream_options: Option<StreamOptions>,
    #[serde(default)]
    ignore_eos: Option<bool>,
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
    stop: Option<StopField>,
    #[serde(default)]
    stop_token_ids: Option<Vec<u32>>,
    #[serde(default)]
    include_stop_str_in_output: Option<bool>,
    #[serde(default)]
    echo: Option<bool>,
    #[serde(default)]
    add_special_tokens: Option<bool>,
    #[serde(default)]
    skip_special_tokens: Option<bool>,
}

/// What [`OpenAiCommon`] asks, checked.
pub(super) struct Common {
    pub ignore_eos: bool,
    pub sampling: SamplingParams,
    pub reply: ReplyOptions,
    /// Everything but `logprobs`, whose form differs by route.
    pub output: OutputOptions,
    pub add_special_tokens: Option<bool>,
}

/// The OpenAI routes' fields that are neither sampling nor output, as [`Table`] rows.
pub(super) const OPENAI_COMMON_FIELDS: [(&str, Rule); 16] = [
    ("model", Rule::Used),
    ("stream", Rule::Used),
    ("stream_options", Rule::Used),
    ("ignore_eos", Rule::Used),
    ("temperature", Rule::Used),
    ("top_p", Rule::Used),
    ("top_k", Rule::Used),
    ("seed", Rule::Used),
    ("n", Rule::Used),
    ("stop", Rule::Used),
    ("stop_token_ids", Rule::Used),
    ("include_stop_str_in_output", Rule::Used),
    ("echo", Rule::Used),
    ("add_special_tokens", Rule::Used),
    ("skip_special_tokens", Rule::Used),
    ("user", Rule::Inert),
];

pub(super) fn common(c: OpenAiCommon, served_model: &str) -> Result<Common, ApiError> {
    check_model(served_model, c.model.as_deref())?;
    check_one_completion("n", c.n)?;
    let stream = c.stream.unwrap_or(false);
    // vLLM refuses the same: the options shape a stream that is not there.
    if c.stream_options.is_some() && !stream {
        return Err(ApiError::bad_request("`stream_options` is only allowed with `stream`: true"));
    }
    let sampling = sampling(c.temperature, c.top_p, c.top_k, c.seed)?;
    let output = OutputOptions {
        stop: stop_strings(c.stop, "stop")?,
        stop_token_ids: c.stop_token_ids.unwrap_or_default(),
        include_stop: c.include_stop_str_in_output.unwrap_or(false),
        echo: c.echo.unwrap_or(false),
        logprobs: None,
        keep_special: !c.skip_special_tokens.unwrap_or(true),
    };
    let include_usage = c.stream_options.as_ref().and_then(|o| o.include_usage).unwrap_or(false);
    let continuous_usage = c.stream_options.as_ref().and_then(|o| o.continuous_usage_stats).unwrap_or(false);
    // vLLM puts usage in every chunk only when usage is asked for at all; asked alone it would
    // do nothing.
    if continuous_usage && !include_usage {
        return Err(ApiError::bad_request("`stream_options.continuous_usage_stats` needs `stream_options.include_usage`: true"));
    }
    let reply = ReplyOptions { model: c.model, stream, include_usage, continuous_usage, details: false, seed: c.seed };
    Ok(Common { ignore_eos: c.ignore_eos.unwrap_or(false), sampling, reply, output, add_special_tokens: c.add_special_tokens })
}

/// The stop strings of `field`: a string or a list, each non-empty, within the limits.
pub(super) fn stop_strings(stop: Option<StopField>, field: &str) -> Result<Vec<String>, ApiError> {
    let list = match stop {
        None => Vec::new(),
        Some(StopField::One(s)) => vec![s],
        Some(StopField::Many(v)) => v,
    };
    if list.len() > STOP_STRINGS_MAX {
        return Err(ApiError::bad_request(format!("`{field}` holds {} strings, more than this server's limit of {STOP_STRINGS_MAX}", list.len())));
    }
    for (i, s) in list.iter().enumerate() {
        if s.is_empty() {
            return Err(ApiError::bad_request(format!("`{field}`[{i}] is empty: it would end every output before its first token")));
        }
        if s.len() > STOP_STRING_BYTES_MAX {
            return Err(ApiError::bad_request(format!("`{field}`[{i}] is {} bytes, more than this server's limit of {STOP_STRING_BYTES_MAX}", s.len())));
        }
    }
    Ok(list)
}

/// A count of top alternatives asked in `field`, within vLLM's default `max_logprobs`.
pub(super) fn logprobs_count(field: &str, n: u32) -> Result<u32, ApiError> {
    if n > TOP_LOGPROBS_MAX {
        return Err(ApiError::bad_request(format!("`{field}` = {n} is more than this server's limit of {TOP_LOGPROBS_MAX} (vLLM's default max_logprobs)")));
    }
    Ok(n)
}

// ---------------------------------------------------------------- OpenAI completions

#[derive(Deserialize)]
#[serde(untagged)]
enum Prompt {
    Text(String),
    Tokens(Vec<u32>),
    Texts(Vec<String>),
    TokenLists(Vec<Vec<u32>>),
}

#[derive(Deserialize)]
struct CompletionRequest {
    prompt: Prompt,
    #[serde(default)]
    max_tokens: Option<u32>,
    #[serde(default)]
    best_of: Option<u32>,
    #[serde(default)]
    logprobs: Option<u32>,
    #[serde(flatten)]
    common: OpenAiCommon,
}

/// `/v1/completions`' fields, by rule.
fn completion_fields() -> Vec<(&'static str, Rule)> {
    let own = [
        ("prompt", Rule::Used),
        ("max_tokens", Rule::Used),
        ("best_of", Rule::Used),
        ("logprobs", Rule::Used),
        ("suffix", Rule::OnlyAt { is_neutral: fields::is_empty, neutral: "\"\"", why: "there is no insertion mode" }),
    ];
    own.into_iter().chain(OPENAI_COMMON_FIELDS).chain(NEUTRAL_SAMPLING).chain(REFUSED_VLLM).collect()
}

fn parse_completion(body: &[u8], served_model: &str, prompt_bytes_max: usize) -> Result<ParsedRequest, ApiError> {
    let req: CompletionRequest = typed(parse_object(body, &completion_fields(), "a completion request")?)?;
    check_one_completion("best_of", req.best_of)?;
    let Common { ignore_eos, sampling, reply, mut output, add_special_tokens } = common(req.common, served_model)?;
    if let Some(n) = req.logprobs {
        if output.echo {
            return Err(ApiError::bad_request("`echo` with `logprobs` is not supported: it reports the prompt's log-probabilities, which are not computed"));
        }
        output.logprobs = Some(logprobs_count("logprobs", n)?);
    }
    let prompt = one_prompt(req.prompt, prompt_bytes_max)?;
    Ok(ParsedRequest {
        prompt,
        max_tokens: req.max_tokens.unwrap_or(MAX_TOKENS_DEFAULT),
        ignore_eos,
        sampling,
        reply,
        output,
        // vLLM's default for completions: the prompt is tokenized as the model was trained.
        add_special_tokens: add_special_tokens.unwrap_or(true),
    })
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
pub(super) fn text_prompt(text: String, prompt_bytes_max: usize) -> Result<PromptInput, ApiError> {
    check_prompt_bytes(text.len(), prompt_bytes_max)?;
    Ok(PromptInput::Text(text))
}

pub(super) fn check_prompt_bytes(bytes: usize, prompt_bytes_max: usize) -> Result<(), ApiError> {
    if bytes > prompt_bytes_max {
        return Err(ApiError::bad_request(format!(
            "the prompt is {bytes} bytes, more than this server's limit of {prompt_bytes_max} bytes (serve --max-prompt-bytes)"
        )));
    }
    Ok(())
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
pub(super) fn check_one_completion(field: &str, value: Option<u32>) -> Result<(), ApiError> {
    match value {
        None | Some(1) => Ok(()),
        Some(v) => Err(ApiError::bad_request(format!(
            "{field} = {v} is not supported: this server returns exactly one completion per request ({field} must be 1)"
        ))),
    }
}

pub(super) fn sampling(temperature: Option<f32>, top_p: Option<f32>, top_k: Option<i64>, seed: Option<u64>) -> Result<SamplingParams, ApiError> {
    SamplingParams::from_request(temperature, top_p, top_k, seed).map_err(ApiError::bad_request)
}

// ---------------------------------------------------------------- TGI

#[derive(Deserialize)]
struct TgiRequest {
    inputs: String,
    #[serde(default)]
    parameters: Option<TgiParameters>,
    #[serde(default)]
    add_special_tokens: Option<bool>,
}

#[derive(Deserialize, Default)]
struct TgiParameters {
    #[serde(default)]
    max_new_tokens: Option<u32>,
    #[serde(default)]
    details: Option<bool>,
    #[serde(default)]
    do_sample: Option<bool>,
    #[serde(default)]
    temperature: Option<f32>,
    #[serde(default)]
    top_p: Option<f32>,
    #[serde(default)]
    top_k: Option<i64>,
    #[serde(default)]
    seed: Option<u64>,
    #[serde(default)]
    stop: Option<StopField>,
    #[serde(default)]
    return_full_text: Option<bool>,
    #[serde(default)]
    top_n_tokens: Option<u32>,
    /// Not TGI's: servesim's, for clients that send it to both APIs.
    #[serde(default)]
    ignore_eos: Option<bool>,
    #[serde(default)]
    best_of: Option<u32>,
}

const TGI_FIELDS: [(&str, Rule); 3] = [("inputs", Rule::Used), ("parameters", Rule::Used), ("add_special_tokens", Rule::Used)];

/// TGI 2.3's `parameters` (router/src/lib.rs, `GenerateParameters`), by rule.
const TGI_PARAMETERS: [(&str, Rule); 19] = [
    ("max_new_tokens", Rule::Used),
    ("details", Rule::Used),
    ("do_sample", Rule::Used),
    ("temperature", Rule::Used),
    ("top_p", Rule::Used),
    ("top_k", Rule::Used),
    ("seed", Rule::Used),
    ("stop", Rule::Used),
    ("return_full_text", Rule::Used),
    ("top_n_tokens", Rule::Used),
    ("ignore_eos", Rule::Used),
    ("best_of", Rule::Used),
    ("decoder_input_details", Rule::OnlyAt { is_neutral: fields::is_false, neutral: "false", why: "the prompt's log-probabilities are not computed" }),
    ("repetition_penalty", fields::PENALTY_AT_1),
    ("frequency_penalty", fields::PENALTY_AT_0),
    ("watermark", Rule::OnlyAt { is_neutral: fields::is_false, neutral: "false", why: "outputs are not watermarked" }),
    ("typical_p", Rule::Refused("the sampler has temperature, top-k and top-p only")),
    ("truncate", fields::NEVER_TRUNCATED),
    ("grammar", fields::NO_STRUCTURED_OUTPUT),
];

pub(super) fn parse_generate(body: &[u8], prompt_bytes_max: usize) -> Result<ParsedRequest, ApiError> {
    let map = parse_object(body, &TGI_FIELDS, "a TGI generate request")?;
    if let Some(Value::Object(parameters)) = map.get("parameters") {
        fields::check(parameters, &TGI_PARAMETERS, "TGI's parameters").map_err(ApiError::bad_request)?;
    }
    let req: TgiRequest = typed(map)?;
    let p = req.parameters.unwrap_or_default();
    check_one_completion("best_of", p.best_of)?;
    let sampling = tgi_sampling(&p)?;
    let prompt = text_prompt(req.inputs, prompt_bytes_max)?;
    let output = OutputOptions {
        stop: stop_strings(p.stop, "parameters.stop")?,
        stop_token_ids: Vec::new(),
        // TGI's output keeps the stop sequence that ended it.
        include_stop: true,
        echo: p.return_full_text.unwrap_or(false),
        // TGI reports every token's log-probability; top_n_tokens adds the most likely.
        logprobs: Some(logprobs_count("parameters.top_n_tokens", p.top_n_tokens.unwrap_or(0))?),
        // TGI decodes `generated_text` without special tokens, and has no field to keep them.
        keep_special: false,
    };
    let reply = ReplyOptions { details: p.details.unwrap_or(false), seed: p.seed, ..ReplyOptions::default() };
    Ok(ParsedRequest {
        prompt,
        max_tokens: p.max_new_tokens.unwrap_or(MAX_TOKENS_DEFAULT),
        ignore_eos: p.ignore_eos.unwrap_or(false),
        sampling,
        reply,
        output,
        add_special_tokens: req.add_special_tokens.unwrap_or(true),
    })
}

/// TGI's choice between sampling and greedy decoding: it samples when `do_sample` is set or when
/// any warper is (temperature ≠ 1, top-k on, top-p < 1), and decodes greedily otherwise, so a
/// request with no parameters is greedy (TGI 2.3, server/text_generation_server/utils/tokens.py,
/// `NextTokenChooser`: `sampling = do_sample or has_warpers`).
fn tgi_sampling(p: &TgiParameters) -> Result<SamplingParams, ApiError> {
    let checked = sampling(p.temperature, p.top_p, p.top_k, p.seed)?;
    let warpers = p.temperature.is_some_and(|t| t != 1.0) || p.top_k.is_some_and(|k| k > 0) || p.top_p.is_some_and(|q| q < 1.0);
    if p.do_sample.unwrap_or(false) || warpers { Ok(checked) } else { Ok(SamplingParams { temperature: 0.0, ..checked }) }
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
        assert!(req.reply.stream && req.reply.include_usage && !req.reply.continuous_usage);
        assert_eq!(completion(r#"{"prompt": ["hi"]}"#).unwrap().prompt, PromptInput::Text("hi".into()));
        let req = completion(r#"{"prompt": "a", "stream": true, "stream_options": {"include_usage": true, "continuous_usage_stats": true}}"#).unwrap();
        assert!(req.reply.continuous_usage);
    }

    #[test]
    fn a_valid_generate_is_parsed() {
        let req = generate(r#"{"inputs": "hello", "parameters": {"max_new_tokens": 3, "details": true, "seed": 5}}"#).unwrap();
        assert_eq!(req.prompt, PromptInput::Text("hello".into()));
        assert_eq!(req.max_tokens, 3);
        assert!(req.reply.details);
        assert_eq!(req.reply.seed, Some(5));
    }

    /// TGI 2.3 decodes greedily unless `do_sample` or a warper asks it to sample.
    #[test]
    fn tgi_is_greedy_by_default_and_keeps_its_stop_sequences() {
        let greedy = |body: &str| generate(body).unwrap().sampling.is_greedy();
        assert!(greedy(r#"{"inputs": "a"}"#));
        assert!(greedy(r#"{"inputs": "a", "parameters": {"do_sample": false, "seed": 3, "top_k": 0, "top_p": 1.0, "temperature": 1.0}}"#));
        assert!(!greedy(r#"{"inputs": "a", "parameters": {"do_sample": true}}"#));
        for warper in [r#"{"temperature": 0.7}"#, r#"{"top_k": 5}"#, r#"{"top_p": 0.9}"#] {
            assert!(!greedy(&format!(r#"{{"inputs": "a", "parameters": {warper}}}"#)), "{warper}");
        }
        let req = generate(r#"{"inputs": "a", "parameters": {"stop": ["x", "yz"], "return_full_text": true, "top_n_tokens": 3}}"#).unwrap();
        assert_eq!(req.output, OutputOptions { stop: vec!["x".into(), "yz".into()], stop_token_ids: vec![], include_stop: true, echo: true, logprobs: Some(3), keep_special: false });
    }

    #[test]
    fn completion_output_fields_are_parsed() {
        let req = completion(r#"{"prompt": "a", "stop": "END", "stop_token_ids": [7], "echo": true, "include_stop_str_in_output": true}"#).unwrap();
        assert_eq!(req.output, OutputOptions { stop: vec!["END".into()], stop_token_ids: vec![7], include_stop: true, echo: true, logprobs: None, keep_special: false });
        assert_eq!(completion(r#"{"prompt": "a", "logprobs": 0}"#).unwrap().output.logprobs, Some(0));
        assert!(completion(r#"{"prompt": "a"}"#).unwrap().add_special_tokens);
        assert!(!completion(r#"{"prompt": "a", "add_special_tokens": false}"#).unwrap().add_special_tokens);
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
            (completion(r#"{"prompt": "a", "echo": true, "logprobs": 2}"#), 400, "`echo` with `logprobs`"),
            (completion(r#"{"prompt": "a", "logprobs": 99}"#), 400, "`logprobs` = 99"),
            (completion(r#"{"prompt": "a", "stream_options": {"include_usage": true}}"#), 400, "`stream_options`"),
            (completion(r#"{"prompt": "a", "stream": true, "stream_options": {"continuous_usage_stats": true}}"#), 400, "needs `stream_options.include_usage`"),
            (completion(r#"{"prompt": "a", "stream": true, "stream_options": {"usage": true}}"#), 400, "unknown field `usage`"),
            (completion(r#"{"prompt": "a", "min_tokens": 4}"#), 400, "`min_tokens` = 4"),
            (completion(r#"{"prompt": "a", "messages": []}"#), 400, "unknown field `messages`"),
            (completion(r#"[1, 2]"#), 400, "must be a JSON object"),
            (generate(r#"{"inputs": "a", "parameters": {"adapter_id": "x"}}"#), 400, "unknown field `adapter_id`"),
            (generate(r#"{"inputs": "a", "parameters": {"stop": ["", "b"]}}"#), 400, "`parameters.stop`[0] is empty"),
            // A value of the wrong type, which serde reports without the field's name.
            (completion(r#"{"prompt": "a", "skip_special_tokens": "yes"}"#), 400, "`skip_special_tokens` = \"yes\": invalid type: string \"yes\", expected a boolean"),
            (completion(r#"{"prompt": "a", "stream": 1}"#), 400, "`stream` = 1"),
            (completion(r#"{"prompt": {"text": "a"}}"#), 400, "`prompt` = {\"text\":\"a\"}"),
            (generate(r#"{"inputs": 5}"#), 400, "`inputs` = 5"),
        ];
        for (result, status, word) in cases {
            let e = result.unwrap_err();
            assert_eq!(e.status.as_u16(), status, "{e:?}");
            assert!(e.message.contains(word), "{:?} lacks {word:?}", e.message);
        }
    }
}
