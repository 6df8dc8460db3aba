//! The scheduler state shared by all policies: the sequence slab, the queues, the KV manager.

use std::collections::VecDeque;

use super::batch::{Batch, SeqWork};
use super::kv::KvCacheManager;
use super::policy::SchedulingPolicy;
use super::tgi::TgiConfig;

/// Knobs common to every policy (vLLM's names).
#[derive(Clone, Debug, PartialEq)]
pub struct SchedulerConfig {
    /// Token budget of one step. For TGI, which bounds only its prefill steps by tokens, the
    /// prefill budget ([`TgiConfig::prefill_budget_tokens`]).
    pub max_num_batched_tokens: u32,
    /// For TGI, which has no cap on the batch, `u32::MAX`.
    pub max_num_seqs: u32,
    pub enable_chunked_prefill: bool,
    pub block_size: u32,
    pub num_gpu_blocks: u32,
    /// Fraction of blocks that must stay free after admitting a prompt.
    pub watermark: f64,
    /// TGI's limits: `Some` exactly when the policy is TGI's.
    pub tgi: Option<TgiConfig>,
}

impl SchedulerConfig {
    pub fn watermark_blocks(&self) -> u32 {
        (self.watermark * self.num_gpu_blocks as f64).floor() as u32
    }
}

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
}

impl Seq {
    /// Tokens the sequence consists of now: the prompt plus what it generated.
    pub fn tokens_known(&self) -> u32 {
        self.prompt_tokens + self.generated
    }

    /// Tokens still to compute before the next sample.
    pub fn tokens_pending(&self) -> u32 {
        self.tokens_known() - self.computed
    }

    /// True until the whole prompt (and, after a preemption, the regenerated tokens) is computed.
    pub fn in_prefill(&self) -> bool {
        self.tokens_pending() > 1 || self.generated == 0
    }
}

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

/// What a step produced. Buffers are owned by the scheduler and reused every step.
#[derive(Clone, Debug, Default)]
pub struct StepOutcome {
    /// Requests that received one new token this step (including those that finished).
    pub tokens: Vec<u32>,
    pub finished: Vec<Finished>,
}

/// The mutable state a policy works on.
pub struct Scheduler {
    pub(super) config: SchedulerConfig,
    pub(super) seqs: Vec<Seq>,
    free_slots: Vec<u32>,
    /// FCFS; preempted sequences go back to the front.
    pub(super) waiting: VecDeque<u32>,
    /// In admission order: the last one is the newest, and the first preemption victim.
    pub(super) running: Vec<u32>,
    pub(super) kv: KvCacheManager,
    policy: Box<dyn SchedulingPolicy>,
    batch: Batch,
    outcome: StepOutcome,
    step_in_flight: bool,
}

impl Scheduler {
    pub fn new(config: SchedulerConfig, policy: Box<dyn SchedulingPolicy>) -> Scheduler {
        assert!(config.max_num_seqs > 0 && config.max_num_batched_tokens > 0);
        let kv = KvCacheManager::new(config.num_gpu_blocks, config.block_size);
        Scheduler {
            config,
            seqs: Vec::new(),
            free_slots: Vec::new(),
            waiting: VecDeque::new(),
            running: Vec::new(),
            kv,
            policy,
            batch: Batch::default(),
            outcome: StepOutcome::default(),
            step_in_flight: false,
        }
    }

    pub fn config(&self) -> &SchedulerConfig {
        &self.config
    }

