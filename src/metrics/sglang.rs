//! SGLang's benchmark client, `python -m sglang.bench_serving` as of SGLang 0.4.9: its printed
//! `Serving Benchmark Result` block and its `--output-file` JSONL record, written from a
//! [`Summary`]; and its metric names, read back into the vLLM keys the rest of servesim speaks.
//!
//! ```text
//!  Summary ─┬─► write_block ──► the block SGLang prints     ("Concurrency:", "Max ITL (ms):" …)
//!           └─► record      ──► one line of --output-file  (json.dumps: its key order, 4.0, Infinity)
//!  SGLang's names ──► text_line / normalize_record ──► vLLM's keys (mean_e2el_ms, p100_itl_ms …)
//! ```
//!
//! Where SGLang's client defines a metric differently from vLLM's, servesim computes it SGLang's
//! way when it mimics SGLang (docs/recorded-runs.md, "SGLang's bench_serving"):
//! - **Concurrency**, SGLang's alone: the sum of every successful request's E2E latency over the
//!   duration (the mean number of requests in flight). Here it is the mean E2E latency × the
//!   completed requests ÷ the duration: the same sum.
//! - **Max ITL** is numpy's `max`, which is its 100th percentile: key `p100_itl_ms`.
//! - **ITL** of the native backend is per token: a chunk of n new tokens adds n gaps of gap / n
//!   (the client's doing: `crate::bench`).
//! - **Retokenized output tokens**: the generated text encoded again by the client's tokenizer.
//!   A simulation has no text; its count is the tokens generated.
//! - No failed-request count. 0.4.9 reports P99 of each metric (and P95 and the maximum of ITL),
//!   and prints no TPOT section, though its record holds TPOT.

use std::fmt::{self, Write};

use serde_json::{Map, Value};

use super::format::{float_line, int_line, percentile_label, python_float_repr};
use super::summary::{Stat, Summary};

/// The SGLang release whose client this module follows.
pub const VERSION: &str = "0.4.9";

/// The percentiles SGLang 0.4.9's block and record need: P95 (ITL), P99 (every metric) and the
/// maximum (ITL). Summarise with these ([`Summary::from_records`]) before writing.
pub const PERCENTILES: [f64; 3] = [95.0, 99.0, 100.0];

/// What SGLang's block and record say beyond the summary: the client's arguments and what it
/// asked the server.
#[derive(Clone, Debug, PartialEq)]
pub struct SglangReport {
    /// `--backend`: `sglang` (native `/generate`), `sglang-oai` (OpenAI completions) …
    pub backend: String,
    /// `--dataset-name`.
    pub dataset_name: String,
    /// `--request-rate` in requests/s; infinite for a burst.
    pub request_rate: f64,
    /// `--max-concurrency`; `None` prints "not set".
    pub max_concurrency: Option<u32>,
    /// `--sharegpt-output-len`.
    pub sharegpt_output_len: Option<u32>,
    /// `--random-input-len`, `--random-output-len`, `--random-range-ratio` (SGLang's meaning:
    /// lengths uniform in `[len × ratio, len]`).
    pub random_input_len: u32,
    pub random_output_len: u32,
    pub random_range_ratio: f64,
    /// Accepted tokens per verifying step of speculative decoding, as the server reports it
    /// (`/get_server_info`); `None` without speculation.
    pub accept_length: Option<f64>,
    /// Output tokens counted by re-encoding the generated text; `None`: the summary's count.
    pub output_tokens_retokenized: Option<u64>,
}

impl Default for SglangReport {
    /// SGLang 0.4.9's argument defaults, for the native backend.
    fn default() -> Self {
        SglangReport {
            backend: "sglang".into(),
            dataset_name: "sharegpt".into(),
            request_rate: f64::INFINITY,
            max_concurrency: None,
            sharegpt_output_len: None,
            random_input_len: 1024,
            random_output_len: 1024,
            random_range_ratio: 0.0,
            accept_length: None,
            output_tokens_retokenized: None,
        }
    }
}

