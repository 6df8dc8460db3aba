//! The raw TOML schema (serde, `deny_unknown_fields`).
