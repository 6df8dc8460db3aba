//! Benchmark results as users have them, read into one series of points: the load each point
//! ran at and the metrics it measured.
//!
//! ```text
//!  vLLM --save-result JSON (one file per rate)   ─┐
//!  servesim bench --save-result JSON              │
//!  SGLang bench_serving --output-file JSONL       ├─► ResultPoint { num_prompts, request_rate,
//!    (one line per run)                           │      burstiness, max_concurrency, totals,
//!  CSV: one row per point                         ─┘     metrics by vLLM key, source }
//! ```
//!
//! JSON goes through the recorded-results parser ([`crate::metrics::recorded::parse_file`]), which
//! already reads vLLM's files (Python's `NaN`, arrays of results, servesim's `summary.json`) and
//! SGLang's (its metric names made vLLM's, `crate::metrics::sglang`); here
//! its numbers and strings are read as a point's load. Every malformed value is an error naming
//! the file, the line or row, the field and the value.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::Error;
use crate::metrics::LatencyMetric;
use crate::metrics::recorded::{RecordedBlock, parse_file};

/// Most points one series may hold: each is simulated once per objective evaluation, so a
/// larger series is a mistake (a per-request file given as results), not a sweep.
pub const MAX_POINTS: usize = 1_000;

/// Most requests one point may have: the simulation of a point holds every request.
pub const MAX_NUM_PROMPTS: u64 = 1_000_000;

/// The load fields of vLLM's `--save-result` (and of the CSV), read into [`ResultPoint`]'s own
/// fields rather than compared as metrics.
const LOAD_FIELDS: [&str; 4] = ["num_prompts", "request_rate", "burstiness", "max_concurrency"];

/// Totals and throughputs vLLM saves under these keys (the latency keys are recognised by
/// shape, see [`is_metric_key`]).
const TOTAL_KEYS: [&str; 16] = [
    "completed",
    "failed",
    "duration",
    "total_input_tokens",
    "total_output_tokens",
    "request_throughput",
    "request_goodput",
    "input_throughput",
    "output_throughput",
    "total_token_throughput",
    "max_output_tokens_per_s",
    "max_concurrent_requests",
    "max_concurrency_reached",
    // SGLang's own (crate::metrics::sglang).
    "total_output_tokens_retokenized",
    "concurrency",
    "accept_length",
];

/// One benchmark result: a JSON file (or one object of it), or one CSV row.
#[derive(Clone, Debug, PartialEq)]
pub struct ResultPoint {
    /// Where it came from, for messages: `FILE` or `FILE line N`.
    pub source: String,
    pub num_prompts: u32,
    /// Requests per second; `f64::INFINITY` for a burst (everything sent at once).
    pub request_rate: f64,
    /// The gamma shape of the gaps between arrivals (1 = Poisson).
    pub burstiness: f64,
    pub max_concurrency: Option<u32>,
    /// Tokens sent and received over the whole point, where every request completed (with
    /// failures, vLLM's totals count only the successes and do not describe the load).
    pub input_tokens_total: Option<u64>,
    pub output_tokens_total: Option<u64>,
    /// Measured values by vLLM `--save-result` key.
    pub metrics: BTreeMap<String, f64>,
    /// 1-based line of the point in its file (the JSON object's first line, the CSV row's line).
    pub line: usize,
}

impl ResultPoint {
    /// Whether the point sent its requests as a burst (all at once), where the API server's
    /// per-request time spreads them out before the scheduler.
    pub fn is_burst(&self) -> bool {
        self.request_rate.is_infinite()
    }

    /// The point as a block of recorded values, for [`crate::validate::Plan`].
    pub fn to_block(&self, index: usize) -> RecordedBlock {
        RecordedBlock {
            line: self.line,
            index,
            labels: vec![self.source.clone()],
            context: Vec::new(),
            values: self.metrics.clone(),
        }
    }
}

/// What reading a series found, beyond its points: fallbacks taken and columns skipped.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Series {
    pub points: Vec<ResultPoint>,
    /// One line each, for the user: a default used, a column ignored.
    pub notes: Vec<String>,
}

/// What to assume for a field a file leaves out.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Defaults {
    /// For a file without `request_rate` (servesim bench before it saved one): the base
    /// scenario's rate, if it has exactly one.
    pub request_rate: Option<f64>,
}

