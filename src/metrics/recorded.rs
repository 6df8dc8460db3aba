//! Recorded benchmark results → blocks of numbers keyed like vLLM's `--save-result` JSON.
//!
//! Reads what vLLM's `benchmark_serving.py` prints (one or more `Serving Benchmark Result`
//! blocks, with notes between them), what it saves with `--save-result` (one JSON object), and
//! servesim's own `summary.json` (`{"results": [...]}`). Every source lands on the keys that
//! [`to_json`](super::format::to_json) writes, so a recorded run and a simulated one compare key
//! by key, whichever file each came from.
//!
//! ```text
//! # Decode                                              ← label: free text before a block
//! num_prompts: 512                                      ← context: `key: value` before a block
//! ============ Serving Benchmark Result ============    ← header: RecordedBlock::line
//! Successful requests:                     512          → values["completed"] = 512.0
//! Total Token throughput (tok/s):          2148.29      → values["total_token_throughput"]
//! ---------------Time to First Token----------------    ← section header (title not checked)
//! P99.9 TTFT (ms):                         29780.21     → values["p99.9_ttft_ms"]
//! ==================================================    ← closes the block
//! ```
//!
//! Outside blocks anything goes (command lines, notes, blank lines), because people paste these
//! results into files with whatever they wrote around them. Inside a block every line must be
//! understood: a line skipped there would be a recorded number silently lost, so it is an error
//! that names the file, the line, the text found and what was expected instead.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::LatencyMetric;
use super::format::percentile_label;

/// The title inside a block's `====` header line.
const HEADER_TITLE: &str = "Serving Benchmark Result";

/// Longest excerpt of an offending line kept in an error: a `--save-result` file is one line
/// that can be megabytes long.
const EXCERPT_CHARS_MAX: usize = 120;

/// What a line inside a block may be, for error messages.
const EXPECTED_IN_BLOCK: &str =
    "a `Label: number` metric line, a `---Section---` header or the closing `=====` line";

/// Every line label of the totals part of a block, in the order newer vLLM prints them, with
/// its `--save-result` key. Latency lines (`Mean TTFT (ms)` …) are derived in [`metric_key`].
const TOTALS: [(&str, &str); 15] = [
    ("Successful requests", "completed"),
    // From here to the peak lines: newer clients only (recorded run-000).
    ("Failed requests", "failed"),
    ("Maximum request concurrency", "max_concurrency"),
    ("Request rate configured (RPS)", "request_rate"),
    ("Benchmark duration (s)", "duration"),
    ("Total input tokens", "total_input_tokens"),
    ("Total generated tokens", "total_output_tokens"),
    ("Request throughput (req/s)", "request_throughput"),
    // Printed only when the client was given `--goodput` SLOs.
    ("Request goodput (req/s)", "request_goodput"),
    // vLLM 0.4–0.5 clients printed the input rate instead of the total rate.
    ("Input token throughput (tok/s)", "input_throughput"),
    ("Output token throughput (tok/s)", "output_throughput"),
    (
        "Peak output token throughput (tok/s)",
        "max_output_tokens_per_s",
    ),
    ("Peak concurrent requests", "max_concurrent_requests"),
    // vLLM 0.6.x spelled it with a capital T (recorded runs 001–003); newer clients do not.
    ("Total Token throughput (tok/s)", "total_token_throughput"),
    ("Total token throughput (tok/s)", "total_token_throughput"),
];

/// One recorded benchmark result: a text block, or one object of a JSON file.
#[derive(Clone, Debug, PartialEq)]
pub struct RecordedBlock {
    /// 1-based line where the block's `==== Serving Benchmark Result ====` header is (for JSON:
    /// where the block's object starts).
    pub line: usize,
    /// 1-based index of the block in its file.
    pub index: usize,
    /// Free-text lines just before the block that are not key: value lines (e.g. "# Prefill",
    /// "vllm"), nearest last. Only lines since the previous block; never blank or `====` lines.
    pub labels: Vec<String>,
    /// `key: value` lines seen before the block since the previous block (e.g. num_prompts,
    /// seq_length, num_prompt), as raw strings, in file order. For JSON: the object's string and
    /// boolean fields (backend, model_id, date, `request_rate: "inf"` …).
    pub context: Vec<(String, String)>,
    /// Metric values by vLLM JSON key. BTreeMap for deterministic order.
    pub values: BTreeMap<String, f64>,
}