/// SGLang's concurrency: the sum of the successful requests' E2E latencies over the duration;
/// 0 for a zero duration.
pub fn concurrency(summary: &Summary) -> f64 {
    per_second(summary.e2el.mean_ms / 1e3 * summary.completed as f64, summary.duration_s)
}

/// Prompt tokens of successful requests per second of duration.
pub fn input_throughput(summary: &Summary) -> f64 {
    per_second(summary.total_input_tokens as f64, summary.duration_s)
}

fn per_second(amount: f64, duration_s: f64) -> f64 {
    if duration_s > 0.0 { amount / duration_s } else { 0.0 }
}

/// The metrics SGLang reports that vLLM's keys have no name for, from a simulated summary:
/// `concurrency`, `input_throughput` and `total_output_tokens_retokenized` (a simulation's text
/// is its tokens).
pub fn extra_metric(summary: &Summary, key: &str) -> Option<f64> {
    match key {
        "concurrency" => Some(concurrency(summary)),
        "input_throughput" => Some(input_throughput(summary)),
        "total_output_tokens_retokenized" => Some(summary.total_output_tokens as f64),
        _ => None,
    }
}

fn retokenized(summary: &Summary, report: &SglangReport) -> u64 {
    report.output_tokens_retokenized.unwrap_or(summary.total_output_tokens)
}

/// A percentile the summary holds; NaN (printed `nan`) where it was not asked for, which
/// [`PERCENTILES`] prevents.
fn pct(stat: &Stat, p: f64) -> f64 {
    stat.percentile_ms(p).unwrap_or(f64::NAN)
}

/// Writes SGLang 0.4.9's result block exactly as it prints it, the blank line before the header
/// included.
pub fn write_block(out: &mut impl Write, s: &Summary, r: &SglangReport) -> fmt::Result {
    writeln!(out)?;
    writeln!(out, "{:=^50}", " Serving Benchmark Result ")?;
    int_line(out, "Backend:", &r.backend)?;
    // `{:<10}` of a Python float is its repr: `inf`, `4.0`.
    int_line(out, "Traffic request rate:", python_float_repr(r.request_rate))?;
    match r.max_concurrency {
        Some(n) => int_line(out, "Max request concurrency:", n)?,
        None => int_line(out, "Max request concurrency:", "not set")?,
    }
    int_line(out, "Successful requests:", s.completed)?;
    float_line(out, "Benchmark duration (s):", s.duration_s)?;
    int_line(out, "Total input tokens:", s.total_input_tokens)?;
    int_line(out, "Total generated tokens:", s.total_output_tokens)?;
    int_line(out, "Total generated tokens (retokenized):", retokenized(s, r))?;
    float_line(out, "Request throughput (req/s):", s.request_throughput)?;
    float_line(out, "Input token throughput (tok/s):", input_throughput(s))?;
    float_line(out, "Output token throughput (tok/s):", s.output_throughput)?;
    float_line(out, "Total token throughput (tok/s):", s.total_token_throughput)?;
    float_line(out, "Concurrency:", concurrency(s))?;
    // Python's `if accept_length:` skips None and 0.
    if let Some(accept) = r.accept_length.filter(|&a| a != 0.0) {
        float_line(out, "Accept length:", accept)?;
    }
    writeln!(out, "{:-^50}", "End-to-End Latency")?;
    float_line(out, "Mean E2E Latency (ms):", s.e2el.mean_ms)?;
    float_line(out, "Median E2E Latency (ms):", s.e2el.median_ms)?;
    writeln!(out, "{:-^50}", "Time to First Token")?;
    float_line(out, "Mean TTFT (ms):", s.ttft.mean_ms)?;
    float_line(out, "Median TTFT (ms):", s.ttft.median_ms)?;
    float_line(out, "P99 TTFT (ms):", pct(&s.ttft, 99.0))?;
    writeln!(out, "{:-^50}", "Inter-Token Latency")?;
    float_line(out, "Mean ITL (ms):", s.itl.mean_ms)?;
    float_line(out, "Median ITL (ms):", s.itl.median_ms)?;
    float_line(out, "P95 ITL (ms):", pct(&s.itl, 95.0))?;
    float_line(out, "P99 ITL (ms):", pct(&s.itl, 99.0))?;
    float_line(out, "Max ITL (ms):", pct(&s.itl, 100.0))?;
    writeln!(out, "{}", "=".repeat(50))
}

