//! Multi-head latent attention as the roofline prices it: here, above both, because the
//! roofline imports `mla`, which must not import it back.

use super::mla::{AttentionCounts, MlaAttention};
use crate::cost::roofline::Roofline;
use crate::cost::to_ns;
use crate::scenario::model::ModelSpec;
use crate::scenario::{CostParams, GpuSpec};

/// One decode step of DeepSeek-V3 at TP 8 (16 of the 128 heads per GPU), bf16, 32
/// sequences each with 4,096 tokens cached, by hand:
///
/// - keys: each sequence's one new token attends to 4,096 + 1 keys: 32 × 4,097 = 131,104;
/// - FLOPs per key: 2 × 16 × (512 + 64) scores + 2 × 16 × 512 values = 34,816;
///   per layer 131,104 × 34,816 = 4,564,516,864;
/// - bytes: the latent cache, 131,104 × 576 × 2 = 151,031,808; queries in and outputs out,
///   32 × 16 × (576 + 512) × 2 = 1,114,112; per layer 152,145,920;
/// - on an H100 at the default efficiencies, the memory side is the larger, and the step's
///   attention is 61 layers of it.
#[test]
fn a_deepseek_v3_decode_step_by_hand() {
    let model = ModelSpec::preset("DeepSeek-V3").unwrap();
    let mla = MlaAttention::new(&model.mla.unwrap(), 16.0, 2.0, 2.0);
    let counts = AttentionCounts { decode_keys: 131_104.0, decode_kv_tokens: 131_104.0, decode_queries: 32.0, ..Default::default() };
    let work = mla.work(&counts);
    assert_eq!((work.flops, work.prefix_flops, work.bytes), (4_564_516_864.0, 0.0, 152_145_920.0));

    let gpu = GpuSpec::preset("H100-SXM").unwrap();
    let params = CostParams::default();
    let compute_s = work.flops / (gpu.peak_flops_16bit * params.attention_efficiency);
    let memory_s = work.bytes / (gpu.memory_bandwidth_bytes_per_s * params.memory_bandwidth_efficiency);
    assert!(memory_s > compute_s, "{memory_s} {compute_s}");
    let step = Roofline::new(&model, &gpu, 8, &params).decode_cost(32, 4096);
    assert_eq!(step.attention_ns, to_ns(61.0 * memory_s));

    // The same cache in fp8 is half the bytes; the FLOPs are the same.
    let fp8 = MlaAttention::new(&model.mla.unwrap(), 16.0, 1.0, 2.0).work(&counts);
    assert_eq!((fp8.flops, fp8.bytes), (work.flops, 131_104.0 * 576.0 + 1_114_112.0));
}

/// Prefill decompresses keys and values: per key 2 × 16 × (192 + 128) FLOPs, and its bytes
/// are the latent read plus the decompressed K_nope and V (16 × 256) and the shared k_pe.
#[test]
fn prefill_prices_decompressed_attention() {
    let model = ModelSpec::preset("DeepSeek-V3").unwrap();
    let mla = MlaAttention::new(&model.mla.unwrap(), 16.0, 2.0, 2.0);
    let q = 1000.0;
    let counts = AttentionCounts {
        prefill_keys: q * (q + 1.0) / 2.0,
        prefill_kv_tokens: q,
        prefill_queries: q,
        ..Default::default()
    };
    let work = mla.work(&counts);
    assert_eq!(work.flops, 500_500.0 * 2.0 * 16.0 * 320.0);
    assert_eq!(work.bytes, q * (576.0 * 2.0 + (16.0 * 256.0 + 64.0) * 2.0) + q * 16.0 * 320.0 * 2.0);
}
