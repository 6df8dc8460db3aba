//! A model's chat template: the Jinja in its tokenizer directory, rendered the way transformers'
//! `apply_chat_template` renders it for vLLM's `/v1/chat/completions`.
//!
//! Where the template comes from, as transformers loads it: `chat_template.jinja` in the
//! directory, else `tokenizer_config.json`'s `chat_template` (a string, or a list of named
//! templates of which "default" is used). What the template sees: `messages`,
//! `add_generation_prompt`, `tools` and `documents` (none: requests with tools are refused), the
//! special tokens of `tokenizer_config.json` (`bos_token`, `eos_token`, ...; else of
//! `special_tokens_map.json`), and the request's `chat_template_kwargs`. The environment is
//! transformers': blocks trimmed and left-stripped, loop controls, `raise_exception(message)`, and
//! Python's string and dict methods (minijinja-contrib's pycompat, as TGI's router uses).
//! `strftime_now` is left undefined: templates that call it (Llama 3.1's) test for it first and
//! fall back to a fixed date, which keeps prompts reproducible.

use std::collections::BTreeMap;
use std::path::Path;

use minijinja::syntax::SyntaxConfig;
use minijinja::value::Serde;
use minijinja::{Environment, Error, ErrorKind, Value};
use serde_json::Map;

/// The special-token keys transformers passes to a template (its `SPECIAL_TOKENS_ATTRIBUTES`).
const SPECIAL_TOKEN_KEYS: [&str; 8] =
    ["bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token", "additional_special_tokens"];

/// Names a template is rendered with that a request's `chat_template_kwargs` may not replace.
pub const RESERVED_NAMES: [&str; 4] = ["messages", "add_generation_prompt", "tools", "documents"];

/// A compiled chat template and what it is rendered with.
pub struct ChatTemplate {
    env: Environment<'static>,
    /// The file it came from, for messages.
    origin: String,
    special_tokens: BTreeMap<String, serde_json::Value>,
}

/// What a tokenizer directory offers the chat route.
pub enum ChatTemplateState {
    Ready(Box<ChatTemplate>),
    /// No template: where it was looked for.
    Missing(String),
    /// A template that cannot be used: the file and why.
    Broken(String),
}

impl std::fmt::Debug for ChatTemplateState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ChatTemplateState::Ready(t) => write!(f, "Ready({})", t.origin),
            ChatTemplateState::Missing(m) => write!(f, "Missing({m})"),
            ChatTemplateState::Broken(m) => write!(f, "Broken({m})"),
        }
    }
}

/// Why a render failed: the template refused the messages (`raise_exception`, or an error in the
/// template's logic on them), which is the request's to fix.
#[derive(Debug)]
pub struct RenderError(pub String);

impl ChatTemplate {
    /// Compiles `source`; `origin` names it in messages.
    pub fn new(source: &str, origin: impl Into<String>, special_tokens: BTreeMap<String, serde_json::Value>) -> Result<ChatTemplate, String> {
        let origin = origin.into();
        let mut env = Environment::new();
        let syntax = SyntaxConfig::builder().trim_blocks(true).lstrip_blocks(true).build().map_err(|e| format!("{origin}: {e}"))?;
        env.set_syntax(syntax);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function("raise_exception", |message: String| -> Result<Value, Error> { Err(Error::new(ErrorKind::InvalidOperation, message)) });
        env.add_template_owned("chat_template", source.to_string()).map_err(|e| format!("{origin}: the chat template does not compile: {}", detail(&e)))?;
        Ok(ChatTemplate { env, origin, special_tokens })
    }

    pub fn origin(&self) -> &str {
        &self.origin
    }

    /// The prompt text of `messages` (each `{"role", "content", ["name"]}`), ending with the
    /// assistant's turn opened when `add_generation_prompt`.
    pub fn render(&self, messages: &[serde_json::Value], add_generation_prompt: bool, kwargs: &Map<String, serde_json::Value>) -> Result<String, RenderError> {
        let mut context: BTreeMap<String, Value> = BTreeMap::new();
        for (key, value) in self.special_tokens.iter().chain(kwargs) {
            context.insert(key.clone(), Value::from(Serde(value)));
        }
        context.insert("messages".into(), Value::from(Serde(messages)));
        context.insert("add_generation_prompt".into(), Value::from(add_generation_prompt));
        context.insert("tools".into(), Value::from(()));
        context.insert("documents".into(), Value::from(()));
        let template = self.env.get_template("chat_template").map_err(|e| RenderError(detail(&e)))?;
        template.render(Value::from(context)).map_err(|e| RenderError(detail(&e)))
    }
}

