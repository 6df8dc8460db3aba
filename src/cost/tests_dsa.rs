//! DeepSeek sparse attention as the roofline prices it: here, above both, because the roofline
//! imports `dsa`, which must not import it back.

use super::dsa::DsaIndexer;
use super::mla::{AttentionCounts, MlaAttention};
use crate::cost::roofline::Roofline;
use crate::cost::to_ns;
use crate::scenario::model::ModelSpec;
use crate::scenario::{CostParams, GpuSpec};
use crate::sched::batch::{Batch, SeqWork};

fn batch(seqs: &[(u32, u32)]) -> Batch {
    let mut batch = Batch::default();
    for (seq, &(new_tokens, context_tokens)) in seqs.iter().enumerate() {
        batch.push(SeqWork { seq: seq as u32, new_tokens, context_tokens, samples_token: true, draft_tokens: 0 });
    }
    batch
}

/// One decode step of DeepSeek-V3.2 at TP 8 (16 of the 128 heads per GPU), bf16, 32 sequences
/// each with 4,096 tokens cached, by hand:
///
/// - MLA: each new token sees 4,097 keys and attends to the top 2,048: 32 × 2,048 = 65,536
///   (query, key) pairs of 2 × 16 × (512 + 64) + 2 × 16 × 512 = 34,816 FLOPs: 2,281,701,376;
///   bytes: each query's chosen latents, 65,536 × 576 × 2 = 75,497,472, and its queries in and
///   outputs out, 32 × 16 × (576 + 512) × 2 = 1,114,112: 76,611,584 (half of DeepSeek-V3's);
/// - the indexer scores all 32 × 4,097 = 131,104 keys at 2 × 64 × 128 = 16,384 FLOPs:
///   2,148,007,936 at the FP8 peak; it reads 131,104 keys of 132 bytes (17,305,728), writes and
///   reads a 4-byte score per key (1,048,832), and per query reads 64 heads of 128 fp8 values
///   with a 4-byte weight each and writes 2,048 4-byte indices: 32 × 16,640 = 532,480;
///   18,887,040 in all;
/// - on an H100 at the default efficiencies both are memory-bound, and the step's attention
///   is 61 layers of the two.
#[test]
fn a_deepseek_v3_2_decode_step_by_hand() {
    let model = ModelSpec::preset("DeepSeek-V3.2").unwrap();
    let gpu = GpuSpec::preset("H100-SXM").unwrap();
    let params = CostParams::default();
    let bytes_per_s = gpu.memory_bandwidth_bytes_per_s * params.memory_bandwidth_efficiency;
    let fp8_flops_per_s = gpu.peak_flops_fp8.unwrap() * params.attention_efficiency;

    let step = batch(&[(1, 4096); 32]);
    let indexer = DsaIndexer::new(&model.dsa.unwrap(), fp8_flops_per_s, bytes_per_s);
    let counts = indexer.counts(&step);
    assert_eq!((counts.visible_keys, counts.kv_tokens, counts.queries), (131_104, 131_104, 32));
    let expected = AttentionCounts { decode_keys: 65_536.0, decode_kv_tokens: 65_536.0, decode_queries: 32.0, ..Default::default() };
    assert_eq!(counts.mla, expected);

    let mla = MlaAttention::new(&model.mla.unwrap(), 16.0, 2.0, 2.0).work(&counts.mla);
    assert_eq!((mla.flops, mla.prefix_flops, mla.bytes), (2_281_701_376.0, 0.0, 76_611_584.0));
    let mla_compute_s = mla.flops / (gpu.peak_flops_16bit * params.attention_efficiency);
    let mla_memory_s = mla.bytes / bytes_per_s;
    assert!(mla_memory_s > mla_compute_s, "{mla_memory_s} {mla_compute_s}");

    let indexer_compute_s = 2_148_007_936.0 / fp8_flops_per_s;
    let indexer_memory_s = 18_887_040.0 / bytes_per_s;
    assert!(indexer_memory_s > indexer_compute_s, "{indexer_memory_s} {indexer_compute_s}");
    let relative = (indexer.time_s(&counts) / indexer_memory_s - 1.0).abs();
    assert!(relative < 1e-12, "{relative}");

    let roofline = Roofline::new(&model, &gpu, 8, &params);
    let priced = roofline.decode_cost(32, 4096).attention_ns;
    assert_eq!(priced, to_ns(61.0 * (mla_memory_s + indexer.time_s(&counts))));
}

