//! `[engine]`: each policy's defaults, as the modelled engine and version fill them in, and the
//! start-up checks it makes. The KV capacity is left to `hardware`, which needs the GPU.

use super::context::{Cx, positive_or, quote, reject_unused_fields};
use super::hardware::check_tp;
use super::sglang::resolve_sglang;
use super::speculative::resolve_speculative;
use crate::scenario::engine_profile::{self, EngineProfile, EngineVersion};
use crate::scenario::model::ModelSpec;
use crate::scenario::schema::{RawEngine, RawVersion};
use crate::scenario::speculative::SpecMethod;
use crate::scenario::{EngineConfig, GpuSpec, Policy, Router, ScenarioError, TgiConfig};

/// vLLM (both engines): `--block-size` 16, `--gpu-memory-utilization` 0.90,
/// `--tensor-parallel-size` 1. `--max-num-seqs` and, for V1, `--max-num-batched-tokens` are the
/// engine profile's (they depend on the release and the GPU).
const DEFAULT_BLOCK_SIZE: u32 = 16;
const DEFAULT_GPU_MEMORY_UTILIZATION: f64 = 0.90;
/// servesim's own engine (`servesim serve`): `--max-num-seqs` 256, 2048 tokens a step, no
/// prefix caching unless asked, as vLLM 0.8's V1 defaults it follows.
const SERVESIM_MAX_NUM_SEQS: u32 = 256;
const SERVESIM_MAX_NUM_BATCHED_TOKENS: u32 = 2048;

/// vLLM V1's KV cache manager admits a request whenever its blocks fit: no watermark.
const V1_WATERMARK: f64 = 0.0;

/// vLLM 0.6.3 (V0 engine, `EngineArgs.create_engine_config`): when `--enable-chunked-prefill` is
/// not given, it is turned on for long-context models, `max_model_len > 32768` (ENGINES.md),
/// and the step token budget is then 512.
const V0_LONG_CONTEXT_THRESHOLD: u32 = 32768;
const V0_CHUNKED_MAX_NUM_BATCHED_TOKENS: u32 = 512;
/// vLLM 0.6.3 `SchedulerConfig` without chunked prefill: `max(max_model_len, 2048)`.
const V0_MIN_MAX_NUM_BATCHED_TOKENS: u32 = 2048;
/// vLLM 0.6.3 `BlockSpaceManager` watermark: 1% of blocks kept free when admitting a prompt.
const V0_WATERMARK: f64 = 0.01;

/// TGI 2.3 launcher (`launcher/src/main.rs`): without `--max-input-tokens` / `--max-total-tokens`,
/// they default to the model's `max_position_embeddings` − 1 and `max_position_embeddings`, but a
/// larger `max_position_embeddings` is first capped at 4096 ("to save VRAM by refusing large
/// prompts in order to allow more users on the same hardware").
const TGI_MAX_POSITIONS_DEFAULT: u32 = 4096;
/// TGI 2.3 launcher: `max_batch_prefill_tokens` defaults to `max_input_tokens` + 50 ("some edge
/// in order to account for potential block_size alignment issue").
const TGI_PREFILL_MARGIN_TOKENS: u32 = 50;
/// TGI 2.3 launcher defaults of `--waiting-served-ratio`, `--max-waiting-tokens` and
/// `--max-concurrent-requests`.
const TGI_WAITING_SERVED_RATIO: f64 = 0.3;
const TGI_MAX_WAITING_TOKENS: u32 = 20;
const TGI_MAX_CONCURRENT_REQUESTS: u32 = 128;
/// TGI's shards read `CUDA_MEMORY_FRACTION` (default 1.0): the share of GPU memory they may use,
/// our `gpu_memory_utilization` for policy "tgi".
const TGI_MEMORY_FRACTION: f64 = 1.0;

/// The release `[engine] version` names, checked.
fn resolve_version(raw: &RawEngine, cx: &Cx) -> Result<Option<EngineVersion>, ScenarioError> {
    match &raw.version {
        None => Ok(None),
        Some(RawVersion::Number(n)) => Err(cx.invalid(
            "engine.version",
            n,
            "write the release as a string, e.g. version = \"0.10.1\" (as a number, 0.10 would read as 0.1)",
        )),
        Some(RawVersion::Text(text)) => EngineVersion::parse(text)
            .map(Some)
            .ok_or_else(|| cx.invalid("engine.version", quote(text), "expected a release number such as \"0.6.3\" or \"0.15.1\"")),
    }
}

