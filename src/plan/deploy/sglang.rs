//! `python -m sglang.launch_server` for a simulated SGLang engine (policy `sglang`), in the flag
//! names of the release its engine profile models (0.4.9: `sglang/srt/server_args.py`).

use super::Args;
use crate::scenario::{Dtype, EngineConfig, ModelSpec, Router};
use crate::sched::SchedulePolicy;

/// GPUs of one node: SGLang's data parallelism (`--dp-size`) runs its replicas as workers of one
/// server on one node; more replicas than a node holds are separate servers.
pub const NODE_GPUS: u32 = 8;

/// How many servers run `replicas` replicas of `tensor_parallel` GPUs, and the `--dp-size` of
/// each: one server with every replica as a data-parallel worker when they fit on one node,
/// else one server per replica.
pub fn servers(replicas: u32, tensor_parallel: u32) -> (u32, u32) {
    let replicas = replicas.max(1);
    if replicas.saturating_mul(tensor_parallel) <= NODE_GPUS { (1, replicas) } else { (replicas, 1) }
}

/// The settings of `engine` (one replica) as launch-server flags, for a server of `dp_size`
/// data-parallel workers.
pub fn args(model: &ModelSpec, engine: &EngineConfig, dp_size: u32) -> Args {
    let mut a = Args::default();
    let sglang = engine.sglang.as_ref().expect("policy sglang has its knobs");
    a.flag("--tp-size", engine.tensor_parallel);
    a.flag("--dp-size", dp_size);
    if dp_size > 1 {
        // The workers' own dispatcher stands for the simulated router: round robin, or the
        // shortest queue for a router that sends to the least loaded replica.
        match engine.router {
            Router::RoundRobin => a.flag("--load-balance-method", "round_robin"),
            Router::LeastOutstanding | Router::WeightedLeastOutstanding => a.flag("--load-balance-method", "shortest_queue"),
            Router::CacheAware | Router::PrefixAware => {
                a.flag("--load-balance-method", "round_robin");
                a.note(format!(
                    "the simulation routed by {}; SGLang 0.4.9's own data-parallel dispatcher has round_robin and shortest_queue only: for cache-aware routing run one server per replica behind sgl-router (pip install sglang-router; --policy cache_aware)",
                    engine.router.name()
                ));
            }
        }
    }
    // 0.4.9 listens on 127.0.0.1 unless told otherwise.
    a.flag("--host", "0.0.0.0");
    a.flag("--mem-fraction-static", engine.gpu_memory_utilization);
    a.flag("--max-running-requests", engine.max_num_seqs);
    // -1 turns chunking off, as the simulation's `None` does.
    a.flag("--chunked-prefill-size", sglang.chunked_prefill_size.map_or(-1, i64::from));
    a.flag("--max-prefill-tokens", sglang.max_prefill_tokens);
    a.flag(
        "--schedule-policy",
        match sglang.schedule_policy {
            SchedulePolicy::Fcfs => "fcfs",
            SchedulePolicy::Lpm => "lpm",
        },
    );
    a.flag("--schedule-conservativeness", sglang.schedule_conservativeness);
    a.flag("--context-length", engine.max_model_len);
    a.flag("--page-size", engine.block_size);
    if !engine.enable_prefix_caching {
        a.switch("--disable-radix-cache");
    }
    match sglang.cuda_graph_bs.iter().max() {
        Some(max) => a.flag("--cuda-graph-max-bs", max),
        None => a.switch("--disable-cuda-graph"),
    }
    if sglang.disable_overlap_schedule {
        a.switch("--disable-overlap-schedule");
    }
    if model.weight_dtype == Dtype::Fp8 && sglang.fp8_tensor_scales {
        // A pre-quantized checkpoint: SGLang reads its quantization from its config.
        a.note("the simulation priced a checkpoint with per-tensor FP8 scales (engine.sglang.fp8_weight_scale = \"tensor\"): serve that checkpoint, without --quantization");
    } else if model.weight_dtype == Dtype::Fp8 {
        // SGLang quantizes a 16-bit checkpoint's linear layers to FP8 on load, as vLLM does.
        a.flag("--quantization", "fp8");
    }
    if model.kv_dtype == Dtype::Fp8 {
        a.flag("--kv-cache-dtype", "fp8_e4m3");
    }
    if engine.speculative.is_some() {
        a.note("speculative decoding was simulated; SGLang's (--speculative-algorithm EAGLE and a draft head) is not written here");
    }
    a
}
