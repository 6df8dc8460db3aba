//! Workloads: the requests a benchmark client sends, with their lengths and arrival times.
//!
//! Randomness comes from one master seed split into independent ChaCha streams, one per purpose
//! ([`rng::Stream`]), so changing how output lengths are drawn never perturbs arrival times.

pub mod arrivals;
pub mod datasets;
pub mod rng;
pub mod trace;

use crate::scenario::WorkloadConfig;

/// One request as the client will issue it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RequestSpec {
    /// When the client wants to send it, nanoseconds since the benchmark started (before any
    /// concurrency gate delays it).
    pub arrival_ns: u64,
    pub input_tokens: u32,
    /// Tokens the request generates before it stops.
    pub output_tokens: u32,
}

/// The `num_prompts` requests of one sweep point, sorted by arrival time (ties keep dataset
/// order). Deterministic in (`cfg`, `num_prompts`).
pub fn generate(cfg: &WorkloadConfig, num_prompts: u32) -> Vec<RequestSpec> {
    let lengths = datasets::sample_lengths(&cfg.dataset, num_prompts, cfg.seed);
    let arrivals_ns = arrivals::arrival_times_ns(cfg, num_prompts);
    debug_assert_eq!(lengths.len(), arrivals_ns.len());
    lengths
        .into_iter()
        .zip(arrivals_ns)
        .map(|((input_tokens, output_tokens), arrival_ns)| RequestSpec { arrival_ns, input_tokens, output_tokens })
        .collect()
}