/// `engine.version` as written, for messages.
fn version_text(raw: &RawEngine) -> String {
    match &raw.version {
        Some(RawVersion::Text(t)) => quote(t),
        Some(RawVersion::Number(n)) => n.clone(),
        None => "(not set)".into(),
    }
}

/// The engine profile of `policy` at `version` (docs/engine-profiles.md); servesim's own engine
/// has none (`validate --engine` measures its host time).
fn resolve_profile(policy: Policy, version: Option<EngineVersion>, raw: &RawEngine, cx: &Cx) -> Result<Option<EngineProfile>, ScenarioError> {
    if policy == Policy::Servesim {
        return match raw.version {
            Some(_) => Err(cx.invalid("engine.version", version_text(raw), "policy \"servesim\" is this build's own engine, which has no release number")),
            None => Ok(None),
        };
    }
    engine_profile::select(policy, version).map(Some).map_err(|reason| cx.invalid("engine.version", version_text(raw), reason))
}

pub(super) fn resolve_engine(
    raw: &RawEngine,
    model: &ModelSpec,
    gpu: Option<&GpuSpec>,
    cx: &Cx,
) -> Result<EngineConfig, ScenarioError> {
    let version = resolve_version(raw, cx)?;
    let policy = match raw.policy.as_deref() {
        // A vLLM release runs the engine it defaulted to; 1.x and later are not vLLM's.
        None => match version {
            Some(v) if v.major == 0 => engine_profile::policy_of_vllm_version(v),
            Some(v) => {
                return Err(cx.invalid(
                    "engine.version",
                    quote(&v.to_string()),
                    "is not a vLLM release (0.x): name the engine with engine.policy (e.g. \"tgi\")",
                ));
            }
            None => Policy::VllmV1,
        },
        Some(p) => match p.trim().to_ascii_lowercase().replace('_', "-").as_str() {
            "vllm-v1" => Policy::VllmV1,
            "vllm-v0" => Policy::VllmV0,
            "tgi" => Policy::Tgi,
            "servesim" => Policy::Servesim,
            "sglang" => Policy::Sglang,
            _ => {
                return Err(cx.invalid(
                    "engine.policy",
                    quote(p),
                    "unknown policy; known: vllm-v1, vllm-v0, tgi, servesim, sglang",
                ));
            }
        },
    };
    let router = match raw.router.as_deref() {
        None => Router::RoundRobin,
        Some(r) => match r.trim().to_ascii_lowercase().replace('_', "-").as_str() {
            "round-robin" => Router::RoundRobin,
            "least-outstanding" | "least-outstanding-requests" => Router::LeastOutstanding,
            "weighted-least-outstanding" | "weighted-least-outstanding-requests" => Router::WeightedLeastOutstanding,
            "prefix-aware" => Router::PrefixAware,
            "cache-aware" => Router::CacheAware,
            _ => {
                return Err(cx.invalid(
                    "engine.router",
                    quote(r),
                    "unknown router; known: round-robin, least-outstanding, weighted-least-outstanding, prefix-aware, cache-aware",
                ));
            }
        },
    };
    let positive = |field: &str, v: Option<u32>, default: u32| positive_or(cx, &format!("engine.{field}"), v, default);

    let tp = positive("tensor_parallel", raw.tensor_parallel, 1)?;
    check_tp(model, tp).map_err(|reason| cx.invalid("engine.tensor_parallel", tp, reason))?;
    let replicas = positive("replicas", raw.replicas, 1)?;
    let block_size = positive("block_size", raw.block_size, DEFAULT_BLOCK_SIZE)?;
    reject_other_policy_fields(raw, policy, cx)?;
    if let (Some(on), false) = (raw.async_scheduling, policy == Policy::VllmV1) {
        return Err(cx.invalid("engine.async_scheduling", on, format!("vLLM V1's --async-scheduling; policy {:?} has none", policy.name())));
    }
    let profile = resolve_profile(policy, version, raw, cx)?;
    // Prefix caching is on by default in vLLM V1 and off in V0 and TGI 2.3 (the profiles say);
    // servesim's own engine caches only when asked (`serve --enable-prefix-caching`).
    // vLLM (through 0.11) turns prefix caching off for a model with linear-attention layers,
    // whose per-sequence state no cached block holds ("Hybrid or mamba-based model detected:
    // disabling prefix caching since it is not yet supported"); asked for, it is refused here.
    if raw.sglang.is_some() && policy != Policy::Sglang {
        return Err(cx.invalid(
            "engine.sglang",
            "[engine.sglang]",
            format!("holds SGLang's flags, and policy {:?} is not SGLang; set engine.policy = \"sglang\"", policy.name()),
        ));
    }
    if policy == Policy::Sglang && model.attention.is_mixed() {
        return Err(cx.invalid(
            "engine.policy",
            quote("sglang"),
            format!("{} has sliding, chunked or linear attention layers, which servesim models for vLLM only", model.name),
        ));
    }
    let linear = model.attention.linear.is_some();
    if linear && raw.enable_prefix_caching == Some(true) {
        return Err(cx.invalid(
            "engine.enable_prefix_caching",
            true,
            format!("{} has linear-attention layers, whose state no cached prefix holds; vLLM turns prefix caching off for it", model.name),
        ));
    }
    let enable_prefix_caching =
        !linear && raw.enable_prefix_caching.unwrap_or(profile.as_ref().is_some_and(|p| p.defaults.enable_prefix_caching));
    if policy == Policy::Tgi && model.attention.is_mixed() {
        return Err(cx.invalid(
            "engine.policy",
            quote("tgi"),
            format!("{} has sliding, chunked or linear attention layers, which servesim models for vLLM only", model.name),
        ));
    }
    let (default_max_num_seqs, profile_budget) = match &profile {
        Some(p) => p.batch_defaults(gpu),
        None => (SERVESIM_MAX_NUM_SEQS, Some(SERVESIM_MAX_NUM_BATCHED_TOKENS)),
    };
    let version = profile.as_ref().map(|p| version.unwrap_or(p.default_version));
    if policy == Policy::Tgi && enable_prefix_caching {
        return Err(cx.invalid(
            "engine.enable_prefix_caching",
            true,
            "TGI 2.3 has no prefix caching (it came with TGI 3.0's v3 backend), and servesim models 2.3",
        ));
    }
    if router == Router::PrefixAware && !enable_prefix_caching {
        return Err(cx.invalid(
            "engine.router",
            quote("prefix-aware"),
            format!(
                "routes by each replica's prefix cache, and engine.enable_prefix_caching is false (policy {:?})",
                policy.name()
            ),
        ));
    }
    if policy == Policy::Tgi || policy == Policy::Sglang {
        let common = EngineConfig {
            policy,
            tensor_parallel: tp,
            replicas,
            router,
            block_size,
            // The rest is TGI's, filled in by `resolve_tgi` and `size_memory`.
            max_num_batched_tokens: 0,
            max_num_seqs: 0,
            enable_chunked_prefill: false,
            gpu_memory_utilization: 0.0,
            max_model_len: 0,
            num_gpu_blocks: 0,
            kv_blocks_per_seq: 0,
            watermark: 0.0,
            enable_prefix_caching,
            num_scheduler_steps: 1,
            speculative: resolve_speculative(raw.speculative.as_ref(), policy, tp, 1, model, cx)?,
            activation_reserve_bytes: 0,
            tgi: None,
            sglang: None,
            profile: profile.clone(),
            version,
            data_parallel: None,
        };
        if policy == Policy::Sglang {
            return resolve_sglang(raw, model, gpu, common, cx);
        }
        return resolve_tgi(raw, model, common, cx);
    }
    let max_num_seqs = positive("max_num_seqs", raw.max_num_seqs, default_max_num_seqs)?;
    let max_model_len = positive(
        "max_model_len",
        raw.max_model_len,
        model.max_position_embeddings,
    )?;
    if max_model_len > model.max_position_embeddings {
        return Err(cx.invalid(
            "engine.max_model_len",
            max_model_len,
            format!(
                "exceeds the model's max_position_embeddings ({}); vLLM refuses this unless \
                 VLLM_ALLOW_LONG_MAX_MODEL_LEN is set",
                model.max_position_embeddings
            ),
        ));
    }
    let gpu_memory_utilization = raw
        .gpu_memory_utilization
        .unwrap_or(DEFAULT_GPU_MEMORY_UTILIZATION);
    if !(gpu_memory_utilization > 0.0 && gpu_memory_utilization <= 1.0) {
        return Err(cx.invalid(
            "engine.gpu_memory_utilization",
            gpu_memory_utilization,
            "must be in (0, 1]",
        ));
    }

    let (enable_chunked_prefill, default_budget, default_watermark) = match policy {
        Policy::VllmV1 | Policy::Servesim => {
            if raw.enable_chunked_prefill == Some(false) {
                return Err(cx.invalid(
                    "engine.enable_chunked_prefill",
                    false,
                    "the vLLM V1 scheduler always chunks prefills (vLLM 0.8 falls back to the V0 engine \
                     when it is disabled); use policy = \"vllm-v0\" to model that",
                ));
            }
            (true, profile_budget.unwrap_or(SERVESIM_MAX_NUM_BATCHED_TOKENS), V1_WATERMARK)
        }
        Policy::VllmV0 => {
            let chunked = raw
                .enable_chunked_prefill
                .unwrap_or(max_model_len > V0_LONG_CONTEXT_THRESHOLD);
            let budget = if chunked {
                V0_CHUNKED_MAX_NUM_BATCHED_TOKENS
            } else {
                max_model_len.max(V0_MIN_MAX_NUM_BATCHED_TOKENS)
            };
            (chunked, budget, V0_WATERMARK)
        }
        Policy::Tgi | Policy::Sglang => unreachable!("resolved by resolve_tgi and resolve_sglang"),
    };
    let max_num_batched_tokens = positive(
        "max_num_batched_tokens",
        raw.max_num_batched_tokens,
        default_budget,
    )?;
    if !enable_chunked_prefill && max_num_batched_tokens < max_model_len {
        // vLLM's SchedulerConfig check, in its words.
        return Err(cx.invalid(
            "engine.max_num_batched_tokens",
            max_num_batched_tokens,
            format!(
                "smaller than max_model_len ({max_model_len}) with chunked prefill off: this would limit the \
                 maximum sequence length to max_num_batched_tokens; increase max_num_batched_tokens, decrease \
                 max_model_len or enable chunked prefill"
            ),
        ));
    }
    if max_num_batched_tokens < max_num_seqs {
        // Also vLLM's SchedulerConfig check.
        return Err(cx.invalid(
            "engine.max_num_batched_tokens",
            max_num_batched_tokens,
            format!("must be at least max_num_seqs ({max_num_seqs})"),
        ));
    }
    let watermark = raw.watermark.unwrap_or(default_watermark);
    if !(0.0..1.0).contains(&watermark) {
        return Err(cx.invalid("engine.watermark", watermark, "must be in [0, 1)"));
    }
    let num_scheduler_steps =
        resolve_num_scheduler_steps(raw, policy, enable_chunked_prefill, max_num_batched_tokens, max_model_len, cx)?;

    let mut engine = EngineConfig {
        policy,
        tensor_parallel: tp,
        replicas,
        router,
        max_num_batched_tokens,
        max_num_seqs,
        enable_chunked_prefill,
        block_size,
        gpu_memory_utilization,
        max_model_len,
        // Filled in by `size_memory`, with the block size where a hybrid layout needs a larger one.
        num_gpu_blocks: 0,
        kv_blocks_per_seq: 0,
        watermark,
        enable_prefix_caching,
        num_scheduler_steps,
        speculative: resolve_speculative(raw.speculative.as_ref(), policy, tp, num_scheduler_steps, model, cx)?,
        activation_reserve_bytes: 0,
        tgi: None,
        sglang: None,
        profile,
        version,
        // Filled in by `parallel::resolve_data_parallel`, which needs the experts placed.
        data_parallel: None,
    };
    resolve_async_scheduling(raw, &mut engine, cx)?;
    Ok(engine)
}

