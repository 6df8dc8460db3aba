//! A `/v1/chat/completions` body to the messages the chat template renders and what the engine
//! is asked, or why it is refused. The fields it shares with `/v1/completions` go through the
//! same parsing ([`super::request::common`]); messages are read as vLLM reads them for a
//! text-only model: `content` a string, none, or a list of text parts joined by newlines.

use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::chat_template::RESERVED_NAMES;
use super::fields::{self, NEUTRAL_SAMPLING, REFUSED_VLLM, Rule};
use super::request::{ApiError, Common, OPENAI_COMMON_FIELDS, OpenAiCommon, OutputOptions, ReplyOptions, check_prompt_bytes, common, logprobs_count, parse_object, typed};
use crate::engine::model::SamplingParams;

/// The role of the message a response holds when the request opens a new turn.
const RESPONSE_ROLE: &str = "assistant";

/// A chat request, checked as far as it can be before rendering and tokenizing.
#[derive(Clone, Debug, PartialEq)]
pub struct ParsedChat {
    /// The messages as the template sees them: `role`, `content` as one string, and `name`
    /// where the request gave one.
    pub messages: Vec<Value>,
    pub add_generation_prompt: bool,
    /// `chat_template_kwargs`: more names for the template (Qwen3's `enable_thinking`).
    pub template_kwargs: Map<String, Value>,
    pub add_special_tokens: bool,
    /// `max_completion_tokens` (or its older name `max_tokens`); none: up to the context, as vLLM.
    pub max_tokens: Option<u32>,
    pub ignore_eos: bool,
    pub sampling: SamplingParams,
    pub reply: ReplyOptions,
    pub output: OutputOptions,
    /// The role of the message the response holds: the assistant's, or the last message's when
    /// the request opens no new turn (vLLM's `get_chat_request_role`).
    pub role: String,
    /// With `echo`, the last message's content when it is the response's role: the response
    /// starts with it.
    pub echo_text: Option<String>,
}

#[derive(Deserialize)]
struct ChatRequest {
    messages: Vec<Value>,
    #[serde(default)]
    max_tokens: Option<u32>,
    #[serde(default)]
    max_completion_tokens: Option<u32>,
    #[serde(default)]
    logprobs: Option<bool>,
    #[serde(default)]
    top_logprobs: Option<u32>,
    #[serde(default)]
    add_generation_prompt: Option<bool>,
    #[serde(default)]
    chat_template_kwargs: Option<Map<String, Value>>,
    #[serde(flatten)]
    common: OpenAiCommon,
}

/// `/v1/chat/completions`' fields, by rule.
fn chat_fields() -> Vec<(&'static str, Rule)> {
    let no_tools = "there is no tool calling";
    let own = [
        ("messages", Rule::Used),
        ("max_tokens", Rule::Used),
        ("max_completion_tokens", Rule::Used),
        ("logprobs", Rule::Used),
        ("top_logprobs", Rule::Used),
        ("add_generation_prompt", Rule::Used),
        ("chat_template_kwargs", Rule::Used),
        // With no tools there is nothing to call in parallel.
        ("parallel_tool_calls", Rule::Inert),
        ("tools", Rule::OnlyAt { is_neutral: fields::is_empty, neutral: "[]", why: no_tools }),
        ("tool_choice", Rule::OnlyAt { is_neutral: fields::is_none_choice, neutral: "\"none\"", why: no_tools }),
        ("functions", Rule::OnlyAt { is_neutral: fields::is_empty, neutral: "[]", why: no_tools }),
        ("function_call", Rule::OnlyAt { is_neutral: fields::is_none_choice, neutral: "\"none\"", why: no_tools }),
        ("best_of", Rule::OnlyAt { is_neutral: fields::is_one, neutral: "1", why: "this server returns exactly one completion per request" }),
        ("continue_final_message", Rule::OnlyAt { is_neutral: fields::is_false, neutral: "false", why: "the response is always a message of its own" }),
        ("documents", Rule::OnlyAt { is_neutral: fields::is_empty, neutral: "[]", why: "the template is rendered without documents" }),
        ("modalities", Rule::OnlyAt { is_neutral: fields::is_text_modality, neutral: "[\"text\"]", why: "the model writes text only" }),
        ("store", Rule::OnlyAt { is_neutral: fields::is_false, neutral: "false", why: "completions are not stored" }),
        ("chat_template", Rule::Refused("the server renders the model's own chat template, not one a request brings")),
        ("audio", Rule::Refused("the model writes text only")),
        ("mm_processor_kwargs", Rule::Refused("the model reads text only")),
        ("prediction", Rule::Refused("there is no predicted-output decoding")),
        ("reasoning_effort", Rule::Refused("the model has no reasoning settings")),
    ];
    own.into_iter().chain(OPENAI_COMMON_FIELDS).chain(NEUTRAL_SAMPLING).chain(REFUSED_VLLM).collect()
}

