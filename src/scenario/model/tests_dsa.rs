//! DeepSeek-V3.2: its config, preset, published size and KV cache with the indexer's keys.

use super::tests::{real_config, refused_key};
use super::*;
use std::path::Path;

fn edited(edit: &dyn Fn(&mut serde_json::Map<String, serde_json::Value>)) -> String {
    let mut json: serde_json::Value = serde_json::from_str(&real_config("DeepSeek-V3.2")).unwrap();
    edit(json.as_object_mut().unwrap());
    json.to_string()
}

/// The published config reads as the preset, once its block-scaled fp8 weights are taken for
/// the preset's bf16 (every preset is bf16; `quantization = "fp8-block"` serves it as shipped).
#[test]
fn the_published_config_reads_as_the_preset() {
    let bf16 = |o: &mut serde_json::Map<_, _>| drop(o.remove("quantization_config"));
    let read = ModelSpec::from_hf_config_json(&edited(&bf16), Path::new("c.json"), "DeepSeek-V3.2").unwrap();
    assert_eq!(read, ModelSpec::preset("DeepSeek-V3.2").unwrap());
    let shipped = ModelSpec::from_hf_config_json(&real_config("DeepSeek-V3.2"), Path::new("c.json"), "c").unwrap();
    assert_eq!(shipped.weight_dtype, Dtype::Fp8);
    assert_eq!(shipped.dsa, Some(DsaSpec { index_topk: 2048, index_n_heads: 64, index_head_dim: 128 }));
}

/// The indexer's keys belong to `deepseek_v32` alone, and need all three and MLA's query latent.
#[test]
fn indexer_keys_are_refused_outside_deepseek_v32_or_incomplete() {
    let as_v3 = |o: &mut serde_json::Map<_, _>| drop(o.insert("model_type".into(), "deepseek_v3".into()));
    assert_eq!(refused_key(&edited(&as_v3)), "index_topk");
    let err = ModelSpec::from_hf_config_json(&edited(&as_v3), Path::new("d/config.json"), "d").unwrap_err().to_string();
    assert!(err.contains("d/config.json") && err.contains("2048") && err.contains("deepseek_v32"), "{err}");
    let no_heads = |o: &mut serde_json::Map<_, _>| drop(o.remove("index_n_heads"));
    let missing = ModelSpec::from_hf_config_json(&edited(&no_heads), Path::new("c.json"), "c").unwrap_err();
    assert!(matches!(&missing, HfConfigError::MissingKey { key, .. } if key == "index_n_heads"), "{missing}");
    let no_topk = |o: &mut serde_json::Map<_, _>| drop(o.remove("index_topk"));
    let missing = ModelSpec::from_hf_config_json(&edited(&no_topk), Path::new("c.json"), "c").unwrap_err();
    assert!(matches!(&missing, HfConfigError::MissingKey { key, .. } if key == "index_topk"), "{missing}");
    let no_q_latent = |o: &mut serde_json::Map<_, _>| drop(o.remove("q_lora_rank"));
    assert_eq!(refused_key(&edited(&no_q_latent)), "index_topk");
    let zero = |o: &mut serde_json::Map<_, _>| drop(o.insert("index_topk".into(), 0.into()));
    assert_eq!(refused_key(&edited(&zero)), "index_topk");
    let unknown = |o: &mut serde_json::Map<_, _>| drop(o.insert("index_compress_ratio".into(), 4.into()));
    assert_eq!(refused_key(&edited(&unknown)), "index_compress_ratio");
}

/// DeepSeek-V3.2 is DeepSeek-V3 with an indexer in each of its 61 layers. Per layer
/// (vllm/model_executor/models/deepseek_v2.py, class `Indexer`): wq_b 1536 × (64 × 128),
/// wk 7168 × 128 and weights_proj 7168 × 64 (fused in vLLM), and k_norm, a LayerNorm of 128
/// with a bias: 12,582,912 + 917,504 + 458,752 + 256 = 13,959,424. The main model is then
/// 671.88B; the Hub lists deepseek-ai/DeepSeek-V3.2 at 685B, which as for DeepSeek-V3 (671B +
/// 14B, its README_WEIGHTS.md) includes the multi-token-prediction module vLLM does not load
/// with the model.
#[test]
fn deepseek_v3_2_counts_the_indexer_beside_deepseek_v3() {
    let v3 = ModelSpec::preset("DeepSeek-V3").unwrap();
    let v32 = ModelSpec::preset("DeepSeek-V3.2").unwrap();
    let dsa = v32.dsa.unwrap();
    assert_eq!(dsa.weight_elements(7168, &v32.mla.unwrap()), 13_959_424);
    assert_eq!(v32.param_count(), v3.param_count() + 61 * 13_959_424);
    assert_eq!(v32.param_count(), 671_877_929_216);
    assert!((v32.param_count() as f64 / 671e9 - 1.0).abs() < 0.002, "{}", v32.param_count());
    assert!(((v32.param_count() as f64 + 14e9) / 685e9 - 1.0).abs() < 0.002);
    // The indexer is replicated: every GPU holds all of it at any TP.
    let extra = |tp| v32.shard(tp).linear_elements - v3.shard(tp).linear_elements;
    assert_eq!((extra(1), extra(8)), (61 * 13_959_424, 61 * 13_959_424));
    assert_eq!(v32.unprofiled_layers(), Some("DeepSeek sparse attention"));
}

/// vLLM caches per token and layer the latent (576 values in the KV dtype) and the indexer's
/// key, 128 fp8 values and one fp32 scale (`DeepseekV32IndexerCache`: head size
/// 128 + 128 / 128 × 4 uint8), in one group whose page is the sum of both
/// (`UniformTypeKVCacheSpecs`, vllm/v1/kv_cache_interface.py): 61 × (576 × 2 + 132) in bf16.
#[test]
fn the_kv_cache_holds_the_indexer_keys_beside_the_latent() {
    let mut v32 = ModelSpec::preset("DeepSeek-V3.2").unwrap();
    assert_eq!(v32.dsa.unwrap().cache_bytes_per_token(), 132);
    for tp in [1, 8] {
        assert_eq!(v32.kv_bytes_per_token_per_gpu(tp), 61 * 1284);
        assert_eq!(v32.kv_bytes_per_token_per_gpu(tp), 78_324);
    }
    // The indexer's keys are fp8 whatever the latent's dtype.
    v32.kv_dtype = Dtype::Fp8;
    assert_eq!(v32.kv_bytes_per_token_per_gpu(8), 61 * (576 + 132));
    // One group: a block of 16 tokens is 16 of every layer's both pages.
    let layout = v32.kv_layout(8, 16);
    assert_eq!((layout.block_size, layout.block_bytes, layout.blocks_per_seq), (16, 16 * 61 * 708, 0));
}
