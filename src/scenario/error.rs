//! Scenario errors: each names the file, the field and the offending value.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    #[error("{file}: cannot read: {source}")]
    Io { file: PathBuf, source: std::io::Error },
    /// TOML syntax errors and schema mismatches (unknown key, wrong type), as the parser words them.
    #[error("{file}: {message}")]
    Parse { file: PathBuf, message: String },
    /// A value that parses but is invalid or inconsistent.
    #[error("{file}: field `{field}` = {value}: {reason}")]
    Invalid { file: PathBuf, field: String, value: String, reason: String },
}