/// Parses and checks a chat body for a server serving `served_model`, whose messages may hold
/// at most `prompt_bytes_max` bytes of text.
pub fn parse_chat(body: &[u8], served_model: &str, prompt_bytes_max: usize) -> Result<ParsedChat, ApiError> {
    let req: ChatRequest = typed(parse_object(body, &chat_fields(), "a chat completion request")?)?;
    let Common { ignore_eos, sampling, reply, mut output, add_special_tokens } = common(req.common, served_model)?;
    if req.messages.is_empty() {
        return Err(ApiError::bad_request("`messages` is empty: a chat request needs at least one message"));
    }
    let messages = req.messages.into_iter().enumerate().map(|(i, m)| message(i, m)).collect::<Result<Vec<Value>, ApiError>>()?;
    // The text is what a template costs to render and the prompt to tokenize: bounded before both.
    let text_bytes: usize = messages.iter().map(|m| m["content"].as_str().map_or(0, str::len)).sum();
    check_prompt_bytes(text_bytes, prompt_bytes_max)?;
    let max_tokens = match (req.max_completion_tokens, req.max_tokens) {
        (Some(a), Some(b)) if a != b => {
            return Err(ApiError::bad_request(format!(
                "`max_completion_tokens` = {a} and `max_tokens` = {b} disagree: give one (`max_tokens` is the older name)"
            )));
        }
        (a, b) => a.or(b),
    };
    match (req.logprobs.unwrap_or(false), req.top_logprobs) {
        (true, top) => output.logprobs = Some(logprobs_count("top_logprobs", top.unwrap_or(0))?),
        (false, Some(top)) if top > 0 => return Err(ApiError::bad_request(format!("`top_logprobs` = {top} needs `logprobs`: true"))),
        (false, _) => {}
    }
    let template_kwargs = req.chat_template_kwargs.unwrap_or_default();
    if let Some(name) = RESERVED_NAMES.iter().find(|n| template_kwargs.contains_key(**n)) {
        return Err(ApiError::bad_request(format!("`chat_template_kwargs` may not set `{name}`: the server renders the template with its own")));
    }
    let add_generation_prompt = req.add_generation_prompt.unwrap_or(true);
    let last = messages.last().expect("checked non-empty");
    let role = if add_generation_prompt { RESPONSE_ROLE.to_string() } else { last["role"].as_str().unwrap_or(RESPONSE_ROLE).to_string() };
    let echo_text = (output.echo && last["role"] == role.as_str()).then(|| last["content"].as_str().unwrap_or_default().to_string());
    Ok(ParsedChat {
        messages,
        add_generation_prompt,
        template_kwargs,
        // vLLM's default for chat: the template already writes the special tokens it needs.
        add_special_tokens: add_special_tokens.unwrap_or(false),
        max_tokens,
        ignore_eos,
        sampling,
        reply,
        output,
        role,
        echo_text,
    })
}

/// Message `i` as the template sees it.
fn message(i: usize, m: Value) -> Result<Value, ApiError> {
    let Value::Object(o) = m else {
        return Err(ApiError::bad_request(format!("messages[{i}] must be an object, got {}", fields::shown(&m))));
    };
    for (key, value) in &o {
        let unasked = value.is_null() || value.as_array().is_some_and(Vec::is_empty);
        match key.as_str() {
            "role" | "content" | "name" => {}
            // OpenAI's SDK sends these back as null with an earlier response's message.
            "tool_calls" | "function_call" | "tool_call_id" | "refusal" | "audio" | "reasoning_content" if unasked => {}
            "tool_calls" | "function_call" | "tool_call_id" => {
                return Err(ApiError::bad_request(format!("messages[{i}].{key} is not supported: there is no tool calling")));
            }
            _ => return Err(ApiError::bad_request(format!("messages[{i}].{key} is not supported: a message holds role, content and name"))),
        }
    }
    let role = match o.get("role") {
        Some(Value::String(r)) => r.clone(),
        other => return Err(ApiError::bad_request(format!("messages[{i}].role must be a string, got {}", other.map_or("nothing".into(), fields::shown)))),
    };
    let content = match o.get("content") {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => parts.iter().enumerate().map(|(j, part)| text_part(i, j, part)).collect::<Result<Vec<&str>, ApiError>>()?.join("\n"),
        Some(other) => return Err(ApiError::bad_request(format!("messages[{i}].content must be a string or a list of parts, got {}", fields::shown(other)))),
    };
    let mut out = json!({"role": role, "content": content});
    match o.get("name") {
        None | Some(Value::Null) => {}
        Some(Value::String(name)) => out["name"] = json!(name),
        Some(other) => return Err(ApiError::bad_request(format!("messages[{i}].name must be a string, got {}", fields::shown(other)))),
    }
    Ok(out)
}

