//! What the parts' tests share: a good scenario to vary, and checks that an error names the file, the
//! field and the value.

use crate::scenario::{Scenario, ScenarioError};
use std::path::Path;

pub(super) const FILE: &str = "scenarios/t.toml";

const HEAD: &str = r#"
name = "test"

[model]
preset = "Llama-3.1-8B"

[hardware]
gpu = "H100-SXM"

[engine]
policy = "vllm-v1"

[workload]
num_prompts = [10, 20]
request_rate = 4.0
"#;

const SHAREGPT: &str = r#"
[workload.dataset]
kind = "sharegpt"
input = { dist = "lognormal", mean = 220, std = 250, min = 4, max = 2048 }
output = { dist = "lognormal", mean = 200, std = 200, min = 1, max = 1024 }
"#;

pub(super) fn with_dataset(dataset: &str) -> String {
    format!("{HEAD}\n[workload.dataset]\n{dataset}\n")
}

pub(super) fn good_text() -> String {
    format!("{HEAD}{SHAREGPT}")
}

pub(super) fn load_text(text: &str, sets: &[&str]) -> Result<Scenario, ScenarioError> {
    let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
    Scenario::from_toml_str(text, Path::new(FILE), &sets)
}

pub(super) fn good(sets: &[&str]) -> Scenario {
    load_text(&good_text(), sets).unwrap_or_else(|e| panic!("{sets:?}: {e}"))
}

/// Asserts loading fails with an `Invalid` error on `field` whose value reads `value`, and that
/// the message names the file, the field and the value. Returns the message.
pub(super) fn invalid_in(text: &str, sets: &[&str], field: &str, value: &str) -> String {
    let err = match load_text(text, sets) {
        Ok(_) => panic!("{sets:?} should fail on {field}"),
        Err(e) => e,
    };
    let msg = err.to_string();
    match &err {
        ScenarioError::Invalid {
            file,
            field: f,
            value: v,
            ..
        } => {
            assert_eq!(file, Path::new(FILE), "{msg}");
            assert_eq!(f, field, "{msg}");
            assert_eq!(v, value, "{msg}");
        }
        other => panic!("{sets:?}: expected Invalid on {field}, got {other:?}"),
    }
    assert!(
        msg.contains(FILE) && msg.contains(&format!("`{field}`")) && msg.contains(value),
        "{msg}"
    );
    msg
}

pub(super) fn invalid(sets: &[&str], field: &str, value: &str) -> String {
    invalid_in(&good_text(), sets, field, value)
}