/// [`write_block`] into a new `String`.
pub fn render_block(summary: &Summary, report: &SglangReport) -> String {
    let mut text = String::new();
    // Writing into a String cannot fail.
    let _ = write_block(&mut text, summary, report);
    text
}

/// A value as Python's `json.dumps` writes it.
#[derive(Clone, Debug, PartialEq)]
pub enum PyJson {
    Int(u64),
    Float(f64),
    Str(String),
    Null,
    List(Vec<PyJson>),
}

impl PyJson {
    fn write(&self, out: &mut String) {
        match self {
            PyJson::Int(n) => out.push_str(&n.to_string()),
            PyJson::Float(x) => out.push_str(&json_float(*x)),
            PyJson::Str(s) => json_string(s, out),
            PyJson::Null => out.push_str("null"),
            PyJson::List(items) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    item.write(out);
                }
                out.push(']');
            }
        }
    }
}

fn opt_int(n: Option<u32>) -> PyJson {
    n.map_or(PyJson::Null, |n| PyJson::Int(u64::from(n)))
}

/// A float as `json.dumps` writes it: its repr, or `NaN`, `Infinity`, `-Infinity` (Python's
/// default `allow_nan=True`, which is not JSON; servesim's reader takes them back).
pub fn json_float(x: f64) -> String {
    if x.is_nan() {
        "NaN".into()
    } else if x.is_infinite() {
        if x > 0.0 { "Infinity".into() } else { "-Infinity".into() }
    } else {
        python_float_repr(x)
    }
}

/// A string as `json.dumps` writes it (`ensure_ascii=True`): every character outside printable
/// ASCII (` ` to `~`) as a `\uXXXX` escape (two, a surrogate pair, past the basic plane).
fn json_string(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if !(' '..='~').contains(&c) => {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    // Writing into a String cannot fail.
                    let _ = write!(out, "\\u{unit:04x}");
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// `(key, value)` pairs as one `json.dumps` object, in their order, without a newline.
pub fn dumps(fields: &[(&str, PyJson)]) -> String {
    let mut out = String::from("{");
    for (i, (key, value)) in fields.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        json_string(key, &mut out);
        out.push_str(": ");
        value.write(&mut out);
    }
    out.push('}');
    out
}

/// SGLang 0.4.9's `--output-file` record of one run, in its key order.
pub fn record_fields(s: &Summary, r: &SglangReport) -> Vec<(&'static str, PyJson)> {
    use PyJson::{Float, Int};
    vec![
        ("backend", PyJson::Str(r.backend.clone())),
        ("dataset_name", PyJson::Str(r.dataset_name.clone())),
        ("request_rate", Float(r.request_rate)),
        ("max_concurrency", opt_int(r.max_concurrency)),
        ("sharegpt_output_len", opt_int(r.sharegpt_output_len)),
        ("random_input_len", Int(u64::from(r.random_input_len))),
        ("random_output_len", Int(u64::from(r.random_output_len))),
        ("random_range_ratio", Float(r.random_range_ratio)),
        ("duration", Float(s.duration_s)),
        ("completed", Int(s.completed)),
        ("total_input_tokens", Int(s.total_input_tokens)),
        ("total_output_tokens", Int(s.total_output_tokens)),
        ("total_output_tokens_retokenized", Int(retokenized(s, r))),
        ("request_throughput", Float(s.request_throughput)),
        ("input_throughput", Float(input_throughput(s))),
        ("output_throughput", Float(s.output_throughput)),
        ("mean_e2e_latency_ms", Float(s.e2el.mean_ms)),
        ("median_e2e_latency_ms", Float(s.e2el.median_ms)),
        ("std_e2e_latency_ms", Float(s.e2el.std_ms)),
        ("p99_e2e_latency_ms", Float(pct(&s.e2el, 99.0))),
        ("mean_ttft_ms", Float(s.ttft.mean_ms)),
        ("median_ttft_ms", Float(s.ttft.median_ms)),
        ("std_ttft_ms", Float(s.ttft.std_ms)),
        ("p99_ttft_ms", Float(pct(&s.ttft, 99.0))),
        ("mean_tpot_ms", Float(s.tpot.mean_ms)),
        ("median_tpot_ms", Float(s.tpot.median_ms)),
        ("std_tpot_ms", Float(s.tpot.std_ms)),
        ("p99_tpot_ms", Float(pct(&s.tpot, 99.0))),
        ("mean_itl_ms", Float(s.itl.mean_ms)),
        ("median_itl_ms", Float(s.itl.median_ms)),
        ("std_itl_ms", Float(s.itl.std_ms)),
        ("p95_itl_ms", Float(pct(&s.itl, 95.0))),
        ("p99_itl_ms", Float(pct(&s.itl, 99.0))),
        ("concurrency", Float(concurrency(s))),
        ("accept_length", r.accept_length.map_or(PyJson::Null, Float)),
    ]
}

/// The record as the line SGLang appends to `--output-file` (without its newline).
pub fn record(summary: &Summary, report: &SglangReport) -> String {
    dumps(&record_fields(summary, report))
}

// ---------------------------------------------------------------- reading SGLang's names

/// What one line of SGLang's printed block holds.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum TextLine {
    /// A measurement under a vLLM `--save-result` key (or SGLang's own where vLLM has none).
    Value(String, f64),
    /// A setting, as printed (`Backend: sglang`, `Max request concurrency: not set`).
    Context(String, String),
}

