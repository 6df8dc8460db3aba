//! Property tests over random deployments and workloads: every request completes exactly once,
//! tokens are conserved, times are ordered, and (in debug builds, which `cargo test` uses) the
//! scheduler's invariants are asserted after every step.

mod common;

use proptest::prelude::*;

use servesim::cost::{CostModel, StepCost};
use servesim::scenario::{Policy, Router};
use servesim::sched::{Batch, SchedulePolicy, SchedulerConfig, SglangConfig, TgiConfig};
use servesim::sim::{SimConfig, SimOutput, simulate, simulate_per_sequence};
use servesim::workload::{RequestSpec, SharedPrefix};

use common::sim::{one_replica, request, scheduler};

/// A simple cost model: fixed per step plus per token, so tests need no hardware.
struct LinearCost;

impl CostModel for LinearCost {
    fn predict(&self, batch: &Batch) -> StepCost {
        let gemm_ns = 1_000 * batch.tokens() as u64;
        let overhead_ns = 500_000;
        StepCost { total_ns: gemm_ns + overhead_ns, gemm_ns, overhead_ns, ..StepCost::default() }
    }
    fn source(&self) -> &'static str {
        "linear test model"
    }
}

/// A cost model that reads every part of a batch a real one reads: tokens, sequences, sampled
/// rows, the attention contexts (summed, squared, longest) and the graph size, so that a fast
/// path that got any of them wrong would time its steps differently.
struct ContextCost;

impl CostModel for ContextCost {
    fn predict(&self, batch: &Batch) -> StepCost {
        let mut contexts = batch.cohort.context_tokens;
        let mut squares = batch.cohort.context_token_squares as f64;
        for w in &batch.seqs {
            contexts += w.context_tokens as u64;
            squares += w.context_tokens as f64 * w.context_tokens as f64;
        }
        let gemm_ns = 1_000 * batch.tokens() as u64 + 700 * batch.sampled_tokens() as u64;
        let attention_ns = 3 * contexts + (squares / 64.0) as u64 + 11 * batch.max_context_tokens() as u64;
        let overhead_ns = 200_000 + 5_000 * batch.num_seqs() as u64 + batch.graph_size.map_or(0, |g| 100 * g as u64);
        StepCost { total_ns: gemm_ns + attention_ns + overhead_ns, gemm_ns, attention_ns, overhead_ns, ..StepCost::default() }
    }
    fn source(&self) -> &'static str {
        "context test model"
    }
    fn reads_max_context(&self) -> bool {
        true
    }
}

/// Everything a simulation outputs, compared field by field.
fn assert_same_output(fast: &SimOutput, reference: &SimOutput) -> Result<(), TestCaseError> {
    prop_assert_eq!(&fast.records.requests, &reference.records.requests);
    prop_assert_eq!(fast.records.itl_ns.sorted(), reference.records.itl_ns.sorted());
    prop_assert_eq!(&fast.records.tokens_per_second, &reference.records.tokens_per_second);
    prop_assert_eq!(fast.records.duration_ns, reference.records.duration_ns);
    prop_assert_eq!(&fast.extras, &reference.extras);
    prop_assert_eq!(&fast.timeline, &reference.timeline);
    prop_assert_eq!(fast.rejected, reference.rejected);
    Ok(())
}

/// Long outputs, so that decode cohorts form, grow, cross many blocks and finish.
fn long_requests_strategy() -> impl Strategy<Value = Vec<RequestSpec>> {
    prop::collection::vec((0u64..80_000_000, 1u32..200, 1u32..200), 1..120).prop_map(two_texts)
}

fn requests_strategy() -> impl Strategy<Value = Vec<RequestSpec>> {
    prop::collection::vec((0u64..50_000_000, 1u32..300, 1u32..60), 1..80).prop_map(two_texts)
}