/// An error's text with its causes, without minijinja's debug dump of the template.
fn detail(e: &Error) -> String {
    let mut text = match (e.kind(), e.detail()) {
        (ErrorKind::InvalidOperation, Some(d)) => d.to_string(),
        _ => e.to_string(),
    };
    if let Some(line) = e.line() {
        text.push_str(&format!(" (template line {line})"));
    }
    text
}

/// The chat template of a tokenizer directory (see the module's doc).
pub fn load_dir(dir: &Path) -> ChatTemplateState {
    let config_path = dir.join("tokenizer_config.json");
    let jinja_path = dir.join("chat_template.jinja");
    let config = match std::fs::read_to_string(&config_path) {
        Ok(text) => Some(text),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return ChatTemplateState::Broken(format!("{}: cannot read: {e}", config_path.display())),
    };
    let special_map = std::fs::read_to_string(dir.join("special_tokens_map.json")).ok();
    let jinja = match std::fs::read_to_string(&jinja_path) {
        Ok(text) => Some(text),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return ChatTemplateState::Broken(format!("{}: cannot read: {e}", jinja_path.display())),
    };
    let looked = format!("{} has no `chat_template` and there is no {}", config_path.display(), jinja_path.display());
    from_files(config.as_deref(), &config_path.display().to_string(), special_map.as_deref(), jinja.map(|j| (j, jinja_path.display().to_string())), looked)
}

/// The chat template from a `tokenizer_config.json`'s text (`config_origin` names it), a
/// `special_tokens_map.json`'s, and a `chat_template.jinja`'s with its name; `missing` says where
/// it was looked for when there is none.
pub fn from_files(config: Option<&str>, config_origin: &str, special_map: Option<&str>, jinja: Option<(String, String)>, missing: String) -> ChatTemplateState {
    let config: Map<String, serde_json::Value> = match config.map(serde_json::from_str::<serde_json::Value>) {
        None => Map::new(),
        Some(Ok(serde_json::Value::Object(map))) => map,
        Some(Ok(_)) => return ChatTemplateState::Broken(format!("{config_origin}: not a JSON object")),
        Some(Err(e)) => return ChatTemplateState::Broken(format!("{config_origin}: malformed JSON: {e}")),
    };
    let special_map: Map<String, serde_json::Value> = special_map.and_then(|t| serde_json::from_str(t).ok()).unwrap_or_default();
    let mut special_tokens = BTreeMap::new();
    for key in SPECIAL_TOKEN_KEYS {
        if let Some(value) = config.get(key).filter(|v| !v.is_null()).or_else(|| special_map.get(key)).and_then(token_text) {
            special_tokens.insert(key.to_string(), value);
        }
    }
    let (source, origin) = match jinja {
        Some((source, origin)) => (source, origin),
        None => match config.get("chat_template") {
            None | Some(serde_json::Value::Null) => return ChatTemplateState::Missing(missing),
            Some(serde_json::Value::String(s)) => (s.clone(), config_origin.to_string()),
            Some(serde_json::Value::Array(named)) => {
                let default = named.iter().find(|t| t.get("name").and_then(|n| n.as_str()) == Some("default"));
                match default.and_then(|t| t.get("template")).and_then(|t| t.as_str()) {
                    Some(s) => (s.to_string(), format!("{config_origin} (the template named \"default\")")),
                    None => return ChatTemplateState::Missing(format!("{config_origin} lists chat templates but none named \"default\"")),
                }
            }
            Some(_) => return ChatTemplateState::Broken(format!("{config_origin}: `chat_template` is neither a string nor a list of named templates")),
        },
    };
    match ChatTemplate::new(&source, origin, special_tokens) {
        Ok(t) => ChatTemplateState::Ready(Box::new(t)),
        Err(e) => ChatTemplateState::Broken(e),
    }
}

