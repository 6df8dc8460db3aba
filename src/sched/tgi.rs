//! Text Generation Inference 2.3 (commit 11d7af7, the recorded run's ROCm image) as it batched.
//!
//! TGI's router owns the batching; the Python shards only run the forwards they are sent. Its
//! loop is `batching_task` over `Queue::next_batch`, in the v3 router (router/src/infer/v3/
//! scheduler.rs and queue.rs; later releases moved them under backends/v3/src/); the rules below
//! cite those two functions by name. With B = the number of running requests:
//!
//! ```text
//!                         ┌──────────────── all running requests finished ◄───────────────┐
//!                         ▼                                                               │
//!  nothing runs ──next_batch(min 1)──► PREFILL ──► check: next_batch(min ⌊ratio × B⌋,     │
//!   (idle until a request              (new only)         or min 1 once waiting_tokens    │
//!    arrives)                                             ≥ max_waiting_tokens)           │
//!                                                  ┌─ formed ──► PREFILL ──┐              │
//!                                                  │             (new only)│              │
//!                                                  └─ not formed ──────────┴─► DECODE ────┤
//!                                                                      (every running)    │
//!                                                                        └──► check ◄─────┘
//! ```
//!
//! - A step is either a prefill of newly admitted requests, all their prompt tokens at once (no
//!   chunked prefill at this commit; it samples their first token), or a decode of every running
//!   request. The running requests wait while a prefill runs, and the new ones join them at the
//!   decode that always follows (`batching_task`: `prefill(...)` then `decode(..., batches)`).
//! - Right after a prefill from the idle state, the check runs before any decode, so a second
//!   prefill can follow at once (`batching_task` enters its inner loop, whose body starts with the
//!   check). After a prefill inside the loop, the decode is unconditional.
//! - `waiting_tokens` is TGI's counter: set to 1 by every prefill, +1 after every decode. So once
//!   `max_waiting_tokens` − 1 decodes ran since the last prefill, any waiting request that fits
//!   is prefilled (`min_size = None`).
//! - Admission (`next_batch`) is strict FCFS and stops at the first request that does not fit: its
//!   prompt must fit the prefill token budget, its prompt + `max_new_tokens` the free token budget,
//!   and its KV blocks for prompt + `max_new_tokens` − 1 tokens the free blocks. The blocks are
//!   reserved up front and kept until the request ends, so decodes never need a block and nothing
//!   is ever preempted. If fewer than the minimum fit, none is taken.
//! - Requests are refused on arrival (HTTP errors the client counts as failed): more than
//!   `max_concurrent_requests` in flight on this replica (429, the HTTP handler's semaphore),
//!   prompt + `max_new_tokens` > `max_total_tokens` or prompt > `max_input_tokens` (422, the
//!   router's validation).
//! - HIP graphs replay only decodes of up to 32 requests, padded up to 1, 2, 4, 8, 16 or 32.

use super::batch::{Batch, padded_capture_size};
use super::config::{SchedulerConfig, TgiConfig};
use super::outcome::Rejection;
use super::policy::SchedulingPolicy;
use super::state::SchedulerState;

/// TGI's default `CUDA_GRAPHS` capture sizes (used for HIP graphs on ROCm too). Decodes of more
/// requests, and every prefill, run eagerly (`FlashCausalLM.forward`: no graph when
/// `cu_seqlen_prefill` is set or no captured size holds the batch).
const TGI_CAPTURE_SIZES: [u32; 6] = [1, 2, 4, 8, 16, 32];

/// What the step after the current one may be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Next {
    /// The top of `batching_task`'s inner loop: try to form a prefill, else decode.
    Check,
    /// A prefill inside the inner loop just ran: the decode of everyone follows unconditionally.
    Decode,
}

/// The TGI 2.3 batching policy (see the module documentation for the rules and their sources).
pub struct Tgi {
    config: TgiConfig,
    /// [`TgiConfig::prefill_budget_tokens`] for the scheduler's block size.
    prefill_budget_tokens: u32,
    /// TGI's `waiting_tokens`: 1 after each prefill, +1 after each decode.
    waiting_tokens: u32,
    next: Next,
}

