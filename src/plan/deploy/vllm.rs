//! `vllm serve` for a simulated vLLM engine, in the flag names of the release its engine profile
//! models.

use super::Args;
use crate::scenario::engine_profile::EngineVersion;
use crate::scenario::parallel::GPUS_PER_NODE;
use crate::scenario::speculative::SpecMethod;
use crate::scenario::{Dtype, EngineConfig, ModelSpec, Policy};

const fn release(major: u32, minor: u32) -> EngineVersion {
    EngineVersion { major, minor, patch: 0 }
}

/// The first release whose default engine is V1 (`VLLM_USE_V1=1`).
const V1_DEFAULT: EngineVersion = release(0, 8);
/// The first release without the V0 engine.
const V0_REMOVED: EngineVersion = release(0, 11);
/// The first release with `--all2all-backend`; before it, `VLLM_ALL2ALL_BACKEND` chose.
const ALL2ALL_FLAG: EngineVersion = release(0, 12);
/// The first release that takes speculative decoding as one `--speculative-config` JSON.
const SPECULATIVE_CONFIG: EngineVersion = release(0, 8);

/// The settings of `engine` (one replica of a pool, or the only pool) as `vllm serve` flags.
pub fn args(model: &ModelSpec, engine: &EngineConfig, version: EngineVersion, draft_repo: Option<&str>) -> Args {
    let mut a = Args::default();
    a.flag("--tensor-parallel-size", engine.tensor_parallel);
    a.flag("--max-num-seqs", engine.max_num_seqs);
    a.flag("--max-num-batched-tokens", engine.max_num_batched_tokens);
    a.flag("--max-model-len", engine.max_model_len);
    a.flag("--gpu-memory-utilization", engine.gpu_memory_utilization);
    // A linear-attention model's block size is vLLM's own choice, made as servesim made it
    // (`KvLayout`): vLLM raises it from its default to fit a state in a page, and its
    // `--block-size` takes only powers of two up to 128 (or 256), which 272 or 544 is not.
    if model.attention.linear.is_none() {
        a.flag("--block-size", engine.block_size);
    }
    if engine.policy == Policy::VllmV0 {
        // V0 turns chunked prefill on by itself for contexts over 32k; say it either way. Before
        // 0.8 the flag takes a value; from 0.8 it is a switch with a `--no-` form.
        match (version >= V1_DEFAULT, engine.enable_chunked_prefill) {
            (false, on) => a.flag("--enable-chunked-prefill", if on { "True" } else { "False" }),
            (true, true) => a.switch("--enable-chunked-prefill"),
            (true, false) => a.switch("--no-enable-chunked-prefill"),
        }
        if version >= V1_DEFAULT {
            a.env("VLLM_USE_V1", "0");
        }
        if version >= V0_REMOVED {
            a.note(format!("vLLM {version} has no V0 engine (removed in {V0_REMOVED}): pin an earlier release"));
        }
    } else if version >= V1_DEFAULT && version < release(0, 10) {
        // 0.8 and 0.9 fall back to V0 without a word for what V1 does not support.
        a.env("VLLM_USE_V1", "1");
    }
    match (engine.enable_prefix_caching, engine.policy) {
        (true, _) => a.switch("--enable-prefix-caching"),
        // V1 caches prefixes by default; V0 does not.
        (false, Policy::VllmV1) => a.switch("--no-enable-prefix-caching"),
        (false, _) => {}
    }
    if engine.num_scheduler_steps > 1 {
        a.flag("--num-scheduler-steps", engine.num_scheduler_steps);
    }
    if model.weight_dtype == Dtype::Fp8 {
        // vLLM quantizes 16-bit checkpoints to FP8 weights on load.
        a.flag("--quantization", "fp8");
    }
    if model.kv_dtype == Dtype::Fp8 {
        a.flag("--kv-cache-dtype", "fp8");
    }
    if model.moe.is_some_and(|moe| moe.expert_parallel) {
        a.switch("--enable-expert-parallel");
    }
    if let Some(dp) = engine.data_parallel {
        a.flag("--data-parallel-size", dp.ranks);
        let gpus = engine.tensor_parallel.saturating_mul(dp.ranks);
        if gpus > GPUS_PER_NODE {
            a.note(format!(
                "tensor_parallel × data_parallel = {gpus} GPUs, more than one {GPUS_PER_NODE}-GPU node: vLLM runs the ranks across nodes with a command per node (--data-parallel-size-local, --data-parallel-start-rank, --data-parallel-address)"
            ));
        }
        if dp.lockstep && version >= ALL2ALL_FLAG {
            a.flag("--all2all-backend", dp.all2all.name());
        } else if dp.lockstep {
            a.env("VLLM_ALL2ALL_BACKEND", dp.all2all.name());
        }
    }
    if let Some(spec) = &engine.speculative {
        let k = spec.scheduler.num_speculative_tokens;
        if version >= SPECULATIVE_CONFIG {
            let config = match spec.method {
                SpecMethod::Ngram => serde_json::json!({"method": "ngram", "num_speculative_tokens": k}),
                SpecMethod::Draft => serde_json::json!({"model": draft_repo.unwrap_or("DRAFT_MODEL"), "num_speculative_tokens": k}),
                SpecMethod::Mtp => serde_json::json!({"method": "mtp", "num_speculative_tokens": k}),
            };
            a.flag("--speculative-config", config);
        } else {
            let proposer = match spec.method {
                SpecMethod::Ngram => "[ngram]",
                SpecMethod::Draft => draft_repo.unwrap_or("DRAFT_MODEL"),
                SpecMethod::Mtp => "MTP_HEAD",
            };
            a.flag("--speculative-model", proposer);
            a.flag("--num-speculative-tokens", k);
            if spec.method == SpecMethod::Ngram {
                a.flag("--ngram-prompt-lookup-max", 4);
            }
        }
        if spec.method == SpecMethod::Mtp {
            a.note("speculation by an MTP or EAGLE head: vLLM needs the head's repository (`model` in --speculative-config) unless the checkpoint carries MTP layers");
        }
    }
    if let Some(profile) = &engine.profile {
        // The profile's CPU overlap is V1's async scheduling (the V0 families' is async output
        // processing, which has no flag).
        if engine.policy == Policy::VllmV1 && profile.engine == "vllm" {
            if profile.engine_time_value("cpu_overlap").is_some_and(|share| share > 0.0) {
                a.switch("--async-scheduling");
            } else if version >= release(0, 10) {
                a.switch("--no-async-scheduling");
            }
        }
    }
    a
}