impl RecordedBlock {
    /// The value recorded under vLLM JSON key `key` (e.g. `mean_ttft_ms`), if the block has it.
    pub fn get(&self, key: &str) -> Option<f64> {
        self.values.get(key).copied()
    }

    /// The raw value of the last context entry named `key` (e.g. `num_prompts`), if any.
    pub fn context_value(&self, key: &str) -> Option<&str> {
        self.context
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    fn new(line: usize, index: usize) -> RecordedBlock {
        RecordedBlock {
            line,
            index,
            labels: Vec::new(),
            context: Vec::new(),
            values: BTreeMap::new(),
        }
    }
}

/// Why a recorded-results file could not be read.
#[derive(Debug, thiserror::Error)]
pub enum RecordedError {
    /// The file could not be read at all.
    #[error("{path}: cannot read: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    /// A line the parser does not understand where it needs to.
    #[error("{file}:{line}: expected {expected}, found {text:?}")]
    Syntax {
        file: PathBuf,
        /// 1-based line number.
        line: usize,
        /// The offending line (trimmed, shortened to an excerpt if long).
        text: String,
        /// What would have been accepted there.
        expected: String,
    },
    /// The file parsed but holds no result at all; almost always the wrong file.
    #[error(
        "{file}: no `{HEADER_TITLE}` block (or JSON result object) in {lines} lines: expected at least one"
    )]
    NoBlocks { file: PathBuf, lines: usize },
}

impl RecordedError {
    /// The 1-based line the error points at, where there is one.
    pub fn line(&self) -> Option<usize> {
        match self {
            RecordedError::Syntax { line, .. } => Some(*line),
            RecordedError::Read { .. } | RecordedError::NoBlocks { .. } => None,
        }
    }
}

fn syntax_error(
    file: &Path,
    line: usize,
    text: &str,
    expected: impl Into<String>,
) -> RecordedError {
    RecordedError::Syntax {
        file: file.to_path_buf(),
        line,
        text: excerpt(text.trim(), 0),
        expected: expected.into(),
    }
}

/// At most [`EXCERPT_CHARS_MAX`] characters of `text` around character `center`.
fn excerpt(text: &str, center: usize) -> String {
    let chars = text.chars().count();
    if chars <= EXCERPT_CHARS_MAX {
        return text.to_string();
    }
    let start = center
        .saturating_sub(EXCERPT_CHARS_MAX / 2)
        .min(chars - EXCERPT_CHARS_MAX);
    let body: String = text.chars().skip(start).take(EXCERPT_CHARS_MAX).collect();
    let head = if start > 0 { "…" } else { "" };
    let tail = if start + EXCERPT_CHARS_MAX < chars {
        "…"
    } else {
        ""
    };
    format!("{head}{body}{tail}")
}

