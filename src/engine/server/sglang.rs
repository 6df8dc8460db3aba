//! SGLang's native `POST /generate` (as SGLang 0.4.9 serves it), on the route TGI's `/generate`
//! also takes: the body's fields say which API a request speaks. TGI's body holds `inputs`;
//! SGLang's `text` or `input_ids` (and `sampling_params`). A body with both is refused as
//! ambiguous, one with neither as naming no prompt.
//!
//! ```text
//!  {"text": "…", "sampling_params": {"max_new_tokens": 8}, "stream": true}
//!    → data: {"text": "<the whole output so far>", "meta_info": {"id", "finish_reason": null,
//!             "prompt_tokens", "completion_tokens"}}                      one a delivery
//!    → data: {… "finish_reason": {"type": "length", "length": 8}, "e2e_latency": 0.41}}
//!    → data: [DONE]
//! ```
//!
//! Every field of SGLang's `GenerateReqInput` and `SamplingParams` is acted on, accepted at the
//! value that asks for nothing, or refused by name ([`super::fields`]). A batch (a list of
//! prompts) is refused: one prompt a request. `meta_info.cached_tokens` is left out: the engine
//! reports no prefix-cache hits per request.

use std::time::Instant;

use axum::body::Bytes;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::fields::{self, Rule};
use super::front::{Ask, Front, json_response, prompt_ids, start};
use super::generation::{Finish, Generation, Piece};
use super::request::{ApiError, OutputOptions, ParsedRequest, PromptInput, ReplyOptions, StopField, check_one_completion, parse_object, sampling, stop_strings, text_prompt, typed};
use super::sse::{Events, data_line, piece_stream};

/// SGLang's `max_new_tokens` when a request gives none (`SamplingParams`' default).
pub const SGLANG_MAX_NEW_TOKENS_DEFAULT: u32 = 128;

/// Fields only SGLang's body has: one of them makes a `/generate` body SGLang's.
const SGLANG_MARKERS: [&str; 4] = ["text", "input_ids", "input_embeds", "sampling_params"];
/// TGI's prompt field.
const TGI_MARKER: &str = "inputs";

/// Which API a `/generate` body speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GenerateApi {
    Tgi,
    Sglang,
}

/// The API of a `/generate` body, by its fields. A body that is not a JSON object goes to TGI's
/// parser, which says what is wrong with it.
pub fn generate_api(body: &[u8]) -> Result<GenerateApi, ApiError> {
    let Ok(Value::Object(map)) = serde_json::from_slice::<Value>(body) else {
        return Ok(GenerateApi::Tgi);
    };
    let sglang: Vec<&str> = SGLANG_MARKERS.into_iter().filter(|k| map.contains_key(*k)).collect();
    match (map.contains_key(TGI_MARKER), sglang.first()) {
        (true, Some(field)) => Err(ApiError::bad_request(format!(
            "ambiguous /generate request: `{TGI_MARKER}` is TGI's prompt and `{field}` SGLang's; send one API's fields"
        ))),
        (true, None) => Ok(GenerateApi::Tgi),
        (false, Some(_)) => Ok(GenerateApi::Sglang),
        (false, None) => Err(ApiError::bad_request(
            "a /generate request needs a prompt: TGI's `inputs`, or SGLang's `text` or `input_ids`",
        )),
    }
}

/// `POST /generate`: TGI's or SGLang's, by the body ([`generate_api`]).
pub async fn generate(State(front): State<Front>, body: Bytes) -> Response {
    match generate_api(&body) {
        Err(e) => e.into_response(),
        Ok(GenerateApi::Tgi) => super::tgi::generate(State(front), body).await,
        Ok(GenerateApi::Sglang) => match respond(&front, &body).await {
            Ok(response) => response,
            Err(e) => e.into_response(),
        },
    }
}

/// SGLang's `GET /get_server_info` (0.5.x: `/server_info`), as far as its bench client reads it:
/// `internal_states[0].avg_spec_accept_length`, the tokens a verifying step kept, its own token
/// included, with speculation on; without, the state has no such key, and SGLang's client
/// reports no accept length.
pub async fn server_info(State(front): State<Front>) -> Response {
    let engine = &front.engine;
    let mut state = Map::new();
    if let Some(spec) = engine.stats().spec_decode {
        state.insert("avg_spec_accept_length".into(), json!(spec.mean_tokens_per_step()));
    }
    json_response(&json!({"model_path": engine.model_name(), "internal_states": [state]}))
}

