//! Preemption with prefix caching: vLLM V1 keeps a preempted request's computed blocks in the
//! cache and finds them again when it is admitted; V0, or V1 without caching, recomputes
//! everything. Each case runs with block ids (the engine's, and the simulator's reference path)
//! and as counts with the decode cohort (the simulator's fast path), which must agree.

use proptest::prelude::*;
use proptest::test_runner::TestRunner;

use super::super::{Admission, Policy, Scheduler, SchedulerConfig};

use crate::sched::prefix::scheduler_tests::{BLOCK, config};

/// With ids and one sequence at a time, or (`fast`) as the simulator's fast path: counts and
/// the decode cohort.
fn scheduler(policy: Policy, config: &SchedulerConfig, fast: bool) -> Scheduler {
    let s = Scheduler::new(config.clone(), policy.build(config));
    if fast { s.with_decode_cohort(false).without_block_ids() } else { s }
}

/// Runs `requests` (prompt, output), all queued at once, to the end; returns the tokens computed
/// beyond each request's prompt and output (what preemptions made it recompute) and the
/// preemptions.
fn recomputed_tokens(s: &mut Scheduler, requests: &[(u32, u32)]) -> (u64, u32) {
    for (id, &(prompt, output)) in requests.iter().enumerate() {
        assert!(matches!(s.add_request(id as u32, prompt, output, output), Admission::Queued { .. }));
    }
    let (mut computed, mut preemptions) = (0u64, 0);
    while s.has_work() {
        computed += u64::from(s.schedule().tokens());
        preemptions += s.finish_step().finished.iter().map(|f| f.preemptions).sum::<u32>();
    }
    // A request computes each prompt and output token once, but its last output token.
    let once: u64 = requests.iter().map(|&(prompt, output)| u64::from(prompt + output - 1)).sum();
    (computed - once, preemptions)
}

/// A (prompt 100) and B (prompt 98) fill the 14 blocks, B two tokens behind. When A needs an 8th
/// block, B (the newest) is preempted with 110 tokens computed: 6 full blocks and 14 tokens of a
/// 7th. A runs alone to the end of its output of `a_output` tokens, taking B's blocks as it
/// grows; then B is admitted again with 111 tokens known.
fn a_preempts_b(policy: Policy, caching: bool, fast: bool, a_output: u32) -> (u64, u32) {
    let mut s = scheduler(policy, &config(14, caching), fast);
    let result = recomputed_tokens(&mut s, &[(100, a_output), (98, 30)]);
    if caching {
        // Hits count at first admissions only: B's second lookup is not one.
        let stats = s.prefix_stats();
        assert_eq!((stats.prompt_tokens, stats.hit_tokens), (198, 0), "{policy:?}");
    }
    result
}

#[test]
fn a_preempted_request_admitted_again_with_nothing_evicted_recomputes_only_its_last_partial_block() {
    for policy in [Policy::VllmV1, Policy::Servesim] {
        for fast in [false, true] {
            // A's 8th block is B's partial one, evicted first; B finds its 6 full blocks and
            // recomputes the 14 tokens of the 7th.
            assert_eq!(a_preempts_b(policy, true, fast, 20), (14, 1), "{policy:?}, fast path {fast}");
        }
    }
}

#[test]
fn blocks_evicted_while_it_waits_are_recomputed() {
    for policy in [Policy::VllmV1, Policy::Servesim] {
        for fast in [false, true] {
            // A's 9th block evicts B's last full one (tokens 80..96): B finds 5 blocks and
            // recomputes tokens 80..110.
            assert_eq!(a_preempts_b(policy, true, fast, 30), (30, 1), "{policy:?}, fast path {fast}");
        }
    }
}

#[test]
fn without_caching_or_under_vllm_v0_a_preempted_request_recomputes_everything() {
    for fast in [false, true] {
        for policy in [Policy::VllmV1, Policy::Servesim] {
            assert_eq!(a_preempts_b(policy, false, fast, 20), (110, 1), "{policy:?}, fast path {fast}");
        }
        for caching in [false, true] {
            assert_eq!(a_preempts_b(Policy::VllmV0, caching, fast, 20), (110, 1), "caching {caching}, fast path {fast}");
        }
    }
}

/// The decode cohort and block counts (the simulator's fast path) keep a preempted request's
/// blocks as the block ids and hashes do, step for step: which of its blocks later allocations
/// evict, and so what it recomputes.
#[test]
fn counts_and_the_cohort_find_what_block_ids_find() {
    let request = (1u32..300, 1u32..120);
    let case = (
        prop_oneof![Just(Policy::VllmV1), Just(Policy::VllmV0), Just(Policy::Servesim)],
        prop::collection::vec(request, 1..24),
        8u32..60,   // num_gpu_blocks: small, to preempt
        1u32..12,   // max_num_seqs
        32u32..600, // max_num_batched_tokens
        prop_oneof![Just(1u32), Just(BLOCK)],
    );
    TestRunner::new(ProptestConfig::with_cases(400))
        .run(&case, |(policy, requests, blocks, max_num_seqs, budget, block_size)| {
            let config = SchedulerConfig { max_num_seqs, max_num_batched_tokens: budget, block_size, ..config(blocks, true) };
            let mut reference = scheduler(policy, &config, false);
            let mut fast = scheduler(policy, &config, true);
            for (id, &(prompt, output)) in requests.iter().enumerate() {
                let queued = reference.add_request(id as u32, prompt, output, output);
                prop_assert_eq!(queued, fast.add_request(id as u32, prompt, output, output));
            }
            let mut steps = 0;
            while reference.has_work() {
                prop_assert!(fast.has_work());
                let (a, b) = (reference.schedule(), fast.schedule());
                prop_assert_eq!((a.prefill_tokens, a.decode_tokens, a.num_seqs()), (b.prefill_tokens, b.decode_tokens, b.num_seqs()));
                let mut done_a: Vec<_> = reference.finish_step().finished.clone();
                let mut done_b: Vec<_> = fast.finish_step().finished.clone();
                done_a.sort_by_key(|f| f.request_id);
                done_b.sort_by_key(|f| f.request_id);
                prop_assert_eq!(done_a, done_b);
                prop_assert_eq!(reference.kv().pool().blocks_used(), fast.kv().pool().blocks_used());
                steps += 1;
                prop_assert!(steps < 100_000, "no progress");
            }
            prop_assert!(!fast.has_work());
            prop_assert_eq!(reference.prefix_stats(), fast.prefix_stats());
            Ok(())
        })
        .unwrap();
}
