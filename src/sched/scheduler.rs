//! The scheduler: one [`SchedulerState`] and the policy that forms each step's batch from it.

use super::batch::Batch;
use super::cohort::{BLOCK_SIZE_MAX, Cohort};
use super::config::SchedulerConfig;
use super::kv::KvCacheManager;
use super::outcome::{Admission, Chunk, Finished, PrefixStats, Rejection, StepOutcome};
use super::speculative::SpecStats;
use super::prefix::BlockHash;
use super::policy::SchedulingPolicy;
use super::seq::{NOT_MEMBER, Seq};
use super::state::SchedulerState;
use super::window::Window;

/// Runs steps: [`Scheduler::schedule`] asks the policy for a batch, and
/// [`Scheduler::finish_step`] applies it.
pub struct Scheduler {
    state: SchedulerState,
    policy: Box<dyn SchedulingPolicy>,
    batch: Batch,
    outcome: StepOutcome,
    step_in_flight: bool,
    /// With [`SchedulerConfig::schedule_ahead`]: requests that arrived during the step in
    /// flight, in arrival order; the batch after next is the first they can join.
    arrived_in_step: Vec<u32>,
    /// The multi-step window in flight (`sched::window`); never open with one step per
    /// decision.
    window: Window,
    /// Deliveries of a window that ended between steps (its last generating member was stopped
    /// early), reported with the next step's outcome.
    carried: StepOutcome,
}

impl Scheduler {
    pub fn new(config: SchedulerConfig, policy: Box<dyn SchedulingPolicy>) -> Scheduler {
        assert!(config.max_num_seqs > 0 && config.max_num_batched_tokens > 0);
        Scheduler {
            state: SchedulerState::new(config),
            policy,
            batch: Batch::default(),
            outcome: StepOutcome::default(),
            step_in_flight: false,
            arrived_in_step: Vec::new(),
            window: Window::default(),
            carried: StepOutcome::default(),
        }
    }

    /// Keeps decoding sequences as a cohort of totals (see `sched::cohort`) where the policy
    /// allows it: the simulator's speed, with the same steps, tokens and finishes as without.
    /// Outcomes then report the cohort's tokens as a count ([`StepOutcome::cohort_tokens`]).
    /// `cost_reads_max_context`: the cost model pricing its steps reads
    /// [`Batch::max_context_tokens`] ([`crate::cost::CostModel::reads_max_context`]).
    pub fn with_decode_cohort(mut self, cost_reads_max_context: bool) -> Scheduler {
        let block_size = self.state.config.block_size;
        // A window's steps hand out several tokens per decision, which the cohort's totals do not
        // follow: multi-step runs sequence by sequence.
        // Speculation too: a decode's tokens per step vary.
        let multi_step = self.state.config.num_scheduler_steps > 1;
        let speculative = self.state.config.speculative.is_some();
        if self.policy.decodes_in_cohort() && block_size <= BLOCK_SIZE_MAX && !multi_step && !speculative {
            let keep_longest = cost_reads_max_context || self.policy.reads_max_context();
            self.state.cohort = Some(Box::new(Cohort::new(block_size, keep_longest)));
        }
        self
    }

    /// Keeps KV blocks as counts per sequence, without ids (see
    /// [`KvCacheManager::keep_counts_only`]): the simulator's, where nothing reads an id; the
    /// engine keeps its ids. With prefix caching, only for requests that share no text (no
    /// block hashes given to [`Scheduler::add_request_with_prefix`], which panics otherwise):
    /// shared blocks need ids, and what is left to cache is a preempted request's own blocks,
    /// which the counts follow.
    pub fn without_block_ids(mut self) -> Scheduler {
        // SGLang's radix cache shares pages by id.
        if self.state.radix.is_none() {
            self.state.kv.keep_counts_only();
        }
        self
    }

    /// Whether prompts are looked up in a cache of earlier ones (vLLM's block hashes, SGLang's
    /// radix tree): then [`Scheduler::add_request_with_prefix`] wants their block hashes.
    pub fn caches_prefixes(&self) -> bool {
        self.state.caches_prefixes()
    }

    /// Tokens of a prompt hashed `hashes` (per block of [`SchedulerConfig::block_size`]) whose
    /// KV this replica's cache holds, from the first: what the prefix-aware router compares.
    pub fn cached_prefix_tokens(&self, hashes: &[BlockHash]) -> u32 {
        match &self.state.radix {
            Some(radix) => radix.peek_prefix(hashes) as u32 * self.state.config.block_size,
            None => self.state.kv.cached_prefix_tokens(hashes),
        }
    }

