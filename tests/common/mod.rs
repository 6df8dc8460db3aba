//! Helpers shared by the integration tests: run the real binary, write scenario files.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub fn servesim(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_servesim")).args(args).output().expect("run servesim")
}

pub fn stdout(out: &Output) -> String {
    String::from_utf8(out.stdout.clone()).expect("utf-8 stdout")
}

pub fn stderr(out: &Output) -> String {
    String::from_utf8(out.stderr.clone()).expect("utf-8 stderr")
}

/// Writes `text` to `dir/name` and returns the path.
pub fn write_file(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write test file");
    path
}

/// The repository root (where `scenarios/` lives).
pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// A small valid scenario that later tests break one field at a time.
pub const SMALL: &str = r#"
name = "small"

[model]
preset = "Llama-3.2-1B"

[hardware]
gpu = "H100-SXM"

[engine]
policy = "vllm-v1"
max_num_seqs = 16
max_model_len = 4096

[workload]
num_prompts = [4, 16]
request_rate = 8.0
seed = 7

[workload.dataset]
kind = "random"
input_len = 256
output_len = 32
range_ratio = 0.5
"#;