/// Reads every file, in order, into one series: `.json` as `--save-result` files, `.jsonl` as
/// SGLang `--output-file` files (a point a line), `.csv` as a table of results.
pub fn read_series(paths: &[PathBuf], defaults: Defaults) -> Result<Series, Error> {
    let mut series = Series::default();
    for path in paths {
        let ext = path.extension().and_then(|e| e.to_str()).map(str::to_ascii_lowercase);
        match ext.as_deref() {
            Some("json" | "jsonl") => read_json(path, defaults, &mut series)?,
            Some("csv") => read_csv(path, defaults, &mut series)?,
            _ => {
                return Err(Error::Recorded(format!(
                    "{}: expected a vLLM --save-result .json file, an SGLang bench_serving --output-file .jsonl file or a .csv table of results",
                    path.display()
                )));
            }
        }
        if series.points.len() > MAX_POINTS {
            return Err(Error::Recorded(format!(
                "{}: more than {MAX_POINTS} result points; a series is one point per rate or load, not per request",
                path.display()
            )));
        }
    }
    if series.points.is_empty() {
        return Err(Error::Recorded("no result points in the files given".into()));
    }
    Ok(series)
}

fn field_error(source: &str, field: &str, value: impl std::fmt::Display, reason: &str) -> Error {
    Error::Recorded(format!("{source}: {field} = {value}: {reason}"))
}

/// A `--save-result` file: one object per point (vLLM writes one file per rate; an array or
/// servesim's `{"results": [...]}` holds several), or SGLang's JSONL (one line per run).
fn read_json(path: &Path, defaults: Defaults, series: &mut Series) -> Result<(), Error> {
    let blocks = parse_file(path).map_err(|e| Error::Recorded(e.to_string()))?;
    let several = blocks.len() > 1;
    for block in blocks {
        let source =
            if several { format!("{} line {}", path.display(), block.line) } else { path.display().to_string() };
        let text = |key: &str| block.context_value(key).map(str::to_string);
        let number = |key: &str| block.get(key);

        let num_prompts = match (number("num_prompts"), text("num_prompts")) {
            (Some(n), _) => count(&source, "num_prompts", n, MAX_NUM_PROMPTS)? as u32,
            (None, Some(t)) => return Err(field_error(&source, "num_prompts", format!("{t:?}"), "expected a count of requests")),
            // Older clients saved no num_prompts: every request either completed or failed.
            (None, None) => match number("completed") {
                Some(done) => {
                    let total = done + number("failed").unwrap_or(0.0);
                    series.notes.push(format!("{source}: no num_prompts; using completed + failed = {total}"));
                    count(&source, "completed", total, MAX_NUM_PROMPTS)? as u32
                }
                None => return Err(field_error(&source, "num_prompts", "(missing)", "a result needs num_prompts or completed")),
            },
        };
        let request_rate = match (number("request_rate"), text("request_rate")) {
            (Some(r), _) => rate(&source, &r.to_string())?,
            (None, Some(t)) => rate(&source, &t)?,
            (None, None) => match defaults.request_rate {
                Some(r) => {
                    series.notes.push(format!("{source}: no request_rate; using the scenario's {r}"));
                    r
                }
                None => {
                    return Err(field_error(
                        &source,
                        "request_rate",
                        "(missing)",
                        "the file does not say the rate it ran at, and the scenario has no single request_rate to assume",
                    ));
                }
            },
        };
        let burstiness = match (number("burstiness"), text("burstiness")) {
            (Some(b), _) => shape(&source, b)?,
            (None, Some(t)) => return Err(field_error(&source, "burstiness", format!("{t:?}"), "expected a positive gamma shape")),
            (None, None) => 1.0,
        };
        let max_concurrency = match (number("max_concurrency"), text("max_concurrency")) {
            (Some(c), _) => Some(count(&source, "max_concurrency", c, u32::MAX as u64)? as u32),
            (None, Some(t)) => return Err(field_error(&source, "max_concurrency", format!("{t:?}"), "expected a count of requests or null")),
            (None, None) => None,
        };
        let metrics: BTreeMap<String, f64> =
            block.values.iter().filter(|(k, _)| !LOAD_FIELDS.contains(&k.as_str())).map(|(k, v)| (k.clone(), *v)).collect();
        let (input_tokens_total, output_tokens_total) = totals(&source, num_prompts, &metrics)?;
        series.points.push(ResultPoint {
            source,
            num_prompts,
            request_rate,
            burstiness,
            max_concurrency,
            input_tokens_total,
            output_tokens_total,
            metrics,
            line: block.line,
        });
    }
    Ok(())
}

