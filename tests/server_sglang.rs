//! SGLang's native `/generate` on the server (the body's fields pick it over TGI's), and the
//! bench client's `sglang` backend against it, over loopback with the fake executor, whose
//! tokens are known in advance.

mod common;
#[path = "server_support/mod.rs"]
mod support;
use support::*;

use serde_json::json;
use servesim::bench::{self, Backend, BenchConfig};
use servesim::metrics::Summary;
use servesim::workload::RequestSpec;

const PROMPT: [u32; 3] = [65, 66, 67];

/// The fake executor's tokens after [`PROMPT`], as the byte-level tokenizer writes them.
fn text_of(n: usize) -> String {
    expected(&PROMPT, n).into_iter().map(|id| char::from(id as u8)).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_whole_reply_has_the_text_and_meta_info() {
    bounded(async {
        let s = start_echo(None, 256, None).await;
        let v = post_ok(&s.base, "/generate", &json!({"input_ids": PROMPT, "sampling_params": {"max_new_tokens": 5, "temperature": 0}})).await;
        assert_eq!(v["text"], text_of(5));
        let meta = &v["meta_info"];
        assert_eq!((meta["prompt_tokens"].as_u64(), meta["completion_tokens"].as_u64()), (Some(3), Some(5)), "{v}");
        assert_eq!(meta["finish_reason"], json!({"type": "length", "length": 5}));
        assert_eq!(meta["id"].as_str().map(str::len), Some(32), "{v}");
        assert!(meta["e2e_latency"].as_f64().is_some_and(|s| s > 0.0), "{v}");
        // A text prompt, the caller's id, and a stop string trimmed from the output (SGLang's
        // default) or kept (`no_stop_trim`).
        let stop = text_of(4)[2..3].to_string();
        for (trim, kept) in [(false, 2), (true, 3)] {
            let v = post_ok(
                &s.base,
                "/generate",
                &json!({"text": "ABC", "rid": "r-1", "sampling_params": {"max_new_tokens": 5, "temperature": 0, "stop": stop, "no_stop_trim": trim}}),
            )
            .await;
            assert_eq!(v["text"].as_str(), Some(&text_of(3)[..kept]), "{v}");
            assert_eq!(v["meta_info"]["id"], "r-1");
            assert_eq!(v["meta_info"]["finish_reason"], json!({"type": "stop", "matched": stop}));
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_models_eos_is_matched_by_id() {
    bounded(async {
        let eos = expected(&PROMPT, 3)[2];
        let s = start_echo(Some(eos), 256, None).await;
        let v = post_ok(&s.base, "/generate", &json!({"input_ids": PROMPT, "sampling_params": {"max_new_tokens": 8, "temperature": 0}})).await;
        assert_eq!(v["meta_info"]["finish_reason"], json!({"type": "stop", "matched": eos}), "{v}");
        assert_eq!(v["meta_info"]["completion_tokens"], 3);
        assert_eq!(v["text"].as_str(), Some(&text_of(2)[..]), "the EOS adds no text: {v}");
    })
    .await;
}

/// Every chunk carries the whole text so far and the count so far; the last its finish reason;
/// then `data: [DONE]`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_sends_the_whole_text_each_time() {
    bounded(async {
        let s = start_echo(None, 256, None).await;
        let chunks = stream_chunks(&s.base, "/generate", &json!({"input_ids": PROMPT, "sampling_params": {"max_new_tokens": 5, "temperature": 0}, "stream": true})).await;
        assert_eq!(chunks.len(), 5, "{chunks:?}");
        for (i, c) in chunks.iter().enumerate() {
            assert_eq!(c["text"].as_str(), Some(&text_of(i + 1)[..]), "{c}");
            assert_eq!(c["meta_info"]["completion_tokens"], i + 1);
            let last = i + 1 == chunks.len();
            assert_eq!(c["meta_info"]["finish_reason"].is_null(), !last, "{c}");
            assert_eq!(c["meta_info"].get("e2e_latency").is_some(), last, "{c}");
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_body_picks_the_api_and_refusals_name_their_field() {
    bounded(async {
        let s = start_echo(None, 256, None).await;
        // TGI's body on the same route is TGI's.
        let v = post_ok(&s.base, "/generate", &json!({"inputs": "ABC", "parameters": {"max_new_tokens": 2}})).await;
        assert!(v["generated_text"].is_string(), "{v}");
        for (body, word) in [
            (json!({"inputs": "a", "text": "b"}), "ambiguous"),
            (json!({"parameters": {"max_new_tokens": 2}}), "needs a prompt"),
            (json!({"text": "a", "sampling_params": {"regex": "x"}}), "`regex` is not supported"),
            (json!({"text": ["a", "b"]}), "a batch of prompts"),
            (json!({"text": "a", "return_logprob": true}), "`return_logprob` = true"),
        ] {
            let message = refusal(&s.base, "/generate", &body).await;
            assert!(message.contains(word), "{body}: {message}");
        }
        // SGLang has no /generate_stream: TGI's body only there.
        let message = refusal(&s.base, "/generate_stream", &json!({"text": "a"})).await;
        assert!(message.contains("unknown field `text`"), "{message}");
    })
    .await;
}

fn specs(n: u64, input_tokens: u32, max_tokens: u32) -> Vec<RequestSpec> {
    (0..n)
        .map(|i| RequestSpec { arrival_ns: i * 2_000_000, input_tokens, output_tokens: max_tokens, max_tokens, prefix: Default::default(), follows: None })
        .collect()
}

/// The bench client's SGLang backends: every request counted as the server counted it, one ITL
/// sample a token after the first, and the duration taken after the server-info request (this
/// server does not speculate, so it reports no accept length).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bench_sglang_backends_count_the_servers_tokens() {
    bounded(async {
        let s = start_echo(None, 256, None).await;
        for backend in [Backend::Sglang, Backend::SglangOai] {
            let mut config = BenchConfig::new(backend, &s.base, "echo", specs(4, 8, 5));
            config.ignore_eos = true;
            config.warmup_requests = 1;
            let run = bench::run(&config).await.unwrap();
            for (record, detail) in run.records.requests.iter().zip(&run.details) {
                assert!(record.success, "{backend:?}: {detail:?}");
                assert_eq!(record.output_tokens, 5, "{backend:?}");
                assert_eq!(detail.itl_ns.len(), 4, "{backend:?}: {detail:?}");
                assert_eq!(detail.text.chars().count(), 5, "{backend:?}: {detail:?}");
            }
            assert_eq!(run.accept_length, None);
            let last_end_ns = run.records.requests.iter().map(|r| r.end_ns).max().unwrap();
            assert!(run.records.duration_ns >= last_end_ns, "{backend:?}");
            let summary = Summary::from_records(&run.records, &[99.0]);
            assert_eq!((summary.completed, summary.total_output_tokens), (4, 20), "{backend:?}");
        }
        // Warm-ups included: 2 backends × (1 + 4) requests of 5 tokens.
        let m = reqwest::get(format!("{}/metrics", s.base)).await.unwrap().text().await.unwrap();
        let generated = m.lines().find_map(|l| l.strip_prefix("servesim_generation_tokens_total ")).map(str::trim);
        assert_eq!(generated.and_then(|v| v.parse::<f64>().ok()), Some(50.0), "{m}");
    })
    .await;
}
