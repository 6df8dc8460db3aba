//! SGLang `bench_serving`'s results through the real binary and the library: `simulate
//! --report-format sglang` writes its block and record; `validate` and `fit --results` read
//! them (the hand-written fixtures in tests/data/sglang/, in SGLang 0.4.9's layout); `bench
//! --backend sglang` measures a real `serve` as SGLang's client does.

mod common;
use common::*;

use std::path::{Path, PathBuf};

use servesim::fit::results::{Defaults, read_series};
use servesim::metrics::recorded::{parse_file, parse_jsonl, parse_text};

fn fixture(name: &str) -> PathBuf {
    repo().join("tests/data/sglang").join(name)
}

fn golden() -> PathBuf {
    repo().join("tests/data/golden.toml")
}

/// The block on stdout and the record in `sglang.jsonl` carry the same numbers as
/// `summary.json`, in SGLang's names, and the run is byte-identical when repeated.
#[test]
fn simulate_writes_sglangs_block_and_record() {
    let dir = tempfile::tempdir().unwrap();
    let run = |out: &Path| servesim(&["simulate", golden().to_str().unwrap(), "--report-format", "sglang", "--out", out.to_str().unwrap()]);
    let out = run(dir.path());
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("\n============ Serving Benchmark Result ============\nBackend:                                 sglang    \n"), "{text}");
    assert!(text.contains("Traffic request rate:                    inf       \n"), "{text}");
    assert!(!text.contains("Failed requests"), "{text}");

    let summary: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(dir.path().join("summary.json")).unwrap()).unwrap();
    let jsonl = std::fs::read_to_string(dir.path().join("sglang.jsonl")).unwrap();
    assert!(jsonl.starts_with(r#"{"backend": "sglang", "dataset_name": "vllm-random", "request_rate": Infinity, "max_concurrency": null, "#), "{jsonl}");
    let records = parse_jsonl(&jsonl, Path::new("sglang.jsonl")).unwrap();
    let blocks = parse_text(&text, Path::new("stdout")).unwrap();
    assert_eq!((records.len(), blocks.len()), (2, 2));
    for (i, (record, block)) in records.iter().zip(&blocks).enumerate() {
        let simulated = &summary["results"][i];
        for key in ["completed", "total_input_tokens", "total_output_tokens", "mean_ttft_ms", "p99_ttft_ms", "mean_tpot_ms", "p99_itl_ms", "mean_e2el_ms", "p99_e2el_ms"] {
            assert_eq!(record.get(key), simulated[key].as_f64(), "point {i}: {key}");
        }
        // The block prints two decimals of the same numbers.
        for key in ["mean_ttft_ms", "p99_ttft_ms", "mean_itl_ms", "mean_e2el_ms", "output_throughput"] {
            let printed = block.get(key).unwrap();
            assert!((printed - simulated[key].as_f64().unwrap()).abs() <= 0.005 + 1e-9, "point {i}: {key}");
        }
        // SGLang's own: concurrency is the E2E latencies' sum over the duration; the maximum
        // ITL is the 100th percentile.
        let concurrency = simulated["mean_e2el_ms"].as_f64().unwrap() / 1e3 * simulated["completed"].as_f64().unwrap() / simulated["duration"].as_f64().unwrap();
        assert!((record.get("concurrency").unwrap() - concurrency).abs() < 1e-9 * concurrency.max(1.0), "point {i}");
        assert!(block.get("p100_itl_ms").is_some(), "point {i}");
        assert_eq!(record.get("total_output_tokens_retokenized"), record.get("total_output_tokens"));
    }
    let again = tempfile::tempdir().unwrap();
    assert!(run(again.path()).status.success());
    assert_eq!(std::fs::read(again.path().join("sglang.jsonl")).unwrap(), jsonl.as_bytes());
}

#[test]
fn a_bad_report_format_names_the_flag() {
    let out = servesim(&["simulate", golden().to_str().unwrap(), "--report-format", "trt"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("--report-format") && stderr(&out).contains("trt"), "{}", stderr(&out));
}

/// The text fixture prints no TPOT (SGLang 0.4.9 does not): validate compares the rest and says
/// so; the JSONL fixture has TPOT, and is compared in full.
#[test]
fn validate_reads_sglangs_block_and_record() {
    let out = servesim(&["validate", golden().to_str().unwrap(), "--recorded", fixture("bench_serving-0.4.9.txt").to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stderr(&out).contains("has no mean_tpot_ms, median_tpot_ms: not compared"), "{}", stderr(&out));
    // Block 1's recorded output throughput and mean TTFT.
    assert!(stdout(&out).contains("396.02") && stdout(&out).contains("9803.5"), "{}", stdout(&out));
    let out = servesim(&["validate", golden().to_str().unwrap(), "--recorded", fixture("bench_serving-0.4.9.jsonl").to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("mean_tpot_ms") && stdout(&out).contains("40.43"), "{}", stdout(&out));
    assert!(!stderr(&out).contains("not compared"), "{}", stderr(&out));
}

/// Every recorded number of the fixtures lands on vLLM's key, and the totals agree with the
/// throughputs (so no label went to the wrong key).
#[test]
fn the_fixtures_read_under_vllms_keys() {
    let text = parse_file(&fixture("bench_serving-0.4.9.txt")).unwrap();
    let jsonl = parse_file(&fixture("bench_serving-0.4.9.jsonl")).unwrap();
    assert_eq!((text.len(), jsonl.len()), (2, 3));
    for (t, j) in text.iter().zip(&jsonl) {
        for key in ["completed", "duration", "total_input_tokens", "total_output_tokens", "total_output_tokens_retokenized", "mean_ttft_ms", "p99_ttft_ms", "mean_e2el_ms", "median_e2el_ms", "p95_itl_ms", "concurrency"] {
            let (printed, saved) = (t.get(key).unwrap(), j.get(key).unwrap());
            assert!((printed - saved).abs() <= 0.005 + 1e-9 * saved, "{key}: {printed} against {saved}");
        }
        let d = j.get("duration").unwrap();
        assert!((j.get("output_throughput").unwrap() - j.get("total_output_tokens").unwrap() / d).abs() < 1e-9);
        assert!((t.get("total_token_throughput").unwrap() - (j.get("total_input_tokens").unwrap() + j.get("total_output_tokens").unwrap()) / d).abs() < 0.01);
        assert_eq!(t.context_value("backend"), Some("sglang"));
    }
    assert_eq!(text[0].get("p100_itl_ms"), Some(112.84));
    assert_eq!(text[1].get("max_concurrency"), Some(32.0));
    assert_eq!(text[0].context_value("max_concurrency"), Some("not set"));
}

/// `fit --results` takes SGLang's JSONL, a point a line: a burst's `Infinity` is a burst; the
/// request count comes from `--output-details`' lists where there are some, else from the
/// completed requests, with a note.
#[test]
fn fit_reads_an_sglang_output_file_as_a_series() {
    let series = read_series(&[fixture("bench_serving-0.4.9.jsonl")], Defaults { request_rate: None }).unwrap();
    let loads: Vec<(u32, f64, Option<u32>)> = series.points.iter().map(|p| (p.num_prompts, p.request_rate, p.max_concurrency)).collect();
    assert_eq!(loads, vec![(64, f64::INFINITY, None), (64, 8.0, Some(32)), (4, 16.0, None)]);
    assert_eq!(series.points[0].metrics.get("mean_e2el_ms"), Some(&20118.4));
    assert_eq!((series.points[0].input_tokens_total, series.points[0].output_tokens_total), (Some(65536), Some(16384)));
    // Three completed of four: the totals do not describe the load.
    assert_eq!((series.points[2].input_tokens_total, series.points[2].metrics.get("failed")), (None, Some(&1.0)));
    for key in ["random_input_len", "num_prompts", "request_rate", "input_lens"] {
        assert!(!series.points[0].metrics.contains_key(key), "{key}");
    }
    assert_eq!(series.notes.len(), 2, "{:?}", series.notes);
    assert!(series.notes[0].contains("no num_prompts; using completed + failed = 64"), "{:?}", series.notes);
}

#[test]
fn malformed_sglang_files_name_the_line_and_field() {
    let dir = tempfile::tempdir().unwrap();
    let file = write_file(dir.path(), "r.jsonl", "{\"completed\": 4, \"request_rate\": 2.0}\n{\"completed\": 4, \"request_rate\": \"trace\"}\n");
    let err = read_series(&[file], Defaults { request_rate: None }).unwrap_err().to_string();
    assert!(err.contains("r.jsonl line 2") && err.contains("request_rate") && err.contains("\"trace\""), "{err}");
    let file = write_file(dir.path(), "bad.jsonl", "{\"completed\": 4}\n{\"completed\": -1}\n");
    let err = read_series(&[file], Defaults { request_rate: None }).unwrap_err().to_string();
    assert!(err.contains("bad.jsonl:2") && err.contains("completed") && err.contains("not negative"), "{err}");
    let file = write_file(dir.path(), "r.txt", "x");
    let err = read_series(&[file], Defaults { request_rate: None }).unwrap_err().to_string();
    assert!(err.contains("SGLang bench_serving --output-file .jsonl"), "{err}");
}

/// `bench --backend sglang` against a real `serve`: SGLang's block, its record with the
/// per-request lists, every token counted as the server counted it (its warm-up included).
#[test]
fn bench_sglang_measures_serve_as_sglangs_client() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("out.jsonl");
    let (server, base) = spawn_serve(&["--random-weights", "tiny", "--threads", "1", "--max-num-seqs", "4"]);
    for backend in ["sglang", "sglang-oai"] {
        let out = servesim(&[
            "bench", "--backend", backend, "--base-url", &base, "--dataset-name", "fixed", "--random-input-len", "12",
            "--random-output-len", "5", "--num-prompts", "6", "--max-concurrency", "3", "--output-file", file.to_str().unwrap(),
            "--output-details",
        ]);
        assert!(out.status.success(), "{backend}: {}", stderr(&out));
        let text = stdout(&out);
        assert!(text.contains(&format!("Backend:                                 {backend:<10}\n")), "{text}");
        assert!(text.contains("Max request concurrency:                 3         \n"), "{text}");
        assert!(text.contains("Successful requests:                     6         \n"), "{text}");
        assert!(text.contains("Total generated tokens:                  30        \n"), "{text}");
        assert!(text.contains("Total input tokens:                      72        \n"), "{text}");
    }
    let metrics = http_get(&base, "/metrics");
    drop(server);
    // 2 × (6 requests + 1 warm-up) of 5 tokens, each of 12 prompt tokens.
    assert_eq!(metric(&metrics, "servesim_generation_tokens_total"), Some(70.0));
    assert_eq!(metric(&metrics, "servesim_prompt_tokens_total"), Some(168.0));
    let lines = std::fs::read_to_string(&file).unwrap();
    let records: Vec<serde_json::Value> = lines.lines().map(|l| serde_json::from_str(&l.replace("Infinity", "\"inf\"")).unwrap()).collect();
    assert_eq!(records.len(), 2);
    for r in &records {
        assert_eq!(r["completed"], 6);
        assert_eq!(r["output_lens"], serde_json::json!([5, 5, 5, 5, 5, 5]));
        assert_eq!(r["max_concurrency"], 3);
        // The native backend's ITL is per token; the OpenAI one's per chunk, a token each here.
        assert!(r["itls"].as_array().unwrap().iter().all(|l| l.as_array().unwrap().len() == 4), "{r}");
        assert_eq!(r["errors"], serde_json::json!(["", "", "", "", "", ""]));
    }
    assert_eq!(records[1]["backend"], "sglang-oai");
    // And read back as a series of two points.
    let series = read_series(&[file], Defaults { request_rate: None }).unwrap();
    assert_eq!(series.points.iter().map(|p| p.num_prompts).collect::<Vec<_>>(), [6, 6]);
}

#[test]
fn bench_refuses_sglang_flags_where_they_mean_nothing() {
    let out = servesim(&["bench", "--backend", "openai", "--disable-ignore-eos", "--num-prompts", "1"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("--disable-ignore-eos"), "{}", stderr(&out));
    let out = servesim(&["bench", "--backend", "openai", "--output-file", "x.jsonl", "--num-prompts", "1"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("--report-format sglang"), "{}", stderr(&out));
    let out = servesim(&["bench", "--backend", "trt", "--num-prompts", "1"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("sglang-oai"), "{}", stderr(&out));
}
