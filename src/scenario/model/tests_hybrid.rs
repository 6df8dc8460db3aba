//! The models whose layers attend differently (gpt-oss, Qwen3-Next, Llama 4) and GLM-4.5:
//! their configs, published sizes and KV-cache layouts.

use super::tests::{real_config, refused_key};
use super::*;
use std::path::Path;

fn read(stem: &str, edit: &dyn Fn(&mut serde_json::Map<String, serde_json::Value>)) -> ModelSpec {
    let mut json: serde_json::Value = serde_json::from_str(&real_config(stem)).unwrap();
    edit(json.as_object_mut().unwrap());
    ModelSpec::from_hf_config_json(&json.to_string(), Path::new("c.json"), stem).unwrap()
}

fn as_is(_: &mut serde_json::Map<String, serde_json::Value>) {}

#[test]
fn real_configs_read_as_their_presets() {
    for (stem, preset, edit) in [
        ("GLM-4.5-Air", "GLM-4.5-Air", &as_is as &dyn Fn(&mut _)),
        ("Qwen3-Next-80B-A3B", "Qwen3-Next-80B-A3B", &as_is),
        ("Llama-4-Scout", "Llama-4-Scout", &as_is),
        ("gpt-oss-20b", "gpt-oss-20b", &as_is),
        ("gpt-oss-120b", "gpt-oss-120b", &as_is),
    ] {
        let preset = ModelSpec::preset(preset).unwrap();
        assert_eq!(ModelSpec { name: preset.name.clone(), ..read(stem, edit) }, preset, "{stem}");
    }
}

fn within(actual: u64, published: f64, tolerance: f64) -> bool {
    (actual as f64 / published - 1.0).abs() <= tolerance
}

/// Published sizes, each from its model card: gpt-oss 20.91B and 116.83B total, 3.61B and 5.13B
/// active, counting the embedding but not the unembedding (OpenAI's gpt-oss model card, table
/// 1); the preset leaves out biases and sinks (0.03%). Qwen3-Next-80B-A3B "80B in total and 3B
/// activated" (without embeddings). Llama 4 Scout 17B active of 109B, the vision encoder
/// included (its model card); the text model is 107.8B. GLM-4.5-Air 106B total, 12B active.
#[test]
fn presets_count_their_published_parameters() {
    let count = |name: &str| {
        let m = ModelSpec::preset(name).unwrap();
        let table = m.vocab_size as u64 * m.hidden_size as u64;
        (m.param_count(), m.active_param_count(), table)
    };
    let (total, active, table) = count("gpt-oss-20b");
    assert_eq!(total, 20_907_927_360);
    assert!(within(total, 20.91e9, 0.001) && within(active - table, 3.61e9, 0.002), "{total} {active}");
    let (total, active, table) = count("gpt-oss-120b");
    assert!(within(total, 116.83e9, 0.001) && within(active - table, 5.13e9, 0.002), "{total} {active}");
    let (total, active, table) = count("Qwen3-Next-80B-A3B");
    assert_eq!(total, 79_674_286_848);
    assert!(within(total, 80e9, 0.01) && within(active - 2 * table, 3e9, 0.1), "{total} {active}");
    let (total, active, _) = count("Llama-4-Scout");
    assert!(within(total, 109e9, 0.015) && within(active, 17e9, 0.02), "{total} {active}");
    let (total, active, table) = count("GLM-4.5-Air");
    assert!(within(total, 106e9, 0.01) && within(active - 2 * table, 12e9, 0.02), "{total} {active}");
}

/// One Gated DeltaNet layer of Qwen3-Next by hand: in_proj_qkvz 2048 × (2·2048 + 2·4096),
/// in_proj_ba 2048 × 64, out_proj 4096 × 2048, the convolution 8192 × 4, A_log and dt_bias 32
/// each, the gated norm 128. Its state per sequence in bf16: conv 8192 × 3, recurrent
/// 32 × 128 × 128.
#[test]
fn a_gated_deltanet_layer_by_hand() {
    let linear = ModelSpec::preset("Qwen3-Next-80B-A3B").unwrap().attention.linear.unwrap();
    assert_eq!(linear.weight_elements_per_gpu(2048, 1), 2048 * 12288 + 2048 * 64 + 4096 * 2048 + 8192 * 4 + 64 + 128);
    assert_eq!(linear.state_bytes_per_gpu(1, 2), (8192 * 3 + 32 * 128 * 128) * 2);
    assert_eq!(linear.state_bytes_per_gpu(4, 2), (2048 * 3 + 8 * 128 * 128) * 2);
}

