//! `[engine]` for policy "sglang": SGLang 0.4.9's server flags (`[engine.sglang]`, under their
//! `server_args.py` names), with its defaults as 0.4.9 computes them from the GPU's memory
//! (`nvidia-smi`'s `memory.total` in MiB, `utils.get_device_memory_capacity`) and the
//! tensor-parallel degree, and its KV pool sized as `model_runner.profile_max_num_token` sizes it.

use super::context::{Cx, positive_or, quote};
use crate::scenario::model::Dtype;
use crate::scenario::schema::{RawEngine, RawSglang};
use crate::scenario::{EngineConfig, GpuSpec, ModelSpec, Router, ScenarioError, SglangConfig};
use crate::sched::SchedulePolicy;

/// `server_args.py` defaults: `--max-prefill-tokens`, `--page-size`, `--schedule-conservativeness`.
const MAX_PREFILL_TOKENS: u32 = 16384;
const PAGE_SIZE: u32 = 1;
const SCHEDULE_CONSERVATIVENESS: f64 = 1.0;
/// `server_args.__post_init__` without a GPU to ask: `mem_fraction_static` 0.88 and
/// `chunked_prefill_size` 4096.
const MEM_FRACTION_UNKNOWN_GPU: f64 = 0.88;
const CHUNKED_PREFILL_UNKNOWN_GPU: u32 = 4096;
/// `model_runner.init_memory_pool`: the request pool holds ⌊tokens / context × 512⌋ requests,
/// at least 2048 and at most 4096, when `--max-running-requests` is not given.
const REQUEST_POOL_MIN: u64 = 2048;
const REQUEST_POOL_MAX: u64 = 4096;

const MIB: u64 = 1 << 20;

/// The GPU's memory as SGLang reads it: MiB, or `None` before the GPU is known.
fn gpu_mib(gpu: Option<&GpuSpec>) -> Option<f64> {
    gpu.map(|g| (g.memory_bytes / MIB) as f64)
}

/// `server_args.__post_init__` (0.4.9): memory held back from `mem_fraction_static` for
/// activations and CUDA-graph buffers, MiB, by GPU class ("T4, 4080", "A10, L40, 4090, 5090",
/// "H100, A100", "H20", "H200", "B200, MI300").
fn reserved_mib(gpu_mib: f64, parallel: u32) -> f64 {
    let p = f64::from(parallel);
    if gpu_mib < 35.0 * 1024.0 {
        (2.8 + p / 10.0) * 1024.0
    } else if gpu_mib < 90.0 * 1024.0 {
        (9.5 + p / 2.0) * 1024.0
    } else if gpu_mib < 160.0 * 1024.0 {
        (12.0 + p / 2.0) * 1024.0
    } else {
        32.0 * 1024.0
    }
}

/// `--mem-fraction-static`'s default: `round((gpu_mem − reserved) / gpu_mem, 3)`.
pub fn default_mem_fraction_static(gpu_mib: Option<f64>, tp: u32) -> f64 {
    match gpu_mib {
        None => MEM_FRACTION_UNKNOWN_GPU,
        Some(m) => ((m - reserved_mib(m, tp)) / m * 1000.0).round() / 1000.0,
    }
}

/// `--chunked-prefill-size`'s default: 2048 under 35 GiB, 8192 under 160 GiB, else 16384.
pub fn default_chunked_prefill_size(gpu_mib: Option<f64>) -> u32 {
    match gpu_mib {
        None => CHUNKED_PREFILL_UNKNOWN_GPU,
        Some(m) if m < 35.0 * 1024.0 => 2048,
        Some(m) if m < 160.0 * 1024.0 => 8192,
        Some(_) => 16384,
    }
}

/// `--cuda-graph-max-bs`'s default: 8 (TP < 4) or 80 on GPUs under 35 GiB; none otherwise.
fn default_cuda_graph_max_bs(gpu_mib: Option<f64>, tp: u32) -> Option<u32> {
    match gpu_mib {
        Some(m) if m < 35.0 * 1024.0 => Some(if tp < 4 { 8 } else { 80 }),
        _ => None,
    }
}

