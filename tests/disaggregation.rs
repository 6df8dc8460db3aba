//! Prefill/decode disaggregation (`[cluster] mode = "disaggregated"`, docs/disaggregation.md):
//! the analytic cases, the link's transfer time and sharing, decode admission under memory
//! pressure, random deployments, the example and the scenario's checks.

mod common;

use proptest::prelude::*;
use servesim::scenario::{Policy, Router};
use servesim::sched::{Acceptance, SchedulerConfig, SpeculativeConfig};
use servesim::sim::link::LinkSpec;
use servesim::sim::{Pool, Role, SimConfig, SimOutput, simulate_pools};
use servesim::workload::RequestSpec;

use common::sim::{PerToken, one_replica, request, scheduler};

/// A pool's scheduler: vLLM V1's, with `num_gpu_blocks` blocks.
fn pool_scheduler(num_gpu_blocks: u32) -> SchedulerConfig {
    scheduler(4096, 64, num_gpu_blocks)
}

fn config() -> SimConfig {
    one_replica(pool_scheduler(1000), Policy::VllmV1)
}

/// `prefill` prefill replicas and `decode` decode replicas of `decode_blocks` blocks each, the
/// link into each decode replica `link`, 1,000 bytes of KV per token.
fn run(requests: &[RequestSpec], prefill: u32, decode: u32, decode_blocks: u32, link: LinkSpec) -> SimOutput {
    let (p, d) = (pool_scheduler(1000), pool_scheduler(decode_blocks));
    let pools = [
        Pool { scheduler: &p, replicas: prefill, cost: &PerToken, weight: 1.0, role: Role::Prefill },
        Pool { scheduler: &d, replicas: decode, cost: &PerToken, weight: 1.0, role: Role::Decode { ingress: link, kv_bytes_per_token: 1_000 } },
    ];
    simulate_pools(requests, &config(), &pools)
}

const INSTANT: LinkSpec = LinkSpec { bandwidth_bytes_per_s: f64::INFINITY, latency_ns: 0 };

#[test]
fn with_an_instant_link_ttft_and_tpot_are_the_step_costs() {
    // The prefill step: 100 µs + 100 tokens × 10 µs = 1,100 µs, and the client has its first
    // token then (from the prefill pool). Each decode step: 100 + 10 = 110 µs.
    let out = run(&[request(0, 100, 5)], 1, 1, 1000, INSTANT);
    let r = &out.records.requests[0];
    assert!(r.success);
    assert_eq!(r.output_tokens, 5);
    assert_eq!(r.first_token_ns, Some(1_100_000));
    assert_eq!(r.end_ns, 1_100_000 + 4 * 110_000);
    assert_eq!(out.extras[0].replica, 1, "decoded on the decode replica");
    // One step on the prefill replica, four on the decode replica.
    let by_replica = |i: u32| out.timeline.iter().filter(|s| s.replica == i).count();
    assert_eq!((by_replica(0), by_replica(1)), (1, 4));
    assert!(out.timeline.iter().filter(|s| s.replica == 1).all(|s| s.prefill_tokens == 0), "the decode side computes no prompt");
}

#[test]
fn a_transfer_takes_bytes_over_bandwidth_plus_latency() {
    // 100 tokens × 1,000 B at 1 GB/s: 100 µs, plus 50 µs of latency; the first decode step then
    // ends 110 µs later.
    let link = LinkSpec { bandwidth_bytes_per_s: 1e9, latency_ns: 50_000 };
    let out = run(&[request(0, 100, 2)], 1, 1, 1000, link);
    assert_eq!(out.records.requests[0].end_ns, 1_100_000 + 150_000 + 110_000);
}

#[test]
fn transfers_into_one_replica_share_its_link() {
    // Two prompts prefilled in one step (100 + 200 × 10 µs = 2,100 µs) start their transfers
    // together: each moves at half the bandwidth, so both take 200 µs, not 100, and arrive
    // together, 50 µs later. Their first decode step (2 sequences: 120 µs) ends at 2,470 µs.
    let link = LinkSpec { bandwidth_bytes_per_s: 1e9, latency_ns: 50_000 };
    let out = run(&[request(0, 100, 2), request(0, 100, 2)], 1, 1, 1000, link);
    for r in &out.records.requests {
        assert_eq!((r.first_token_ns, r.end_ns), (Some(2_100_000), 2_100_000 + 200_000 + 50_000 + 120_000));
    }
    // With two decode replicas, each transfer has a link to itself: 100 µs.
    let out = run(&[request(0, 100, 2), request(0, 100, 2)], 1, 2, 1000, link);
    for r in &out.records.requests {
        assert_eq!(r.end_ns, 2_100_000 + 100_000 + 50_000 + 110_000);
    }
}

