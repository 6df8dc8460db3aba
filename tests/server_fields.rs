//! The request fields that were accepted and ignored before (issue 33), each implemented or
//! refused by name, on every route that takes it: `stop` (strings end the output and are left
//! out), `stop_token_ids`, `echo` (and TGI's `return_full_text`), `logprobs` (from the model's
//! real logits), TGI's `do_sample` (greedy unless asked to sample, as TGI) and TGI's token
//! log-probabilities. Each test fails if its field is ignored again.

mod common;
mod server_support;
use common::one_seq_batch;
use server_support::*;

use serde_json::{Value, json};
use servesim::engine::model::{BlockTables, LlamaConfig, LlamaWeights, ModelExecutor};
use servesim::engine::server::{EngineHandle, ModelEngine, Tokenizer};
use servesim::scenario::Policy;

const COMPLETIONS: &str = "/v1/completions";
const CHAT: &str = "/v1/chat/completions";

/// The fake executor's output text after `prompt` (one character a token with the shipped
/// tokenizer), and the ids.
fn echo_output(prompt: &str, n: usize) -> (Vec<u32>, String) {
    let t = shipped();
    let ids = expected(&t.encode(prompt, true).unwrap(), n);
    let text = t.decode(&ids).unwrap();
    assert_eq!(text.chars().count(), n, "one character a token");
    (ids, text)
}

/// A stop string of the output: `len` characters from character `from`, and where it first
/// appears (in characters).
fn stop_in(text: &str, from: usize, len: usize) -> (String, usize) {
    let stop: String = text.chars().skip(from).take(len).collect();
    let at = text[..text.find(&stop).unwrap()].chars().count();
    (stop, at)
}

