//! vLLM `benchmark_serving.py`'s text block and `--save-result` JSON keys.
//!
//! The text is byte-exact with Python's formatting:
//!
//! ```text
//! ============ Serving Benchmark Result ============     "{s:{c}^{n}}" centred in 50 with '='
//! Successful requests:                     512           "{:<40} {:<10}" (trailing spaces kept)
//! Benchmark duration (s):                  30.74         "{:<40} {:<10.2f}"
//! ---------------Time to First Token----------------     centred in 50 with '-'
//! Mean TTFT (ms):                          15266.31
//! ==================================================
//! ```
//!
//! Rust's `{:^50}` puts the odd fill character on the right like Python, and `{:.2}` rounds the
//! exact binary value half-to-even like Python's `.2f`; only NaN is spelled differently ("NaN"
//! vs "nan"), which [`py_fixed2`] handles.

use std::fmt::{self, Write};
use std::str::FromStr;

use serde_json::{Map, Value, json};

use super::summary::{Stat, Summary};
use super::{LatencyMetric, RunRecords};

/// Which version of vLLM's client the text block mimics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ReportLayout {
    /// vLLM 0.6.x (recorded runs 002/003): no failed-request or peak lines, and the last
    /// throughput line is spelled `Total Token throughput (tok/s):`.
    Legacy,
    /// Newer vLLM (recorded run 000): failed requests, optional concurrency and rate lines, peak
    /// output-token throughput and peak concurrent requests.
    #[default]
    Current,
}

impl ReportLayout {
    pub const ALL: [ReportLayout; 2] = [ReportLayout::Legacy, ReportLayout::Current];

    /// The name used on the command line (`legacy`, `current`).
    pub fn name(self) -> &'static str {
        match self {
            ReportLayout::Legacy => "legacy",
            ReportLayout::Current => "current",
        }
    }

    /// The layout called `name`, if any.
    pub fn parse(name: &str) -> Option<ReportLayout> {
        ReportLayout::ALL
            .into_iter()
            .find(|layout| layout.name() == name)
    }
}

impl fmt::Display for ReportLayout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for ReportLayout {
    type Err = String;

    fn from_str(name: &str) -> Result<Self, Self::Err> {
        ReportLayout::parse(name).ok_or_else(|| {
            format!("unknown report layout `{name}` (expected `legacy` or `current`)")
        })
    }
}

/// What to print, mirroring vLLM's client flags.
#[derive(Clone, Debug, PartialEq)]
pub struct ReportOptions {
    /// `--report-layout`.
    pub layout: ReportLayout,
    /// `--percentile-metrics`: the latency sections to print and save. Printed in the fixed
    /// order TTFT, TPOT, ITL, E2EL whatever the order here.
    pub percentile_metrics: Vec<LatencyMetric>,
    /// `--metric-percentiles`, each in [0, 100]: pass them to [`Summary::from_records`] (or use
    /// [`ReportOptions::summarize`]); the report prints the percentiles the summary holds.
    pub percentiles: Vec<f64>,
    /// `--max-concurrency`, printed by the current layout when set.
    pub max_concurrency: Option<u32>,
    /// `--request-rate` in requests/s, printed by the current layout when finite.
    pub request_rate: f64,
}

impl Default for ReportOptions {
    /// vLLM's defaults: current layout, TTFT/TPOT/ITL, P99, no concurrency cap, rate `inf`.
    fn default() -> Self {
        ReportOptions {
            layout: ReportLayout::Current,
            percentile_metrics: vec![LatencyMetric::Ttft, LatencyMetric::Tpot, LatencyMetric::Itl],
            percentiles: vec![99.0],
            max_concurrency: None,
            request_rate: f64::INFINITY,
        }
    }
}

impl ReportOptions {
    /// Summarises `records` with these options' percentiles.
    pub fn summarize(&self, records: &RunRecords) -> Summary {
        Summary::from_records(records, &self.percentiles)
    }

    fn selects(&self, metric: LatencyMetric) -> bool {
        self.percentile_metrics.contains(&metric)
    }
}

/// Writes one `Serving Benchmark Result` block, newline-terminated, exactly as vLLM prints it.
pub fn write_report(out: &mut impl Write, summary: &Summary, opts: &ReportOptions) -> fmt::Result {
    writeln!(out, "{:=^50}", " Serving Benchmark Result ")?;
    match opts.layout {
        ReportLayout::Legacy => write_legacy_totals(out, summary)?,
        ReportLayout::Current => write_current_totals(out, summary, opts)?,
    }
    for metric in LatencyMetric::ALL.into_iter().filter(|&m| opts.selects(m)) {
        write_section(out, metric, summary.stat(metric))?;
    }
    writeln!(out, "{}", "=".repeat(50))
}

