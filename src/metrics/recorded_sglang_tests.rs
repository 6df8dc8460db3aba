//! SGLang's block and record (`super::sglang`) read back by this reader: what servesim writes,
//! and the lines and fields of SGLang's that servesim never writes.

use std::path::Path;

use super::super::sglang::tests::{random_report, summary};
use super::super::sglang::{SglangReport, record, render_block};
use super::*;

/// What servesim writes, servesim reads back under vLLM's keys: the block and the record.
#[test]
fn block_and_record_read_back_under_vllms_keys() {
    let report = SglangReport { output_tokens_retokenized: Some(255), accept_length: Some(1.5), ..random_report() };
    let text = format!("num_prompts: 4\n{}", render_block(&summary(), &report));
    let blocks = parse_text(&text, Path::new("sglang.txt")).unwrap();
    let block = &blocks[0];
    for (key, value) in [
        ("request_rate", 4.0),
        ("max_concurrency", 16.0),
        ("completed", 4.0),
        ("duration", 8.0),
        ("total_output_tokens_retokenized", 255.0),
        ("input_throughput", 64.0),
        ("total_token_throughput", 96.0),
        ("concurrency", 1.25),
        ("accept_length", 1.5),
        ("mean_e2el_ms", 2500.0),
        ("median_e2el_ms", 2400.0),
        ("p99_ttft_ms", 158.46),
        ("p95_itl_ms", 35.5),
        ("p100_itl_ms", 48.0),
    ] {
        assert_eq!(block.get(key), Some(value), "{key}");
    }
    assert_eq!(block.context_value("backend"), Some("sglang"));
    assert_eq!(block.context_value("num_prompts"), Some("4"));

    let line = record(&summary(), &report);
    let blocks = parse_jsonl(&format!("{line}\n\n{line}\n"), Path::new("sglang.jsonl")).unwrap();
    assert_eq!((blocks.len(), blocks[1].line, blocks[1].index), (2, 3, 2));
    let block = &blocks[0];
    for (key, value) in [("mean_e2el_ms", 2500.0), ("p99_e2el_ms", 2980.0), ("std_e2el_ms", 300.0), ("request_rate", 4.0), ("p95_itl_ms", 35.5)] {
        assert_eq!(block.get(key), Some(value), "{key}");
    }
    // Arguments are context, not measurements; SGLang's names are gone.
    assert_eq!(block.get("random_input_len"), None);
    assert_eq!(block.context_value("random_input_len"), Some("128"));
    assert_eq!(block.get("mean_e2e_latency_ms"), None);
}

/// A burst's rate is saved as `Infinity` and read as vLLM's `"inf"`; `--output-details` arrays
/// give the request count SGLang never saves, and the failures with it.
#[test]
fn records_give_their_rate_and_request_count() {
    let line = r#"{"backend": "sglang", "request_rate": Infinity, "completed": 3, "mean_ttft_ms": NaN, "input_lens": [5, 6, 7, 8], "total_throughput": 9.5}"#;
    let block = &parse_jsonl(line, Path::new("r.jsonl")).unwrap()[0];
    assert_eq!(block.context_value("request_rate"), Some("inf"));
    assert_eq!(block.get("num_prompts"), Some(4.0));
    assert_eq!(block.get("failed"), Some(1.0));
    assert_eq!(block.get("mean_ttft_ms"), None);
    assert_eq!(block.get("total_token_throughput"), Some(9.5));
    // Without the arrays, no count is made up.
    let block = &parse_jsonl(r#"{"completed": 3}"#, Path::new("r.jsonl")).unwrap()[0];
    assert_eq!((block.get("num_prompts"), block.get("failed")), (None, None));
}

/// 0.5.x's nested reports are lifted; its extra lines (percentiles of E2E, goodput, the cache
/// report) are read from the text.
#[test]
fn sglang_0_5_fields_and_lines_are_read() {
    let line = r#"{"completed": 2, "p90_e2e_latency_ms": 7.5, "cache_report": {"cache_hit_rate_pct": 12.5, "storage_backend": null}, "slo_attainment_by_metric": {"ttft": 0.5}, "server_info": {"a": 1}, "tag": null}"#;
    let block = &parse_jsonl(line, Path::new("r.jsonl")).unwrap()[0];
    assert_eq!(block.get("p90_e2el_ms"), Some(7.5));
    assert_eq!(block.get("cache_hit_rate_pct"), Some(12.5));
    assert_eq!(block.get("slo_attainment_ttft"), Some(0.5));
    let text = "\
============ Serving Benchmark Result ============
Traffic request rate:                    trace     
P95 E2E Latency (ms):                    11.00     
Peak concurrent requests:                7         
-----------------------Goodput--------------------
SLOs (ms):                               ttft:100 tpot:20
SLO attainment (%):                      87.50     
TTFT SLO attainment (%):                 90.00     
----------------Cache Hit Details-----------------
Total cached tokens:                     300       
  Device:                                200       
  Storage (mooncake):                    100       
Cache hit rate:                          25.0%
  Device:                                66.7%
==================================================
";
    let block = &parse_text(text, Path::new("t.txt")).unwrap()[0];
    assert_eq!(block.context_value("request_rate"), Some("trace"));
    assert_eq!(block.context_value("goodput_slos_ms"), Some("ttft:100 tpot:20"));
    for (key, value) in [
        ("p95_e2el_ms", 11.0),
        ("max_concurrent_requests", 7.0),
        ("slo_attainment", 0.875),
        ("slo_attainment_ttft", 0.9),
        ("total_cached_tokens", 300.0),
        ("device_cached_tokens", 200.0),
        ("storage_cached_tokens", 100.0),
        ("cache_hit_rate_pct", 25.0),
        ("device_cached_pct", 66.7),
    ] {
        assert_eq!(block.get(key), Some(value), "{key}");
    }
}

#[test]
fn bad_sglang_lines_name_the_line_and_value() {
    let text = "============ Serving Benchmark Result ============\nConcurrency:     lots\n====\n";
    match parse_text(text, Path::new("t.txt")) {
        Err(crate::metrics::recorded::RecordedError::Syntax { line, expected, .. }) => {
            assert_eq!(line, 2);
            assert!(expected.contains("a number after `Concurrency:`, not `lots`"), "{expected}");
        }
        other => panic!("{other:?}"),
    }
    match parse_jsonl("{\"completed\": 1}\n[1, 2]\n", Path::new("r.jsonl")) {
        Err(crate::metrics::recorded::RecordedError::Syntax { line, expected, .. }) => {
            assert_eq!(line, 2);
            assert!(expected.contains("one JSON result object on each line"), "{expected}");
        }
        other => panic!("{other:?}"),
    }
    match parse_jsonl("{\"completed\": 1,\n", Path::new("r.jsonl")) {
        Err(crate::metrics::recorded::RecordedError::Syntax { line, expected, .. }) => {
            assert_eq!(line, 1);
            assert!(expected.contains("at column"), "{expected}");
        }
        other => panic!("{other:?}"),
    }
}
