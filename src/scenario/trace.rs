//! Trace files: recorded request arrivals and lengths, one request per CSV row.
//!
//! ```text
//! arrival_s,input_tokens,output_tokens
//! 0.000,812,143
//! 0.154,1904,27
//! ```
//!
//! `arrival_s` is seconds since the benchmark started (finite, ≥ 0, never decreasing from one row
//! to the next); the token counts are whole numbers ≥ 1.
//!
//! Two more columns, `prefix_id,prefix_tokens`, may follow, for prefix caching: the prompt's first
//! `prefix_tokens` tokens are the first tokens of shared text number `prefix_id`, so rows with the
//! same `prefix_id` share the shorter of their prefixes (a system prompt, or a conversation whose
//! next turn extends the last). `prefix_tokens` is at most `input_tokens`; 0 shares nothing. Whitespace around fields is ignored and
//! blank lines are skipped. Every error names the file, the line (1-based, as an editor shows it)
//! and the offending text, because a trace is usually a large file produced by some other tool
//! and the user has to find the bad row.

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};

/// One row of a trace file.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct TraceRow {
    pub arrival_s: f64,
    pub input_tokens: u32,
    pub output_tokens: u32,
    /// The shared text the prompt begins with (see the module doc); with `prefix_tokens` 0,
    /// nothing is shared.
    pub prefix_id: u64,
    pub prefix_tokens: u32,
}

