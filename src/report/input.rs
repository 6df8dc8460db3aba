//! Reading a run directory written by `simulate --out`: `summary.json`, `requests.csv`,
//! `timeline.csv` and `itl.csv` (see [`crate::run::output`]).
//!
//! Every problem is an [`Error::Report`] that names the file and, for CSV, the 1-based line, so
//! a hand-edited or truncated file is found at once. Times are read back from their exact decimal
//! digits into integer nanoseconds, as the simulator wrote them.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::Error;

/// One request of `requests.csv` is the metrics' own record, so the report applies vLLM's
/// definitions through the same code as the summary.
pub use crate::metrics::RequestRecord as RequestRow;

/// One engine step of `timeline.csv`.
#[derive(Clone, Debug, PartialEq)]
pub struct StepRow {
    pub replica: u32,
    pub start_ns: u64,
    pub running: u32,
    pub waiting: u32,
    pub kv_blocks_used: u64,
    pub kv_blocks_total: u64,
    pub batch_seqs: u32,
    pub prefill_tokens: u32,
    pub decode_tokens: u32,
    pub step_ns: u64,
    /// GEMM, attention, elementwise, communication, overhead, in that order ([`COMPONENTS`]).
    pub parts_ns: [u64; 5],
}

/// The step-cost components of `timeline.csv`, in column order.
pub const COMPONENTS: [&str; 5] = ["GEMM", "attention", "elementwise", "communication", "overhead"];

/// One sweep point: its `summary.json` result and its rows of the three CSV files.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PointData {
    pub num_prompts: u32,
    /// Requests per second; `None` for `inf` (all sent at once).
    pub request_rate: Option<f64>,
    pub max_concurrency: Option<u64>,
    /// Every numeric key of the point's `summary.json` result (vLLM `--save-result` keys).
    pub values: BTreeMap<String, f64>,
    pub requests: Vec<RequestRow>,
    pub steps: Vec<StepRow>,
    /// ITL samples as sorted `(value_ns, count)` runs.
    pub itl_runs: Vec<(u64, u64)>,
}

/// One run directory.
#[derive(Clone, Debug, PartialEq)]
pub struct RunData {
    /// The directory as given.
    pub dir: PathBuf,
    /// The scenario name from `summary.json`, else the directory's name.
    pub name: String,
    /// The `servesim` object of `summary.json` (deployment), as display strings, in file order.
    pub deployment: Vec<(String, String)>,
    pub points: Vec<PointData>,
}

fn bad(path: &Path, line: Option<usize>, message: impl std::fmt::Display) -> Error {
    match line {
        Some(line) => Error::Report(format!("{}:{line}: {message}", path.display())),
        None => Error::Report(format!("{}: {message}", path.display())),
    }
}

fn read(path: &Path) -> Result<String, Error> {
    std::fs::read_to_string(path).map_err(|e| bad(path, None, format_args!("cannot read: {e}")))
}