    pub fn config(&self) -> &SchedulerConfig {
        &self.state.config
    }

    pub fn policy_name(&self) -> &'static str {
        self.policy.name()
    }

    pub fn kv(&self) -> &KvCacheManager {
        &self.state.kv
    }

    /// Prompt tokens looked up in the prefix cache so far, and those found.
    pub fn prefix_stats(&self) -> PrefixStats {
        self.state.prefix_stats
    }

    /// What speculative decoding did so far (all zero without it).
    pub fn spec_stats(&self) -> &SpecStats {
        &self.state.spec_stats
    }

    /// Speculative decoding with [`Acceptance::Verified`](super::Acceptance::Verified): `seq` has `drafts` draft tokens for
    /// its next decode (the caller keeps them). The step may schedule fewer, when its budget runs
    /// short: the batch's [`crate::sched::SeqWork::draft_tokens`] says how many.
    pub fn propose_drafts(&mut self, seq: u32, drafts: u32) {
        assert!(!self.step_in_flight, "propose_drafts() during a step");
        self.state.seqs[seq as usize].drafts_proposed = drafts;
    }

    /// Speculative decoding with [`Acceptance::Verified`](super::Acceptance::Verified), between the forward pass and
    /// [`Scheduler::finish_step`]: of the drafts `seq` verified in this step, the first
    /// `accepted` matched the target model's tokens.
    pub fn accept_drafts(&mut self, seq: u32, accepted: u32) {
        assert!(self.step_in_flight, "accept_drafts() outside a step");
        self.state.seqs[seq as usize].drafts_accepted = accepted;
    }

    pub fn num_waiting(&self) -> u32 {
        (self.state.waiting.len() + self.arrived_in_step.len()) as u32
    }

    pub fn num_running(&self) -> u32 {
        self.state.num_running()
    }

    pub fn has_work(&self) -> bool {
        !self.state.waiting.is_empty() || !self.arrived_in_step.is_empty() || self.state.num_running() > 0 || self.carries_deliveries()
    }

    /// Whether a window that ended between steps left deliveries for the next outcome.
    fn carries_deliveries(&self) -> bool {
        !self.carried.finished.is_empty() || !self.carried.chunks.is_empty()
    }

    /// Queues a request. It stops after `output_tokens` (the simulator knows each request's
    /// output length; the engine stops requests with [`Scheduler::finish_early`] instead).
    /// `max_tokens` is the client's limit, which is all an engine knows in advance: engines
    /// that reserve KV up front reserve for it, and a request whose prompt plus `max_tokens`
    /// cannot fit in the whole cache is rejected. The policy may refuse it first, as TGI's
    /// router does (see [`SchedulingPolicy::refuse`]).
    pub fn add_request(&mut self, request_id: u32, prompt_tokens: u32, output_tokens: u32, max_tokens: u32) -> Admission {
        self.add_request_with_prefix(request_id, prompt_tokens, output_tokens, max_tokens, &[])
    }

    /// [`Scheduler::add_request`] for a prompt whose full blocks hash to `prompt_hashes`
    /// (`sched::prefix`): with prefix caching on, it reuses the longest run of them cached when
    /// admitted, and caches them once computed. Ignored with caching off.
    pub fn add_request_with_prefix(
        &mut self,
        request_id: u32,
        prompt_tokens: u32,
        output_tokens: u32,
        max_tokens: u32,
        prompt_hashes: &[BlockHash],
    ) -> Admission {
        assert!(prompt_tokens > 0 && output_tokens > 0 && max_tokens >= output_tokens);
        let state = &mut self.state;
        if let Some(rejection) = self.policy.refuse(state, prompt_tokens, max_tokens) {
            return Admission::Rejected(rejection);
        }
        let max_tokens = self.policy.max_new_tokens(state, prompt_tokens, max_tokens);
        let output_tokens = output_tokens.min(max_tokens);
        let total_tokens = u64::from(prompt_tokens) + u64::from(max_tokens) - 1;
        if state.config.num_scheduler_steps > 1 && total_tokens > u64::from(state.config.max_num_batched_tokens) {
            let max_num_batched_tokens = state.config.max_num_batched_tokens;
            return Admission::Rejected(Rejection::StepBudget { total_tokens, max_num_batched_tokens });
        }
        let blocks_needed = state.kv.blocks_for_tokens(prompt_tokens + max_tokens - 1).saturating_add(state.config.kv_blocks_per_seq);
        let blocks_usable = state.config.num_gpu_blocks - state.watermark_blocks;
        if blocks_needed > blocks_usable {
            return Admission::Rejected(Rejection::KvCapacity { blocks_needed, blocks_usable });
        }
        let slot = state.insert(Seq::new(request_id, prompt_tokens, output_tokens, max_tokens));
        state.set_prompt_hashes(slot, prompt_hashes);
        if state.config.schedule_ahead && self.step_in_flight {
            self.arrived_in_step.push(slot);
        } else {
            state.waiting.push_back(slot);
        }
        Admission::Queued { seq: slot }
    }

    /// Queues a request whose prompt was prefilled elsewhere (a disaggregated prefill pool): its
    /// first `generated` tokens are sampled, and the KV of all but the last of its tokens came
    /// with it. Admitted like any request (blocks for its KV and its next token, when they fit),
    /// it starts with a decode. A preemption drops that KV, and it recomputes it here.
    pub fn add_prefilled_request(&mut self, request_id: u32, prompt_tokens: u32, generated: u32, output_tokens: u32, max_tokens: u32) -> Admission {
        assert!(generated > 0 && generated < output_tokens);
        let admission = self.add_request(request_id, prompt_tokens, output_tokens, max_tokens);
        if let Admission::Queued { seq } = admission {
            let s = &mut self.state.seqs[seq as usize];
            s.generated = generated;
            s.computed = s.tokens_known() - 1;
        }
        admission
    }

    /// Forms the next step's batch: the policy's, or the next step of a multi-step window. An
    /// empty batch means there is nothing to run now, unless [`Scheduler::step_in_flight`] says
    /// otherwise: then the step only delivers what a window that ended early held, and its
    /// [`Scheduler::finish_step`] is due at once.
    #[inline(always)]
    pub fn schedule(&mut self) -> &Batch {
        assert!(!self.step_in_flight, "schedule() called twice without finish_step()");
        self.batch.clear();
        if self.window.is_open() && !self.window.any_generating(&self.state) {
            self.close_window_between_steps();
        }
        if self.window.is_open() {
            self.window.next_step(&self.state, &mut self.batch, self.policy.advances_windows_on_device());
        } else {
            // Scheduling ahead, this batch was formed when the step just ended began, before
            // the requests that arrived during it; from an idle engine they join at once.
            self.policy.schedule(&mut self.state, &mut self.batch);
            if !self.arrived_in_step.is_empty() {
                self.state.waiting.extend(self.arrived_in_step.drain(..));
                if self.batch.is_empty() {
                    self.policy.schedule(&mut self.state, &mut self.batch);
                }
            }
            let steps = self.state.config.num_scheduler_steps;
            self.window.open(&mut self.batch, steps, self.state.config.enable_chunked_prefill);
        }
        self.batch.graph_size = self.policy.graph_size(&self.batch);
        self.step_in_flight = !self.batch.is_empty() || self.carries_deliveries();
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

    /// Whether a step is scheduled and not yet finished.
    pub fn step_in_flight(&self) -> bool {
        self.step_in_flight
    }

    /// Ends a window whose members were all stopped early or finished, between steps: its
    /// deliveries go out with the next step's outcome.
    fn close_window_between_steps(&mut self) {
        let state = &mut self.state;
        if self.window.close(state, &mut self.carried.chunks, &mut self.carried.finished) {
            state.drop_finished_from_running();
        }
    }

    /// Applies the step's results: KV computed, tokens sampled, requests finished.
    pub fn finish_step(&mut self) -> &StepOutcome {
        assert!(self.step_in_flight, "finish_step() without a scheduled step");
        self.step_in_flight = false;
        let outcome = &mut self.outcome;
        outcome.tokens.clear();
        outcome.finished.clear();
        outcome.left_cohort.clear();
        outcome.chunks.clear();
        // Only a multi-step window leaves deliveries between steps: most steps have none to append.
        if !self.carried.chunks.is_empty() || !self.carried.finished.is_empty() {
            outcome.chunks.append(&mut self.carried.chunks);
            outcome.finished.append(&mut self.carried.finished);
        }
        outcome.cohort_tokens = self.batch.cohort.seqs;
        let state = &mut self.state;
        std::mem::swap(&mut outcome.left_cohort, &mut state.left_cohort);
        let cohort_advanced = self.batch.cohort.seqs > 0;
        // Taken out while its finishers are released, which needs the whole state.
        if let Some(mut cohort) = state.cohort.take_if(|_| cohort_advanced) {
            cohort.advance();
            while let Some(slot) = cohort.pop_finished(&mut state.seqs) {
                let seq = state.seqs[slot as usize];
                let grown = state.kv.blocks_missing(slot, seq.computed);
                state.kv.release_reserved(grown);
                outcome.finished.push(seq.finished());
                state.release(slot);
            }
            state.cohort = Some(cohort);
        }
        let mut any_finished = false;
        let holds = self.window.holds_tokens();
        let radix_extend = state.radix.is_some() && self.batch.prefill_tokens > 0;
        let stream_window_steps = state.config.stream_window_steps;
        for work in &self.batch.seqs {
            let accepted = state.drafts_accepted(work);
            let seq = &mut state.seqs[work.seq as usize];
            // The drafts after the first rejected one leave no KV; the accepted ones become the
            // sequence's tokens.
            seq.computed += work.new_tokens - (work.draft_tokens - accepted);
            seq.generated += accepted;
            debug_assert!(seq.computed <= seq.tokens_known());
            if !state.prompt_hashes.is_empty() && state.radix.is_none() {
                state.cache_computed_blocks(work.seq, work.context_tokens);
            }
            // SGLang caches what an extend (prefill) batch computed, for later prompts to match.
            if radix_extend {
                state.radix_cache_unfinished(work.seq);
            }
            let seq = &mut state.seqs[work.seq as usize];
            if !work.samples_token {
                continue;
            }
            debug_assert_eq!(seq.computed, seq.tokens_known());
            seq.generated += 1;
            if holds {
                if stream_window_steps {
                    // vLLM 0.6.3+: the token streams now; the request still ends with the window.
                    outcome.tokens.push(seq.request_id);
                } else {
                    // Delivered, and if finished released, when the window ends (below).
                    self.window.hold(work.seq);
                }
                continue;
            }
            if accepted > 0 {
                outcome.chunks.push(Chunk { request_id: seq.request_id, tokens: accepted + 1 });
            } else {
                outcome.tokens.push(seq.request_id);
            }
            if seq.generated == seq.max_output_tokens {
                any_finished = true;
                outcome.finished.push(seq.finished());
                state.release(work.seq);
            }
        }
        if holds && self.window.ends_now(state) {
            any_finished |= self.window.close(state, &mut outcome.chunks, &mut outcome.finished);
        }
        if any_finished {
            state.drop_finished_from_running();
        }
        // Who sampled now decodes next step with its last token at this step's end: the
        // cohort's members too, if they decoded in this step (a step of V0 without chunked
        // prefill runs prefills alone), or if there are none.
        outcome.cohort_synced = false;
        if let Some(cohort) = state.cohort.as_mut().filter(|c| cohort_advanced || c.is_empty()) {
            outcome.cohort_synced = true;
            let (seqs, kv) = (&mut state.seqs, &state.kv);
            let mut joined = false;
            for work in self.batch.seqs.iter().filter(|w| w.samples_token) {
                let seq = &seqs[work.seq as usize];
                let live = seq.generated < seq.max_output_tokens;
                if live && kv.blocks_of(work.seq) == kv.blocks_for_tokens(seq.computed) {
                    cohort.join(seqs, work.seq);
                    joined = true;
                }
            }
            if joined {
                state.running.retain(|&s| seqs[s as usize].cohort_index == NOT_MEMBER);
            }
        }
        #[cfg(debug_assertions)]
        self.check_invariants();
        &self.outcome
    }

    /// The token `seq` just sampled meets the caller's stop condition (end of sequence): it
    /// generates no more. Outside a multi-step window it is finished now, as
    /// [`Scheduler::finish_early`], and its record returned. Inside one it is finished when the
    /// window ends, in that step's outcome with the window's tokens, as vLLM's multi-step output
    /// processor truncates a window's tokens at the stop; then this returns `None`.
    pub fn stop(&mut self, seq: u32) -> Option<Finished> {
        assert!(!self.step_in_flight, "stop() during a step");
        if !self.window.contains(seq) {
            return self.finish_early(seq);
        }
        let s = &mut self.state.seqs[seq as usize];
        s.max_output_tokens = s.generated;
        None
    }

    /// Stops a running or waiting sequence now (client gone, an error); frees its blocks (a
    /// multi-step window's member: when the window ends, its tokens held there dropped).
    /// Returns its record, or `None` if it is not live.
    pub fn finish_early(&mut self, seq: u32) -> Option<Finished> {
        assert!(!self.step_in_flight, "finish_early() during a step");
        if self.window.contains(seq) {
            self.window.forget(seq);
            let s = &mut self.state.seqs[seq as usize];
            s.max_output_tokens = s.generated;
            return Some(s.finished());
        }
        let state = &mut self.state;
        // Rare (the simulator never stops a request early): the members go back to one by one.
        if state.seqs.get(seq as usize).is_some_and(|s| s.cohort_index != NOT_MEMBER) {
            state.dissolve_cohort();
        }
        let in_running = state.running.iter().position(|&s| s == seq);
        let in_waiting = state.waiting.iter().position(|&s| s == seq);
        let in_arrived = self.arrived_in_step.iter().position(|&s| s == seq);
        match (in_running, in_waiting, in_arrived) {
            (Some(i), _, _) => {
                state.running.remove(i);
            }
            (None, Some(i), _) => {
                state.waiting.remove(i);
            }
            (None, None, Some(i)) => {
                self.arrived_in_step.remove(i);
            }
            (None, None, None) => return None,
        }
        state.release(seq);
        Some(state.seqs[seq as usize].finished())
    }

    /// TigerBeetle-style: the state must be consistent after every step.
    #[cfg(debug_assertions)]
    fn check_invariants(&self) {
        let state = &self.state;
        let pool = state.kv.pool();
        assert_eq!(pool.blocks_free() + pool.blocks_used(), pool.blocks_total());
        // Only running sequences hold blocks (waiting ones were never admitted or were preempted,
        // which frees everything), so their tables must account for every used block.
        let blocks_running: u64 = state.running.iter().map(|&s| u64::from(state.kv.blocks_of(s))).sum();
        let mut blocks_cohort = 0u64;
        let mut grown = 0u64;
        if let Some(cohort) = &state.cohort {
            cohort.check(&state.seqs);
            // In a step in flight, the members hold the block of the token they are computing.
            let ahead = (self.step_in_flight && self.batch.cohort.seqs > 0) as u32;
            for slot in cohort.slots() {
                let (computed, _) = cohort.materialize(&state.seqs[slot as usize]);
                let computed = computed + ahead;
                let held = u64::from(state.kv.blocks_of(slot));
                blocks_cohort += held;
                grown += state.kv.blocks_for_tokens(computed) as u64 - held;
            }
            assert_eq!(grown, pool.blocks_reserved() as u64, "reserved blocks are the cohort's growth");
            blocks_cohort += grown;
        }
        state.kv.check_refcounts();
        if state.radix.is_some() {
            state.check_radix();
        } else if state.kv.shares_blocks() {
            // A shared block is in several tables: the refcounts tie the tables to the pool.
            assert_eq!(blocks_running + blocks_cohort - grown, state.kv.blocks_in_tables(), "a sequence not running holds KV blocks");
        } else {
            // Each sequence's own blocks (a hybrid model's windows and states) beside its table's.
            let own = state.kv.blocks_held_as_own();
            assert_eq!(blocks_running + blocks_cohort + own, pool.blocks_used() as u64, "KV blocks leaked");
        }
        assert!(state.num_running() <= state.config.max_num_seqs, "running > max_num_seqs");
        let budgeted_tokens =
            if self.policy.budget_bounds_decodes() { self.batch.tokens() } else { self.batch.prefill_tokens };
        assert!(budgeted_tokens <= state.config.max_num_batched_tokens, "token budget exceeded");
        assert!(self.batch.num_seqs() <= state.config.max_num_seqs);
    }

    /// Every scheduled sequence holds KV blocks for the tokens it is about to compute.
    #[cfg(debug_assertions)]
    fn check_batch_has_blocks(&self) {
        let state = &self.state;
        for work in &self.batch.seqs {
            let s = &state.seqs[work.seq as usize];
            assert!(state.kv.blocks_of(work.seq) >= state.kv.blocks_for_tokens(s.computed + work.new_tokens));
        }
        // A member holds its table plus what it grew into (reserved), which covers its decode.
        if let Some(cohort) = state.cohort.as_ref().filter(|_| self.batch.cohort.seqs > 0) {
            let reserved: u64 = cohort
                .slots()
                .map(|slot| {
                    let (computed, _) = cohort.materialize(&state.seqs[slot as usize]);
                    (state.kv.blocks_for_tokens(computed + 1) - state.kv.blocks_of(slot)) as u64
                })
                .sum();
            assert_eq!(reserved, state.kv.pool().blocks_reserved() as u64, "the cohort's decodes have their blocks");
        }
    }
}

#[cfg(test)]
#[path = "ahead_tests.rs"]
mod ahead_tests;
