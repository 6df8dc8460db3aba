//! The scheduler state that every policy operates on: the sequence slab, the queues and the KV
//! manager. It knows no policy: policies take it by reference, and [`super::Scheduler`] owns
//! one state and one policy.

use std::collections::VecDeque;

use super::batch::{Batch, CohortWork, MAX_CONTEXT_UNTRACKED, SeqWork};
use super::cohort::{Cohort, EXACT_TOTAL_MAX};
use super::config::SchedulerConfig;
use super::kv::KvCacheManager;
use super::outcome::PrefixStats;
use super::prefix::{BlockHash, extend_with_own_blocks, hit_blocks_max};
use super::radix::RadixCache;
use super::seq::Seq;
use super::speculative::{Acceptance, SpecStats, draw_accepted};

/// The queues, the sequences and their KV blocks.
pub struct SchedulerState {
    pub(super) config: SchedulerConfig,
    /// `config.watermark_blocks()`, asked at every admission and every step: its float floor
    /// is a libm call on baseline x86-64.
    pub(super) watermark_blocks: u32,
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
    /// Boxed: a step takes it out and puts it back, a move of its whole struct otherwise.
    pub(super) cohort: Option<Box<Cohort>>,
    /// Request ids of members that left the cohort alive since the last step's end.
    pub(super) left_cohort: Vec<u32>,
    admitted_next: u64,
    /// Each slot's block hashes, with prefix caching and block ids (empty otherwise): its
    /// prompt's, then any of its output a later prompt shares, then, once it was preempted, those
    /// of its own text up to what it had computed ([`extend_with_own_blocks`]).
    pub(super) prompt_hashes: Vec<Vec<BlockHash>>,
    /// Tells apart the hashes of text only one request holds ([`extend_with_own_blocks`]).
    pub(super) own_text_serial_next: u64,
    /// SGLang's radix cache (`sched::radix_state`), in place of vLLM's block hashes: `Some` for
    /// policy sglang with `enable_prefix_caching` (its radix cache not disabled).
    pub(super) radix: Option<RadixCache>,
    pub(super) prefix_stats: PrefixStats,
    pub(super) spec_stats: SpecStats,
}

impl SchedulerState {
    pub(super) fn new(config: SchedulerConfig) -> SchedulerState {
        let kv = KvCacheManager::new(config.num_gpu_blocks, config.block_size).with_blocks_per_seq(config.kv_blocks_per_seq);
        let radix = (config.enable_prefix_caching && config.sglang.is_some()).then(RadixCache::new);
        let kv = if config.enable_prefix_caching && radix.is_none() { kv.with_prefix_caching() } else { kv };
        SchedulerState {
            watermark_blocks: config.watermark_blocks(),
            config,
            seqs: Vec::new(),
            free_slots: Vec::new(),
            waiting: VecDeque::new(),
            running: Vec::new(),
            kv,
            cohort: None,
            left_cohort: Vec::new(),
            admitted_next: 0,
            prompt_hashes: Vec::new(),
            own_text_serial_next: 0,
            radix,
            prefix_stats: PrefixStats::default(),
            spec_stats: SpecStats::default(),
        }
    }

    /// Whether prompts are looked up in a cache of earlier ones: vLLM's block hashes or SGLang's
    /// radix tree.
    pub(super) fn caches_prefixes(&self) -> bool {
        self.kv.prefix_cache().is_some() || self.radix.is_some()
    }

    /// Running sequences, the cohort's included.
    pub(super) fn num_running(&self) -> u32 {
        self.running.len() as u32 + self.cohort.as_deref().map_or(0, Cohort::len)
    }

    /// Whether a prompt may be split across steps: with chunked prefill, except under multi-step
    /// scheduling, which schedules a prompt whole or not at all (vLLM 0.6.3's
    /// `_get_num_new_tokens`: "multi-step + chunked prefill does not actually support chunking
    /// prompts").
    pub(super) fn partial_prefills(&self) -> bool {
        self.config.enable_chunked_prefill && self.config.num_scheduler_steps == 1
    }

