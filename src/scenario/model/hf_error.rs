//! Why a Hugging Face `config.json` could not be used.

use std::path::PathBuf;

impl HfConfigError {
    /// The same error about the key inside `object` (a wrapper's `text_config`).
    pub(super) fn within(self, object: &str) -> HfConfigError {
        match self {
            HfConfigError::MissingKey { file, key } => HfConfigError::MissingKey { file, key: format!("{object}.{key}") },
            HfConfigError::BadValue { file, key, value, reason } => {
                HfConfigError::BadValue { file, key: format!("{object}.{key}"), value, reason }
            }
            other => other,
        }
    }
}

/// Why a Hugging Face `config.json` could not be used. Each names the file.
#[derive(Debug, thiserror::Error)]
pub enum HfConfigError {
    #[error("{}: cannot read: {source}", file.display())]
    Io {
        file: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: not valid JSON: {source}", file.display())]
    Json {
        file: PathBuf,
        source: serde_json::Error,
    },
    #[error("{}: missing key `{key}`", file.display())]
    MissingKey { file: PathBuf, key: String },
    #[error("{}: key `{key}` = {value}: {reason}", file.display())]
    BadValue {
        file: PathBuf,
        key: String,
        value: String,
        reason: String,
    },
}
