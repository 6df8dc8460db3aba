//! One engine step as `timeline.csv` records it, and its time by part. The simulator writes a row
//! per simulated step (a cost model's prediction) and the engine a row per real one (what its
//! kernels took), so the two timelines compare column by column; neither depends on the other,
//! nor on the cost models, for the format.

/// One engine step, for `timeline.csv`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StepRow {
    pub start_ns: u64,
    pub replica: u32,
    /// Sequences running and waiting after the step was scheduled.
    pub running: u32,
    pub waiting: u32,
    pub kv_blocks_used: u32,
    pub batch_seqs: u32,
    pub prefill_tokens: u32,
    pub decode_tokens: u32,
    pub cost: StepCost,
}

/// The duration of one engine step, predicted or measured. `total_ns` is the sum of the parts.
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
