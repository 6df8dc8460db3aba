//! Weight-only FP8 (`weight_only`) as both cost models price it: here, above them, because
//! the roofline and the calibrated model import `weight_only`, which must not import them back.

use super::weight_only::*;
use super::bundled;
use super::calibrated::Calibrated;
use super::roofline::Roofline;
use super::{CostModel, StepCost};
use crate::calibrate::backend::Peak;
use crate::scenario::model::Dtype;
use crate::scenario::{CostParams, GpuSpec, ModelSpec};
use crate::sched::batch::{Batch, SeqWork};

fn llama_8b(dtype: Dtype) -> ModelSpec {
    let mut model = ModelSpec::preset("Llama-3.1-8B").expect("preset");
    model.weight_dtype = dtype;
    model
}

pub(super) fn gpu(name: &str) -> GpuSpec {
    GpuSpec::preset(name).expect("preset")
}

/// 32 sequences decoding one token each on 1,024 cached tokens: GEMMs of m = 32.
pub(super) fn decode_step() -> Batch {
    let mut batch = Batch::default();
    for seq in 0..32 {
        batch.push(SeqWork { seq, new_tokens: 1, context_tokens: 1024, samples_token: true, draft_tokens: 0 });
    }
    batch
}

/// One 8,192-token prompt: GEMMs of m = 8,192, the A100 profile's largest measured.
pub(super) fn prefill_step() -> Batch {
    let mut batch = Batch::default();
    batch.push(SeqWork { seq: 0, new_tokens: 8192, context_tokens: 0, samples_token: true, draft_tokens: 0 });
    batch
}

/// `(bf16, fp8)` prices of `batch` by the cost model `build` makes for each dtype.
fn both(build: impl Fn(&ModelSpec) -> Box<dyn CostModel>, batch: &Batch) -> (StepCost, StepCost) {
    (build(&llama_8b(Dtype::Bf16)).predict(batch), build(&llama_8b(Dtype::Fp8)).predict(batch))
}

/// Decode reads half the weight bytes; prefill computes in 16 bits, slowed by the conversion.
/// Attention, elementwise work and overheads are the same for both.
fn assert_weight_only(label: &str, build: impl Fn(&ModelSpec) -> Box<dyn CostModel>) {
    let (bf16, fp8) = both(&build, &decode_step());
    eprintln!("{label} decode 32 × 1,024: bf16 {bf16:?}\n  fp8 {fp8:?}");
    assert!(fp8.gemm_ns < bf16.gemm_ns * 3 / 4, "{label}: decode GEMMs {} against bf16 {}", fp8.gemm_ns, bf16.gemm_ns);
    assert!(fp8.total_ns < bf16.total_ns, "{label}: decode step {} against bf16 {}", fp8.total_ns, bf16.total_ns);
    let (bf16, fp8) = both(&build, &prefill_step());
    eprintln!("{label} prefill 8,192: bf16 {bf16:?}\n  fp8 {fp8:?}");
    let ratio = fp8.gemm_ns as f64 / bf16.gemm_ns as f64;
    // The LM head (one sampled row) stays 16-bit, so the layers' GEMMs carry the whole slowdown.
    assert!(ratio > 1.15 && ratio <= MARLIN_FP8_COMPUTE_SLOWDOWN, "{label}: prefill GEMMs {ratio} × bf16");
    assert!(fp8.total_ns > bf16.total_ns, "{label}: prefill step {} against bf16 {}", fp8.total_ns, bf16.total_ns);
    assert_eq!((fp8.attention_ns, fp8.overhead_ns), (bf16.attention_ns, bf16.overhead_ns));
}

#[test]
fn on_an_a100_the_roofline_prices_fp8_weight_only() {
    let a100 = gpu("A100-80G-SXM");
    assert!(runs_weight_only_fp8(&llama_8b(Dtype::Fp8), &a100));
    let params = CostParams::default();
    assert_weight_only("A100 roofline", |model| Box::new(Roofline::new(model, &a100, 1, &params)));
}

#[test]
fn on_an_a100_the_bundled_profile_prices_fp8_weight_only_from_its_bf16_gemms() {
    let a100 = gpu("A100-80G-SXM");
    let profile = bundled::for_gpu(&a100).expect("the A100 profile is bundled").profile();
    let params = CostParams::default();
    assert_weight_only("A100 profile", |model| Box::new(Calibrated::new(profile, model, &a100, 1, &params)));

    // One note says so, instead of one per GEMM priced from the bf16 measurements.
    let fp8 = Calibrated::new(profile, &llama_8b(Dtype::Fp8), &a100, 1, &params);
    let notes = fp8.notices();
    assert_eq!(notes.iter().filter(|n| n.contains("weight-only")).count(), 1, "{notes:#?}");
    assert!(!notes.iter().any(|n| n.contains("no fp8 GEMM")), "{notes:#?}");
    assert!(note(&llama_8b(Dtype::Fp8), &a100).is_some_and(|n| notes.contains(&n)));
    let bf16 = Calibrated::new(profile, &llama_8b(Dtype::Bf16), &a100, 1, &params);
    assert!(!bf16.notices().iter().any(|n| n.contains("weight-only")));
}

/// With FP8 tensor cores nothing changes: FP8 GEMMs at the FP8 peak, and no note.
#[test]
fn on_an_h100_fp8_keeps_the_fp8_peak() {
    let h100 = gpu("H100-SXM");
    let model = llama_8b(Dtype::Fp8);
    assert!(!runs_weight_only_fp8(&model, &h100) && note(&model, &h100).is_none());
    assert_eq!(weight_gemm_peak_flops(&model, &h100), 1978.9e12);
    assert_eq!(weight_gemm_peak_flops(&llama_8b(Dtype::Bf16), &h100), 989.4e12);

    // The roofline's prefill GEMMs are compute-bound: the layers' 2 · 8,192 · 6,979,321,856
    // FLOPs at 70% of 1,978.9 TFLOP/s (the LM head's one row adds 0.3 ms at 16 bits).
    let params = CostParams::default();
    let cost = Roofline::new(&model, &h100, 1, &params).predict(&prefill_step());
    let layers_s = 2.0 * 8192.0 * 6_979_321_856.0 / (1978.9e12 * params.gemm_efficiency);
    let gemm_s = cost.gemm_ns as f64 / super::NS_PER_S;
    assert!(gemm_s > layers_s && gemm_s < layers_s * 1.01, "{gemm_s} s against {layers_s} s");

    let profile = bundled::for_gpu(&h100).expect("the H100 profile is bundled").profile();
    let calibrated = Calibrated::new(profile, &model, &h100, 1, &params);
    assert!(!calibrated.notices().iter().any(|n| n.contains("weight-only")), "{:#?}", calibrated.notices());
}

#[test]
fn the_weight_only_roofline_halves_weight_reads_and_slows_compute() {
    let peak = Peak { flops_per_s: 1e12, memory_bytes_per_s: 1e9 };
    // m = 1, 4096 × 4096: 16,777,216 weight bytes + 16,384 activation bytes, over 1e9 B/s.
    assert_eq!(gemm_roofline_s(1.0, 4096.0, 4096.0, &peak), (16_777_216.0 + 16_384.0) / 1e9);
    // m = 65,536: compute-bound, 2 · m · n · k FLOPs × the slowdown over 1e12 FLOP/s.
    let flops = 2.0 * 65_536.0 * 4096.0 * 4096.0;
    assert_eq!(gemm_roofline_s(65_536.0, 4096.0, 4096.0, &peak), flops * MARLIN_FP8_COMPUTE_SLOWDOWN / 1e12);
}
