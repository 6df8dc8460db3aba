//! Data-parallel attention (vLLM's `--data-parallel-size`), and the backend that carries a
//! mixture of experts' tokens between the ranks (`--all2all-backend`).
//!
//! ```text
//!   request ──► DP load balancer ──► rank 0: scheduler, KV cache, attention (TP t) ─┐
//!                                    rank 1: scheduler, KV cache, attention (TP t) ─┼─► MoE layers over
//!                                    …                                              │   all d × t GPUs
//!                                    rank d−1                                       ─┘   (dispatch, experts, combine)
//! ```
//!
//! Each of `d` ranks is an engine of its own: its own scheduler, batch and KV cache, and its own
//! copy of the attention and dense weights on `t` GPUs. The routed experts are split over all
//! `d × t` GPUs, so the ranks run the expert layers together and step in lockstep: a rank with
//! nothing to do runs a dummy batch (vLLM's `DPEngineCoreProc`). A model without experts has no
//! layer to share, and its ranks run as independent engines behind the same balancer.

/// GPUs of one node (an HGX board's NVLink domain, the largest servesim's GPU presets describe):
/// data-parallel ranks beyond it span nodes.
pub const GPUS_PER_NODE: u32 = 8;

/// vLLM's `--all2all-backend`: how a token reaches the GPUs of its experts and comes back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum All2AllBackend {
    /// Each rank broadcasts its tokens to all; the experts' outputs are all-reduced.
    Naive,
    /// Dispatch by all-gather over the ranks, combine by reduce-scatter.
    AllgatherReducescatter,
    /// pplx-kernels' all-to-all.
    Pplx,
    /// DeepEP's high-throughput (prefill) kernels.
    DeepepHighThroughput,
    /// DeepEP's low-latency (decode) kernels.
    DeepepLowLatency,
}

impl All2AllBackend {
    pub const ALL: [All2AllBackend; 5] = [
        All2AllBackend::Naive,
        All2AllBackend::AllgatherReducescatter,
        All2AllBackend::Pplx,
        All2AllBackend::DeepepHighThroughput,
        All2AllBackend::DeepepLowLatency,
    ];

    /// vLLM's name for it.
    pub fn name(self) -> &'static str {
        match self {
            All2AllBackend::Naive => "naive",
            All2AllBackend::AllgatherReducescatter => "allgather_reducescatter",
            All2AllBackend::Pplx => "pplx",
            All2AllBackend::DeepepHighThroughput => "deepep_high_throughput",
            All2AllBackend::DeepepLowLatency => "deepep_low_latency",
        }
    }

    pub fn from_name(name: &str) -> Option<All2AllBackend> {
        All2AllBackend::ALL.into_iter().find(|b| b.name() == name.trim())
    }

    /// Whether it is a true all-to-all over the expert-parallel GPUs, which vLLM uses only with
    /// `--enable-expert-parallel` (the others gather every rank's tokens on every GPU).
    pub fn is_all_to_all(self) -> bool {
        matches!(self, All2AllBackend::Pplx | All2AllBackend::DeepepHighThroughput | All2AllBackend::DeepepLowLatency)
    }
}

/// `[engine] data_parallel = d` with `d > 1`, resolved.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DataParallel {
    /// Ranks, each an engine of `tensor_parallel` GPUs.
    pub ranks: u32,
    /// How the expert layers exchange tokens between ranks.
    pub all2all: All2AllBackend,
    /// The ranks share expert layers (a mixture of experts), so they step together.
    pub lockstep: bool,
}