/// [`write_report`] into a new `String`.
pub fn render_report(summary: &Summary, opts: &ReportOptions) -> String {
    let mut text = String::new();
    // Writing into a String cannot fail.
    let _ = write_report(&mut text, summary, opts);
    text
}

/// vLLM 0.6.x's totals (`benchmark_serving.py` at 0.6.3).
fn write_legacy_totals(out: &mut impl Write, s: &Summary) -> fmt::Result {
    int_line(out, "Successful requests:", s.completed)?;
    write_run_totals(out, s)?;
    float_line(
        out,
        "Total Token throughput (tok/s):",
        s.total_token_throughput,
    )
}

/// Newer vLLM's totals, with failures, the configured load and the peak lines.
fn write_current_totals(out: &mut impl Write, s: &Summary, opts: &ReportOptions) -> fmt::Result {
    int_line(out, "Successful requests:", s.completed)?;
    int_line(out, "Failed requests:", s.failed)?;
    if let Some(max_concurrency) = opts.max_concurrency {
        int_line(out, "Maximum request concurrency:", max_concurrency)?;
    }
    if opts.request_rate.is_finite() {
        float_line(out, "Request rate configured (RPS):", opts.request_rate)?;
    }
    write_run_totals(out, s)?;
    float_line(
        out,
        "Peak output token throughput (tok/s):",
        s.max_output_tokens_per_s,
    )?;
    // vLLM formats this integer count with `.2f` too.
    float_line(
        out,
        "Peak concurrent requests:",
        s.max_concurrent_requests as f64,
    )?;
    float_line(
        out,
        "Total token throughput (tok/s):",
        s.total_token_throughput,
    )
}

/// The lines both layouts print alike, in the same order: duration, token totals, throughputs.
fn write_run_totals(out: &mut impl Write, s: &Summary) -> fmt::Result {
    float_line(out, "Benchmark duration (s):", s.duration_s)?;
    int_line(out, "Total input tokens:", s.total_input_tokens)?;
    int_line(out, "Total generated tokens:", s.total_output_tokens)?;
    float_line(out, "Request throughput (req/s):", s.request_throughput)?;
    float_line(out, "Output token throughput (tok/s):", s.output_throughput)
}

/// One latency section: centred header, mean, median, one line per percentile.
fn write_section(out: &mut impl Write, metric: LatencyMetric, stat: &Stat) -> fmt::Result {
    let name = short_name(metric);
    writeln!(out, "{:-^50}", section_title(metric))?;
    float_line(out, &format!("Mean {name} (ms):"), stat.mean_ms)?;
    float_line(out, &format!("Median {name} (ms):"), stat.median_ms)?;
    for &(p, value_ms) in &stat.percentiles_ms {
        float_line(
            out,
            &format!("P{} {name} (ms):", percentile_label(p)),
            value_ms,
        )?;
    }
    Ok(())
}

/// Python `"{:<40} {:<10}".format(label, int_value)`.
pub(super) fn int_line(out: &mut impl Write, label: &str, value: impl fmt::Display) -> fmt::Result {
    writeln!(out, "{label:<40} {value:<10}")
}

/// Python `"{:<40} {:<10.2f}".format(label, value)`.
pub(super) fn float_line(out: &mut impl Write, label: &str, value: f64) -> fmt::Result {
    writeln!(out, "{label:<40} {:<10}", py_fixed2(value))
}

/// Python's `format(value, ".2f")`: same digits as Rust's `{:.2}`, but NaN is `nan`.
pub fn py_fixed2(value: f64) -> String {
    if value.is_nan() {
        "nan".to_string()
    } else {
        format!("{value:.2}")
    }
}

/// vLLM's `p_word`: `str(int(p))` if `p` is whole, else Python's `str(p)` (`99.9`, `1e-05`).
pub fn percentile_label(p: f64) -> String {
    if p.is_finite() && p.fract() == 0.0 {
        return format!("{}", p as i64);
    }
    python_float_str(p)
}

