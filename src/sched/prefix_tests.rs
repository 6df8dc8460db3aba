//! Prefix caching through the scheduler: the analytic case, eviction under memory pressure, and
//! reference counts (the scheduler's debug invariants check them after every step too).

use super::super::{Admission, Policy, Scheduler, SchedulerConfig};
use super::stream_block_hashes;

pub(in crate::sched) const BLOCK: u32 = 16;

/// The scheduler knobs these tests and `preemption_tests` run with.
pub(in crate::sched) fn config(num_gpu_blocks: u32, enable_prefix_caching: bool) -> SchedulerConfig {
    SchedulerConfig { enable_prefix_caching, ..SchedulerConfig::plain(2048, 8, BLOCK, num_gpu_blocks) }
}

fn scheduler(policy: Policy, num_gpu_blocks: u32, enable_prefix_caching: bool) -> Scheduler {
    let config = config(num_gpu_blocks, enable_prefix_caching);
    Scheduler::new(config.clone(), policy.build(&config))
}

/// Queues a request whose first `shared` tokens are those of `stream`; returns its slot.
fn add(s: &mut Scheduler, id: u32, prompt: u32, output: u32, stream: u64, shared: u32) -> u32 {
    match s.add_request_with_prefix(id, prompt, output, output, &stream_block_hashes(stream, shared, BLOCK)) {
        Admission::Queued { seq } => seq,
        other => panic!("{other:?}"),
    }
}

/// Runs every step to the end; returns the prefill tokens computed.
fn drain(s: &mut Scheduler) -> u32 {
    let mut prefill = 0;
    while s.has_work() {
        prefill += s.schedule().prefill_tokens;
        s.finish_step();
    }
    prefill
}

#[test]
fn identical_prompts_in_sequence_compute_only_the_last_partial_block_after_the_first() {
    for policy in [Policy::VllmV1, Policy::VllmV0, Policy::Servesim] {
        for (prompt, tail) in [(100, 4), (96, BLOCK), (17, 1), (16, 16), (5, 5)] {
            let mut s = scheduler(policy, 1000, true);
            let prefills: Vec<u32> = (0..4)
                .map(|id| {
                    add(&mut s, id, prompt, 3, 7, prompt);
                    drain(&mut s)
                })
                .collect();
            assert_eq!(prefills, vec![prompt, tail, tail, tail], "{policy:?}, prompt {prompt}");
            let stats = s.prefix_stats();
            assert_eq!((stats.prompt_tokens, stats.hit_tokens), (4 * u64::from(prompt), 3 * u64::from(prompt - tail)));
            // Off, every prompt is computed whole.
            let mut off = scheduler(policy, 1000, false);
            for id in 0..4 {
                add(&mut off, id, prompt, 3, 7, prompt);
                assert_eq!(drain(&mut off), prompt);
            }
            assert_eq!(off.prefix_stats().prompt_tokens, 0);
        }
    }
}

#[test]
fn eviction_under_memory_pressure_takes_only_free_blocks_least_recently_freed_first() {
    // 12 blocks: A (stream 1, 4 full blocks + 1) runs on while B of other text needs 7 blocks.
    let mut s = scheduler(Policy::VllmV1, 12, true);
    let a = add(&mut s, 0, 65, 40, 1, 65);
    s.schedule();
    s.finish_step();
    // A second request of A's text shares A's 4 blocks while both run.
    let a2 = add(&mut s, 1, 65, 2, 1, 65);
    s.schedule();
    s.finish_step();
    let shared: Vec<u32> = s.kv().block_table(a)[..4].to_vec();
    assert_eq!(&s.kv().block_table(a2)[..4], &shared[..], "the second request reuses the first's blocks");
    let b = add(&mut s, 2, 100, 1, 2, 0);
    for _ in 0..4 {
        if !s.has_work() {
            break;
        }
        s.schedule();
        let (ta, tb) = (s.kv().block_table(a), s.kv().block_table(b));
        assert!(tb.iter().all(|blk| !ta.contains(blk)), "B took a block A holds: {ta:?} {tb:?}");
        s.finish_step();
    }
    drain(&mut s);
    assert_eq!(s.kv().pool().blocks_used(), 0);
    // Freed blocks keep their content: A's text again is cached once it ran.
    add(&mut s, 3, 65, 1, 1, 65);
    drain(&mut s);
    assert_eq!(s.kv().prefix_cache().unwrap().blocks_cached(), 4);
    assert_eq!(s.kv().cached_prefix_tokens(&stream_block_hashes(1, 65, BLOCK)), 64);
    // A request that needs all 12 blocks for new text evicts every cached block.
    add(&mut s, 4, 12 * BLOCK - 1, 1, 3, 0);
    drain(&mut s);
    assert_eq!(s.kv().prefix_cache().unwrap().blocks_cached(), 0);
    assert_eq!(s.kv().cached_prefix_tokens(&stream_block_hashes(1, 65, BLOCK)), 0);
}

#[test]
fn preemption_frees_shared_blocks_by_reference() {
    // Many requests of one stream in a pool too small for all: preemptions free tables whose
    // blocks others still hold; the debug invariants check every refcount after every step.
    let mut s = scheduler(Policy::VllmV1, 24, true);
    for id in 0..12 {
        add(&mut s, id, 40 + id, 30, 9, 32);
    }
    drain(&mut s);
    assert_eq!(s.kv().pool().blocks_used(), 0);
    assert!(s.prefix_stats().hit_tokens > 0);
}