/// Requests by arrival time whose prompts are of two texts (by arrival time's parity): with
/// prefix caching on, those of one text share the blocks of their common length.
fn two_texts(mut v: Vec<(u64, u32, u32)>) -> Vec<RequestSpec> {
    v.sort_by_key(|r| r.0);
    v.into_iter()
        .map(|(arrival_ns, input_tokens, output_tokens)| RequestSpec { prefix: SharedPrefix { stream: arrival_ns % 2, tokens: input_tokens }, ..request(arrival_ns, input_tokens, output_tokens) })
        .collect()
}

/// `replicas` of `policy` running `scheduler` behind `router`, at most `max_concurrency`
/// requests in flight, the front end taking `frontend_overhead_ns` a request.
fn cluster(scheduler: SchedulerConfig, policy: Policy, replicas: u32, router: Router, max_concurrency: Option<u32>, frontend_overhead_ns: u64) -> SimConfig {
    SimConfig { replicas, router, max_concurrency, frontend_overhead_ns, ..one_replica(scheduler, policy) }
}

fn config_strategy() -> impl Strategy<Value = SimConfig> {
    prop_oneof![vllm_config_strategy(), tgi_config_strategy(), sglang_config_strategy()]
}

/// SGLang 0.4.9 with pages of 1 or 16 tokens, pools small enough to retract, fcfs or lpm, the
/// radix cache on or off, chunked or whole prefills, and its routers.
fn sglang_config_strategy() -> impl Strategy<Value = SimConfig> {
    (
        4u32..200, // pool, in blocks of 16 tokens
        prop_oneof![Just(1u32), Just(16u32)],
        1u32..40, // max_running_requests
        prop::option::of(prop_oneof![Just(64u32), Just(256u32), Just(1024u32)]),
        1u32..4,
        prop_oneof![Just(Router::RoundRobin), Just(Router::CacheAware)],
        prop::option::of(1u32..10),
        any::<bool>(), // radix cache
        any::<bool>(), // lpm
        prop_oneof![Just(0.3f64), Just(1.0f64), Just(1.5f64)],
        frontend_overhead_strategy(),
    )
        .prop_map(|(blocks, page, max_running, chunk, replicas, router, max_concurrency, radix, lpm, conservativeness, frontend_overhead_ns)| {
            let scheduler = SchedulerConfig {
                enable_chunked_prefill: chunk.is_some(),
                block_size: page,
                enable_prefix_caching: radix,
                sglang: Some(SglangConfig {
                    schedule_policy: if lpm { SchedulePolicy::Lpm } else { SchedulePolicy::Fcfs },
                    chunked_prefill_size: chunk,
                    max_prefill_tokens: 16384,
                    schedule_conservativeness: conservativeness,
                    cuda_graph_bs: vec![1, 2, 4, 8, 16],
                    disable_overlap_schedule: false,
                    fp8_tensor_scales: false,
                }),
                ..scheduler(chunk.unwrap_or(16384 + 400), max_running, blocks * 16 / page)
            };
            cluster(scheduler, Policy::Sglang, replicas, router, max_concurrency, frontend_overhead_ns)
        })
}

fn vllm_config_strategy() -> impl Strategy<Value = SimConfig> {
    (
        prop_oneof![Just(Policy::VllmV1), Just(Policy::VllmV0)],
        any::<bool>(),
        1u32..40,       // max_num_seqs
        64u32..1024,    // max_num_batched_tokens
        4u32..200,      // num_gpu_blocks: small, to force preemption
        prop_oneof![Just(1u32), Just(16u32)],
        1u32..4,        // replicas
        prop_oneof![Just(Router::RoundRobin), Just(Router::LeastOutstanding)],
        prop::option::of(1u32..10),
        prop_oneof![Just(0.0), Just(0.01)],
        frontend_overhead_strategy(),
        any::<bool>(),
    )
        .prop_map(|(policy, chunked, max_num_seqs, budget, blocks, block_size, replicas, router, max_concurrency, watermark, frontend_overhead_ns, enable_prefix_caching)| {
            let chunked = chunked || policy == Policy::VllmV1;
            let scheduler = SchedulerConfig {
                enable_chunked_prefill: chunked,
                block_size,
                // A hybrid model's windows and states beside the tokens' blocks, 0 to 3 a
                // sequence, drawn from the pool's size (the tuple has no room for a 13th).
                kv_blocks_per_seq: blocks % 4,
                watermark,
                enable_prefix_caching,
                ..scheduler(if chunked { budget } else { budget.max(400) }, max_num_seqs, blocks)
            };
            cluster(scheduler, policy, replicas, router, max_concurrency, frontend_overhead_ns)
        })
}

