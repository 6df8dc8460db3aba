//! `/metrics` under vLLM's names (vLLM 0.19.0's V1 logger, plus 0.8.5's two older names): the
//! counts equal what the responses said, the histograms have vLLM's buckets and the
//! `model_name` label, aborted requests are counted as such, and the page parses as Prometheus'
//! text format.

mod common;
mod server_support;
use server_support::*;

use std::collections::{BTreeMap, BTreeSet};

use futures_util::StreamExt;
use serde_json::{Value, json};

const LABELS: &str = "{model_name=\"echo\",engine=\"0\"}";

async fn metrics_page(base: &str) -> String {
    reqwest::get(format!("{base}/metrics")).await.unwrap().text().await.unwrap()
}

/// The value of the sample `series` (name and labels, exactly as written).
fn sample(page: &str, series: &str) -> f64 {
    page.lines()
        .find_map(|l| l.strip_prefix(series).and_then(|r| r.strip_prefix(' ')))
        .unwrap_or_else(|| panic!("no {series} in\n{page}"))
        .parse()
        .unwrap()
}

fn labelled(name: &str) -> String {
    format!("{name}{LABELS}")
}

/// The `le` bounds of histogram `name`, in order.
fn bounds(page: &str, name: &str) -> Vec<String> {
    let prefix = format!("{name}_bucket{{model_name=\"echo\",engine=\"0\",le=\"");
    page.lines().filter_map(|l| l.strip_prefix(&prefix)).map(|r| r[..r.find('"').unwrap()].to_string()).collect()
}

