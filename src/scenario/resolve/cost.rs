//! `[cost]`: the cost model's parameters, from defaults, a fitted profile and the scenario's keys.

use super::context::{Cx, quote};
use crate::scenario::cost_params;
use crate::scenario::engine_profile::EngineProfile;
use crate::scenario::schema::{RawCost, RawProfile};
use crate::scenario::transfer::TransferCorrection;
use crate::scenario::{CostParams, FittedProfile, KernelProfile, ScenarioError};
use std::path::Path;

/// The largest overhead or latency a scenario may set: no engine's CPU work per step or
/// sequence comes near 10 s, and a larger value would only make runs of absurd length.
pub const MAX_OVERHEAD_US: f64 = 1e7;

/// `[cost]` defaults: roofline guesses to be replaced by calibration and fitting. They are
/// typical of large GEMMs and of FlashAttention-class kernels on current GPUs, and of vLLM's
/// per-step CPU work; none has been fitted yet.
pub(in crate::scenario) const DEFAULT_COST: CostParams = CostParams {
    gemm_efficiency: 0.7,
    attention_efficiency: 0.5,
    memory_bandwidth_efficiency: 0.8,
    collective_latency_us: 10.0,
    collective_bandwidth_efficiency: 0.7,
    prefix_attention_efficiency: 0.5,
    step_overhead_eager_us: 1000.0,
    step_overhead_graph_us: 300.0,
    prefill_step_overhead_us: 0.0,
    prefill_seq_overhead_us: 0.0,
    seq_overhead_us: 10.0,
    // Zero: every request sent at an instant is in the scheduler's first step. Measured for
    // servesim's own engine by `validate --engine`; not fitted for vLLM or TGI.
    frontend_overhead_us: 0.0,
    frontend_per_token_us: 0.0,
    cpu_overlap: 0.0,
    // Kernels reach the utilisation they reached on the measured GPU.
    transfer_utilisation: 1.0,
};

/// `[cost]`: defaults, replaced by a fitted profile's values if one is named, then overridden
/// by the keys given in the scenario; and the kernel profile, if `profile` names one (`auto`,
/// or a profile CSV) rather than a fitted profile (TOML).
///
/// `correction` is the bundled correction for the deployment's GPU, if any: it applies where the
/// kernel profile is `auto` (a GPU with a correction has no bundled profile of its own, so `auto`
/// carries another GPU's over), before the scenario's keys, and is returned when it applied.
pub(super) fn resolve_cost(
    raw: &RawCost,
    engine_profile: Option<&EngineProfile>,
    correction: Option<&'static TransferCorrection>,
    cx: &Cx,
) -> Result<(CostParams, Option<KernelProfile>, Option<FittedProfile>, Option<&'static TransferCorrection>), ScenarioError> {
    // The kernel defaults, with the engine's time in place of the guesses where its release has
    // a profile; a fitted profile then replaces every value it holds.
    let mut defaults = DEFAULT_COST;
    if let Some(profile) = engine_profile {
        profile.apply(&mut defaults);
    }
    // An empty path (`--set cost.profile=`) means no profile: how a profile is fitted afresh
    // from scenarios that normally load it.
    // Left out, `auto`: measured kernels where servesim bundles them for the GPU, else the
    // roofline. `roofline` (or an empty path) asks for the roofline with the default guesses.
    let corrected = || {
        let mut params = defaults.clone();
        if let Some(c) = correction {
            c.apply(&mut params);
        }
        params
    };
    let (base, kernel, fitted) = match raw.get("profile") {
        None => (corrected(), Some(KernelProfile::Auto), None),
        Some(toml::Value::String(path)) if path.is_empty() || path == "roofline" => (defaults.clone(), None, None),
        // `bundled` says which `auto` picks: the profile bundled for the GPU and the engine.
        Some(toml::Value::String(path)) if path == "auto" || path == "bundled" => (corrected(), Some(KernelProfile::Auto), None),
        Some(toml::Value::String(path)) if path.ends_with(".csv") || path.ends_with(".csv.zst") => {
            let file = cx.relative(path);
            if !file.is_file() {
                return Err(cx.invalid("cost.profile", quote(path), "no such kernel profile file"));
            }
            (defaults.clone(), Some(KernelProfile::File(file)), None)
        }
        Some(toml::Value::String(path)) => {
            let (params, fitted) = load_profile(&cx.relative(path))?;
            (params, None, Some(fitted))
        }
        Some(other) => return Err(cx.invalid("cost.profile", other, "must be `auto`, `roofline`, a kernel profile (.csv) or a fitted profile (.toml)")),
    };
    let applied = correction.filter(|_| kernel == Some(KernelProfile::Auto));
    Ok((resolve_cost_over(raw, base, cx)?, kernel, fitted, applied))
}

/// Reads a profile written by `servesim fit`, and what it says it was fitted on; errors name the
/// profile file.
fn load_profile(path: &Path) -> Result<(CostParams, FittedProfile), ScenarioError> {
    let cx = Cx { file: path.to_path_buf() };
    let text = std::fs::read_to_string(path).map_err(|source| ScenarioError::Io { file: path.to_path_buf(), source })?;
    let profile: RawProfile = toml::from_str(&text).map_err(|e| cx.parse(e.to_string()))?;
    if let Some(nested) = profile.cost.get("profile") {
        return Err(cx.invalid("cost.profile", nested, "a profile cannot name another profile"));
    }
    let said = |key: &str| -> Option<String> {
        profile.provenance.as_ref()?.get(key)?.as_str().map(str::to_string)
    };
    let fitted = FittedProfile { path: path.to_path_buf(), hardware: said("hardware"), engine_policy: said("engine_policy") };
    Ok((resolve_cost_over(&profile.cost, DEFAULT_COST, &cx)?, fitted))
}

/// `base` with every named parameter of `raw` set, each checked against the registry's range.
fn resolve_cost_over(raw: &RawCost, base: CostParams, cx: &Cx) -> Result<CostParams, ScenarioError> {
    let mut params = base;
    for (key, value) in raw.iter().filter(|(key, _)| key.as_str() != "profile") {
        let field = format!("cost.{key}");
        let spec = cost_params::find(key).ok_or_else(|| {
            cx.invalid(&field, value, format!("unknown cost parameter; known: profile, {}", cost_params::known_names()))
        })?;
        let number = value.as_float().or_else(|| value.as_integer().map(|i| i as f64));
        let number = number.ok_or_else(|| cx.invalid(&field, value, "must be a number"))?;
        spec.kind.check(number).map_err(|reason| cx.invalid(&field, number, reason))?;
        spec.set(&mut params, number);
    }
    Ok(params)
}

#[cfg(test)]
#[path = "cost_tests.rs"]
mod tests;
