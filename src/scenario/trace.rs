//! Trace files: recorded request arrivals and lengths, one request per CSV row.
//!
//! ```text
//! arrival_s,input_tokens,output_tokens
//! 0.000,812,143
//! 0.154,1904,27
//! ```
//!
//! `arrival_s` is seconds since the benchmark started (finite, ≥ 0, never decreasing from one row
//! to the next); the token counts are whole numbers ≥ 1. Whitespace around fields is ignored and
//! blank lines are skipped. Every error names the file, the line (1-based, as an editor shows it)
//! and the offending text, because a trace is usually a large file produced by some other tool
//! and the user has to find the bad row.

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};

/// One row of a trace file.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TraceRow {
    pub arrival_s: f64,
    pub input_tokens: u32,
    pub output_tokens: u32,
}

/// The only header accepted, column by column.
pub const HEADER: [&str; 3] = ["arrival_s", "input_tokens", "output_tokens"];

/// Why a trace file was rejected. Messages read `FILE:LINE: what is wrong with VALUE`.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    #[error("{}: cannot read trace file: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },

    #[error("{}:{line}: not UTF-8 text: `{found}`", path.display())]
    NotUtf8 {
        path: PathBuf,
        line: u64,
        found: String,
    },

    #[error(
        "{}:{line}: header must be `arrival_s,input_tokens,output_tokens`, found `{found}`",
        path.display()
    )]
    BadHeader {
        path: PathBuf,
        line: u64,
        found: String,
    },

    #[error(
        "{}:{line}: expected 3 fields (arrival_s,input_tokens,output_tokens), found {fields}: `{found}`",
        path.display()
    )]
    FieldCount {
        path: PathBuf,
        line: u64,
        fields: usize,
        found: String,
    },

    #[error("{}:{line}: {column} `{value}` is not {expected}", path.display())]
    NotANumber {
        path: PathBuf,
        line: u64,
        column: &'static str,
        value: String,
        /// What the column holds, e.g. "a number of seconds".
        expected: &'static str,
    },

    #[error("{}:{line}: arrival_s `{value}` must be finite, not negative and at most 1e9 seconds (servesim's longest run)", path.display())]
    BadArrival {
        path: PathBuf,
        line: u64,
        value: String,
    },

    #[error("{}:{line}: {column} `{value}` must be at least 1", path.display())]
    ZeroTokens {
        path: PathBuf,
        line: u64,
        column: &'static str,
        value: String,
    },

    #[error(
        "{}:{line}: arrival_s `{value}` is earlier than `{previous}` on line {previous_line}; \
         rows must be sorted by arrival time",
        path.display()
    )]
    Backwards {
        path: PathBuf,
        line: u64,
        value: String,
        previous: String,
        previous_line: u64,
    },

    #[error("{}: trace has no requests (a header and at least one row are needed)", path.display())]
    Empty { path: PathBuf },
}