/// `cuda_graph_runner.get_batch_sizes_to_capture` (0.4.9, no speculation, padding on): 1, 2, 4,
/// 8, then every 8 to 160; on GPUs over 90 GiB every 8 to 256, over 160,000 MiB every 16 to 512;
/// the request pool's size added when it is below the largest; cut at `max_bs` (and extended
/// to it by 16s); none past the request pool.
pub fn capture_sizes(gpu_mib: Option<f64>, max_bs: Option<u32>, request_pool: u32) -> Vec<u32> {
    let mut sizes: Vec<u32> = [1, 2, 4, 8].into_iter().chain((16..=160).step_by(8)).collect();
    if let Some(m) = gpu_mib {
        if m > 90.0 * 1024.0 {
            sizes.extend((160..=256).step_by(8));
        }
        if m > 160.0 * 1000.0 {
            sizes.extend((256..=512).step_by(16));
        }
    }
    let largest = |s: &[u32]| s.iter().copied().max().unwrap_or(0);
    if largest(&sizes) > request_pool {
        sizes.push(request_pool);
    }
    if let Some(max_bs) = max_bs {
        sizes.retain(|&b| b <= max_bs);
        let top = largest(&sizes);
        if top < max_bs {
            sizes.extend((top..=max_bs).step_by(16));
        }
    }
    sizes.retain(|&b| b <= request_pool && b > 0);
    sizes.sort_unstable();
    sizes.dedup();
    sizes
}

/// The keys of `[engine]` that name vLLM's knobs where SGLang has its own flag.
fn reject_vllm_names(raw: &RawEngine, cx: &Cx) -> Result<(), ScenarioError> {
    let given: [(&str, Option<String>, &str); 6] = [
        ("block_size", raw.block_size.map(|v| v.to_string()), "engine.sglang.page_size"),
        ("gpu_memory_utilization", raw.gpu_memory_utilization.map(|v| v.to_string()), "engine.sglang.mem_fraction_static"),
        ("num_gpu_blocks", raw.num_gpu_blocks.map(|v| v.to_string()), "engine.sglang.max_total_tokens"),
        ("enable_prefix_caching", raw.enable_prefix_caching.map(|v| v.to_string()), "engine.sglang.disable_radix_cache"),
        ("activation_reserve_gib", raw.activation_reserve_gib.map(|v| v.to_string()), "engine.sglang.mem_fraction_static"),
        ("speculative", raw.speculative.as_ref().map(|_| "[engine.speculative]".to_string()), "nothing (servesim models SGLang without speculative decoding)"),
    ];
    match given.into_iter().find(|(_, v, _)| v.is_some()) {
        Some((field, Some(value), instead)) => Err(cx.invalid(
            &format!("engine.{field}"),
            value,
            format!("policy \"sglang\" takes SGLang's own flags under [engine.sglang]; use {instead}"),
        )),
        _ => Ok(()),
    }
}

