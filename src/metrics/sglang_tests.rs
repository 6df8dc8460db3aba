use super::super::format::python_float_repr;
use super::*;

fn stat(mean_ms: f64, median_ms: f64, std_ms: f64, p95: f64, p99: f64, max: f64) -> Stat {
    Stat { mean_ms, median_ms, std_ms, percentiles_ms: vec![(95.0, p95), (99.0, p99), (100.0, max)] }
}

/// Four requests over 8 s: 512 tokens in, 256 out; E2E latencies averaging 2.5 s, so SGLang's
/// concurrency is 2.5 × 4 / 8 = 1.25.
pub(in crate::metrics) fn summary() -> Summary {
    Summary {
        completed: 4,
        failed: 0,
        duration_s: 8.0,
        total_input_tokens: 512,
        total_output_tokens: 256,
        request_throughput: 0.5,
        output_throughput: 32.0,
        total_token_throughput: 96.0,
        max_output_tokens_per_s: 40.0,
        max_concurrent_requests: 4,
        ttft: stat(120.125, 110.5, 10.0, 150.0, 158.456, 160.0),
        tpot: stat(30.0, 29.5, 1.5, 33.0, 33.8, 34.0),
        itl: stat(30.25, 29.75, 2.0, 35.5, 41.25, 48.0),
        e2el: stat(2500.0, 2400.0, 300.0, 2900.0, 2980.0, 3000.0),
    }
}

/// The block as SGLang 0.4.9's `benchmark()` prints it, each line made by Python's own
/// `"{:<40} {:<10}".format` (and `{:<10.2f}`) from these values: a burst (`inf`), no
/// concurrency limit, one token fewer retokenized, 120.125 rounded half to even.
const BLOCK: &str = "
============ Serving Benchmark Result ============
Backend:                                 sglang    
Traffic request rate:                    inf       
Max request concurrency:                 not set   
Successful requests:                     4         
Benchmark duration (s):                  8.00      
Total input tokens:                      512       
Total generated tokens:                  256       
Total generated tokens (retokenized):    255       
Request throughput (req/s):              0.50      
Input token throughput (tok/s):          64.00     
Output token throughput (tok/s):         32.00     
Total token throughput (tok/s):          96.00     
Concurrency:                             1.25      
----------------End-to-End Latency----------------
Mean E2E Latency (ms):                   2500.00   
Median E2E Latency (ms):                 2400.00   
---------------Time to First Token----------------
Mean TTFT (ms):                          120.12    
Median TTFT (ms):                        110.50    
P99 TTFT (ms):                           158.46    
---------------Inter-Token Latency----------------
Mean ITL (ms):                           30.25     
Median ITL (ms):                         29.75     
P95 ITL (ms):                            35.50     
P99 ITL (ms):                            41.25     
Max ITL (ms):                            48.00     
==================================================
";

#[test]
fn block_is_sglang_0_4_9s_byte_for_byte() {
    let report = SglangReport { output_tokens_retokenized: Some(255), ..SglangReport::default() };
    assert_eq!(render_block(&summary(), &report), BLOCK);
}

#[test]
fn block_prints_a_rate_a_limit_and_an_accept_length() {
    let report = SglangReport { request_rate: 4.0, max_concurrency: Some(16), accept_length: Some(2.345), ..SglangReport::default() };
    let text = render_block(&summary(), &report);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[3], "Traffic request rate:                    4.0       ");
    assert_eq!(lines[4], "Max request concurrency:                 16        ");
    assert_eq!(lines[15], "Accept length:                           2.35      ");
    assert_eq!(lines[16], "----------------End-to-End Latency----------------");
    // An accept length of 0 is not printed (Python's `if accept_length:`).
    let zero = SglangReport { accept_length: Some(0.0), ..SglangReport::default() };
    assert!(!render_block(&summary(), &zero).contains("Accept length"));
}