// Reasons SGLang's table gives for several fields.
const NO_LOGPROBS: &str = "this route returns no log-probabilities";
const NO_DISAGGREGATION: &str = "there is no prefill/decode disaggregation";
const TEXT_ONLY: &str = "the model takes text only";

/// SGLang 0.4.9's `GenerateReqInput` (python/sglang/srt/managers/io_struct.py), by rule.
const SGLANG_FIELDS: [(&str, Rule); 23] = [
    ("text", Rule::Used),
    ("input_ids", Rule::Used),
    ("sampling_params", Rule::Used),
    ("stream", Rule::Used),
    ("rid", Rule::Used),
    ("return_logprob", Rule::OnlyAt { is_neutral: fields::is_false, neutral: "false", why: NO_LOGPROBS }),
    // Read only with `return_logprob`, which must be false.
    ("logprob_start_len", Rule::Inert),
    ("top_logprobs_num", Rule::OnlyAt { is_neutral: fields::is_zero, neutral: "0", why: NO_LOGPROBS }),
    ("token_ids_logprob", Rule::OnlyAt { is_neutral: fields::is_empty, neutral: "[]", why: NO_LOGPROBS }),
    ("return_text_in_logprobs", Rule::Inert),
    // Whether SGLang counts the request in its own metrics; this server counts every request.
    ("log_metrics", Rule::Inert),
    ("lora_path", Rule::Refused("there are no LoRA adapters")),
    ("input_embeds", Rule::Refused("prompts are text or token ids")),
    ("image_data", Rule::Refused(TEXT_ONLY)),
    ("audio_data", Rule::Refused(TEXT_ONLY)),
    ("modalities", Rule::OnlyAt { is_neutral: fields::is_empty, neutral: "[]", why: TEXT_ONLY }),
    ("session_params", Rule::Refused("there are no sessions")),
    ("custom_logit_processor", fields::NO_LOGITS_PROCESSORS),
    ("return_hidden_states", Rule::OnlyAt { is_neutral: fields::is_false, neutral: "false", why: "hidden states are not returned" }),
    ("bootstrap_host", Rule::Refused(NO_DISAGGREGATION)),
    ("bootstrap_port", Rule::Refused(NO_DISAGGREGATION)),
    ("bootstrap_room", Rule::Refused(NO_DISAGGREGATION)),
    ("data_parallel_rank", Rule::Refused("one engine: there are no data-parallel ranks")),
];

/// SGLang 0.4.9's `SamplingParams` (python/sglang/srt/sampling/sampling_params.py), by rule.
const SGLANG_SAMPLING: [(&str, Rule); 23] = [
    ("max_new_tokens", Rule::Used),
    ("stop", Rule::Used),
    ("stop_token_ids", Rule::Used),
    ("temperature", Rule::Used),
    ("top_p", Rule::Used),
    ("top_k", Rule::Used),
    ("ignore_eos", Rule::Used),
    ("skip_special_tokens", Rule::Used),
    ("no_stop_trim", Rule::Used),
    ("n", Rule::Used),
    ("min_p", fields::MIN_P_AT_0),
    ("frequency_penalty", fields::PENALTY_AT_0),
    ("presence_penalty", fields::PENALTY_AT_0),
    ("repetition_penalty", fields::PENALTY_AT_1),
    ("min_new_tokens", fields::MIN_TOKENS_AT_0),
    ("json_schema", fields::NO_STRUCTURED_OUTPUT),
    ("regex", fields::NO_STRUCTURED_OUTPUT),
    ("ebnf", fields::NO_STRUCTURED_OUTPUT),
    ("structural_tag", fields::NO_STRUCTURED_OUTPUT),
    ("spaces_between_special_tokens", Rule::OnlyAt { is_neutral: fields::is_true, neutral: "true", why: "the text is the tokenizer's own decode" }),
    ("custom_params", Rule::OnlyAt { is_neutral: fields::is_empty, neutral: "{}", why: "the sampler runs no custom logits processors" }),
    ("stream_interval", Rule::OnlyAt { is_neutral: fields::is_one, neutral: "1", why: "tokens are streamed as each step delivers them" }),
    ("logit_bias", fields::LOGIT_BIAS_EMPTY),
];

