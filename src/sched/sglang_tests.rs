//! SGLang's policy through the scheduler: hand-checked admissions (PrefillAdder), chunking,
//! RadixAttention's hits, retraction and its victim, `new_token_ratio`'s schedule.

use super::super::config::{SchedulePolicy, SchedulerConfig, SglangConfig};
use super::super::prefix::stream_block_hashes;
use super::super::{Admission, Finished, Policy, Scheduler};
use super::*;

pub(in crate::sched) fn sglang_config(pages: u32, page: u32, chunk: Option<u32>, conservativeness: f64) -> SchedulerConfig {
    SchedulerConfig {
        enable_chunked_prefill: chunk.is_some(),
        enable_prefix_caching: true,
        sglang: Some(SglangConfig {
            schedule_policy: SchedulePolicy::Fcfs,
            chunked_prefill_size: chunk,
            max_prefill_tokens: 16384,
            schedule_conservativeness: conservativeness,
            cuda_graph_bs: vec![1, 2, 4, 8],
            disable_overlap_schedule: false,
            fp8_tensor_scales: false,
        }),
        ..SchedulerConfig::plain(chunk.unwrap_or(1 << 20), 64, page, pages)
    }
}

fn scheduler(config: SchedulerConfig) -> Scheduler {
    Scheduler::new(config.clone(), Policy::Sglang.build(&config))
}

/// Queues a request whose first `shared` tokens are stream `stream`'s.
fn add(s: &mut Scheduler, id: u32, prompt: u32, output: u32, max_tokens: u32, stream: u64, shared: u32) {
    let page = s.config().block_size;
    let hashes = stream_block_hashes(stream, shared, page);
    assert!(matches!(s.add_request_with_prefix(id, prompt, output, max_tokens, &hashes), Admission::Queued { .. }));
}

/// One step: (prefill tokens, decode tokens, finished).
fn step(s: &mut Scheduler) -> (u32, u32, Vec<Finished>) {
    let b = s.schedule();
    let (p, d) = (b.prefill_tokens, b.decode_tokens);
    let finished = s.finish_step().finished.clone();
    (p, d, finished)
}

#[test]
fn the_prefill_adder_reserves_each_new_requests_max_new_tokens_whole() {
    // 1,000 free tokens, nothing running. Each request: 200 new tokens + 100 max_new_tokens.
    // rem_total_tokens: 1000 → take (300 < 1000) → 700 → take → 400 → take → 100: the fourth's
    // 300 ≥ 100, "no token".
    let mut s = scheduler(sglang_config(1000, 1, Some(8192), 1.0));
    for id in 0..5 {
        add(&mut s, id, 200, 100, 100, 100 + u64::from(id), 0);
    }
    assert_eq!(step(&mut s).0, 600);
    // `batch_is_full`: no prefill is tried again until a running request leaves; decodes run.
    assert_eq!(step(&mut s), (0, 3, vec![]));
    assert_eq!(s.num_waiting(), 2);
}

#[test]
fn the_running_reserve_is_their_remaining_tokens_times_new_token_ratio() {
    // One running request (prompt 100, max_new 200) after its prefill: 1 token generated, so
    // its reserve is 199 × 0.7 = 139.3 tokens. Free: 1000 − 100 = 900 (its prompt is cached but
    // locked). A newcomer of 500 + 261 = 761 < 760.7? No: 761 ≥ 760.7, refused; 500 + 260 fits.
    for (max_new, admitted) in [(261, false), (260, true)] {
        let mut s = scheduler(sglang_config(1000, 1, Some(8192), 1.0));
        add(&mut s, 0, 100, 200, 200, 1, 0);
        assert_eq!(step(&mut s).0, 100);
        add(&mut s, 1, 500, max_new, max_new, 2, 0);
        let (prefill, decode, _) = step(&mut s);
        assert_eq!((prefill, decode), if admitted { (500, 0) } else { (0, 1) }, "max_new {max_new}");
    }
}

#[test]
fn a_long_prompt_is_chunked_and_its_chunks_go_first() {
    let mut s = scheduler(sglang_config(10_000, 1, Some(128), 1.0));
    add(&mut s, 0, 300, 2, 2, 1, 0);
    add(&mut s, 1, 50, 2, 2, 2, 0);
    // rem_chunk 128: the first request takes 128 − 1 + 1 = 128 tokens, which spends the chunk
    // budget, so the second waits; then 128 more; then its last 44 and, within the 84 left,
    // the second request whole.
    assert_eq!(step(&mut s).0, 128);
    assert_eq!(step(&mut s).0, 128);
    assert_eq!(step(&mut s).0, 44 + 50);
    assert_eq!(step(&mut s), (0, 2, vec![Finished { request_id: 0, output_tokens: 2, preemptions: 0 }, Finished { request_id: 1, output_tokens: 2, preemptions: 0 }]));
}

#[test]
fn radix_hits_are_token_granular_and_keep_finished_answers() {
    let mut s = scheduler(sglang_config(10_000, 1, Some(8192), 1.0));
    // 100 tokens of system prompt shared, then 20 of its own.
    add(&mut s, 0, 120, 5, 5, 7, 100);
    while s.has_work() {
        step(&mut s);
    }
    add(&mut s, 1, 137, 5, 5, 7, 100);
    assert_eq!(step(&mut s).0, 37, "the 100 shared tokens hit, not whole 16-token blocks");
    while s.has_work() {
        step(&mut s);
    }
    // The same prompt again: all but its last token hit (SGLang computes at least one).
    add(&mut s, 2, 100, 5, 5, 7, 100);
    assert_eq!(step(&mut s).0, 1);
    let stats = s.prefix_stats();
    assert_eq!((stats.hit_tokens, stats.prompt_tokens), (100 + 99, 120 + 137 + 100));
}

