//! The scheduler state that every policy operates on: the sequence slab, the queues and the KV
//! manager. It knows no policy: policies take it by reference, and [`super::Scheduler`] owns
//! one state and one policy.

use std::collections::VecDeque;

use super::batch::{Batch, CohortWork, SeqWork};
use super::cohort::{Cohort, EXACT_TOTAL_MAX, NOT_MEMBER};
use super::config::SchedulerConfig;
use super::kv::KvCacheManager;

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

    /// True until the whole prompt (and, after a preemption, the regenerated tokens) is computed.
    pub fn in_prefill(&self) -> bool {
        self.tokens_pending() > 1 || self.generated == 0
    }
}

/// The queues, the sequences and their KV blocks.
pub struct SchedulerState {
    pub(super) config: SchedulerConfig,
    pub(super) seqs: Vec<Seq>,
    free_slots: Vec<u32>,
    /// FCFS; preempted sequences go back to the front.
    pub(super) waiting: VecDeque<u32>,
    /// In admission order: the last one is the newest, and the first preemption victim. With a
    /// cohort, only the running sequences outside it.
    pub(super) running: Vec<u32>,
    pub(super) kv: KvCacheManager,
    /// The decoding sequences kept as totals (see [`Cohort`]); `None` where every sequence is
    /// scheduled one by one (the engine, TGI, the reference path of tests).
    pub(super) cohort: Option<Cohort>,
    /// Request ids of members that left the cohort alive since the last step's end.
    pub(super) left_cohort: Vec<u32>,
    admitted_next: u64,
}

impl SchedulerState {
    pub(super) fn new(config: SchedulerConfig) -> SchedulerState {
        let kv = KvCacheManager::new(config.num_gpu_blocks, config.block_size);
        SchedulerState {
            config,
            seqs: Vec::new(),
            free_slots: Vec::new(),
            waiting: VecDeque::new(),
            running: Vec::new(),
            kv,
            cohort: None,
            left_cohort: Vec::new(),
            admitted_next: 0,
        }
    }

    /// Running sequences, the cohort's included.
    pub(super) fn num_running(&self) -> u32 {
        self.running.len() as u32 + self.cohort.as_ref().map_or(0, Cohort::len)
    }

    /// Moves `seq`, just taken off the waiting queue, to the end of the running order.
    pub(super) fn push_running(&mut self, seq: u32) {
        self.seqs[seq as usize].admitted = self.admitted_next;
        self.admitted_next += 1;
        self.running.push(seq);
    }

    /// The cohort's fast step. The per-sequence path walks the running sequences in admission
    /// order, each taking its pending tokens (1 for a member) while the budget lasts. When the
    /// members and the sequences outside the cohort admitted before its newest member all run in
    /// full, and the rest take what is left in order as that walk would give it, and all of
    /// this fits in the free KV blocks (no preemption), this schedules exactly what the walk
    /// would, from the cohort's totals, and returns true. Otherwise it changes nothing and
    /// returns false. `chunked` is as in `schedule_running`.
    pub(super) fn schedule_cohort_step(&mut self, batch: &mut Batch, budget: &mut u32, chunked: bool) -> bool {
        let Some(cohort) = self.cohort.as_mut() else { return false };
        let Some(newest) = cohort.newest_admitted(&self.seqs) else { return false };
        let (members, crossers) = (cohort.len(), cohort.crossers());
        // Sequences admitted before the newest member must run in full beside the cohort; the
        // later ones, after every member in the order, share what is left.
        let mut tokens_early = u64::from(members);
        let mut blocks = u64::from(crossers);
        for &seq in &self.running {
            let s = &self.seqs[seq as usize];
            if s.admitted < newest {
                tokens_early += u64::from(s.tokens_pending());
                blocks += u64::from(self.kv.blocks_missing(seq, s.computed + s.tokens_pending()));
            }
        }
        if tokens_early > u64::from(*budget) {
            return false;
        }
        let late_budget = *budget - tokens_early as u32;
        let mut late_tokens = 0;
        for (seq, tokens) in late_shares(&self.running, &self.seqs, newest, late_budget, chunked) {
            blocks += u64::from(self.kv.blocks_missing(seq, self.seqs[seq as usize].computed + tokens));
            late_tokens += tokens;
        }
        if blocks > u64::from(self.kv.pool().blocks_free()) {
            return false;
        }
        let Some(cohort) = self.cohort.as_mut() else { return false };
        let totals = cohort.totals(&self.seqs);
        if totals.context_token_squares >= EXACT_TOTAL_MAX {
            return false;
        }
        for i in 0..self.running.len() {
            let seq = self.running[i];
            let s = self.seqs[seq as usize];
            if s.admitted < newest {
                let allocated = self.kv.allocate(seq, s.computed + s.tokens_pending(), 0);
                debug_assert!(allocated, "counted as free above");
                self.push_work(batch, seq, s.tokens_pending());
            }
        }
        let late = late_shares(&self.running, &self.seqs, newest, late_budget, chunked);
        for (seq, tokens) in late {
            let allocated = self.kv.allocate(seq, self.seqs[seq as usize].computed + tokens, 0);
            debug_assert!(allocated, "counted as free above");
            push_work(&self.seqs, batch, seq, tokens);
        }
        let reserved = self.kv.reserve(crossers);
        debug_assert!(reserved, "counted as free above");
        batch.push_cohort(CohortWork {
            seqs: members,
            context_tokens: totals.context_tokens as u64,
            context_token_squares: totals.context_token_squares as u64,
            max_context_tokens: totals.max_context_tokens + 1,
        });
        *budget = late_budget - late_tokens;
        true
    }