/// A line of SGLang's block (0.4.9 to 0.5.x) whose label vLLM's client never prints; `None`
/// for the others, which vLLM's table reads. `Err` says what was expected instead.
pub(super) fn text_line(label: &str, value: &str) -> Option<Result<TextLine, String>> {
    let number = |key: &str, scale: f64| -> Result<TextLine, String> {
        let digits = value.strip_suffix('%').unwrap_or(value).trim();
        let x = digits.parse::<f64>().map_err(|_| format!("a number after `{label}:`, not `{value}`"))?;
        Ok(TextLine::Value(key.to_string(), x * scale))
    };
    let context = |key: &str| Ok(TextLine::Context(key.to_string(), value.to_string()));
    let percent = value.ends_with('%');
    Some(match label {
        "Backend" => context("backend"),
        // A number, `inf`, or 0.5.x's `trace` (arrivals replayed from a trace).
        "Traffic request rate" => number("request_rate", 1.0).or_else(|_| context("request_rate")),
        "Max request concurrency" if value == "not set" => context("max_concurrency"),
        "Max request concurrency" => number("max_concurrency", 1.0),
        "Total generated tokens (retokenized)" => number("total_output_tokens_retokenized", 1.0),
        "Total input text tokens" => number("total_input_text_tokens", 1.0),
        "Total input vision tokens" => number("total_input_vision_tokens", 1.0),
        "Concurrency" => number("concurrency", 1.0),
        "Accept length" => number("accept_length", 1.0),
        "Max ITL (ms)" => number("p100_itl_ms", 1.0),
        // 0.5.x's goodput section; attainments as fractions, as its record keeps them.
        "SLOs (ms)" => context("goodput_slos_ms"),
        "SLO attainment (%)" => number("slo_attainment", 0.01),
        // 0.5.x's `--cache-report` section, under its record's `cache_report` keys.
        "Total prompt tokens" => number("total_prompt_tokens", 1.0),
        "Total cached tokens" => number("total_cached_tokens", 1.0),
        "Cache hit rate" => number("cache_hit_rate_pct", 1.0),
        "Device" | "Host" | "Storage" => {
            let tier = label.to_ascii_lowercase();
            if percent { number(&format!("{tier}_cached_pct"), 1.0) } else { number(&format!("{tier}_cached_tokens"), 1.0) }
        }
        _ if label.starts_with("Storage (") && label.ends_with(')') => {
            if percent { number("storage_cached_pct", 1.0) } else { number("storage_cached_tokens", 1.0) }
        }
        _ => {
            if let Some(metric) = label.strip_suffix(" SLO attainment (%)") {
                return Some(number(&format!("slo_attainment_{}", metric.to_ascii_lowercase()), 0.01));
            }
            let stat = label.strip_suffix(" E2E Latency (ms)")?;
            let key = match stat {
                "Mean" => "mean".to_string(),
                "Median" => "median".to_string(),
                _ => {
                    let p: f64 = stat.strip_prefix('P')?.parse().ok().filter(|p| (0.0..=100.0).contains(p))?;
                    format!("p{}", percentile_label(p))
                }
            };
            number(&format!("{key}_e2el_ms"), 1.0)
        }
    })
}