    pub fn policy_name(&self) -> &'static str {
        self.policy.name()
    }

    pub fn kv(&self) -> &KvCacheManager {
        &self.kv
    }

    pub fn num_waiting(&self) -> u32 {
        self.waiting.len() as u32
    }

    pub fn num_running(&self) -> u32 {
        self.running.len() as u32
    }

    pub fn has_work(&self) -> bool {
        !self.waiting.is_empty() || !self.running.is_empty()
    }

    /// Queues a request. It stops after `output_tokens` (the simulator knows each request's
    /// output length; the engine stops requests with [`Scheduler::finish_early`] instead).
    /// `max_tokens` is the client's limit, which is all an engine knows in advance: engines
    /// that reserve KV up front reserve for it, and a request whose prompt plus `max_tokens`
    /// cannot fit in the whole cache is rejected. The policy may refuse it first, as TGI's
    /// router does (see [`SchedulingPolicy::refuse`]).
    pub fn add_request(&mut self, request_id: u32, prompt_tokens: u32, output_tokens: u32, max_tokens: u32) -> Admission {
        assert!(prompt_tokens > 0 && output_tokens > 0 && max_tokens >= output_tokens);
        if let Some(rejection) = self.policy.refuse(self, prompt_tokens, max_tokens) {
            return Admission::Rejected(rejection);
        }
        let blocks_needed = self.kv.blocks_for_tokens(prompt_tokens + max_tokens - 1);
        let blocks_usable = self.config.num_gpu_blocks - self.config.watermark_blocks();
        if blocks_needed > blocks_usable {
            return Admission::Rejected(Rejection::KvCapacity { blocks_needed, blocks_usable });
        }
        let seq = Seq {
            request_id,
            prompt_tokens,
            max_output_tokens: output_tokens,
            max_tokens,
            generated: 0,
            computed: 0,
            preemptions: 0,
        };
        let slot = match self.free_slots.pop() {
            Some(slot) => {
                self.seqs[slot as usize] = seq;
                slot
            }
            None => {
                self.seqs.push(seq);
                (self.seqs.len() - 1) as u32
            }
        };
        self.waiting.push_back(slot);
        Admission::Queued { seq: slot }
    }

    /// Forms the next step's batch. An empty batch means there is nothing to run now.
    pub fn schedule(&mut self) -> &Batch {
        assert!(!self.step_in_flight, "schedule() called twice without finish_step()");
        let mut batch = std::mem::take(&mut self.batch);
        batch.clear();
        let mut policy = std::mem::replace(&mut self.policy, Box::new(super::policy::Idle));
        policy.schedule(self, &mut batch);
        batch.graph_size = policy.graph_size(&batch);
        self.policy = policy;
        self.batch = batch;
        self.step_in_flight = !self.batch.is_empty();
        #[cfg(debug_assertions)]
        self.check_invariants();
        #[cfg(debug_assertions)]
        self.check_batch_has_blocks();
        &self.batch
    }

    /// The batch of the step in flight.
    pub fn batch(&self) -> &Batch {
        &self.batch
    }

    /// Applies the step's results: KV computed, tokens sampled, requests finished.
    pub fn finish_step(&mut self) -> &StepOutcome {
        assert!(self.step_in_flight, "finish_step() without a scheduled step");
        self.step_in_flight = false;
        self.outcome.tokens.clear();
        self.outcome.finished.clear();
        for work in &self.batch.seqs {
            let seq = &mut self.seqs[work.seq as usize];
            seq.computed += work.new_tokens;
            debug_assert!(seq.computed <= seq.tokens_known());
            if !work.samples_token {
                continue;
            }
            debug_assert_eq!(seq.computed, seq.tokens_known());
            seq.generated += 1;
            self.outcome.tokens.push(seq.request_id);
            if seq.generated == seq.max_output_tokens {
                self.outcome.finished.push(Finished {
                    request_id: seq.request_id,
                    output_tokens: seq.generated,
                    preemptions: seq.preemptions,
                });
                self.kv.free(work.seq);
                self.free_slots.push(work.seq);
            }
        }
        if !self.outcome.finished.is_empty() {
            let seqs = &self.seqs;
            self.running.retain(|&s| seqs[s as usize].generated < seqs[s as usize].max_output_tokens);
        }
        #[cfg(debug_assertions)]
        self.check_invariants();
        &self.outcome
    }

    /// Stops a running or waiting sequence now (end of sequence, client gone); frees its blocks.
    /// Returns its record, or `None` if it is not live.
    pub fn finish_early(&mut self, seq: u32) -> Option<Finished> {
        assert!(!self.step_in_flight, "finish_early() during a step");
        let in_running = self.running.iter().position(|&s| s == seq);
        let in_waiting = self.waiting.iter().position(|&s| s == seq);
        match (in_running, in_waiting) {
            (Some(i), _) => {
                self.running.remove(i);
            }
            (None, Some(i)) => {
                self.waiting.remove(i);
            }
            (None, None) => return None,
        }
        self.kv.free(seq);
        self.free_slots.push(seq);
        let s = self.seqs[seq as usize];
        Some(Finished { request_id: s.request_id, output_tokens: s.generated, preemptions: s.preemptions })
    }

    // ---- helpers for policies ----

    /// Adds `tokens` of `seq` to the batch.
    pub(super) fn push_work(&self, batch: &mut Batch, seq: u32, tokens: u32) {
        let s = &self.seqs[seq as usize];
        debug_assert!(tokens > 0 && tokens <= s.tokens_pending());
        let work = SeqWork {
            seq,
            new_tokens: tokens,
            context_tokens: s.computed,
            samples_token: s.computed + tokens == s.tokens_known(),
        };
        if s.in_prefill() {
            batch.push_prefill(work);
        } else {
            batch.push_decode(work);
        }
    }

    /// Preempts the newest running sequence by recompute: its blocks are freed, its progress is
    /// dropped (the tokens it generated are kept and re-prefilled), and it goes to the front of
    /// the waiting queue. Returns the victim.
    pub(super) fn preempt_newest(&mut self) -> Option<u32> {
        let victim = self.running.pop()?;
        self.kv.free(victim);
        let s = &mut self.seqs[victim as usize];
        s.computed = 0;
        s.preemptions += 1;
        self.waiting.push_front(victim);
        Some(victim)
    }

    /// TigerBeetle-style: the state must be consistent after every step.
    #[cfg(debug_assertions)]
    fn check_invariants(&self) {
        let pool = self.kv.pool();
        assert_eq!(pool.blocks_free() + pool.blocks_used(), pool.blocks_total());
        // Only running sequences hold blocks (waiting ones were never admitted or were preempted,
        // which frees everything), so their tables must account for every used block.
        let blocks_running: u64 = self.running.iter().map(|&s| self.kv.block_table(s).len() as u64).sum();
        assert_eq!(blocks_running, pool.blocks_used() as u64, "KV blocks leaked");
        assert!(self.running.len() <= self.config.max_num_seqs as usize, "running > max_num_seqs");
        let budgeted_tokens =
            if self.policy.budget_bounds_decodes() { self.batch.tokens() } else { self.batch.prefill_tokens };
        assert!(budgeted_tokens <= self.config.max_num_batched_tokens, "token budget exceeded");
        assert!(self.batch.seqs.len() <= self.config.max_num_seqs as usize);
    }

    /// Every scheduled sequence holds KV blocks for the tokens it is about to compute.
    #[cfg(debug_assertions)]
    fn check_batch_has_blocks(&self) {
        for work in &self.batch.seqs {
            let s = &self.seqs[work.seq as usize];
            assert!(self.kv.block_table(work.seq).len() as u32 >= self.kv.blocks_for_tokens(s.computed + work.new_tokens));
        }
    }
}