#[test]
fn pages_larger_than_one_match_whole_pages() {
    let mut s = scheduler(sglang_config(1000, 16, Some(8192), 1.0));
    add(&mut s, 0, 120, 2, 2, 7, 100);
    while s.has_work() {
        step(&mut s);
    }
    add(&mut s, 1, 120, 2, 2, 7, 100);
    // 100 shared tokens are 6 whole pages of 16: 96 hit, 24 computed.
    assert_eq!(step(&mut s).0, 24);
}

#[test]
fn retraction_takes_the_fewest_output_tokens_then_the_longest_prompt() {
    // 100 tokens. A: prompt 30, 60 out. B (arriving after A's prefill): prompt 10, 50 out,
    // max_new 57. Conservativeness 0.05: new_token_ratio 0.035, A's reserve 59 × 0.035, so B
    // fits (10 + 57 < 70 − 2.065). Decode k (k = 1, 2, …) finds 100 − (29 + k) − (9 + k) free
    // pages for its 2: the 31st finds none, with both at 31 tokens out: the tie goes to the
    // longer prompt, A, whose 30 own pages are freed; its prompt stays cached, unlocked.
    let mut s = scheduler(sglang_config(100, 1, Some(8192), 0.05));
    add(&mut s, 0, 30, 60, 60, 1, 0);
    assert_eq!(step(&mut s).0, 30);
    add(&mut s, 1, 10, 50, 57, 2, 0);
    assert_eq!(step(&mut s).0, 10);
    for k in 1..=30 {
        assert_eq!(step(&mut s), (0, 2, vec![]), "decode {k}");
    }
    assert_eq!(step(&mut s), (0, 1, vec![]), "A retracted, B decodes");
    assert_eq!(s.num_waiting(), 1);
    let mut finished = Vec::new();
    let mut recomputed = 0;
    while s.has_work() {
        let (prefill, _, f) = step(&mut s);
        recomputed += prefill;
        finished.extend(f);
    }
    // B ends first. A's readmission (31 new tokens + 60 max_new) never passes the adder beside
    // its own locked 30-token prompt (70 tokens left); SGLang would wait, servesim runs it once
    // nothing else does. It finds its prompt in the cache and recomputes its 31 generated tokens,
    // which retraction freed.
    assert_eq!(finished, vec![Finished { request_id: 1, output_tokens: 50, preemptions: 0 }, Finished { request_id: 0, output_tokens: 60, preemptions: 1 }]);
    assert_eq!(recomputed, 31);
}

#[test]
fn new_token_ratio_starts_decays_and_floors_as_sglang_computes_it() {
    let p = Sglang::new(&sglang_config(100, 1, None, 1.0));
    assert_eq!(p.new_token_ratio(), 0.7);
    assert!((p.min_new_token_ratio - 0.098).abs() < 1e-12);
    assert!((p.new_token_ratio_decay - (0.7 - 0.098) / 600.0).abs() < 1e-15);
    // Conservativeness scales the start, capped at 1.
    assert_eq!(Sglang::new(&sglang_config(100, 1, None, 2.0)).new_token_ratio(), 1.0);
}

#[test]
fn decodes_replay_graphs_padded_to_a_captured_size_and_prefills_run_eagerly() {
    let mut s = scheduler(sglang_config(10_000, 1, Some(8192), 1.0));
    for id in 0..3 {
        add(&mut s, id, 10, 3, 3, u64::from(id), 0);
    }
    assert_eq!(s.schedule().graph_size, None);
    s.finish_step();
    assert_eq!(s.schedule().graph_size, Some(4));
    s.finish_step();
}

#[test]
fn lpm_runs_the_longest_cached_prefix_first() {
    let mut config = sglang_config(10_000, 1, Some(8192), 1.0);
    config.sglang.as_mut().unwrap().schedule_policy = SchedulePolicy::Lpm;
    config.max_num_seqs = 1;
    let mut s = scheduler(config);
    add(&mut s, 0, 200, 2, 2, 9, 200);
    while s.has_work() {
        step(&mut s);
    }
    // Arrival order: a stranger, then one that shares 150 cached tokens. One runs at a time.
    add(&mut s, 1, 200, 2, 2, 1, 0);
    add(&mut s, 2, 200, 2, 2, 9, 150);
    assert_eq!(step(&mut s).0, 50, "the cached one first");
}

#[test]
fn the_same_prompt_computed_twice_at_once_is_kept_once() {
    // Two identical prompts in one prefill batch: neither finds the other cached, both compute
    // it; the second's insert finds the first's pages, frees its own copies and takes the tree's
    // (`cache_unfinished_req`), so the pool holds the prompt once.
    let mut s = scheduler(sglang_config(1000, 1, Some(8192), 1.0));
    add(&mut s, 0, 100, 3, 3, 7, 100);
    add(&mut s, 1, 100, 3, 3, 7, 100);
    assert_eq!(step(&mut s).0, 200);
    assert_eq!(s.kv().pool().blocks_used(), 100);
    assert_eq!(s.kv().block_table(0), s.kv().block_table(1));
    // Their decodes each take a page of their own.
    assert_eq!(step(&mut s).1, 2);
    assert_eq!(s.kv().pool().blocks_used(), 102);
}