#[derive(Deserialize)]
struct SglangRequest {
    #[serde(default)]
    text: Option<Value>,
    #[serde(default)]
    input_ids: Option<Value>,
    #[serde(default)]
    stream: Option<bool>,
    #[serde(default)]
    rid: Option<String>,
}

#[derive(Deserialize, Default)]
struct SglangSampling {
    #[serde(default)]
    max_new_tokens: Option<u32>,
    #[serde(default)]
    stop: Option<StopField>,
    #[serde(default)]
    stop_token_ids: Option<Vec<u32>>,
    #[serde(default)]
    temperature: Option<f32>,
    #[serde(default)]
    top_p: Option<f32>,
    #[serde(default)]
    top_k: Option<i64>,
    #[serde(default)]
    ignore_eos: Option<bool>,
    #[serde(default)]
    skip_special_tokens: Option<bool>,
    #[serde(default)]
    no_stop_trim: Option<bool>,
    #[serde(default)]
    n: Option<u32>,
}

/// A checked SGLang request and the id its responses carry (its `rid`, if it gave one).
pub struct SglangParsed {
    pub request: ParsedRequest,
    pub rid: Option<String>,
}

/// Parses and checks an SGLang `/generate` body whose text prompt may hold at most
/// `prompt_bytes_max` bytes; every refusal names the field and its value.
pub fn parse_sglang(body: &[u8], prompt_bytes_max: usize) -> Result<SglangParsed, ApiError> {
    let mut map = parse_object(body, &SGLANG_FIELDS, "an SGLang generate request")?;
    let sampling_map = match map.remove("sampling_params") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(m)) => m,
        Some(Value::Array(_)) => return Err(batch_refused("sampling_params")),
        Some(other) => return Err(ApiError::bad_request(format!("`sampling_params` = {}: expected an object", fields::shown(&other)))),
    };
    fields::check(&sampling_map, &SGLANG_SAMPLING, "SGLang's sampling_params").map_err(ApiError::bad_request)?;
    let req: SglangRequest = typed(map)?;
    let p: SglangSampling = typed(sampling_map).map_err(|e| ApiError::bad_request(e.message.replacen("`", "`sampling_params.", 1)))?;
    let prompt = match (req.text, req.input_ids) {
        (Some(Value::String(t)), None) => text_prompt(t, prompt_bytes_max)?,
        (None, Some(ids @ Value::Array(_))) => PromptInput::Tokens(token_ids(ids)?),
        (Some(_), Some(_)) => return Err(ApiError::bad_request("give `text` or `input_ids`, not both")),
        (Some(Value::Array(_)), None) => return Err(batch_refused("text")),
        (Some(other), None) => return Err(ApiError::bad_request(format!("`text` = {}: expected a string", fields::shown(&other)))),
        (None, Some(other)) => return Err(ApiError::bad_request(format!("`input_ids` = {}: expected a list of token ids", fields::shown(&other)))),
        (None, None) => return Err(ApiError::bad_request("an SGLang generate request needs `text` or `input_ids`")),
    };
    check_one_completion("sampling_params.n", p.n)?;
    let output = OutputOptions {
        stop: stop_strings(p.stop, "sampling_params.stop")?,
        stop_token_ids: p.stop_token_ids.unwrap_or_default(),
        // SGLang trims the stop string from the output unless `no_stop_trim`.
        include_stop: p.no_stop_trim.unwrap_or(false),
        echo: false,
        logprobs: None,
        keep_special: !p.skip_special_tokens.unwrap_or(true),
    };
    let reply = ReplyOptions { stream: req.stream.unwrap_or(false), ..ReplyOptions::default() };
    let request = ParsedRequest {
        prompt,
        max_tokens: p.max_new_tokens.unwrap_or(SGLANG_MAX_NEW_TOKENS_DEFAULT),
        ignore_eos: p.ignore_eos.unwrap_or(false),
        // SGLang samples at temperature 1 unless told otherwise; it takes no seed.
        sampling: sampling(p.temperature, p.top_p, p.top_k, None)?,
        reply,
        output,
        // SGLang's tokenizer manager encodes text as the tokenizer does by default.
        add_special_tokens: true,
    };
    Ok(SglangParsed { request, rid: req.rid })
}

fn batch_refused(field: &str) -> ApiError {
    ApiError::bad_request(format!("`{field}` is a list: a batch of prompts is not supported, one prompt a request"))
}