/// The text of content part `j` of message `i`: a text part's, or a refusal's (vLLM reads both as
/// text); any other part is refused by its type.
fn text_part(i: usize, j: usize, part: &Value) -> Result<&str, ApiError> {
    let kind = part.get("type").and_then(Value::as_str);
    let key = match kind {
        Some("text") => "text",
        Some("refusal") => "refusal",
        Some(other) => {
            return Err(ApiError::bad_request(format!("messages[{i}].content[{j}].type = \"{other}\" is not supported: the model reads text only")));
        }
        None => return Err(ApiError::bad_request(format!("messages[{i}].content[{j}] has no \"type\": got {}", fields::shown(part)))),
    };
    if let Some(extra) = part.as_object().and_then(|o| o.keys().find(|k| *k != "type" && *k != key)) {
        return Err(ApiError::bad_request(format!("messages[{i}].content[{j}].{extra} is not supported: a {key} part holds type and {key}")));
    }
    part.get(key).and_then(Value::as_str).ok_or_else(|| ApiError::bad_request(format!("messages[{i}].content[{j}].{key} must be a string")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chat(body: Value) -> Result<ParsedChat, ApiError> {
        parse_chat(body.to_string().as_bytes(), "tiny", 64)
    }

    #[test]
    fn messages_become_the_templates_and_fields_take_vllms_defaults() {
        let c = chat(json!({
            "model": "tiny",
            "messages": [
                {"role": "system", "content": "be brief", "name": "rules"},
                {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
                {"role": "assistant", "content": null, "tool_calls": null, "refusal": null},
            ],
            "max_completion_tokens": 7, "stream": true, "stream_options": {"include_usage": true},
            "tools": [], "tool_choice": "none", "presence_penalty": 0, "user": "u1",
        }))
        .unwrap();
        assert_eq!(c.messages[0], json!({"role": "system", "content": "be brief", "name": "rules"}));
        assert_eq!(c.messages[1], json!({"role": "user", "content": "a\nb"}));
        assert_eq!(c.messages[2], json!({"role": "assistant", "content": ""}));
        assert_eq!(c.max_tokens, Some(7));
        assert!(c.add_generation_prompt && !c.add_special_tokens && c.reply.stream && c.reply.include_usage);
        assert_eq!(c.role, "assistant");
        let c = chat(json!({"messages": [{"role": "user", "content": "x"}], "max_tokens": 3, "add_generation_prompt": false, "echo": true})).unwrap();
        assert_eq!((c.max_tokens, c.role.as_str(), c.echo_text.as_deref()), (Some(3), "user", Some("x")));
        assert_eq!(chat(json!({"messages": [{"role": "user", "content": "x"}]})).unwrap().max_tokens, None);
    }

    /// Each refusal's status and a part of its message that names what was wrong.
    #[test]
    fn refusals_name_the_field() {
        let user = json!([{"role": "user", "content": "hi"}]);
        let cases = [
            (json!({"messages": user, "tools": [{"type": "function"}]}), "`tools` = [{\"type\":\"function\"}] is not supported: there is no tool calling"),
            (json!({"messages": user, "tool_choice": "auto"}), "`tool_choice` = \"auto\" is not supported"),
            (json!({"messages": user, "functions": [{"name": "f"}]}), "`functions`"),
            (json!({"messages": user, "n": 2}), "n = 2"),
            (json!({"messages": user, "frequency_penalty": 1.5}), "`frequency_penalty` = 1.5"),
            (json!({"messages": user, "response_format": {"type": "json_object"}}), "`response_format`"),
            (json!({"messages": user, "chat_template": "{{ 1 }}"}), "`chat_template` is not supported"),
            (json!({"messages": user, "service_tier": "auto"}), "unknown field `service_tier`"),
            (json!({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]}), "messages[0].content[0].type = \"image_url\""),
            (json!({"messages": [{"role": "user", "content": [{"type": "input_audio", "input_audio": {}}]}]}), "\"input_audio\""),
            (json!({"messages": [{"role": "assistant", "tool_calls": [{"id": "1"}]}]}), "messages[0].tool_calls"),
            (json!({"messages": [{"role": "user", "content": "a", "weight": 1}]}), "messages[0].weight"),
            (json!({"messages": [{"content": "a"}]}), "messages[0].role must be a string"),
            (json!({"messages": []}), "`messages` is empty"),
            (json!({"messages": user, "max_tokens": 5, "max_completion_tokens": 6}), "disagree"),
            (json!({"messages": user, "top_logprobs": 3}), "`top_logprobs` = 3 needs `logprobs`"),
            (json!({"messages": user, "logprobs": true, "top_logprobs": 21}), "`top_logprobs` = 21"),
            (json!({"messages": user, "chat_template_kwargs": {"messages": []}}), "may not set `messages`"),
            (json!({"messages": user, "stream_options": {"include_usage": true}}), "`stream_options` is only allowed with `stream`"),
            (json!({"messages": [{"role": "user", "content": "x".repeat(65)}]}), "65 bytes"),
            (json!({"messages": user, "stop": [""]}), "`stop`[0] is empty"),
        ];
        for (body, part) in cases {
            let e = chat(body.clone()).unwrap_err();
            assert_eq!(e.status.as_u16(), 400, "{body}: {e:?}");
            assert!(e.message.contains(part), "{body}: {:?} lacks {part:?}", e.message);
        }
        let e = chat(json!({"model": "other", "messages": user})).unwrap_err();
        assert_eq!(e.status.as_u16(), 404);
    }
}
