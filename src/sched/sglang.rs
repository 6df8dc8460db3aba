//! SGLang 0.4.9's scheduler (`python/sglang/srt/managers/scheduler.py`, `schedule_policy.py`,
//! `schedule_batch.py`, `global_config.py`), as one policy of the one scheduler.
//!
//! ```text
//!   each step (get_next_batch_to_run):
//!     prefill batch ◄── can one be formed? (get_new_batch_prefill: the chunked request first,
//!        │               then the waiting queue in fcfs or lpm order through the PrefillAdder)
//!        └─ no ──► decode batch of every running request (update_running_batch):
//!                    memory for one more token each? yes ─► new_token_ratio decays
//!                                                    no ─► retract, new_token_ratio re-estimated
//! ```
//!
//! - **A step is prefill or decode, never both**: SGLang runs a prefill batch whenever one can be
//!   formed and the decodes wait (`enable_mixed_chunk` is off by default).
//! - **Queue order**: `fcfs`, or `lpm` (longest cached prefix first, by a stable sort; requests
//!   whose prefix is not cached but that share 32+ tokens with one already ahead in the queue go
//!   last, so one of them fills the cache first: `IN_BATCH_PREFIX_CACHING_*`). With more than 128
//!   waiting, or without the radix cache, `lpm` falls back to `fcfs`.
//! - **PrefillAdder**: a request is admitted while its new tokens plus its `max_new_tokens`
//!   (clipped at `CLIP_MAX_NEW_TOKENS_ESTIMATION` = 4096) stay below `rem_total_tokens` = free +
//!   evictable tokens − the running requests' reserve (each one's remaining `max_new_tokens`,
//!   clipped at 4096, × `new_token_ratio`) − what this batch took. New input tokens are bounded
//!   by `--max-prefill-tokens` (past the first request) and `--chunked-prefill-size`; one request
//!   at a time may be chunked, and it goes first in the next prefill. A request that does not fit
//!   stops the loop, and after "no token" (or `--max-running-requests` reached) no prefill is
//!   tried again until a running request leaves (`batch_is_full`).
//! - **new_token_ratio** starts at 0.7 × `--schedule-conservativeness` (at most 1), decays by
//!   (init − init × 0.14) / 600 per decode step to init × 0.14, resets to init when the server
//!   idles, and after a retraction is re-estimated from the survivors' progress.
//! - **Retraction**: when a decode step cannot get a page per request (after evicting from the
//!   cache), requests are retracted, fewest output tokens first (then longest prompt), until 20
//!   free tokens per remaining request are left (`retract_decode_steps`). Their own pages are
//!   freed; what they had in the radix cache stays there (unlocked), so their readmission finds
//!   it. They rejoin the **end** of the waiting queue (`_extend_requests_to_queue`).
//! - **CUDA graphs**: decode batches up to the largest capture size replay graphs, padded up to a
//!   captured batch size; prefill batches run eagerly (0.4.9 has no piecewise graphs).
//!
//! Not modelled: the `ignore_eos` admission path SGLang takes only with the radix cache disabled
//! (`add_one_req_ignore_eos`; the ordinary path runs instead), hierarchical caching, LoRA and
//! grammar queues, and the overlap scheduler's one-step lag in freeing a finished request's
//! pages (its CPU time, hidden behind the GPU step, is the engine profile's `cpu_overlap`).

use super::batch::{Batch, padded_capture_size};
use super::config::{SchedulePolicy, SchedulerConfig, SglangConfig};
use super::outcome::Rejection;
use super::policy::SchedulingPolicy;
use super::radix::{NodeId, RadixCache};
use super::state::SchedulerState;

/// `schedule_policy.py`: the reserve of a request's future tokens is clipped here.
const CLIP_MAX_NEW_TOKENS_ESTIMATION: u32 = 4096;
/// `schedule_policy.py`: `lpm` sorts only queues up to this long.
const LPM_QUEUE_MAX: usize = 128;
/// `IN_BATCH_PREFIX_CACHING_CHECK_THRESHOLD` and `..._DEPRIORITIZE_THRESHOLD` (tokens).
const IN_BATCH_CHECK_TOKENS: u32 = 32;
const IN_BATCH_DEPRIORITIZE_TOKENS: u32 = 32;
/// `global_config.py`: `default_init_new_token_ratio`, `default_min_new_token_ratio_factor`,
/// `default_new_token_ratio_decay_steps`, `retract_decode_steps`.
const INIT_NEW_TOKEN_RATIO: f64 = 0.7;
const MIN_NEW_TOKEN_RATIO_FACTOR: f64 = 0.14;
const NEW_TOKEN_RATIO_DECAY_STEPS: f64 = 600.0;
const RETRACT_DECODE_STEPS: u64 = 20;
/// `tp_worker.py`: `max_req_input_len = max_req_len − 5`.
const MAX_REQ_INPUT_MARGIN: u64 = 5;