    /// The KV `seq` must hold to compute up to `tokens_total` in a step that may open a
    /// multi-step window: the window's further tokens too (vLLM's lookahead slots, N − 1), but
    /// not past the sequence's last token. A prefill is in a window only with chunked prefill; a
    /// decode always is (one admitted with its KV from a prefill pool too).
    pub(super) fn with_lookahead(&self, seq: u32, tokens_total: u32) -> u32 {
        let lookahead = self.config.num_scheduler_steps - 1;
        let s = &self.seqs[seq as usize];
        if lookahead == 0 || (s.in_prefill() && !self.config.enable_chunked_prefill) {
            return tokens_total;
        }
        let last = s.prompt_tokens + s.max_output_tokens - 1;
        tokens_total.saturating_add(lookahead).min(last).max(tokens_total)
    }

    /// The tokens `seq` asks of a step: what it has pending, and as a decode with speculative
    /// decoding its drafts after that (vLLM V1's `num_tokens_with_spec − num_computed_tokens`).
    /// Drafts stop short of the sequence's last token, which needs no draft.
    pub(super) fn tokens_wanted(&self, seq: u32) -> u32 {
        let s = &self.seqs[seq as usize];
        let pending = s.tokens_pending();
        let Some(spec) = &self.config.speculative else { return pending };
        if s.in_prefill() {
            return pending;
        }
        let proposed = match spec.acceptance {
            Acceptance::Drawn { .. } => spec.num_speculative_tokens,
            Acceptance::Verified => s.drafts_proposed.min(spec.num_speculative_tokens),
        };
        pending + proposed.min(s.max_output_tokens - s.generated - 1)
    }

    /// Of the drafts `work` verified, those accepted: drawn, or as the caller reported them. Counts
    /// them in the statistics.
    pub(super) fn drafts_accepted(&mut self, work: &SeqWork) -> u32 {
        if work.draft_tokens == 0 {
            return 0;
        }
        let s = &mut self.seqs[work.seq as usize];
        let accepted = match &self.config.speculative.as_ref().expect("drafts only with speculation").acceptance {
            Acceptance::Drawn { rates, seed } => draw_accepted(rates, *seed, s.request_id, s.generated, work.draft_tokens),
            Acceptance::Verified => std::mem::take(&mut s.drafts_accepted).min(work.draft_tokens),
        };
        s.drafts_proposed = 0;
        self.spec_stats.record(work.draft_tokens, accepted);
        accepted
    }