/// A prefill of 4,096 tokens from an empty cache: its token p sees p + 1 keys, all of which the
/// indexer scores (4,096 × 4,097 / 2 = 8,390,656), and MLA attends to min(p + 1, 2,048) of
/// them: 2,048 × 2,049 / 2 + 2,048 × 2,048 = 6,292,480, each in the absorbed form.
#[test]
fn prefill_attends_to_the_top_k_keys_in_the_absorbed_form() {
    let model = ModelSpec::preset("DeepSeek-V3.2").unwrap();
    let indexer = DsaIndexer::new(&model.dsa.unwrap(), 1e15, 1e12);
    let counts = indexer.counts(&batch(&[(4096, 0)]));
    assert_eq!((counts.visible_keys, counts.kv_tokens, counts.queries), (8_390_656, 4096, 4096));
    assert_eq!((counts.mla.decode_keys, counts.mla.prefill_keys, counts.mla.prefix_keys), (6_292_480.0, 0.0, 0.0));
    // A chunk on a cached prefix longer than the top-k: every query attends to 2,048 keys.
    let chunk = indexer.counts(&batch(&[(512, 8192)]));
    assert_eq!((chunk.visible_keys, chunk.mla.decode_keys), (512 * 8192 + 512 * 513 / 2, (512 * 2048) as f64));
}

/// At long context MLA's attention grows with every key it reads; DSA's attends to 2,048 keys
/// whatever the context, so only its indexer's share grows.
#[test]
fn at_long_context_only_the_indexer_grows() {
    let gpu = GpuSpec::preset("H200").unwrap();
    let params = CostParams::default();
    let v3 = Roofline::new(&ModelSpec::preset("DeepSeek-V3").unwrap(), &gpu, 8, &params);
    let v32_model = ModelSpec::preset("DeepSeek-V3.2").unwrap();
    let v32 = Roofline::new(&v32_model, &gpu, 8, &params);
    let (short, long) = (8_192, 65_536);
    let attention = |r: &Roofline, context| r.decode_cost(16, context).attention_ns as f64;

    let v3_growth = attention(&v3, long) / attention(&v3, short);
    assert!(v3_growth > 7.0, "{v3_growth}");

    let indexer = DsaIndexer::new(
        &v32_model.dsa.unwrap(),
        gpu.peak_flops_fp8.unwrap() * params.attention_efficiency,
        gpu.memory_bandwidth_bytes_per_s * params.memory_bandwidth_efficiency,
    );
    let indexer_s = |context| indexer.time_s(&indexer.counts(&batch(&[(1, context); 16])));
    let growth_ns = attention(&v32, long) - attention(&v32, short);
    let indexer_growth_ns = 61.0 * (indexer_s(long) - indexer_s(short)) * 1e9;
    assert!((growth_ns - indexer_growth_ns).abs() <= 2.0, "{growth_ns} {indexer_growth_ns}");
    // The indexer reads 132 bytes a key against MLA's 1,152: at 64k tokens DSA's attention is
    // a fraction of MLA's.
    assert!(attention(&v32, long) < 0.25 * attention(&v3, long), "{} {}", attention(&v32, long), attention(&v3, long));
    // Below the top-k, the same keys as MLA plus the indexer, and no decompression in prefill.
    assert!(attention(&v32, 1024) > attention(&v3, 1024));
}