/// The token pool's size (`max_total_num_tokens`): SGLang's `max_req_len` is one less (or the
/// context length's, which the scenario bounds requests by).
fn pool_tokens(s: &SchedulerState) -> u64 {
    u64::from(s.config.num_gpu_blocks) * u64::from(s.config.block_size)
}

/// Why the PrefillAdder stopped (`AddReqResult`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Added {
    Continue,
    NoToken,
    Other,
}

/// One request the adder took: where its cached prefix ends, and its new tokens this batch.
#[derive(Clone, Copy, Debug)]
struct Take {
    seq: u32,
    node: NodeId,
    prefix_pages: u32,
    tokens: u32,
}

/// SGLang 0.4.9's scheduling policy (see the module documentation).
pub struct Sglang {
    config: SglangConfig,
    init_new_token_ratio: f64,
    min_new_token_ratio: f64,
    new_token_ratio_decay: f64,
    new_token_ratio: f64,
    /// `running_batch.batch_is_full`: no prefill is tried until a running request leaves.
    batch_is_full: bool,
    /// Running requests after the last decision: fewer now means some finished.
    running_after_last: u32,
    /// A running request finished since the last decode step: that step's filter finds the
    /// batch smaller and clears `batch_is_full` (`update_running_batch`).
    left_since_decode: bool,
    /// The request whose prompt is being prefilled in chunks (`chunked_req`).
    chunked: Option<u32>,
}

impl Sglang {
    /// The policy for a scheduler configured with `config.sglang`.
    pub fn new(config: &SchedulerConfig) -> Sglang {
        let sglang = config.sglang.clone().expect("policy sglang needs SchedulerConfig.sglang");
        let init = (INIT_NEW_TOKEN_RATIO * sglang.schedule_conservativeness).min(1.0);
        let min = (init * MIN_NEW_TOKEN_RATIO_FACTOR).min(1.0);
        Sglang {
            config: sglang,
            init_new_token_ratio: init,
            min_new_token_ratio: min,
            new_token_ratio_decay: (init - min) / NEW_TOKEN_RATIO_DECAY_STEPS,
            new_token_ratio: init,
            batch_is_full: false,
            running_after_last: 0,
            left_since_decode: false,
            chunked: None,
        }
    }

    /// The current `new_token_ratio` (tests).
    pub fn new_token_ratio(&self) -> f64 {
        self.new_token_ratio
    }
}

impl SchedulingPolicy for Sglang {
    fn name(&self) -> &'static str {
        "sglang"
    }

    /// Only prefill batches are bounded by tokens; a decode runs every running request.
    fn budget_bounds_decodes(&self) -> bool {
        false
    }

    fn schedule(&mut self, s: &mut SchedulerState, batch: &mut Batch) {
        if s.num_running() < self.running_after_last {
            self.left_since_decode = true;
        }
        if !self.prefill(s, batch) {
            self.decode(s, batch);
            // An idle pass (nothing running) clears `batch_is_full` and resets the ratio; SGLang's
            // loop comes straight back and forms the prefill it now can.
            if batch.is_empty() && !s.waiting.is_empty() {
                self.prefill(s, batch);
            }
        }
        self.running_after_last = s.num_running();
    }

    /// `handle_generate_request`: a prompt of `max_req_input_len` (the pool's tokens − 1 − 5)
    /// or more is refused.
    fn refuse(&self, s: &SchedulerState, prompt_tokens: u32, _max_tokens: u32) -> Option<Rejection> {
        let max_req_len = pool_tokens(s).saturating_sub(1);
        let blocks_usable = s.config.num_gpu_blocks;
        (u64::from(prompt_tokens) >= max_req_len.saturating_sub(MAX_REQ_INPUT_MARGIN))
            .then(|| Rejection::KvCapacity { blocks_needed: s.kv.blocks_for_tokens(prompt_tokens), blocks_usable })
    }

    /// `handle_generate_request`: `max_new_tokens` lowered to `max_req_len − prompt − 1`.
    fn max_new_tokens(&self, s: &SchedulerState, prompt_tokens: u32, max_tokens: u32) -> u32 {
        let room = pool_tokens(s).saturating_sub(1).saturating_sub(u64::from(prompt_tokens) + 1);
        (u64::from(max_tokens).min(room).max(1)) as u32
    }

    fn graph_size(&self, batch: &Batch) -> Option<u32> {
        if !batch.is_decode_only() {
            return None;
        }
        padded_capture_size(batch.num_seqs(), &self.config.cuda_graph_bs)
    }
}