/// The load's token totals, when every request completed (a failed request's tokens are in no
/// total, so with failures the totals describe a smaller load than was sent).
fn totals(source: &str, num_prompts: u32, metrics: &BTreeMap<String, f64>) -> Result<(Option<u64>, Option<u64>), Error> {
    let completed = metrics.get("completed").copied();
    let failed = metrics.get("failed").copied().unwrap_or(0.0);
    if completed.is_some_and(|c| c != num_prompts as f64 || failed > 0.0) {
        return Ok((None, None));
    }
    let total = |key: &str| -> Result<Option<u64>, Error> {
        metrics.get(key).map(|&v| count(source, key, v, num_prompts as u64 * u32::MAX as u64)).transpose()
    };
    Ok((total("total_input_tokens")?, total("total_output_tokens")?))
}

/// A whole number in `1..=max`.
fn count(source: &str, field: &str, value: f64, max: u64) -> Result<u64, Error> {
    if value.fract() != 0.0 || !(1.0..=max as f64).contains(&value) {
        return Err(field_error(source, field, value, &format!("expected a whole number in 1..={max}")));
    }
    Ok(value as u64)
}

/// Requests per second: a positive number, or `inf` (vLLM saves a burst's rate as "inf").
fn rate(source: &str, text: &str) -> Result<f64, Error> {
    let t = text.trim().to_ascii_lowercase();
    let value = if t == "inf" || t == "infinity" { f64::INFINITY } else { t.parse::<f64>().unwrap_or(f64::NAN) };
    if value.is_nan() || value <= 0.0 {
        return Err(field_error(source, "request_rate", format!("{text:?}"), "expected a positive number of requests per second, or inf"));
    }
    Ok(value)
}

fn shape(source: &str, value: f64) -> Result<f64, Error> {
    if !(value > 0.0 && value.is_finite()) {
        return Err(field_error(source, "burstiness", value, "expected a positive gamma shape (1 = Poisson)"));
    }
    Ok(value)
}

/// Whether `key` names a metric vLLM saves: a total or throughput, or
/// `{mean|median|std|p<N>}_{ttft|tpot|itl|e2el}_ms`.
pub fn is_metric_key(key: &str) -> bool {
    if TOTAL_KEYS.contains(&key) {
        return true;
    }
    let Some(rest) = key.strip_suffix("_ms") else { return false };
    let Some((stat, metric)) = rest.rsplit_once('_') else { return false };
    let stat_ok = matches!(stat, "mean" | "median" | "std")
        || stat.strip_prefix('p').and_then(|p| p.parse::<f64>().ok()).is_some_and(|p| (0.0..=100.0).contains(&p));
    stat_ok && LatencyMetric::ALL.iter().any(|m| m.key() == metric)
}

