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
use crate::scenario::{KvLink, Policy, Pool, PoolRole, Router, ScenarioError};

/// Pools one scenario may hold: a fleet mixes a few GPU types and TP degrees, and each pool
/// costs its own cost model and KV sizing before the first event.
const POOLS_MAX: usize = 256;

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
    if cluster.pools.len() > POOLS_MAX {
        return Err(cx.invalid(
            &format!("cluster.pools[{POOLS_MAX}]"),
            format!("(pool {} of {})", POOLS_MAX + 1, cluster.pools.len()),
            format!(
                "at most {POOLS_MAX} pools: each is priced and sized on its own (65,536 of them ran minutes with no output);                  replicas of one GPU and tensor_parallel belong in one pool's `replicas`"
            ),
        ));
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
        max_num_seqs: pool.max_num_seqs.or(raw.engine.max_num_seqs),
        max_num_batched_tokens: pool.max_num_batched_tokens.or(raw.engine.max_num_batched_tokens),
        num_gpu_blocks: pool.num_gpu_blocks.or(raw.engine.num_gpu_blocks),
        gpu_memory_utilization: pool.gpu_memory_utilization.or(raw.engine.gpu_memory_utilization),
        ..raw.engine.clone()
    };
    let relabel = |e| in_pool(e, pool, prefix, gpu_name);
    let gpu = hardware::resolve_gpu(&RawHardware { gpu: Some(gpu_name.clone()), ..RawHardware::default() }, cx)
        .map_err(relabel)?;
    let mut engine = engine::resolve_engine(&raw_engine, model, Some(&gpu), cx).map_err(relabel)?;
    model::place_experts(&raw_engine, model, &engine, cx).map_err(relabel)?;
    hardware::resolve_count(&RawHardware::default(), &engine, cx).map_err(relabel)?;
    hardware::size_memory(&raw_engine, model, &gpu, &mut engine, cx).map_err(relabel)?;
    let role = match pool.role.as_deref().map(|r| r.trim().to_ascii_lowercase()) {
        None => PoolRole::Serve,
        Some(r) if r == "prefill" => PoolRole::Prefill,
        Some(r) if r == "decode" => PoolRole::Decode,
        Some(r) => return Err(cx.invalid(&format!("{prefix}.role"), quote(&r), "unknown role; known: prefill, decode")),
    };
    Ok(Pool { gpu, engine, weight: pool.weight, role })
}

/// A link preset: bandwidth per GPU per direction, GB/s, and latency per transfer, µs.
/// - `nvlink`: NVLink 4 within an HGX H100 node, 900 GB/s per GPU both ways together (NVIDIA
///   H100 datasheet), so 450 GB/s each way; a few µs to set up a copy.
/// - `infiniband`: one 400 Gb/s NDR port per GPU (ConnectX-7, as DGX H100 nodes have), 50 GB/s;
///   RDMA reads of scattered blocks, about 10 µs to start.
/// - `ethernet`: 100 Gb/s per GPU, 12.5 GB/s, through a TCP or RoCE stack: about 25 µs.
pub const LINK_PRESETS: [(&str, f64, f64); 3] = [("nvlink", 450.0, 2.0), ("infiniband", 50.0, 10.0), ("ethernet", 12.5, 25.0)];

/// Past these a link is surely a typo (1 PB/s per GPU, 1 s per transfer).
const LINK_BANDWIDTH_GBPS_MAX: f64 = 1e6;
const LINK_LATENCY_US_MAX: f64 = 1e6;

