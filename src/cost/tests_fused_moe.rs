//! A dense model's kernel profile with a mixture of experts' fused-MoE rows
//! ([`super::calibrated::Calibrated::with_fused_moe`]): the routed experts take the measured
//! layer, on a small table whose values are easy to follow by hand.

use super::CostModel;
use super::calibrated::Calibrated;
use crate::calibrate::families::RowSurface;
use crate::cost::bundled;
use crate::scenario::model::ModelSpec;
use crate::scenario::{CostParams, GpuSpec};

/// Mixtral 8×7B's fused-MoE layer at TP 2: 500 µs at 256 tokens, 800 µs at 1,024.
fn table() -> RowSurface {
    RowSurface::new([(256, 0, 500e3), (1024, 0, 800e3)].into_iter()).unwrap()
}

fn mixtral_on_h100(skew: f64, expert_parallel: bool) -> (Calibrated, ModelSpec) {
    let gpu = GpuSpec::preset("H100-SXM").unwrap();
    let mut model = ModelSpec::preset("Mixtral-8x7B").unwrap();
    let moe = model.moe.as_mut().unwrap();
    (moe.routing_skew, moe.expert_parallel) = (skew, expert_parallel);
    let index = bundled::for_policy(&gpu, "vllm-v1").expect("a bundled H100 profile").index.clone();
    (Calibrated::from_index(index, &model, &gpu, 2, &CostParams::default()), model)
}

/// A 512-token prefill sits halfway between the rows in ln tokens, so each of the 32 layers'
/// experts takes √(500 × 800) = 632.5 µs: 20.24 ms, not the grouped GEMMs' time. The step's
/// GEMM time grows by exactly the difference, the router and the other projections unchanged.
#[test]
fn the_routed_experts_of_a_prefill_step_are_the_measured_fused_layer_by_hand() {
    let (grouped, _) = mixtral_on_h100(0.0, false);
    let fused = grouped.clone().with_fused_moe(table());
    let by_hand = 32.0 * (500e-6f64 * 800e-6).sqrt();
    assert!((fused.routed_experts_s(512.0) - by_hand).abs() < 1e-9, "{}", fused.routed_experts_s(512.0));
    let before = grouped.routed_experts_s(512.0);
    assert!((before - by_hand).abs() > 1e-4, "the grouped GEMMs price it apart: {before}");

    let mut batch = crate::sched::batch::Batch::default();
    batch.push(crate::sched::batch::SeqWork { seq: 0, new_tokens: 512, context_tokens: 0, samples_token: true, draft_tokens: 0 });
    let (a, b) = (grouped.predict(&batch).gemm_ns as f64, fused.predict(&batch).gemm_ns as f64);
    assert!(((b - a) * 1e-9 - (by_hand - before)).abs() < 1e-6, "{a} → {b}");
}

/// The rows route evenly; a skewed model keeps their level and takes the skew's effect from
/// the grouped GEMMs: the measured layer × (skewed ÷ even grouped time). Under expert
/// parallelism the GPU with the popular experts finishes last.
#[test]
fn a_routing_skew_scales_the_measured_layer_by_the_grouped_ratio() {
    let (even, _) = mixtral_on_h100(0.0, true);
    let (skewed, _) = mixtral_on_h100(1.0, true);
    let ratio = skewed.routed_experts_s(2048.0) / even.routed_experts_s(2048.0);
    assert!(ratio > 1.01, "a skew of 1 slows the layer: {ratio}");
    let measured = 32.0 * 800e-6 * 2.0; // above the last row, linear in tokens
    let priced = skewed.with_fused_moe(table()).routed_experts_s(2048.0);
    assert!((priced - measured * ratio).abs() < 1e-9, "{priced} against {}", measured * ratio);
}
