//! What the scheduler reports to whoever drives it: admissions, rejections, tokens and
//! completions.

/// Whether a request was accepted for scheduling.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admission {
    Queued { seq: u32 },
    /// Refused on arrival; the client sees an error and counts the request as failed.
    Rejected(Rejection),
}

/// Why a request was refused on arrival.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rejection {
    /// It can never fit in the KV cache, even alone; vLLM rejects such prompts too.
    KvCapacity { blocks_needed: u32, blocks_usable: u32 },
    /// TGI: HTTP 422, the prompt is longer than `max_input_tokens`.
    InputTooLong { prompt_tokens: u32, max_input_tokens: u32 },
    /// TGI: HTTP 422, prompt + `max_new_tokens` is more than `max_total_tokens`.
    TotalTooLong { total_tokens: u64, max_total_tokens: u32 },
    /// Multi-step scheduling with chunked prefill schedules a prompt whole, in one step: prompt +
    /// `max_tokens` (what a preempted request recomputes, at most) is more than the step budget.
    StepBudget { total_tokens: u64, max_num_batched_tokens: u32 },
    /// TGI: HTTP 429, `max_concurrent_requests` are already in flight.
    Overloaded { in_flight: u32, max_concurrent_requests: u32 },
}

/// A request that finished in a step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Finished {
    pub request_id: u32,
    pub output_tokens: u32,
    pub preemptions: u32,
}

/// Tokens that reach a request's client together, as one streamed chunk: a multi-step
/// window's (`sched::window`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Chunk {
    pub request_id: u32,
    pub tokens: u32,
}

/// Prompt tokens looked up in the prefix cache and found there, counted once per request, at
/// its first admission (a preempted request's second lookup is not counted).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PrefixStats {
    pub prompt_tokens: u64,
    pub hit_tokens: u64,
}

impl PrefixStats {
    /// Tokens hit over prompt tokens; 0 before any prompt.
    pub fn hit_rate(&self) -> f64 {
        if self.prompt_tokens == 0 { 0.0 } else { self.hit_tokens as f64 / self.prompt_tokens as f64 }
    }

    pub fn add(&mut self, other: PrefixStats) {
        self.prompt_tokens += other.prompt_tokens;
        self.hit_tokens += other.hit_tokens;
    }
}

/// What a step produced. Buffers are owned by the scheduler and reused every step.
#[derive(Clone, Debug, Default)]
pub struct StepOutcome {
    /// Requests outside the decode cohort that received one new token this step (including
    /// those that finished).
    pub tokens: Vec<u32>,
    /// Tokens of the decode cohort's members (see `Scheduler::with_decode_cohort`): one each,
    /// and each member's previous token came at the end of the cohort's previous step.
    pub cohort_tokens: u32,
    /// Whether every member of the cohort now has its last token at this step's end (false
    /// when the cohort sat out the step, as in V0's prefill-only steps).
    pub cohort_synced: bool,
    /// Requests that left the cohort since the previous step alive: their last token came at
    /// the end of the cohort's previous step, and their next will be in `tokens`.
    pub left_cohort: Vec<u32>,
    /// Requests whose tokens, held back since their previous delivery, reach the client now in
    /// one chunk (the end of a multi-step window). Their tokens are not in `tokens`.
    pub chunks: Vec<Chunk>,
    pub finished: Vec<Finished>,
}

impl StepOutcome {
    /// Tokens delivered at the step's end.
    pub fn num_tokens(&self) -> u64 {
        self.tokens.len() as u64 + u64::from(self.cohort_tokens) + self.chunks.iter().map(|c| u64::from(c.tokens)).sum::<u64>()
    }
}
