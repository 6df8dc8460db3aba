//! Which FP8 GEMMs price an SGLang deployment's linear layers. SGLang 0.4.9 multiplies FP8
//! weights through one of two kernels on Hopper (`layers/quantization/fp8_utils.py`,
//! `apply_fp8_linear`):
//!
//! - **Per-channel weight scales**: `--quantization fp8` on a 16-bit checkpoint
//!   (`Fp8LinearMethod.process_weights_after_loading` quantizes each weight per output channel,
//!   "as cutlass sgl-kernel and marlin only support per-channel scale") and checkpoints stored
//!   so. The activations are quantized per token (`sglang_per_token_quant_fp8`) and sgl-kernel's
//!   cutlass `fp8_scaled_mm` multiplies: the kernel SGLang's bundled tables time.
//! - **One scale per tensor**: compressed-tensors checkpoints with `strategy = "tensor"`
//!   (`CompressedTensorsW8A8Fp8.process_weights_after_loading` keeps one `max_w_scale` per fused
//!   layer). `weight_scale` then has one element, not one per output channel, so
//!   `apply_fp8_linear(compressed_tensor_quant=True)` skips `fp8_scaled_mm`, quantizes the
//!   activations with the static per-tensor scale and calls `torch._scaled_mm`: cuBLASLt. With
//!   dynamic activation scales it takes `_apply_fallback_scaled_mm` (the same cuBLASLt GEMM to
//!   fp32, then a separate rescale, which is not priced).
//!
//! The second is priced by cuBLASLt's own measured rows where they are bundled (the H200's,
//! `bundled::cublaslt_fp8_gemms`), in place of the profile's FP8 GEMMs; elsewhere a note says
//! the cutlass rows price it. Only `cost.profile = "auto"`: a profile named by the scenario
//! prices with its own rows.

use crate::calibrate::profile::ProfileIndex;
use crate::cost::bundled;
use crate::scenario::Scenario;

/// `index` (the bundled profile `name`) with its FP8 GEMMs replaced by cuBLASLt's where the
/// scenario's SGLang checkpoint has per-tensor scales; the name says what priced them.
pub(super) fn for_scenario(scenario: &Scenario, index: ProfileIndex, name: String, notes: &mut Vec<String>) -> (ProfileIndex, String) {
    if !scenario.engine.sglang.as_ref().is_some_and(|s| s.fp8_tensor_scales) {
        return (index, name);
    }
    let gpu = &scenario.hardware.gpu;
    let spliced = bundled::cublaslt_fp8_gemms(gpu).and_then(|g| index.with_fp8_gemms_of(&g.index).map(|index| (index, g.name)));
    match spliced {
        Some((index, gemms)) => {
            notes.push(format!(
                "engine.sglang.fp8_weight_scale = \"tensor\": SGLang multiplies per-tensor FP8 weights with torch._scaled_mm (cuBLASLt); its FP8 GEMMs are priced by the bundled {gemms} (cuBLASLt rows measured on {})",
                gpu.name
            ));
            (index, format!("{name} with {gemms}"))
        }
        None => {
            notes.push(format!(
                "engine.sglang.fp8_weight_scale = \"tensor\": SGLang multiplies per-tensor FP8 weights with torch._scaled_mm (cuBLASLt), and no cuBLASLt FP8 GEMMs are bundled for {}; priced by the profile's own FP8 GEMMs",
                gpu.name
            ));
            (index, name)
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::run::scenario_cost;
    use crate::scenario::Scenario;
    use crate::sched::{Batch, SeqWork};

    fn sglang(gpu: &str, dtype: &str, scale: &str) -> Result<Scenario, String> {
        let text = format!(
            "[model]\npreset = \"Llama-3.1-70B\"\ndtype = \"{dtype}\"\n[hardware]\ngpu = \"{gpu}\"\ncount = 1\n[engine]\npolicy = \"sglang\"\n\
             [engine.sglang]\nfp8_weight_scale = \"{scale}\"\n[workload]\nnum_prompts = 1\n[workload.dataset]\nkind = \"fixed\"\ninput_len = 8\noutput_len = 8\n"
        );
        Scenario::from_toml_str(&text, std::path::Path::new("s.toml"), &[]).map_err(|e| e.to_string())
    }

    /// A decode of 388 sequences (the offline MLPerf runs' batch, docs/sglang.md): its GEMMs
    /// per step, ns, and the cost's notes.
    fn decode_gemm_ns(scenario: &Scenario) -> (u64, Vec<String>) {
        let cost = scenario_cost(scenario, false).unwrap();
        let mut batch = Batch::default();
        for seq in 0..388 {
            batch.push(SeqWork { seq, new_tokens: 1, context_tokens: 400, samples_token: true, draft_tokens: 0 });
        }
        (cost.model.predict(&batch).gemm_ns, cost.notes)
    }

    /// On the H200 the cuBLASLt rows price m = 388 between their m = 257 and m = 512 times
    /// (o_proj, 8192 × 8192: 42.9 and 67.2 µs), where sgl-kernel's cutlass rows time m = 257 at
    /// 73.6 µs and cap m = 388 at m = 512's 55.8 µs; the MLP's larger GEMMs differ more. On the
    /// B200, which has no cuBLASLt table, a note says the cutlass rows price it.
    #[test]
    fn per_tensor_checkpoints_are_priced_by_cublaslt_rows_where_bundled() {
        let (channel, notes) = decode_gemm_ns(&sglang("H200", "fp8", "channel").unwrap());
        assert!(!notes.iter().any(|n| n.contains("fp8_weight_scale")), "{notes:?}");
        let (tensor, notes) = decode_gemm_ns(&sglang("H200", "fp8", "tensor").unwrap());
        assert!(notes.iter().any(|n| n.contains("h200-sxm--trtllm-1.3.0rc20.fp8-gemm")), "{notes:?}");
        let ratio = tensor as f64 / channel as f64;
        assert!((0.7..0.9).contains(&ratio), "cuBLASLt / cutlass at m = 388: {ratio}");
        let (b200_channel, _) = decode_gemm_ns(&sglang("B200", "fp8", "channel").unwrap());
        let (b200_tensor, notes) = decode_gemm_ns(&sglang("B200", "fp8", "tensor").unwrap());
        assert_eq!(b200_tensor, b200_channel);
        assert!(notes.iter().any(|n| n.contains("no cuBLASLt FP8 GEMMs are bundled for B200")), "{notes:?}");
    }

    #[test]
    fn the_scale_is_refused_on_16_bit_weights_and_unknown_values() {
        let err = sglang("H200", "bf16", "tensor").unwrap_err();
        assert!(err.contains("engine.sglang.fp8_weight_scale") && err.contains("FP8 checkpoints"), "{err}");
        let err = sglang("H200", "fp8", "block").unwrap_err();
        assert!(err.contains("\"block\"") && err.contains("known"), "{err}");
        assert!(!sglang("H200", "fp8", "channel").unwrap().engine.sglang.unwrap().fp8_tensor_scales);
    }
}