/// vLLM's hybrid layout, by hand (see `kv_layout`'s documentation for the source).
#[test]
fn hybrid_kv_layouts_by_hand() {
    // gpt-oss-20b: 12 full and 12 sliding layers, two groups of 12. A token of one layer:
    // 8 KV heads × 64 × 2 (K, V) × 2 bytes. A sliding group holds ⌈127 / 16⌉ + 1 blocks.
    let oss = ModelSpec::preset("gpt-oss-20b").unwrap();
    assert_eq!(oss.kv_layout(1, 16), KvLayout { block_size: 16, block_bytes: 16 * 2048 * 12, blocks_per_seq: 9 });
    // At TP 8 each GPU keeps one KV head; blocks of 32 tokens hold the window in ⌈127/32⌉ + 1.
    assert_eq!(oss.kv_layout(8, 32), KvLayout { block_size: 32, block_bytes: 32 * 256 * 12, blocks_per_seq: 5 });
    // Without the hybrid layout every layer would keep every token.
    assert_eq!(oss.kv_bytes_per_token_per_gpu(1), 24 * 2048);

    // Qwen3-Next: 12 full, 36 linear, so four groups of 12. A state of 1,097,728 bytes needs an
    // attention page of 16 · ⌈1,097,728 / (16 · 2048)⌉ = 544 tokens (vLLM logs "Setting attention
    // block size to 544 tokens"); each sequence holds 3 state blocks.
    let next = ModelSpec::preset("Qwen3-Next-80B-A3B").unwrap();
    assert_eq!(next.kv_layout(1, 16), KvLayout { block_size: 544, block_bytes: 544 * 2048 * 12, blocks_per_seq: 3 });
    // At TP 4: one KV head per GPU (1,024 bytes a token) and a state of 274,432 bytes: 272 tokens.
    assert_eq!(next.kv_layout(4, 16), KvLayout { block_size: 272, block_bytes: 272 * 1024 * 12, blocks_per_seq: 3 });
    // A block size already larger is kept.
    assert_eq!(next.kv_layout(1, 1024).block_size, 1024);

    // Llama 4's chunked layers: vLLM turns the hybrid manager off, so every layer keeps every token.
    let scout = ModelSpec::preset("Llama-4-Scout").unwrap();
    assert_eq!(scout.kv_layout(8, 16), KvLayout { block_size: 16, block_bytes: 16 * 48 * 512, blocks_per_seq: 0 });
    let llama = ModelSpec::preset("Llama-3.1-8B").unwrap();
    assert_eq!(llama.kv_layout(1, 16), KvLayout { block_size: 16, block_bytes: 16 * llama.kv_bytes_per_token_per_gpu(1), blocks_per_seq: 0 });
}

/// 12 sliding and 13 full layers (gpt-oss-20b with an EAGLE layer, vLLM's own example) pad to
/// two groups of 13; 4 sliding beside 20 full make groups of 4, five of them full.
#[test]
fn uneven_kinds_group_as_vllm_groups_them() {
    let oss = ModelSpec::preset("gpt-oss-20b").unwrap();
    let eagle = ModelSpec { num_layers: 25, ..oss.clone() };
    assert_eq!(eagle.kv_layout(1, 16), KvLayout { block_size: 16, block_bytes: 16 * 2048 * 13, blocks_per_seq: 9 });
    let few = ModelSpec { attention: AttentionMix { sliding_layers: 4, ..oss.attention }, ..oss };
    // One scheduler block is the five full groups' pool blocks; the one sliding group's 9 pool
    // blocks round up to 2 of them.
    assert_eq!(few.kv_layout(1, 16), KvLayout { block_size: 16, block_bytes: 16 * 2048 * 4 * 5, blocks_per_seq: 2 });
}