/// Reads and validates the trace file at `path`.
pub fn read_trace(path: &Path) -> Result<Vec<TraceRow>, TraceError> {
    let file = File::open(path).map_err(|source| TraceError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    read_trace_from(BufReader::new(file), path)
}

/// Reads and validates trace text from `reader`; `path` is used only in error messages.
///
/// The format is plain comma-separated numbers, parsed line by line rather than with a general
/// CSV reader so that every error carries the exact physical line number (a general reader skips
/// blank lines without counting them). Quoting is not supported: no field of a trace needs it.
pub fn read_trace_from(mut reader: impl BufRead, path: &Path) -> Result<Vec<TraceRow>, TraceError> {
    let io_error = |source| TraceError::Io {
        path: path.to_path_buf(),
        source,
    };
    // One line buffer reused for every line: no allocation per row.
    let mut bytes = Vec::new();
    let mut line: u64 = 0;
    let mut header_seen = false;
    let mut rows = Vec::new();
    // The previous row's arrival, its text and its line, to report a backwards step.
    let mut previous: Option<(f64, u64)> = None;
    let mut previous_text = String::new();
    loop {
        bytes.clear();
        if reader.read_until(b'\n', &mut bytes).map_err(io_error)? == 0 {
            break;
        }
        line += 1;
        let text = std::str::from_utf8(&bytes).map_err(|_| TraceError::NotUtf8 {
            path: path.to_path_buf(),
            line,
            found: String::from_utf8_lossy(&bytes).trim().to_string(),
        })?;
        // A byte-order mark, as spreadsheet exports write, is not part of the first column.
        let text = if line == 1 {
            text.trim_start_matches('\u{feff}')
        } else {
            text
        };
        let text = text.trim();
        if text.is_empty() {
            continue;
        }
        let mut fields = [""; 3];
        let mut count = 0;
        for field in text.split(',') {
            if count < fields.len() {
                fields[count] = field.trim();
            }
            count += 1;
        }

        if !header_seen {
            if count != HEADER.len() || fields != HEADER {
                return Err(TraceError::BadHeader {
                    path: path.to_path_buf(),
                    line,
                    found: text.to_string(),
                });
            }
            header_seen = true;
            continue;
        }
        if count != HEADER.len() {
            return Err(TraceError::FieldCount {
                path: path.to_path_buf(),
                line,
                fields: count,
                found: text.to_string(),
            });
        }
        let row = parse_row(&fields, line, path)?;
        if let Some((previous_s, previous_line)) = previous
            && row.arrival_s < previous_s
        {
            return Err(TraceError::Backwards {
                path: path.to_path_buf(),
                line,
                value: fields[0].to_string(),
                previous: previous_text,
                previous_line,
            });
        }
        previous = Some((row.arrival_s, line));
        previous_text.clear();
        previous_text.push_str(fields[0]);
        rows.push(row);
    }
    if rows.is_empty() {
        return Err(TraceError::Empty {
            path: path.to_path_buf(),
        });
    }
    Ok(rows)
}

/// The first `n` rows of a trace: the requests of a sweep point with `num_prompts = n`.
///
/// # Panics
///
/// If the trace has fewer than `n` rows; scenario validation must reject such a `num_prompts`
/// (silently sending fewer requests would misreport throughput).
pub fn first_rows(rows: &[TraceRow], n: usize) -> &[TraceRow] {
    assert!(
        n <= rows.len(),
        "num_prompts {n} exceeds the trace's {} rows (scenario validation should reject it)",
        rows.len()
    );
    &rows[..n]
}

/// Parses the three trimmed fields of data line `line`.
fn parse_row(fields: &[&str; 3], line: u64, path: &Path) -> Result<TraceRow, TraceError> {
    let arrival_text = fields[0];
    let arrival_s: f64 = arrival_text.parse().map_err(|_| TraceError::NotANumber {
        path: path.to_path_buf(),
        line,
        column: HEADER[0],
        value: arrival_text.to_string(),
        expected: "a number of seconds",
    })?;
    // `>= 0.0` is false for NaN as well as for negatives; `-0.0` is accepted as zero.
    if !(arrival_s.is_finite() && (0.0..=crate::workload::HORIZON_MAX_S).contains(&arrival_s)) {
        return Err(TraceError::BadArrival {
            path: path.to_path_buf(),
            line,
            value: arrival_text.to_string(),
        });
    }
    let tokens = |i: usize| -> Result<u32, TraceError> {
        let text = fields[i];
        let value: u32 = text.parse().map_err(|_| TraceError::NotANumber {
            path: path.to_path_buf(),
            line,
            column: HEADER[i],
            value: text.to_string(),
            expected: "a whole number of tokens",
        })?;
        if value == 0 {
            return Err(TraceError::ZeroTokens {
                path: path.to_path_buf(),
                line,
                column: HEADER[i],
                value: text.to_string(),
            });
        }
        Ok(value)
    };
    // `+ 0.0` turns a `-0` arrival into `+0`, so it prints and compares like zero downstream.
    Ok(TraceRow {
        arrival_s: arrival_s + 0.0,
        input_tokens: tokens(1)?,
        output_tokens: tokens(2)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn write_temp(text: &str) -> tempfile::NamedTempFile {
        let mut file = tempfile::NamedTempFile::new().unwrap();
        file.write_all(text.as_bytes()).unwrap();
        file.flush().unwrap();
        file
    }

    fn read(text: &str) -> (Result<Vec<TraceRow>, TraceError>, tempfile::NamedTempFile) {
        let file = write_temp(text);
        (read_trace(file.path()), file)
    }

    /// Asserts the error's message names the file, the line and the offending text.
    fn assert_message(err: &TraceError, file: &tempfile::NamedTempFile, line: u64, value: &str) {
        let message = err.to_string();
        let location = format!("{}:{line}:", file.path().display());
        assert!(
            message.starts_with(&location),
            "{message:?} should start with {location:?}"
        );
        assert!(
            message.contains(value),
            "{message:?} should contain {value:?}"
        );
    }

    #[test]
    fn good_trace_with_whitespace_blank_lines_and_ties() {
        let text = " arrival_s , input_tokens ,output_tokens\n\
                    0, 10, 5\n\
                    \n\
                    0.25 ,2000,1\r\n\
                    0.25,7,300\n\
                    12.5,1,1";
        let (rows, _file) = read(text);
        let rows = rows.unwrap();
        assert_eq!(
            rows,
            vec![
                TraceRow {
                    arrival_s: 0.0,
                    input_tokens: 10,
                    output_tokens: 5
                },
                TraceRow {
                    arrival_s: 0.25,
                    input_tokens: 2000,
                    output_tokens: 1
                },
                TraceRow {
                    arrival_s: 0.25,
                    input_tokens: 7,
                    output_tokens: 300
                },
                TraceRow {
                    arrival_s: 12.5,
                    input_tokens: 1,
                    output_tokens: 1
                },
            ]
        );
    }

    #[test]
    fn byte_order_mark_before_the_header_is_accepted() {
        let (rows, _file) = read("\u{feff}arrival_s,input_tokens,output_tokens\n1,2,3\n");
        assert_eq!(rows.unwrap().len(), 1);
    }

    #[test]
    fn unreadable_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("missing.csv");
        let err = read_trace(&path).unwrap_err();
        assert!(matches!(err, TraceError::Io { .. }), "{err:?}");
        assert!(err.to_string().contains("missing.csv"), "{err}");

        // A directory opens but cannot be read.
        let err = read_trace(dir.path()).unwrap_err();
        assert!(matches!(err, TraceError::Io { .. }), "{err:?}");
    }

    #[test]
    fn bad_header() {
        let (result, file) = read("time,input_tokens,output_tokens\n0,1,1\n");
        let err = result.unwrap_err();
        assert!(
            matches!(err, TraceError::BadHeader { line: 1, .. }),
            "{err:?}"
        );
        assert_message(&err, &file, 1, "time,input_tokens,output_tokens");

        // A data row where the header should be is also a bad header.
        let (result, file) = read("0,1,1\n");
        assert_message(&result.unwrap_err(), &file, 1, "0,1,1");

        // Columns in another order are rejected, not silently swapped.
        let (result, _file) = read("arrival_s,output_tokens,input_tokens\n0,1,1\n");
        assert!(matches!(result.unwrap_err(), TraceError::BadHeader { .. }));

        // Too many columns.
        let (result, _file) = read("arrival_s,input_tokens,output_tokens,extra\n0,1,1,1\n");
        assert!(matches!(result.unwrap_err(), TraceError::BadHeader { .. }));
    }

    #[test]
    fn not_a_number() {
        let (result, file) = read("arrival_s,input_tokens,output_tokens\n0,1,1\n0.5,abc,1\n");
        let err = result.unwrap_err();
        assert!(
            matches!(
                err,
                TraceError::NotANumber {
                    line: 3,
                    column: "input_tokens",
                    ..
                }
            ),
            "{err:?}"
        );
        assert_message(&err, &file, 3, "`abc`");

        let (result, file) = read("arrival_s,input_tokens,output_tokens\nsoon,1,1\n");
        let err = result.unwrap_err();
        assert!(
            matches!(
                err,
                TraceError::NotANumber {
                    line: 2,
                    column: "arrival_s",
                    ..
                }
            ),
            "{err:?}"
        );
        assert_message(&err, &file, 2, "`soon`");

        // Fractional and negative token counts are not whole numbers of tokens.
        let (result, file) = read("arrival_s,input_tokens,output_tokens\n0,1,2.5\n");
        assert_message(&result.unwrap_err(), &file, 2, "`2.5`");
        let (result, file) = read("arrival_s,input_tokens,output_tokens\n0,-4,2\n");
        assert_message(&result.unwrap_err(), &file, 2, "`-4`");
    }

    #[test]
    fn negative_or_non_finite_arrival() {
        for bad in ["-0.5", "inf", "NaN", "-inf", "1e400"] {
            let (result, file) = read(&format!(
                "arrival_s,input_tokens,output_tokens\n{bad},1,1\n"
            ));
            let err = result.unwrap_err();
            assert!(
                matches!(err, TraceError::BadArrival { line: 2, .. }),
                "{bad}: {err:?}"
            );
            assert_message(&err, &file, 2, bad);
        }
    }

    #[test]
    fn zero_tokens() {
        let (result, file) = read("arrival_s,input_tokens,output_tokens\n0,1,1\n1,5,0\n");
        let err = result.unwrap_err();
        assert!(
            matches!(
                err,
                TraceError::ZeroTokens {
                    line: 3,
                    column: "output_tokens",
                    ..
                }
            ),
            "{err:?}"
        );
        assert_message(&err, &file, 3, "output_tokens `0`");

        let (result, file) = read("arrival_s,input_tokens,output_tokens\n0,0,1\n");
        let err = result.unwrap_err();
        assert!(
            matches!(
                err,
                TraceError::ZeroTokens {
                    line: 2,
                    column: "input_tokens",
                    ..
                }
            ),
            "{err:?}"
        );
        assert_message(&err, &file, 2, "input_tokens `0`");
    }

    #[test]
    fn arrivals_going_backwards() {
        let (result, file) =
            read("arrival_s,input_tokens,output_tokens\n0,1,1\n2.0,1,1\n\n1.5,1,1\n");
        let err = result.unwrap_err();
        assert!(
            matches!(
                err,
                TraceError::Backwards {
                    line: 5,
                    previous_line: 3,
                    ..
                }
            ),
            "{err:?}"
        );
        assert_message(&err, &file, 5, "`1.5`");
        assert!(err.to_string().contains("`2.0` on line 3"), "{err}");
    }

    #[test]
    fn empty_trace() {
        for text in [
            "",
            "arrival_s,input_tokens,output_tokens\n",
            "arrival_s,input_tokens,output_tokens\n\n\n",
        ] {
            let (result, file) = read(text);
            let err = result.unwrap_err();
            assert!(matches!(err, TraceError::Empty { .. }), "{text:?}: {err:?}");
            assert!(
                err.to_string()
                    .starts_with(&file.path().display().to_string()),
                "{err}"
            );
        }
    }

    #[test]
    fn wrong_number_of_fields() {
        let (result, file) = read("arrival_s,input_tokens,output_tokens\n0,1,1\n0,1\n");
        let err = result.unwrap_err();
        assert!(
            matches!(
                err,
                TraceError::FieldCount {
                    line: 3,
                    fields: 2,
                    ..
                }
            ),
            "{err:?}"
        );
        assert_message(&err, &file, 3, "`0,1`");
    }

    #[test]
    fn invalid_utf8_names_the_line() {
        let mut file = tempfile::NamedTempFile::new().unwrap();
        file.write_all(b"arrival_s,input_tokens,output_tokens\n0,1,1\n0,\xff,1\n")
            .unwrap();
        file.flush().unwrap();
        let err = read_trace(file.path()).unwrap_err();
        assert!(
            matches!(err, TraceError::NotUtf8 { line: 3, .. }),
            "{err:?}"
        );
        assert!(
            err.to_string()
                .contains(":3: not UTF-8 text: `0,\u{fffd},1`"),
            "{err}"
        );
    }
}