/// Parses a file by extension: `.json` as JSON ([`parse_json`]), anything else as printed text
/// ([`parse_text`]).
pub fn parse_file(path: &Path) -> Result<Vec<RecordedBlock>, RecordedError> {
    let text = std::fs::read_to_string(path).map_err(|source| RecordedError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let is_json = path
        .extension()
        .is_some_and(|ext| ext.eq_ignore_ascii_case("json"));
    if is_json {
        parse_json(&text, path)
    } else {
        parse_text(&text, path)
    }
}

/// Parses every `Serving Benchmark Result` block printed in `text`; `file` only names the source
/// in errors and may be any path.
///
/// Lines between blocks become the next block's [`labels`](RecordedBlock::labels) and
/// [`context`](RecordedBlock::context). Errors: a block never closed, a header inside an open
/// block, a line inside a block that is not a known `Label: number` line or a section header
/// (blank lines included), a number that does not parse, a metric twice in one block, and a
/// text with no block at all.
pub fn parse_text(text: &str, file: &Path) -> Result<Vec<RecordedBlock>, RecordedError> {
    // Editors on Windows may prepend a byte-order mark; it is not part of the first line.
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut blocks: Vec<RecordedBlock> = Vec::new();
    // Labels and context gathered since the previous block: they belong to the next one.
    let mut pending = RecordedBlock::new(0, 0);
    let mut open: Option<RecordedBlock> = None;
    let mut lines_total = 0;
    for (i, raw) in text.lines().enumerate() {
        let line_no = i + 1;
        lines_total = line_no;
        // `trim` also drops the `\r` of CRLF files and vLLM's padding spaces.
        let line = raw.trim();
        let Some(block) = open.as_mut() else {
            if is_header(line) {
                let mut block = std::mem::replace(&mut pending, RecordedBlock::new(0, 0));
                block.line = line_no;
                block.index = blocks.len() + 1;
                open = Some(block);
            } else if line.is_empty() || is_rule(line, '=') || is_rule(line, '-') {
                // Decoration, not a label.
            } else if let Some((key, value)) = context_pair(line) {
                pending.context.push((key.to_string(), value.to_string()));
            } else {
                pending.labels.push(line.to_string());
            }
            continue;
        };
        if is_rule(line, '=') {
            blocks.extend(open.take());
        } else if is_header(line) {
            return Err(syntax_error(
                file,
                line_no,
                line,
                format!(
                    "the closing `=====` line of the block opened on line {}",
                    block.line
                ),
            ));
        } else if is_section_header(line) {
            // Metric labels name their section themselves (`Mean TTFT (ms)`), so the section
            // titles carry nothing to check against.
        } else {
            let (key, value) = metric_line(line).map_err(|expected| {
                syntax_error(
                    file,
                    line_no,
                    line,
                    format!("{expected} (in the block opened on line {})", block.line),
                )
            })?;
            // Counts, durations, rates and latencies: a negative one is a broken file.
            if value.is_nan() || value < 0.0 {
                return Err(syntax_error(file, line_no, line, "a measurement that is not negative"));
            }
            if block.values.contains_key(&key) {
                return Err(syntax_error(
                    file,
                    line_no,
                    line,
                    format!(
                        "each metric once per block, but `{key}` is already set in the block opened on line {}",
                        block.line
                    ),
                ));
            }
            block.values.insert(key, value);
        }
    }
    if let Some(block) = open {
        let header = text.lines().nth(block.line - 1).unwrap_or_default();
        return Err(syntax_error(
            file,
            block.line,
            header,
            "a closing `=====` line for this block before the end of the file",
        ));
    }
    if blocks.is_empty() {
        return Err(RecordedError::NoBlocks {
            file: file.to_path_buf(),
            lines: lines_total,
        });
    }
    Ok(blocks)
}

/// `============ Serving Benchmark Result ============` (any number of `=`).
fn is_header(line: &str) -> bool {
    line.starts_with('=') && line.trim_matches('=').trim() == HEADER_TITLE
}

/// A line made only of `fill` (the block's closing line for `=`).
fn is_rule(line: &str, fill: char) -> bool {
    !line.is_empty() && line.chars().all(|c| c == fill)
}

/// `---------------Time to First Token----------------`: dashes around a title.
fn is_section_header(line: &str) -> bool {
    line.starts_with('-') && line.ends_with('-') && !line.trim_matches('-').trim().is_empty()
}

/// `num_prompts: 1, 2, 4` or `num_prompt:1` outside a block: a key that looks like an
/// identifier, so prose with a colon (`# Note: …`, a command line with a URL) stays a label.
fn context_pair(line: &str) -> Option<(&str, &str)> {
    let (key, value) = line.split_once(':')?;
    let key = key.trim();
    let identifier = !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
    let value = value.trim();
    // `http://host` is a URL, not a setting called `http`.
    (identifier && !value.starts_with("//")).then_some((key, value))
}

/// A metric line inside a block → (JSON key, value); `Err` says what was expected instead.
fn metric_line(line: &str) -> Result<(String, f64), String> {
    let Some((label, value_text)) = line.split_once(':') else {
        return Err(EXPECTED_IN_BLOCK.to_string());
    };
    let label = label.trim();
    let Some(key) = metric_key(label) else {
        return Err(format!(
            "{EXPECTED_IN_BLOCK}; `{label}` is not a label vLLM prints"
        ));
    };
    let value_text = value_text.trim();
    // Rust's parser also takes `nan` and `inf`, which Python prints for non-finite values.
    let value = value_text
        .parse::<f64>()
        .map_err(|_| format!("a number after `{label}:`, not `{value_text}`"))?;
    Ok((key, value))
}

/// The `--save-result` key of a printed label: a totals line from [`TOTALS`], or a latency line
/// `{Mean|Median|P<p>} {TTFT|TPOT|ITL|E2EL} (ms)` → `{mean|median|p<p>}_{metric}_ms`, with `p`
/// spelled as vLLM spells it ([`percentile_label`]).
fn metric_key(label: &str) -> Option<String> {
    if let Some(&(_, key)) = TOTALS.iter().find(|&&(printed, _)| printed == label) {
        return Some(key.to_string());
    }
    let (stat, name) = label.strip_suffix(" (ms)")?.split_once(' ')?;
    let metric = LatencyMetric::ALL
        .into_iter()
        .find(|m| m.key().to_ascii_uppercase() == name)?;
    let stat = match stat {
        "Mean" => "mean".to_string(),
        "Median" => "median".to_string(),
        _ => {
            let p: f64 = stat.strip_prefix('P')?.parse().ok()?;
            if !(0.0..=100.0).contains(&p) {
                return None;
            }
            format!("p{}", percentile_label(p))
        }
    };
    Some(format!("{stat}_{}_ms", metric.key()))
}

/// Parses vLLM `--save-result` JSON: one result object, a JSON array of them, or servesim's own
/// `summary.json` (`{"results": [...]}`, each element one block); `file` only names the source in
/// errors.
///
/// Numeric fields become [`values`](RecordedBlock::values) under their own key; string and
/// boolean fields become [`context`](RecordedBlock::context); arrays (`ttfts`, `itls`,
/// `input_lens` …), nested objects and nulls are skipped. Python writes non-finite floats as
/// `NaN`/`Infinity`, which is not JSON; they are read as null (so skipped), as servesim writes
/// them.
pub fn parse_json(text: &str, file: &Path) -> Result<Vec<RecordedBlock>, RecordedError> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let text = python_literals_to_null(text);
    let root: Value =
        serde_json::from_str(&text).map_err(|error| json_error(&text, file, &error))?;
    let lines = ValueLines::scan(&text);
    let line_text = |line: usize| text.lines().nth(line.saturating_sub(1)).unwrap_or_default();

    let items: Vec<(usize, &Value)> = match &root {
        Value::Array(items) => items
            .iter()
            .enumerate()
            .map(|(i, v)| (lines.element(i), v))
            .collect(),
        Value::Object(map) if map.get("results").is_some_and(Value::is_array) => map["results"]
            .as_array()
            .into_iter()
            .flatten()
            .enumerate()
            .map(|(i, v)| (lines.result(i), v))
            .collect(),
        Value::Object(_) => vec![(lines.top, &root)],
        _ => {
            return Err(syntax_error(
                file,
                lines.top,
                line_text(lines.top),
                "a JSON object, an array of objects or servesim's {\"results\": [...]}",
            ));
        }
    };
    let mut blocks = Vec::with_capacity(items.len());
    for (i, (line, item)) in items.into_iter().enumerate() {
        let Value::Object(fields) = item else {
            return Err(syntax_error(
                file,
                line,
                line_text(line),
                "a JSON object holding one benchmark result",
            ));
        };
        let mut block = RecordedBlock::new(line, i + 1);
        for (key, value) in fields {
            match value {
                Value::Number(n) => {
                    // Every JSON number has an f64 reading (large integers lose digits only).
                    if let Some(x) = n.as_f64() {
                        if x < 0.0 {
                            return Err(RecordedError::Syntax {
                                file: file.to_path_buf(),
                                line: block.line,
                                text: format!("\"{key}\": {x}"),
                                expected: "a measurement that is not negative".into(),
                            });
                        }
                        block.values.insert(key.clone(), x);
                    }
                }
                Value::String(s) => block.context.push((key.clone(), s.clone())),
                Value::Bool(b) => block.context.push((key.clone(), b.to_string())),
                Value::Null | Value::Array(_) | Value::Object(_) => {}
            }
        }
        blocks.push(block);
    }
    if blocks.is_empty() {
        return Err(RecordedError::NoBlocks {
            file: file.to_path_buf(),
            lines: text.lines().count(),
        });
    }
    Ok(blocks)
}

