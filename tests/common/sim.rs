//! Simulator set-up the integration tests share: a scheduler and one replica with every feature
//! off, which each test varies one field of, a request, and a linear cost model.

use servesim::cost::{CostModel, StepCost};
use servesim::scenario::{Policy, Router};
use servesim::sched::{Batch, SchedulerConfig};
use servesim::sim::SimConfig;
use servesim::workload::{RequestSpec, SharedPrefix};

/// A step budget of `max_num_batched_tokens`, `max_num_seqs` sequences, `num_gpu_blocks` blocks
/// of 16 tokens, chunked prefill on; no watermark, prefix cache, multi-step, speculation, nor
/// TGI's or SGLang's knobs. Tests change what they test with `SchedulerConfig { .., ..base }`.
pub fn scheduler(max_num_batched_tokens: u32, max_num_seqs: u32, num_gpu_blocks: u32) -> SchedulerConfig {
    SchedulerConfig::plain(max_num_batched_tokens, max_num_seqs, 16, num_gpu_blocks)
}

/// One replica of `policy` running `scheduler`, round-robin, no client concurrency cap, no
/// front-end time, the timeline kept, no data parallelism.
pub fn one_replica(scheduler: SchedulerConfig, policy: Policy) -> SimConfig {
    SimConfig {
        scheduler,
        policy,
        replicas: 1,
        router: Router::RoundRobin,
        max_concurrency: None,
        frontend_overhead_ns: 0,
        frontend_per_token_ns: 0,
        timeline: true,
        data_parallel: None,
    }
}

/// A request with no shared prefix that asks for exactly the tokens it generates.
pub fn request(arrival_ns: u64, input_tokens: u32, output_tokens: u32) -> RequestSpec {
    RequestSpec { arrival_ns, input_tokens, output_tokens, max_tokens: output_tokens, prefix: SharedPrefix::default(), follows: None }
}

/// 100 µs a step and 10 µs per token computed (drafts included).
pub struct PerToken;

impl CostModel for PerToken {
    fn predict(&self, batch: &Batch) -> StepCost {
        let gemm_ns = 10_000 * u64::from(batch.tokens());
        StepCost { total_ns: 100_000 + gemm_ns, gemm_ns, overhead_ns: 100_000, ..StepCost::default() }
    }
    fn source(&self) -> &'static str {
        "per-token test model"
    }
}