/// None (every request sent at an instant is in that instant's step), or a front end that
/// spreads a burst over the first step.
fn frontend_overhead_strategy() -> impl Strategy<Value = u64> {
    prop_oneof![Just(0u64), Just(50_000u64)]
}

/// TGI with limits drawn so its start-up checks hold: max_input_tokens < max_total_tokens ≤ the
/// KV cache, max_batch_prefill_tokens ≥ max_input_tokens. Small caches and concurrency limits, so
/// that requests are refused (422, 429) and admission is tight.
fn tgi_config_strategy() -> impl Strategy<Value = SimConfig> {
    (
        4u32..200, // num_gpu_blocks
        prop_oneof![Just(1u32), Just(16u32)],
        1u32..4, // replicas
        prop_oneof![Just(Router::RoundRobin), Just(Router::LeastOutstanding)],
        prop::option::of(1u32..10),
        (0.0f64..=1.0, 0.0f64..=1.0, 0u32..200), // max_total_tokens, max_input_tokens, prefill margin
        prop_oneof![Just(0.0f32), Just(0.3f32), Just(1.2f32)],
        0u32..25,  // max_waiting_tokens
        1u32..100, // max_concurrent_requests
        frontend_overhead_strategy(),
    )
        .prop_map(
            |(blocks, block_size, replicas, router, max_concurrency, (total_at, input_at, margin), ratio, waiting, concurrent, frontend_overhead_ns)| {
                let kv_tokens = blocks * block_size;
                let max_total_tokens = 2 + ((kv_tokens - 2) as f64 * total_at) as u32;
                let max_input_tokens = 1 + ((max_total_tokens - 2) as f64 * input_at) as u32;
                let tgi = TgiConfig {
                    max_input_tokens,
                    max_total_tokens,
                    max_batch_prefill_tokens: max_input_tokens + margin,
                    max_batch_total_tokens: kv_tokens,
                    waiting_served_ratio: ratio,
                    max_waiting_tokens: waiting,
                    max_concurrent_requests: concurrent,
                };
                let budget = tgi.prefill_budget_tokens(block_size);
                let scheduler = SchedulerConfig { enable_chunked_prefill: false, block_size, tgi: Some(tgi), ..scheduler(budget, u32::MAX, blocks) };
                cluster(scheduler, Policy::Tgi, replicas, router, max_concurrency, frontend_overhead_ns)
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn every_request_completes_once_and_tokens_are_conserved(requests in requests_strategy(), config in config_strategy()) {
        let out = simulate(&requests, &config, &LinearCost);
        let records = &out.records.requests;
        prop_assert_eq!(records.len(), requests.len());
        let mut rejected = 0;
        for (spec, r) in requests.iter().zip(records) {
            prop_assert!(r.send_ns >= spec.arrival_ns);
            prop_assert!(r.end_ns >= r.send_ns);
            prop_assert_eq!(r.input_tokens, spec.input_tokens);
            if r.success {
                // SGLang lowers max_new_tokens so that prompt and output fit its pool, less 2.
                let expected = match config.policy {
                    Policy::Sglang => {
                        let pool = u64::from(config.scheduler.num_gpu_blocks) * u64::from(config.scheduler.block_size);
                        u64::from(spec.output_tokens).min(pool.saturating_sub(2 + u64::from(spec.input_tokens)).max(1)) as u32
                    }
                    _ => spec.output_tokens,
                };
                prop_assert_eq!(r.output_tokens, expected, "tokens lost or invented");
                let first = r.first_token_ns.expect("a successful request has a first token");
                prop_assert!(first > r.send_ns && first <= r.end_ns);
            } else {
                rejected += 1;
                prop_assert_eq!(r.output_tokens, 0);
            }
        }
        prop_assert_eq!(rejected, out.rejected);
        // ITL samples: one per token after the first, for every successful request.
        let itl_count: u64 = out.records.itl_ns.runs.iter().map(|&(_, c)| c).sum();
        let expected: u64 = records.iter().filter(|r| r.success).map(|r| r.output_tokens as u64 - 1).sum();
        prop_assert_eq!(itl_count, expected);
        // The timeline's decode and sampled-prefill tokens cover every generated token.
        let token_total: u64 = out.records.tokens_per_second.total();
        prop_assert_eq!(token_total, records.iter().map(|r| r.output_tokens as u64).sum::<u64>());
        // Steps on one replica never overlap.
        for replica in 0..config.replicas {
            let steps: Vec<_> = out.timeline.iter().filter(|s| s.replica == replica).collect();
            for pair in steps.windows(2) {
                prop_assert!(pair[1].start_ns >= pair[0].start_ns + pair[0].cost.total_ns);
            }
            for s in &steps {
                if config.policy == Policy::Tgi || config.policy == Policy::Sglang {
                    // TGI's and SGLang's budgets bound prefill steps only, and neither mixes them
                    // with decodes.
                    prop_assert!(s.prefill_tokens <= config.scheduler.max_num_batched_tokens);
                    prop_assert!(s.prefill_tokens == 0 || s.decode_tokens == 0, "{:?} mixed prefill and decode", config.policy);
                } else {
                    prop_assert!(s.prefill_tokens + s.decode_tokens <= config.scheduler.max_num_batched_tokens);
                }
                prop_assert!(s.batch_seqs <= config.scheduler.max_num_seqs);
                prop_assert!(s.kv_blocks_used <= config.scheduler.num_gpu_blocks);
            }
        }
        if config.policy == Policy::Tgi {
            prop_assert!(out.extras.iter().all(|e| e.preemptions == 0), "TGI preempted");
        }
        if let Some(limit) = config.max_concurrency {
            // At any send instant, at most `limit` requests are in flight.
            for r in records {
                let in_flight = records.iter().filter(|o| o.send_ns <= r.send_ns && o.end_ns > r.send_ns).count();
                prop_assert!(in_flight as u32 <= limit);
            }
        }
    }

    /// The decode cohort (issue 14) changes nothing: every record, ITL sample, token count,
    /// timeline row and price equals the per-sequence reference's, over both vLLM policies,
    /// chunked and whole prefill, preemption (small KV caches), replicas, the concurrency gate,
    /// the front end and TGI (which keeps no cohort, so this checks it is left alone).
    #[test]
    fn decode_cohort_matches_the_per_sequence_reference(
        requests in prop_oneof![requests_strategy(), long_requests_strategy()],
        config in config_strategy(),
    ) {
        let fast = simulate(&requests, &config, &ContextCost);
        let reference = simulate_per_sequence(&requests, &config, &ContextCost);
        assert_same_output(&fast, &reference)?;
    }

    /// Outputs longer than the cohort's finish buckets (1,024 steps), so that finishes wait in
    /// its heap and move into the buckets; chunked prefill only, since a recompute of such a
    /// sequence would not fit a whole-prompt budget.
    #[test]
    fn decode_cohort_matches_the_reference_on_long_outputs(
        requests in prop::collection::vec((0u64..50_000_000, 1u32..100, 900u32..2600), 1..8).prop_map(|mut v| {
            v.sort_by_key(|r| r.0);
            v.into_iter().map(|(arrival_ns, input_tokens, output_tokens)| request(arrival_ns, input_tokens, output_tokens)).collect::<Vec<_>>()
        }),
        config in vllm_config_strategy().prop_filter("chunked prefill", |c| c.scheduler.enable_chunked_prefill),
    ) {
        let fast = simulate(&requests, &config, &ContextCost);
        let reference = simulate_per_sequence(&requests, &config, &ContextCost);
        assert_same_output(&fast, &reference)?;
    }

    #[test]
    fn same_input_same_output(requests in requests_strategy(), config in config_strategy()) {
        let a = simulate(&requests, &config, &LinearCost);
        let b = simulate(&requests, &config, &LinearCost);
        prop_assert_eq!(a.records.requests, b.records.requests);
        prop_assert_eq!(a.timeline, b.timeline);
    }
}

/// One replica of vLLM V1 whose API server takes `frontend_overhead_ns` per request.
fn frontend_config(frontend_overhead_ns: u64) -> SimConfig {
    SimConfig { frontend_overhead_ns, ..one_replica(scheduler(2048, 32, 1000), Policy::VllmV1) }
}

/// A 1,000-request burst through a front end of 2 ms a request: the API server takes the whole
/// burst in (2 s) before its event loop gets to stream anything, so every first token comes at
/// the end of the intake and mean TTFT ÷ duration is near 1, as recorded bursts cluster late
/// (0.63–0.92, issue 31). Delivered as the engine samples them, they would spread evenly over
/// the intake (a ratio near 0.5).
#[test]
fn a_burst_through_a_front_end_gets_its_first_tokens_late() {
    let requests: Vec<RequestSpec> =
        (0..1000).map(|_| request(0, 100, 20)).collect();
    let out = simulate(&requests, &frontend_config(2_000_000), &LinearCost);
    let records = &out.records.requests;
    assert!(records.iter().all(|r| r.success && r.output_tokens == 20));
    let intake_ns = 1000 * 2_000_000;
    assert!(records.iter().all(|r| r.first_token_ns.unwrap() >= intake_ns && r.end_ns >= r.first_token_ns.unwrap()));
    let mean_ttft_ns = records.iter().map(|r| r.first_token_ns.unwrap() as f64).sum::<f64>() / 1000.0;
    let ratio = mean_ttft_ns / out.records.duration_ns as f64;
    assert!(ratio > 0.9, "mean TTFT / duration {ratio}");
    // The engine itself had sampled them over the intake: the last step ends well after it.
    assert!(out.timeline.iter().any(|s| s.start_ns < intake_ns / 2 && s.batch_seqs > 0));
}

/// A burst sent at one instant: without a front end every request is in the first step; with
/// one, requests reach the scheduler one overhead apart, so the first step runs on the first
/// request alone and the rest wait for the second, though all were sent at zero.
#[test]
fn a_front_end_spreads_a_burst_over_the_first_step() {
    let requests: Vec<RequestSpec> =
        (0..8).map(|_| request(0, 100, 4)).collect();
    let config = frontend_config;
    let at_once = simulate(&requests, &config(0), &LinearCost);
    assert_eq!((at_once.timeline[0].start_ns, at_once.timeline[0].batch_seqs), (0, 8));

    let overhead_ns = 50_000;
    let spread = simulate(&requests, &config(overhead_ns), &LinearCost);
    let (first, second) = (spread.timeline[0], spread.timeline[1]);
    assert_eq!((first.start_ns, first.batch_seqs, first.prefill_tokens), (overhead_ns, 1, 100));
    // The other seven were through the front end (8 × 50 µs) long before the first step ended.
    assert_eq!((second.batch_seqs, second.prefill_tokens, second.decode_tokens), (8, 700, 1));
    let records = &spread.records.requests;
    assert!(records.iter().all(|r| r.send_ns == 0 && r.success));
    assert_eq!(records[0].first_token_ns, Some(overhead_ns + first.cost.total_ns));
    assert_eq!(records[1].first_token_ns, Some(second.start_ns + second.cost.total_ns));
}
