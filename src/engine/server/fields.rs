//! Which fields each route's body may hold, and the refusal that names any other: the server
//! acts on every field it accepts, so a field it does not model is a 400 naming it, never
//! dropped in silence. Fields that ask for nothing at their default value (OpenAI clients send
//! `"presence_penalty": 0` or `"tools": []` unasked) are accepted at that value only.

use serde_json::{Map, Value};

/// How a route treats one field. `null` is accepted for every field: clients send it for unset.
pub(super) enum Rule {
    /// Read and acted on (its parser checks the value).
    Used,
    /// Changes no output at any value (OpenAI's `user` names the end user for abuse monitoring).
    Inert,
    /// Not modelled: accepted only where `is_neutral` holds (the value that asks for nothing,
    /// shown as `neutral`), else refused saying `why`.
    OnlyAt { is_neutral: fn(&Value) -> bool, neutral: &'static str, why: &'static str },
    /// Not modelled at all: refused saying why.
    Refused(&'static str),
}

pub(super) type Table = [(&'static str, Rule)];

/// Refuses the first field of `body` that `table` does not accept: the message (a 400's) names
/// it and its value. `request` names the kind of body ("a chat completion request").
pub(super) fn check(body: &Map<String, Value>, table: &Table, request: &str) -> Result<(), String> {
    for (name, value) in body {
        let Some((_, rule)) = table.iter().find(|(n, _)| n == name) else {
            let used: Vec<&str> = table.iter().filter(|(_, r)| matches!(r, Rule::Used | Rule::Inert)).map(|(n, _)| *n).collect();
            return Err(format!("unknown field `{name}` in {request}: this server refuses fields it does not act on (it reads {})", used.join(", ")));
        };
        if value.is_null() {
            continue;
        }
        match rule {
            Rule::Used | Rule::Inert => {}
            Rule::OnlyAt { is_neutral, neutral, why } => {
                if !is_neutral(value) {
                    return Err(format!("`{name}` = {} is not supported: {why} (only {neutral} is accepted)", shown(value)));
                }
            }
            Rule::Refused(why) => return Err(format!("`{name}` is not supported: {why}")),
        }
    }
    Ok(())
}

/// A value in a message: its JSON, cut short.
pub(super) fn shown(value: &Value) -> String {
    let text = value.to_string();
    match text.char_indices().nth(80) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text,
    }
}

pub(super) fn is_zero(v: &Value) -> bool {
    v.as_f64() == Some(0.0)
}

pub(super) fn is_one(v: &Value) -> bool {
    v.as_f64() == Some(1.0)
}

pub(super) fn is_true(v: &Value) -> bool {
    v == &Value::Bool(true)
}

pub(super) fn is_false(v: &Value) -> bool {
    v == &Value::Bool(false)
}

pub(super) fn is_empty(v: &Value) -> bool {
    v.as_array().is_some_and(Vec::is_empty) || v.as_object().is_some_and(Map::is_empty) || v.as_str() == Some("")
}

pub(super) fn is_none_choice(v: &Value) -> bool {
    v.as_str() == Some("none")
}

pub(super) fn is_text_format(v: &Value) -> bool {
    v.get("type").and_then(Value::as_str) == Some("text") && v.as_object().is_some_and(|o| o.len() == 1)
}

pub(super) fn is_text_modality(v: &Value) -> bool {
    v.as_array().is_some_and(|a| a.len() == 1 && a[0] == "text")
}

// Rows that several routes' tables hold (OpenAI's, TGI's, SGLang's): each reason said once.
const NO_PENALTIES: &str = "the sampler has no penalties";
/// A penalty whose neutral value is 0 (frequency, presence).
pub(super) const PENALTY_AT_0: Rule = Rule::OnlyAt { is_neutral: is_zero, neutral: "0", why: NO_PENALTIES };
/// A penalty whose neutral value is 1 (repetition).
pub(super) const PENALTY_AT_1: Rule = Rule::OnlyAt { is_neutral: is_one, neutral: "1", why: NO_PENALTIES };
pub(super) const MIN_P_AT_0: Rule = Rule::OnlyAt { is_neutral: is_zero, neutral: "0", why: "the sampler has temperature, top-k and top-p only" };
pub(super) const MIN_TOKENS_AT_0: Rule = Rule::OnlyAt { is_neutral: is_zero, neutral: "0", why: "a request may end before any minimum" };
pub(super) const LOGIT_BIAS_EMPTY: Rule = Rule::OnlyAt { is_neutral: is_empty, neutral: "{}", why: "the sampler does not bias logits" };
pub(super) const NO_STRUCTURED_OUTPUT: Rule = Rule::Refused("there is no structured output");
pub(super) const NO_LOGITS_PROCESSORS: Rule = Rule::Refused("the sampler runs no logits processors");
pub(super) const NEVER_TRUNCATED: Rule = Rule::Refused("prompts are never truncated: one too long is refused");

/// The penalties and filters of vLLM's sampling that this server's sampler does not have, at the
/// values that switch them off (shared by both OpenAI routes).
pub(super) const NEUTRAL_SAMPLING: [(&str, Rule); 7] = [
    ("frequency_penalty", PENALTY_AT_0),
    ("presence_penalty", PENALTY_AT_0),
    ("repetition_penalty", PENALTY_AT_1),
    ("min_p", MIN_P_AT_0),
    ("min_tokens", MIN_TOKENS_AT_0),
    ("logit_bias", LOGIT_BIAS_EMPTY),
    ("use_beam_search", Rule::OnlyAt { is_neutral: is_false, neutral: "false", why: "the engine samples one sequence a request" }),
];

/// vLLM extensions that change what is generated or how, refused on both OpenAI routes.
pub(super) const REFUSED_VLLM: [(&str, Rule); 13] = [
    ("spaces_between_special_tokens", Rule::Refused("the text is the tokenizer's own decode")),
    ("prompt_logprobs", Rule::Refused("only sampled tokens' log-probabilities are computed (see `logprobs`)")),
    ("return_tokens_as_token_ids", Rule::OnlyAt { is_neutral: is_false, neutral: "false", why: "tokens are reported as text" }),
    ("response_format", Rule::OnlyAt { is_neutral: is_text_format, neutral: "{\"type\": \"text\"}", why: "there is no structured output" }),
    ("guided_json", NO_STRUCTURED_OUTPUT),
    ("guided_regex", NO_STRUCTURED_OUTPUT),
    ("guided_choice", NO_STRUCTURED_OUTPUT),
    ("guided_grammar", NO_STRUCTURED_OUTPUT),
    ("structured_outputs", NO_STRUCTURED_OUTPUT),
    ("length_penalty", Rule::Refused("there is no beam search")),
    ("truncate_prompt_tokens", NEVER_TRUNCATED),
    ("priority", Rule::OnlyAt { is_neutral: is_zero, neutral: "0", why: "the scheduler has no priorities" }),
    ("logits_processors", NO_LOGITS_PROCESSORS),
];

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const TABLE: [(&str, Rule); 4] = [
        ("prompt", Rule::Used),
        ("user", Rule::Inert),
        ("presence_penalty", Rule::OnlyAt { is_neutral: is_zero, neutral: "0", why: "no penalties" }),
        ("tools", Rule::Refused("no tool calling")),
    ];

    fn check_json(v: Value) -> Result<(), String> {
        check(v.as_object().unwrap(), &TABLE, "a test request")
    }

    #[test]
    fn accepts_used_inert_neutral_and_null_values() {
        check_json(json!({"prompt": "a", "user": "u", "presence_penalty": 0, "tools": null})).unwrap();
    }

    #[test]
    fn refusals_name_the_field_and_value() {
        let e = check_json(json!({"presence_penalty": 0.5})).unwrap_err();
        assert!(e.contains("`presence_penalty` = 0.5 is not supported: no penalties (only 0 is accepted)"), "{e}");
        let e = check_json(json!({"tools": []})).unwrap_err();
        assert!(e.contains("`tools` is not supported: no tool calling"), "{e}");
        let e = check_json(json!({"prompt": "a", "logit_bias": {}})).unwrap_err();
        assert!(e.contains("unknown field `logit_bias` in a test request") && e.contains("reads prompt, user"), "{e}");
        assert_eq!(shown(&json!("x".repeat(200))).chars().count(), 81);
    }
}
