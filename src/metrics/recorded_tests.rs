use serde_json::json;

use super::super::format::{ReportLayout, ReportOptions, py_fixed2, to_json, write_report};
use super::super::summary::{Stat, Summary};
use super::*;

const RUN_000: &str = include_str!("../../tests/data/recorded/run-000-prefill-decode.txt");
const RUN_001: &str = include_str!("../../tests/data/recorded/run-001-mixed-3000.txt");
const RUN_002: &str = include_str!("../../tests/data/recorded/run-002-vllm-405b.txt");
const RUN_003: &str = include_str!("../../tests/data/recorded/run-003-tgi-405b.txt");

fn parse(text: &str) -> Vec<RecordedBlock> {
    parse_text(text, Path::new("test.txt")).unwrap()
}

fn pairs(items: &[(&str, &str)]) -> Vec<(String, String)> {
    items
        .iter()
        .map(|&(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// The error's (line, text, expected); panics on anything but a syntax error.
fn syntax(result: Result<Vec<RecordedBlock>, RecordedError>) -> (usize, String, String) {
    match result {
        Err(RecordedError::Syntax {
            line,
            text,
            expected,
            ..
        }) => (line, text, expected),
        other => panic!("expected a syntax error, got {other:?}"),
    }
}

/// A negative measurement is a broken file, in either format (issue 17: it was accepted).
#[test]
fn negative_measurements_are_refused_with_their_line() {
    let first_ttft = RUN_000.lines().position(|l| l.starts_with("Mean TTFT (ms):")).unwrap();
    let text: String = RUN_000
        .lines()
        .enumerate()
        .map(|(i, l)| if i == first_ttft { "Mean TTFT (ms):                          -12.50\n".to_string() } else { format!("{l}\n") })
        .collect();
    let (line, _, expected) = syntax(parse_text(&text, Path::new("test.txt")));
    assert_eq!((line, expected.as_str()), (first_ttft + 1, "a measurement that is not negative"));
    let json = r#"{"completed": 10, "mean_ttft_ms": -3.0}"#;
    let (_, text, _) = syntax(parse_json(json, Path::new("r.json")));
    assert!(text.contains("mean_ttft_ms"), "{text}");
}

#[test]
fn every_recorded_file_parses_with_its_block_count() {
    assert_eq!(parse(RUN_000).len(), 2);
    assert_eq!(parse(RUN_001).len(), 1);
    // 80-token series (1..2048: 12), 10k-token series (1..64: 7), single long prompts (4).
    assert_eq!(parse(RUN_002).len(), 23);
    assert_eq!(parse(RUN_003).len(), 13);
    for blocks in [RUN_000, RUN_001, RUN_002, RUN_003].map(parse) {
        for (i, block) in blocks.iter().enumerate() {
            assert_eq!(block.index, i + 1);
        }
    }
}

/// The recorded totals are consistent with each other, which they are only if every label
/// went to the right key (e.g. input and output tokens not swapped).
#[test]
fn recorded_throughputs_match_their_totals() {
    for blocks in [RUN_000, RUN_001, RUN_002, RUN_003].map(parse) {
        for b in &blocks {
            let get = |key: &str| {
                b.get(key)
                    .unwrap_or_else(|| panic!("{key} in block {}", b.index))
            };
            let duration = get("duration");
            let close = |rate: f64, amount: f64| {
                // Printed with two decimals, duration included: 1% plus the last digit.
                (amount / duration - rate).abs() <= rate * 0.01 + 0.01
            };
            let (input, output) = (get("total_input_tokens"), get("total_output_tokens"));
            assert!(
                close(get("request_throughput"), get("completed")),
                "block {}",
                b.index
            );
            assert!(close(get("output_throughput"), output), "block {}", b.index);
            assert!(
                close(get("total_token_throughput"), input + output),
                "block {}",
                b.index
            );
        }
    }
}

#[test]
fn run_000_newer_client_lines_and_labels() {
    let blocks = parse(RUN_000);
    let (prefill, decode) = (&blocks[0], &blocks[1]);
    assert_eq!(prefill.labels, ["# Prefill"]);
    assert_eq!(prefill.line, 3);
    assert_eq!(prefill.get("total_input_tokens"), Some(4_193_792.0));
    assert_eq!(prefill.get("total_token_throughput"), Some(82451.94));
    assert_eq!(decode.labels, ["# Decode"]);
    assert_eq!(decode.line, 31);
    assert!(decode.context.is_empty());
    assert_eq!(decode.get("failed"), Some(0.0));
    assert_eq!(decode.get("max_concurrent_requests"), Some(512.0));
    assert_eq!(decode.get("max_output_tokens_per_s"), Some(2224.0));
    assert_eq!(decode.get("mean_tpot_ms"), Some(7.28));
    assert_eq!(decode.get("p99_itl_ms"), Some(9.85));
    // 10 totals + 3 sections × (mean, median, P99).
    assert_eq!(decode.values.len(), 19);
}

#[test]
fn run_001_five_percentiles_and_e2el() {
    let block = &parse(RUN_001)[0];
    assert!(block.labels.is_empty() && block.context.is_empty());
    assert_eq!(block.line, 1);
    assert_eq!(block.get("completed"), Some(3000.0));
    assert_eq!(block.get("failed"), None);
    assert_eq!(block.get("total_token_throughput"), Some(2560.58));
    assert_eq!(block.get("p50_ttft_ms"), Some(124.74));
    assert_eq!(block.get("p95_itl_ms"), Some(164.84));
    assert_eq!(block.get("mean_e2el_ms"), Some(44313.70));
    assert_eq!(block.get("p75_e2el_ms"), Some(68664.12));
    // 7 totals + 4 sections × (mean, median, P50, P75, P90, P95, P99).
    assert_eq!(block.values.len(), 35);
}

#[test]
fn run_002_context_labels_and_values() {
    let blocks = parse(RUN_002);
    let first = &blocks[0];
    assert_eq!(first.line, 5);
    assert_eq!(first.labels, ["vllm"]);
    assert_eq!(
        first.context,
        pairs(&[
            (
                "num_prompts",
                "1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048"
            ),
            ("seq_length", "80"),
        ])
    );
    assert_eq!(first.context_value("seq_length"), Some("80"));
    assert_eq!(first.get("mean_ttft_ms"), Some(314.58));
    assert_eq!(first.get("completed"), Some(1.0));
    assert_eq!(first.get("total_output_tokens"), Some(85.0));
    // Legacy client: no failed or peak lines; 7 totals + 3 sections × 3.
    assert_eq!(first.values.len(), 16);

    // Context belongs to the block right after it only.
    assert!(blocks[1].context.is_empty() && blocks[1].labels.is_empty());
    assert_eq!(blocks[11].get("completed"), Some(2048.0));
    assert_eq!(blocks[11].get("total_output_tokens"), Some(119_667.0));

    let ten_k = &blocks[12];
    assert_eq!(
        ten_k.context,
        pairs(&[
            ("num_prompts", "1, 2, 4, 8, 16, 32, 64"),
            ("seq_length", "10000")
        ])
    );
    assert_eq!(ten_k.get("total_input_tokens"), Some(10000.0));

    // `num_prompt:1` has no space after the colon; the next block follows the closing line
    // with no blank line between.
    let long = &blocks[19];
    assert_eq!(long.context, pairs(&[("num_prompt", "1")]));
    assert_eq!(long.get("total_input_tokens"), Some(128_000.0));
    assert_eq!(long.get("mean_ttft_ms"), Some(734_188.96));
    assert_eq!(blocks[20].get("total_input_tokens"), Some(64_000.0));
    assert_eq!((long.line, blocks[20].line), (426, 447));
    assert_eq!(blocks[22].get("total_input_tokens"), Some(16_000.0));
}

#[test]
fn run_003_command_line_is_a_label() {
    let blocks = parse(RUN_003);
    assert_eq!(blocks[0].labels.len(), 1);
    assert!(blocks[0].labels[0].starts_with("python benchmark_serving.py --backend tgi"));
    assert!(blocks[0].context.is_empty());
    let last = &blocks[12];
    assert_eq!(last.get("completed"), Some(2537.0));
    assert_eq!(last.get("p99_ttft_ms"), Some(145_803.99));
}

/// A summary whose values carry more than two decimals, so rounding is exercised.
fn sample_summary() -> Summary {
    let stat = |base: f64| Stat {
        mean_ms: base + 0.123_456,
        median_ms: base * 0.9 + 0.004_999,
        std_ms: 3.21,
        percentiles_ms: vec![
            (50.0, base * 0.9),
            (90.0, base * 1.5 + 0.0051),
            (99.0, base * 2.0 + 0.333_333),
            (99.9, base * 2.5 + 0.987_65),
        ],
    };
    let duration_s = 172.471_234;
    Summary {
        completed: 2537,
        failed: 3,
        duration_s,
        total_input_tokens: 207_011,
        total_output_tokens: 146_417,
        request_throughput: 2537.0 / duration_s,
        output_throughput: 146_417.0 / duration_s,
        total_token_throughput: (207_011.0 + 146_417.0) / duration_s,
        max_output_tokens_per_s: 1234.0,
        max_concurrent_requests: 2537,
        ttft: stat(72_272.745_1),
        tpot: stat(786.321_9),
        itl: stat(771.494_4),
        e2el: stat(90_000.05),
    }
}

/// Printing a summary in either layout and parsing it back gives to_json's values rounded
/// as printed, under to_json's keys: only `std_*` (never printed) and, in the legacy layout,
/// the lines that layout lacks are missing; the current layout adds the configured load.
#[test]
fn printed_report_parses_back_to_json_values() {
    let summary = sample_summary();
    let all = LatencyMetric::ALL.to_vec();
    let cases = [
        ReportOptions {
            layout: ReportLayout::Legacy,
            percentile_metrics: all.clone(),
            ..ReportOptions::default()
        },
        ReportOptions {
            layout: ReportLayout::Current,
            percentile_metrics: all,
            max_concurrency: Some(64),
            request_rate: 12.5,
            ..ReportOptions::default()
        },
        ReportOptions::default(),
    ];
    for opts in cases {
        let mut text = String::from("# point\nnum_prompts: 2537\n");
        write_report(&mut text, &summary, &opts).unwrap();
        let blocks = parse(&text);
        assert_eq!(blocks.len(), 1);
        let block = &blocks[0];
        assert_eq!(
            (block.line, block.labels.as_slice()),
            (3, ["# point".to_string()].as_slice())
        );
        assert_eq!(block.context, pairs(&[("num_prompts", "2537")]));

        let json = to_json(&summary, &opts);
        let mut expected: BTreeMap<String, f64> = json
            .as_object()
            .unwrap()
            .iter()
            .filter(|(key, _)| !key.starts_with("std_"))
            .map(|(key, value)| {
                let printed = py_fixed2(value.as_f64().unwrap()).parse::<f64>().unwrap();
                (key.clone(), printed)
            })
            .collect();
        match opts.layout {
            ReportLayout::Legacy => {
                for key in [
                    "failed",
                    "max_output_tokens_per_s",
                    "max_concurrent_requests",
                ] {
                    assert!(expected.remove(key).is_some());
                }
            }
            ReportLayout::Current => {
                if let Some(limit) = opts.max_concurrency {
                    expected.insert("max_concurrency".into(), f64::from(limit));
                }
                if opts.request_rate.is_finite() {
                    expected.insert("request_rate".into(), opts.request_rate);
                }
            }
        }
        assert_eq!(block.values, expected, "layout {}", opts.layout);
    }
}

#[test]
fn percentile_labels_map_to_vllm_keys() {
    assert_eq!(
        metric_key("P99.9 E2EL (ms)").as_deref(),
        Some("p99.9_e2el_ms")
    );
    assert_eq!(metric_key("P99 ITL (ms)").as_deref(), Some("p99_itl_ms"));
    assert_eq!(
        metric_key("P1e-05 TTFT (ms)").as_deref(),
        Some("p1e-05_ttft_ms")
    );
    assert_eq!(
        metric_key("Median TPOT (ms)").as_deref(),
        Some("median_tpot_ms")
    );
    assert_eq!(
        metric_key("Request goodput (req/s)").as_deref(),
        Some("request_goodput")
    );
    for unknown in [
        "P101 TTFT (ms)",
        "Pnan TTFT (ms)",
        "Mean XYZ (ms)",
        "Mean TTFT (s)",
        "Std TTFT (ms)",
    ] {
        assert_eq!(metric_key(unknown), None, "{unknown}");
    }
}

#[test]
fn json_of_to_json_parses_to_the_same_values() {
    let opts = ReportOptions {
        percentile_metrics: LatencyMetric::ALL.to_vec(),
        ..ReportOptions::default()
    };
    let json = to_json(&sample_summary(), &opts);
    let text = serde_json::to_string_pretty(&json).unwrap();
    let blocks = parse_json(&text, Path::new("result.json")).unwrap();
    assert_eq!(blocks.len(), 1);
    let expected: BTreeMap<String, f64> = json
        .as_object()
        .unwrap()
        .iter()
        .map(|(key, value)| (key.clone(), value.as_f64().unwrap()))
        .collect();
    // Same keys; values equal up to serde_json's default float parser, which may be one
    // ULP off (exact reading needs its `float_roundtrip` feature).
    let values = &blocks[0].values;
    assert!(values.keys().eq(expected.keys()));
    for (key, &want) in &expected {
        let got = values[key];
        assert!(
            (got - want).abs() <= want.abs() * 1e-15,
            "{key}: {got} vs {want}"
        );
    }
    assert_eq!((blocks[0].line, blocks[0].index), (1, 1));
}

/// Shaped like vLLM's `--save-result` output: one line, per-request arrays, strings, a null
/// `max_concurrency`, and a `NaN` as Python's `json.dump` writes it.
const VLLM_SAVE_RESULT: &str = r#"{"date": "20241010-120000", "backend": "vllm", "model_id": "meta-llama/Llama-3.1-405B-Instruct", "tokenizer_id": "meta-llama/Llama-3.1-405B-Instruct", "best_of": 1, "num_prompts": 2, "request_rate": "inf", "burstiness": 1.0, "max_concurrency": null, "duration": 4.6612, "completed": 2, "total_input_tokens": 160, "total_output_tokens": 127, "request_throughput": 0.429, "output_throughput": 27.2462, "total_token_throughput": 61.5722, "mean_ttft_ms": 372.8012, "median_ttft_ms": 372.8012, "std_ttft_ms": NaN, "p99_ttft_ms": 373.27, "mean_tpot_ms": 51.59, "p99.9_itl_ms": 95.48, "input_lens": [80, 80], "output_lens": [64, 63], "ttfts": [0.372, 0.373], "itls": [[0.05, 0.049], [0.05]], "generated_texts": ["Shall I", "NaN: \"Infinity\""], "errors": ["", ""], "tags": {"a": 1}, "ignore_eos": false}"#;

#[test]
fn vllm_save_result_object_parses() {
    let blocks = parse_json(VLLM_SAVE_RESULT, Path::new("vllm.json")).unwrap();
    assert_eq!(blocks.len(), 1);
    let block = &blocks[0];
    assert_eq!(block.get("completed"), Some(2.0));
    assert_eq!(block.get("mean_ttft_ms"), Some(372.8012));
    assert_eq!(block.get("p99.9_itl_ms"), Some(95.48));
    assert_eq!(block.get("num_prompts"), Some(2.0));
    // Nulls, NaN, arrays and nested objects are not values.
    for skipped in [
        "max_concurrency",
        "std_ttft_ms",
        "ttfts",
        "itls",
        "input_lens",
        "tags",
    ] {
        assert_eq!(block.get(skipped), None, "{skipped}");
    }
    assert_eq!(block.context_value("backend"), Some("vllm"));
    assert_eq!(block.context_value("request_rate"), Some("inf"));
    assert_eq!(block.context_value("ignore_eos"), Some("false"));
    assert_eq!(block.values.len(), 15);
}

#[test]
fn python_literals_become_json_outside_strings_only() {
    assert_eq!(
        python_literals_to_json(r#"[NaN, -Infinity, Infinity, "NaN \"Infinity\"", 1]"#),
        r#"[null, "-inf", "inf", "NaN \"Infinity\"", 1]"#
    );
    assert!(matches!(
        python_literals_to_json("[1, 2]"),
        Cow::Borrowed(_)
    ));
}

#[test]
fn servesim_summary_and_json_arrays_parse_with_lines() {
    let point = |n: u64| {
        let mut v = to_json(&sample_summary(), &ReportOptions::default());
        let obj = v.as_object_mut().unwrap();
        obj.insert("backend".into(), json!("vllm-v0"));
        obj.insert("num_prompts".into(), json!(n));
        obj.insert("request_rate".into(), json!("inf"));
        obj.insert("max_concurrency".into(), Value::Null);
        obj.insert("input_lens".into(), json!([80, 80]));
        obj.insert("ttfts".into(), json!([0.1, null]));
        v
    };
    let summary = json!({
        "servesim": {"version": "0.1.0", "scenario": "x", "seed": 7, "results": [1]},
        "results": [point(1), point(2)],
    });
    let text = serde_json::to_string_pretty(&summary).unwrap();
    let blocks = parse_json(&text, Path::new("summary.json")).unwrap();
    assert_eq!(blocks.len(), 2);
    for (i, block) in blocks.iter().enumerate() {
        assert_eq!(block.index, i + 1);
        assert_eq!(block.get("num_prompts"), Some(i as f64 + 1.0));
        assert_eq!(block.get("completed"), Some(2537.0));
        assert_eq!(block.get("ttfts"), None);
        assert_eq!(block.context_value("backend"), Some("vllm-v0"));
        // The object's `{` is on the reported line.
        let line = text.lines().nth(block.line - 1).unwrap();
        assert_eq!(line.trim(), "{", "block {}", block.index);
    }
    assert!(blocks[1].line > blocks[0].line);

    let array = format!("[\n{},\n  {}\n]", point(1), point(2));
    let blocks = parse_json(&array, Path::new("a.json")).unwrap();
    assert_eq!(blocks.iter().map(|b| b.line).collect::<Vec<_>>(), [2, 3]);
}

#[test]
fn malformed_json_names_the_line() {
    let file = Path::new("bad.json");
    let (line, text, expected) = syntax(parse_json(
        "{\n  \"completed\": 1,\n  \"duration\": 4.5.3\n}",
        file,
    ));
    assert_eq!(line, 3);
    assert_eq!(text, "  \"duration\": 4.5.3");
    assert!(expected.starts_with("valid JSON ("), "{expected}");

    let (line, text, expected) = syntax(parse_json("[\n  {\"completed\": 1},\n  42\n]", file));
    assert_eq!((line, text.as_str()), (3, "42"));
    assert!(expected.contains("object"), "{expected}");

    let (line, _, _) = syntax(parse_json("\n\"just a string\"", file));
    assert_eq!(line, 2);

    assert!(matches!(
        parse_json("[]", file),
        Err(RecordedError::NoBlocks { .. })
    ));
    assert!(matches!(
        parse_json(r#"{"results": []}"#, file),
        Err(RecordedError::NoBlocks { .. })
    ));

    // A long single-line file is shown as an excerpt around the error.
    let long = format!("{{\"a\": [{}], \"b\": tru}}", "1, ".repeat(200) + "1");
    let (line, text, _) = syntax(parse_json(&long, file));
    assert_eq!(line, 1);
    assert!(text.contains("tru") && text.starts_with('…'), "{text}");
    assert!(text.chars().count() <= EXCERPT_CHARS_MAX + 2);
}

const SMALL_BLOCK: &str = "\
note
============ Serving Benchmark Result ============
Successful requests:                     1         
Benchmark duration (s):                  4.53      
---------------Time to First Token----------------
Mean TTFT (ms):                          314.58    
==================================================
";

/// SMALL_BLOCK with its 1-based line `line` replaced by `text`.
fn with_line(line: usize, text: &str) -> String {
    SMALL_BLOCK
        .lines()
        .enumerate()
        .map(|(i, l)| if i + 1 == line { text } else { l })
        .map(|l| format!("{l}\n"))
        .collect()
}

#[test]
fn malformed_blocks_name_the_line() {
    assert_eq!(parse(SMALL_BLOCK)[0].get("mean_ttft_ms"), Some(314.58));

    let (line, text, expected) = syntax(parse_text(
        &with_line(4, "Benchmark length (s):                  4.53"),
        Path::new("t.txt"),
    ));
    assert_eq!(
        (line, text.as_str()),
        (4, "Benchmark length (s):                  4.53")
    );
    assert!(
        expected.contains("`Benchmark length (s)` is not a label vLLM or SGLang prints"),
        "{expected}"
    );
    assert!(expected.contains("opened on line 2"), "{expected}");

    let (line, text, expected) = syntax(parse_text(
        &with_line(6, "Mean TTFT (ms):                          31x.58    "),
        Path::new("t.txt"),
    ));
    assert_eq!(
        (line, text.as_str()),
        (6, "Mean TTFT (ms):                          31x.58")
    );
    assert!(
        expected.starts_with("a number after `Mean TTFT (ms):`, not `31x.58`"),
        "{expected}"
    );

    // Never closed: the error points at the header.
    let unclosed: String = SMALL_BLOCK
        .lines()
        .take(6)
        .map(|l| format!("{l}\n"))
        .collect();
    let (line, text, expected) = syntax(parse_text(&unclosed, Path::new("t.txt")));
    assert_eq!(
        (line, text.as_str()),
        (2, "============ Serving Benchmark Result ============")
    );
    assert!(expected.contains("closing"), "{expected}");

    // Not closed before the next block starts.
    let (line, _, expected) = syntax(parse_text(
        &with_line(7, "============ Serving Benchmark Result ============"),
        Path::new("t.txt"),
    ));
    assert_eq!(line, 7);
    assert!(expected.contains("block opened on line 2"), "{expected}");

    for (bad, what) in [
        ("", "blank"),
        ("Mean TTFT (ms) 314.58", "no colon"),
        ("Benchmark duration (s): 1", "duplicate"),
    ] {
        let (line, _, _) = syntax(parse_text(&with_line(5, bad), Path::new("t.txt")));
        assert_eq!(line, 5, "{what}");
    }
}

#[test]
fn empty_or_blockless_text_is_an_error() {
    for text in [
        "",
        "\n\n",
        "num_prompts: 1\njust notes\n",
        "==================================================\n",
    ] {
        assert!(
            matches!(
                parse_text(text, Path::new("t.txt")),
                Err(RecordedError::NoBlocks { .. })
            ),
            "{text:?}"
        );
    }
    let message = parse_text("a\nb\n", Path::new("t.txt"))
        .unwrap_err()
        .to_string();
    assert_eq!(
        message,
        "t.txt: no `Serving Benchmark Result` block (or JSON result object) in 2 lines: \
         expected at least one"
    );
}

#[test]
fn errors_display_file_and_line() {
    let error = parse_text(&with_line(4, "bogus: 1"), Path::new("runs/x.txt")).unwrap_err();
    assert_eq!(error.line(), Some(4));
    let message = error.to_string();
    assert!(message.starts_with("runs/x.txt:4: expected "), "{message}");
    assert!(message.ends_with("found \"bogus: 1\""), "{message}");
}

#[test]
fn crlf_bom_and_context_detection() {
    let text = format!(
        "\u{feff}# Run A: first\r\nhttp://host:8000\r\nseq_length: 80\r\n{}",
        SMALL_BLOCK.replace('\n', "\r\n")
    );
    let block = &parse(&text)[0];
    assert_eq!(block.labels, ["# Run A: first", "http://host:8000", "note"]);
    assert_eq!(block.context, pairs(&[("seq_length", "80")]));
    assert_eq!(block.line, 5);
}

#[test]
fn parse_file_picks_the_format_by_extension() {
    let dir = tempfile::tempdir().unwrap();
    let txt = dir.path().join("run.txt");
    std::fs::write(&txt, RUN_001).unwrap();
    assert_eq!(parse_file(&txt).unwrap().len(), 1);
    let json = dir.path().join("run.JSON");
    std::fs::write(&json, VLLM_SAVE_RESULT).unwrap();
    assert_eq!(parse_file(&json).unwrap()[0].get("completed"), Some(2.0));
    let missing = dir.path().join("missing.txt");
    let error = parse_file(&missing).unwrap_err();
    assert!(matches!(error, RecordedError::Read { .. }) && error.line().is_none());
}

/// servesim's own printed output (the golden report) reads back too.
#[test]
fn golden_report_parses() {
    let golden = include_str!("../../tests/data/golden.txt");
    assert!(!parse(golden).is_empty());
}