/// vLLM V1's async scheduling: the next step is scheduled while the GPU runs this one, which hides
/// the profile's CPU time (`cpu_overlap`). The profile carries the release's default (on from
/// 0.14); `engine.async_scheduling` is `--[no-]async-scheduling`. vLLM turns the default off for
/// a proposer other than an EAGLE/MTP head, and refuses async scheduling asked for with one
/// (vllm/config/vllm.py: the same rule in the 0.14.0 and 0.19.0 wheels).
fn resolve_async_scheduling(raw: &RawEngine, engine: &mut EngineConfig, cx: &Cx) -> Result<(), ScenarioError> {
    const FIELD: &str = "engine.async_scheduling";
    let asked = raw.async_scheduling;
    let serial_proposer = engine.speculative.as_ref().map(|s| s.method).filter(|m| *m != SpecMethod::Mtp);
    // Other policies' `async_scheduling` is refused with the policy, before their defaults.
    let (Some(profile), Policy::VllmV1) = (engine.profile.as_mut(), engine.policy) else { return Ok(()) };
    let (share, source) = match (asked, serial_proposer) {
        (Some(true), Some(method)) => {
            return Err(cx.invalid(FIELD, true, format!("vLLM refuses async scheduling with {} speculation (EAGLE/MTP heads only)", method.name())));
        }
        (Some(true), None) => {
            let first = EngineVersion { major: 0, minor: 10, patch: 0 };
            if let Some(v) = engine.version.filter(|v| *v < first) {
                return Err(cx.invalid(FIELD, true, format!("vLLM {v} has no async scheduling (added in 0.10.0)")));
            }
            // Releases that default to it hide this share; 0.10 to 0.13 run the same scheduler when asked.
            let newest = engine_profile::select(Policy::VllmV1, None).map_err(|reason| cx.invalid(FIELD, true, reason))?;
            let share = newest.engine_time_value("cpu_overlap").unwrap_or(0.0);
            (share, format!("engine.async_scheduling = true: the share {} hides", newest.name))
        }
        (Some(false), _) => (0.0, "engine.async_scheduling = false: steps scheduled in series".to_string()),
        (None, Some(method)) => (0.0, format!("async scheduling off: vLLM disables it for {} speculation", method.name())),
        (None, None) => return Ok(()),
    };
    profile.override_engine_time("cpu_overlap", share, &source);
    Ok(())
}

