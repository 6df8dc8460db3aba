//! The shape of one engine step: which sequences run and how many tokens each computes.
//!
//! This is the only type shared by the scheduler (which builds it) and the cost model (which
//! prices it); neither knows anything else about the other.

/// One sequence's share of a step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SeqWork {
    /// Index of the sequence in its scheduler's slab.
    pub seq: u32,
    /// Tokens whose KV this step computes (a prefill chunk, or 1 for a decode).
    pub new_tokens: u32,
    /// Tokens already in the KV cache before this step (the attention context).
    pub context_tokens: u32,
    /// Whether this step samples a token for the sequence (decode, or the last prefill chunk).
    pub samples_token: bool,
}

impl SeqWork {
    /// A decode computes exactly one token on top of an existing context.
    pub fn is_decode(&self) -> bool {
        self.new_tokens == 1 && self.context_tokens > 0 && self.samples_token
    }
}

/// A step's batch. Built by a scheduler policy, priced by a cost model.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Batch {
    pub seqs: Vec<SeqWork>,
    /// Tokens computed for sequences that are still in prefill (including recompute).
    pub prefill_tokens: u32,
    /// Tokens computed for sequences that decode.
    pub decode_tokens: u32,
    /// `Some(n)` when the engine replays this step from a CUDA/HIP graph captured for `n` token
    /// rows (the batch padded up to a capture size); `None` when it launches kernels eagerly.
    pub graph_size: Option<u32>,
}

impl Batch {
    pub fn clear(&mut self) {
        self.seqs.clear();
        self.prefill_tokens = 0;
        self.decode_tokens = 0;
        self.graph_size = None;
    }

    /// Adds work, classifying it by shape (see [`SeqWork::is_decode`]). Schedulers, which know
    /// the phase for sure, use [`Batch::push_prefill`] and [`Batch::push_decode`].
    pub fn push(&mut self, work: SeqWork) {
        if work.is_decode() {
            self.push_decode(work);
        } else {
            self.push_prefill(work);
        }
    }

    /// Adds a prefill chunk (a prompt, or a preempted sequence's recompute).
    pub fn push_prefill(&mut self, work: SeqWork) {
        self.prefill_tokens += work.new_tokens;
        self.seqs.push(work);
    }

    /// Adds a one-token decode.
    pub fn push_decode(&mut self, work: SeqWork) {
        debug_assert_eq!(work.new_tokens, 1);
        self.decode_tokens += work.new_tokens;
        self.seqs.push(work);
    }

    pub fn is_empty(&self) -> bool {
        self.seqs.is_empty()
    }

    pub fn tokens(&self) -> u32 {
        self.prefill_tokens + self.decode_tokens
    }

    pub fn sampled_tokens(&self) -> u32 {
        self.seqs.iter().filter(|s| s.samples_token).count() as u32
    }

    /// A decode-only batch is the one engines replay from captured CUDA/HIP graphs.
    pub fn is_decode_only(&self) -> bool {
        self.prefill_tokens == 0 && !self.seqs.is_empty()
    }

    /// The longest context any sequence of the batch attends to after this step.
    pub fn max_context_tokens(&self) -> u32 {
        self.seqs.iter().map(|s| s.context_tokens + s.new_tokens).max().unwrap_or(0)
    }
}

/// The smallest capture size (sorted ascending) that holds `n`, or `None` if `n` exceeds them all.
pub fn padded_capture_size(n: u32, capture_sizes: &[u32]) -> Option<u32> {
    capture_sizes.iter().copied().find(|&size| size >= n)
}
