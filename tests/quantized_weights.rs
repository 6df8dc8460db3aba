//! Quantized weights end to end: a scenario's `model.quantization` and a config's
//! `quantization_config` simulate; a kernel profile, which has no 4-bit rows, leaves 4-bit weights
//! to the roofline and says so; NVFP4 on a GPU without FP4 tensor cores is refused naming the
//! field and its value.

mod common;
use common::{LLAMA_8B_H100, repo, servesim, stderr, stdout, write_file};

/// "Mean TPOT (ms):" of a simulate run.
fn tpot_ms(out: &std::process::Output) -> f64 {
    let text = stdout(out);
    let line = text.lines().find(|l| l.starts_with("Mean TPOT")).unwrap_or_else(|| panic!("{text}"));
    line.split_whitespace().last().unwrap().parse().unwrap()
}

#[test]
fn four_bit_weights_are_flagged_as_roofline_under_a_kernel_profile() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_file(dir.path(), "s.toml", LLAMA_8B_H100);
    let path = path.to_str().unwrap();
    let awq = servesim(&["simulate", path, "--set", "model.quantization=\"awq\"", "--profile", "auto"]);
    assert!(awq.status.success(), "{}", stderr(&awq));
    let err = stderr(&awq);
    assert!(err.contains("kernel profiles have no rows for AWQ 4-bit (group 128) weights") && err.contains("flagged as roofline"), "{err}");
    // Block-scaled FP8 keeps the profile, priced from its per-tensor FP8 rows, and says so.
    let block = servesim(&["simulate", path, "--set", "model.quantization=\"fp8-block\"", "--profile", "auto"]);
    assert!(block.status.success(), "{}", stderr(&block));
    assert!(stderr(&block).contains("per-tensor FP8 GEMM rows"), "{}", stderr(&block));
    // By the roofline, decode steps are faster with 4-bit weights than with bf16.
    let bf16 = servesim(&["simulate", path]);
    let awq = servesim(&["simulate", path, "--set", "model.quantization=\"awq\""]);
    assert!(tpot_ms(&awq) < tpot_ms(&bf16), "{} against {}", tpot_ms(&awq), tpot_ms(&bf16));
}

#[test]
fn nvfp4_needs_fp4_tensor_cores() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_file(dir.path(), "s.toml", LLAMA_8B_H100);
    let path = path.to_str().unwrap();
    let refused = servesim(&["simulate", path, "--set", "model.quantization=\"nvfp4\""]);
    assert_eq!(refused.status.code(), Some(2), "{}", stderr(&refused));
    let err = stderr(&refused);
    assert!(err.contains("`model.quantization` = \"nvfp4\"") && err.contains("H100-SXM lacks") && err.contains("Marlin"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    let b200 = servesim(&["simulate", path, "--set", "model.quantization=\"nvfp4\"", "--set", "hardware.gpu=\"B200\""]);
    assert!(b200.status.success(), "{}", stderr(&b200));
}

/// Mixtral's published config with gpt-oss's MXFP4 block, as a scenario's `hf_config`.
#[test]
fn an_mxfp4_config_simulates() {
    let dir = tempfile::tempdir().unwrap();
    let mut config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(repo().join("tests/data/hf-configs/Mixtral-8x7B.json")).unwrap()).unwrap();
    config["quantization_config"] = serde_json::json!({
        "modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"],
        "quant_method": "mxfp4"
    });
    write_file(dir.path(), "config.json", &config.to_string());
    // An H200, where Mixtral's 93 GB of bf16 weights fit too.
    let text = LLAMA_8B_H100.replace("preset = \"Llama-3.1-8B\"", "hf_config = \"config.json\"").replace("H100-SXM", "H200");
    let path = write_file(dir.path(), "s.toml", &text);
    let out = servesim(&["simulate", path.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let dense = servesim(&["simulate", path.to_str().unwrap(), "--set", "model.quantization=\"none\""]);
    assert!(dense.status.success(), "{}", stderr(&dense));
    assert!(tpot_ms(&out) < tpot_ms(&dense), "{} against {}", tpot_ms(&out), tpot_ms(&dense));
}