/// Python's `repr(float)`, which `str()`, `format(x, "")` and `json.dumps` also write for a
/// finite float: [`python_float_str`]'s digits with `.0` on a whole number (`4.0`, `1e+16`);
/// `inf`, `-inf` and `nan` otherwise (JSON spells those differently: `sglang::json_float`).
pub fn python_float_repr(value: f64) -> String {
    if value.is_nan() {
        return "nan".into();
    }
    let text = python_float_str(value);
    if value.is_infinite() || text.contains(['.', 'e']) { text } else { format!("{text}.0") }
}

/// Python's `str(float)` for the values a percentile can take: Rust's shortest round-trip digits,
/// switched to Python's exponent form (`1e-05`) below 1e-4 and from 1e16 up.
fn python_float_str(value: f64) -> String {
    let magnitude = value.abs();
    if !value.is_finite() {
        return if value.is_nan() {
            "nan".into()
        } else {
            format!("{value}")
        };
    }
    if magnitude != 0.0 && !(1e-4..1e16).contains(&magnitude) {
        let scientific = format!("{value:e}"); // e.g. "1.5e-5"
        if let Some((mantissa, exponent)) = scientific.split_once('e') {
            let exponent: i32 = exponent.parse().unwrap_or(0);
            return format!("{mantissa}e{exponent:+03}");
        }
    }
    format!("{value}")
}

/// The metric as vLLM spells it in line labels.
fn short_name(metric: LatencyMetric) -> &'static str {
    match metric {
        LatencyMetric::Ttft => "TTFT",
        LatencyMetric::Tpot => "TPOT",
        LatencyMetric::Itl => "ITL",
        LatencyMetric::E2el => "E2EL",
    }
}

/// The metric's section header text.
fn section_title(metric: LatencyMetric) -> &'static str {
    match metric {
        LatencyMetric::Ttft => "Time to First Token",
        LatencyMetric::Tpot => "Time per Output Token (excl. 1st token)",
        LatencyMetric::Itl => "Inter-token Latency",
        LatencyMetric::E2el => "End-to-end Latency",
    }
}

/// Adds vLLM `--save-result`'s per-request arrays to a [`to_json`] object: `input_lens`,
/// `output_lens` and `ttfts` (seconds; `null` for a request with no first token).
pub fn insert_request_arrays(obj: &mut serde_json::Map<String, Value>, records: &[super::RequestRecord]) {
    obj.insert("input_lens".into(), Value::from(records.iter().map(|r| r.input_tokens).collect::<Vec<_>>()));
    obj.insert("output_lens".into(), Value::from(records.iter().map(|r| r.output_tokens).collect::<Vec<_>>()));
    let ttfts: Vec<Value> = records
        .iter()
        .map(|r| r.first_token_ns.map_or(Value::Null, |t| Value::from(t.saturating_sub(r.send_ns) as f64 / 1e9)))
        .collect();
    obj.insert("ttfts".into(), Value::from(ttfts));
}

