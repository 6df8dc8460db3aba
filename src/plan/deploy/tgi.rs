//! `text-generation-launcher` for a simulated TGI engine (policy `tgi`).

use super::Args;
use crate::scenario::{Dtype, EngineConfig, ModelSpec};

/// The settings of `engine` as TGI launcher flags.
pub fn args(model: &ModelSpec, engine: &EngineConfig) -> Args {
    let mut a = Args::default();
    let tgi = engine.tgi.expect("policy tgi has its limits");
    a.flag("--num-shard", engine.tensor_parallel);
    a.flag("--max-input-tokens", tgi.max_input_tokens);
    a.flag("--max-total-tokens", tgi.max_total_tokens);
    a.flag("--max-batch-prefill-tokens", tgi.max_batch_prefill_tokens);
    a.flag("--max-concurrent-requests", tgi.max_concurrent_requests);
    a.flag("--waiting-served-ratio", tgi.waiting_served_ratio);
    a.flag("--max-waiting-tokens", tgi.max_waiting_tokens);
    a.flag("--cuda-memory-fraction", engine.gpu_memory_utilization);
    // TGI 2.3 caches prefixes unless told not to (its launcher reads USE_PREFIX_CACHING, default
    // true); the simulation models it without (policy tgi refuses enable_prefix_caching).
    a.env("USE_PREFIX_CACHING", "0");
    if model.weight_dtype == Dtype::Fp8 {
        a.flag("--quantize", "fp8");
    }
    if model.kv_dtype == Dtype::Fp8 {
        a.flag("--kv-cache-dtype", "fp8_e4m3fn");
    }
    a
}