/// `[engine]` for policy "sglang", before the KV pool is sized: the knobs that do not depend on
/// it. `engine` comes with the common fields set.
pub(super) fn resolve_sglang(
    raw: &RawEngine,
    model: &ModelSpec,
    gpu: Option<&GpuSpec>,
    mut engine: EngineConfig,
    cx: &Cx,
) -> Result<EngineConfig, ScenarioError> {
    reject_vllm_names(raw, cx)?;
    let default = RawSglang::default();
    let r = raw.sglang.as_ref().unwrap_or(&default);
    let field = |name: &str| format!("engine.sglang.{name}");
    let mib = gpu_mib(gpu);
    let schedule_policy = match r.schedule_policy.as_deref().map(str::trim) {
        None | Some("fcfs") => SchedulePolicy::Fcfs,
        Some("lpm") => SchedulePolicy::Lpm,
        Some(other @ ("lof" | "random" | "dfs-weight")) => {
            return Err(cx.invalid(&field("schedule_policy"), quote(other), "is SGLang's, but servesim models only fcfs and lpm"));
        }
        Some(other) => return Err(cx.invalid(&field("schedule_policy"), quote(other), "unknown schedule policy; known: fcfs, lpm")),
    };
    let page_size = positive_or(cx, &field("page_size"), r.page_size, PAGE_SIZE)?;
    let chunked_prefill_size = match r.chunked_prefill_size {
        None => Some(default_chunked_prefill_size(mib)),
        // SGLang: "-1 means disable" (any value ≤ 0).
        Some(c) if c <= 0 => None,
        Some(c) if c > i64::from(u32::MAX) => return Err(cx.invalid(&field("chunked_prefill_size"), c, "is too large")),
        Some(c) => Some(c as u32),
    };
    if let Some(c) = chunked_prefill_size.filter(|c| c % page_size != 0) {
        // server_args.py: `assert self.chunked_prefill_size % self.page_size == 0`.
        return Err(cx.invalid(&field("chunked_prefill_size"), c, format!("must be a multiple of page_size ({page_size})")));
    }
    let max_prefill_tokens = positive_or(cx, &field("max_prefill_tokens"), r.max_prefill_tokens, MAX_PREFILL_TOKENS)?;
    let conservativeness = r.schedule_conservativeness.unwrap_or(SCHEDULE_CONSERVATIVENESS);
    if !(conservativeness.is_finite() && conservativeness >= 0.0) {
        // scheduler.py: `assert server_args.schedule_conservativeness >= 0`.
        return Err(cx.invalid(&field("schedule_conservativeness"), conservativeness, "must be a finite number ≥ 0"));
    }
    let mem_fraction_static = r.mem_fraction_static.unwrap_or_else(|| default_mem_fraction_static(mib, engine.tensor_parallel));
    if !(mem_fraction_static > 0.0 && mem_fraction_static <= 1.0) {
        return Err(cx.invalid(&field("mem_fraction_static"), mem_fraction_static, "must be in (0, 1]"));
    }
    if r.max_running_requests == Some(0) {
        return Err(cx.invalid(&field("max_running_requests"), 0, "must be at least 1 (SGLang: \"max_running_request is zero\")"));
    }
    if r.max_total_tokens == Some(0) {
        return Err(cx.invalid(&field("max_total_tokens"), 0, "must be at least 1"));
    }
    if r.cuda_graph_max_bs == Some(0) {
        return Err(cx.invalid(&field("cuda_graph_max_bs"), 0, "must be at least 1"));
    }
    let context_length = positive_or(cx, &field("context_length"), r.context_length, model.max_position_embeddings)?;
    let fp8_tensor_scales = fp8_tensor_scales(r.fp8_weight_scale.as_deref(), model, cx)?;
    let disable_radix_cache = r.disable_radix_cache.unwrap_or(false);
    if disable_radix_cache && engine.router == Router::PrefixAware {
        return Err(cx.invalid(
            "engine.router",
            quote("prefix-aware"),
            "routes by each replica's cache, and engine.sglang.disable_radix_cache is true (SGLang's router policy is \"cache-aware\")",
        ));
    }
    engine.block_size = page_size;
    engine.gpu_memory_utilization = mem_fraction_static;
    engine.enable_chunked_prefill = chunked_prefill_size.is_some();
    // Only prefill batches are bounded by tokens: a chunked request's chunk and the whole
    // requests beside it fit the chunk budget; unchunked, one prompt of up to the context length
    // and more up to max_prefill_tokens.
    engine.max_num_batched_tokens = chunked_prefill_size.unwrap_or_else(|| max_prefill_tokens.saturating_add(context_length));
    engine.max_model_len = context_length;
    engine.watermark = 0.0;
    engine.enable_prefix_caching = !disable_radix_cache;
    // Set with the pool's size (`size_pool`).
    engine.max_num_seqs = r.max_running_requests.unwrap_or(1);
    let disable_overlap_schedule = r.disable_overlap_schedule.unwrap_or(false);
    if disable_overlap_schedule {
        // The overlap scheduler is what hides the CPU's time behind the GPU's (the profile's
        // cpu_overlap); without it, SGLang's event_loop_normal runs them in series.
        if let Some(profile) = engine.profile.as_mut() {
            profile.override_engine_time(
                "cpu_overlap",
                0.0,
                "engine.sglang.disable_overlap_schedule = true: event_loop_normal, CPU and GPU in series",
            );
        }
    }
    engine.sglang = Some(SglangConfig {
        schedule_policy,
        chunked_prefill_size,
        max_prefill_tokens,
        schedule_conservativeness: conservativeness,
        cuda_graph_bs: Vec::new(),
        disable_overlap_schedule,
        fp8_tensor_scales,
    });
    Ok(engine)
}

