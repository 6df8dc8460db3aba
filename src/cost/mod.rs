//! Step cost models: how long one engine step takes, in nanoseconds, with a breakdown.
//!
//! Implementations, in order of trust: [`roofline::Roofline`] from datasheet numbers, then (later)
//! interpolation of measured kernel profiles, then parameters fitted to recorded runs.

pub mod calibrated;
pub mod roofline;

use crate::sched::batch::Batch;

/// The predicted duration of one engine step. `total_ns` is the sum of the parts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StepCost {
    pub total_ns: u64,
    /// Dense projections: QKV, attention output, MLP, LM head.
    pub gemm_ns: u64,
    /// Attention over the KV cache (prefill and decode).
    pub attention_ns: u64,
    /// Norms, rotary, activation: memory-bound elementwise work.
    pub elementwise_ns: u64,
    /// Tensor-parallel collectives.
    pub communication_ns: u64,
    /// CPU-side scheduling and launch overhead, per step and per sequence.
    pub overhead_ns: u64,
}

/// Prices a batch. Must be deterministic and pure: the same batch always costs the same.
pub trait CostModel {
    fn predict(&self, batch: &Batch) -> StepCost;
    /// Where the prediction comes from (e.g. "roofline"), for reports.
    fn source(&self) -> &'static str;
}
