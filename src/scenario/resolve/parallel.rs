//! `engine.data_parallel` and `engine.all2all_backend` (vLLM's `--data-parallel-size` and
//! `--all2all-backend`): what vLLM accepts, refused by name where it would not run or where
//! servesim does not model it.

use super::context::{Cx, positive_or, quote};
use crate::scenario::engine_profile::EngineVersion;
use crate::scenario::model::ModelSpec;
use crate::scenario::parallel::{All2AllBackend, DataParallel};
use crate::scenario::schema::RawEngine;
use crate::scenario::{EngineConfig, GpuSpec, Policy, Router, ScenarioError};

/// More ranks than any deployment runs (vLLM's wide-EP recipes reach a few hundred GPUs); past
/// it a value is surely a typo, and each rank holds a scheduler.
const DATA_PARALLEL_MAX: u32 = 1024;

const fn release(major: u32, minor: u32) -> EngineVersion {
    EngineVersion { major, minor, patch: 0 }
}

/// vLLM's default backend at `version`: `VLLM_ALL2ALL_BACKEND`'s "naive" before 0.11.0, which
/// added `allgather_reducescatter` and made it the default (`vllm/envs.py` in the 0.9.2 to
/// 0.11.0 wheels; `ParallelConfig.all2all_backend` from 0.12.0).
fn default_backend(version: EngineVersion) -> All2AllBackend {
    if version < release(0, 11) { All2AllBackend::Naive } else { All2AllBackend::AllgatherReducescatter }
}

/// Why vLLM `version` does not run `backend`, where it does not (read in the wheels'
/// `vllm/envs.py` and `vllm/config/parallel.py`): `allgather_reducescatter` came in 0.11.0;
/// 0.17.0 dropped pplx and 0.19.0 naive, each falling back to `allgather_reducescatter` with a
/// warning.
fn unavailable(backend: All2AllBackend, version: EngineVersion) -> Option<String> {
    let (since, until) = match backend {
        All2AllBackend::AllgatherReducescatter => (Some(release(0, 11)), None),
        All2AllBackend::Pplx => (None, Some(release(0, 17))),
        All2AllBackend::Naive => (None, Some(release(0, 19))),
        All2AllBackend::DeepepHighThroughput | All2AllBackend::DeepepLowLatency => (None, None),
    };
    let name = backend.name();
    match (since, until) {
        (Some(first), _) if version < first => Some(format!("vLLM {version} has no {name} backend (added in {first})")),
        (_, Some(gone)) if version >= gone => Some(format!(
            "vLLM {version} has no {name} backend (removed in {gone}: it warns and runs allgather_reducescatter); set that"
        )),
        _ => None,
    }
}

/// Fills `engine.data_parallel` (the experts already placed: expert parallelism decides where
/// they may go). `gpu` is `None` for a cluster of pools, which the ranks are not modelled in.
pub(super) fn resolve_data_parallel(
    raw: &RawEngine,
    model: &ModelSpec,
    gpu: Option<&GpuSpec>,
    engine: &mut EngineConfig,
    cx: &Cx,
) -> Result<(), ScenarioError> {
    let ranks = positive_or(cx, "engine.data_parallel", raw.data_parallel, 1)?;
    let backend = match raw.all2all_backend.as_deref() {
        None => None,
        Some(name) => Some(All2AllBackend::from_name(name).ok_or_else(|| {
            let known: Vec<&str> = All2AllBackend::ALL.iter().map(|b| b.name()).collect();
            cx.invalid("engine.all2all_backend", quote(name), format!("unknown backend; known: {}", known.join(", ")))
        })?),
    };
    let field = "engine.data_parallel";
    if ranks > DATA_PARALLEL_MAX {
        return Err(cx.invalid(field, ranks, format!("more than {DATA_PARALLEL_MAX} ranks")));
    }
    if ranks > 1 {
        match engine.policy {
            Policy::VllmV1 => {}
            other => {
                return Err(cx.invalid(
                    field,
                    ranks,
                    format!("data-parallel ranks are vLLM V1's engine (DPEngineCoreProc); policy {:?} has none", other.name()),
                ));
            }
        }
        if gpu.is_none() {
            return Err(cx.invalid(field, ranks, "data-parallel ranks inside [[cluster.pools]] are not modelled"));
        }
        if matches!(engine.router, Router::PrefixAware | Router::WeightedLeastOutstanding | Router::CacheAware) {
            return Err(cx.invalid(
                "engine.router",
                quote(engine.router.name()),
                "with data-parallel ranks: requests go to a deployment by round-robin or least-outstanding, then to a rank by vLLM's balancer",
            ));
        }
        if let Some(moe) = model.moe.as_ref() {
            let gpus = engine.tensor_parallel * ranks;
            if moe.expert_parallel && !moe.num_experts.is_multiple_of(gpus) {
                return Err(cx.invalid(
                    field,
                    ranks,
                    format!(
                        "the model's {} experts do not divide over tensor_parallel × data_parallel = {gpus} GPUs with expert_parallel = true",
                        moe.num_experts
                    ),
                ));
            }
        }
    }
    // The release modelled: the one named, else the engine profile's default.
    let version = engine.version.or_else(|| engine.profile.as_ref().map(|p| p.default_version));
    let Some(backend) = backend else {
        let all2all = version.map_or(All2AllBackend::AllgatherReducescatter, default_backend);
        engine.data_parallel = (ranks > 1).then_some(DataParallel { ranks, all2all, lockstep: model.moe.is_some() });
        return Ok(());
    };
    let field = "engine.all2all_backend";
    let name = quote(backend.name());
    let Some(moe) = model.moe.as_ref() else {
        return Err(cx.invalid(field, name, "moves a mixture of experts' tokens, and the model has no experts"));
    };
    if ranks == 1 {
        return Err(cx.invalid(field, name, "carries tokens between data-parallel ranks, and engine.data_parallel is 1"));
    }
    if backend.is_all_to_all() && !moe.expert_parallel {
        return Err(cx.invalid(field, name, "vLLM uses it only with expert parallelism (engine.expert_parallel = true)"));
    }
    if backend.is_all_to_all() && gpu.is_some_and(|g| g.name.starts_with("MI")) {
        return Err(cx.invalid(field, name, format!("its kernels are CUDA's, and {} is an AMD GPU", gpu.map_or("", |g| g.name.as_str()))));
    }
    if let Some(why) = version.and_then(|v| unavailable(backend, v)) {
        return Err(cx.invalid(field, name, why));
    }
    engine.data_parallel = Some(DataParallel { ranks, all2all: backend, lockstep: true });
    Ok(())
}
