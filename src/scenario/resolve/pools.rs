//! `[[cluster.pools]]`: replicas of different GPU types behind one router.
//!
//! Each pool is resolved as a one-pool scenario would be (its GPU preset, its `[engine]` with the
//! pool's `tensor_parallel`, `replicas` and memory knobs, its KV capacity), by the same code; an
//! error found there is relabelled to the pool's own field (`cluster.pools[1].gpu`), or, for a
//! shared field that only this pool's GPU makes wrong, says which pool.

use super::context::{Cx, quote};
use super::{engine, hardware, model};
use crate::scenario::hardware::GpuSpec;
use crate::scenario::model::ModelSpec;
use crate::scenario::schema::{RawCluster, RawHardware, RawPool, RawScenario};
use crate::scenario::{Pool, Router, ScenarioError};

/// Fields that one pool-less deployment sets and pools set each for themselves: given with pools,
/// which would win is unclear, so they are refused.
fn reject_single_pool_fields(raw: &RawScenario, cx: &Cx) -> Result<(), ScenarioError> {
    let h = &raw.hardware;
    let given: [(&str, Option<String>); 10] = [
        ("hardware.gpu", h.gpu.as_deref().map(quote)),
        ("hardware.count", h.count.map(|v| v.to_string())),
        ("hardware.name", h.name.as_deref().map(quote)),
        ("hardware.peak_tflops_16bit", h.peak_tflops_16bit.map(|v| v.to_string())),
        ("hardware.peak_tflops_fp8", h.peak_tflops_fp8.map(|v| v.to_string())),
        ("hardware.memory_gib", h.memory_gib.map(|v| v.to_string())),
        ("hardware.memory_bandwidth_gbps", h.memory_bandwidth_gbps.map(|v| v.to_string())),
        ("hardware.interconnect_gbps", h.interconnect_gbps.map(|v| v.to_string())),
        ("engine.tensor_parallel", raw.engine.tensor_parallel.map(|v| v.to_string())),
        ("engine.replicas", raw.engine.replicas.map(|v| v.to_string())),
    ];
    match given.into_iter().find(|(_, v)| v.is_some()) {
        Some((field, Some(value))) => Err(cx.invalid(
            field,
            value,
            "with [[cluster.pools]], each pool sets its own gpu, tensor_parallel and replicas; remove this field",
        )),
        _ => Ok(()),
    }
}

/// The pools, in routing order. `model` gets its experts placed as each pool's engine asks.
pub(super) fn resolve_pools(
    raw: &RawScenario,
    cluster: &RawCluster,
    router: Router,
    model: &mut ModelSpec,
    cx: &Cx,
) -> Result<Vec<Pool>, ScenarioError> {
    reject_single_pool_fields(raw, cx)?;
    if cluster.pools.is_empty() {
        return Err(cx.invalid("cluster.pools", "[]", "give at least one [[cluster.pools]] table"));
    }
    let pools = cluster
        .pools
        .iter()
        .enumerate()
        .map(|(i, pool)| resolve_pool(raw, pool, &format!("cluster.pools[{i}]"), model, cx))
        .collect::<Result<Vec<Pool>, ScenarioError>>()?;
    check_weights(&cluster.pools, router, cx)?;
    let replicas_total: u64 = pools.iter().map(|p| p.engine.replicas as u64).sum();
    if replicas_total > hardware::REPLICAS_MAX as u64 {
        let last = pools.len() - 1;
        return Err(cx.invalid(
            &format!("cluster.pools[{last}].replicas"),
            pools[last].engine.replicas,
            format!("the pools hold {replicas_total} replicas in all, more than {}", hardware::REPLICAS_MAX),
        ));
    }
    Ok(pools)
}