/// The record as `json.dumps` writes it, each value typed as SGLang's `benchmark()` has it
/// (arguments from argparse, counts as ints, numpy floats as floats), checked against Python.
const RECORD: &str = r#"{"backend": "sglang", "dataset_name": "random", "request_rate": 4.0, "max_concurrency": 16, "sharegpt_output_len": null, "random_input_len": 128, "random_output_len": 64, "random_range_ratio": 1.0, "duration": 8.0, "completed": 4, "total_input_tokens": 512, "total_output_tokens": 256, "total_output_tokens_retokenized": 256, "request_throughput": 0.5, "input_throughput": 64.0, "output_throughput": 32.0, "mean_e2e_latency_ms": 2500.0, "median_e2e_latency_ms": 2400.0, "std_e2e_latency_ms": 300.0, "p99_e2e_latency_ms": 2980.0, "mean_ttft_ms": 120.125, "median_ttft_ms": 110.5, "std_ttft_ms": 10.0, "p99_ttft_ms": 158.456, "mean_tpot_ms": 30.0, "median_tpot_ms": 29.5, "std_tpot_ms": 1.5, "p99_tpot_ms": 33.8, "mean_itl_ms": 30.25, "median_itl_ms": 29.75, "std_itl_ms": 2.0, "p95_itl_ms": 35.5, "p99_itl_ms": 41.25, "concurrency": 1.25, "accept_length": null}"#;

pub(in crate::metrics) fn random_report() -> SglangReport {
    SglangReport {
        dataset_name: "random".into(),
        request_rate: 4.0,
        max_concurrency: Some(16),
        random_input_len: 128,
        random_output_len: 64,
        random_range_ratio: 1.0,
        ..SglangReport::default()
    }
}

#[test]
fn record_is_json_dumps_byte_for_byte() {
    assert_eq!(record(&summary(), &random_report()), RECORD);
}

#[test]
fn python_values_are_spelled_as_python_spells_them() {
    // json.dumps({"a": inf, "s": "é😀\x7f\t\"", "b": 1e16, "c": 1e-5, "d": 1e15, "e": -0.0, "f": 0.1, "g": [[0.5, 0.25], []]})
    let fields = [
        ("a", PyJson::Float(f64::INFINITY)),
        ("s", PyJson::Str("é😀\u{7f}\t\"".into())),
        ("b", PyJson::Float(1e16)),
        ("c", PyJson::Float(1e-5)),
        ("d", PyJson::Float(1e15)),
        ("e", PyJson::Float(-0.0)),
        ("f", PyJson::Float(0.1)),
        ("g", PyJson::List(vec![PyJson::List(vec![PyJson::Float(0.5), PyJson::Float(0.25)]), PyJson::List(vec![])])),
    ];
    assert_eq!(
        dumps(&fields),
        r#"{"a": Infinity, "s": "\u00e9\ud83d\ude00\u007f\t\"", "b": 1e+16, "c": 1e-05, "d": 1000000000000000.0, "e": -0.0, "f": 0.1, "g": [[0.5, 0.25], []]}"#
    );
    assert_eq!(json_float(f64::NAN), "NaN");
    assert_eq!(json_float(f64::NEG_INFINITY), "-Infinity");
    for (x, repr) in [(4.0, "4.0"), (f64::INFINITY, "inf"), (123.456, "123.456"), (1.5e-7, "1.5e-07"), (2e20, "2e+20"), (0.0001, "0.0001")] {
        assert_eq!(python_float_repr(x), repr, "{x}");
    }
}

#[test]
fn concurrency_is_the_sum_of_e2e_latencies_over_the_duration() {
    assert_eq!(concurrency(&summary()), 1.25);
    assert_eq!(input_throughput(&summary()), 64.0);
    assert_eq!(concurrency(&Summary::default()), 0.0);
    assert_eq!(extra_metric(&summary(), "total_output_tokens_retokenized"), Some(256.0));
    assert_eq!(extra_metric(&summary(), "mean_ttft_ms"), None);
}