/// `input_ids`: one list of token ids (a list of lists is a batch).
fn token_ids(value: Value) -> Result<Vec<u32>, ApiError> {
    if value.as_array().is_some_and(|a| a.iter().any(Value::is_array)) {
        return Err(batch_refused("input_ids"));
    }
    let shown = fields::shown(&value);
    serde_json::from_value(value).map_err(|e| ApiError::bad_request(format!("`input_ids` = {shown}: {e}")))
}

async fn respond(front: &Front, body: &[u8]) -> Result<Response, ApiError> {
    // SGLang's `e2e_latency` runs from when its tokenizer manager takes the request.
    let created = Instant::now();
    let SglangParsed { request: req, rid } = parse_sglang(body, front.limits.prompt_bytes_max)?;
    let prompt = prompt_ids(front, req.prompt, req.add_special_tokens).await?;
    let ask = Ask { prompt, max_tokens: req.max_tokens, ignore_eos: req.ignore_eos, sampling: req.sampling, output: &req.output, logprobs: None };
    let mut generation = start(front, ask).await?;
    let meta = Meta { id: rid.unwrap_or_else(|| format!("{:032x}", generation.id())), created, last_id: None };
    if req.reply.stream {
        return Ok(stream_response(generation, meta));
    }
    let whole = generation.collect().await.map_err(ApiError::internal)?;
    let meta = Meta { last_id: whole.ids.last().copied(), ..meta };
    Ok(json_response(&json!({"text": whole.text, "meta_info": meta.info(&generation, whole.finish.as_ref())})))
}

/// What every chunk's `meta_info` repeats.
struct Meta {
    id: String,
    created: Instant,
    /// The last token generated: the `matched` id of an output the model's EOS ended.
    last_id: Option<u32>,
}

impl Meta {
    /// `meta_info` so far; with `finish`, its `finish_reason` and `e2e_latency` (seconds since
    /// the request was queued).
    fn info(&self, generation: &Generation, finish: Option<&Finish>) -> Value {
        let completion = generation.completion_tokens();
        let finish_reason = match finish {
            None => Value::Null,
            Some(Finish::Length) => json!({"type": "length", "length": completion}),
            Some(Finish::Eos) => json!({"type": "stop", "matched": self.last_id}),
            Some(Finish::StopToken(id)) => json!({"type": "stop", "matched": id}),
            Some(Finish::StopText(s)) => json!({"type": "stop", "matched": s}),
        };
        let mut info = json!({"id": self.id, "finish_reason": finish_reason, "prompt_tokens": generation.prompt_tokens(), "completion_tokens": completion});
        if finish.is_some() {
            info["e2e_latency"] = json!(self.created.elapsed().as_secs_f64());
        }
        info
    }
}

struct SglangEvents {
    meta: Meta,
    /// The output so far: SGLang sends the whole of it in every chunk.
    text: String,
}

/// A chunk a delivery (the tokens the engine delivered together), each with the whole text so
/// far; an engine error is SGLang's `{"error": {"message"}}` event.
impl Events for SglangEvents {
    fn piece(&mut self, generation: &Generation, piece: &Piece) -> Vec<Bytes> {
        self.text.push_str(&piece.text);
        self.meta.last_id = piece.ids.last().copied().or(self.meta.last_id);
        vec![data_line(&json!({"text": self.text, "meta_info": self.meta.info(generation, piece.finish.as_ref())}))]
    }

    fn error(&self, message: &str) -> Bytes {
        data_line(&json!({"error": {"message": message}}))
    }
}