/// The longest multi-step window a scenario takes. vLLM 0.6 takes any positive number; its
/// documentation and benchmarks use 8 to 16, and a window holds every token of a batch back
/// for its whole length, so past a few hundred steps a scenario is surely a typo.
pub const NUM_SCHEDULER_STEPS_MAX: u32 = 256;

/// `engine.num_scheduler_steps`: vLLM 0.6's multi-step scheduling (docs/multi-step.md). vLLM V1
/// dropped it, and TGI never had it; with chunked prefill, vLLM 0.6.3 schedules prompts whole
/// under it, so the step budget must hold the longest sequence or a long prompt would wait for
/// ever.
fn resolve_num_scheduler_steps(
    raw: &RawEngine,
    policy: Policy,
    enable_chunked_prefill: bool,
    max_num_batched_tokens: u32,
    max_model_len: u32,
    cx: &Cx,
) -> Result<u32, ScenarioError> {
    let steps = positive_or(cx, "engine.num_scheduler_steps", raw.num_scheduler_steps, 1)?;
    if steps == 1 {
        return Ok(1);
    }
    if steps > NUM_SCHEDULER_STEPS_MAX {
        return Err(cx.invalid("engine.num_scheduler_steps", steps, format!("must be at most {NUM_SCHEDULER_STEPS_MAX}")));
    }
    if policy == Policy::VllmV1 {
        return Err(cx.invalid(
            "engine.num_scheduler_steps",
            steps,
            "vLLM V1 has no multi-step scheduling (it was a V0 feature, vLLM 0.6.x); use policy = \"vllm-v0\"",
        ));
    }
    if enable_chunked_prefill && max_num_batched_tokens < max_model_len {
        return Err(cx.invalid(
            "engine.max_num_batched_tokens",
            max_num_batched_tokens,
            format!(
                "smaller than max_model_len ({max_model_len}) with num_scheduler_steps = {steps} and chunked prefill: \
                 multi-step scheduling never splits a prompt (vLLM 0.6.3), so a longer one could never be scheduled"
            ),
        ));
    }
    Ok(steps)
}

