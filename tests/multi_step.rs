//! Multi-step scheduling (`engine.num_scheduler_steps`, docs/multi-step.md): the analytic
//! cases in the simulator, random deployments under the scheduler's invariants, the engine's
//! greedy tokens and chunked streaming, and the scenario's checks.

mod common;
mod server_support;

use std::time::Duration;

use proptest::prelude::*;
use servesim::cost::{CostModel, StepCost};
use servesim::engine::server::{EngineHandle, Event, FinishReason, GenerateParams};
use servesim::engine::model::SamplingParams;
use servesim::scenario::Policy;
use servesim::sched::{Batch, SchedulerConfig};
use servesim::sim::{SimConfig, simulate};
use servesim::workload::RequestSpec;

use common::sim::{one_replica, request, scheduler};
use server_support::Echo;

/// CPU time on a window's first step only, plus GPU time per token: what the roofline charges.
const OVERHEAD_NS: u64 = 100_000;
const PER_TOKEN_NS: u64 = 10_000;

struct WindowCost;

impl CostModel for WindowCost {
    fn predict(&self, batch: &Batch) -> StepCost {
        let overhead_ns = if batch.window_step == 0 { OVERHEAD_NS } else { 0 };
        let gemm_ns = PER_TOKEN_NS * batch.tokens() as u64;
        StepCost { total_ns: overhead_ns + gemm_ns, gemm_ns, overhead_ns, ..StepCost::default() }
    }
    fn source(&self) -> &'static str {
        "window test model"
    }
}

/// vLLM 0.6.3 without chunked prefill, `num_scheduler_steps` as given.
fn v0(num_scheduler_steps: u32, enable_chunked_prefill: bool) -> SimConfig {
    one_replica(SchedulerConfig { enable_chunked_prefill, num_scheduler_steps, ..scheduler(2048, 16, 1000) }, Policy::VllmV0)
}

/// The inter-token gaps the client saw, sorted.
fn gaps(out: &servesim::sim::SimOutput) -> Vec<u64> {
    let mut gaps: Vec<u64> = out.records.itl_ns.runs.iter().flat_map(|&(gap, n)| std::iter::repeat_n(gap, n as usize)).collect();
    gaps.sort_unstable();
    gaps
}

#[test]
fn a_window_pays_the_cpu_time_once_and_delivers_its_tokens_as_one_chunk() {
    // One request: a 10-token prompt and 9 output tokens. The prompt step runs alone (no
    // lookahead for prompts without chunked prefill) and samples the first token at
    // 100 µs + 10 × 10 µs = 200 µs. The other 8 come in two windows of 4 steps, each
    // 100 µs + 4 × 10 µs = 140 µs long, delivered at their ends: 340 µs and 480 µs.
    let out = simulate(&[request(0, 10, 9)], &v0(4, false), &WindowCost);
    let r = &out.records.requests[0];
    assert!(r.success);
    assert_eq!(r.output_tokens, 9);
    assert_eq!(r.first_token_ns, Some(200_000));
    assert_eq!(r.end_ns, 480_000);
    assert_eq!(out.steps, 9, "one prompt step and 8 decode steps");
    // One gap per chunk, a window long; TPOT stays per token: (480 − 200) / 8 = 35 µs.
    assert_eq!(gaps(&out), vec![140_000, 140_000]);
    // Per step, the same request pays the CPU time 8 times: 200 + 8 × 110 = 1,080 µs.
    let single = simulate(&[request(0, 10, 9)], &v0(1, false), &WindowCost);
    assert_eq!(single.records.requests[0].end_ns, 1_080_000);
    assert_eq!(gaps(&single), vec![110_000; 8]);
}

