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
use super::sglang::{self, TextLine};

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

/// Parses a file by extension: `.json` as JSON ([`parse_json`]), `.jsonl` as one JSON result a
/// line (SGLang's `--output-file`, [`parse_jsonl`]), anything else as printed text
/// ([`parse_text`]).
pub fn parse_file(path: &Path) -> Result<Vec<RecordedBlock>, RecordedError> {
    let text = std::fs::read_to_string(path).map_err(|source| RecordedError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let extension = path.extension().and_then(|e| e.to_str()).map(str::to_ascii_lowercase);
    match extension.as_deref() {
        Some("json") => parse_json(&text, path),
        Some("jsonl") => parse_jsonl(&text, path),
        _ => parse_text(&text, path),
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
        } else if let Some(read) = sglang_line(line) {
            match read.map_err(|expected| syntax_error(file, line_no, line, expected))? {
                TextLine::Context(key, value) => block.context.push((key, value)),
                TextLine::Value(key, value) => insert_value(block, file, line_no, line, key, value)?,
            }
        } else {
            let (key, value) = metric_line(line).map_err(|expected| {
                syntax_error(
                    file,
                    line_no,
                    line,
                    format!("{expected} (in the block opened on line {})", block.line),
                )
            })?;
            insert_value(block, file, line_no, line, key, value)?;
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

/// A printed measurement into its block: never negative (counts, durations, rates and
/// latencies: a negative one is a broken file), and each key once.
fn insert_value(block: &mut RecordedBlock, file: &Path, line_no: usize, line: &str, key: String, value: f64) -> Result<(), RecordedError> {
    if value.is_nan() || value < 0.0 {
        return Err(syntax_error(file, line_no, line, "a measurement that is not negative"));
    }
    if block.values.contains_key(&key) {
        return Err(syntax_error(
            file,
            line_no,
            line,
            format!("each metric once per block, but `{key}` is already set in the block opened on line {}", block.line),
        ));
    }
    block.values.insert(key, value);
    Ok(())
}

/// A line of SGLang's block whose label vLLM never prints ([`sglang::text_line`]), with what
/// was expected instead when its value does not parse.
fn sglang_line(line: &str) -> Option<Result<TextLine, String>> {
    let (label, value) = line.split_once(':')?;
    sglang::text_line(label.trim(), value.trim())
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
            "{EXPECTED_IN_BLOCK}; `{label}` is not a label vLLM or SGLang prints"
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
/// `input_lens` …), nested objects and nulls are skipped. SGLang's names become vLLM's
/// ([`sglang::normalize_record`]). Python writes non-finite floats as `NaN`/`Infinity`, which
/// is not JSON: `NaN` is read as null (so skipped), `Infinity` as the string `"inf"` (so a
/// burst's `request_rate`, which SGLang saves as a float, reads as vLLM's `"inf"`).
pub fn parse_json(text: &str, file: &Path) -> Result<Vec<RecordedBlock>, RecordedError> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let text = python_literals_to_json(text);
    let root: Value =
        serde_json::from_str(&text).map_err(|error| json_error(&text, file, &error))?;
    let lines = ValueLines::scan(&text);
    let line_text = |line: usize| text.lines().nth(line.saturating_sub(1)).unwrap_or_default();

    let items: Vec<(usize, Value)> = match root {
        Value::Array(items) => items
            .into_iter()
            .enumerate()
            .map(|(i, v)| (lines.element(i), v))
            .collect(),
        Value::Object(mut map) if map.get("results").is_some_and(Value::is_array) => match map.remove("results") {
            Some(Value::Array(items)) => items.into_iter().enumerate().map(|(i, v)| (lines.result(i), v)).collect(),
            _ => Vec::new(),
        },
        root @ Value::Object(_) => vec![(lines.top, root)],
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
        blocks.push(result_block(fields, line, i + 1, file)?);
    }
    if blocks.is_empty() {
        return Err(RecordedError::NoBlocks {
            file: file.to_path_buf(),
            lines: text.lines().count(),
        });
    }
    Ok(blocks)
}

/// Parses JSON Lines, one result object a line, as SGLang's `--output-file` appends them (one a
/// run); blank lines are skipped. Each object is read as [`parse_json`] reads one.
pub fn parse_jsonl(text: &str, file: &Path) -> Result<Vec<RecordedBlock>, RecordedError> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut blocks = Vec::new();
    let mut lines_total = 0;
    for (i, raw) in text.lines().enumerate() {
        let line_no = i + 1;
        lines_total = line_no;
        if raw.trim().is_empty() {
            continue;
        }
        let line = python_literals_to_json(raw);
        let value: Value = serde_json::from_str(&line).map_err(|error| {
            let column = error.column();
            let message = error.to_string();
            let message = message.rsplit_once(" at line ").map_or(message.as_str(), |(head, _)| head);
            RecordedError::Syntax {
                file: file.to_path_buf(),
                line: line_no,
                text: excerpt(line.trim_end(), column.saturating_sub(1)),
                expected: format!("one JSON result object on each line ({message} at column {column})"),
            }
        })?;
        let Value::Object(fields) = value else {
            return Err(syntax_error(file, line_no, &line, "one JSON result object on each line"));
        };
        blocks.push(result_block(fields, line_no, blocks.len() + 1, file)?);
    }
    if blocks.is_empty() {
        return Err(RecordedError::NoBlocks { file: file.to_path_buf(), lines: lines_total });
    }
    Ok(blocks)
}

/// One result object as a block: its numbers as values (none negative), its strings and
/// booleans as context, after SGLang's names are made vLLM's.
fn result_block(mut fields: serde_json::Map<String, Value>, line: usize, index: usize, file: &Path) -> Result<RecordedBlock, RecordedError> {
    sglang::normalize_record(&mut fields);
    let mut block = RecordedBlock::new(line, index);
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
                    block.values.insert(key, x);
                }
            }
            Value::String(s) => block.context.push((key, s)),
            Value::Bool(b) => block.context.push((key, b.to_string())),
            Value::Null | Value::Array(_) | Value::Object(_) => {}
        }
    }
    Ok(block)
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

/// Replaces Python's `NaN` (outside strings) by `null`, and its `Infinity` and `-Infinity` by
/// the strings `"inf"` and `"-inf"`, so that serde_json, which follows the JSON spec, reads
/// files Python's `json.dump` wrote. Only ASCII is replaced and no line is split, so line
/// numbers are kept.
fn python_literals_to_json(text: &str) -> Cow<'_, str> {
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
            for (literal, json) in [("-Infinity", "\"-inf\""), ("Infinity", "\"inf\""), ("NaN", "null")] {
                if bytes[i..].starts_with(literal.as_bytes()) {
                    out.extend_from_slice(json.as_bytes());
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
#[path = "recorded_tests.rs"]
mod tests;

#[cfg(test)]
#[path = "recorded_sglang_tests.rs"]
mod sglang_tests;
