//! What every part of resolution shares: the error context that names the scenario file, and the
//! checks whose messages must read the same wherever a field is found wrong.

use crate::scenario::ScenarioError;
use std::fmt::Display;
use std::path::PathBuf;

pub(super) const GIB: f64 = (1u64 << 30) as f64;

/// Error context: the scenario file.
pub(super) struct Cx {
    pub(super) file: PathBuf,
}

impl Cx {
    pub(super) fn invalid(
        &self,
        field: &str,
        value: impl Display,
        reason: impl Into<String>,
    ) -> ScenarioError {
        ScenarioError::Invalid {
            file: self.file.clone(),
            field: field.to_string(),
            value: value.to_string(),
            reason: reason.into(),
        }
    }

    pub(super) fn parse(&self, message: String) -> ScenarioError {
        ScenarioError::Parse {
            file: self.file.clone(),
            message: message.trim_end().to_string(),
        }
    }

    /// Paths in the scenario (HF config, traces) are relative to the scenario file's folder.
    pub(super) fn relative(&self, p: &str) -> PathBuf {
        match self.file.parent() {
            Some(dir) => dir.join(p),
            None => PathBuf::from(p),
        }
    }
}

pub(super) fn quote(s: &str) -> String {
    format!("{s:?}")
}

pub(super) fn gib(bytes: f64) -> String {
    format!("{:.2} GiB", bytes / GIB)
}

/// A count that must be given (else `missing_reason`) and at least 1.
pub(super) fn positive_count(
    cx: &Cx,
    field: &str,
    value: Option<u32>,
    missing_reason: &str,
) -> Result<u32, ScenarioError> {
    match value {
        Some(0) => Err(cx.invalid(field, 0, "must be at least 1")),
        Some(v) => Ok(v),
        None => Err(cx.invalid(field, "(missing)", missing_reason)),
    }
}

/// A count that takes `default` when absent and must be at least 1 when given.
pub(super) fn positive_or(cx: &Cx, field: &str, value: Option<u32>, default: u32) -> Result<u32, ScenarioError> {
    match value {
        Some(0) => Err(cx.invalid(field, 0, "must be at least 1")),
        Some(v) => Ok(v),
        None => Ok(default),
    }
}

/// A field given that the chosen variant (`owner`) does not use is an error, not silently ignored.
pub(super) fn reject_unused_fields(
    cx: &Cx,
    prefix: &str,
    present: &[(&str, Option<String>)],
    allowed: &[&str],
    owner: &str,
) -> Result<(), ScenarioError> {
    match present.iter().find(|(f, v)| v.is_some() && !allowed.contains(f)) {
        Some((f, Some(value))) => Err(cx.invalid(
            &format!("{prefix}.{f}"),
            value,
            format!("not used by {owner}, which takes: {}", allowed.join(", ")),
        )),
        _ => Ok(()),
    }
}

/// A number as an error shows it: as written for everyday sizes, in exponent form beyond (a
/// value of 1e-300 would otherwise print as three hundred zeros).
pub(super) fn number(x: f64) -> String {
    if x == 0.0 || !x.is_finite() || (1e-4..1e15).contains(&x.abs()) { x.to_string() } else { format!("{x:e}") }
}