/// A special token as the template sees it: its text (configs write a token as a string or as
/// an added-token object with `content`), or a list of them.
fn token_text(value: &serde_json::Value) -> Option<serde_json::Value> {
    match value {
        serde_json::Value::String(_) => Some(value.clone()),
        serde_json::Value::Object(o) => o.get("content").filter(|c| c.is_string()).cloned(),
        serde_json::Value::Array(items) => Some(serde_json::Value::Array(items.iter().filter_map(token_text).collect())),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn template(source: &str) -> ChatTemplate {
        ChatTemplate::new(source, "test", BTreeMap::from([("bos_token".to_string(), json!("<s>"))])).unwrap()
    }

    #[test]
    fn renders_with_transformers_whitespace_and_python_methods() {
        // trim_blocks and lstrip_blocks: the block tags' lines leave no whitespace behind.
        let t = template(
            "{{ bos_token }}\n{% for m in messages %}\n    {% if m['role'] == 'system' %}\n[{{ m['content'].strip() }}]\n    {% else %}\n{{ m['role'] + ': ' + m['content'] }}\n    {% endif %}\n{% endfor %}\n{% if add_generation_prompt %}assistant:{% endif %}",
        );
        let messages = [json!({"role": "system", "content": "  be brief "}), json!({"role": "user", "content": "hi"})];
        assert_eq!(t.render(&messages, true, &Map::new()).unwrap(), "<s>\n[be brief]\nuser: hi\nassistant:");
        assert_eq!(t.render(&messages, false, &Map::new()).unwrap(), "<s>\n[be brief]\nuser: hi\n");
    }

    #[test]
    fn raise_exception_kwargs_and_tools_are_as_transformers_passes_them() {
        let t = template("{% if messages[0]['role'] != 'user' %}{{ raise_exception('Conversation must start with user') }}{% endif %}{{ greeting }}{% if tools is none %}!{% endif %}{% for m in messages %}{% if loop.index > 1 %}{% break %}{% endif %}{{ m.content }}{% endfor %}");
        let err = t.render(&[json!({"role": "system", "content": "x"})], true, &Map::new()).unwrap_err();
        assert!(err.0.contains("Conversation must start with user"), "{}", err.0);
        let kwargs = json!({"greeting": "hello"}).as_object().unwrap().clone();
        let two = [json!({"role": "user", "content": "a"}), json!({"role": "user", "content": "b"})];
        assert_eq!(t.render(&two, true, &kwargs).unwrap(), "hello!a");
    }

    #[test]
    fn templates_come_from_the_config_the_jinja_file_or_a_named_list() {
        let state = from_files(Some(r#"{"chat_template": "{{ eos_token }}", "eos_token": {"content": "</s>"}}"#), "cfg", None, None, "nowhere".into());
        let ChatTemplateState::Ready(t) = state else { panic!("{state:?}") };
        assert_eq!(t.render(&[], true, &Map::new()).unwrap(), "</s>");
        let named = r#"{"chat_template": [{"name": "tool_use", "template": "T"}, {"name": "default", "template": "D"}]}"#;
        let ChatTemplateState::Ready(t) = from_files(Some(named), "cfg", None, None, "nowhere".into()) else { panic!() };
        assert_eq!(t.render(&[], true, &Map::new()).unwrap(), "D");
        let ChatTemplateState::Ready(t) = from_files(Some(named), "cfg", Some(r#"{"bos_token": "<b>"}"#), Some(("J{{ bos_token }}".into(), "j".into())), "nowhere".into()) else { panic!() };
        assert_eq!(t.render(&[], true, &Map::new()).unwrap(), "J<b>", "the .jinja file wins; the special tokens map fills in");
        assert!(matches!(from_files(Some("{}"), "cfg", None, None, "nowhere".into()), ChatTemplateState::Missing(m) if m == "nowhere"));
        assert!(matches!(from_files(Some("{"), "cfg", None, None, "x".into()), ChatTemplateState::Broken(m) if m.contains("cfg: malformed JSON")));
        let broken = from_files(Some(r#"{"chat_template": "{% for %}"}"#), "cfg", None, None, "x".into());
        assert!(matches!(&broken, ChatTemplateState::Broken(m) if m.contains("cfg: the chat template does not compile")), "{broken:?}");
    }
}