fn prefix(text: &str, chars: usize) -> String {
    text.chars().take(chars).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_strings_end_the_output_before_them_on_every_route() {
    bounded(async {
        let s = start_echo(None, 1024, Some(shipped())).await;
        let (_, text) = echo_output("stop test", 30);
        let (stop, at) = stop_in(&text, 9, 3);
        let through = at + 3;

        // Completions, whole: cut before the stop string; the token that completed it counted.
        let body = json!({"prompt": "stop test", "max_tokens": 30, "stop": ["never here \u{1F600}", stop]});
        let v = post_ok(&s.base, COMPLETIONS, &body).await;
        assert_eq!(v["choices"][0]["text"], prefix(&text, at), "{v}");
        assert_eq!((v["choices"][0]["finish_reason"].as_str(), v["choices"][0]["stop_reason"].as_str()), (Some("stop"), Some(stop.as_str())));
        assert_eq!(v["usage"]["completion_tokens"], through);

        // Streamed: the same text, and no chunk ever sends part of the stop string.
        let mut streamed = body.clone();
        streamed["stream"] = json!(true);
        streamed["stream_options"] = json!({"include_usage": true});
        let chunks = stream_chunks(&s.base, COMPLETIONS, &streamed).await;
        let (usage, token_chunks) = chunks.split_last().unwrap();
        let sent: String = token_chunks.iter().map(|c| c["choices"][0]["text"].as_str().unwrap()).collect();
        assert_eq!(sent, prefix(&text, at));
        assert_eq!(token_chunks.last().unwrap()["choices"][0]["finish_reason"], "stop");
        assert_eq!(usage["usage"]["completion_tokens"], through);

        // Kept when asked (vLLM's include_stop_str_in_output), a string alone as well as a list.
        let v = post_ok(&s.base, COMPLETIONS, &json!({"prompt": "stop test", "max_tokens": 30, "stop": stop, "include_stop_str_in_output": true})).await;
        assert_eq!(v["choices"][0]["text"], prefix(&text, through));

        // Chat: the same cut, in the message and in the stream.
        let messages = json!([{"role": "user", "content": "stop test"}]);
        let whole = post_ok(&s.base, CHAT, &json!({"messages": messages, "max_tokens": 30})).await;
        let content = whole["choices"][0]["message"]["content"].as_str().unwrap().to_string();
        let (chat_stop, chat_at) = stop_in(&content, 5, 2);
        let v = post_ok(&s.base, CHAT, &json!({"messages": messages, "max_tokens": 30, "stop": chat_stop})).await;
        assert_eq!(v["choices"][0]["message"]["content"], prefix(&content, chat_at));
        assert_eq!(v["choices"][0]["finish_reason"], "stop");
        assert_eq!(v["usage"]["completion_tokens"], chat_at + 2);
        let chunks = stream_chunks(&s.base, CHAT, &json!({"messages": messages, "max_tokens": 30, "stop": chat_stop, "stream": true})).await;
        let sent: String = chunks[1..].iter().map(|c| c["choices"][0]["delta"]["content"].as_str().unwrap()).collect();
        assert_eq!(sent, prefix(&content, chat_at));

        // TGI keeps its stop sequence, and says it stopped on one.
        let v = post_ok(&s.base, "/generate", &json!({"inputs": "stop test", "parameters": {"max_new_tokens": 30, "stop": [stop], "details": true}})).await;
        assert_eq!(v["generated_text"], prefix(&text, through));
        assert_eq!((v["details"]["finish_reason"].as_str(), v["details"]["generated_tokens"].as_u64()), (Some("stop_sequence"), Some(through as u64)));
        let events = tgi_events(&s.base, &json!({"inputs": "stop test", "parameters": {"max_new_tokens": 30, "stop": [stop]}})).await;
        assert_eq!(events.len(), through);
        assert_eq!(events.last().unwrap()["generated_text"], prefix(&text, through));

        // The engine's request ends with the output: nothing keeps running.
        wait_until("every request ended in the engine", || {
            let st = s.engine.stats();
            st.running == 0 && st.kv_blocks_used == 0
        })
        .await;
    })
    .await;
}

/// vLLM tries the stop strings in the request's order each time text is added, and the first
/// that ends in the new text wins (`check_stop_strings`), even where another starts earlier.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn of_two_stop_strings_ending_together_the_first_listed_wins() {
    bounded(async {
        let s = start_echo(None, 1024, Some(shipped())).await;
        let (_, text) = echo_output("order test", 30);
        // Two stop strings ending at the same token: its last three characters and last two.
        let (long, at) = stop_in(&text, 9, 3);
        let short: String = long.chars().skip(1).collect();
        assert_eq!(stop_in(&text, at + 1, 2), (short.clone(), at + 1), "the short one first appears inside the long one");
        for (stops, kept, matched) in [([&short, &long], at + 1, &short), ([&long, &short], at, &long)] {
            let v = post_ok(&s.base, COMPLETIONS, &json!({"prompt": "order test", "max_tokens": 30, "stop": stops})).await;
            assert_eq!(v["choices"][0]["text"], prefix(&text, kept), "{stops:?}: {v}");
            assert_eq!(v["choices"][0]["stop_reason"].as_str(), Some(matched.as_str()));
            assert_eq!(v["usage"]["completion_tokens"], at + 3, "the token that completed both, counted");
        }
    })
    .await;
}