    /// Ends the cohort: its members rejoin the running sequences one by one, in admission
    /// order, with ids for the blocks they grew into.
    pub(super) fn dissolve_cohort(&mut self) {
        let Some(cohort) = self.cohort.as_mut() else { return };
        if cohort.is_empty() {
            return;
        }
        for slot in cohort.dissolve(&mut self.seqs) {
            let s = &self.seqs[slot as usize];
            let grown = self.kv.blocks_missing(slot, s.computed);
            self.kv.assign_reserved(slot, grown);
            self.left_cohort.push(s.request_id);
            self.running.push(slot);
        }
        let seqs = &self.seqs;
        self.running.sort_unstable_by_key(|&slot| seqs[slot as usize].admitted);
    }

    /// Stores `seq` in a free slot of the slab and returns the slot.
    pub(super) fn insert(&mut self, seq: Seq) -> u32 {
        match self.free_slots.pop() {
            Some(slot) => {
                self.seqs[slot as usize] = seq;
                slot
            }
            None => {
                self.seqs.push(seq);
                (self.seqs.len() - 1) as u32
            }
        }
    }

    /// Frees the blocks of `slot` and the slot itself; the caller has taken it off its queue.
    pub(super) fn release(&mut self, slot: u32) {
        self.kv.free(slot);
        self.free_slots.push(slot);
    }

    /// Adds `tokens` of `seq` to the batch.
    pub(super) fn push_work(&self, batch: &mut Batch, seq: u32, tokens: u32) {
        push_work(&self.seqs, batch, seq, tokens);
    }

    /// Preempts the newest running sequence by recompute: its blocks are freed, its progress is
    /// dropped (the tokens it generated are kept and re-prefilled), and it goes to the front of
    /// the waiting queue. Returns the victim.
    pub(super) fn preempt_newest(&mut self) -> Option<u32> {
        debug_assert!(self.cohort.as_ref().is_none_or(Cohort::is_empty), "preemption with a cohort");
        let victim = self.running.pop()?;
        self.kv.free(victim);
        let s = &mut self.seqs[victim as usize];
        s.computed = 0;
        s.preemptions += 1;
        self.waiting.push_front(victim);
        Some(victim)
    }
}

/// The running sequences admitted after the cohort's newest member (`running` is in admission
/// order), with the tokens each gets from `left`, as the per-sequence walk hands them out: its
/// pending tokens while they fit, a chunk of what is left when chunked, and nothing to anyone
/// once the budget is gone (or, unchunked, from the first that does not fit on).
fn late_shares<'a>(
    running: &'a [u32],
    seqs: &'a [Seq],
    newest: u64,
    mut left: u32,
    chunked: bool,
) -> impl Iterator<Item = (u32, u32)> + 'a {
    running.iter().filter(move |&&seq| seqs[seq as usize].admitted > newest).map_while(move |&seq| {
        let pending = seqs[seq as usize].tokens_pending();
        if left == 0 || (!chunked && pending > left) {
            return None;
        }
        let tokens = pending.min(left);
        left -= tokens;
        Some((seq, tokens))
    })
}

/// Adds `tokens` of `seq` to the batch, as a prefill chunk or a decode.
fn push_work(seqs: &[Seq], batch: &mut Batch, seq: u32, tokens: u32) {
    let s = &seqs[seq as usize];
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
