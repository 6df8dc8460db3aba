//! Quantization schemes read from `quantization_config`: the bytes of each, and every refusal.

use super::super::tests::{real_config, refused_key};
use super::*;
use serde_json::{Value, json};
use std::path::Path;

/// `stem`'s real config with `edit` applied.
fn edited(stem: &str, edit: impl Fn(&mut Map<String, Value>)) -> String {
    let mut config: Value = serde_json::from_str(&real_config(stem)).unwrap();
    edit(config.as_object_mut().unwrap());
    config.to_string()
}

fn with_quant(stem: &str, quant: Value) -> String {
    edited(stem, |o| drop(o.insert("quantization_config".into(), quant.clone())))
}

fn parse(text: &str) -> ModelSpec {
    ModelSpec::from_hf_config_json(text, Path::new("c.json"), "c").unwrap_or_else(|e| panic!("{e}"))
}

/// Llama-3.1-8B's linear weights (QKV 4096 × 6144, output 4096 × 4096, gate, up and down
/// 4096 × 14336 each, 32 layers): 8,030,261,248 parameters less the two 128,256 × 4096 vocabulary
/// tables and 65 norms of 4096.
const LLAMA_8B_LINEAR: u128 = 32 * (4096 * 6144 + 4096 * 4096 + 3 * 4096 * 14336);
/// Its embedding table, LM head and norms in 16 bits.
const LLAMA_8B_16BIT: u128 = (2 * 128_256 * 4096 + 65 * 4096) * 2;

