//! Running a validated configuration.