#[test]
fn from_vllm_0_6_3_each_step_of_a_window_streams_its_token() {
    // The same request and windows as above, with vLLM 0.6.3's output processor after every
    // step: each token reaches the client as it is sampled. A window's first step pays the CPU
    // time (110 µs), its other three the GPU's 10 µs each, so the gaps are 110, 10, 10, 10 per
    // window; the request still ends with its last window, at 480 µs.
    let mut config = v0(4, false);
    config.scheduler.stream_window_steps = true;
    let out = simulate(&[request(0, 10, 9)], &config, &WindowCost);
    let r = &out.records.requests[0];
    assert_eq!((r.first_token_ns, r.end_ns, r.output_tokens), (Some(200_000), 480_000, 9));
    assert_eq!(gaps(&out), vec![10_000, 10_000, 10_000, 10_000, 10_000, 10_000, 110_000, 110_000]);
}

#[test]
fn the_release_decides_how_a_window_streams() {
    // scenarios/multi-step.toml (vLLM 0.6.3, 8 steps a window): the median inter-token gap is a
    // step; as vLLM 0.6.2, which streamed a window at its end, it is a window.
    let itl_median_ms = |version: &str| {
        let overrides = vec![format!("engine.version=\"{version}\""), "workload.num_prompts=64".to_string()];
        let scenario = servesim::scenario::Scenario::load(std::path::Path::new("scenarios/multi-step.toml"), &overrides).unwrap();
        let cost = servesim::run::cost_model(&scenario);
        let result = servesim::run::run_scenario_with_progress(&scenario, &*cost, &[50.0], true, &mut |_| {}).remove(0);
        result.summary.itl.median_ms
    };
    let (every_step, window) = (itl_median_ms("0.6.3"), itl_median_ms("0.6.2"));
    assert!(every_step * 4.0 < window, "median ITL {every_step} ms (0.6.3) against {window} ms (0.6.2)");
}

#[test]
fn a_prompt_waits_for_the_window_to_end() {
    // The second request arrives at 250 µs, inside the first's window (200–340 µs). It is
    // admitted when the window ends, and its prompt step takes 100 + 10 × 10 = 200 µs: its
    // first token comes at 540 µs, 290 µs after it arrived. Per step, it would be admitted at
    // the first decode step's end (310 µs) and have its first token at 510 µs.
    let requests = [request(0, 10, 9), request(250_000, 10, 2)];
    let out = simulate(&requests, &v0(4, false), &WindowCost);
    assert_eq!(out.records.requests[1].first_token_ns, Some(540_000));
    let single = simulate(&requests, &v0(1, false), &WindowCost);
    assert_eq!(single.records.requests[1].first_token_ns, Some(510_000));
}

#[test]
fn with_chunked_prefill_a_prompt_decodes_in_its_window() {
    // vLLM 0.6.3's multi-step with chunked prefill: the window's first step computes the whole
    // prompt and samples, the other 3 decode. The first chunk holds 4 tokens, at
    // (100 + 100) + 3 × 10 = 230 µs, and the last 5 come as 4 + 1.
    let out = simulate(&[request(0, 10, 9)], &v0(4, true), &WindowCost);
    let r = &out.records.requests[0];
    assert_eq!(r.first_token_ns, Some(230_000));
    assert_eq!(r.output_tokens, 9);
    // Second window 230 → 370 µs; the third has one decode to do (100 + 10 µs) and ends when
    // its only member finishes, at 480 µs.
    assert_eq!(r.end_ns, 480_000);
    assert_eq!(gaps(&out), vec![110_000, 140_000]);
}

#[test]
fn servesims_engine_pays_the_cpu_time_of_every_step_of_a_window() {
    // servesim's engine builds each step's inputs anew: the same window as vLLM 0.6.3's with
    // chunked prefill (prompt + 3 decodes), but each decode costs 100 + 10 µs, not 10 µs: the
    // first chunk comes at 200 + 3 × 110 = 530 µs, where vLLM's comes at 230 µs.
    let mut config = v0(4, true);
    config.policy = Policy::Servesim;
    let out = simulate(&[request(0, 10, 4)], &config, &WindowCost);
    assert_eq!(out.records.requests[0].first_token_ns, Some(530_000));
    assert!(out.timeline.iter().all(|s| s.cost.overhead_ns == OVERHEAD_NS));
}