/// Reads a whole run directory.
pub fn read_run(dir: &Path) -> Result<RunData, Error> {
    if !dir.is_dir() {
        return Err(bad(dir, None, "not a directory (expected one written by `servesim simulate --out`)"));
    }
    let mut run = read_summary(&dir.join("summary.json"), dir)?;
    let points = run.points.len();

    let path = dir.join("requests.csv");
    let text = read(&path)?;
    let table = Table::new(&path, &text)?;
    let cols = table.columns(&[
        "point",
        "send_s",
        "first_token_s",
        "end_s",
        "input_tokens",
        "output_tokens",
        "success",
    ])?;
    for row in table.rows() {
        let row = row?;
        let point = row.point(points, cols[0])?;
        let first = row.field(cols[2]);
        let request = RequestRow {
            send_ns: row.decimal(cols[1], 9)?,
            first_token_ns: if first.is_empty() { None } else { Some(row.decimal(cols[2], 9)?) },
            end_ns: row.decimal(cols[3], 9)?,
            input_tokens: row.int(cols[4])?,
            output_tokens: row.int(cols[5])?,
            success: row.boolean(cols[6])?,
        };
        run.points[point].requests.push(request);
    }
    // The summary says how many requests each point ran; a point with none here is a file cut
    // short or emptied, and its charts would be blank without a word.
    if let Some(i) = run.points.iter().position(|p| p.requests.is_empty()) {
        return Err(bad(&path, None, format!("sweep point {} has no requests (the file holds a header only, or is cut short)", i + 1)));
    }

    let path = dir.join("timeline.csv");
    let text = read(&path)?;
    let table = Table::new(&path, &text)?;
    let cols = table.columns(&[
        "point",
        "replica",
        "start_s",
        "running",
        "waiting",
        "kv_blocks_used",
        "kv_blocks_total",
        "batch_seqs",
        "prefill_tokens",
        "decode_tokens",
        "step_ms",
        "gemm_ms",
        "attention_ms",
        "elementwise_ms",
        "communication_ms",
        "overhead_ms",
    ])?;
    for row in table.rows() {
        let row = row?;
        let point = row.point(points, cols[0])?;
        let mut parts_ns = [0u64; 5];
        for (k, part) in parts_ns.iter_mut().enumerate() {
            *part = row.decimal(cols[11 + k], 6)?;
        }
        let step = StepRow {
            replica: row.int(cols[1])?,
            start_ns: row.decimal(cols[2], 9)?,
            running: row.int(cols[3])?,
            waiting: row.int(cols[4])?,
            kv_blocks_used: row.int(cols[5])?,
            kv_blocks_total: row.int(cols[6])?,
            batch_seqs: row.int(cols[7])?,
            prefill_tokens: row.int(cols[8])?,
            decode_tokens: row.int(cols[9])?,
            step_ns: row.decimal(cols[10], 6)?,
            parts_ns,
        };
        run.points[point].steps.push(step);
    }

    let path = dir.join("itl.csv");
    let text = read(&path)?;
    let table = Table::new(&path, &text)?;
    let cols = table.columns(&["point", "itl_ms", "count"])?;
    for row in table.rows() {
        let row = row?;
        let point = row.point(points, cols[0])?;
        let value_ns = row.decimal(cols[1], 6)?;
        let count: u64 = row.int(cols[2])?;
        let runs = &mut run.points[point].itl_runs;
        if let Some(&(last_ns, _)) = runs.last()
            && last_ns >= value_ns
        {
            return Err(bad(&path, Some(row.line), "itl_ms values must ascend within a sweep point"));
        }
        runs.push((value_ns, count));
    }
    Ok(run)
}

fn read_summary(path: &Path, dir: &Path) -> Result<RunData, Error> {
    let text = read(path)?;
    let json: Value = serde_json::from_str(&text)
        .map_err(|e| bad(path, Some(e.line()), format_args!("malformed JSON: {e}")))?;
    let results = json
        .get("results")
        .and_then(Value::as_array)
        .ok_or_else(|| bad(path, None, "expected an object with a `results` array"))?;
    if results.is_empty() {
        return Err(bad(path, None, "`results` is empty: no sweep point to report"));
    }
    let mut points = Vec::with_capacity(results.len());
    for (i, result) in results.iter().enumerate() {
        let object = result
            .as_object()
            .ok_or_else(|| bad(path, None, format_args!("results[{i}]: expected an object")))?;
        let num_prompts = object
            .get("num_prompts")
            .and_then(Value::as_u64)
            .and_then(|n| u32::try_from(n).ok())
            .ok_or_else(|| bad(path, None, format_args!("results[{i}]: missing or invalid `num_prompts`")))?;
        for key in ["duration", "completed", "request_throughput", "output_throughput"] {
            if !object.get(key).is_some_and(Value::is_number) {
                return Err(bad(path, None, format_args!("results[{i}]: missing number `{key}`")));
            }
        }
        let values = object.iter().filter_map(|(k, v)| Some((k.clone(), v.as_f64()?))).collect();
        points.push(PointData {
            num_prompts,
            request_rate: object.get("request_rate").and_then(Value::as_f64),
            max_concurrency: object.get("max_concurrency").and_then(Value::as_u64),
            values,
            ..PointData::default()
        });
    }
    let deployment: Vec<(String, String)> = json
        .get("servesim")
        .and_then(Value::as_object)
        .map(|o| {
            o.iter()
                .map(|(k, v)| (k.clone(), v.as_str().map_or_else(|| v.to_string(), str::to_string)))
                .collect()
        })
        .unwrap_or_default();
    let name = deployment
        .iter()
        .find(|(k, _)| k == "scenario")
        .map(|(_, v)| v.clone())
        .or_else(|| dir.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_else(|| dir.display().to_string());
    Ok(RunData { dir: dir.to_path_buf(), name, deployment, points })
}

/// A CSV file as servesim writes it: a header line, then comma-separated fields without quoting.
struct Table<'a> {
    path: &'a Path,
    header: Vec<&'a str>,
    body: &'a str,
}