/// Engine keys that every policy takes; the others belong to one kind of engine.
const ENGINE_COMMON_FIELDS: [&str; 9] = [
    "policy",
    "version",
    "tensor_parallel",
    "replicas",
    "router",
    "block_size",
    "gpu_memory_utilization",
    "num_gpu_blocks",
    "activation_reserve_gib",
];
const ENGINE_SGLANG_COMMON_FIELDS: [&str; 6] = ["policy", "version", "tensor_parallel", "replicas", "router", "sglang"];
const ENGINE_VLLM_FIELDS: [&str; 6] = [
    "max_num_batched_tokens",
    "max_num_seqs",
    "enable_chunked_prefill",
    "max_model_len",
    "watermark",
    "num_scheduler_steps",
];
const ENGINE_TGI_FIELDS: [&str; 7] = [
    "max_input_tokens",
    "max_total_tokens",
    "max_batch_prefill_tokens",
    "max_batch_total_tokens",
    "waiting_served_ratio",
    "max_waiting_tokens",
    "max_concurrent_requests",
];

/// vLLM's keys with policy "tgi", or TGI's with a vLLM policy, are errors: each engine has its
/// own names for its limits, and a key the chosen engine does not read would be silently ignored.
fn reject_other_policy_fields(raw: &RawEngine, policy: Policy, cx: &Cx) -> Result<(), ScenarioError> {
    let show = |v: Option<u32>| v.map(|v| v.to_string());
    let present: [(&str, Option<String>); 13] = [
        ("num_scheduler_steps", show(raw.num_scheduler_steps)),
        ("max_num_batched_tokens", show(raw.max_num_batched_tokens)),
        ("max_num_seqs", show(raw.max_num_seqs)),
        ("enable_chunked_prefill", raw.enable_chunked_prefill.map(|v| v.to_string())),
        ("max_model_len", show(raw.max_model_len)),
        ("watermark", raw.watermark.map(|v| v.to_string())),
        ("max_input_tokens", show(raw.max_input_tokens)),
        ("max_total_tokens", show(raw.max_total_tokens)),
        ("max_batch_prefill_tokens", show(raw.max_batch_prefill_tokens)),
        ("max_batch_total_tokens", show(raw.max_batch_total_tokens)),
        ("waiting_served_ratio", raw.waiting_served_ratio.map(|v| v.to_string())),
        ("max_waiting_tokens", show(raw.max_waiting_tokens)),
        ("max_concurrent_requests", show(raw.max_concurrent_requests)),
    ];
    let own: &[&str] = match policy {
        Policy::VllmV1 | Policy::VllmV0 | Policy::Servesim => &ENGINE_VLLM_FIELDS,
        Policy::Tgi => &ENGINE_TGI_FIELDS,
        Policy::Sglang => &[],
    };
    // SGLang's knobs are under [engine.sglang], by its names; vLLM's names for the common ones
    // are refused with the name to use (`resolve::sglang`).
    let common: &[&str] = if policy == Policy::Sglang { &ENGINE_SGLANG_COMMON_FIELDS } else { &ENGINE_COMMON_FIELDS };
    let allowed: Vec<&str> = common.iter().chain(own).copied().collect();
    reject_unused_fields(cx, "engine", &present, &allowed, &format!("policy {:?}", policy.name()))
}

