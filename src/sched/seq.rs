//! One request inside the scheduler: what the state keeps per sequence and the decode cohort
//! reads and writes back. Apart from both, as each holds sequences and the state holds the
//! cohort.

use super::outcome::Finished;

/// `Seq::cohort_index` of a sequence that is not a member.
pub(super) const NOT_MEMBER: u32 = u32::MAX;

/// One request inside the scheduler.
#[derive(Clone, Copy, Debug)]
pub(super) struct Seq {
    /// The caller's id for the request, echoed in outcomes.
    pub request_id: u32,
    pub prompt_tokens: u32,
    /// Where the sequence stops.
    pub max_output_tokens: u32,
    /// The client's limit, which engines that reserve KV up front reserve for.
    pub max_tokens: u32,
    /// Tokens sampled so far.
    pub generated: u32,
    /// Tokens whose KV is in the cache.
    pub computed: u32,
    pub preemptions: u32,
    /// When it last went from waiting to running: orders the running sequences.
    pub admitted: u64,
    /// Its place in the decode cohort, or [`NOT_MEMBER`].
    pub cohort_index: u32,
    /// Speculative decoding with drafts from the caller: drafts proposed for its next decode,
    /// and then how many of those scheduled the caller's verification kept.
    pub drafts_proposed: u32,
    pub drafts_accepted: u32,
    /// With SGLang's radix cache: the node whose path the sequence locks, and how many of its
    /// first pages that path holds (the rest of its table is its own).
    pub radix_node: u32,
    pub radix_pages: u32,
}

impl Seq {
    pub fn new(request_id: u32, prompt_tokens: u32, max_output_tokens: u32, max_tokens: u32) -> Seq {
        Seq {
            request_id,
            prompt_tokens,
            max_output_tokens,
            max_tokens,
            generated: 0,
            computed: 0,
            preemptions: 0,
            admitted: 0,
            cohort_index: NOT_MEMBER,
            drafts_proposed: 0,
            drafts_accepted: 0,
            radix_node: 0,
            radix_pages: 0,
        }
    }

    /// Tokens the sequence consists of now: the prompt plus what it generated.
    pub fn tokens_known(&self) -> u32 {
        self.prompt_tokens + self.generated
    }

    /// Tokens still to compute before the next sample.
    pub fn tokens_pending(&self) -> u32 {
        self.tokens_known() - self.computed
    }

    /// Its record as a finished request.
    pub fn finished(&self) -> Finished {
        Finished { request_id: self.request_id, output_tokens: self.generated, preemptions: self.preemptions }
    }

    /// True until the whole prompt (and, after a preemption, the regenerated tokens) is computed.
    pub fn in_prefill(&self) -> bool {
        self.tokens_pending() > 1 || self.generated == 0
    }
}