/// Checks the text format line by line: every family has HELP and TYPE before its samples,
/// every sample's value is a number, and every histogram's buckets are cumulative and end at
/// `+Inf` with its count.
fn check_format(page: &str) {
    let mut typed: BTreeMap<String, String> = BTreeMap::new();
    let mut helped = BTreeSet::new();
    for line in page.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            helped.insert(rest.split(' ').next().unwrap().to_string());
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let mut parts = rest.split(' ');
            let (name, kind) = (parts.next().unwrap(), parts.next().unwrap());
            assert!(["gauge", "counter", "histogram"].contains(&kind), "{line}");
            assert!(helped.contains(name), "TYPE before HELP: {line}");
            typed.insert(name.to_string(), kind.to_string());
        } else {
            let (series, value) = line.rsplit_once(' ').unwrap_or_else(|| panic!("not a sample: {line:?}"));
            value.parse::<f64>().unwrap_or_else(|_| panic!("not a number: {line:?}"));
            let name = &series[..series.find('{').unwrap_or(series.len())];
            let family = ["_bucket", "_count", "_sum"].iter().find_map(|s| name.strip_suffix(s)).filter(|f| typed.get(*f).map(String::as_str) == Some("histogram")).unwrap_or(name);
            assert!(typed.contains_key(family), "a sample before its TYPE: {line}");
        }
    }
    for (name, kind) in &typed {
        if kind != "histogram" {
            continue;
        }
        let buckets: Vec<(String, f64)> = page
            .lines()
            .filter(|l| l.starts_with(&format!("{name}_bucket")))
            .map(|l| (l[l.find("le=\"").unwrap() + 4..].split('"').next().unwrap().to_string(), l.rsplit(' ').next().unwrap().parse().unwrap()))
            .collect();
        assert!(buckets.windows(2).all(|w| w[0].1 <= w[1].1), "{name}: buckets not cumulative");
        assert_eq!(buckets.last().unwrap().0, "+Inf", "{name}");
        let count_line = page.lines().find(|l| l.starts_with(&format!("{name}_count"))).unwrap();
        assert_eq!(buckets.last().unwrap().1, count_line.rsplit(' ').next().unwrap().parse::<f64>().unwrap(), "{name}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vllm_names_count_what_the_responses_said() {
    bounded(async {
        let s = start_echo(None, 1024, Some(shipped())).await;
        let mut prompt_tokens = 0u64;
        let mut completion_tokens = Vec::new();
        let mut take = |usage: &Value| {
            prompt_tokens += usage["prompt_tokens"].as_u64().unwrap();
            completion_tokens.push(usage["completion_tokens"].as_u64().unwrap());
        };
        for n in [3, 7, 12] {
            take(&post_ok(&s.base, "/v1/completions", &json!({"prompt": format!("request of {n}"), "max_tokens": n})).await["usage"]);
        }
        let chat = post_ok(&s.base, "/v1/chat/completions", &json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 5})).await;
        take(&chat["usage"]);
        // A stop string: the tokens after it are the engine's, not the client's, and not counted.
        let (ids, text) = {
            let t = shipped();
            let ids = expected(&t.encode("cut me short", true).unwrap(), 30);
            let text = t.decode(&ids).unwrap();
            (ids, text)
        };
        let stop: String = text.chars().skip(10).take(2).collect();
        let stopped = post_ok(&s.base, "/v1/completions", &json!({"prompt": "cut me short", "max_tokens": 30, "stop": stop})).await;
        assert_eq!(stopped["choices"][0]["finish_reason"], "stop");
        assert!((stopped["usage"]["completion_tokens"].as_u64().unwrap() as usize) < ids.len());
        take(&stopped["usage"]);
        // TGI counts the same way (its prompt: the text's tokens).
        let tgi = post_ok(&s.base, "/generate", &json!({"inputs": "tgi", "parameters": {"max_new_tokens": 4, "details": true}})).await;
        assert_eq!(tgi["details"]["generated_tokens"], 4);
        prompt_tokens += 3;
        completion_tokens.push(4);

        let page = metrics_page(&s.base).await;
        check_format(&page);
        let generated: u64 = completion_tokens.iter().sum();
        assert_eq!(sample(&page, &labelled("vllm:prompt_tokens_total")), prompt_tokens as f64);
        assert_eq!(sample(&page, &labelled("vllm:generation_tokens_total")), generated as f64);
        let success = |reason: &str| sample(&page, &format!("vllm:request_success_total{{model_name=\"echo\",engine=\"0\",finished_reason=\"{reason}\"}}"));
        assert_eq!((success("length"), success("stop"), success("abort"), success("error")), (5.0, 1.0, 0.0, 0.0));
        assert_eq!(sample(&page, &labelled("vllm:num_requests_running")), 0.0);
        assert_eq!(sample(&page, &labelled("vllm:num_requests_waiting")), 0.0);
        assert_eq!(sample(&page, &labelled("vllm:kv_cache_usage_perc")), sample(&page, &labelled("vllm:gpu_cache_usage_perc")));
        // One observation a request; one gap a delivery after the first (a token a step here).
        let requests = completion_tokens.len() as f64;
        for name in ["vllm:time_to_first_token_seconds", "vllm:e2e_request_latency_seconds", "vllm:request_time_per_output_token_seconds"] {
            assert_eq!(sample(&page, &labelled(&format!("{name}_count"))), requests, "{name}");
        }
        let gaps: u64 = completion_tokens.iter().map(|n| n - 1).sum();
        assert_eq!(sample(&page, &labelled("vllm:inter_token_latency_seconds_count")), gaps as f64);
        assert_eq!(sample(&page, &labelled("vllm:time_per_output_token_seconds_count")), gaps as f64);
        assert_eq!(sample(&page, &labelled("vllm:request_generation_tokens_sum")), generated as f64);
        assert_eq!(sample(&page, &labelled("vllm:request_prompt_tokens_sum")), prompt_tokens as f64);
        // vLLM's bucket bounds, written as prometheus_client writes them.
        assert_eq!(
            bounds(&page, "vllm:time_to_first_token_seconds"),
            ["0.001", "0.005", "0.01", "0.02", "0.04", "0.06", "0.08", "0.1", "0.25", "0.5", "0.75", "1.0", "2.5", "5.0", "7.5", "10.0", "20.0", "40.0", "80.0", "160.0", "640.0", "2560.0", "+Inf"]
        );
        let gap_bounds = ["0.01", "0.025", "0.05", "0.075", "0.1", "0.15", "0.2", "0.3", "0.4", "0.5", "0.75", "1.0", "2.5", "5.0", "7.5", "10.0", "20.0", "40.0", "80.0", "+Inf"];
        assert_eq!(bounds(&page, "vllm:inter_token_latency_seconds"), gap_bounds);
        assert_eq!(bounds(&page, "vllm:time_per_output_token_seconds"), gap_bounds);
        assert_eq!(
            bounds(&page, "vllm:e2e_request_latency_seconds"),
            ["0.3", "0.5", "0.8", "1.0", "1.5", "2.0", "2.5", "5.0", "10.0", "15.0", "20.0", "30.0", "40.0", "50.0", "60.0", "120.0", "240.0", "480.0", "960.0", "1920.0", "7680.0", "+Inf"]
        );
        // vLLM's intervals of a finished request, in the same buckets: queued to its first step
        // (waiting), its first step to its first token (prefill) and to its last (running,
        // "inference"), and first to last token (decode). One observation a request; running is
        // prefill plus decode, and waiting plus running is within the end-to-end latency.
        let latency_bounds = bounds(&page, "vllm:e2e_request_latency_seconds");
        for name in ["vllm:request_queue_time_seconds", "vllm:request_inference_time_seconds", "vllm:request_prefill_time_seconds", "vllm:request_decode_time_seconds"] {
            assert_eq!(sample(&page, &labelled(&format!("{name}_count"))), requests, "{name}");
            assert_eq!(bounds(&page, name), latency_bounds, "{name}");
        }
        let sum = |name: &str| sample(&page, &labelled(&format!("vllm:{name}_sum")));
        assert!((sum("request_inference_time_seconds") - sum("request_prefill_time_seconds") - sum("request_decode_time_seconds")).abs() < 1e-6, "{page}");
        assert!(sum("request_queue_time_seconds") + sum("request_inference_time_seconds") <= sum("e2e_request_latency_seconds") + 1e-6, "{page}");
        assert!(sum("request_inference_time_seconds") > 0.0, "{page}");
        // Token counts in 1-2-5 buckets up to the context (1024), as vLLM's up to max_model_len.
        assert_eq!(bounds(&page, "vllm:request_prompt_tokens"), ["1.0", "2.0", "5.0", "10.0", "20.0", "50.0", "100.0", "200.0", "500.0", "1000.0", "+Inf"]);
        // The engine's own count includes what it generated past the stop string before the
        // front end cancelled it.
        assert!(sample(&page, "servesim_generation_tokens_total") >= generated as f64);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn running_requests_and_the_cache_show_and_a_client_that_leaves_is_an_abort() {
    bounded(async {
        // 1,000 steps of 40 ms: the request cannot end by itself before the client leaves.
        let engine = servesim::engine::server::EngineHandle::start(Echo { eos: None, step: std::time::Duration::from_millis(40) }, config(), servesim::scenario::Policy::VllmV1, 64, 1024)
            .with_model_name("echo");
        let s = serve_engine(engine).await;
        let resp = reqwest::Client::new()
            .post(format!("{}/v1/completions", s.base))
            .json(&json!({"prompt": "held", "max_tokens": 1000, "stream": true}))
            .send()
            .await
            .unwrap();
        let mut body = resp.bytes_stream();
        body.next().await.unwrap().unwrap();
        // The engine publishes its state after the step whose tokens went out.
        let engine = s.engine.clone();
        wait_until("the request running", move || engine.stats().running == 1).await;
        let page = metrics_page(&s.base).await;
        assert_eq!(sample(&page, &labelled("vllm:num_requests_running")), 1.0);
        assert!(sample(&page, &labelled("vllm:kv_cache_usage_perc")) > 0.0);
        assert_eq!(sample(&page, &labelled("vllm:time_to_first_token_seconds_count")), 1.0);
        drop(body);
        let mut page;
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(60);
        loop {
            page = metrics_page(&s.base).await;
            let abort = sample(&page, "vllm:request_success_total{model_name=\"echo\",engine=\"0\",finished_reason=\"abort\"}");
            if abort == 1.0 && sample(&page, &labelled("vllm:num_requests_running")) == 0.0 {
                break;
            }
            assert!(tokio::time::Instant::now() < deadline, "no abort counted:\n{page}");
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        assert_eq!(sample(&page, "vllm:request_success_total{model_name=\"echo\",engine=\"0\",finished_reason=\"length\"}"), 0.0);
        assert_eq!(sample(&page, &labelled("vllm:e2e_request_latency_seconds_count")), 0.0, "only finished requests have an end-to-end latency");
    })
    .await;
}

/// A model name that needs escaping keeps the page parseable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_model_name_label_is_escaped() {
    bounded(async {
        let engine = servesim::engine::server::EngineHandle::start(Echo { eos: None, step: std::time::Duration::from_millis(1) }, config(), servesim::scenario::Policy::VllmV1, 64, 256)
            .with_model_name("dir\\with \"quotes\"");
        let s = serve_engine(engine).await;
        let page = metrics_page(&s.base).await;
        check_format(&page);
        assert!(page.contains("vllm:num_requests_running{model_name=\"dir\\\\with \\\"quotes\\\"\",engine=\"0\"} 0"), "{page}");
    })
    .await;
}
