//! OpenAI's own Python client (`pip install openai`) against `servesim serve` on the built-in
//! `tiny` model: chat whole and streamed with usage, completions with stop strings and
//! logprobs, and a refused field surfacing as the client's `BadRequestError` naming it. The
//! client parses every response into its typed models, so a field of the wrong shape fails here.
//!
//! Needs a python3 that imports `openai`; without it the test prints why and passes, unless
//! `SERVESIM_REQUIRE_OPENAI_CLIENT=1` makes that a failure.

mod common;
use common::*;

use serde_json::Value;

const SCRIPT: &str = r#"
import json, sys
import openai
client = openai.OpenAI(base_url=sys.argv[1] + "/v1", api_key="unused", max_retries=0)
out = {}
messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Say something."}]
r = client.chat.completions.create(model="random-tiny", messages=messages, max_completion_tokens=8, temperature=0)
out["chat"] = {"content": r.choices[0].message.content, "role": r.choices[0].message.role,
               "finish": r.choices[0].finish_reason, "usage": r.usage.model_dump()}
text, roles, usage, finishes = "", [], None, []
for chunk in client.chat.completions.create(model="random-tiny", messages=messages, max_completion_tokens=8, temperature=0,
                                            stream=True, stream_options={"include_usage": True}):
    if chunk.usage is not None:
        usage = chunk.usage.model_dump()
    for c in chunk.choices:
        if c.delta.role:
            roles.append(c.delta.role)
        text += c.delta.content or ""
        if c.finish_reason:
            finishes.append(c.finish_reason)
out["stream"] = {"content": text, "roles": roles, "usage": usage, "finishes": finishes}
r = client.completions.create(model="random-tiny", prompt="The quick brown fox", max_tokens=6, temperature=0, logprobs=2)
out["completion"] = {"text": r.choices[0].text, "tokens": r.choices[0].logprobs.tokens,
                     "token_logprobs": r.choices[0].logprobs.token_logprobs, "usage": r.usage.model_dump()}
stop = r.choices[0].text[2:4]
r = client.completions.create(model="random-tiny", prompt="The quick brown fox", max_tokens=6, temperature=0, stop=[stop])
out["stopped"] = {"stop": stop, "text": r.choices[0].text, "finish": r.choices[0].finish_reason, "usage": r.usage.model_dump()}
try:
    client.chat.completions.create(model="random-tiny", messages=messages, tools=[{"type": "function", "function": {"name": "f", "parameters": {}}}])
    out["tools"] = "accepted"
except openai.BadRequestError as e:
    out["tools"] = str(e)
print(json.dumps(out))
"#;

#[test]
fn openais_python_client_drives_chat_and_completions() {
    if let Err(why) = python_modules(&["openai"]) {
        assert!(!required("SERVESIM_REQUIRE_OPENAI_CLIENT"), "SERVESIM_REQUIRE_OPENAI_CLIENT=1 but {why}");
        eprintln!("skipping the OpenAI client test: {why} (pip install openai)");
        return;
    }
    let (server, base) = spawn_serve(&["--random-weights", "tiny", "--threads", "1"]);
    let out = std::process::Command::new("python3").args(["-c", SCRIPT, &base]).output().expect("run python3");
    drop(server);
    assert!(out.status.success(), "the OpenAI client failed:\n{}\n{}", stdout(&out), stderr(&out));
    let v: Value = serde_json::from_str(stdout(&out).trim()).unwrap_or_else(|e| panic!("{e}: {}", stdout(&out)));
    let tokens = |text: &Value| text.as_str().unwrap().chars().count() as u64;

    let chat = &v["chat"];
    assert_eq!((chat["role"].as_str(), chat["finish"].as_str()), (Some("assistant"), Some("length")), "{v}");
    assert_eq!(chat["usage"]["completion_tokens"], 8);
    assert_eq!(tokens(&chat["content"]), 8, "one character a token with the shipped tokenizer: {v}");
    let stream = &v["stream"];
    assert_eq!(stream["roles"], serde_json::json!(["assistant"]));
    assert_eq!(stream["content"], chat["content"], "greedy: the stream says what the whole reply said");
    assert_eq!(stream["finishes"], serde_json::json!(["length"]));
    assert_eq!(stream["usage"], chat["usage"]);

    let completion = &v["completion"];
    assert_eq!(completion["usage"]["completion_tokens"], 6);
    assert_eq!(completion["tokens"].as_array().unwrap().len(), 6);
    assert!(completion["token_logprobs"].as_array().unwrap().iter().all(|l| l.as_f64().unwrap() < 0.0), "{v}");
    let stopped = &v["stopped"];
    let full = completion["text"].as_str().unwrap();
    let at = full.find(stopped["stop"].as_str().unwrap()).unwrap();
    assert_eq!(stopped["text"].as_str().unwrap(), &full[..at]);
    assert_eq!(stopped["finish"], "stop");
    assert!(v["tools"].as_str().unwrap().contains("`tools`"), "{v}");
}