/// `[cluster] mode`: pooled, or disaggregated with prefill and decode pools and the link
/// between them (returned).
pub(super) fn resolve_mode(cluster: &RawCluster, pools: &[Pool], policy: Policy, cx: &Cx) -> Result<Option<KvLink>, ScenarioError> {
    let disaggregated = match cluster.mode.as_deref().map(|m| m.trim().to_ascii_lowercase()) {
        None => false,
        Some(m) if m == "pooled" => false,
        Some(m) if m == "disaggregated" => true,
        Some(m) => return Err(cx.invalid("cluster.mode", quote(&m), "unknown mode; known: pooled, disaggregated")),
    };
    if !disaggregated {
        let link_fields = [("cluster.link", cluster.link.as_deref().map(quote)), ("cluster.link_bandwidth_gbps", cluster.link_bandwidth_gbps.map(|v| v.to_string())), ("cluster.link_latency_us", cluster.link_latency_us.map(|v| v.to_string()))];
        if let Some((field, Some(value))) = link_fields.into_iter().find(|(_, v)| v.is_some()) {
            return Err(cx.invalid(field, value, "only a disaggregated cluster (mode = \"disaggregated\") moves KV over a link"));
        }
        if let Some(i) = pools.iter().position(|p| p.role != PoolRole::Serve) {
            return Err(cx.invalid(
                &format!("cluster.pools[{i}].role"),
                quote(pools[i].role.name()),
                "roles are for a disaggregated cluster: set cluster.mode = \"disaggregated\"",
            ));
        }
        return Ok(None);
    }
    if policy == Policy::Tgi {
        return Err(cx.invalid("cluster.mode", quote("disaggregated"), "TGI 2.3 has no disaggregated serving; use a vLLM policy"));
    }
    if policy == Policy::Sglang {
        // SGLang 0.4.9 has PD disaggregation (mooncake/nixl transfer, its own queues), which
        // servesim does not model: its decode side would take KV its radix cache never held.
        return Err(cx.invalid("cluster.mode", quote("disaggregated"), "servesim models SGLang's scheduler without its PD disaggregation; use a vLLM policy"));
    }
    if let Some(i) = pools.iter().position(|p| p.role == PoolRole::Serve) {
        return Err(cx.invalid(&format!("cluster.pools[{i}].role"), "(missing)", "a disaggregated cluster's pools each say role = \"prefill\" or \"decode\""));
    }
    for (role, name) in [(PoolRole::Prefill, "prefill"), (PoolRole::Decode, "decode")] {
        if !pools.iter().any(|p| p.role == role) {
            return Err(cx.invalid("cluster.pools", format!("no {name} pool"), "a disaggregated cluster needs at least one prefill pool and one decode pool"));
        }
    }
    let preset = match cluster.link.as_deref() {
        None => None,
        Some(name) => match LINK_PRESETS.iter().find(|(n, _, _)| n.eq_ignore_ascii_case(name.trim())) {
            Some(&preset) => Some(preset),
            None => {
                let known: Vec<&str> = LINK_PRESETS.iter().map(|p| p.0).collect();
                return Err(cx.invalid("cluster.link", quote(name), format!("unknown link preset; known: {}", known.join(", "))));
            }
        },
    };
    let bandwidth_gbps = match (cluster.link_bandwidth_gbps, preset) {
        (Some(b), _) => b,
        (None, Some(p)) => p.1,
        (None, None) => {
            return Err(cx.invalid("cluster.link", "(missing)", "a disaggregated cluster needs a link: a preset (nvlink, infiniband, ethernet) or link_bandwidth_gbps and link_latency_us"));
        }
    };
    if !(bandwidth_gbps > 0.0 && bandwidth_gbps <= LINK_BANDWIDTH_GBPS_MAX) {
        return Err(cx.invalid("cluster.link_bandwidth_gbps", bandwidth_gbps, format!("must be in (0, {LINK_BANDWIDTH_GBPS_MAX}] GB/s")));
    }
    let latency_us = match (cluster.link_latency_us, preset) {
        (Some(l), _) => l,
        (None, Some(p)) => p.2,
        (None, None) => return Err(cx.invalid("cluster.link_latency_us", "(missing)", "give the latency with link_bandwidth_gbps, or a preset")),
    };
    if !(0.0..=LINK_LATENCY_US_MAX).contains(&latency_us) {
        return Err(cx.invalid("cluster.link_latency_us", latency_us, format!("must be in [0, {LINK_LATENCY_US_MAX}] µs")));
    }
    let name = match (preset, cluster.link_bandwidth_gbps.is_some() || cluster.link_latency_us.is_some()) {
        (Some(p), false) => p.0.to_string(),
        _ => "custom".to_string(),
    };
    Ok(Some(KvLink { name, bandwidth_bytes_per_s_per_gpu: bandwidth_gbps * 1e9, latency_ns: (latency_us * 1e3).round() as u64 }))
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
