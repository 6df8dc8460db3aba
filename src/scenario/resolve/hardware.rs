//! `[hardware]` and what it must hold: the GPU, the GPU count, the tensor-parallel split, and the
//! memory left for KV blocks after weights and activations, as vLLM and TGI size it at start-up.

use super::context::{Cx, GIB, gib, quote};
use crate::scenario::hardware::GpuSpec;
use crate::scenario::model::ModelSpec;
use crate::scenario::schema::{RawEngine, RawHardware};
use crate::scenario::{EngineConfig, ScenarioError};

/// TGI's warm-up sizes the KV cache to 95% of the memory left free (`FlashCausalLM.warmup`:
/// "Leave 5% for some wiggle room").
const TGI_WIGGLE_ROOM: f64 = 0.95;
/// TGI's warm-up requests ask for prefill log-probs (`prefill_logprobs: true` in the router's
/// `warmup`), so the LM head runs on every prompt token: the all-gathered logits and their
/// `log_softmax`, two `[tokens, vocab]` tensors in the activation dtype, are part of the peak that
/// the KV cache is sized after. *Unconfirmed* reading; `activation_reserve_gib` overrides it.
const TGI_WARMUP_LOGITS_COPIES: u64 = 2;

/// Memory per GPU outside PyTorch's activation peak that still is not available for the KV cache:
/// CUDA context, cuBLAS/NCCL workspaces and buffers, CUDA-graph pools, and the gap between the
/// device total we use and what `cudaMemGetInfo` reports. An *estimate*, not a measurement.
const RUNTIME_RESERVE_BYTES: u64 = 1 << 30;

pub(super) fn resolve_gpu(raw: &RawHardware, cx: &Cx) -> Result<GpuSpec, ScenarioError> {
    let base = match &raw.gpu {
        Some(g) => Some(GpuSpec::preset(g).ok_or_else(|| {
            cx.invalid(
                "hardware.gpu",
                quote(g),
                format!(
                    "unknown GPU preset; known: {} (or leave out `gpu` and give name, peak_tflops_16bit, \
                     memory_gib, memory_bandwidth_gbps and interconnect_gbps)",
                    GpuSpec::preset_names().join(", ")
                ),
            )
        })?),
        None => None,
    };
    let b = base.as_ref();
    let missing = |field: &str| {
        cx.invalid(
            &format!("hardware.{field}"),
            "(missing)",
            "required when hardware.gpu (a preset) is not given",
        )
    };
    // A positive, finite figure in the file's unit, scaled to SI units.
    let figure = |field: &str,
                  v: Option<f64>,
                  scale: f64,
                  from_base: Option<f64>|
     -> Result<f64, ScenarioError> {
        match v {
            Some(x) if x.is_finite() && x > 0.0 => Ok(x * scale),
            Some(x) => Err(cx.invalid(
                &format!("hardware.{field}"),
                x,
                "must be a positive, finite number",
            )),
            None => from_base.ok_or_else(|| missing(field)),
        }
    };
    let name = match (&raw.name, b) {
        (Some(n), _) => n.clone(),
        (None, Some(g)) => g.name.clone(),
        // Nothing names a GPU: most likely `[hardware]` is left out altogether.
        (None, None) => {
            return Err(cx.invalid(
                "hardware.gpu",
                "(missing)",
                format!(
                    "give a GPU preset ({}), or an explicit GPU's name and figures; or [[cluster.pools]] for GPUs of \
                     several kinds",
                    GpuSpec::preset_names().join(", ")
                ),
            ));
        }
    };
    let peak_flops_16bit = figure(
        "peak_tflops_16bit",
        raw.peak_tflops_16bit,
        1e12,
        b.map(|g| g.peak_flops_16bit),
    )?;
    // FP8 is optional even for an explicit GPU: absent or 0 means no FP8 tensor cores (FP8 then
    // runs at the 16-bit rate, no error).
    let peak_flops_fp8 = match raw.peak_tflops_fp8 {
        Some(0.0) => None,
        Some(x) if x.is_finite() && x > 0.0 => Some(x * 1e12),
        Some(x) => {
            return Err(cx.invalid(
                "hardware.peak_tflops_fp8",
                x,
                "must be a positive, finite number (0 = no FP8)",
            ));
        }
        None => b.and_then(|g| g.peak_flops_fp8),
    };
    if let Some(gib) = raw.memory_gib.filter(|&g| g > MEMORY_GIB_MAX) {
        return Err(cx.invalid(
            "hardware.memory_gib",
            super::context::number(gib),
            format!("more than {MEMORY_GIB_MAX} GiB per GPU, past any GPU made (B300: 288 GB)"),
        ));
    }
    let memory_bytes = figure(
        "memory_gib",
        raw.memory_gib,
        GIB,
        b.map(|g| g.memory_bytes as f64),
    )?
    .round() as u64;
    let memory_bandwidth_bytes_per_s = figure(
        "memory_bandwidth_gbps",
        raw.memory_bandwidth_gbps,
        1e9,
        b.map(|g| g.memory_bandwidth_bytes_per_s),
    )?;
    let interconnect_bandwidth_bytes_per_s = figure(
        "interconnect_gbps",
        raw.interconnect_gbps,
        1e9,
        b.map(|g| g.interconnect_bandwidth_bytes_per_s),
    )?;
    // Optional: without it a collective past one node is priced on the GPU-to-GPU link.
    let scale_out_bandwidth_bytes_per_s = match raw.scale_out_gbps {
        Some(v) if !(v.is_finite() && v > 0.0) => {
            return Err(cx.invalid("hardware.scale_out_gbps", super::context::number(v), "must be a positive number of GB/s"));
        }
        Some(v) => Some(v * 1e9),
        None => b.and_then(|g| g.scale_out_bandwidth_bytes_per_s),
    };
    Ok(GpuSpec {
        name,
        peak_flops_16bit,
        peak_flops_fp8,
        // No key sets it: only a preset's datasheet says a GPU has FP4 tensor cores.
        peak_flops_fp4: b.and_then(|g| g.peak_flops_fp4),
        memory_bytes,
        memory_bandwidth_bytes_per_s,
        interconnect_bandwidth_bytes_per_s,
        scale_out_bandwidth_bytes_per_s,
    })
}