impl Tgi {
    /// The policy for a scheduler configured with `config.tgi`. Panics if that is missing or
    /// breaks TGI's start-up checks: the scenario resolver reports those as field errors first.
    pub fn new(config: &SchedulerConfig) -> Tgi {
        let tgi = config.tgi.expect("policy tgi needs SchedulerConfig.tgi");
        if let Err(why) = tgi.check(config.block_size, config.num_gpu_blocks) {
            panic!("invalid TGI configuration: {why}");
        }
        let prefill_budget_tokens = tgi.prefill_budget_tokens(config.block_size);
        // The scheduler's invariant check bounds prefill steps by max_num_batched_tokens.
        assert!(
            config.max_num_batched_tokens >= prefill_budget_tokens,
            "max_num_batched_tokens ({}) must hold TGI's prefill budget ({prefill_budget_tokens})",
            config.max_num_batched_tokens
        );
        assert!(config.watermark == 0.0, "TGI keeps no KV watermark");
        Tgi { config: tgi, prefill_budget_tokens, waiting_tokens: 1, next: Next::Check }
    }

    /// `next_batch`: how many waiting requests, from the head, form a prefill batch now; 0 when
    /// fewer than `min_size` (at least 1) fit. Reads only; O(requests admitted + 1).
    fn fitting(&self, s: &SchedulerState, min_size: u32) -> u32 {
        let min_size = min_size.max(1);
        // `next_batch` returns early when the queue is shorter than the minimum.
        if (s.waiting.len() as u64) < min_size as u64 {
            return 0;
        }
        let block_size = s.kv.block_size() as u64;
        // `token_budget = max_batch_total_tokens − batch.max_tokens`, where the running batch's
        // `max_tokens` is its blocks × block size; only running requests hold blocks.
        let token_budget = (self.config.max_batch_total_tokens as u64)
            .saturating_sub(s.kv.pool().blocks_used() as u64 * block_size);
        let mut blocks_free = s.kv.pool().blocks_free();
        let mut prefill_tokens = 0u64;
        let mut decode_tokens = 0u64;
        let mut count = 0u32;
        for &seq in &s.waiting {
            let q = &s.seqs[seq as usize];
            debug_assert!(q.computed == 0 && q.generated == 0, "TGI never preempts: waiting requests are new");
            prefill_tokens += q.prompt_tokens as u64;
            decode_tokens += q.max_tokens as u64;
            if prefill_tokens > self.prefill_budget_tokens as u64 || prefill_tokens + decode_tokens > token_budget {
                break;
            }
            let blocks = s.kv.blocks_for_tokens(reserved_tokens(q.prompt_tokens, q.max_tokens));
            if blocks > blocks_free {
                break;
            }
            blocks_free -= blocks;
            count += 1;
        }
        // "Check if our batch is big enough": too small, and every entry goes back to the queue.
        if count < min_size { 0 } else { count }
    }

    /// Moves the first `count` waiting requests to running, reserving their KV, and schedules
    /// their whole prompts.
    fn prefill(&mut self, s: &mut SchedulerState, batch: &mut Batch, count: u32) {
        for _ in 0..count {
            let seq = s.waiting.pop_front().expect("fitting() counted it");
            let q = s.seqs[seq as usize];
            let reserved = s.kv.allocate(seq, reserved_tokens(q.prompt_tokens, q.max_tokens), 0);
            assert!(reserved, "fitting() checked the blocks");
            s.push_running(seq);
            s.push_work(batch, seq, q.prompt_tokens);
        }
        self.waiting_tokens = 1;
    }

    /// One token for every running request.
    fn decode(&mut self, s: &SchedulerState, batch: &mut Batch) {
        for &seq in &s.running {
            let q = &s.seqs[seq as usize];
            // The up-front reservation covers every token a request can compute, so a decode
            // never needs a block and TGI never preempts.
            assert_eq!(s.kv.blocks_missing(seq, q.computed + 1), 0, "TGI decode needs a new KV block");
            s.push_work(batch, seq, 1);
        }
        self.waiting_tokens = self.waiting_tokens.saturating_add(1);
    }
}