/// SGLang's argument fields: the client's settings, kept as context rather than compared as
/// measurements.
const ARGUMENTS: [&str; 4] = ["random_input_len", "random_output_len", "random_range_ratio", "sharegpt_output_len"];

/// The key vLLM gives a metric SGLang's record names its own way, where the two measure the
/// same thing: `{stat}_e2e_latency_ms` → `{stat}_e2el_ms`, `total_throughput` (0.5.x) →
/// `total_token_throughput`, `max_itl_ms` → `p100_itl_ms`.
pub(super) fn vllm_key(key: &str) -> Option<String> {
    if let Some(stat) = key.strip_suffix("_e2e_latency_ms") {
        return Some(format!("{stat}_e2el_ms"));
    }
    match key {
        "total_throughput" => Some("total_token_throughput".into()),
        "max_itl_ms" => Some("p100_itl_ms".into()),
        _ => None,
    }
}

/// One result object of SGLang's record (or of any client) in the shape the reader takes:
/// SGLang's names in vLLM's ([`vllm_key`]; a key the object already has is left alone); its
/// arguments as strings (context, not measurements); the numbers of 0.5.x's nested
/// `cache_report` and `slo_attainment_by_metric` lifted to the top; and, for a record without
/// `num_prompts` but with per-request `input_lens` (SGLang's `--output-details`, which saves
/// no request count), the count from their length, with the failures (never saved by SGLang)
/// the requests that did not complete.
pub(super) fn normalize_record(fields: &mut Map<String, Value>) {
    let renames: Vec<(String, String)> =
        fields.keys().filter_map(|k| vllm_key(k).map(|v| (k.clone(), v))).filter(|(_, v)| !fields.contains_key(v)).collect();
    for (from, to) in renames {
        if let Some(value) = fields.remove(&from) {
            fields.insert(to, value);
        }
    }
    for key in ARGUMENTS {
        if let Some(Value::Number(n)) = fields.get(key) {
            let text = n.to_string();
            fields.insert(key.to_string(), Value::String(text));
        }
    }
    let mut lifted = Vec::new();
    if let Some(Value::Object(cache)) = fields.get("cache_report") {
        lifted.extend(cache.iter().filter(|(_, v)| v.is_number()).map(|(k, v)| (k.clone(), v.clone())));
    }
    if let Some(Value::Object(by_metric)) = fields.get("slo_attainment_by_metric") {
        lifted.extend(by_metric.iter().filter(|(_, v)| v.is_number()).map(|(k, v)| (format!("slo_attainment_{k}"), v.clone())));
    }
    for (key, value) in lifted {
        fields.entry(key).or_insert(value);
    }
    if !fields.contains_key("num_prompts")
        && let Some(Value::Array(input_lens)) = fields.get("input_lens")
    {
        let requests = input_lens.len() as u64;
        let completed = fields.get("completed").and_then(Value::as_f64);
        fields.insert("num_prompts".into(), Value::from(requests));
        if let Some(done) = completed.filter(|&c| c <= requests as f64 && c.fract() == 0.0)
            && !fields.contains_key("failed")
        {
            fields.insert("failed".into(), Value::from(requests - done as u64));
        }
    }
}

#[cfg(test)]
#[path = "sglang_tests.rs"]
pub(super) mod tests;