/// Most replicas one scenario may run: each holds a scheduler and its KV bookkeeping.
pub(super) const REPLICAS_MAX: u32 = 65_536;

pub(super) fn resolve_count(raw: &RawHardware, engine: &EngineConfig, cx: &Cx) -> Result<u32, ScenarioError> {
    if engine.replicas > REPLICAS_MAX {
        return Err(cx.invalid("engine.replicas", engine.replicas, format!("more than {REPLICAS_MAX} replicas")));
    }
    let ranks = engine.data_parallel.map_or(1, |dp| dp.ranks);
    let needed = engine.tensor_parallel as u64 * engine.replicas as u64 * ranks as u64;
    let needed_u32 = u32::try_from(needed).map_err(|_| {
        cx.invalid(
            "engine.replicas",
            engine.replicas,
            "tensor_parallel × replicas is too large",
        )
    })?;
    match raw.count {
        None => Ok(needed_u32),
        Some(c) if (c as u64) < needed && ranks > 1 => Err(cx.invalid(
            "hardware.count",
            c,
            format!("fewer than tensor_parallel × data_parallel = {} × {ranks} = {needed} GPUs", engine.tensor_parallel),
        )),
        Some(c) if (c as u64) < needed => Err(cx.invalid(
            "hardware.count",
            c,
            format!(
                "fewer than tensor_parallel × replicas = {} × {} = {needed} GPUs",
                engine.tensor_parallel, engine.replicas
            ),
        )),
        Some(c) => Ok(c),
    }
}