/// The shipped 32,000-id tokenizer directory with `id` made a special token, `<eot>` (an id the
/// fake executor generates, so that a special token shows up in an output), chat template and all.
fn with_special(id: u32) -> Tokenizer {
    let shipped_dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tokenizers/servesim-char-32000");
    let mut spec: Value = serde_json::from_str(&std::fs::read_to_string(shipped_dir.join("tokenizer.json")).unwrap()).unwrap();
    let vocab = spec["model"]["vocab"].as_object_mut().unwrap();
    let character = vocab.iter().find(|(_, v)| v.as_u64() == Some(u64::from(id))).map(|(k, _)| k.clone()).unwrap();
    vocab.remove(&character);
    vocab.insert("<eot>".into(), json!(id));
    let added = json!({"id": id, "content": "<eot>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true});
    spec["added_tokens"].as_array_mut().unwrap().push(added);
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("tokenizer.json"), spec.to_string()).unwrap();
    std::fs::copy(shipped_dir.join("tokenizer_config.json"), dir.path().join("tokenizer_config.json")).unwrap();
    Tokenizer::load(dir.path()).unwrap()
}

/// As vLLM detokenizes: special tokens leave no text unless `skip_special_tokens` is false, and
/// the token that stopped the output (the model's EOS) leaves none unless
/// `include_stop_str_in_output`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn special_tokens_and_the_eos_leave_no_text_unless_asked() {
    bounded(async {
        let prompt = shipped().encode("specials", true).unwrap();
        let ids = expected(&prompt, 16);
        let special = ids[3];
        let stop_at = (5..ids.len()).find(|&i| !ids[..i].contains(&ids[i])).expect("a token new to the output");
        let (eos, before) = (ids[stop_at], &ids[..stop_at]);
        let t = with_special(special);
        assert_eq!(t.decode(&[special]).unwrap(), "<eot>");
        assert_ne!(special, eos);
        let s = start_echo(Some(eos), 1024, Some(with_special(special))).await;
        let text = |ids: &[u32], skip: bool| t.decode_skipping(ids, skip).unwrap();
        // A token prompt: the test tokenizer lacks the character it made special.
        let ask = |extra: Value| {
            let mut body = json!({"prompt": prompt, "max_tokens": 16});
            body.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
            body
        };
        let cases = [
            (json!({}), text(before, true)),
            (json!({"skip_special_tokens": true}), text(before, true)),
            (json!({"skip_special_tokens": false}), text(before, false)),
            (json!({"include_stop_str_in_output": true}), text(&ids[..=stop_at], true)),
        ];
        for (extra, want) in cases {
            let v = post_ok(&s.base, COMPLETIONS, &ask(extra.clone())).await;
            assert_eq!(v["choices"][0]["text"], want, "{extra}: {v}");
            assert_eq!((v["choices"][0]["finish_reason"].as_str(), v["usage"]["completion_tokens"].as_u64()), (Some("stop"), Some(stop_at as u64 + 1)));
            let mut streamed = ask(extra.clone());
            streamed["stream"] = json!(true);
            let chunks = stream_chunks(&s.base, COMPLETIONS, &streamed).await;
            let sent: String = chunks.iter().map(|c| c["choices"][0]["text"].as_str().unwrap()).collect();
            assert_eq!(sent, want, "streamed, {extra}");
        }
        assert!(!text(before, true).contains("<eot>") && text(before, false).contains("<eot>"));
        // Chat decodes alike: the same output with and without the special tokens' text.
        let messages = json!([{"role": "user", "content": "specials"}]);
        let content = |v: Value| v["choices"][0]["message"]["content"].as_str().unwrap().to_string();
        let kept = content(post_ok(&s.base, CHAT, &json!({"messages": messages, "max_tokens": 16, "skip_special_tokens": false, "ignore_eos": true})).await);
        let skipped = content(post_ok(&s.base, CHAT, &json!({"messages": messages, "max_tokens": 16, "ignore_eos": true})).await);
        assert_eq!(kept.replace("<eot>", ""), skipped);
        assert!(!skipped.contains("<eot>"), "{skipped}");
        let message = refusal(&s.base, COMPLETIONS, &json!({"prompt": "x", "skip_special_tokens": "yes"})).await;
        assert!(message.contains("skip_special_tokens"), "{message}");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_token_ids_end_the_output_without_their_text() {
    bounded(async {
        let s = start_echo(None, 1024, Some(shipped())).await;
        let (ids, text) = echo_output("token stop", 20);
        let stop_id = ids[6];
        let at = ids.iter().position(|&t| t == stop_id).unwrap();
        let v = post_ok(&s.base, COMPLETIONS, &json!({"prompt": "token stop", "max_tokens": 20, "stop_token_ids": [stop_id]})).await;
        assert_eq!(v["choices"][0]["text"], prefix(&text, at), "{v}");
        assert_eq!((v["choices"][0]["finish_reason"].as_str(), v["choices"][0]["stop_reason"].as_u64()), (Some("stop"), Some(stop_id as u64)));
        assert_eq!(v["usage"]["completion_tokens"], at + 1);
        let v = post_ok(&s.base, COMPLETIONS, &json!({"prompt": "token stop", "max_tokens": 20, "stop_token_ids": [stop_id], "include_stop_str_in_output": true})).await;
        assert_eq!(v["choices"][0]["text"], prefix(&text, at + 1));
        // Even with ignore_eos, as in vLLM.
        let v = post_ok(&s.base, COMPLETIONS, &json!({"prompt": "token stop", "max_tokens": 20, "stop_token_ids": [stop_id], "ignore_eos": true})).await;
        assert_eq!(v["usage"]["completion_tokens"], at + 1);
        let message = refusal(&s.base, COMPLETIONS, &json!({"prompt": "x", "stop_token_ids": [32_000]})).await;
        assert!(message.contains("stop_token_ids") && message.contains("32000"), "{message}");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn echo_puts_the_prompt_first() {
    bounded(async {
        let s = start_echo(None, 1024, Some(shipped())).await;
        let (_, text) = echo_output("echo me", 5);
        let v = post_ok(&s.base, COMPLETIONS, &json!({"prompt": "echo me", "max_tokens": 5, "echo": true})).await;
        assert_eq!(v["choices"][0]["text"], format!("echo me{text}"));
        assert_eq!(v["usage"]["completion_tokens"], 5, "the echo is no output token");
        // A token prompt is echoed decoded; a stream sends it with the first piece.
        let ids = shipped().encode("echo me", true).unwrap();
        let chunks = stream_chunks(&s.base, COMPLETIONS, &json!({"prompt": ids, "max_tokens": 5, "echo": true, "stream": true})).await;
        assert!(chunks[0]["choices"][0]["text"].as_str().unwrap().starts_with("echo me"), "{:?}", chunks[0]);
        let sent: String = chunks.iter().map(|c| c["choices"][0]["text"].as_str().unwrap()).collect();
        assert_eq!(sent, format!("echo me{text}"));
        // TGI's return_full_text.
        let v = post_ok(&s.base, "/generate", &json!({"inputs": "echo me", "parameters": {"max_new_tokens": 5, "return_full_text": true}})).await;
        assert_eq!(v["generated_text"], format!("echo me{text}"));
        // Chat: the last message, when it is the reply's role, leads the reply.
        let messages = json!([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Once upon"}]);
        let v = post_ok(&s.base, CHAT, &json!({"messages": messages, "max_tokens": 3, "echo": true, "add_generation_prompt": false})).await;
        assert_eq!(v["choices"][0]["message"]["role"], "assistant");
        assert!(v["choices"][0]["message"]["content"].as_str().unwrap().starts_with("Once upon"), "{v}");
        let chunks = stream_chunks(&s.base, CHAT, &json!({"messages": messages, "max_tokens": 3, "echo": true, "add_generation_prompt": false, "stream": true})).await;
        assert_eq!(chunks[1]["choices"][0]["delta"]["content"], "Once upon");
        // The prompt's log-probabilities are not computed: echo with logprobs is refused.
        let message = refusal(&s.base, COMPLETIONS, &json!({"prompt": "x", "echo": true, "logprobs": 1})).await;
        assert!(message.contains("`echo` with `logprobs`"), "{message}");
    })
    .await;
}

/// The real `tiny` model in-process, with the shipped 256-id tokenizer.
fn tiny_model() -> ModelEngine {
    ModelEngine::new(ModelExecutor::new(LlamaWeights::random(&LlamaConfig::tiny(), 7), 512, 16).expect("executor"))
}

async fn start_tiny() -> Server {
    let engine = EngineHandle::start(tiny_model(), config(), Policy::Servesim, 64, 400)
        .with_model_name("tiny")
        .with_tokenizer(std::sync::Arc::new(Tokenizer::shipped(256).unwrap()));
    serve_engine(engine).await
}

struct Blocks(Vec<u32>);

impl BlockTables for Blocks {
    fn block_size(&self) -> u32 {
        16
    }
    fn table(&self, _: usize, _: u32) -> &[u32] {
        &self.0
    }
}

/// log_softmax(logits / temperature) of the token after `prompt`, from a forward pass of the
/// same model outside the server, in f64.
fn reference_logprobs(prompt: &[u32], temperature: f64) -> Vec<f64> {
    let mut model = ModelExecutor::new(LlamaWeights::random(&LlamaConfig::tiny(), 7), 512, 16).unwrap();
    let batch = one_seq_batch(prompt.len() as u32, 0, true);
    let logits = model.forward_with_tables(&batch, prompt, &Blocks((0..32).collect())).unwrap().to_vec();
    let z: Vec<f64> = logits.iter().map(|&x| x as f64 / temperature).collect();
    let max = z.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    let lse = max + z.iter().map(|v| (v - max).exp()).sum::<f64>().ln();
    z.iter().map(|v| v - lse).collect()
}

fn close(got: &Value, want: f64) {
    let got = got.as_f64().unwrap_or_else(|| panic!("not a number: {got}"));
    assert!((got - want).abs() < 1e-3, "logprob {got}, from the model's logits {want}");
}

/// Ids by falling log-probability (lower id first among equals).
fn ranked(lp: &[f64]) -> Vec<u32> {
    let mut ids: Vec<u32> = (0..lp.len() as u32).collect();
    ids.sort_by(|&a, &b| lp[b as usize].total_cmp(&lp[a as usize]).then(a.cmp(&b)));
    ids
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logprobs_come_from_the_models_logits_on_every_route() {
    bounded(async {
        let s = start_tiny().await;
        let tokenizer = Tokenizer::shipped(256).unwrap();
        let prompt_text = "the logits of a real model";
        let prompt = tokenizer.encode(prompt_text, true).unwrap();
        let want = reference_logprobs(&prompt, 1.0);
        let order = ranked(&want);
        let first = order[0];

        // Completions, greedy: the first token is the argmax, its logprob the model's, and the
        // top 5 are the model's five most likely.
        let v = post_ok(&s.base, COMPLETIONS, &json!({"prompt": prompt_text, "max_tokens": 4, "temperature": 0, "logprobs": 5})).await;
        let lp = &v["choices"][0]["logprobs"];
        assert_eq!(lp["tokens"][0], tokenizer.token_text(first), "{v}");
        close(&lp["token_logprobs"][0], want[first as usize]);
        let top = lp["top_logprobs"][0].as_object().unwrap();
        for &id in &order[..5] {
            close(&top[&tokenizer.token_text(id)], want[id as usize]);
        }
        assert_eq!(lp["tokens"].as_array().unwrap().len(), 4);
        assert_eq!(lp["text_offset"], json!([0, 1, 2, 3]), "one character a token");
        // Streamed: the same numbers, chunk by chunk.
        let chunks = stream_chunks(&s.base, COMPLETIONS, &json!({"prompt": prompt_text, "max_tokens": 4, "temperature": 0, "logprobs": 5, "stream": true})).await;
        let streamed: Vec<Value> = chunks.iter().flat_map(|c| c["choices"][0]["logprobs"]["token_logprobs"].as_array().unwrap().clone()).collect();
        assert_eq!(Value::from(streamed), lp["token_logprobs"]);

        // Chat: OpenAI's shape, with top_logprobs alternatives.
        let v = post_ok(&s.base, CHAT, &json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, "temperature": 0, "logprobs": true, "top_logprobs": 3})).await;
        let content = &v["choices"][0]["logprobs"]["content"];
        assert_eq!(content.as_array().unwrap().len(), 2);
        let token = &content[0];
        assert_eq!(token["top_logprobs"].as_array().unwrap().len(), 3);
        assert_eq!(token["top_logprobs"][0]["token"], token["token"], "greedy: the sampled token is the most likely");
        assert_eq!(token["bytes"], json!(token["token"].as_str().unwrap().as_bytes()));
        assert!(token["logprob"].as_f64().unwrap() < 0.0);

        // TGI: every token's logprob, of the distribution it samples from (greedy: the model's).
        let v = post_ok(&s.base, "/generate", &json!({"inputs": prompt_text, "parameters": {"max_new_tokens": 3, "details": true, "top_n_tokens": 2}})).await;
        let tokens = v["details"]["tokens"].as_array().unwrap();
        assert_eq!(tokens[0]["id"], first);
        close(&tokens[0]["logprob"], want[first as usize]);
        assert!(tokens.iter().all(|t| t["logprob"].as_f64().unwrap() < 0.0), "no made-up 0.0: {v}");
        assert_eq!(v["details"]["top_tokens"][0][1]["id"], order[1]);
        let events = tgi_events(&s.base, &json!({"inputs": prompt_text, "parameters": {"max_new_tokens": 3}})).await;
        assert_eq!(events[0]["token"]["logprob"], tokens[0]["logprob"]);
        // Sampling at a temperature, TGI reports that distribution.
        let hot = reference_logprobs(&prompt, 0.5);
        let v = post_ok(&s.base, "/generate", &json!({"inputs": prompt_text, "parameters": {"max_new_tokens": 1, "details": true, "do_sample": true, "temperature": 0.5, "seed": 3}})).await;
        let t = &v["details"]["tokens"][0];
        close(&t["logprob"], hot[t["id"].as_u64().unwrap() as usize]);
        // With top-k or top-p too, the distribution after them: log-softmax over the tokens they
        // keep (TGI's warpers set the rest to −∞), which the OpenAI routes never report.
        let mass = |n: usize| order[..n].iter().map(|&id| hot[id as usize].exp()).sum::<f64>();
        let renormalised = |kept: usize, id: u32| if order[..kept].contains(&id) { hot[id as usize] - mass(kept).ln() } else { f64::NEG_INFINITY };
        // A top-p between the mass of the 3 most likely tokens and of the 4: it keeps 4.
        for (warper, kept) in [(json!({"top_k": 3}), 3), (json!({"top_p": (mass(3) + mass(4)) / 2.0}), 4)] {
            let mut parameters = json!({"max_new_tokens": 1, "details": true, "temperature": 0.5, "seed": 3, "top_n_tokens": kept + 1});
            parameters.as_object_mut().unwrap().extend(warper.as_object().unwrap().clone());
            let v = post_ok(&s.base, "/generate", &json!({"inputs": prompt_text, "parameters": parameters})).await;
            let want = |id: u32| renormalised(kept, id);
            let t = &v["details"]["tokens"][0];
            close(&t["logprob"], want(t["id"].as_u64().unwrap() as u32));
            let top = v["details"]["top_tokens"][0].as_array().unwrap();
            for (i, alt) in top.iter().enumerate() {
                assert_eq!(alt["id"], order[i], "{warper}: {v}");
                if i < kept {
                    close(&alt["logprob"], want(order[i]));
                } else {
                    assert_eq!(alt["logprob"], -9999.0, "{warper}: a token it drops can never be drawn: {v}");
                }
            }
        }

        let message = refusal(&s.base, COMPLETIONS, &json!({"prompt": "x", "logprobs": 21})).await;
        assert!(message.contains("`logprobs` = 21"), "{message}");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_executor_without_logprobs_says_so_instead_of_making_them_up() {
    bounded(async {
        let s = start_echo(None, 1024, Some(shipped())).await;
        let message = refusal(&s.base, COMPLETIONS, &json!({"prompt": "x", "logprobs": 0})).await;
        assert!(message.contains("logprobs"), "{message}");
        let v = post_ok(&s.base, "/generate", &json!({"inputs": "x", "parameters": {"max_new_tokens": 2, "details": true}})).await;
        assert!(v["details"]["tokens"].as_array().unwrap().iter().all(|t| t["logprob"].is_null()), "{v}");
    })
    .await;
}

/// TGI decodes greedily unless `do_sample` or a warper (temperature, top-k, top-p) asks it to
/// sample; the OpenAI routes sample at temperature 1 by default.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tgi_is_greedy_unless_asked_to_sample() {
    bounded(async {
        let s = start_tiny().await;
        let ids = |v: &Value| -> Vec<u64> { v["details"]["tokens"].as_array().unwrap().iter().map(|t| t["id"].as_u64().unwrap()).collect() };
        let generate = |parameters: Value| {
            let base = s.base.clone();
            async move {
                let mut p = json!({"max_new_tokens": 16, "details": true});
                p.as_object_mut().unwrap().extend(parameters.as_object().unwrap().clone());
                ids(&post_ok(&base, "/generate", &json!({"inputs": "greedy or not", "parameters": p})).await)
            }
        };
        // Special tokens' text kept, so that re-encoding the text gives every generated id.
        let greedy = post_ok(&s.base, COMPLETIONS, &json!({"prompt": "greedy or not", "max_tokens": 16, "temperature": 0, "skip_special_tokens": false})).await;
        let greedy_text = greedy["choices"][0]["text"].as_str().unwrap().to_string();
        let tokenizer = Tokenizer::shipped(256).unwrap();
        let greedy_ids: Vec<u64> = tokenizer.encode(&greedy_text, false).unwrap().into_iter().map(u64::from).collect();
        assert_eq!(generate(json!({})).await, greedy_ids, "no parameters: greedy");
        assert_eq!(generate(json!({"do_sample": false, "seed": 5})).await, greedy_ids);
        let sampled = generate(json!({"do_sample": true, "temperature": 2.0, "seed": 1})).await;
        assert_ne!(sampled, greedy_ids, "do_sample: true samples");
        // A warper alone samples too, as TGI's `sampling = do_sample or has_warpers`.
        assert_eq!(generate(json!({"temperature": 2.0, "seed": 1})).await, sampled);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fields_the_server_does_not_act_on_are_refused_by_name() {
    bounded(async {
        let s = start_echo(None, 1024, Some(shipped())).await;
        let cases = [
            (COMPLETIONS, json!({"prompt": "x", "presence_penalty": 0.5}), "`presence_penalty` = 0.5"),
            (COMPLETIONS, json!({"prompt": "x", "suffix": "tail"}), "`suffix`"),
            (COMPLETIONS, json!({"prompt": "x", "guided_json": {}}), "`guided_json`"),
            (COMPLETIONS, json!({"prompt": "x", "prompt_logprobs": 1}), "`prompt_logprobs`"),
            (COMPLETIONS, json!({"prompt": "x", "nonsense": 1}), "unknown field `nonsense`"),
            (COMPLETIONS, json!({"prompt": "x", "stop": [""]}), "`stop`[0] is empty"),
            (COMPLETIONS, json!({"prompt": "x", "stop": vec!["a"; 33]}), "33 strings"),
            ("/generate", json!({"inputs": "x", "parameters": {"typical_p": 0.5}}), "`typical_p`"),
            ("/generate", json!({"inputs": "x", "parameters": {"truncate": 10}}), "`truncate`"),
            ("/generate", json!({"inputs": "x", "parameters": {"decoder_input_details": true}}), "`decoder_input_details`"),
            ("/generate", json!({"inputs": "x", "parameters": {"watermark": true}}), "`watermark`"),
            ("/generate", json!({"inputs": "x", "parameters": {"grammar": {"type": "json"}}}), "`grammar`"),
            ("/generate", json!({"inputs": "x", "parameters": {"top_n_tokens": 30}}), "top_n_tokens"),
            ("/generate_stream", json!({"inputs": "x", "parameters": {"repetition_penalty": 1.2}}), "`repetition_penalty` = 1.2"),
            ("/generate_stream", json!({"inputs": "x", "stream": true}), "unknown field `stream`"),
        ];
        for (path, body, named) in cases {
            let message = refusal(&s.base, path, &body).await;
            assert!(message.contains(named), "{path} {body}: {message:?} lacks {named:?}");
        }
        // What clients send unasked, at the values that ask for nothing, passes.
        post_ok(&s.base, COMPLETIONS, &json!({"prompt": "x", "max_tokens": 1, "presence_penalty": 0, "frequency_penalty": 0, "logit_bias": {}, "user": "u", "best_of": 1, "n": 1, "stop": null, "logprobs": null})).await;
        post_ok(&s.base, "/generate", &json!({"inputs": "x", "parameters": {"max_new_tokens": 1, "decoder_input_details": false, "watermark": false, "repetition_penalty": 1.0, "best_of": 1}})).await;
    })
    .await;
}

/// `serve --ignore-eos` runs every request to its max_tokens: a stop it would not apply is
/// refused, not dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_ignores_eos_refuses_stops() {
    bounded(async {
        let engine = EngineHandle::start(Echo { eos: None, step: std::time::Duration::from_millis(1) }, config(), Policy::VllmV1, 64, 1024)
            .with_tokenizer(std::sync::Arc::new(shipped()))
            .with_ignore_eos(true);
        let s = serve_engine(engine).await;
        for (body, field) in [(json!({"prompt": "x", "stop": "a"}), "`stop`"), (json!({"prompt": "x", "stop_token_ids": [40]}), "`stop_token_ids`")] {
            let message = refusal(&s.base, COMPLETIONS, &body).await;
            assert!(message.contains(field) && message.contains("--ignore-eos"), "{message}");
        }
        let message = refusal(&s.base, "/generate", &json!({"inputs": "x", "parameters": {"stop": ["a"]}})).await;
        assert!(message.contains("--ignore-eos"), "{message}");
    })
    .await;
}