#[test]
fn a_window_reserves_its_lookahead_or_preempts() {
    // Two sequences, a cache of 3 blocks of 4 tokens: each prompt takes one block; a window of
    // 4 decodes needs a second for each, and one of them must be preempted (recompute), as
    // vLLM's `can_append_slots` with lookahead slots does.
    let mut config = v0(4, false);
    config.scheduler.block_size = 4;
    config.scheduler.num_gpu_blocks = 3;
    let out = simulate(&[request(0, 3, 6), request(0, 3, 6)], &config, &WindowCost);
    assert!(out.records.requests.iter().all(|r| r.success && r.output_tokens == 6));
    assert!(out.extras.iter().map(|e| e.preemptions).sum::<u32>() >= 1, "{:?}", out.extras);
    assert!(out.timeline.iter().all(|s| s.kv_blocks_used <= 3));
}

fn random_requests() -> impl Strategy<Value = Vec<RequestSpec>> {
    prop::collection::vec((0u64..30_000_000, 1u32..200, 1u32..80), 1..60).prop_map(|mut v| {
        v.sort_by_key(|r| r.0);
        v.into_iter().map(|(arrival_ns, input, output)| request(arrival_ns, input, output)).collect()
    })
}

fn random_config() -> impl Strategy<Value = SimConfig> {
    (
        prop_oneof![Just(Policy::VllmV0), Just(Policy::Servesim)],
        any::<bool>(),
        2u32..9,    // num_scheduler_steps
        1u32..24,   // max_num_seqs
        8u32..120,  // num_gpu_blocks: small, to force preemption
        prop_oneof![Just(1u32), Just(16u32)],
        1u32..3,    // replicas
        prop::option::of(1u32..8),
    )
        .prop_map(|(policy, chunked, steps, max_num_seqs, blocks, block_size, replicas, max_concurrency)| {
            let mut config = v0(steps, chunked || policy == Policy::Servesim);
            config.policy = policy;
            // Whole prompts (plus a preempted request's output) must fit one step.
            config.scheduler.max_num_batched_tokens = 400;
            config.scheduler.max_num_seqs = max_num_seqs;
            config.scheduler.num_gpu_blocks = blocks;
            config.scheduler.block_size = block_size;
            config.replicas = replicas;
            config.max_concurrency = max_concurrency;
            config
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// Every request completes once with all its tokens, in chunks of at most a window, and
    /// (debug builds) the scheduler's invariants hold after every step.
    #[test]
    fn windows_lose_no_token_and_deliver_in_chunks(requests in random_requests(), config in random_config()) {
        let out = simulate(&requests, &config, &WindowCost);
        let steps = u64::from(config.scheduler.num_scheduler_steps);
        let (mut gaps_min, mut gaps_max) = (0, 0);
        for (spec, r) in requests.iter().zip(&out.records.requests) {
            if !r.success {
                continue;
            }
            prop_assert_eq!(r.output_tokens, spec.output_tokens);
            let output = u64::from(r.output_tokens);
            // A chunk holds at most a window's tokens; the first may hold several (chunked).
            gaps_min += output.div_ceil(steps) - 1;
            gaps_max += output - 1;
        }
        let gaps: u64 = out.records.itl_ns.runs.iter().map(|&(_, c)| c).sum();
        prop_assert!(gaps >= gaps_min && gaps <= gaps_max, "{gaps} gaps, expected {gaps_min}..={gaps_max}");
        prop_assert_eq!(out.records.tokens_per_second.total(), out.records.requests.iter().map(|r| u64::from(r.output_tokens)).sum::<u64>());
        let again = simulate(&requests, &config, &WindowCost);
        prop_assert_eq!(&out.records.requests, &again.records.requests);
        prop_assert_eq!(&out.timeline, &again.timeline);
    }
}

// ------------------------------------------------------------------ the engine

fn engine(num_scheduler_steps: u32, eos: Option<u32>) -> EngineHandle {
    let config = SchedulerConfig { num_scheduler_steps, ..scheduler(256, 8, 256) };
    EngineHandle::start(Echo { eos, step: Duration::from_millis(10) }, config, Policy::Servesim, 64, 200)
}

/// Each request's tokens, its finish reason, and the size of each delivery.
async fn generate(engine: &EngineHandle, prompts: &[Vec<u32>], max_tokens: u32, ignore_eos: bool) -> Vec<(Vec<u32>, FinishReason, Vec<usize>)> {
    let mut streams = Vec::new();
    for prompt in prompts {
        let params = GenerateParams { prompt: prompt.clone(), max_tokens, ignore_eos, sampling: SamplingParams::default() };
        streams.push(engine.submit(params).await.expect("submitted"));
    }
    let mut results = Vec::new();
    for mut stream in streams {
        let (mut tokens, mut deliveries) = (Vec::new(), Vec::new());
        loop {
            let event = tokio::time::timeout(Duration::from_secs(30), stream.events.recv()).await.expect("a token in 30 s");
            match event.expect("the stream ends with a finish reason") {
                Event::Tokens { ids, finish } => {
                    deliveries.push(ids.len());
                    tokens.extend(ids);
                    if let Some(f) = finish {
                        results.push((tokens, f, deliveries));
                        break;
                    }
                }
                Event::Error(m) => panic!("engine error: {m}"),
            }
        }
    }
    results
}

fn prompts() -> Vec<Vec<u32>> {
    (0..5u32).map(|i| (0..(5 + 7 * i)).map(|t| 40 + (t * 13 + i) % 80).collect()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_engine_streams_windows_and_keeps_greedy_tokens() {
    let per_step = generate(&engine(1, None), &prompts(), 13, true).await;
    let windowed = generate(&engine(4, None), &prompts(), 13, true).await;
    for ((tokens_1, finish_1, one_by_one), (tokens_4, finish_4, bursts)) in per_step.iter().zip(&windowed) {
        assert_eq!(one_by_one, &vec![1; 13]);
        assert_eq!(tokens_1, tokens_4, "greedy tokens differ with a window");
        assert_eq!((*finish_1, *finish_4), (FinishReason::Length, FinishReason::Length));
        // 13 tokens in windows of 4 (the first holds the prompt's token and 3 decodes).
        assert_eq!(bursts, &vec![4, 4, 4, 1]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_end_of_sequence_inside_a_window_stops_the_request_there() {
    // Pick as EOS the token that the first prompt samples 6th: it stops mid-window.
    let plain = generate(&engine(1, None), &prompts()[..1], 13, true).await;
    let eos = plain[0].0[5];
    let per_step = generate(&engine(1, Some(eos)), &prompts(), 13, false).await;
    let windowed = generate(&engine(4, Some(eos)), &prompts(), 13, false).await;
    assert_eq!(per_step[0].0.len(), plain[0].0.iter().position(|&t| t == eos).unwrap() + 1);
    for ((tokens_1, finish_1, _), (tokens_4, finish_4, _)) in per_step.iter().zip(&windowed) {
        assert_eq!(tokens_1, tokens_4);
        assert_eq!(finish_1, finish_4);
    }
    assert_eq!(windowed[0].1, FinishReason::Stop);
}

// ------------------------------------------------------------------ the scenario

#[test]
fn bad_num_scheduler_steps_are_named() {
    common::assert_scenario_errors(&[
        ("scenarios/multi-step.toml", &["engine.num_scheduler_steps=0"], &["engine.num_scheduler_steps", "0"]),
        ("scenarios/multi-step.toml", &["engine.num_scheduler_steps=1000"], &["engine.num_scheduler_steps", "1000", "at most 256"]),
        ("scenarios/multi-step.toml", &["engine.policy=\"vllm-v1\""], &["engine.num_scheduler_steps", "vLLM V1"]),
        ("scenarios/multi-step.toml", &["engine.policy=\"tgi\""], &["num_scheduler_steps", "tgi"]),
        (
            "scenarios/multi-step.toml",
            &["engine.enable_chunked_prefill=true", "engine.max_num_batched_tokens=512"],
            &["engine.max_num_batched_tokens", "512", "never splits a prompt"],
        ),
    ]);
}