/// One pool: the scenario's `[engine]` with the pool's fields in place, resolved and sized on the
/// pool's GPU as a pool-less scenario is.
fn resolve_pool(raw: &RawScenario, pool: &RawPool, prefix: &str, model: &mut ModelSpec, cx: &Cx) -> Result<Pool, ScenarioError> {
    let Some(gpu_name) = &pool.gpu else {
        return Err(cx.invalid(
            &format!("{prefix}.gpu"),
            "(missing)",
            format!("each pool names a GPU preset; known: {}", GpuSpec::preset_names().join(", ")),
        ));
    };
    let raw_engine = crate::scenario::schema::RawEngine {
        tensor_parallel: pool.tensor_parallel,
        replicas: pool.replicas,
        num_gpu_blocks: pool.num_gpu_blocks.or(raw.engine.num_gpu_blocks),
        gpu_memory_utilization: pool.gpu_memory_utilization.or(raw.engine.gpu_memory_utilization),
        ..raw.engine.clone()
    };
    let relabel = |e| in_pool(e, pool, prefix, gpu_name);
    let gpu = hardware::resolve_gpu(&RawHardware { gpu: Some(gpu_name.clone()), ..RawHardware::default() }, cx)
        .map_err(relabel)?;
    let mut engine = engine::resolve_engine(&raw_engine, model, cx).map_err(relabel)?;
    model::place_experts(&raw_engine, model, &engine, cx).map_err(relabel)?;
    hardware::resolve_count(&RawHardware::default(), &engine, cx).map_err(relabel)?;
    hardware::size_memory(&raw_engine, model, &gpu, &mut engine, cx).map_err(relabel)?;
    Ok(Pool { gpu, engine, weight: pool.weight })
}

/// An error found while resolving a pool, said of the pool: a field the pool gave is named as its
/// own (`cluster.pools[1].tensor_parallel`); a shared one says which pool's GPU made it wrong.
fn in_pool(error: ScenarioError, pool: &RawPool, prefix: &str, gpu_name: &str) -> ScenarioError {
    let ScenarioError::Invalid { file, field, value, reason } = error else { return error };
    let own = match field.as_str() {
        // `hardware` alone: the weights fit no tensor-parallel degree on this GPU.
        "hardware" | "hardware.gpu" => Some("gpu"),
        "engine.tensor_parallel" => Some("tensor_parallel"),
        "engine.replicas" => Some("replicas"),
        "engine.num_gpu_blocks" if pool.num_gpu_blocks.is_some() => Some("num_gpu_blocks"),
        "engine.gpu_memory_utilization" if pool.gpu_memory_utilization.is_some() => Some("gpu_memory_utilization"),
        _ => None,
    };
    match own {
        Some(own) => ScenarioError::Invalid { file, field: format!("{prefix}.{own}"), value, reason },
        None => ScenarioError::Invalid { file, field, value, reason: format!("in {prefix} ({gpu_name}): {reason}") },
    }
}

/// `weight` is for the weighted router only, and either every pool gives one or none does (a
/// given weight and one derived from the cost model are in different units).
fn check_weights(pools: &[RawPool], router: Router, cx: &Cx) -> Result<(), ScenarioError> {
    let field = |i: usize| format!("cluster.pools[{i}].weight");
    let Some((given, w)) = pools.iter().enumerate().find_map(|(i, p)| Some((i, p.weight?))) else { return Ok(()) };
    if router != Router::WeightedLeastOutstanding {
        return Err(cx.invalid(
            &field(given),
            w,
            format!("only router = \"weighted-least-outstanding\" uses weights (engine.router is {:?})", router.name()),
        ));
    }
    for (i, pool) in pools.iter().enumerate() {
        match pool.weight {
            Some(w) if !(w.is_finite() && w > 0.0) => return Err(cx.invalid(&field(i), w, "must be a positive, finite number")),
            Some(_) => {}
            None => {
                return Err(cx.invalid(
                    &field(i),
                    "(missing)",
                    "give every pool a weight or none (then each is derived from its cost model)",
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
#[path = "pools_tests.rs"]
mod tests;
