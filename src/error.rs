//! The library's error type, and the exit code each kind maps to.

use std::path::PathBuf;

use crate::scenario::ScenarioError;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The scenario is malformed or inconsistent.
    #[error(transparent)]
    Scenario(#[from] ScenarioError),
    /// A command-line value is invalid.
    #[error("{flag}: {value:?}: {reason}")]
    Usage { flag: &'static str, value: String, reason: String },
    /// A recorded results file is missing, malformed, or lacks what the scenario asks of it.
    #[error("{0}")]
    Recorded(String),
    /// A run directory given to `report` is missing a file or holds a malformed one (the message
    /// names the file and, where there is one, the line).
    #[error("{0}")]
    Report(String),
    /// A file given to `calibrate import` is missing or malformed (the message names the file,
    /// and the row and column where there is one).
    #[error("{0}")]
    Import(String),
    /// Writing results failed.
    #[error("{path}: cannot write: {source}")]
    Output { path: PathBuf, source: std::io::Error },
    /// A plan ran, and no candidate answers it: the message names the closest miss.
    #[error("{0}")]
    NoAnswer(String),
    /// `bench` ran, and every request of a sweep point failed (the first error is printed).
    #[error("{0}")]
    NothingSucceeded(String),
    /// `bench` could not run its requests (a task ended abnormally).
    #[error("{0}")]
    Bench(String),
}

impl Error {
    /// 2 for bad input (like clap's usage errors), 1 for failures while running (a bench whose
    /// requests all failed included), 3 for a plan that ran and found no configuration meeting
    /// its objectives.
    pub fn exit_code(&self) -> u8 {
        match self {
            Error::Scenario(_) | Error::Usage { .. } | Error::Recorded(_) | Error::Report(_) | Error::Import(_) => 2,
            Error::Output { .. } | Error::NothingSucceeded(_) | Error::Bench(_) => 1,
            Error::NoAnswer(_) => 3,
        }
    }
}
