//! Random streams.
