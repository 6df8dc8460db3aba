//! The scheduler state that every policy operates on: the sequence slab, the queues and the KV
//! manager. It knows no policy: policies take it by reference, and [`super::Scheduler`] owns
//! one state and one policy.

use std::collections::VecDeque;

use super::batch::{Batch, SeqWork};
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

/// The queues, the sequences and their KV blocks.
pub struct SchedulerState {
    pub(super) config: SchedulerConfig,
    pub(super) seqs: Vec<Seq>,
    free_slots: Vec<u32>,
    /// FCFS; preempted sequences go back to the front.
    pub(super) waiting: VecDeque<u32>,
    /// In admission order: the last one is the newest, and the first preemption victim.
    pub(super) running: Vec<u32>,
    pub(super) kv: KvCacheManager,
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
        }
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
}
