//! Whether a profile describes the deployment a scenario prices: the same GPU, an engine whose
//! kernels it timed, and the scenario's dtypes. Kernel timings of other hardware or another
//! engine price every step wrongly without any visible sign, so a mismatch is an error unless
//! the user asks to go on (then a warning that names it).
//!
//! Tensor parallelism is not a mismatch: kernel profiles hold per-GPU shapes, which interpolate
//! to any sharding, and an all-reduce the profile did not measure is priced by the ring formula
//! with a note (see [`Calibrated`](super::calibrated::Calibrated)).

use crate::calibrate::profile::{ProfileFacts, Provenance};
use crate::scenario::{Dtype, FittedProfile, Policy, Scenario};

/// The GPU families that profiles are matched by: a profile of an H100 SXM prices an H100 PCIe's
/// kernels better than none, but an A100's do not. Longest first, so that `H200` is not read
/// as `H20`.
const FAMILIES: [&str; 9] = ["MI300X", "H100", "H200", "H800", "B200", "A100", "L40S", "H20", "CPU"];

/// The family a hardware name belongs to (`None` for a name outside [`FAMILIES`], which then
/// matches nothing).
pub fn gpu_family(name: &str) -> Option<&'static str> {
    let upper = name.to_ascii_uppercase();
    FAMILIES.into_iter().find(|f| upper.contains(f))
}

/// The engine whose kernels a scenario's policy stands for, as profiles name engines.
fn engine_of(policy: Policy) -> &'static str {
    match policy {
        Policy::VllmV0 | Policy::VllmV1 => "vllm",
        Policy::Tgi => "tgi",
        Policy::Servesim => "servesim",
        Policy::Sglang => "sglang",
    }
}

/// Why a profile (its `provenance` and `facts`) does not describe `scenario`, one phrase per
/// mismatch; empty when it does.
pub fn kernel_profile_mismatches(provenance: &Provenance, facts: &ProfileFacts, scenario: &Scenario) -> Vec<String> {
    let mut out: Vec<String> = gpu_mismatch(provenance, scenario).into_iter().collect();
    out.extend(kernel_mismatches(provenance, facts, scenario));
    out
}

/// Whether the profile was measured on another GPU family than the scenario's.
fn gpu_mismatch(provenance: &Provenance, scenario: &Scenario) -> Option<String> {
    let measured = provenance.measured_on();
    let profile_family = if provenance.source.is_none() && provenance.device.device == "cpu" {
        Some("CPU")
    } else {
        gpu_family(&measured)
    };
    let gpu = &scenario.hardware.gpu;
    let same = match (profile_family, gpu_family(&gpu.name)) {
        (Some(a), Some(b)) => a == b,
        // A GPU of no family (a scenario's own `[hardware]`, as for an RTX 4090) is matched by
        // its model name, as the driver spells it or as the scenario does.
        (None, None) => same_model_name(&measured, &gpu.name),
        _ => false,
    };
    (!same).then(|| format!("the profile was measured on {measured}, and the scenario runs on {}", gpu.name))
}

/// Whether two GPU names name one model, ignoring case, spaces and dashes: the shorter must be
/// within the longer ("RTX-4090" in "NVIDIA GeForce RTX 4090") and hold a digit, so that a
/// bare vendor name matches nothing.
fn same_model_name(a: &str, b: &str) -> bool {
    let key = |s: &str| s.chars().filter(char::is_ascii_alphanumeric).map(|c| c.to_ascii_uppercase()).collect::<String>();
    let (a, b) = (key(a), key(b));
    let (short, long) = if a.len() <= b.len() { (a, b) } else { (b, a) };
    short.chars().any(|c| c.is_ascii_digit()) && long.contains(&short)
}

/// Whether the profile's kernels are another engine's or dtype's than the scenario's, whatever
/// GPU they ran on (for a profile carried over to another GPU on purpose, only these apply).
pub fn kernel_mismatches(provenance: &Provenance, facts: &ProfileFacts, scenario: &Scenario) -> Vec<String> {
    let mut out = Vec::new();
    // Imported tables name the engine whose kernels they timed.
    if let Some(source) = &provenance.source {
        let wanted = engine_of(scenario.engine.policy);
        if source.engine != wanted {
            out.push(format!(
                "the profile timed {} {}'s kernels, and the scenario's engine is {} ({})",
                source.engine,
                source.engine_version,
                wanted,
                scenario.engine.policy.name()
            ));
        }
    }
    // A profile servesim measured on a GPU timed servesim's own attention kernels. They run on
    // CUDA cores: on an H100 they reached at most 8 TFLOP/s in prefill and 17% of HBM bandwidth
    // in decode (docs/calibration.md), a small fraction of what an engine's FlashAttention
    // does, so they price servesim's engine and no other. Its cuBLASLt GEMMs are any engine's.
    else if provenance.device.device.starts_with("cuda") && scenario.engine.policy != Policy::Servesim && facts.has_attention
    {
        out.push(format!(
            "the profile timed servesim's own CUDA attention kernels, which run far below FlashAttention, and the \
             scenario's engine is {} ({}); its GEMMs would do, its attention would not",
            engine_of(scenario.engine.policy),
            scenario.engine.policy.name()
        ));
    }
    let weight = scenario.model.weight_dtype;
    let gemm_dtypes = &facts.gemm_dtypes;
    if !gemm_dtypes.is_empty() && !gemm_dtypes.contains(&weight) {
        out.push(format!(
            "the profile's GEMMs are {}, and the scenario's weights are {}",
            names(gemm_dtypes),
            weight.name()
        ));
    }
    out
}

fn names(dtypes: &[Dtype]) -> String {
    dtypes.iter().map(|d| d.name()).collect::<Vec<_>>().join(", ")
}

/// Why a fitted profile (`servesim fit`) does not describe `scenario`: its efficiencies were
/// fitted on one GPU and its overheads on one engine's scheduler, so another GPU or policy
/// inherits numbers that were never true of it. A profile that does not record one of them is
/// not checked on it.
pub fn fitted_profile_mismatches(fitted: &FittedProfile, scenario: &Scenario) -> Vec<String> {
    let mut out = Vec::new();
    let gpu = &scenario.hardware.gpu;
    if let Some(hardware) = &fitted.hardware
        && (gpu_family(hardware).is_none() || gpu_family(hardware) != gpu_family(&gpu.name))
    {
        out.push(format!("the profile was fitted on {hardware}, and the scenario runs on {}", gpu.name));
    }
    if let Some(policy) = &fitted.engine_policy
        && policy != scenario.engine.policy.name()
    {
        out.push(format!(
            "the profile was fitted to the {policy} engine, and the scenario's policy is {}",
            scenario.engine.policy.name()
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gpu_of_no_family_matches_its_own_model_name_only() {
        assert!(same_model_name("NVIDIA GeForce RTX 4090", "RTX-4090"));
        assert!(same_model_name("RTX-PRO-6000", "NVIDIA RTX PRO 6000 Blackwell Server Edition"));
        assert!(!same_model_name("NVIDIA GeForce RTX 4090", "RTX-PRO-6000"));
        assert!(!same_model_name("NVIDIA GeForce RTX 4090", "NVIDIA"));
    }

    #[test]
    fn families_are_matched_longest_first() {
        assert_eq!(gpu_family("NVIDIA H200"), Some("H200"));
        assert_eq!(gpu_family("H20"), Some("H20"));
        assert_eq!(gpu_family("h100_sxm"), Some("H100"));
        assert_eq!(gpu_family("MI300X x8"), Some("MI300X"));
        assert_eq!(gpu_family("RTX 4090"), None);
    }
}