impl Sglang {
    /// `get_new_batch_prefill` with its `PrefillAdder`; returns whether a prefill batch formed.
    fn prefill(&mut self, s: &mut SchedulerState, batch: &mut Batch) -> bool {
        // The chunked request may have been stopped between steps (the engine's aborts).
        self.chunked = self.chunked.filter(|seq| s.running.contains(seq));
        if (self.batch_is_full || s.waiting.is_empty()) && self.chunked.is_none() {
            return false;
        }
        let running_bs = s.num_running() - u32::from(self.chunked.is_some());
        let allocatable = s.config.max_num_seqs.saturating_sub(running_bs);
        if allocatable == 0 && self.chunked.is_none() {
            self.batch_is_full = true;
            return false;
        }
        self.order_waiting(s);
        let page = s.config.block_size;
        let ceil_paged = |tokens: u32| tokens.div_ceil(page) * page;
        let clip = |max_new: u32| max_new.min(CLIP_MAX_NEW_TOKENS_ESTIMATION);
        let chunked = self.chunked.take();
        // The adder's offsets (tokens, as f64: the running reserve is fractional).
        let mut rem_total_offset: f64 = s
            .running
            .iter()
            .filter(|&&seq| Some(seq) != chunked)
            .map(|&seq| {
                let r = &s.seqs[seq as usize];
                f64::from(clip(r.max_tokens - r.generated)) * self.new_token_ratio
            })
            .sum();
        let mut cur_offset = 0f64;
        let mut rem_input = i64::from(self.config.max_prefill_tokens);
        let mut rem_chunk = self.config.chunked_prefill_size.map(i64::from);
        // The free pages do not change while the adder runs (SGLang allocates after it); the
        // evictable ones do, as requests lock their prefixes.
        let available = f64::from(s.kv.pool().blocks_free()) * f64::from(page);
        let evictable = |s: &SchedulerState| s.radix.as_ref().map_or(0.0, |r| r.evictable_pages() as f64 * f64::from(page));
        let mut takes: Vec<Take> = Vec::new();
        let mut new_chunked = None;
        let budget = |total_offset: f64, cur_offset: f64, rem_input: i64, rem_chunk: Option<i64>, s: &SchedulerState| {
            let avail = available + evictable(s);
            if avail - total_offset <= 0.0 || avail - cur_offset <= 0.0 {
                Added::NoToken
            } else if rem_input <= 0 || rem_chunk.is_some_and(|c| c <= 0) {
                Added::Other
            } else {
                Added::Continue
            }
        };
        if let Some(seq) = chunked {
            // `add_chunked_req`: its next chunk, whatever the budget says.
            let r = s.seqs[seq as usize];
            let extend = r.tokens_pending();
            let limit = rem_chunk.map_or(u32::MAX, |c| c.max(0) as u32);
            let tokens = extend.min(limit);
            let truncated = extend > limit;
            takes.push(Take { seq, node: r.radix_node, prefix_pages: r.radix_pages, tokens });
            let paged = f64::from(ceil_paged(tokens));
            rem_total_offset += paged + if truncated { 0.0 } else { f64::from(clip(r.max_tokens)) };
            cur_offset += paged;
            rem_input -= i64::from(ceil_paged(tokens));
            rem_chunk = rem_chunk.map(|c| c - i64::from(ceil_paged(tokens)));
            if truncated {
                new_chunked = Some(seq);
            }
        }
        let radix = s.radix.is_some();
        let mut i = 0;
        while i < s.waiting.len() {
            if takes.len() as u32 >= allocatable {
                self.batch_is_full = true;
                break;
            }
            let seq = s.waiting[i];
            let (node, prefix_pages) = if radix { s.radix_match(seq) } else { (super::radix::ROOT, 0) };
            let r = s.seqs[seq as usize];
            let extend = r.tokens_known() - prefix_pages * page;
            let total = f64::from(extend) + f64::from(clip(r.max_tokens));
            let rem_total = |s: &SchedulerState, offset: f64| available + evictable(s) - offset;
            let input = ceil_paged(extend);
            if total >= rem_total(s, rem_total_offset) {
                self.batch_is_full = true;
                break;
            }
            if i64::from(input) >= rem_input && !takes.is_empty() {
                break;
            }
            if let Some(radix) = s.radix.as_mut() {
                radix.inc_lock(node);
            }
            if total >= rem_total(s, rem_total_offset) {
                if let Some(radix) = s.radix.as_mut() {
                    radix.dec_lock(node);
                }
                self.batch_is_full = true;
                break;
            }
            // Whole (its future tokens reserved too), or its first chunk (`trunc_len` leaves at
            // least a page of the chunk budget's last page free).
            let (tokens, reserve) = match rem_chunk {
                Some(c) if i64::from(input) > c => {
                    let trunc = c - i64::from(page) + 1;
                    if trunc <= 0 {
                        if let Some(radix) = s.radix.as_mut() {
                            radix.dec_lock(node);
                        }
                        break;
                    }
                    new_chunked = Some(seq);
                    (trunc as u32, 0)
                }
                _ => (extend, clip(r.max_tokens)),
            };
            let paged = ceil_paged(tokens);
            rem_total_offset += f64::from(paged) + f64::from(reserve);
            cur_offset += f64::from(paged);
            rem_input -= i64::from(paged);
            rem_chunk = rem_chunk.map(|c| c - i64::from(paged));
            takes.push(Take { seq, node, prefix_pages, tokens });
            i += 1;
            let state = budget(rem_total_offset, cur_offset, rem_input, rem_chunk, s);
            if state != Added::Continue || new_chunked.is_some_and(|c| c == seq) {
                if state == Added::NoToken {
                    self.batch_is_full = true;
                }
                break;
            }
        }
        if takes.is_empty() && s.running.is_empty() {
            // Nothing runs, and the head of the queue still does not pass the adder: a retracted
            // request whose recompute plus its whole `max_new_tokens` exceeds what its own locked
            // prefix leaves. SGLang 0.4.9 would wait for ever; servesim runs it alone, which the
            // pool always holds (its prompt and output fit, `max_new_tokens`).
            if let Some(&seq) = s.waiting.front() {
                let (node, prefix_pages) = if radix { s.radix_match(seq) } else { (super::radix::ROOT, 0) };
                if let Some(radix) = s.radix.as_mut() {
                    radix.inc_lock(node);
                }
                let extend = s.seqs[seq as usize].tokens_known() - prefix_pages * page;
                let tokens = match self.config.chunked_prefill_size {
                    Some(c) if ceil_paged(extend) > c => {
                        new_chunked = Some(seq);
                        c - page + 1
                    }
                    _ => extend,
                };
                takes.push(Take { seq, node, prefix_pages, tokens });
            }
        }
        if takes.is_empty() {
            return false;
        }
        self.run_prefill(s, batch, &takes, chunked);
        self.chunked = new_chunked;
        true
    }