#[test]
fn decode_admission_waits_for_kv_room() {
    // The decode replica holds 10 blocks of 16 tokens: one request of 100 + 40 tokens (9
    // blocks) at a time. The second's KV arrives with the first's, and waits in the queue until
    // the first finishes and frees its blocks.
    let out = run(&[request(0, 100, 40), request(0, 100, 40)], 1, 1, 10, INSTANT);
    let [a, b] = [&out.records.requests[0], &out.records.requests[1]];
    assert!(a.success && b.success);
    let (first, second) = if a.end_ns < b.end_ns { (a, b) } else { (b, a) };
    // The second decodes only after the first ended: 39 decode steps of its own after that.
    assert_eq!(second.end_ns, first.end_ns + 39 * 110_000);
    assert!(out.timeline.iter().filter(|s| s.replica == 1).all(|s| s.kv_blocks_used <= 10));
}

#[test]
fn a_one_token_request_never_leaves_the_prefill_pool() {
    let out = run(&[request(0, 50, 1)], 1, 1, 1000, INSTANT);
    assert_eq!(out.records.requests[0].end_ns, 600_000);
    assert!(out.timeline.iter().all(|s| s.replica == 0));
}

fn random_requests() -> impl Strategy<Value = Vec<RequestSpec>> {
    prop::collection::vec((0u64..30_000_000, 1u32..300, 1u32..80), 1..60).prop_map(|mut v| {
        v.sort_by_key(|r| r.0);
        v.into_iter().map(|(arrival_ns, input, output)| request(arrival_ns, input, output)).collect()
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(150))]

    /// Every request completes once with exactly its tokens, the first of them from a prefill
    /// replica, no step exceeds its replica's cache, the same input gives the same output, and
    /// (debug builds) the schedulers' invariants hold after every step.
    #[test]
    fn disaggregation_loses_no_request(
        requests in random_requests(),
        prefill in 1u32..3,
        decode in 1u32..4,
        decode_blocks in 8u32..80,
        bandwidth in prop_oneof![Just(f64::INFINITY), Just(1e9), Just(1e7)],
        latency_ns in 0u64..100_000,
        router in prop_oneof![Just(Router::RoundRobin), Just(Router::LeastOutstanding)],
        engine in 0u32..4,
    ) {
        let link = LinkSpec { bandwidth_bytes_per_s: bandwidth, latency_ns };
        // The engine features on both sides: plain vLLM V1, V0 with multi-step windows (chunked
        // or not), or V1 with speculative decoding.
        let (mut p, mut d) = (pool_scheduler(200), pool_scheduler(decode_blocks));
        let mut policy = Policy::VllmV1;
        for s in [&mut p, &mut d] {
            match engine {
                1 | 2 => {
                    s.num_scheduler_steps = 3;
                    s.enable_chunked_prefill = engine == 2;
                    policy = Policy::VllmV0;
                }
                3 => s.speculative = Some(SpeculativeConfig { num_speculative_tokens: 2, acceptance: Acceptance::Drawn { rates: vec![0.6, 0.6], seed: 3 } }),
                _ => {}
            }
        }
        let pools = [
            Pool { scheduler: &p, replicas: prefill, cost: &PerToken, weight: 1.0, role: Role::Prefill },
            Pool { scheduler: &d, replicas: decode, cost: &PerToken, weight: 1.0, role: Role::Decode { ingress: link, kv_bytes_per_token: 1_000 } },
        ];
        let config = SimConfig { router, policy, ..config() };
        let out = simulate_pools(&requests, &config, &pools);
        for (spec, r) in requests.iter().zip(&out.records.requests) {
            if r.success {
                prop_assert_eq!(r.output_tokens, spec.output_tokens);
                prop_assert!(r.first_token_ns.is_some_and(|t| t > r.send_ns && t <= r.end_ns));
            } else {
                prop_assert_eq!(r.output_tokens, 0);
            }
        }
        let preempted = out.extras.iter().any(|e| e.preemptions > 0);
        for s in &out.timeline {
            let blocks = if s.replica < prefill { 200 } else { decode_blocks };
            prop_assert!(s.kv_blocks_used <= blocks);
            if s.replica >= prefill && !preempted {
                prop_assert_eq!(s.prefill_tokens, 0, "a decode replica recomputed a prompt without a preemption");
            }
        }
        let again = simulate_pools(&requests, &config, &pools);
        prop_assert_eq!(&out.records.requests, &again.records.requests);
        prop_assert_eq!(&out.timeline, &again.timeline);
    }
}

// ------------------------------------------------------------------ the scenario