/// vLLM's sharding rules: TP divides the query heads; the KV heads are either split evenly
/// (`kv % tp == 0`) or replicated (`tp % kv == 0`).
pub(super) fn check_tp(model: &ModelSpec, tp: u32) -> Result<(), String> {
    if !model.num_heads.is_multiple_of(tp) {
        return Err(format!("must divide model.num_heads ({})", model.num_heads));
    }
    let kv = model.num_kv_heads;
    if (tp >= kv && !tp.is_multiple_of(kv)) || (tp < kv && !kv.is_multiple_of(tp)) {
        return Err(format!(
            "model.num_kv_heads ({kv}) must be divisible by tensor_parallel or divide it"
        ));
    }
    // vLLM splits a linear-attention layer's key and value heads over the GPUs.
    if let Some(linear) = model.attention.linear {
        for (name, heads) in [("key", linear.num_k_heads), ("value", linear.num_v_heads)] {
            if !heads.is_multiple_of(tp) {
                return Err(format!("must divide the linear-attention layers' {heads} {name} heads"));
            }
        }
    }
    Ok(())
}

/// More memory per GPU than a scenario may claim: 16 TiB, over fifty times today's largest.
const MEMORY_GIB_MAX: f64 = 16384.0;

/// Weights fit check, activation reserve and KV blocks, as the engine computes them at start-up:
/// `floor((memory × utilization − weights − activation reserve) / (block_size × KV bytes per token))`
/// per GPU (every GPU of a replica holds the same share, so the minimum over them is this).
pub(super) fn size_memory(
    raw: &RawEngine,
    model: &ModelSpec,
    gpu: &GpuSpec,
    engine: &mut EngineConfig,
    cx: &Cx,
) -> Result<(), ScenarioError> {
    let tp = engine.tensor_parallel;
    let usable = gpu.memory_bytes as f64 * engine.gpu_memory_utilization;
    // A speculative proposer's weights and KV sit beside the target's (vLLM loads both).
    let spec = engine.speculative.as_ref();
    // Data-parallel ranks split a mixture's experts over all their GPUs.
    let ranks = engine.data_parallel.map_or(1, |dp| dp.ranks);
    let weights_at = |tp: u32| {
        (model.weight_bytes_per_gpu_experts_over(tp, tp.saturating_mul(ranks)) + spec.map_or(0, |s| s.weight_bytes_per_gpu(tp))) as f64
    };
    let weights = weights_at(tp);
    if weights > usable {
        let why = format!(
            "{} need {} per GPU but only {} usable (memory {} × utilization {}); short by {}",
            if spec.is_some_and(|s| s.weight_bytes_per_gpu(tp) > 0) { "model and proposer weights" } else { "model weights" },
            gib(weights),
            gib(usable),
            gib(gpu.memory_bytes as f64),
            engine.gpu_memory_utilization,
            gib(weights - usable)
        );
        // Suggest the smallest larger tensor-parallel degree that fits, if there is one: with
        // the proposer's weights too (they shard by the same degree), or the hint is wrong.
        let draft = spec.and_then(|s| s.draft.as_ref());
        let fits = (tp + 1..=model.num_heads)
            .find(|&t| check_tp(model, t).is_ok() && draft.is_none_or(|d| check_tp(d, t).is_ok()) && weights_at(t) <= usable);
        return Err(match fits {
            Some(t) => cx.invalid(
                "engine.tensor_parallel",
                tp,
                format!("{why}; tensor_parallel = {t} would fit"),
            ),
            None => cx.invalid(
                "hardware",
                quote(&gpu.name),
                format!("{why}; no tensor_parallel fits on this GPU"),
            ),
        });
    }

    if engine.tgi.is_some() {
        return size_tgi_memory(raw, model, usable, weights, engine, cx);
    }

    let activation_reserve_bytes = match activation_reserve_override(raw, cx)? {
        Some(bytes) => bytes,
        // SGLang's reserve is the memory outside `mem_fraction_static` (our utilization).
        None if engine.sglang.is_some() => 0,
        None => {
            model.profile_activation_bytes_per_gpu(
                tp,
                engine.max_num_batched_tokens,
                engine.max_num_seqs,
            ) + RUNTIME_RESERVE_BYTES
        }
    };
    engine.activation_reserve_bytes = activation_reserve_bytes;

    // A hybrid model's layout may raise the block size (see `KvLayout`); a proposer's layers
    // keep every token in blocks of that size beside the target's.
    let layout = model.kv_layout(tp, engine.block_size);
    engine.block_size = layout.block_size;
    engine.kv_blocks_per_seq = layout.blocks_per_seq;
    let proposer_bytes = (engine.block_size as u64).saturating_mul(spec.map_or(0, |s| s.kv_bytes_per_token_per_gpu(tp)));
    let block_bytes = layout.block_bytes.saturating_add(proposer_bytes);
    engine.num_gpu_blocks = match raw.num_gpu_blocks {
        Some(0) => return Err(cx.invalid("engine.num_gpu_blocks", 0, "must be at least 1")),
        // A pinned count the GPU's memory cannot hold would fail at the engine's start.
        Some(n) if n as f64 * block_bytes as f64 > gpu.memory_bytes as f64 => {
            return Err(cx.invalid(
                "engine.num_gpu_blocks",
                n,
                format!(
                    "{n} blocks of {block_bytes} B need {} per GPU, more than its {} of memory",
                    gib(n as f64 * block_bytes as f64),
                    gib(gpu.memory_bytes as f64)
                ),
            ));
        }
        Some(n) => n,
        None => {
            let left = usable - weights - activation_reserve_bytes as f64;
            let blocks = if left > 0.0 {
                (left / block_bytes as f64).floor()
            } else {
                0.0
            };
            if blocks < 1.0 {
                // vLLM: "No available memory for the cache blocks. Try increasing
                // `gpu_memory_utilization` when initializing the engine."
                return Err(cx.invalid(
                    "engine.gpu_memory_utilization",
                    engine.gpu_memory_utilization,
                    format!(
                        "no memory left for the KV cache: usable {} − weights {} − activation reserve {} = {} \
                         per GPU, less than one block ({} B)",
                        gib(usable),
                        gib(weights),
                        gib(activation_reserve_bytes as f64),
                        gib(left),
                        block_bytes
                    ),
                ));
            }
            blocks.min(u32::MAX as f64) as u32
        }
    };
    if engine.sglang.is_some() {
        return super::sglang::size_pool(raw, gpu, engine, cx);
    }
    // A sequence's own blocks (windows, states) come out of the cache before its tokens'.
    let kv_tokens = u64::from(engine.num_gpu_blocks.saturating_sub(engine.kv_blocks_per_seq)) * engine.block_size as u64;
    if kv_tokens < engine.max_model_len as u64 {
        let own = match engine.kv_blocks_per_seq {
            0 => String::new(),
            n => format!(" after the {n} blocks each sequence holds for its sliding windows and linear-attention states"),
        };
        return Err(cx.invalid(
            "engine.max_model_len",
            engine.max_model_len,
            format!(
                "the KV cache holds only {kv_tokens} tokens per replica ({} blocks × {}{own}), fewer than one \
                 max_model_len sequence; lower max_model_len to at most {kv_tokens} or give the KV cache more \
                 memory",
                engine.num_gpu_blocks, engine.block_size
            ),
        ));
    }
    Ok(())
}