    /// Allocates the pages of the adder's requests and puts them in the batch: the chunked one
    /// (already running) and those taken from the front of the waiting queue's order.
    fn run_prefill(&mut self, s: &mut SchedulerState, batch: &mut Batch, takes: &[Take], chunked: Option<u32>) {
        let page = s.config.block_size;
        for take in takes {
            let from_queue = Some(take.seq) != chunked;
            if from_queue {
                let position = s.waiting.iter().position(|&w| w == take.seq).expect("taken from the waiting queue");
                s.waiting.remove(position);
                if s.radix.is_some() {
                    s.radix_adopt(take.seq, take.node, take.prefix_pages);
                } else {
                    s.record_admission(take.seq, 0);
                }
                s.push_running(take.seq);
            }
            let r = s.seqs[take.seq as usize];
            debug_assert!(!from_queue || r.computed == take.prefix_pages * page, "admitted with its cached prefix computed");
            let tokens_total = r.computed + take.tokens;
            let allocated = if s.radix.is_some() { s.radix_allocate(take.seq, tokens_total) } else { s.kv.allocate(take.seq, tokens_total, 0) };
            assert!(allocated, "SGLang's adder counted {} tokens as free or evictable", take.tokens);
            s.push_work(batch, take.seq, take.tokens);
        }
    }