struct Row<'a> {
    path: &'a Path,
    /// 1-based line in the file.
    line: usize,
    names: &'a [&'a str],
    fields: Vec<&'a str>,
}

impl<'a> Table<'a> {
    fn new(path: &'a Path, text: &'a str) -> Result<Table<'a>, Error> {
        let (first, body) = text.split_once('\n').unwrap_or((text, ""));
        let header: Vec<&str> = first.trim_end_matches('\r').split(',').collect();
        if first.trim().is_empty() {
            return Err(bad(path, Some(1), "expected a header line, found nothing"));
        }
        Ok(Table { path, header, body })
    }

    /// The index of each named column; an error naming the first one missing.
    fn columns(&self, names: &[&str]) -> Result<Vec<usize>, Error> {
        names
            .iter()
            .map(|name| {
                self.header.iter().position(|h| h == name).ok_or_else(|| {
                    bad(self.path, Some(1), format_args!("header has no `{name}` column (found {:?})", self.header.join(",")))
                })
            })
            .collect()
    }

    fn rows(&'a self) -> impl Iterator<Item = Result<Row<'a>, Error>> + 'a {
        self.body.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()).map(move |(i, l)| {
            let line = i + 2;
            let fields: Vec<&str> = l.trim_end_matches('\r').split(',').collect();
            if fields.len() != self.header.len() {
                return Err(bad(
                    self.path,
                    Some(line),
                    format_args!("expected {} fields as in the header, found {}", self.header.len(), fields.len()),
                ));
            }
            Ok(Row { path: self.path, line, names: &self.header, fields })
        })
    }
}

impl Row<'_> {
    fn field(&self, col: usize) -> &str {
        self.fields[col].trim()
    }

    fn error(&self, col: usize, expected: &str) -> Error {
        bad(self.path, Some(self.line), format_args!("`{}`: expected {expected}, found {:?}", self.names[col], self.field(col)))
    }

    fn int<T: std::str::FromStr>(&self, col: usize) -> Result<T, Error> {
        self.field(col).parse().map_err(|_| self.error(col, "a non-negative integer"))
    }

    fn boolean(&self, col: usize) -> Result<bool, Error> {
        match self.field(col) {
            "true" => Ok(true),
            "false" => Ok(false),
            _ => Err(self.error(col, "true or false")),
        }
    }

    /// A non-negative decimal in units of 10^-`digits` of the column's unit, exactly: `1.5` with
    /// 9 digits (seconds → ns) is 1_500_000_000.
    fn decimal(&self, col: usize, digits: u32) -> Result<u64, Error> {
        parse_decimal(self.field(col), digits).ok_or_else(|| self.error(col, "a non-negative decimal number"))
    }

    /// The index of the sweep point this row belongs to, from its 1-based `point` column.
    fn point(&self, points: usize, col: usize) -> Result<usize, Error> {
        let n: usize = self.int(col)?;
        if (1..=points).contains(&n) {
            Ok(n - 1)
        } else {
            Err(bad(self.path, Some(self.line), format_args!("point {n} is not a sweep point of summary.json, which has {points}")))
        }
    }
}

/// `text` × 10^`digits` as an integer, exactly; `None` unless it is a plain non-negative decimal
/// whose fractional digits fit.
pub fn parse_decimal(text: &str, digits: u32) -> Option<u64> {
    let (whole, frac) = text.split_once('.').unwrap_or((text, ""));
    if whole.is_empty() && frac.is_empty() {
        return None;
    }
    let all_digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if !all_digits(whole) || !all_digits(frac) || frac.len() > digits as usize {
        return None;
    }
    let whole: u64 = if whole.is_empty() { 0 } else { whole.parse().ok()? };
    let mut frac_value: u64 = if frac.is_empty() { 0 } else { frac.parse().ok()? };
    frac_value *= 10u64.pow(digits - frac.len() as u32);
    whole.checked_mul(10u64.pow(digits))?.checked_add(frac_value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimals_are_exact() {
        assert_eq!(parse_decimal("1.500000001", 9), Some(1_500_000_001));
        assert_eq!(parse_decimal("7.28", 6), Some(7_280_000));
        assert_eq!(parse_decimal("3", 6), Some(3_000_000));
        assert_eq!(parse_decimal("0.5", 0), None);
        assert_eq!(parse_decimal("-1", 6), None);
        assert_eq!(parse_decimal("1e3", 6), None);
        assert_eq!(parse_decimal("", 6), None);
    }
}