#[test]
fn the_example_runs_the_same_twice() {
    let args = ["simulate", "scenarios/disaggregated.toml", "--set", "workload.num_prompts=200"];
    let (a, b) = (common::servesim(&args), common::servesim(&args));
    assert!(a.status.success(), "{}", common::stderr(&a));
    assert_eq!(common::stdout(&a), common::stdout(&b));
    assert!(common::stderr(&a).contains("prefill: 1 × H100-SXM"), "{}", common::stderr(&a));
}

#[test]
fn bad_disaggregation_settings_are_named() {
    let f = "scenarios/disaggregated.toml";
    common::assert_scenario_errors(&[
        (f, &["cluster.mode=\"split\""], &["cluster.mode", "split", "pooled, disaggregated"]),
        (f, &["cluster.mode=\"pooled\""], &["cluster.link", "infiniband", "only a disaggregated cluster"]),
        (f, &["cluster.link=\"carrier-pigeon\""], &["cluster.link", "carrier-pigeon", "nvlink"]),
        (f, &["cluster.link_bandwidth_gbps=0"], &["cluster.link_bandwidth_gbps", "0"]),
        // In range, but the longest prompt's KV would take past the simulation's horizon to move.
        (f, &["cluster.link_bandwidth_gbps=1e-11", "cluster.link_latency_us=5"], &["cluster.link_bandwidth_gbps", "would take", "a simulation may last"]),
        (f, &["cluster.link_latency_us=-1"], &["cluster.link_latency_us", "-1"]),
        (f, &["engine.policy=\"tgi\""], &["tgi"]),
    ]);
    // Per-pool fields, which --set cannot reach: edited copies.
    let text = std::fs::read_to_string(f).unwrap();
    let dir = tempfile::tempdir().unwrap();
    for (edited, expected) in [
        (text.replace("role = \"decode\"", "role = \"prefill\""), &["cluster.pools", "no decode pool"][..]),
        (text.replace("role = \"prefill\"", "role = \"encode\""), &["cluster.pools[0].role", "encode"][..]),
        (text.replace("role = \"prefill\"\n", ""), &["cluster.pools[0].role", "missing"][..]),
        (text.replace("mode = \"disaggregated\"", "").replace("link = \"infiniband\"", ""), &["cluster.pools[0].role", "disaggregated"][..]),
    ] {
        let path = common::write_file(dir.path(), "edited.toml", &edited);
        let err = servesim::scenario::Scenario::load(&path, &[]).unwrap_err().to_string();
        for e in expected {
            assert!(err.contains(e), "{err} lacks {e}");
        }
    }
}

// ------------------------------------------------------------------ the planner

/// The planner searches xPyD splits as units of x prefill and y decode replicas: each is
/// simulated with its two pools, costs (x + y) × TP GPUs per unit, and meets its objectives at
/// the target.
#[test]
fn the_planner_searches_prefill_decode_splits() {
    // A sixth of the example's target: the same search with a sixth of the replicas to simulate,
    // and a tenth of the requests per probe.
    let text = std::fs::read_to_string("plans/disaggregated-8b.toml")
        .unwrap()
        .replace("disaggregation = [\"pooled\", \"1P1D\", \"1P2D\", \"1P3D\", \"2P1D\"]", "disaggregation = [\"pooled\", \"1P2D\"]")
        .replace("rate = 12.0", "rate = 2.0")
        // A p99 makes every probe 10,000 requests (100 beyond the percentile); a p90, 1,000.
        .replace("tpot_p99_ms = 9", "tpot_p90_ms = 9");
    assert!(
        text.contains("rate = 2.0") && text.contains("[\"pooled\", \"1P2D\"]") && text.contains("tpot_p90_ms = 9"),
        "the example plan changed: {text}"
    );
    let plan = servesim::plan::Plan::from_toml_str(&text, std::path::Path::new("plans/disaggregated-8b.toml")).unwrap();
    let candidates = plan.space.candidates();
    let options = servesim::plan::SearchOptions { min_requests: 200, relative_width: 0.2, ..Default::default() };
    let evaluations = servesim::plan::evaluate(&plan, &candidates, &options).unwrap();
    let ranked = servesim::plan::rank(&plan, &evaluations);
    assert_eq!(ranked.len(), 2, "both meet the target within budget");
    for (candidate, evaluated) in &ranked {
        assert_eq!(evaluated.gpus, candidate.gpus_per_replica() * evaluated.replicas);
        assert!(evaluated.cluster.as_ref().is_some_and(|p| p.verdict.met));
    }
    let split = ranked.iter().find(|(c, _)| c.disaggregation == Some((1, 2))).expect("the split is ranked");
    assert_eq!(split.1.scenario.pools.len(), 2);
}