/// A serde_json error as a [`RecordedError::Syntax`] naming its line, with an excerpt around the
/// column (the line may be the whole file).
fn json_error(text: &str, file: &Path, error: &serde_json::Error) -> RecordedError {
    let line = error.line().max(1);
    let column = error.column();
    let message = error.to_string();
    // serde_json appends " at line L column C"; the line is reported separately.
    let message = message
        .rsplit_once(" at line ")
        .map_or(message.as_str(), |(head, _)| head);
    let line_text = text.lines().nth(line - 1).unwrap_or_default();
    RecordedError::Syntax {
        file: file.to_path_buf(),
        line,
        text: excerpt(line_text.trim_end(), column.saturating_sub(1)),
        expected: format!("valid JSON ({message} at column {column})"),
    }
}

/// Replaces Python's `NaN`, `Infinity` and `-Infinity` (outside strings) by `null`, so that
/// serde_json, which follows the JSON spec, reads files Python's `json.dump` wrote. Only ASCII
/// is replaced, so line numbers are kept.
fn python_literals_to_null(text: &str) -> Cow<'_, str> {
    if !text.contains("NaN") && !text.contains("Infinity") {
        return Cow::Borrowed(text);
    }
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    let mut in_string = false;
    let mut escaped = false;
    'bytes: while i < bytes.len() {
        let b = bytes[i];
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
        } else if b == b'"' {
            in_string = true;
        } else {
            for literal in ["-Infinity", "Infinity", "NaN"] {
                if bytes[i..].starts_with(literal.as_bytes()) {
                    out.extend_from_slice(b"null");
                    i += literal.len();
                    continue 'bytes;
                }
            }
        }
        out.push(b);
        i += 1;
    }
    // Only whole ASCII sequences were replaced, so multi-byte characters are intact.
    Cow::Owned(String::from_utf8(out).expect("ASCII-only replacement keeps UTF-8 valid"))
}

