//! Command-line definitions.