#[test]
fn attention_kinds_that_are_not_modelled_are_refused() {
    let edit = |stem: &str, f: &dyn Fn(&mut serde_json::Map<String, serde_json::Value>)| {
        let mut json: serde_json::Value = serde_json::from_str(&real_config(stem)).unwrap();
        json.as_object_mut().unwrap().remove("quantization_config");
        f(json.as_object_mut().unwrap());
        json.to_string()
    };
    let kind = |o: &mut serde_json::Map<_, _>| {
        o["layer_types"][0] = "mamba".into();
    };
    assert_eq!(refused_key(&edit("gpt-oss-20b", &kind)), "layer_types");
    let short = |o: &mut serde_json::Map<_, _>| drop(o.insert("layer_types".into(), serde_json::json!(["sliding_attention", "full_attention", "full_attention"])));
    assert_eq!(refused_key(&edit("gpt-oss-20b", &short)), "layer_types");
    let all_sliding = |o: &mut serde_json::Map<_, _>| drop(o.insert("layer_types".into(), serde_json::json!(vec!["sliding_attention"; 24])));
    assert_eq!(refused_key(&edit("gpt-oss-20b", &all_sliding)), "num_hidden_layers");
    let no_window = |o: &mut serde_json::Map<_, _>| drop(o.remove("sliding_window"));
    let err = ModelSpec::from_hf_config_json(&edit("gpt-oss-20b", &no_window), Path::new("c.json"), "c").unwrap_err();
    assert!(matches!(err, HfConfigError::MissingKey { ref key, .. } if key == "sliding_window"), "{err}");
    // Qwen3-Next's linear layers need their dimensions.
    let no_heads = |o: &mut serde_json::Map<_, _>| drop(o.remove("linear_num_value_heads"));
    let err = ModelSpec::from_hf_config_json(&edit("Qwen3-Next-80B-A3B", &no_heads), Path::new("c.json"), "c").unwrap_err();
    assert!(matches!(err, HfConfigError::MissingKey { ref key, .. } if key == "linear_num_value_heads"), "{err}");
    // Llama 4: a wrapper's vision encoder, and the text model's keys, named inside it.
    let vision = |o: &mut serde_json::Map<_, _>| drop(o.insert("vision_config".into(), serde_json::json!({"hidden_size": 1408})));
    assert_eq!(refused_key(&edit("Llama-4-Scout", &vision)), "vision_config");
    let rope = |o: &mut serde_json::Map<_, _>| drop(o["text_config"].as_object_mut().unwrap().insert("no_rope_layers".into(), serde_json::json!([1, 0])));
    assert_eq!(refused_key(&edit("Llama-4-Scout", &rope)), "text_config.no_rope_layers");
    // A family's keys in another family.
    let chunked_qwen = |o: &mut serde_json::Map<_, _>| drop(o.insert("attention_chunk_size".into(), 8192.into()));
    assert_eq!(refused_key(&edit("Qwen3-Next-80B-A3B", &chunked_qwen)), "attention_chunk_size");
    let twice = |o: &mut serde_json::Map<_, _>| drop(o.insert("experts_per_token".into(), 2.into()));
    assert_eq!(refused_key(&edit("gpt-oss-20b", &twice)), "experts_per_token");
}

/// Llama 4 Maverick's interleaving: experts in every second layer (`interleave_moe_layer_step`
/// 2), dense layers of `intermediate_size_mlp` between them; 128 experts, 24 of them.
#[test]
fn interleaved_dense_layers_are_counted() {
    let maverick = |o: &mut serde_json::Map<String, serde_json::Value>| {
        let text = o["text_config"].as_object_mut().unwrap();
        text.insert("interleave_moe_layer_step".into(), 2.into());
        text.insert("num_local_experts".into(), 128.into());
    };
    let m = read("Llama-4-Scout", &maverick);
    let moe = m.moe.unwrap();
    assert_eq!((moe.dense_layers, moe.dense_ffn_size, moe.num_experts), (24, 16384, 128));
    // Llama 4 Maverick: 400B total, 17B active (its model card), the vision encoder included.
    assert!(within(m.param_count(), 400e9, 0.02) && within(m.active_param_count(), 17e9, 0.03), "{} {}", m.param_count(), m.active_param_count());
    let listed = |o: &mut serde_json::Map<String, serde_json::Value>| {
        o["text_config"].as_object_mut().unwrap().insert("moe_layers".into(), serde_json::json!([1, 3, 1]));
    };
    let mut json: serde_json::Value = serde_json::from_str(&real_config("Llama-4-Scout")).unwrap();
    listed(json.as_object_mut().unwrap());
    assert_eq!(refused_key(&json.to_string()), "text_config.moe_layers");
}