/// A CSV of results: a header row, then one row per point.
///
/// | column | |
/// | --- | --- |
/// | `num_prompts`, `request_rate` | required (`inf` for a burst) |
/// | `max_concurrency`, `burstiness` | optional (empty: none, 1) |
/// | `input_len`, `output_len` | optional mean tokens per request, or `total_input_tokens`, `total_output_tokens` |
/// | metric columns | named as vLLM saves them: `mean_ttft_ms`, `p99_tpot_ms`, `output_throughput` … |
///
/// Other columns (a date, a note) are skipped and named in [`Series::notes`].
fn read_csv(path: &Path, defaults: Defaults, series: &mut Series) -> Result<(), Error> {
    let display = path.display();
    let mut reader = csv::ReaderBuilder::new()
        .trim(csv::Trim::All)
        .from_path(path)
        .map_err(|e| Error::Recorded(format!("{display}: cannot read: {e}")))?;
    let header: Vec<String> = reader
        .headers()
        .map_err(|e| Error::Recorded(format!("{display}: line 1: cannot read the header: {e}")))?
        .iter()
        .map(|h| h.trim_start_matches('\u{feff}').to_string())
        .collect();
    for (i, name) in header.iter().enumerate() {
        if header[..i].contains(name) {
            return Err(Error::Recorded(format!("{display}: line 1: column {name:?} appears twice")));
        }
    }
    let column = |name: &str| header.iter().position(|h| h == name);
    let Some(num_prompts_col) = column("num_prompts") else {
        return Err(Error::Recorded(format!(
            "{display}: line 1: no num_prompts column (header: {})",
            header.join(",")
        )));
    };
    let rate_col = column("request_rate");
    if rate_col.is_none() && defaults.request_rate.is_none() {
        return Err(Error::Recorded(format!(
            "{display}: line 1: no request_rate column, and the scenario has no single request_rate to assume"
        )));
    }
    let length_cols = ["input_len", "output_len"];
    let ignored: Vec<&str> = header
        .iter()
        .map(String::as_str)
        .filter(|h| !LOAD_FIELDS.contains(h) && !length_cols.contains(h) && !is_metric_key(h))
        .collect();
    if !ignored.is_empty() {
        series.notes.push(format!("{display}: columns not read (not a load, length or vLLM metric name): {}", ignored.join(", ")));
    }
    for (row, record) in reader.records().enumerate() {
        let record = record.map_err(|e| Error::Recorded(format!("{display}: {e}")))?;
        // The header is line 1; a quoted field with a newline makes the record's own line the
        // reliable one.
        let line = record.position().map_or(row + 2, |p| p.line() as usize);
        let source = format!("{display} line {line}");
        let cell = |col: usize| record.get(col).unwrap_or("");
        let value = |name: &str| -> Result<Option<f64>, Error> {
            let Some(col) = column(name) else { return Ok(None) };
            let text = cell(col);
            if text.is_empty() || text.eq_ignore_ascii_case("null") || text.eq_ignore_ascii_case("none") {
                return Ok(None);
            }
            text.parse::<f64>().map(Some).map_err(|_| field_error(&source, name, format!("{text:?}"), "expected a number"))
        };
        let num_prompts = match value("num_prompts")? {
            Some(n) => count(&source, "num_prompts", n, MAX_NUM_PROMPTS)? as u32,
            None => return Err(field_error(&source, "num_prompts", format!("{:?}", cell(num_prompts_col)), "expected a count of requests")),
        };
        let request_rate = match rate_col {
            Some(col) => rate(&source, cell(col))?,
            None => defaults.request_rate.unwrap_or(f64::INFINITY),
        };
        let burstiness = value("burstiness")?.map(|b| shape(&source, b)).transpose()?.unwrap_or(1.0);
        let max_concurrency =
            value("max_concurrency")?.map(|c| count(&source, "max_concurrency", c, u32::MAX as u64)).transpose()?.map(|c| c as u32);
        let mut metrics = BTreeMap::new();
        for name in header.iter().filter(|h| is_metric_key(h)) {
            if let Some(v) = value(name)? {
                metrics.insert(name.clone(), v);
            }
        }
        let (mut input_tokens_total, mut output_tokens_total) = totals(&source, num_prompts, &metrics)?;
        // Mean lengths per request stand for the totals where the row gives no totals.
        for (len_col, total) in [("input_len", &mut input_tokens_total), ("output_len", &mut output_tokens_total)] {
            if total.is_none()
                && let Some(len) = value(len_col)?
            {
                if !(len >= 1.0 && len <= u32::MAX as f64) {
                    return Err(field_error(&source, len_col, len, "expected mean tokens per request, at least 1"));
                }
                *total = Some((len * num_prompts as f64).round() as u64);
            }
        }
        series.points.push(ResultPoint {
            source,
            num_prompts,
            request_rate,
            burstiness,
            max_concurrency,
            input_tokens_total,
            output_tokens_total,
            metrics,
            line,
        });
        if series.points.len() > MAX_POINTS {
            break;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metric_keys_are_recognised_by_vllms_names() {
        for key in ["mean_ttft_ms", "median_tpot_ms", "std_itl_ms", "p99_e2el_ms", "p99.9_ttft_ms", "p100_itl_ms", "output_throughput", "completed", "concurrency"] {
            assert!(is_metric_key(key), "{key}");
        }
        for key in ["date", "notes", "mean_tft_ms", "p101_ttft_ms", "mean_ttft", "request_rate", "input_len"] {
            assert!(!is_metric_key(key), "{key}");
        }
    }
}