#[test]
fn llama_8b_weights_under_each_scheme_by_hand() {
    assert_eq!(LLAMA_8B_LINEAR, 6_979_321_856);
    let bytes = |quant: Value| parse(&with_quant("Llama-3.1-8B", quant)).weight_bytes_per_gpu(1) as u128;
    // AWQ: per group of 128, 64 bytes of 4-bit values, a 2-byte fp16 scale and a 4-bit zero:
    // 66.5 bytes, over 54,525,952 groups.
    // As transformers' `AwqConfig` writes it (hugging-quants' Llama-3.1 AWQ checkpoints).
    let awq = json!({"backend": "autoawq", "bits": 4, "do_fuse": false, "exllama_config": null, "fuse_max_seq_len": null, "group_size": 128,
        "modules_to_fuse": null, "modules_to_not_convert": null, "quant_method": "awq", "version": "gemm", "zero_point": true});
    assert_eq!(bytes(awq), 54_525_952 * 133 / 2 + LLAMA_8B_16BIT);
    assert_eq!(54_525_952 * 133 / 2 + LLAMA_8B_16BIT, 5_727_854_592);
    // Symmetric GPTQ: no zeros, 66 bytes a group.
    let gptq = json!({"quant_method": "gptq", "bits": 4, "group_size": 128, "sym": true, "desc_act": true});
    assert_eq!(bytes(gptq), 54_525_952 * 66 + LLAMA_8B_16BIT);
    // NVFP4: 8 bytes of values and a 1-byte E4M3 scale per 16 weights.
    let nvfp4 = json!({"quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 16, "exclude_modules": ["lm_head"]});
    assert_eq!(bytes(nvfp4), LLAMA_8B_LINEAR / 16 * 9 + LLAMA_8B_16BIT);
    // Block-scaled FP8: a byte a weight and a 4-byte scale per 128 × 128 block.
    let block = json!({"quant_method": "fp8", "weight_block_size": [128, 128], "activation_scheme": "dynamic"});
    assert_eq!(bytes(block), LLAMA_8B_LINEAR + LLAMA_8B_LINEAR / 16384 * 4 + LLAMA_8B_16BIT);
    // Per-tensor FP8 is what it was: a byte a weight.
    assert_eq!(bytes(json!({"quant_method": "fp8"})), LLAMA_8B_LINEAR + LLAMA_8B_16BIT);
    // compressed-tensors W4A16 (llm-compressor's pack-quantized, symmetric): GPTQ's bytes.
    let w4a16 = json!({"quant_method": "compressed-tensors", "format": "pack-quantized", "ignore": ["lm_head"],
        "config_groups": {"group_0": {"targets": ["Linear"], "input_activations": null,
            "weights": {"num_bits": 4, "type": "int", "symmetric": true, "strategy": "group", "group_size": 128}}}});
    assert_eq!(bytes(w4a16), 54_525_952 * 66 + LLAMA_8B_16BIT);
}

/// gpt-oss's published config, MXFP4 block and all.
fn gpt_oss(stem: &str) -> ModelSpec {
    parse(&real_config(stem))
}

/// OpenAI's gpt-oss model card (2025-08-05), table 1: checkpoint sizes 12.8 GiB (gpt-oss-20b)
/// and 60.8 GiB (gpt-oss-120b), with MXFP4 experts and everything else in bf16. The biases
/// and attention sinks (about 0.05% of the parameters) are not modelled.
#[test]
fn gpt_oss_mxfp4_weights_match_the_published_checkpoints() {
    let small = gpt_oss("gpt-oss-20b");
    assert_eq!(small.weight_quant, Some(WeightQuant { scheme: QuantScheme::Mxfp4, scope: QuantScope::EXPERTS }));
    assert_eq!(small.weight_dtype, Dtype::Bf16);
    // 24 layers: attention 2880 × (64 + 2 × 8) × 64 + 64 × 64 × 2880 in bf16, the router
    // 2880 × 32 in bf16, 32 experts of 3 × 2880 × 2880 at 4.25 bits; untied vocabulary tables
    // of 201,088 × 2880 and 49 norms in bf16.
    let attention: u64 = 24 * (2880 * 80 * 64 + 64 * 64 * 2880) * 2;
    let router = 24 * 2880 * 32 * 2;
    let experts = 24 * 32 * 3 * 2880 * 2880 * 17 / 32;
    let rest = (2 * 201_088 * 2880 + 49 * 2880) * 2;
    assert_eq!(small.weight_bytes_per_gpu(1), attention + router + experts + rest);
    assert_eq!(small.weight_bytes_per_gpu(1), 13_747_605_120);
    let gib = |bytes: u64| bytes as f64 / (1u64 << 30) as f64;
    assert!((gib(small.weight_bytes_per_gpu(1)) / 12.8 - 1.0).abs() < 0.005, "{}", gib(small.weight_bytes_per_gpu(1)));
    let large = gpt_oss("gpt-oss-120b");
    assert!((gib(large.weight_bytes_per_gpu(1)) / 60.8 - 1.0).abs() < 0.005, "{}", gib(large.weight_bytes_per_gpu(1)));
    // The same model in bf16 would be 2.6 times larger.
    let bf16 = ModelSpec { weight_quant: None, ..small.clone() };
    assert!(bf16.weight_bytes_per_gpu(1) as f64 / small.weight_bytes_per_gpu(1) as f64 > 2.5);
}

/// The MXFP4 block on a config this change parses (Mixtral's), and AWQ over Mixtral's experts.
#[test]
fn quantization_blocks_on_a_mixture_of_experts() {
    let mxfp4 = json!({"modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"], "quant_method": "mxfp4"});
    let mixtral = parse(&with_quant("Mixtral-8x7B", mxfp4));
    let bf16 = ModelSpec::preset("Mixtral-8x7B").unwrap();
    // Only the experts shrink: 32 layers of 8 experts of 3 × 4096 × 14336, from 2 bytes to 17/32.
    let experts = 32 * 8 * 3 * 4096 * 14336u64;
    assert_eq!(bf16.weight_bytes_per_gpu(1) - mixtral.weight_bytes_per_gpu(1), experts * 2 - experts * 17 / 32);
    // AWQ leaves the router (`gate`) 16-bit and quantizes attention and experts.
    let awq = json!({"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": true, "modules_to_not_convert": ["gate"]});
    let quantized = parse(&with_quant("Mixtral-8x7B", awq)).weight_bytes_per_gpu(2);
    let attention = 32 * (4096 * 3072 + 2048 * 4096) as u64; // TP 2: 16 query and 4 KV heads of 128
    let shrunk = (attention + experts / 2) * 2 - (attention + experts / 2) / 128 * 133 / 2;
    assert_eq!(bf16.weight_bytes_per_gpu(2) - quantized, shrunk);
}

#[test]
fn quantization_that_is_not_modelled_is_refused_naming_its_key() {
    let refused = |quant: Value| refused_key(&with_quant("Llama-3.1-8B", quant));
    for method in ["bitsandbytes", "gguf", "exl2", "hqq", "fbgemm_fp8", "experts_int8", "quark", "torchao"] {
        assert_eq!(refused(json!({"quant_method": method})), "quantization_config.quant_method", "{method}");
    }
    for (quant, key) in [
        (json!({"quant_method": "awq", "bits": 4, "new_knob": 1}), "quantization_config.new_knob"),
        (json!({"quant_method": "awq", "bits": 3}), "quantization_config.bits"),
        (json!({"quant_method": "awq", "version": "gemv"}), "quantization_config.version"),
        (json!({"quant_method": "awq", "group_size": 0}), "quantization_config.group_size"),
        (json!({"quant_method": "gptq", "bits": 4, "lm_head": true}), "quantization_config.lm_head"),
        (json!({"quant_method": "gptq", "dynamic": {"-:.*mlp.*": {}}}), "quantization_config.dynamic"),
        (json!({"quant_method": "gptq", "checkpoint_format": "marlin"}), "quantization_config.checkpoint_format"),
        (json!({"quant_method": "gptq", "modules_to_not_convert": ["model.layers.0.mlp"]}), "quantization_config.modules_to_not_convert"),
        (json!({"quant_method": "awq", "modules_to_not_convert": ["model.layers.3.self_attn"]}), "quantization_config.modules_to_not_convert"),
        (json!({"quant_method": "awq", "modules_to_not_convert": ["mlp.down_proj"]}), "quantization_config.modules_to_not_convert"),
        (json!({"quant_method": "fp8", "kv_cache_scheme": {}}), "quantization_config.kv_cache_scheme"),
        (json!({"quant_method": "fp8", "weight_block_size": [128]}), "quantization_config.weight_block_size"),
        // MXFP4 quantizes experts only, and Llama has none.
        (json!({"quant_method": "mxfp4"}), "quantization_config.quant_method"),
        (json!({"quant_method": "mxfp4", "modules_to_not_convert": ["lm_head"], "extra": 1}), "quantization_config.extra"),
        (json!({"quant_method": "modelopt", "quant_algo": "W4A8_AWQ"}), "quantization_config.quant_algo"),
        (json!({"quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 32}), "quantization_config.group_size"),
        (json!({"quant_method": "modelopt", "quant_algo": "NVFP4", "kv_cache_quant_algo": "FP8"}), "quantization_config.kv_cache_quant_algo"),
        (json!({"quant_method": "compressed-tensors"}), "quantization_config.config_groups"),
        (json!({"quant_method": "compressed-tensors", "kv_cache_scheme": {"num_bits": 8}}), "quantization_config.kv_cache_scheme"),
        (json!("fp8"), "quantization_config"),
    ] {
        assert_eq!(refused(quant.clone()), key, "{quant}");
    }
    // compressed-tensors' W8A8 INT8 (SmoothQuant-like) is not modelled; its group names the path.
    let int8 = json!({"quant_method": "compressed-tensors", "config_groups": {"group_0": {"targets": ["Linear"],
        "weights": {"num_bits": 8, "type": "int", "strategy": "channel"},
        "input_activations": {"num_bits": 8, "type": "int", "strategy": "token", "dynamic": true}}}});
    assert_eq!(refused(int8), "quantization_config.config_groups.group_0.weights");
    let unknown_arg = json!({"quant_method": "compressed-tensors", "config_groups": {"g": {"targets": ["Linear"],
        "weights": {"num_bits": 4, "type": "int", "strategy": "group", "group_size": 128, "hadamard": true}}}});
    assert_eq!(refused(unknown_arg), "quantization_config.config_groups.g.weights.hadamard");
    // The message names the file, the key and its value.
    let err = ModelSpec::from_hf_config_json(&with_quant("Llama-3.1-8B", json!({"quant_method": "bitsandbytes"})), Path::new("q/config.json"), "q")
        .unwrap_err()
        .to_string();
    assert!(err.contains("q/config.json") && err.contains("`quantization_config.quant_method` = \"bitsandbytes\""), "{err}");
}

#[test]
fn exclusions_of_whole_attention_layers_keep_them_16_bit() {
    let quant = json!({"quant_method": "modelopt", "quant_algo": "NVFP4", "exclude_modules": ["lm_head", "model.layers.*.self_attn*"]});
    let model = parse(&with_quant("Llama-3.1-8B", quant));
    assert_eq!(model.weight_quant.map(|q| q.scope), Some(QuantScope { attention: false, ..QuantScope::ALL_LINEAR }));
    let attention = 32 * (4096 * 6144 + 4096 * 4096) as u128;
    let mlp = LLAMA_8B_LINEAR - attention;
    assert_eq!(model.weight_bytes_per_gpu(1) as u128, attention * 2 + mlp / 16 * 9 + LLAMA_8B_16BIT);
}
