//! `POST /v1/chat/completions` over 127.0.0.1: messages rendered by the model's chat template
//! and counted exactly, the streamed chunk order, usage, finish reasons, and the refusals that
//! name what is not supported. A deterministic fake executor with the shipped 32,000-id
//! tokenizer (and its chat template) serves most tests; one drives the real `serve` binary on
//! the built-in `tiny` model, and one checks the renderer against transformers' own.

mod common;
mod server_support;
use common::*;
use server_support::*;

use serde_json::{Map, Value, json};
use servesim::engine::server::{ChatTemplateState, Tokenizer};

/// The prompt ids the server must compute for `messages`: the shipped template's render,
/// encoded without special tokens (vLLM's default for chat).
fn prompt_ids(messages: &[Value]) -> Vec<u32> {
    let t = shipped();
    let ChatTemplateState::Ready(template) = t.chat_template() else { panic!("the shipped tokenizer has a chat template") };
    let text = template.render(messages, true, &Map::new()).unwrap();
    t.encode(&text, false).unwrap()
}

async fn chat(base: &str, body: &Value) -> (u16, String) {
    post(base, "/v1/chat/completions", body).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chat_completion_renders_the_template_and_counts_exactly() {
    bounded(async {
        let s = start_echo(None, 1024, Some(shipped())).await;
        let messages = vec![json!({"role": "system", "content": "Be brief."}), json!({"role": "user", "content": "Hello there"})];
        let prompt = prompt_ids(&messages);
        let (status, body) = chat(&s.base, &json!({"model": "echo", "messages": messages, "max_completion_tokens": 9})).await;
        assert_eq!(status, 200, "{body}");
        let v: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["object"], "chat.completion");
        assert!(v["id"].as_str().unwrap().starts_with("chatcmpl-"), "{v}");
        assert_eq!(v["model"], "echo");
        assert_eq!(v["usage"], json!({"prompt_tokens": prompt.len(), "completion_tokens": 9, "total_tokens": prompt.len() + 9}));
        let choice = &v["choices"][0];
        assert_eq!(choice["message"]["role"], "assistant");
        assert_eq!(choice["message"]["content"], shipped().decode(&expected(&prompt, 9)).unwrap());
        assert_eq!(choice["finish_reason"], "length");

        // Content parts are joined by newlines, as vLLM joins them for a text-only model; the
        // older `max_tokens` still limits.
        let parts = json!([{"role": "user", "content": [{"type": "text", "text": "Hello"}, {"type": "text", "text": "there"}]}]);
        let (status, body) = chat(&s.base, &json!({"messages": parts, "max_tokens": 3})).await;
        assert_eq!(status, 200, "{body}");
        let v: Value = serde_json::from_str(&body).unwrap();
        let joined = prompt_ids(&[json!({"role": "user", "content": "Hello\nthere"})]);
        assert_eq!(v["usage"]["prompt_tokens"], joined.len());
        assert_eq!(v["usage"]["completion_tokens"], 3);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_chat_sends_the_role_then_content_then_finish_then_usage() {
    bounded(async {
        let s = start_echo(None, 1024, Some(shipped())).await;
        let messages = vec![json!({"role": "user", "content": "Stream me"})];
        let prompt = prompt_ids(&messages);
        let want = shipped().decode(&expected(&prompt, 6)).unwrap();
        for include_usage in [true, false] {
            let mut req = json!({"messages": messages, "max_completion_tokens": 6, "stream": true});
            if include_usage {
                req["stream_options"] = json!({"include_usage": true});
            }
            let resp = reqwest::Client::new().post(format!("{}/v1/chat/completions", s.base)).json(&req).send().await.unwrap();
            assert_eq!(resp.headers()["content-type"], "text/event-stream");
            let chunks = stream_chunks(&s.base, "/v1/chat/completions", &req).await;
            assert!(chunks.iter().all(|c| c["object"] == "chat.completion.chunk" && c["id"] == chunks[0]["id"]), "{chunks:?}");
            // First: the role, with empty content and no finish.
            assert_eq!(chunks[0]["choices"][0]["delta"], json!({"role": "assistant", "content": ""}));
            assert!(chunks[0]["choices"][0]["finish_reason"].is_null());
            let (content_chunks, usage_chunk) = if include_usage {
                let (last, rest) = chunks.split_last().unwrap();
                assert_eq!(last["choices"], json!([]));
                assert_eq!(last["usage"], json!({"prompt_tokens": prompt.len(), "completion_tokens": 6, "total_tokens": prompt.len() + 6}));
                (&rest[1..], true)
            } else {
                (&chunks[1..], false)
            };
            assert_eq!(usage_chunk, include_usage);
            // One chunk a token; the content joins to the whole; only the last has a finish.
            assert_eq!(content_chunks.len(), 6, "{content_chunks:?}");
            let text: String = content_chunks.iter().map(|c| c["choices"][0]["delta"]["content"].as_str().unwrap().to_string()).collect();
            assert_eq!(text, want);
            assert!(content_chunks.iter().all(|c| c["choices"][0]["delta"].get("role").is_none() && c.get("usage").is_none()));
            assert_eq!(content_chunks.last().unwrap()["choices"][0]["finish_reason"], "length");
            assert!(content_chunks[..5].iter().all(|c| c["choices"][0]["finish_reason"].is_null()));
        }
    })
    .await;
}

/// The body guidellm (whose default request type is chat) sends: a system prefix, the prompt
/// as a text part, `max_completion_tokens` with `ignore_eos` and `"stop": null`, and vLLM's
/// `continuous_usage_stats`, under which every chunk carries the usage so far.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_load_generators_chat_body_gets_usage_in_every_chunk() {
    bounded(async {
        let s = start_echo(None, 1024, Some(shipped())).await;
        let body = json!({
            "model": "echo", "stream": true, "stream_options": {"include_usage": true, "continuous_usage_stats": true},
            "max_completion_tokens": 5, "stop": null, "ignore_eos": true,
            "messages": [{"role": "system", "content": "prefix"}, {"role": "user", "content": [{"type": "text", "text": "the prompt"}]}],
        });
        let prompt = prompt_ids(&[json!({"role": "system", "content": "prefix"}), json!({"role": "user", "content": "the prompt"})]);
        let chunks = stream_chunks(&s.base, "/v1/chat/completions", &body).await;
        let completed: Vec<u64> = chunks.iter().map(|c| c["usage"]["completion_tokens"].as_u64().expect("usage in every chunk")).collect();
        assert!(chunks.iter().all(|c| c["usage"]["prompt_tokens"] == prompt.len()), "{chunks:?}");
        // The role chunk has none yet, each content chunk one more, then the usage chunk.
        assert_eq!(completed, [0, 1, 2, 3, 4, 5, 5]);
        assert_eq!(chunks.last().unwrap()["choices"], json!([]));
        let text: String = chunks.iter().filter_map(|c| c["choices"][0]["delta"]["content"].as_str()).collect();
        assert_eq!(text, shipped().decode(&expected(&prompt, 5)).unwrap());
        // Its text-completions body alike.
        let body = json!({"model": "echo", "stream": true, "stream_options": {"include_usage": true, "continuous_usage_stats": true},
                          "max_tokens": 3, "stop": null, "ignore_eos": true, "prompt": "the prompt"});
        let chunks = stream_chunks(&s.base, "/v1/completions", &body).await;
        let completed: Vec<u64> = chunks.iter().map(|c| c["usage"]["completion_tokens"].as_u64().unwrap()).collect();
        assert_eq!(completed, [1, 2, 3, 3]);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_tokens_default_to_the_rest_of_the_context_and_eos_is_a_stop() {
    bounded(async {
        let messages = vec![json!({"role": "user", "content": "hi"})];
        let prompt = prompt_ids(&messages);
        // No limit given: vLLM's default, the room the context leaves.
        let s = start_echo(None, 48, Some(shipped())).await;
        let (status, body) = chat(&s.base, &json!({"messages": messages})).await;
        assert_eq!(status, 200, "{body}");
        let v: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["usage"]["completion_tokens"], 48 - prompt.len());
        assert_eq!(v["choices"][0]["finish_reason"], "length");

        let eos = expected(&prompt, 10)[4];
        let stop_at = expected(&prompt, 10).iter().position(|&t| t == eos).unwrap() + 1;
        let s = start_echo(Some(eos), 1024, Some(shipped())).await;
        let (_, body) = chat(&s.base, &json!({"messages": messages, "max_tokens": 10})).await;
        let v: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["choices"][0]["finish_reason"], "stop", "{v}");
        assert_eq!(v["usage"]["completion_tokens"], stop_at);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_chat_does_not_support_is_a_400_that_names_it() {
    bounded(async {
        let s = start_echo(None, 1024, Some(shipped())).await;
        let user = json!([{"role": "user", "content": "hi"}]);
        let cases = [
            (json!({"messages": user, "tools": [{"type": "function", "function": {"name": "f"}}]}), "`tools`"),
            (json!({"messages": user, "tool_choice": "required"}), "`tool_choice`"),
            (json!({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "http://x/y.png"}}]}]}), "\"image_url\""),
            (json!({"messages": [{"role": "user", "content": [{"type": "input_audio", "input_audio": {"data": "", "format": "wav"}}]}]}), "\"input_audio\""),
            (json!({"messages": user, "n": 3}), "n = 3"),
            (json!({"messages": user, "response_format": {"type": "json_schema"}}), "`response_format`"),
            (json!({"messages": user, "logit_bias": {"5": 10}}), "`logit_bias`"),
            (json!({"messages": user, "reasoning_effort": "low"}), "`reasoning_effort`"),
            (json!({"messages": user, "frobnicate": true}), "unknown field `frobnicate`"),
            (json!({"messages": "hi"}), "invalid request"),
        ];
        for (body, named) in cases {
            let (status, text) = chat(&s.base, &body).await;
            assert_eq!(status, 400, "{body}: {text}");
            let v: Value = serde_json::from_str(&text).unwrap();
            let message = v["error"]["message"].as_str().unwrap();
            assert!(message.contains(named), "{body}: {message:?} lacks {named:?}");
        }
        // Defaults that ask for nothing are accepted, as clients send them unasked.
        let neutral = json!({"messages": user, "max_tokens": 2, "tools": [], "tool_choice": "none", "presence_penalty": 0, "frequency_penalty": 0.0,
                             "logit_bias": {}, "n": 1, "user": "someone", "parallel_tool_calls": true, "stop": null});
        let (status, text) = chat(&s.base, &neutral).await;
        assert_eq!(status, 200, "{text}");

        // A tokenizer without a chat template (the byte-level default): refused, as vLLM does.
        let bare = start_echo(None, 1024, None).await;
        let (status, text) = chat(&bare.base, &json!({"messages": user})).await;
        assert_eq!(status, 400, "{text}");
        assert!(text.contains("no chat template") && text.contains("transformers 4.44"), "{text}");
        // The completions route still serves it.
        post_ok(&bare.base, "/v1/completions", &json!({"prompt": "x", "max_tokens": 1})).await;
    })
    .await;
}

/// The real binary on the built-in `tiny` model: the shipped 256-id tokenizer's template is
/// compiled in, so the chat route works on a fresh clone; the prompt count is the template's
/// render re-encoded, and the reply re-encodes to the completion count.
#[test]
fn serve_answers_chat_on_the_built_in_model() {
    let (_server, base) = spawn_serve(&["--random-weights", "tiny", "--threads", "1"]);
    let tokenizer = Tokenizer::load(&repo().join("tokenizers/servesim-char-256")).unwrap();
    let ChatTemplateState::Ready(template) = tokenizer.chat_template() else { panic!("{:?}", tokenizer.chat_template()) };
    let messages = vec![json!({"role": "user", "content": "héllo wörld"})];
    let rendered = template.render(&messages, true, &Map::new()).unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let v: Value = runtime.block_on(async {
        let (status, body) = chat(&base, &json!({"model": "random-tiny", "messages": messages, "max_tokens": 12, "temperature": 0})).await;
        assert_eq!(status, 200, "{body}");
        serde_json::from_str(&body).unwrap()
    });
    assert_eq!(v["usage"]["prompt_tokens"], tokenizer.encode(&rendered, false).unwrap().len(), "{v}");
    assert_eq!(v["usage"]["completion_tokens"], 12);
    let content = v["choices"][0]["message"]["content"].as_str().unwrap();
    assert_eq!(tokenizer.encode(content, false).unwrap().len(), 12, "{content:?}");
}

/// The renderer against transformers' `apply_chat_template` (the code vLLM calls), on templates
/// that lean on what differs between Jinja engines: trimmed and left-stripped blocks,
/// `namespace`, loop controls, Python string methods, `raise_exception`, special tokens and a
/// `chat_template.jinja` beside the config. Needs python3 with transformers and jinja2 (CI
/// installs them for the vLLM client test); skips, saying why, without them.
#[test]
fn chat_templates_render_as_transformers_renders_them() {
    if let Err(why) = python_modules(&["transformers", "jinja2"]) {
        assert!(!required("SERVESIM_REQUIRE_VLLM_CLIENT"), "SERVESIM_REQUIRE_VLLM_CLIENT=1 but {why}");
        eprintln!("skipping the transformers chat-template comparison: {why}");
        return;
    }
    let templates = [
        // Zephyr's shape: the shipped tokenizers' template.
        std::fs::read_to_string(repo().join("tokenizers/servesim-char-256/tokenizer_config.json")).unwrap(),
        // Llama-3-like: namespace, strip(), trim/lstrip around indented blocks, bos_token.
        json!({"bos_token": "<s>", "eos_token": {"__type": "AddedToken", "content": "</s>", "lstrip": false, "normalized": false, "rstrip": false, "single_word": false, "special": true}, "chat_template":
            "{{- bos_token }}\n{%- set ns = namespace(system='') %}\n{%- for m in messages %}\n    {%- if m['role'] == 'system' %}\n        {%- set ns.system = m['content'] | trim %}\n    {%- endif %}\n{%- endfor %}\n{%- if ns.system %}{{ '<|sys|>' + ns.system + eos_token }}{% endif %}\n{% for m in messages if m['role'] != 'system' %}\n  {% if loop.index0 > 3 %}{% break %}{% endif %}\n  <|{{ m.role }}|>{{ m['content'].strip() | upper if m.role == 'user' else m['content'] }}{{ eos_token }}\n{% endfor %}\n{% if add_generation_prompt %}<|assistant|>{% endif %}"}).to_string(),
        // Alternation enforced with raise_exception, names passed through, a trailing newline.
        json!({"chat_template": "{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{{ '[' + message['role'] + (('@' + message['name']) if message.name is defined else '') + '] ' + message['content'] + '\\n' }}{% endfor %}{% if add_generation_prompt %}[assistant] {% endif %}\n"}).to_string(),
    ];
    let conversations = [
        json!([{"role": "system", "content": "  Be brief.  "}, {"role": "user", "content": " hi "}, {"role": "assistant", "content": "hello"}, {"role": "user", "content": "again", "name": "bob"}]),
        json!([{"role": "user", "content": "one"}, {"role": "assistant", "content": "two"}, {"role": "user", "content": "three"}, {"role": "assistant", "content": "four"}, {"role": "user", "content": "five"}, {"role": "assistant", "content": "six"}]),
        json!([{"role": "user", "content": "ünïcode ✓"}]),
    ];
    let tokenizer_json = std::fs::read_to_string(repo().join("tokenizers/servesim-char-256/tokenizer.json")).unwrap();
    let script = r#"
import json, sys
from transformers import AutoTokenizer
out = []
for case in json.load(sys.stdin):
    tok = AutoTokenizer.from_pretrained(case["dir"])
    try:
        text = tok.apply_chat_template(case["messages"], tokenize=False, add_generation_prompt=case["gen"])
        out.append({"text": text})
    except Exception as e:
        out.append({"error": str(e)})
print(json.dumps(out))
"#;
    let dirs: Vec<tempfile::TempDir> = templates.iter().map(|_| tempfile::tempdir().unwrap()).collect();
    let mut cases = Vec::new();
    for (i, (config, dir)) in templates.iter().zip(&dirs).enumerate() {
        write_file(dir.path(), "tokenizer.json", &tokenizer_json);
        let mut config: Value = serde_json::from_str(config).unwrap();
        config["tokenizer_class"] = json!("PreTrainedTokenizerFast");
        if i == 2 {
            // The template in chat_template.jinja, which overrides the config's.
            write_file(dir.path(), "chat_template.jinja", config["chat_template"].as_str().unwrap());
            config["chat_template"] = json!("config's template, overridden");
        }
        write_file(dir.path(), "tokenizer_config.json", &config.to_string());
        for messages in &conversations {
            for generation_prompt in [true, false] {
                cases.push(json!({"dir": dir.path(), "messages": messages, "gen": generation_prompt}));
            }
        }
    }
    let mut child = std::process::Command::new("python3")
        .args(["-c", script])
        .env("HF_HUB_OFFLINE", "1")
        .env("TRANSFORMERS_OFFLINE", "1")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    child.stdin.take().unwrap().write_all(Value::from(cases.clone()).to_string().as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "transformers failed: {}", String::from_utf8_lossy(&out.stderr));
    let want: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    let mut errors = 0;
    for (case, want) in cases.iter().zip(&want) {
        let tokenizer = Tokenizer::load(std::path::Path::new(case["dir"].as_str().unwrap())).unwrap();
        let ChatTemplateState::Ready(template) = tokenizer.chat_template() else { panic!("{:?}", tokenizer.chat_template()) };
        // The server's view of the messages: names pass through, as vLLM passes them.
        let messages: Vec<Value> = case["messages"].as_array().unwrap().clone();
        let got = template.render(&messages, case["gen"].as_bool().unwrap(), &Map::new());
        match (got, want.get("text")) {
            (Ok(text), Some(w)) => assert_eq!(text, w.as_str().unwrap(), "{case}"),
            (Err(e), None) => {
                errors += 1;
                let w = want["error"].as_str().unwrap();
                assert!(e.0.contains(w), "{case}: our error {:?}, transformers' {w:?}", e.0);
            }
            (got, _) => panic!("{case}: ours {got:?}, transformers' {want}"),
        }
    }
    assert!(errors > 0, "the alternation template refuses some conversation");
}