/// [`SglangEvents`]' stream, then `data: [DONE]`.
fn stream_response(generation: Generation, meta: Meta) -> Response {
    piece_stream(generation, SglangEvents { meta, text: String::new() })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(body: &str) -> Result<SglangParsed, ApiError> {
        parse_sglang(body.as_bytes(), 16)
    }

    #[test]
    fn the_bench_clients_body_is_parsed_with_sglangs_defaults() {
        let body = r#"{"input_ids": [5, 6, 7], "sampling_params": {"temperature": 0.0, "max_new_tokens": 4, "ignore_eos": true},
                       "stream": true, "lora_path": null, "return_logprob": false, "logprob_start_len": -1}"#;
        let p = parse(body).unwrap();
        assert_eq!(p.request.prompt, PromptInput::Tokens(vec![5, 6, 7]));
        assert_eq!((p.request.max_tokens, p.request.ignore_eos, p.request.reply.stream), (4, true, true));
        assert!(p.request.sampling.is_greedy());
        let p = parse(r#"{"text": "hi", "rid": "r1", "sampling_params": {"stop": "x", "no_stop_trim": true, "skip_special_tokens": false}}"#).unwrap();
        assert_eq!(p.request.prompt, PromptInput::Text("hi".into()));
        assert_eq!(p.rid.as_deref(), Some("r1"));
        // SGLang's defaults: 128 new tokens, sampling at temperature 1, the stop string trimmed.
        let q = parse(r#"{"text": "hi"}"#).unwrap().request;
        assert_eq!(q.max_tokens, SGLANG_MAX_NEW_TOKENS_DEFAULT);
        assert!(!q.sampling.is_greedy() && !q.reply.stream && !q.output.include_stop);
        assert_eq!(p.request.output, OutputOptions { stop: vec!["x".into()], stop_token_ids: vec![], include_stop: true, echo: false, logprobs: None, keep_special: true });
    }

    #[test]
    fn the_body_says_which_api() {
        assert_eq!(generate_api(br#"{"inputs": "a", "parameters": {}}"#).unwrap(), GenerateApi::Tgi);
        assert_eq!(generate_api(br#"{"text": "a"}"#).unwrap(), GenerateApi::Sglang);
        assert_eq!(generate_api(br#"{"input_ids": [1]}"#).unwrap(), GenerateApi::Sglang);
        // Not an object: TGI's parser says what is wrong.
        assert_eq!(generate_api(b"{\"inputs\": ").unwrap(), GenerateApi::Tgi);
        let e = generate_api(br#"{"inputs": "a", "text": "b"}"#).unwrap_err();
        assert!(e.message.contains("ambiguous") && e.message.contains("`inputs`") && e.message.contains("`text`"), "{}", e.message);
        let e = generate_api(br#"{"parameters": {}}"#).unwrap_err();
        assert!(e.message.contains("`inputs`") && e.message.contains("`input_ids`"), "{}", e.message);
    }

    /// Each refusal names its field (and value where it has one).
    #[test]
    fn refusals_name_the_field() {
        for (body, word) in [
            (r#"{"text": ["a", "b"]}"#, "`text` is a list: a batch"),
            (r#"{"input_ids": [[1], [2]]}"#, "`input_ids` is a list: a batch"),
            (r#"{"text": "a", "sampling_params": [{}]}"#, "`sampling_params` is a list"),
            (r#"{"text": "a", "input_ids": [1]}"#, "not both"),
            (r#"{"text": 5}"#, "`text` = 5"),
            (r#"{"input_ids": [-1]}"#, "`input_ids` = [-1]"),
            (r#"{"text": "a", "lora_path": "adapter"}"#, "`lora_path` is not supported"),
            (r#"{"text": "a", "return_logprob": true}"#, "`return_logprob` = true"),
            (r#"{"text": "a", "image_data": "x.png"}"#, "`image_data` is not supported"),
            (r#"{"text": "a", "priority": 1}"#, "unknown field `priority`"),
            (r#"{"text": "a", "sampling_params": {"regex": "a+"}}"#, "`regex` is not supported"),
            (r#"{"text": "a", "sampling_params": {"min_new_tokens": 3}}"#, "`min_new_tokens` = 3"),
            (r#"{"text": "a", "sampling_params": {"n": 2}}"#, "sampling_params.n = 2"),
            (r#"{"text": "a", "sampling_params": {"seed": 2}}"#, "unknown field `seed` in SGLang's sampling_params"),
            (r#"{"text": "a", "sampling_params": {"max_new_tokens": "many"}}"#, "`sampling_params.max_new_tokens` = \"many\""),
            (r#"{"text": "a", "sampling_params": {"temperature": -1}}"#, "temperature"),
            (r#"{"text": "a", "sampling_params": {"stop": [""]}}"#, "`sampling_params.stop`[0] is empty"),
            (r#"{"text": "12345678901234567"}"#, "17 bytes"),
            (r#"{"rid": "x"}"#, "needs `text` or `input_ids`"),
        ] {
            let e = parse(body).err().unwrap_or_else(|| panic!("{body} was accepted"));
            assert_eq!(e.status.as_u16(), 400, "{body}");
            assert!(e.message.contains(word), "{body}: {:?} lacks {word:?}", e.message);
        }
    }
}