/// `engine.sglang.fp8_weight_scale`: whether an FP8 checkpoint's weights have one scale per
/// tensor ("tensor") or per output channel ("channel", the default: what `--quantization fp8`
/// makes of a 16-bit checkpoint, `Fp8LinearMethod.process_weights_after_loading`). SGLang runs
/// the two through different GEMM kernels (`run::fp8_gemms`).
fn fp8_tensor_scales(given: Option<&str>, model: &ModelSpec, cx: &Cx) -> Result<bool, ScenarioError> {
    let field = "engine.sglang.fp8_weight_scale";
    match given.map(str::trim) {
        None | Some("channel") => Ok(false),
        Some("tensor") if model.weight_dtype == Dtype::Fp8 && model.weight_quant.is_none() => Ok(true),
        Some("tensor") => Err(cx.invalid(
            field,
            quote("tensor"),
            format!("is for FP8 checkpoints (model.dtype = \"fp8\", no other quantization scheme), and {}'s are not", model.name),
        )),
        Some(other) => Err(cx.invalid(field, quote(other), "known: \"channel\", \"tensor\"")),
    }
}

/// After the KV pool is sized (`num_gpu_blocks` pages from `mem_fraction_static`, with no
/// activation reserve of servesim's: SGLang's is the memory outside the fraction): the
/// `--max-total-tokens` cap, `max_running_requests` and the CUDA-graph batch sizes, which
/// depend on the pool.
pub(super) fn size_pool(raw: &RawEngine, gpu: &GpuSpec, engine: &mut EngineConfig, cx: &Cx) -> Result<(), ScenarioError> {
    let default = RawSglang::default();
    let r = raw.sglang.as_ref().unwrap_or(&default);
    let page = engine.block_size;
    if let Some(cap) = r.max_total_tokens {
        // model_runner.py: the smaller of the profiled pool and the flag.
        engine.num_gpu_blocks = engine.num_gpu_blocks.min(cap / page);
        if engine.num_gpu_blocks == 0 {
            return Err(cx.invalid("engine.sglang.max_total_tokens", cap, format!("holds no whole page of {page} tokens")));
        }
    }
    let tokens = u64::from(engine.num_gpu_blocks) * u64::from(page);
    // tp_worker.py: a request may hold at most min(context − 1, pool − 1) tokens.
    engine.max_model_len = engine.max_model_len.min(tokens.saturating_sub(1).min(u64::from(u32::MAX)) as u32).max(1);
    let context = u64::from(r.context_length.unwrap_or(engine.max_model_len).max(1));
    let request_pool = match r.max_running_requests {
        Some(n) => u64::from(n),
        None => (tokens * 512 / context).clamp(REQUEST_POOL_MIN, REQUEST_POOL_MAX),
    };
    let running = r.max_running_requests.map_or(tokens / 2, u64::from).min(request_pool).max(1);
    engine.max_num_seqs = running.min(u64::from(u32::MAX)) as u32;
    let mib = gpu_mib(Some(gpu));
    let sglang = engine.sglang.as_mut().expect("policy sglang");
    if !r.disable_cuda_graph.unwrap_or(false) {
        let max_bs = r.cuda_graph_max_bs.or_else(|| default_cuda_graph_max_bs(mib, engine.tensor_parallel));
        sglang.cuda_graph_bs = capture_sizes(mib, max_bs, request_pool.min(u64::from(u32::MAX)) as u32);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::Policy;
    use crate::scenario::resolve::test_support::{good, good_text, invalid, load_text};

    #[test]
    fn an_h100_gets_sglang_0_4_9s_defaults() {
        let s = good(&["engine.policy=sglang"]);
        let e = &s.engine;
        let sg = e.sglang.as_ref().expect("sglang knobs");
        assert_eq!(e.policy, Policy::Sglang);
        assert_eq!((e.block_size, e.gpu_memory_utilization, e.enable_prefix_caching), (1, 0.874, true));
        assert_eq!((sg.chunked_prefill_size, sg.max_prefill_tokens, sg.schedule_conservativeness), (Some(8192), 16384, 1.0));
        // max_running_requests: half the pool's tokens, at most the request pool (⌊tokens / 131072
        // × 512⌋ within 2048..=4096).
        let tokens = u64::from(e.num_gpu_blocks);
        let pool = (tokens * 512 / 131_072).clamp(2048, 4096);
        assert_eq!(u64::from(e.max_num_seqs), (tokens / 2).min(pool));
        assert_eq!(sg.cuda_graph_bs.last(), Some(&160));
        assert_eq!(e.profile.as_ref().map(|p| p.name.as_str()), Some("sglang-0.4"));
        assert_eq!(s.cost.cpu_overlap, 1.0, "the overlap scheduler hides the CPU's time");
        let serial = good(&["engine.policy=sglang", "engine.sglang.disable_overlap_schedule=true"]);
        assert_eq!(serial.cost.cpu_overlap, 0.0);
        // --max-total-tokens caps the pool; --max-running-requests is taken as given.
        let capped = good(&["engine.policy=sglang", "engine.sglang.max_total_tokens=50000", "engine.sglang.max_running_requests=64"]);
        assert_eq!((capped.engine.num_gpu_blocks, capped.engine.max_num_seqs), (50_000, 64));
    }

    #[test]
    fn vllms_names_and_unknown_keys_are_refused_by_name() {
        let msg = invalid(&["engine.policy=sglang", "engine.block_size=16"], "engine.block_size", "16");
        assert!(msg.contains("page_size"), "{msg}");
        invalid(&["engine.policy=sglang", "engine.gpu_memory_utilization=0.8"], "engine.gpu_memory_utilization", "0.8");
        invalid(&["engine.policy=sglang", "engine.max_num_seqs=8"], "engine.max_num_seqs", "8");
        invalid(&["engine.policy=sglang", "engine.sglang.schedule_policy=\"lof\""], "engine.sglang.schedule_policy", "\"lof\"");
        invalid(&["engine.policy=sglang", "engine.sglang.page_size=16", "engine.sglang.chunked_prefill_size=100"], "engine.sglang.chunked_prefill_size", "100");
        invalid(&["engine.policy=sglang", "engine.sglang.schedule_conservativeness=-1"], "engine.sglang.schedule_conservativeness", "-1");
        invalid(&["engine.sglang.page_size=16"], "engine.sglang", "[engine.sglang]");
        let err = load_text(&good_text(), &["engine.policy=sglang", "engine.sglang.max_num_seqs=8"]).unwrap_err().to_string();
        assert!(err.contains("max_num_seqs"), "{err}");
    }

    #[test]
    fn defaults_follow_the_gpu_class_as_server_args_computes_them() {
        // H100 (81,559 MiB), TP 1: (81559 − 10240) / 81559 = 0.8744 → 0.874.
        assert_eq!(default_mem_fraction_static(Some(81_559.0), 1), 0.874);
        // H200 (143,771 MiB), TP 8: reserved (12 + 4) GiB.
        assert_eq!(default_mem_fraction_static(Some(143_771.0), 8), ((143_771.0 - 16_384.0) / 143_771.0 * 1000.0f64).round() / 1000.0);
        assert_eq!(default_mem_fraction_static(None, 1), 0.88);
        assert_eq!(default_chunked_prefill_size(Some(81_559.0)), 8192);
        assert_eq!(default_chunked_prefill_size(Some(24_000.0)), 2048);
        assert_eq!(default_chunked_prefill_size(Some(183_359.0)), 16384);
    }

    #[test]
    fn capture_sizes_grow_with_the_gpu_and_stop_at_the_limits() {
        let h100 = capture_sizes(Some(81_559.0), None, 4096);
        assert_eq!((h100[..5].to_vec(), *h100.last().unwrap(), h100.len()), (vec![1, 2, 4, 8, 16], 160, 4 + 19));
        let h200 = capture_sizes(Some(143_771.0), None, 4096);
        assert_eq!((*h200.last().unwrap(), h200.len()), (256, 4 + 19 + 12));
        assert_eq!(*capture_sizes(Some(183_359.0), None, 4096).last().unwrap(), 512);
        // A small request pool caps them, and is itself captured.
        assert_eq!(capture_sizes(Some(81_559.0), None, 20), vec![1, 2, 4, 8, 16, 20]);
        // --cuda-graph-max-bs cuts, or extends by 16s.
        assert_eq!(*capture_sizes(Some(81_559.0), Some(100), 4096).last().unwrap(), 96);
        assert_eq!(capture_sizes(Some(24_000.0), Some(8), 4096), vec![1, 2, 4, 8]);
        assert_eq!(*capture_sizes(Some(81_559.0), Some(200), 4096).last().unwrap(), 192);
    }
}