/// KV tokens TGI reserves for a request at admission: prompt + `max_new_tokens` − 1 (the last
/// sampled token is never fed back), from `next_batch`'s block allocation and the shard's
/// `block_tokens = input_length + max_new_tokens − 1 + speculative_length` (speculation off).
fn reserved_tokens(prompt_tokens: u32, max_tokens: u32) -> u32 {
    prompt_tokens + max_tokens - 1
}

impl SchedulingPolicy for Tgi {
    fn name(&self) -> &'static str {
        "tgi"
    }

    fn schedule(&mut self, s: &mut SchedulerState, batch: &mut Batch) {
        if s.running.is_empty() {
            // The outer loop: `next_batch(None, ...)`, any number of requests.
            let count = self.fitting(s, 1);
            if count > 0 {
                self.prefill(s, batch, count);
                self.next = Next::Check;
            }
            return;
        }
        if self.next == Next::Check {
            let running = s.running.len() as u32;
            let min_size = if self.waiting_tokens >= self.config.max_waiting_tokens {
                // "If we didn't onboard any new requests since >= max_waiting_tokens, we try to
                // add a new batch even though its size might be small".
                1
            } else {
                // A saturating cast, as Rust's `as usize` in TGI.
                (running as f32 * self.config.waiting_served_ratio).floor() as u32
            };
            let count = self.fitting(s, min_size);
            if count > 0 {
                self.prefill(s, batch, count);
                self.next = Next::Decode;
                return;
            }
        }
        self.decode(s, batch);
        self.next = Next::Check;
    }

    fn graph_size(&self, batch: &Batch) -> Option<u32> {
        if !batch.is_decode_only() {
            return None;
        }
        padded_capture_size(batch.num_seqs(), &TGI_CAPTURE_SIZES)
    }

    /// The router's checks, in its order: the concurrency semaphore in the HTTP handler first
    /// (429), then validation (422): total length, then input length.
    fn refuse(&self, s: &SchedulerState, prompt_tokens: u32, max_tokens: u32) -> Option<Rejection> {
        let c = &self.config;
        let in_flight = (s.waiting.len() + s.running.len()) as u32;
        if in_flight >= c.max_concurrent_requests {
            return Some(Rejection::Overloaded { in_flight, max_concurrent_requests: c.max_concurrent_requests });
        }
        let total_tokens = prompt_tokens as u64 + max_tokens as u64;
        if total_tokens > c.max_total_tokens as u64 {
            return Some(Rejection::TotalTooLong { total_tokens, max_total_tokens: c.max_total_tokens });
        }
        if prompt_tokens > c.max_input_tokens {
            return Some(Rejection::InputTooLong { prompt_tokens, max_input_tokens: c.max_input_tokens });
        }
        None
    }

    fn budget_bounds_decodes(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sched::Scheduler;
    use crate::sched::Admission;

    const BLOCK: u32 = 16;

    fn tgi_config() -> TgiConfig {
        TgiConfig {
            max_input_tokens: 1000,
            max_total_tokens: 2000,
            max_batch_prefill_tokens: 1050,
            max_batch_total_tokens: 100_000,
            waiting_served_ratio: 0.3,
            max_waiting_tokens: 20,
            max_concurrent_requests: 128,
        }
    }

    fn scheduler_with(tgi: TgiConfig, num_gpu_blocks: u32) -> Scheduler {
        let config = SchedulerConfig {
            enable_chunked_prefill: false,
            tgi: Some(tgi),
            ..SchedulerConfig::plain(tgi.prefill_budget_tokens(BLOCK), u32::MAX, BLOCK, num_gpu_blocks)
        };
        let policy = Box::new(Tgi::new(&config));
        Scheduler::new(config, policy)
    }

    fn scheduler() -> Scheduler {
        scheduler_with(tgi_config(), 100_000 / BLOCK)
    }

    fn add(s: &mut Scheduler, id: u32, prompt: u32, output: u32, max_tokens: u32) -> u32 {
        match s.add_request(id, prompt, output, max_tokens) {
            Admission::Queued { seq } => seq,
            other => panic!("request {id} not queued: {other:?}"),
        }
    }

    /// What one step was: (prefill tokens, decode tokens, sequences).
    fn step(s: &mut Scheduler) -> (u32, u32, u32) {
        let b = s.schedule();
        let shape = (b.prefill_tokens, b.decode_tokens, b.seqs.len() as u32);
        if !b.is_empty() {
            s.finish_step();
        }
        shape
    }

    #[test]
    fn head_of_line_blocks_the_rest() {
        let mut s = scheduler();
        // 700 + 700 > 1056 prefill tokens: the second cannot join the first prefill, and the small
        // third, which would fit, must wait behind it.
        add(&mut s, 0, 700, 50, 50);
        add(&mut s, 1, 700, 50, 50);
        add(&mut s, 2, 10, 50, 50);
        assert_eq!(step(&mut s), (700, 0, 1));
        assert_eq!(s.num_waiting(), 2);
        // B = 1: ⌊0.3⌋ = 0, so any request that fits may be prefilled: the head now fits with the
        // small one behind it (710 ≤ 1056), straight after the first prefill.
        assert_eq!(step(&mut s), (710, 0, 2));
        assert_eq!(s.num_waiting(), 0);
    }

    #[test]
    fn head_blocked_by_kv_holds_back_smaller_requests() {
        // 64 blocks; while the first request runs, the next one in line cannot fit.
        let mut tgi = tgi_config();
        tgi.max_batch_total_tokens = 64 * BLOCK;
        tgi.max_total_tokens = 1000;
        tgi.max_input_tokens = 900;
        tgi.max_batch_prefill_tokens = 950;
        let mut s = scheduler_with(tgi, 64);
        add(&mut s, 0, 500, 100, 400); // reserves 899 tokens = 57 blocks
        add(&mut s, 1, 200, 10, 10); // needs 14 blocks (7 free) and 210 tokens (1024 − 912 = 112 free)
        add(&mut s, 2, 10, 10, 10); // needs 1 block, would fit, but is behind the head
        assert_eq!(step(&mut s), (500, 0, 1));
        assert_eq!(s.kv().pool().blocks_used(), 57);
        for _ in 0..99 {
            assert_eq!(step(&mut s), (0, 1, 1), "only the first request runs");
        }
        assert_eq!(s.num_waiting(), 2);
        // It finished (100 tokens): now both fit.
        assert_eq!(s.num_running(), 0);
        assert_eq!(step(&mut s), (210, 0, 2));
    }

    #[test]
    fn admission_reserves_prompt_plus_max_tokens_minus_one() {
        let mut s = scheduler();
        // Output 5 tokens, but the client allowed 120: TGI reserves for 120, 219 tokens = 14 blocks.
        let seq = add(&mut s, 0, 100, 5, 120);
        step(&mut s);
        assert_eq!(s.kv().block_table(seq).len(), 14);
        // Decodes never grow it.
        for _ in 0..3 {
            step(&mut s);
            assert_eq!(s.kv().block_table(seq).len(), 14);
        }
        // 113 + 16 − 1 = 128 tokens: exactly 8 blocks, where prompt + max_tokens would need 9.
        let mut s = scheduler();
        let seq = add(&mut s, 1, 113, 1, 16);
        s.schedule();
        assert_eq!(s.kv().block_table(seq).len(), 8);
        s.finish_step();
        // It finished at its prefill (one output token) and gave its blocks back.
        assert_eq!(s.kv().pool().blocks_used(), 0);
    }

    #[test]
    fn prefill_steps_hold_only_new_requests_and_never_decodes() {
        let mut s = scheduler();
        for id in 0..4 {
            add(&mut s, id, 50, 30, 30);
        }
        assert_eq!(step(&mut s), (200, 0, 4));
        assert_eq!(step(&mut s), (0, 4, 4));
        // 4 running, then 2 arrive: ⌊0.3 × 4⌋ = 1 ≤ 2, so the next step is their prefill alone.
        add(&mut s, 10, 40, 30, 30);
        add(&mut s, 11, 40, 30, 30);
        let b = s.schedule().clone();
        assert_eq!((b.prefill_tokens, b.decode_tokens), (80, 0));
        assert!(b.seqs.iter().all(|w| w.context_tokens == 0 && w.new_tokens == 40 && w.samples_token));
        s.finish_step();
        // Then the decode of all six, with no prefill tokens.
        assert_eq!(step(&mut s), (0, 6, 6));
    }

    #[test]
    fn prefill_runs_whole_prompts_without_chunking() {
        let mut tgi = tgi_config();
        tgi.max_input_tokens = 1999;
        tgi.max_batch_prefill_tokens = 2040;
        let mut s = scheduler_with(tgi, 100_000 / BLOCK);
        add(&mut s, 0, 1990, 2, 2);
        assert_eq!(step(&mut s), (1990, 0, 1));
    }

    /// 10 running, 2 waiting: ⌊0.3 × 10⌋ = 3 > 2, so no prefill until a third waits or
    /// `waiting_tokens` reaches 20.
    #[test]
    fn waiting_served_ratio_holds_back_small_prefills() {
        let mut s = scheduler();
        for id in 0..10 {
            add(&mut s, id, 20, 200, 200);
        }
        assert_eq!(step(&mut s), (200, 0, 10)); // waiting_tokens = 1
        add(&mut s, 10, 20, 200, 200);
        add(&mut s, 11, 20, 200, 200);
        for _ in 0..5 {
            assert_eq!(step(&mut s), (0, 10, 10));
        }
        // A third arrives: 3 ≥ 3.
        add(&mut s, 12, 20, 200, 200);
        assert_eq!(step(&mut s), (60, 0, 3));
        assert_eq!(step(&mut s), (0, 13, 13));
    }

    #[test]
    fn max_waiting_tokens_forces_a_prefill() {
        let mut s = scheduler();
        for id in 0..10 {
            add(&mut s, id, 20, 200, 200);
        }
        assert_eq!(step(&mut s), (200, 0, 10)); // waiting_tokens = 1
        add(&mut s, 10, 20, 200, 200);
        add(&mut s, 11, 20, 200, 200);
        // The check before decode k (k = 1, 2, ...) sees waiting_tokens = k: it passes at k = 20,
        // after 19 decodes.
        for k in 1..20 {
            assert_eq!(step(&mut s), (0, 10, 10), "decode {k}");
        }
        assert_eq!(step(&mut s), (40, 0, 2));
        assert_eq!(step(&mut s), (0, 12, 12));
        // The counter restarted at 1 and that decode made it 2: a single newcomer (⌊0.3 × 12⌋ = 3)
        // waits through 18 more decodes, 19 since the prefill, as before.
        add(&mut s, 12, 20, 200, 200);
        for _ in 2..20 {
            assert_eq!(step(&mut s), (0, 12, 12));
        }
        assert_eq!(step(&mut s), (20, 0, 1));
    }

    #[test]
    fn a_prefill_from_idle_may_be_followed_by_another_prefill() {
        let mut s = scheduler();
        // 20 prompts of 100 tokens: 10 fill the 1056-token prefill budget.
        for id in 0..20 {
            add(&mut s, id, 100, 50, 50);
        }
        assert_eq!(step(&mut s), (1000, 0, 10));
        // The inner loop checks before its first decode: 10 fit ≥ ⌊0.3 × 10⌋ = 3.
        assert_eq!(step(&mut s), (1000, 0, 10));
        // Inside the loop a decode always follows a prefill.
        assert_eq!(step(&mut s), (0, 20, 20));
    }

    #[test]
    fn no_preemption_even_with_a_tiny_cache() {
        // 8 blocks of 16 = 128 tokens; each request reserves 20 + 30 − 1 = 49 tokens = 4 blocks.
        let mut tgi = tgi_config();
        tgi.max_input_tokens = 60;
        tgi.max_total_tokens = 100;
        tgi.max_batch_prefill_tokens = 110;
        tgi.max_batch_total_tokens = 128;
        let mut s = scheduler_with(tgi, 8);
        for id in 0..6 {
            add(&mut s, id, 20, 30, 30);
        }
        let mut finished = 0;
        let mut steps = 0;
        while s.has_work() {
            let b = s.schedule();
            assert!(!b.is_empty(), "stalled");
            assert!(b.prefill_tokens == 0 || b.decode_tokens == 0, "mixed step");
            assert!(s.num_running() <= 2, "the cache holds two reservations");
            let out = s.finish_step();
            for f in &out.finished {
                assert_eq!(f.preemptions, 0);
                assert_eq!(f.output_tokens, 30);
            }
            finished += out.finished.len();
            steps += 1;
            assert!(steps < 10_000);
        }
        assert_eq!(finished, 6);
    }

    #[test]
    fn rejections() {
        let mut tgi = tgi_config();
        tgi.max_concurrent_requests = 3;
        let mut s = scheduler_with(tgi, 100_000 / BLOCK);
        // 1001 > max_input_tokens 1000, and its total is within 2000.
        assert_eq!(
            s.add_request(0, 1001, 10, 10),
            Admission::Rejected(Rejection::InputTooLong { prompt_tokens: 1001, max_input_tokens: 1000 })
        );
        // 1000 + 1001 > max_total_tokens 2000: the total is checked first.
        assert_eq!(
            s.add_request(1, 1000, 10, 1001),
            Admission::Rejected(Rejection::TotalTooLong { total_tokens: 2001, max_total_tokens: 2000 })
        );
        // The limits themselves are fine.
        add(&mut s, 2, 1000, 1, 1000);
        add(&mut s, 3, 10, 1, 1);
        add(&mut s, 4, 10, 1, 1);
        // A fourth in flight: 429, checked before the lengths.
        assert_eq!(
            s.add_request(5, 5000, 1, 1),
            Admission::Rejected(Rejection::Overloaded { in_flight: 3, max_concurrent_requests: 3 })
        );
        // Finishing frees the slots.
        while s.has_work() {
            step(&mut s);
        }
        add(&mut s, 6, 10, 1, 1);
    }

    #[test]
    fn graphs_only_for_decodes_of_up_to_32() {
        let mut s = scheduler();
        for id in 0..40 {
            add(&mut s, id, 10, 100, 100);
        }
        let b = s.schedule();
        assert_eq!((b.prefill_tokens, b.graph_size), (400, None), "prefill runs eagerly");
        s.finish_step();
        let b = s.schedule();
        assert_eq!((b.decode_tokens, b.graph_size), (40, None), "40 > 32 runs eagerly");
        s.finish_step();

        let policy = Tgi::new(scheduler().config());
        let decode = |n: u32| {
            let mut b = Batch::default();
            for i in 0..n {
                b.push_decode(crate::sched::SeqWork { seq: i, new_tokens: 1, context_tokens: 10, samples_token: true, draft_tokens: 0 });
            }
            policy.graph_size(&b)
        };
        let sizes: Vec<_> = [1, 2, 3, 4, 5, 8, 9, 16, 17, 32, 33].iter().map(|&n| decode(n)).collect();
        assert_eq!(
            sizes,
            [Some(1), Some(2), Some(4), Some(4), Some(8), Some(8), Some(16), Some(16), Some(32), Some(32), None]
        );
    }

    #[test]
    fn prefill_budget_is_padded_to_whole_blocks() {
        // The recorded run: 125000 + 50 = 125050 → 125056.
        let mut tgi = tgi_config();
        tgi.max_batch_prefill_tokens = 125_050;
        assert_eq!(tgi.prefill_budget_tokens(16), 125_056);
        // So a 1056-token budget (1050 padded) takes prompts totalling 1056 exactly.
        let mut s = scheduler();
        add(&mut s, 0, 1000, 5, 5);
        add(&mut s, 1, 56, 5, 5);
        assert_eq!(step(&mut s), (1056, 0, 2));
    }

    #[test]
    fn free_token_budget_counts_max_new_tokens_unrounded() {
        // 160 blocks, 2560 tokens. `next_batch` also checks the sum of prompt + max_new_tokens (not
        // − 1, not rounded to blocks) against the tokens not held by the running batch.
        let mut tgi = tgi_config();
        tgi.max_batch_total_tokens = 2560;
        let mut s = scheduler_with(tgi, 160);
        add(&mut s, 0, 500, 1, 1500); // 2000 tokens of budget; reserves 1999 tokens = 125 blocks
        add(&mut s, 1, 10, 1, 10); // 20 tokens, 2 blocks: fits
        assert_eq!(step(&mut s), (510, 0, 2));
        let mut s = scheduler_with(tgi, 160);
        add(&mut s, 0, 500, 1, 1500);
        // Reserves 560 tokens = 35 blocks, exactly the 35 left, but 2000 + 561 > 2560 tokens.
        add(&mut s, 1, 10, 1, 551);
        assert_eq!(step(&mut s), (500, 0, 1));
    }
}
