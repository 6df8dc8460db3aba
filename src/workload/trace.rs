//! Trace files.