    /// `update_running_batch`: a page for every running request's next token, or retraction.
    fn decode(&mut self, s: &mut SchedulerState, batch: &mut Batch) {
        if std::mem::take(&mut self.left_since_decode) {
            self.batch_is_full = false;
        }
        if s.running.is_empty() {
            // Idle: `new_token_ratio` back to its start.
            self.new_token_ratio = self.init_new_token_ratio;
            return;
        }
        let pages_needed = |s: &SchedulerState| -> u64 {
            s.running.iter().map(|&seq| u64::from(s.kv.blocks_missing(seq, s.seqs[seq as usize].computed + 1))).sum()
        };
        let needed = pages_needed(s);
        let free = |s: &SchedulerState| u64::from(s.kv.pool().blocks_free());
        if free(s) < needed && s.radix.is_some() {
            s.radix_evict(needed);
        }
        if free(s) < needed {
            self.retract(s);
        } else {
            self.new_token_ratio = (self.new_token_ratio - self.new_token_ratio_decay).max(self.min_new_token_ratio);
        }
        for i in 0..s.running.len() {
            let seq = s.running[i];
            let tokens_total = s.seqs[seq as usize].computed + 1;
            let allocated = if s.radix.is_some() { s.radix_allocate(seq, tokens_total) } else { s.kv.allocate(seq, tokens_total, 0) };
            assert!(allocated, "retraction left a page for every decode");
            s.push_work(batch, seq, 1);
        }
    }

    /// `retract_decode`: victims by fewest output tokens, then longest prompt, until 20 free
    /// tokens per remaining request (or one request) are left; `new_token_ratio` re-estimated.
    fn retract(&mut self, s: &mut SchedulerState) {
        let page = u64::from(s.config.block_size);
        let mut order = s.running.clone();
        // Sorted descending by (output, −input); victims come off the end.
        order.sort_by_key(|&seq| {
            let r = &s.seqs[seq as usize];
            std::cmp::Reverse((r.generated, std::cmp::Reverse(r.prompt_tokens)))
        });
        let mut retracted = Vec::new();
        let mut first = true;
        while first || u64::from(s.kv.pool().blocks_free()) * page < order.len() as u64 * RETRACT_DECODE_STEPS {
            if order.len() == 1 {
                break;
            }
            first = false;
            let victim = order.pop().expect("more than one");
            if s.radix.is_some() {
                s.radix_retract(victim);
                let residual = (order.len() as u64 * RETRACT_DECODE_STEPS).saturating_sub(u64::from(s.kv.pool().blocks_free()) * page);
                s.radix_evict(residual.div_ceil(page));
            } else {
                s.kv.free(victim);
                let r = &mut s.seqs[victim as usize];
                r.computed = 0;
                r.preemptions += 1;
            }
            retracted.push(victim);
        }
        s.running.retain(|seq| !retracted.contains(seq));
        s.waiting.extend(retracted);
        let decoded: u64 = s.running.iter().map(|&seq| u64::from(s.seqs[seq as usize].generated)).sum();
        let max_new: u64 = s.running.iter().map(|&seq| u64::from(s.seqs[seq as usize].max_tokens)).sum();
        let estimate = (decoded + RETRACT_DECODE_STEPS * s.running.len() as u64) as f64 / max_new.max(1) as f64;
        self.new_token_ratio = estimate.min(1.0);
        self.batch_is_full = false;
    }

    /// `calc_priority`: `lpm` sorts the waiting queue by cached prefix, longest first (stable),
    /// with the in-batch check's requests last; otherwise the queue stays in arrival order.
    fn order_waiting(&mut self, s: &mut SchedulerState) {
        if self.config.schedule_policy != SchedulePolicy::Lpm || s.radix.is_none() || s.waiting.len() > LPM_QUEUE_MAX {
            return;
        }
        let page = s.config.block_size;
        let mut scratch = RadixCache::keys_only();
        let mut keyed: Vec<(u64, u32)> = Vec::with_capacity(s.waiting.len());
        for i in 0..s.waiting.len() {
            let seq = s.waiting[i];
            let (_, pages) = s.radix_match(seq);
            let mut rank = u64::MAX - 1 - u64::from(pages);
            if pages * page <= IN_BATCH_CHECK_TOKENS {
                let keys = s.radix_lookup_keys(seq);
                if scratch.peek_prefix(keys) as u32 * page >= IN_BATCH_DEPRIORITIZE_TOKENS {
                    rank = u64::MAX;
                } else {
                    let keys = keys.to_vec();
                    scratch.insert(&keys, &[]);
                }
            }
            keyed.push((rank, seq));
        }
        keyed.sort_by_key(|&(rank, _)| rank);
        s.waiting.clear();
        s.waiting.extend(keyed.into_iter().map(|(_, seq)| seq));
    }
}

#[cfg(test)]
#[path = "sglang_tests.rs"]
mod tests;
