//! FP8 weights on a GPU without FP8 tensor cores (A100; A10 and A40 too: compute capability
//! below 8.9).
//!
//! vLLM serves `--quantization fp8` (or an FP8 checkpoint) there anyway, weight-only, through its
//! FP8 Marlin kernel (`model_executor/layers/quantization/fp8.py` picks Marlin when the device
//! lacks capability 8.9; `utils/marlin_utils_fp8.py`). Weights are stored and read in 8 bits, but
//! the kernel converts each tile to 16 bits and multiplies on the 16-bit tensor cores, with 16-bit
//! activations. So a memory-bound GEMM (decode) reads half the weight bytes of bf16 and gets
//! cheaper, while a compute-bound one (prefill, large batches) runs at the 16-bit peak at best,
//! and slower than cuBLAS's bf16 GEMM of the same shape ([`MARLIN_FP8_COMPUTE_SLOWDOWN`]).
//! The LM head, a mixture of experts' router and attention are 16-bit either way, and so are
//! priced as before; an FP8 KV cache is a storage format here, which the cost models already
//! price by its bytes.

use crate::calibrate::backend::Peak;
use crate::scenario::model::Dtype;
use crate::scenario::{GpuSpec, ModelSpec};

/// How much longer a compute-bound weight-only FP8 GEMM takes than the 16-bit GEMM of the same
/// shape: its FLOPs are priced at the 16-bit peak divided by this.
///
/// A reasoned guess, not a measurement. No published timing of vLLM's FP8 Marlin kernel against
/// a bf16 GEMM at large m was found: the pull request that added it (vllm-project/vllm#5975)
/// reports memory-bound speedups only ("up to 2x"), and the kernel's own warning says that it
/// "may degrade performance for compute-heavy workloads". The nearest published figures are of
/// Marlin's 4-bit kernel, whose main loop the FP8 path shares, against torch's 16-bit GEMM at
/// m ≥ 256: 1.35–1.67× the time with the first kernel of 2024 (a comment of 2024-01-24 on
/// vllm-project/vllm#2497, GPU not stated), 1.22× at 16,384 rows on an RTX 6000 Ada
/// (IST-DASLab/marlin#21), 0.97–1.01× at m = 512 and 1,024 with the kernel vLLM has shipped
/// since 2025 (vllm-project/vllm#24722, GPU not stated). 1.2 keeps the FP8 GEMM slower than
/// bf16, as it is recorded on A100, by less than the old kernel was; a measurement of the FP8
/// kernel should replace it.
pub const MARLIN_FP8_COMPUTE_SLOWDOWN: f64 = 1.2;

/// FLOPs per multiply-accumulate.
const FLOPS_PER_MAC: f64 = 2.0;
/// An FP8 weight's storage.
const FP8_WEIGHT_BYTES: f64 = 1.0;
/// Activations and outputs stay 16-bit.
const ACTIVATION_BYTES: f64 = 2.0;

/// Whether `model`'s weight GEMMs run weight-only on `gpu`: FP8 weights, no FP8 tensor cores.
pub fn runs_weight_only_fp8(model: &ModelSpec, gpu: &GpuSpec) -> bool {
    model.weight_dtype == Dtype::Fp8 && gpu.peak_flops_fp8.is_none()
}

/// The peak FLOP/s that `model`'s weight GEMMs are priced at on `gpu`, before efficiency: the
/// FP8 peak for FP8 weights on FP8 tensor cores, the slowed 16-bit peak for weight-only FP8,
/// else the 16-bit peak.
pub(crate) fn weight_gemm_peak_flops(model: &ModelSpec, gpu: &GpuSpec) -> f64 {
    match (model.weight_dtype, gpu.peak_flops_fp8) {
        (Dtype::Fp8, Some(fp8)) => fp8,
        (Dtype::Fp8, None) => gpu.peak_flops_16bit / MARLIN_FP8_COMPUTE_SLOWDOWN,
        _ => gpu.peak_flops_16bit,
    }
}

/// The roofline time of a weight-only FP8 GEMM `[m × k] · [k × n]` at `peak`, seconds: 1-byte
/// weights, 16-bit activations and output, FLOPs slowed by [`MARLIN_FP8_COMPUTE_SLOWDOWN`].
/// Divided by the utilisation a profile's 16-bit GEMM reached on the shape, it is that GEMM's
/// time with half the weight bytes where memory-bound, and the slowdown times it where
/// compute-bound.
pub(crate) fn gemm_roofline_s(m: f64, n: f64, k: f64, peak: &Peak) -> f64 {
    let flops = FLOPS_PER_MAC * m * n * k * MARLIN_FP8_COMPUTE_SLOWDOWN;
    let bytes = (m * k + m * n) * ACTIVATION_BYTES + k * n * FP8_WEIGHT_BYTES;
    (flops / peak.flops_per_s).max(bytes / peak.memory_bytes_per_s)
}

/// The line that says a run prices `model`'s weights as weight-only FP8 on `gpu`, if it does.
pub fn note(model: &ModelSpec, gpu: &GpuSpec) -> Option<String> {
    runs_weight_only_fp8(model, gpu).then(|| {
        format!(
            "{} has no FP8 tensor cores: fp8 weights run weight-only, as vLLM's FP8 Marlin kernel runs them \
             (weights read in 8 bits, GEMMs computed in 16 bits, compute-bound GEMMs {MARLIN_FP8_COMPUTE_SLOWDOWN}× the 16-bit time)",
            gpu.name
        )
    })
}