/// `[engine]` for policy "tgi": TGI 2.3's launcher defaults and start-up checks. The KV capacity
/// (`max_batch_total_tokens`) comes later, from `size_memory`, as TGI measures it at warm-up.
fn resolve_tgi(
    raw: &RawEngine,
    model: &ModelSpec,
    mut engine: EngineConfig,
    cx: &Cx,
) -> Result<EngineConfig, ScenarioError> {
    let positive = |field: &str, v: Option<u32>, default: u32| positive_or(cx, &format!("engine.{field}"), v, default);
    let positions = model.max_position_embeddings.min(TGI_MAX_POSITIONS_DEFAULT);
    let max_total_tokens = positive("max_total_tokens", raw.max_total_tokens, positions)?;
    let max_input_tokens = positive("max_input_tokens", raw.max_input_tokens, positions.saturating_sub(1))?;
    if max_input_tokens == 0 {
        return Err(cx.invalid(
            "model.max_position_embeddings",
            model.max_position_embeddings,
            "leaves TGI's default max_input_tokens (max_position_embeddings − 1) at 0; set engine.max_input_tokens",
        ));
    }
    if max_input_tokens >= max_total_tokens {
        // TGI's launcher: "`max_input_tokens` must be < `max_total_tokens`". Blame the key given.
        let (field, value) = if raw.max_input_tokens.is_some() || raw.max_total_tokens.is_none() {
            ("engine.max_input_tokens", max_input_tokens)
        } else {
            ("engine.max_total_tokens", max_total_tokens)
        };
        return Err(cx.invalid(
            field,
            value,
            format!(
                "max_input_tokens ({max_input_tokens}) must be < max_total_tokens ({max_total_tokens}), as TGI's \
                 launcher requires (defaults: max_position_embeddings capped at {TGI_MAX_POSITIONS_DEFAULT}, minus 1 \
                 for max_input_tokens)"
            ),
        ));
    }
    let max_batch_prefill_tokens = positive(
        "max_batch_prefill_tokens",
        raw.max_batch_prefill_tokens,
        max_input_tokens.saturating_add(TGI_PREFILL_MARGIN_TOKENS),
    )?;
    if max_batch_prefill_tokens < max_input_tokens {
        return Err(cx.invalid(
            "engine.max_batch_prefill_tokens",
            max_batch_prefill_tokens,
            format!("must be >= max_input_tokens ({max_input_tokens}), as TGI's launcher requires"),
        ));
    }
    if let Some(total) = raw.max_batch_total_tokens {
        let field = "engine.max_batch_total_tokens";
        if raw.num_gpu_blocks.is_some() {
            return Err(cx.invalid(
                field,
                total,
                "pins the KV capacity, as engine.num_gpu_blocks does; give one of them",
            ));
        }
        if total == 0 || !total.is_multiple_of(engine.block_size) {
            return Err(cx.invalid(
                field,
                total,
                format!("must be a positive multiple of block_size ({}): TGI's KV cache is whole blocks", engine.block_size),
            ));
        }
        // TGI's launcher checks these two when the flag is given.
        if total < max_batch_prefill_tokens {
            return Err(cx.invalid(
                field,
                total,
                format!("must be >= max_batch_prefill_tokens ({max_batch_prefill_tokens}), as TGI's launcher requires"),
            ));
        }
        if total < max_total_tokens {
            return Err(cx.invalid(
                field,
                total,
                format!("must be >= max_total_tokens ({max_total_tokens}), as TGI's launcher requires"),
            ));
        }
    }
    let waiting_served_ratio = raw.waiting_served_ratio.unwrap_or(TGI_WAITING_SERVED_RATIO);
    if !(waiting_served_ratio >= 0.0 && (waiting_served_ratio as f32).is_finite()) {
        return Err(cx.invalid(
            "engine.waiting_served_ratio",
            waiting_served_ratio,
            "must be a finite number ≥ 0 (waiting requests needed per running request to start a prefill)",
        ));
    }
    let max_concurrent_requests =
        positive("max_concurrent_requests", raw.max_concurrent_requests, TGI_MAX_CONCURRENT_REQUESTS)?;
    let gpu_memory_utilization = raw.gpu_memory_utilization.unwrap_or(TGI_MEMORY_FRACTION);
    if !(gpu_memory_utilization > 0.0 && gpu_memory_utilization <= 1.0) {
        return Err(cx.invalid(
            "engine.gpu_memory_utilization",
            gpu_memory_utilization,
            "must be in (0, 1] (TGI's CUDA_MEMORY_FRACTION)",
        ));
    }
    let tgi = TgiConfig {
        max_input_tokens,
        max_total_tokens,
        max_batch_prefill_tokens,
        // Measured (or pinned) by `size_memory`.
        max_batch_total_tokens: raw.max_batch_total_tokens.unwrap_or(0),
        waiting_served_ratio: waiting_served_ratio as f32,
        max_waiting_tokens: raw.max_waiting_tokens.unwrap_or(TGI_MAX_WAITING_TOKENS),
        max_concurrent_requests,
    };
    // The scheduler's generic knobs, made to say what TGI does: the token budget is the
    // prefill budget, there is no cap on the batch, no chunking and no watermark.
    engine.max_num_batched_tokens = tgi.prefill_budget_tokens(engine.block_size);
    engine.max_num_seqs = u32::MAX;
    engine.enable_chunked_prefill = false;
    engine.gpu_memory_utilization = gpu_memory_utilization;
    engine.max_model_len = max_total_tokens;
    engine.watermark = 0.0;
    engine.tgi = Some(tgi);
    Ok(engine)
}

#[cfg(test)]
#[path = "engine_tests.rs"]
mod tests;
