//! What a GEMM over quantized weights ([`WeightQuant`]) reads and how fast it multiplies.
//!
//! Per scheme, as vLLM runs it (kernel choices read in vLLM's
//! `model_executor/layers/quantization/`):
//!
//! - **AWQ, GPTQ, compressed-tensors W4A16** run through Marlin (`awq_marlin`, `gptq_marlin`,
//!   `CompressedTensorsWNA16` and, for experts, `fused_marlin_moe`) on compute capability 8.0
//!   and up: 4-bit weights and their scales are read, converted to 16 bits in registers and
//!   multiplied on the 16-bit tensor cores. A memory-bound GEMM (decode) reads about a quarter
//!   of bf16's weight bytes; a compute-bound one runs at the 16-bit peak slowed by
//!   [`WEIGHT_ONLY_COMPUTE_SLOWDOWN`], never faster than bf16.
//! - **MXFP4 experts** (gpt-oss) run weight-only too, with 16-bit activations, on every GPU with
//!   vLLM's default settings: `get_mxfp4_backend` in `mxfp4.py` (vllm-project/vllm at
//!   007d50058a06) picks Marlin on Ampere, OpenAI's Triton kernels (or Marlin) on Hopper, and
//!   on Blackwell FlashInfer's `SM100_FI_MXFP4_BF16`: MXFP4 weights, bf16 activations. The
//!   MXFP4 × MXFP8 path that would use Blackwell's low-precision tensor cores is opt-in
//!   (`VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8`), and multiplies at the FP8 rate, not FP4's; it is
//!   not priced. aiconfigurator's tables call these rows `w4a16_mxfp4` for the same reason.
//! - **NVFP4** multiplies FP4 weights by FP4 activations on Blackwell's FP4 tensor cores, at
//!   the GPU's FP4 peak. Scenarios refuse it on a GPU without them
//!   ([`WeightQuant::refusal_on`]); a cost model built for one anyway prices it weight-only, as
//!   vLLM's FP4 Marlin fallback runs it.
//! - **Block-scaled FP8** multiplies at the FP8 peak where the GPU has FP8 tensor cores (CUTLASS
//!   or DeepGEMM block-scaled kernels on Hopper and Blackwell), else weight-only as per-tensor
//!   FP8 is ([`weight_only`](super::weight_only)); it reads one fp32 scale per 128 × 128 block
//!   beside the FP8 weights.
//!
//! Layers a scheme leaves out (attention under MXFP4, the router, the LM head) read 16-bit
//! weights at the 16-bit peak.

use super::weight_only::{MARLIN_FP8_COMPUTE_SLOWDOWN, weight_gemm_peak_flops};
use crate::scenario::model::{QuantScheme, WeightQuant};
use crate::scenario::{GpuSpec, ModelSpec};

/// How much longer a compute-bound weight-only 4-bit GEMM takes than the 16-bit GEMM of the
/// same shape. The FP8 Marlin kernel's figure ([`MARLIN_FP8_COMPUTE_SLOWDOWN`]), whose sources
/// are measurements of the 4-bit Marlin kernel whose main loop it shares.
pub const WEIGHT_ONLY_COMPUTE_SLOWDOWN: f64 = MARLIN_FP8_COMPUTE_SLOWDOWN;

/// Which of a layer's linear weights a GEMM multiplies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WeightPart {
    /// QKV, output, and MLA's projections.
    Attention,
    /// The dense MLP, shared experts and leading dense layers.
    DenseMlp,
    /// The routed experts.
    Experts,
}

/// Bytes a GEMM of `part` reads per weight element, and the peak FLOP/s it multiplies at
/// (before efficiency), for `model` on `gpu`.
pub fn gemm_rate(model: &ModelSpec, gpu: &GpuSpec, part: WeightPart) -> (f64, f64) {
    let Some(quant) = model.weight_quant.filter(|q| covers(q, part)) else {
        return match model.weight_quant {
            // Left out of the scheme: the activation dtype.
            Some(_) => (model.weight_dtype.bytes().max(2) as f64, gpu.peak_flops_16bit),
            None => (model.weight_dtype.bytes() as f64, weight_gemm_peak_flops(model, gpu)),
        };
    };
    let bytes = quant.scheme.bytes_per_element(model.hidden_size as u64);
    let weight_only = gpu.peak_flops_16bit / WEIGHT_ONLY_COMPUTE_SLOWDOWN;
    let peak = match quant.scheme {
        QuantScheme::Fp8Block { .. } => weight_gemm_peak_flops(model, gpu),
        QuantScheme::IntWeightOnly { .. } | QuantScheme::Mxfp4 => weight_only,
        QuantScheme::Nvfp4 => gpu.peak_flops_fp4.unwrap_or(weight_only),
    };
    (bytes, peak)
}

fn covers(quant: &WeightQuant, part: WeightPart) -> bool {
    match part {
        WeightPart::Attention => quant.scope.attention,
        WeightPart::DenseMlp => quant.scope.dense_mlp,
        WeightPart::Experts => quant.scope.experts,
    }
}

/// What a kernel profile has no rows for in `model`'s weights, if anything: published GEMM
/// tables time bf16 and per-tensor FP8 GEMMs, and the calibrated model prices a layer's
/// experts from those GEMMs, so 4-bit weights would be priced as 16-bit ones.
pub fn unprofiled(model: &ModelSpec) -> Option<String> {
    let quant = model.weight_quant?;
    match quant.scheme {
        QuantScheme::Fp8Block { .. } => None,
        scheme => Some(format!("{} weights", scheme.name())),
    }
}

/// The line that says how a calibrated profile prices block-scaled FP8, which it has no rows of.
pub fn note(model: &ModelSpec) -> Option<String> {
    let quant = model.weight_quant.filter(|q| matches!(q.scheme, QuantScheme::Fp8Block { .. }))?;
    Some(format!(
        "{} weights are priced from the profile's per-tensor FP8 GEMM rows (aiconfigurator's vLLM fp8_block GEMM rows are timed eagerly, \
         with host launch time, so none are imported)",
        quant.scheme.name()
    ))
}
