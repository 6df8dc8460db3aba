//! Raw schema → validated [`Scenario`].
//!
//! ```text
//!  file text ──toml──► Table ──--set overrides──► RawScenario (deny_unknown_fields)
//!            ──resolve──► model → GPU → engine (policy defaults) → GPU count → memory / KV blocks
//!                         → cost → workload (dataset, length check against max_model_len) → validation
//!
//!  stage                                    submodule
//!  model                                    model
//!  GPU, GPU count, memory / KV blocks       hardware
//!  engine (policy defaults)                 engine
//!  cost (defaults, fitted profile)          cost
//!  workload                                 workload
//!  --set overrides, resolve, validation     this one
//! ```
//!
//! Every error is a [`ScenarioError`] naming the scenario file, the dotted field and its value
//! (`context` carries the file to every part). Defaults are filled in the way the modelled engine
//! fills them; each says which version.

mod context;
mod cost;
mod engine;
mod hardware;
mod model;
mod parallel;
mod pools;
mod sglang;
mod speculative;
mod workload;

use super::schema::{RawScenario, RawValidation};
use super::{
    DEFAULT_VALIDATION_METRICS, Hardware, RecordedClock, Scenario, ScenarioError, ValidationSpec, WorkloadConfig,
};
use context::{Cx, quote};
pub(super) use cost::DEFAULT_COST;
pub use cost::MAX_OVERHEAD_US;
pub use pools::LINK_PRESETS;
use std::path::Path;

// ---- entry points -------------------------------------------------------------------------------

pub(super) fn load(path: &Path, overrides: &[String]) -> Result<Scenario, ScenarioError> {
    let text = std::fs::read_to_string(path).map_err(|source| ScenarioError::Io {
        file: path.to_path_buf(),
        source,
    })?;
    from_str(&text, path, overrides)
}

pub(super) fn from_str(
    text: &str,
    path: &Path,
    overrides: &[String],
) -> Result<Scenario, ScenarioError> {
    let cx = Cx {
        file: path.to_path_buf(),
    };
    let raw: RawScenario = if overrides.is_empty() {
        // Straight from the text, so that errors point at a line and column.
        toml::from_str(text).map_err(|e| cx.parse(e.to_string()))?
    } else {
        let mut table: toml::Table = toml::from_str(text).map_err(|e| cx.parse(e.to_string()))?;
        for o in overrides {
            apply_override(&mut table, o, &cx)?;
        }
        // Errors from a table name the dotted key instead of a line.
        table.try_into().map_err(|e: toml::de::Error| {
            cx.parse(format!(
                "{} (after --set overrides)",
                e.to_string().trim_end().replace('\n', " ")
            ))
        })?
    };
    resolve(raw, &cx)
}

/// Applies one `--set dotted.key=value`: the value is parsed as a TOML value (`128`, `[1, 2]`,
/// `inf`, `true`, `{ dist = "fixed", value = 5 }`), or taken as a plain string if that fails
/// (`model.preset=Llama-3.1-8B`). Missing intermediate tables are created.
fn apply_override(table: &mut toml::Table, set: &str, cx: &Cx) -> Result<(), ScenarioError> {
    let bad = |reason: String| cx.invalid("--set", quote(set), reason);
    let Some((key, value)) = set.split_once('=') else {
        return Err(bad(
            "expected KEY=VALUE, e.g. engine.max_num_seqs=128".into()
        ));
    };
    let parts: Vec<&str> = key.trim().split('.').map(str::trim).collect();
    if parts.iter().any(|p| p.is_empty()) {
        return Err(bad(format!(
            "`{}` is not a dotted key like engine.max_num_seqs",
            key.trim()
        )));
    }
    let value_text = value.trim();
    let value = value_text
        .parse::<toml::Value>()
        .unwrap_or_else(|_| toml::Value::String(value_text.to_string()));
    let (last, path) = parts.split_last().expect("split yields at least one part");
    let mut current = table;
    for (i, part) in path.iter().enumerate() {
        let entry = current
            .entry(part.to_string())
            .or_insert_with(|| toml::Value::Table(toml::Table::new()));
        match entry {
            toml::Value::Table(inner) => current = inner,
            _ => return Err(bad(format!("`{}` is not a table", parts[..=i].join(".")))),
        }
    }
    current.insert(last.to_string(), value);
    Ok(())
}

// ---- the whole scenario -------------------------------------------------------------------------