/// `engine.activation_reserve_gib` in bytes where the scenario pins it; `None` leaves it to the
/// engine's own estimate, which vLLM and TGI make differently.
fn activation_reserve_override(raw: &RawEngine, cx: &Cx) -> Result<Option<u64>, ScenarioError> {
    match raw.activation_reserve_gib {
        Some(g) if g.is_finite() && g >= 0.0 => Ok(Some((g * GIB).round() as u64)),
        Some(g) => Err(cx.invalid("engine.activation_reserve_gib", g, "must be a finite number ≥ 0")),
        None => Ok(None),
    }
}

/// TGI's warm-up (`FlashCausalLM.warmup`, after the router's `warmup` request): a prefill of
/// `max_batch_prefill_tokens` tokens in requests of at most `max_input_tokens`, each with
/// `max_new_tokens` = `max_total_tokens` − its prompt, so each holds the KV blocks of
/// `max_total_tokens` − 1 tokens. Then, with that batch's blocks and the forward's activation peak
/// still allocated, KV blocks = ⌊0.95 × free memory / block bytes⌋ + the warm-up batch's blocks,
/// and `max_batch_total_tokens` = blocks × block size. `CUDA_MEMORY_FRACTION` (our
/// `gpu_memory_utilization`) bounds the memory it may use. The router then refuses to start if
/// `max_total_tokens` exceeds it.
fn size_tgi_memory(
    raw: &RawEngine,
    model: &ModelSpec,
    usable: f64,
    weights: f64,
    engine: &mut EngineConfig,
    cx: &Cx,
) -> Result<(), ScenarioError> {
    let mut tgi = engine.tgi.expect("policy tgi");
    let tp = engine.tensor_parallel;
    let block_size = engine.block_size as u64;
    let block_bytes = block_size.saturating_mul(model.kv_bytes_per_token_per_gpu(tp));
    let prefill_tokens = tgi.max_batch_prefill_tokens as u64;
    let warmup_requests = prefill_tokens.div_ceil(tgi.max_input_tokens as u64);
    let warmup_blocks = warmup_requests * (tgi.max_total_tokens as u64 - 1).div_ceil(block_size);

    engine.activation_reserve_bytes = match activation_reserve_override(raw, cx)? {
        Some(bytes) => bytes,
        None => {
            // Per-token activations of the warm-up prefill (no sampled rows: its logits follow).
            let per_token = model.profile_activation_bytes_per_gpu(tp, tgi.max_batch_prefill_tokens, 0);
            let act_bytes = model.activation_bytes();
            let logits = TGI_WARMUP_LOGITS_COPIES * prefill_tokens * model.vocab_size as u64 * act_bytes;
            per_token + logits + RUNTIME_RESERVE_BYTES
        }
    };

    let blocks: u64 = match (raw.num_gpu_blocks, raw.max_batch_total_tokens) {
        (Some(0), _) => return Err(cx.invalid("engine.num_gpu_blocks", 0, "must be at least 1")),
        (Some(n), _) => n as u64,
        (None, Some(total)) => total as u64 / block_size,
        (None, None) => {
            let warmup_kv_bytes = (warmup_blocks * block_bytes) as f64;
            let free = usable - weights - engine.activation_reserve_bytes as f64 - warmup_kv_bytes;
            if free < 0.0 {
                // TGI: "Not enough memory to handle {n} prefill tokens. You need to decrease
                // `--max-batch-prefill-tokens`".
                return Err(cx.invalid(
                    "engine.max_batch_prefill_tokens",
                    tgi.max_batch_prefill_tokens,
                    format!(
                        "TGI's warm-up runs out of memory: usable {} − weights {} − activations {} − the warm-up \
                         batch's KV ({warmup_blocks} blocks, {}) = {} per GPU; decrease max_batch_prefill_tokens or \
                         max_total_tokens",
                        gib(usable),
                        gib(weights),
                        gib(engine.activation_reserve_bytes as f64),
                        gib(warmup_kv_bytes),
                        gib(free)
                    ),
                ));
            }
            (free * TGI_WIGGLE_ROOM / block_bytes as f64).floor() as u64 + warmup_blocks
        }
    };
    engine.num_gpu_blocks = blocks.min(u32::MAX as u64 / block_size) as u32;
    let kv_tokens = engine.num_gpu_blocks as u64 * block_size;
    tgi.max_batch_total_tokens = raw.max_batch_total_tokens.unwrap_or(kv_tokens as u32);
    if tgi.max_total_tokens > tgi.max_batch_total_tokens {
        // TGI's router: "Not enough memory to handle `max_total_tokens={max_total_tokens}`".
        return Err(cx.invalid(
            "engine.max_total_tokens",
            tgi.max_total_tokens,
            format!(
                "more than the KV cache holds ({} tokens: {} blocks × {block_size}), so TGI refuses to start \
                 (\"Not enough memory to handle max_total_tokens\"); lower max_total_tokens or give the KV cache \
                 more memory",
                tgi.max_batch_total_tokens, engine.num_gpu_blocks
            ),
        ));
    }
    debug_assert_eq!(tgi.check(engine.block_size, engine.num_gpu_blocks), Ok(()));
    engine.tgi = Some(tgi);
    Ok(())
}

#[cfg(test)]
#[path = "hardware_tests.rs"]
mod tests;

#[cfg(test)]
#[path = "hardware_hybrid_tests.rs"]
mod hybrid_tests;
