//! Quantized weights (`quant`) as the roofline prices them: here, above the cost models, as
//! `tests` is for weight-only FP8. How a run with a kernel profile flags them:
//! `tests/quantized_weights.rs`.

use super::quant::{WEIGHT_ONLY_COMPUTE_SLOWDOWN, WeightPart, gemm_rate};
use super::roofline::Roofline;
use super::{CostModel, StepCost};
use crate::scenario::model::{Dtype, WeightQuant};
use crate::scenario::{CostParams, GpuSpec, ModelSpec};
use super::tests::{decode_step, gpu, prefill_step};
use crate::sched::batch::Batch;

fn model(preset: &str, scheme: &str) -> ModelSpec {
    let mut model = ModelSpec::preset(preset).expect("preset");
    model.weight_quant = WeightQuant::from_scenario_name(scheme).expect("a scheme");
    if let Some(quant) = model.weight_quant {
        model.weight_dtype = quant.scheme.weight_dtype(Dtype::Bf16);
    }
    model
}

fn price(model: &ModelSpec, gpu: &GpuSpec, batch: &Batch) -> StepCost {
    Roofline::new(model, gpu, 1, &CostParams::default()).predict(batch)
}

/// AWQ on an H100: a 32-sequence decode step reads 0.52 bytes a weight where bf16 reads 2 (the
/// LM head stays 16-bit), so its GEMMs take under 40% of bf16's; an 8,192-token prefill is
/// compute-bound and multiplies at the 16-bit peak slowed by the conversion, never faster.
#[test]
fn four_bit_weight_only_decode_is_cheaper_than_bf16_and_prefill_is_not() {
    let h100 = gpu("H100-SXM");
    let bf16 = ModelSpec::preset("Llama-3.1-8B").unwrap();
    for scheme in ["awq", "gptq"] {
        let quantized = model("Llama-3.1-8B", scheme);
        let (q, b) = (price(&quantized, &h100, &decode_step()), price(&bf16, &h100, &decode_step()));
        let ratio = q.gemm_ns as f64 / b.gemm_ns as f64;
        assert!(ratio < 0.4, "{scheme} decode GEMMs {ratio} × bf16");
        assert_eq!(q.attention_ns, b.attention_ns, "{scheme}");
        let (q, b) = (price(&quantized, &h100, &prefill_step()), price(&bf16, &h100, &prefill_step()));
        let ratio = q.gemm_ns as f64 / b.gemm_ns as f64;
        assert!((1.15..=WEIGHT_ONLY_COMPUTE_SLOWDOWN).contains(&ratio), "{scheme} prefill GEMMs {ratio} × bf16");
    }
}

/// MXFP4 reads 0.53 bytes an expert weight and leaves attention and the router 16-bit; on every
/// GPU its experts multiply at the 16-bit peak, slowed (vLLM's default backends are W4A16: Marlin,
/// OpenAI's Triton kernels, FlashInfer's MXFP4 × bf16 on Blackwell).
#[test]
fn mxfp4_experts_read_4_bit_weights_and_multiply_in_16_bits() {
    let mixtral = model("Mixtral-8x7B", "mxfp4");
    for name in ["H100-SXM", "H200", "A100-80G-SXM", "B200"] {
        let gpu = gpu(name);
        let bf16 = gpu.peak_flops_16bit;
        assert_eq!(gemm_rate(&mixtral, &gpu, WeightPart::Experts), (0.53125, bf16 / WEIGHT_ONLY_COMPUTE_SLOWDOWN), "{name}");
        assert_eq!(gemm_rate(&mixtral, &gpu, WeightPart::Attention), (2.0, bf16), "{name}");
    }
    let h100 = gpu("H100-SXM");
    let bf16 = ModelSpec::preset("Mixtral-8x7B").unwrap();
    let (q, b) = (price(&mixtral, &h100, &decode_step()), price(&bf16, &h100, &decode_step()));
    assert!((q.gemm_ns as f64) < b.gemm_ns as f64 * 0.4, "{} against {}", q.gemm_ns, b.gemm_ns);
}

/// NVFP4 multiplies on the B200's FP4 tensor cores at 9,000 TFLOP/s, four times bf16: a
/// compute-bound prefill's GEMMs take about a quarter of bf16's (the LM head's row is 16-bit).
#[test]
fn nvfp4_prefill_on_a_b200_is_cheaper_than_bf16() {
    let b200 = gpu("B200");
    let nvfp4 = model("Llama-3.1-8B", "nvfp4");
    assert_eq!(gemm_rate(&nvfp4, &b200, WeightPart::DenseMlp), (0.5625, 9000e12));
    let bf16 = ModelSpec::preset("Llama-3.1-8B").unwrap();
    let (q, b) = (price(&nvfp4, &b200, &prefill_step()), price(&bf16, &b200, &prefill_step()));
    let ratio = q.gemm_ns as f64 / b.gemm_ns as f64;
    assert!((0.25..0.3).contains(&ratio), "NVFP4 prefill GEMMs {ratio} × bf16");
    assert!(q.total_ns < b.total_ns);
}

/// Block-scaled FP8 multiplies at the FP8 peak where there are FP8 tensor cores, and reads a
/// 4-byte scale per 128 × 128 block beside the byte a weight; weight-only on an A100.
#[test]
fn block_scaled_fp8_at_the_fp8_peak_with_its_scales() {
    let block = model("Llama-3.1-8B", "fp8-block");
    assert_eq!(block.weight_dtype, Dtype::Fp8);
    for name in ["H100-SXM", "H200", "B200"] {
        let gpu = gpu(name);
        assert_eq!(gemm_rate(&block, &gpu, WeightPart::Attention), (1.0 + 4.0 / 16384.0, gpu.peak_flops_fp8.unwrap()), "{name}");
    }
    let a100 = gpu("A100-80G-SXM");
    assert_eq!(gemm_rate(&block, &a100, WeightPart::Experts).1, 312e12 / WEIGHT_ONLY_COMPUTE_SLOWDOWN);
    // Its decode reads what per-tensor FP8 reads, and the scales: within 0.1%.
    let h100 = gpu("H100-SXM");
    let per_tensor = ModelSpec { weight_quant: None, ..block.clone() };
    let (q, p) = (price(&block, &h100, &decode_step()), price(&per_tensor, &h100, &decode_step()));
    assert!(q.gemm_ns >= p.gemm_ns && (q.gemm_ns as f64) < p.gemm_ns as f64 * 1.001, "{} against {}", q.gemm_ns, p.gemm_ns);
}
