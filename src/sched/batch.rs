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
    /// Draft tokens among `new_tokens` that the step verifies (speculative decoding,
    /// `sched::speculative`): the decode computes its last token and these, and samples a token
    /// after each. 0 otherwise.
    pub draft_tokens: u32,
}

impl SeqWork {
    /// A decode computes exactly one token on top of an existing context (and, speculating, the
    /// drafts after it).
    pub fn is_decode(&self) -> bool {
        self.new_tokens == 1 + self.draft_tokens && self.context_tokens > 0 && self.samples_token
    }

    /// Rows whose logits are sampled: the last token's, and each draft's.
    pub fn sampled_rows(&self) -> u32 {
        if self.samples_token { 1 + self.draft_tokens } else { 0 }
    }
}

/// The decode cohort's share of a step (see `sched::cohort`): sequences that each decode one
/// token, given as totals rather than one [`SeqWork`] each. Every total is of what the
/// sequences' [`SeqWork`]s would say, so a cost model that sums per-sequence terms gets the same
/// figures from these.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CohortWork {
    pub seqs: u32,
    /// Σ of the sequences' `context_tokens` (the keys already cached, before this step).
    pub context_tokens: u64,
    /// Σ of the squares of the sequences' `context_tokens`. The scheduler keeps it below 2⁵²,
    /// so a sum of the per-sequence squares in f64 is exact and equals this.
    pub context_token_squares: u64,
    /// The longest context any of them attends to after this step (`context_tokens + 1`), or
    /// [`MAX_CONTEXT_UNTRACKED`] where nothing reads it.
    pub max_context_tokens: u32,
}

/// [`CohortWork::max_context_tokens`] of a cohort that does not keep its longest context: its
/// scheduler's policy and cost model do not read [`Batch::max_context_tokens`]
/// ([`crate::cost::CostModel::reads_max_context`]), and keeping it costs a heap push per member
/// and a check per step (issue 14).
pub const MAX_CONTEXT_UNTRACKED: u32 = u32::MAX;

/// A step's batch. Built by a scheduler policy, priced by a cost model.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Batch {
    /// The sequences scheduled one by one: prefill chunks, and decodes outside the cohort.
    pub seqs: Vec<SeqWork>,
    /// Decodes of the cohort, as totals; all zero when the scheduler keeps no cohort (the
    /// engine's), so that `seqs` lists every sequence.
    pub cohort: CohortWork,
    /// Tokens computed for sequences that are still in prefill (including recompute).
    pub prefill_tokens: u32,
    /// Tokens computed for sequences that decode, the cohort's included.
    pub decode_tokens: u32,
    /// `Some(n)` when the engine replays this step from a CUDA/HIP graph captured for `n` token
    /// rows (the batch padded up to a capture size); `None` when it launches kernels eagerly.
    pub graph_size: Option<u32>,
    /// The step's place in its multi-step window (`sched::window`): 0 for a step the scheduler
    /// formed (and paid the CPU time of), k for the window's (k+1)-th step, which only advances
    /// the batch on the GPU. Always 0 for an engine that prepares every step's inputs anew
    /// (servesim's own), whose later steps cost their CPU time too.
    pub window_step: u32,
}

impl Batch {
    pub fn clear(&mut self) {
        self.seqs.clear();
        self.prefill_tokens = 0;
        self.decode_tokens = 0;
        self.cohort = CohortWork::default();
        self.graph_size = None;
        self.window_step = 0;
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

    /// Adds a decode: one token, and any drafts it verifies.
    pub fn push_decode(&mut self, work: SeqWork) {
        debug_assert_eq!(work.new_tokens, 1 + work.draft_tokens);
        self.decode_tokens += work.new_tokens;
        self.seqs.push(work);
    }

    /// Adds the cohort's decodes, one token each.
    pub fn push_cohort(&mut self, cohort: CohortWork) {
        debug_assert_eq!(self.cohort.seqs, 0, "one cohort per step");
        self.decode_tokens += cohort.seqs;
        self.cohort = cohort;
    }

    /// Sequences in the step, the cohort's included.
    pub fn num_seqs(&self) -> u32 {
        self.seqs.len() as u32 + self.cohort.seqs
    }

    pub fn is_empty(&self) -> bool {
        self.num_seqs() == 0
    }

    pub fn tokens(&self) -> u32 {
        self.prefill_tokens + self.decode_tokens
    }

    pub fn sampled_tokens(&self) -> u32 {
        self.seqs.iter().map(SeqWork::sampled_rows).sum::<u32>() + self.cohort.seqs
    }

    /// A decode-only batch is the one engines replay from captured CUDA/HIP graphs.
    pub fn is_decode_only(&self) -> bool {
        self.prefill_tokens == 0 && !self.is_empty()
    }

    /// The longest context any sequence of the batch attends to after this step.
    ///
    /// Panics where the cohort does not keep it: a cost model that reads it must say so
    /// ([`crate::cost::CostModel::reads_max_context`]).
    pub fn max_context_tokens(&self) -> u32 {
        assert_ne!(
            self.cohort.max_context_tokens, MAX_CONTEXT_UNTRACKED,
            "the decode cohort keeps its longest context only for a reader (CostModel::reads_max_context)"
        );
        let explicit = self.seqs.iter().map(|s| s.context_tokens + s.new_tokens).max().unwrap_or(0);
        explicit.max(self.cohort.max_context_tokens)
    }
}

/// The smallest capture size (sorted ascending) that holds `n`, or `None` if `n` exceeds them all.
pub fn padded_capture_size(n: u32, capture_sizes: &[u32]) -> Option<u32> {
    // Asked once per step, of lists up to 67 long: a binary search.
    capture_sizes.get(capture_sizes.partition_point(|&size| size < n)).copied()
}