    /// Takes the sequences that reached their last token off the running list (the caller has
    /// released them).
    pub(super) fn drop_finished_from_running(&mut self) {
        let seqs = &self.seqs;
        self.running.retain(|&s| seqs[s as usize].generated < seqs[s as usize].max_output_tokens);
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
    #[inline(always)]
    pub(super) fn schedule_cohort_step(&mut self, batch: &mut Batch, budget: &mut u32, chunked: bool) -> bool {
        let Some(cohort) = self.cohort.as_mut() else { return false };
        if cohort.is_empty() {
            return false;
        }
        // Only the sequences beside the cohort are compared with its newest member: with none
        // (the usual step) it is not looked up.
        let newest = if self.running.is_empty() {
            u64::MAX
        } else {
            let Some(newest) = cohort.newest_admitted(&self.seqs) else { return false };
            newest
        };
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
            max_context_tokens: totals.max_context_tokens.map_or(MAX_CONTEXT_UNTRACKED, |longest| longest + 1),
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
        if self.radix.is_some() {
            self.radix_cache_finished(slot);
        } else {
            self.kv.free(slot);
        }
        if let Some(hashes) = self.prompt_hashes.get_mut(slot as usize) {
            hashes.clear();
        }
        self.free_slots.push(slot);
    }

    /// Keeps `hashes` as the prompt block hashes of `slot` (prefix caching only).
    pub(super) fn set_prompt_hashes(&mut self, slot: u32, hashes: &[BlockHash]) {
        if !self.caches_prefixes() || hashes.is_empty() {
            return;
        }
        assert!(!self.kv.counts_only(), "shared text needs block ids (Scheduler::without_block_ids)");
        let kept = self.hashes_mut(slot);
        kept.clear();
        kept.extend_from_slice(hashes);
    }

    /// The block hashes of `slot`, made on first use.
    pub(super) fn hashes_mut(&mut self, slot: u32) -> &mut Vec<BlockHash> {
        let s = slot as usize;
        if self.prompt_hashes.len() <= s {
            self.prompt_hashes.resize_with(s + 1, Vec::new);
        }
        &mut self.prompt_hashes[s]
    }

    /// The cached blocks a waiting `seq` with nothing computed may start from: how many of its
    /// block hashes, from the first, hit (0 without prefix caching). Without block ids, nothing
    /// is shared, and what it finds is what it kept when preempted.
    #[inline(always)]
    pub(super) fn prefix_hit_blocks(&self, seq: u32) -> usize {
        let Some(prefix) = self.kv.prefix_cache() else { return 0 };
        let s = &self.seqs[seq as usize];
        if s.computed > 0 {
            return 0;
        }
        let block_size = self.kv.block_size();
        if let Some(kept) = self.kv.kept_blocks(seq) {
            return hit_blocks_max(s.tokens_known(), kept as usize, block_size);
        }
        let Some(hashes) = self.prompt_hashes.get(seq as usize).filter(|h| !h.is_empty()) else { return 0 };
        let max = hit_blocks_max(s.tokens_known(), hashes.len(), block_size);
        prefix.longest_hit(&hashes[..max])
    }

    /// Admits `seq` with its first `hit_blocks` blocks from the cache and KV for `tokens_total`
    /// tokens; all or nothing, as [`KvCacheManager::allocate`].
    #[inline(always)]
    pub(super) fn allocate_admitted(&mut self, seq: u32, hit_blocks: usize, tokens_total: u32, blocks_reserved: u32) -> bool {
        if hit_blocks == 0 {
            return self.kv.allocate(seq, tokens_total, blocks_reserved);
        }
        self.allocate_with_hits(seq, hit_blocks, tokens_total, blocks_reserved)
    }

    /// [`SchedulerState::allocate_admitted`] with hits: out of line, as most admissions have
    /// none (every one, where no prompt shares text).
    #[inline(never)]
    fn allocate_with_hits(&mut self, seq: u32, hit_blocks: usize, tokens_total: u32, blocks_reserved: u32) -> bool {
        if self.kv.counts_only() {
            return self.kv.allocate_with_kept(seq, hit_blocks as u32, tokens_total, blocks_reserved);
        }
        let hits = &self.prompt_hashes[seq as usize][..hit_blocks];
        self.kv.allocate_with_hits(seq, hits, tokens_total, blocks_reserved)
    }

    /// `seq` was admitted: its hit tokens are computed already, and the first admission counts
    /// toward the hit rate.
    pub(super) fn record_admission(&mut self, seq: u32, hit_tokens: u32) {
        let caching = self.caches_prefixes();
        let s = &mut self.seqs[seq as usize];
        // A prefilled arrival's KV came with it; anyone else starts from what the cache holds.
        s.computed += hit_tokens;
        if caching && s.preemptions == 0 {
            self.prefix_stats.prompt_tokens += u64::from(s.prompt_tokens);
            self.prefix_stats.hit_tokens += u64::from(hit_tokens);
        }
    }

    /// After `seq` computed its tokens up to `computed`, from `computed_before`: the blocks it
    /// filled on the way hold content later prompts may reuse. Those are the blocks it has
    /// hashes for: its prompt's, and those of generated tokens whose text a later prompt can
    /// hold (a chat turn's answer, in the next turn's prompt), as vLLM V1 caches full blocks of
    /// generated tokens too.
    pub(super) fn cache_computed_blocks(&mut self, seq: u32, computed_before: u32) {
        let Some(hashes) = self.prompt_hashes.get(seq as usize).filter(|h| !h.is_empty()) else { return };
        let s = &self.seqs[seq as usize];
        let block_size = self.kv.block_size();
        let full_after = (s.computed / block_size) as usize;
        for index in (computed_before / block_size) as usize..full_after.min(hashes.len()) {
            self.kv.cache_block(seq, index, hashes[index]);
        }
    }

    /// Adds `tokens` of `seq` to the batch.
    pub(super) fn push_work(&self, batch: &mut Batch, seq: u32, tokens: u32) {
        push_work(&self.seqs, batch, seq, tokens);
    }

    /// Preempts the newest running sequence by recompute: its blocks are freed as `blocks` says,
    /// its progress is dropped (the tokens it generated are kept and re-prefilled, from the
    /// cache where it still holds them), and it goes to the front of the waiting queue. Returns
    /// the victim.
    pub(super) fn preempt_newest(&mut self, blocks: PreemptedBlocks) -> Option<u32> {
        debug_assert!(self.cohort.as_deref().is_none_or(Cohort::is_empty), "preemption with a cohort");
        let victim = self.running.pop()?;
        match blocks {
            PreemptedBlocks::Cached if self.kv.prefix_cache().is_some() => self.free_keeping_computed(victim),
            _ => self.kv.free(victim),
        }
        let s = &mut self.seqs[victim as usize];
        s.computed = 0;
        s.preemptions += 1;
        self.waiting.push_front(victim);
        Some(victim)
    }

    /// Frees preempted `seq`'s blocks, those it computed in full kept in the prefix cache. With
    /// block ids, its blocks past the text it shares get hashes of their own first.
    fn free_keeping_computed(&mut self, seq: u32) {
        let full_blocks = self.seqs[seq as usize].computed / self.kv.block_size();
        if self.kv.counts_only() {
            self.kv.free_keeping_computed(seq, full_blocks, &[]);
            return;
        }
        let serial = self.own_text_serial_next;
        let hashes = self.hashes_mut(seq);
        if hashes.len() < full_blocks as usize {
            extend_with_own_blocks(hashes, full_blocks as usize, serial);
            self.own_text_serial_next += 1;
        }
        self.kv.free_keeping_computed(seq, full_blocks, &self.prompt_hashes[seq as usize]);
    }
}

/// What a preemption does with its victim's blocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum PreemptedBlocks {
    /// Frees them, their content lost unless shared: vLLM V0's recompute preemption.
    Freed,
    /// Frees them with prefix caching keeping those computed in full, found again when the
    /// victim is admitted unless evicted first: vLLM V1 (`KVCacheManager.free` keeps a freed
    /// block's hash, and the victim's lookup finds its own blocks). Without caching, as
    /// [`PreemptedBlocks::Freed`].
    Cached,
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

/// Adds `tokens` of `seq` to the batch, as a prefill chunk or a decode (with drafts: the tokens
/// past the known ones, see [`SchedulerState::tokens_wanted`]).
fn push_work(seqs: &[Seq], batch: &mut Batch, seq: u32, tokens: u32) {
    let s = &seqs[seq as usize];
    debug_assert!(tokens > 0);
    let computed_after = s.computed + tokens;
    let work = SeqWork {
        seq,
        new_tokens: tokens,
        context_tokens: s.computed,
        samples_token: computed_after >= s.tokens_known(),
        draft_tokens: computed_after.saturating_sub(s.tokens_known()),
    };
    if s.in_prefill() {
        batch.push_prefill(work);
    } else {
        batch.push_decode(work);
    }
}

#[cfg(test)]
#[path = "preemption_tests.rs"]
mod preemption_tests;