/// The summary under vLLM's `--save-result` keys: totals, throughputs, the two peak values, and
/// for each selected metric `mean_{m}_ms`, `median_{m}_ms`, `std_{m}_ms` and `p{p}_{m}_ms`.
///
/// Always a JSON object (callers add their own keys). Non-finite floats become `null`.
pub fn to_json(summary: &Summary, opts: &ReportOptions) -> Value {
    let mut map = Map::new();
    let mut put = |key: String, value: Value| {
        map.insert(key, value);
    };
    put("duration".into(), json!(summary.duration_s));
    put("completed".into(), json!(summary.completed));
    put("failed".into(), json!(summary.failed));
    put(
        "total_input_tokens".into(),
        json!(summary.total_input_tokens),
    );
    put(
        "total_output_tokens".into(),
        json!(summary.total_output_tokens),
    );
    put(
        "request_throughput".into(),
        json!(summary.request_throughput),
    );
    put("output_throughput".into(), json!(summary.output_throughput));
    put(
        "total_token_throughput".into(),
        json!(summary.total_token_throughput),
    );
    put(
        "max_output_tokens_per_s".into(),
        json!(summary.max_output_tokens_per_s),
    );
    put(
        "max_concurrent_requests".into(),
        json!(summary.max_concurrent_requests),
    );
    for metric in LatencyMetric::ALL.into_iter().filter(|&m| opts.selects(m)) {
        let stat = summary.stat(metric);
        let key = metric.key();
        put(format!("mean_{key}_ms"), json!(stat.mean_ms));
        put(format!("median_{key}_ms"), json!(stat.median_ms));
        put(format!("std_{key}_ms"), json!(stat.std_ms));
        for &(p, value_ms) in &stat.percentiles_ms {
            put(
                format!("p{}_{key}_ms", percentile_label(p)),
                json!(value_ms),
            );
        }
    }
    Value::Object(map)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stat whose printed mean, median and percentiles are the given numbers. The stored
    /// values carry extra digits so the test also exercises rounding.
    fn stat(mean_ms: f64, median_ms: f64, percentiles_ms: &[(f64, f64)]) -> Stat {
        Stat {
            mean_ms: mean_ms + 0.0012,
            median_ms: median_ms - 0.0013,
            std_ms: 1.0,
            percentiles_ms: percentiles_ms
                .iter()
                .map(|&(p, v)| (p, v + 0.0041))
                .collect(),
        }
    }

    /// A summary of `completed` requests over `duration_s` with these token totals, the
    /// throughputs as their quotients, no failures and no peaks; `[ttft, tpot, itl, e2el]`.
    fn summary(completed: u64, duration_s: f64, input: u64, output: u64, [ttft, tpot, itl, e2el]: [Stat; 4]) -> Summary {
        Summary {
            completed,
            failed: 0,
            duration_s,
            total_input_tokens: input,
            total_output_tokens: output,
            request_throughput: completed as f64 / duration_s,
            output_throughput: output as f64 / duration_s,
            total_token_throughput: (input + output) as f64 / duration_s,
            max_output_tokens_per_s: 0.0,
            max_concurrent_requests: 0,
            ttft,
            tpot,
            itl,
            e2el,
        }
    }

    fn options(layout: ReportLayout, metrics: &[LatencyMetric]) -> ReportOptions {
        ReportOptions {
            layout,
            percentile_metrics: metrics.to_vec(),
            ..ReportOptions::default()
        }
    }

    /// First block of recorded run-002 (vLLM 0.6.3, 1 request of 80 tokens), copied verbatim.
    const RUN_002_FIRST_BLOCK: &str = "\
============ Serving Benchmark Result ============
Successful requests:                     1         
Benchmark duration (s):                  4.53      
Total input tokens:                      80        
Total generated tokens:                  85        
Request throughput (req/s):              0.22      
Output token throughput (tok/s):         18.75     
Total Token throughput (tok/s):          36.40     
---------------Time to First Token----------------
Mean TTFT (ms):                          314.58    
Median TTFT (ms):                        314.58    
P99 TTFT (ms):                           314.58    
-----Time per Output Token (excl. 1st token)------
Mean TPOT (ms):                          50.19     
Median TPOT (ms):                        50.19     
P99 TPOT (ms):                           50.19     
---------------Inter-token Latency----------------
Mean ITL (ms):                           49.13     
Median ITL (ms):                         49.66     
P99 ITL (ms):                            94.22     
==================================================
";

    #[test]
    fn legacy_layout_reproduces_recorded_run_002() {
        let stats = [
            stat(314.58, 314.58, &[(99.0, 314.58)]),
            stat(50.19, 50.19, &[(99.0, 50.19)]),
            stat(49.13, 49.66, &[(99.0, 94.22)]),
            stat(4532.0, 4532.0, &[(99.0, 4532.0)]),
        ];
        // The legacy layout leaves the peaks out: these must not show.
        let summary = Summary { max_output_tokens_per_s: 30.0, max_concurrent_requests: 1, ..summary(1, 4.5333, 80, 85, stats) };
        let opts = options(
            ReportLayout::Legacy,
            &[LatencyMetric::Ttft, LatencyMetric::Tpot, LatencyMetric::Itl],
        );
        assert_eq!(render_report(&summary, &opts), RUN_002_FIRST_BLOCK);
    }

    /// The "Decode" block of recorded run-000 (newer vLLM), copied verbatim.
    const RUN_000_DECODE_BLOCK: &str = "\
============ Serving Benchmark Result ============
Successful requests:                     512       
Failed requests:                         0         
Benchmark duration (s):                  30.74     
Total input tokens:                      512       
Total generated tokens:                  65536     
Request throughput (req/s):              16.65     
Output token throughput (tok/s):         2131.64   
Peak output token throughput (tok/s):    2224.00   
Peak concurrent requests:                512.00    
Total token throughput (tok/s):          2148.29   
---------------Time to First Token----------------
Mean TTFT (ms):                          15266.31  
Median TTFT (ms):                        14933.56  
P99 TTFT (ms):                           29780.21  
-----Time per Output Token (excl. 1st token)------
Mean TPOT (ms):                          7.28      
Median TPOT (ms):                        7.29      
P99 TPOT (ms):                           7.45      
---------------Inter-token Latency----------------
Mean ITL (ms):                           7.29      
Median ITL (ms):                         7.26      
P99 ITL (ms):                            9.85      
==================================================
";

    fn run_000_decode_summary() -> Summary {
        let stats = [
            stat(15266.31, 14933.56, &[(99.0, 29780.21)]),
            stat(7.28, 7.29, &[(99.0, 7.45)]),
            stat(7.29, 7.26, &[(99.0, 9.85)]),
            stat(16000.0, 16000.0, &[(99.0, 30000.0)]),
        ];
        Summary { max_output_tokens_per_s: 2224.0, max_concurrent_requests: 512, ..summary(512, 30.7444, 512, 65536, stats) }
    }

    #[test]
    fn current_layout_reproduces_recorded_run_000_decode() {
        let opts = ReportOptions::default();
        assert_eq!(
            render_report(&run_000_decode_summary(), &opts),
            RUN_000_DECODE_BLOCK
        );
    }

    /// Recorded run-001: five percentiles and the end-to-end section, copied verbatim.
    const RUN_001_BLOCK: &str = "\
============ Serving Benchmark Result ============
Successful requests:                     3000      
Benchmark duration (s):                  1055.18   
Total input tokens:                      696991    
Total generated tokens:                  2004890   
Request throughput (req/s):              2.84      
Output token throughput (tok/s):         1900.04   
Total Token throughput (tok/s):          2560.58   
---------------Time to First Token----------------
Mean TTFT (ms):                          463.85    
Median TTFT (ms):                        124.74    
P50 TTFT (ms):                           124.74    
P75 TTFT (ms):                           209.08    
P90 TTFT (ms):                           932.55    
P95 TTFT (ms):                           3035.43   
P99 TTFT (ms):                           5874.28   
-----Time per Output Token (excl. 1st token)------
Mean TPOT (ms):                          66.78     
Median TPOT (ms):                        66.80     
P50 TPOT (ms):                           66.80     
P75 TPOT (ms):                           68.97     
P90 TPOT (ms):                           70.84     
P95 TPOT (ms):                           72.10     
P99 TPOT (ms):                           88.89     
---------------Inter-token Latency----------------
Mean ITL (ms):                           65.71     
Median ITL (ms):                         48.17     
P50 ITL (ms):                            48.17     
P75 ITL (ms):                            56.68     
P90 ITL (ms):                            74.48     
P95 ITL (ms):                            164.84    
P99 ITL (ms):                            321.39    
----------------End-to-end Latency----------------
Mean E2EL (ms):                          44313.70  
Median E2EL (ms):                        61938.89  
P50 E2EL (ms):                           61938.89  
P75 E2EL (ms):                           68664.12  
P90 E2EL (ms):                           70962.80  
P95 E2EL (ms):                           72128.81  
P99 E2EL (ms):                           73790.91  
==================================================
";

    #[test]
    fn legacy_layout_reproduces_recorded_run_001_with_e2el_and_five_percentiles() {
        let ps = |values: [f64; 5]| -> Vec<(f64, f64)> {
            [50.0, 75.0, 90.0, 95.0, 99.0]
                .into_iter()
                .zip(values)
                .collect()
        };
        let stats = [
            stat(463.85, 124.74, &ps([124.74, 209.08, 932.55, 3035.43, 5874.28])),
            stat(66.78, 66.80, &ps([66.80, 68.97, 70.84, 72.10, 88.89])),
            stat(65.71, 48.17, &ps([48.17, 56.68, 74.48, 164.84, 321.39])),
            stat(44313.70, 61938.89, &ps([61938.89, 68664.12, 70962.80, 72128.81, 73790.91])),
        ];
        let summary = summary(3000, 1055.1825, 696991, 2004890, stats);
        // Metrics listed out of order on purpose: sections still print in vLLM's fixed order.
        let opts = options(
            ReportLayout::Legacy,
            &[
                LatencyMetric::E2el,
                LatencyMetric::Itl,
                LatencyMetric::Tpot,
                LatencyMetric::Ttft,
            ],
        );
        assert_eq!(render_report(&summary, &opts), RUN_001_BLOCK);
    }

    #[test]
    fn current_layout_prints_configured_concurrency_and_finite_rate() {
        let opts = ReportOptions {
            max_concurrency: Some(64),
            request_rate: 12.5,
            percentile_metrics: vec![LatencyMetric::E2el],
            ..ReportOptions::default()
        };
        let text = render_report(&run_000_decode_summary(), &opts);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[2],
            "Failed requests:                         0         "
        );
        assert_eq!(
            lines[3],
            "Maximum request concurrency:             64        "
        );
        assert_eq!(
            lines[4],
            "Request rate configured (RPS):           12.50     "
        );
        assert_eq!(
            lines[5],
            "Benchmark duration (s):                  30.74     "
        );
        assert_eq!(
            lines[13],
            "----------------End-to-end Latency----------------"
        );
        assert_eq!(lines.len(), 18);
        assert!(!text.contains("TTFT") && !text.contains("TPOT") && !text.contains("ITL"));
    }

    #[test]
    fn floats_round_like_python() {
        // Python: '%.2f' % 0.125 == '0.12', 0.375 → '0.38', 2.675 → '2.67' (binary 2.67499…),
        // 1.005 → '1.00', 110957.985 → '110957.99'.
        assert_eq!(py_fixed2(0.125), "0.12");
        assert_eq!(py_fixed2(0.375), "0.38");
        assert_eq!(py_fixed2(2.675), "2.67");
        assert_eq!(py_fixed2(1.005), "1.00");
        assert_eq!(py_fixed2(110957.985), "110957.99");
        assert_eq!(py_fixed2(f64::NAN), "nan");
        assert_eq!(py_fixed2(f64::INFINITY), "inf");
        // A value wider than the column pushes past it with one space, as in run-003.
        let mut line = String::new();
        float_line(&mut line, "P99 TTFT (ms):", 110957.99).unwrap();
        assert_eq!(
            line,
            "P99 TTFT (ms):                           110957.99 \n"
        );
    }

    #[test]
    fn percentile_labels_follow_vllm() {
        assert_eq!(percentile_label(99.0), "99");
        assert_eq!(percentile_label(100.0), "100");
        assert_eq!(percentile_label(99.9), "99.9");
        assert_eq!(percentile_label(12.25), "12.25");
        assert_eq!(percentile_label(0.00001), "1e-05");
        assert_eq!(percentile_label(0.0001), "0.0001");
    }

    #[test]
    fn json_has_vllm_keys_for_selected_metrics() {
        let mut summary = run_000_decode_summary();
        summary.itl.percentiles_ms = vec![(50.0, 7.0), (99.9, 9.9)];
        let opts = options(ReportLayout::Current, &[LatencyMetric::Itl]);
        let value = to_json(&summary, &opts);
        let object = value.as_object().unwrap();
        let mut keys: Vec<&str> = object.keys().map(String::as_str).collect();
        keys.sort_unstable();
        assert_eq!(
            keys,
            [
                "completed",
                "duration",
                "failed",
                "max_concurrent_requests",
                "max_output_tokens_per_s",
                "mean_itl_ms",
                "median_itl_ms",
                "output_throughput",
                "p50_itl_ms",
                "p99.9_itl_ms",
                "request_throughput",
                "std_itl_ms",
                "total_input_tokens",
                "total_output_tokens",
                "total_token_throughput",
            ]
        );
        assert_eq!(object["completed"], json!(512));
        assert_eq!(object["max_concurrent_requests"], json!(512));
        assert_eq!(object["duration"], json!(30.7444));
        assert_eq!(object["p99.9_itl_ms"], json!(9.9));
        assert_eq!(object["std_itl_ms"], json!(1.0));
    }

    #[test]
    fn layout_names_round_trip() {
        for layout in ReportLayout::ALL {
            assert_eq!(ReportLayout::parse(layout.name()), Some(layout));
            assert_eq!(layout.to_string().parse::<ReportLayout>(), Ok(layout));
        }
        assert_eq!(ReportLayout::parse("Legacy"), None);
        assert!("v2".parse::<ReportLayout>().is_err());
    }

    #[test]
    fn summarize_uses_the_options_percentiles() {
        let opts = ReportOptions {
            percentiles: vec![50.0, 90.0],
            ..ReportOptions::default()
        };
        let summary = opts.summarize(&RunRecords::default());
        assert_eq!(summary.ttft.percentiles_ms, vec![(50.0, 0.0), (90.0, 0.0)]);
    }
}