/// The header of a trace without prefixes, column by column.
pub const HEADER: [&str; 3] = ["arrival_s", "input_tokens", "output_tokens"];
/// The header of a trace with prefixes.
pub const HEADER_WITH_PREFIX: [&str; 5] = ["arrival_s", "input_tokens", "output_tokens", "prefix_id", "prefix_tokens"];

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
        "{}:{line}: header must be `arrival_s,input_tokens,output_tokens` (optionally followed by \
         `,prefix_id,prefix_tokens`), found `{found}`",
        path.display()
    )]
    BadHeader {
        path: PathBuf,
        line: u64,
        found: String,
    },

    #[error("{}:{line}: expected {expected} fields, as the header has, found {fields}: `{found}`", path.display())]
    FieldCount {
        path: PathBuf,
        line: u64,
        expected: usize,
        fields: usize,
        found: String,
    },

    #[error("{}:{line}: prefix_tokens `{value}` is more than the row's input_tokens `{input}`", path.display())]
    PrefixTooLong {
        path: PathBuf,
        line: u64,
        value: String,
        input: String,
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
    // 3, or 5 with the prefix columns: what the header has, every row must have.
    let mut columns = HEADER.len();
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
        let mut fields = [""; 5];
        let mut count = 0;
        for field in text.split(',') {
            if count < fields.len() {
                fields[count] = field.trim();
            }
            count += 1;
        }

        if !header_seen {
            let plain = count == HEADER.len() && fields[..3] == HEADER;
            let prefixed = count == HEADER_WITH_PREFIX.len() && fields == HEADER_WITH_PREFIX;
            if !(plain || prefixed) {
                return Err(TraceError::BadHeader {
                    path: path.to_path_buf(),
                    line,
                    found: text.to_string(),
                });
            }
            columns = count;
            header_seen = true;
            continue;
        }
        if count != columns {
            return Err(TraceError::FieldCount {
                path: path.to_path_buf(),
                line,
                expected: columns,
                fields: count,
                found: text.to_string(),
            });
        }
        let row = parse_row(&fields[..columns], line, path)?;
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

/// Parses the trimmed fields (three, or five with a prefix) of data line `line`.
fn parse_row(fields: &[&str], line: u64, path: &Path) -> Result<TraceRow, TraceError> {
    let arrival_text = fields[0];
    let arrival_s: f64 = arrival_text.parse().map_err(|_| TraceError::NotANumber {
        path: path.to_path_buf(),
        line,
        column: HEADER[0],
        value: arrival_text.to_string(),
        expected: "a number of seconds",
    })?;
    // `>= 0.0` is false for NaN as well as for negatives; `-0.0` is accepted as zero.
    if !(arrival_s.is_finite() && (0.0..=super::HORIZON_MAX_S).contains(&arrival_s)) {
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
    let input_tokens = tokens(1)?;
    let (prefix_id, prefix_tokens) = if fields.len() == HEADER_WITH_PREFIX.len() {
        let whole = |i: usize, expected: &'static str| -> Result<u64, TraceError> {
            fields[i].parse().map_err(|_| TraceError::NotANumber {
                path: path.to_path_buf(),
                line,
                column: HEADER_WITH_PREFIX[i],
                value: fields[i].to_string(),
                expected,
            })
        };
        let id = whole(3, "a whole number naming a shared text")?;
        // An id of up to 2⁴⁸ keeps it clear of the other kinds of shared text's ids.
        if id >= 1 << 48 {
            return Err(TraceError::NotANumber {
                path: path.to_path_buf(),
                line,
                column: HEADER_WITH_PREFIX[3],
                value: fields[3].to_string(),
                expected: "a whole number below 2^48",
            });
        }
        let prefix = u32::try_from(whole(4, "a whole number of tokens")?).ok().filter(|&p| p <= input_tokens);
        let Some(prefix) = prefix else {
            return Err(TraceError::PrefixTooLong {
                path: path.to_path_buf(),
                line,
                value: fields[4].to_string(),
                input: fields[1].to_string(),
            });
        };
        (id, prefix)
    } else {
        (0, 0)
    };
    // `+ 0.0` turns a `-0` arrival into `+0`, so it prints and compares like zero downstream.
    Ok(TraceRow { arrival_s: arrival_s + 0.0, input_tokens, output_tokens: tokens(2)?, prefix_id, prefix_tokens })
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
                    output_tokens: 5,
                    ..TraceRow::default()
                },
                TraceRow {
                    arrival_s: 0.25,
                    input_tokens: 2000,
                    output_tokens: 1,
                    ..TraceRow::default()
                },
                TraceRow {
                    arrival_s: 0.25,
                    input_tokens: 7,
                    output_tokens: 300,
                    ..TraceRow::default()
                },
                TraceRow {
                    arrival_s: 12.5,
                    input_tokens: 1,
                    output_tokens: 1,
                    ..TraceRow::default()
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
    fn prefix_columns_name_shared_text() {
        let (rows, _file) = read("arrival_s,input_tokens,output_tokens,prefix_id,prefix_tokens\n0,100,5,7,64\n0.5,40,5,7,0\n1,120,5,7,120\n");
        let rows = rows.unwrap();
        assert_eq!(
            rows.iter().map(|r| (r.prefix_id, r.prefix_tokens)).collect::<Vec<_>>(),
            vec![(7, 64), (7, 0), (7, 120)]
        );
        // A row of the wrong width, a prefix longer than the prompt, an id past 2^48, a bad number.
        for (text, line, value) in [
            ("arrival_s,input_tokens,output_tokens,prefix_id,prefix_tokens\n0,100,5\n", 2, "0,100,5"),
            ("arrival_s,input_tokens,output_tokens,prefix_id,prefix_tokens\n0,100,5,1,101\n", 2, "101"),
            ("arrival_s,input_tokens,output_tokens,prefix_id,prefix_tokens\n0,100,5,281474976710656,1\n", 2, "281474976710656"),
            ("arrival_s,input_tokens,output_tokens,prefix_id,prefix_tokens\n0,100,5,x,1\n", 2, "x"),
            ("arrival_s,input_tokens,output_tokens,prefix_id\n0,100,5,1\n", 1, "prefix_id"),
        ] {
            let (result, file) = read(text);
            let err = result.expect_err(text);
            assert_message(&err, &file, line, value);
        }
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
