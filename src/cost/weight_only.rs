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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cost::bundled;
    use crate::cost::calibrated::Calibrated;
    use crate::cost::roofline::Roofline;
    use crate::cost::{CostModel, StepCost};
    use crate::scenario::CostParams;
    use crate::sched::batch::{Batch, SeqWork};

    fn llama_8b(dtype: Dtype) -> ModelSpec {
        let mut model = ModelSpec::preset("Llama-3.1-8B").expect("preset");
        model.weight_dtype = dtype;
        model
    }

    fn gpu(name: &str) -> GpuSpec {
        GpuSpec::preset(name).expect("preset")
    }

    /// 32 sequences decoding one token each on 1,024 cached tokens: GEMMs of m = 32.
    fn decode_step() -> Batch {
        let mut batch = Batch::default();
        for seq in 0..32 {
            batch.push(SeqWork { seq, new_tokens: 1, context_tokens: 1024, samples_token: true, draft_tokens: 0 });
        }
        batch
    }

    /// One 8,192-token prompt: GEMMs of m = 8,192, the A100 profile's largest measured.
    fn prefill_step() -> Batch {
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
        let (_, profile) = bundled::for_gpu(&a100).expect("the A100 profile is bundled");
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
        let gemm_s = cost.gemm_ns as f64 / crate::cost::NS_PER_S;
        assert!(gemm_s > layers_s && gemm_s < layers_s * 1.01, "{gemm_s} s against {layers_s} s");

        let (_, profile) = bundled::for_gpu(&h100).expect("the H100 profile is bundled");
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
}