fn resolve(raw: RawScenario, cx: &Cx) -> Result<Scenario, ScenarioError> {
    let name = raw.name.clone().unwrap_or_else(|| {
        cx.file
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "scenario".into())
    });
    let mut model = model::resolve_model(&raw.model, cx)?;
    let (gpu, engine, count, pools, kv_link) = match &raw.cluster {
        None => {
            let gpu = hardware::resolve_gpu(&raw.hardware, cx)?;
            let mut engine = engine::resolve_engine(&raw.engine, &model, Some(&gpu), cx)?;
            model::place_experts(&raw.engine, &mut model, &engine, cx)?;
            parallel::resolve_data_parallel(&raw.engine, &model, Some(&gpu), &mut engine, cx)?;
            let count = hardware::resolve_count(&raw.hardware, &engine, cx)?;
            hardware::size_memory(&raw.engine, &model, &gpu, &mut engine, cx)?;
            (gpu, engine, count, Vec::new(), None)
        }
        Some(cluster) => {
            // The shared knobs first, so that their errors name `[engine]` and no pool.
            let shared = engine::resolve_engine(&raw.engine, &model, None, cx)?;
            parallel::resolve_data_parallel(&raw.engine, &model, None, &mut shared.clone(), cx)?;
            let pools = pools::resolve_pools(&raw, cluster, shared.router, &mut model, cx)?;
            let kv_link = pools::resolve_mode(cluster, &pools, shared.policy, cx)?;
            let first = &pools[0];
            let count = first.engine.tensor_parallel * first.engine.replicas;
            (first.gpu.clone(), first.engine.clone(), count, pools, kv_link)
        }
    };
    model::check_weights(&raw.model, &model, std::iter::once(&gpu).chain(pools.iter().map(|p| &p.gpu)), cx)?;
    // The link's inputs are bounded, but what they derive must be too: the longest prompt's KV
    // over a link of 1e-11 GB/s took past 2^64 ns (a 0.06 s run with a P99 ITL of 1.8e13 ms).
    if let Some(link) = &kv_link {
        for p in pools.iter().filter(|p| p.role == crate::scenario::PoolRole::Prefill) {
            let bytes = model.kv_bytes_per_token_per_gpu(p.engine.tensor_parallel) as f64 * f64::from(p.engine.max_model_len);
            let seconds = bytes / link.bandwidth_bytes_per_s_per_gpu + link.latency_ns as f64 / 1e9;
            if !(seconds <= crate::scenario::HORIZON_MAX_S) {
                return Err(cx.invalid(
                    "cluster.link_bandwidth_gbps",
                    link.bandwidth_bytes_per_s_per_gpu / 1e9,
                    format!(
                        "a {}-token prompt's KV ({bytes:.0} bytes per GPU) would take {seconds:.3e} s to move, past the {:.0e} s a simulation may last",
                        p.engine.max_model_len,
                        crate::scenario::HORIZON_MAX_S
                    ),
                ));
            }
        }
    }
    // A correction is per GPU, and `[cost]` is the deployment's: only one GPU type can have it.
    let one_gpu = pools.iter().all(|p| p.gpu.name == gpu.name);
    // It holds engine time too, so only the engines it was fitted on get it.
    let correction = crate::scenario::transfer::for_gpu(&gpu.name).filter(|c| one_gpu && c.fitted_on(engine.policy.name()));
    let (cost, kernel_profile, fitted_profile, transfer_correction) =
        cost::resolve_cost(&raw.cost, engine.profile.as_ref(), correction, cx)?;
    let workload = workload::resolve_workload(&raw.workload, &engine, cx)?;
    let validation = raw.validation.as_ref().map(|v| resolve_validation(v, &workload, cx)).transpose()?;
    Ok(Scenario {
        path: cx.file.clone(),
        name,
        model,
        hardware: Hardware { gpu, count },
        engine,
        cost,
        workload,
        validation,
        kernel_profile,
        fitted_profile,
        transfer_correction,
        pools,
        kv_link,
    })
}

// ---- [validation] -------------------------------------------------------------------------------

fn resolve_validation(raw: &RawValidation, workload: &WorkloadConfig, cx: &Cx) -> Result<ValidationSpec, ScenarioError> {
    if raw.blocks.len() != workload.num_prompts.len() || raw.blocks.contains(&0) {
        return Err(cx.invalid(
            "validation.blocks",
            format!("{:?}", raw.blocks),
            format!(
                "needs one 1-based block index per workload.num_prompts value ({} of them)",
                workload.num_prompts.len()
            ),
        ));
    }
    let fit_blocks = raw.fit_blocks.clone().unwrap_or_default();
    if let Some(b) = fit_blocks.iter().find(|b| !raw.blocks.contains(b)) {
        return Err(cx.invalid("validation.fit_blocks", b, "is not one of validation.blocks"));
    }
    let metrics = match &raw.metrics {
        Some(list) if list.is_empty() => {
            return Err(cx.invalid("validation.metrics", "[]", "name at least one metric"));
        }
        Some(list) => list.clone(),
        None => DEFAULT_VALIDATION_METRICS.iter().map(|m| m.to_string()).collect(),
    };
    let clock = match raw.clock.as_deref() {
        None | Some("client") => RecordedClock::Client,
        Some("engine") => RecordedClock::Engine,
        Some(other) => return Err(cx.invalid("validation.clock", quote(other), "known: client, engine")),
    };
    Ok(ValidationSpec { recorded: cx.relative(&raw.recorded), blocks: raw.blocks.clone(), metrics, fit_blocks, clock })
}

#[cfg(test)]
mod test_support;

#[cfg(test)]
mod tests;