/// The 1-based lines where the values that become blocks start, found by scanning valid JSON
/// (serde_json's `Value` keeps no positions).
#[derive(Debug, Default)]
struct ValueLines {
    /// The top-level value.
    top: usize,
    /// Each element of a top-level array.
    elements: Vec<usize>,
    /// Each element of the array under the top-level key `results`.
    results: Vec<usize>,
}

impl ValueLines {
    fn element(&self, i: usize) -> usize {
        self.elements.get(i).copied().unwrap_or(self.top)
    }

    fn result(&self, i: usize) -> usize {
        self.results.get(i).copied().unwrap_or(self.top)
    }

    /// One pass over `text`, which must already be valid JSON (strings hold no raw newlines).
    fn scan(text: &str) -> ValueLines {
        enum Frame {
            Array,
            /// `key` is the last key read; `expect_key` is true after `{` and `,`.
            Object {
                key: String,
                expect_key: bool,
            },
        }
        let bytes = text.as_bytes();
        let mut found = ValueLines {
            top: 1,
            ..ValueLines::default()
        };
        let mut stack: Vec<Frame> = Vec::new();
        let mut line = 1;
        let mut i = 0;
        while i < bytes.len() {
            let b = bytes[i];
            match b {
                b'\n' => line += 1,
                b' ' | b'\t' | b'\r' | b':' => {}
                b',' => {
                    if let Some(Frame::Object { expect_key, .. }) = stack.last_mut() {
                        *expect_key = true;
                    }
                }
                b']' | b'}' => {
                    stack.pop();
                }
                _ => {
                    if let Some(Frame::Object {
                        key,
                        expect_key: expect_key @ true,
                    }) = stack.last_mut()
                    {
                        let end = string_end(bytes, i);
                        *key = text[i + 1..end].to_string();
                        *expect_key = false;
                        i = end + 1;
                        continue;
                    }
                    // A value starts here.
                    match stack.as_slice() {
                        [] => found.top = line,
                        [Frame::Array] => found.elements.push(line),
                        [Frame::Object { key, .. }, Frame::Array] if key == "results" => {
                            found.results.push(line)
                        }
                        _ => {}
                    }
                    match b {
                        b'{' => stack.push(Frame::Object {
                            key: String::new(),
                            expect_key: true,
                        }),
                        b'[' => stack.push(Frame::Array),
                        b'"' => {
                            i = string_end(bytes, i) + 1;
                            continue;
                        }
                        _ => {
                            // A number or literal: runs to the next delimiter.
                            while i < bytes.len()
                                && !matches!(
                                    bytes[i],
                                    b',' | b']' | b'}' | b' ' | b'\t' | b'\r' | b'\n'
                                )
                            {
                                i += 1;
                            }
                            continue;
                        }
                    }
                }
            }
            i += 1;
        }
        found
    }
}

/// Index of the quote that closes the string opening at `bytes[open]` (or the end of `bytes`).
fn string_end(bytes: &[u8], open: usize) -> usize {
    let mut i = open + 1;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' => i += 2,
            b'"' => return i,
            _ => i += 1,
        }
    }
    bytes.len()
}

#[cfg(test)]
mod tests {
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
    fn python_literals_become_null_outside_strings_only() {
        assert_eq!(
            python_literals_to_null(r#"[NaN, -Infinity, Infinity, "NaN \"Infinity\"", 1]"#),
            r#"[null, null, null, "NaN \"Infinity\"", 1]"#
        );
        assert!(matches!(
            python_literals_to_null("[1, 2]"),
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
            expected.contains("`Benchmark length (s)` is not a label vLLM prints"),
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
}
