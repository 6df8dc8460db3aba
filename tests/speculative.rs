//! Speculative decoding (`[engine.speculative]`, docs/speculative-decoding.md): the mean tokens
//! per step against the geometric formula, the analytic cases, random deployments under the
//! scheduler's invariants, the engine's n-gram speculation against plain decoding, and the
//! scenario's checks.

mod common;

use std::time::Duration;

use proptest::prelude::*;
use servesim::engine::model::{LlamaConfig, LlamaWeights, ModelExecutor, SamplingParams};
use servesim::engine::server::{EngineHandle, Event, Executor, FinishReason, GenerateParams, ModelEngine, NgramLookup, StepInputs};
use servesim::scenario::{Policy, Scenario};
use servesim::sched::{Acceptance, Batch, SchedulerConfig, SpeculativeConfig};
use servesim::sim::{SimConfig, SimOutput, simulate};
use servesim::workload::RequestSpec;

use common::sim::{PerToken, one_replica, request, scheduler};

fn v1(k: u32, rates: Vec<f64>) -> SimConfig {
    let speculative = Some(SpeculativeConfig { num_speculative_tokens: k, acceptance: Acceptance::Drawn { rates, seed: 1 } });
    one_replica(SchedulerConfig { speculative, ..scheduler(2048, 64, 20_000) }, Policy::VllmV1)
}

/// The gaps the client saw, sorted.
fn gaps(out: &SimOutput) -> Vec<u64> {
    let mut gaps: Vec<u64> = out.records.itl_ns.runs.iter().flat_map(|&(gap, n)| std::iter::repeat_n(gap, n as usize)).collect();
    gaps.sort_unstable();
    gaps
}

#[test]
fn mean_tokens_per_step_follow_the_geometric_formula() {
    // 40 requests of 3,000 tokens: about 45,000 verifying steps, each with all k drafts but the
    // last few of each request.
    let requests: Vec<RequestSpec> = (0..40).map(|i| request(i * 1_000, 64, 3_000)).collect();
    for (alpha, k) in [(0.7f64, 4u32), (0.5, 2), (0.9, 6)] {
        let out = simulate(&requests, &v1(k, vec![alpha; k as usize]), &PerToken);
        let formula = (1.0 - alpha.powi(k as i32 + 1)) / (1.0 - alpha);
        let measured = out.spec.mean_tokens_per_step();
        println!("alpha {alpha}, k {k}: {measured:.4} tokens per step, formula {formula:.4} ({} steps)", out.spec.drafts);
        assert!((measured - formula).abs() < 0.02 * formula, "alpha {alpha}, k {k}: {measured} vs {formula}");
        // Position i is accepted in a share α^(i+1) of the steps.
        for (i, &count) in out.spec.accepted_by_position.iter().enumerate() {
            let share = count as f64 / out.spec.drafts as f64;
            assert!((share - alpha.powi(i as i32 + 1)).abs() < 0.02, "position {i}: {share}");
        }
        assert!(out.records.requests.iter().all(|r| r.success && r.output_tokens == 3_000), "every token, no more");
    }
}

#[test]
fn per_position_rates_set_each_positions_share() {
    let rates = vec![0.9, 0.6, 0.3];
    let requests: Vec<RequestSpec> = (0..20).map(|i| request(i * 1_000, 64, 2_000)).collect();
    let out = simulate(&requests, &v1(3, rates.clone()), &PerToken);
    let mut all_before = 1.0;
    for (i, rate) in rates.iter().enumerate() {
        all_before *= rate;
        let share = out.spec.accepted_by_position[i] as f64 / out.spec.drafts as f64;
        assert!((share - all_before).abs() < 0.02, "position {i}: {share} vs {all_before}");
    }
}

#[test]
fn a_step_verifies_k_plus_1_tokens_and_delivers_what_it_accepts() {
    // Every draft accepted (α = 1), k = 3: after the prompt step's token, each step computes the
    // last token and 3 drafts (4 rows: 100 + 40 µs) and delivers 4 tokens as one chunk. 13
    // tokens: 1 + 4 + 4 + 4, at 100 + 10 × 10 = 200 µs, then every 140 µs.
    let out = simulate(&[request(0, 10, 13)], &v1(3, vec![1.0; 3]), &PerToken);
    let r = &out.records.requests[0];
    assert_eq!((r.first_token_ns, r.end_ns, r.output_tokens), (Some(200_000), 620_000, 13));
    assert_eq!(out.steps, 4);
    assert_eq!(gaps(&out), vec![140_000; 3]);
    // Drafts stop short of the last token: 12 tokens after the first = 3 steps of 3 drafts.
    assert_eq!((out.spec.drafts, out.spec.draft_tokens, out.spec.accepted_tokens), (3, 9, 9));
    // Nothing accepted (α = 0): one token a step, for the price of verifying the drafts, which
    // shrink as the end nears: 3 tokens to go after the first, so 2 drafts, then 1, then none.
    let out = simulate(&[request(0, 10, 4)], &v1(3, vec![0.0; 3]), &PerToken);
    assert_eq!(gaps(&out), vec![110_000, 120_000, 130_000]);
}

#[test]
fn drafts_are_cut_first_when_the_budget_runs_short() {
    // Budget 6: two decodes of 1 + 3 drafts want 8; the first gets 4, the second 2 (1 draft).
    let mut config = v1(3, vec![1.0; 3]);
    config.scheduler.max_num_batched_tokens = 6;
    config.scheduler.max_num_seqs = 2;
    let out = simulate(&[request(0, 3, 20), request(0, 3, 20)], &config, &PerToken);
    let decode_rows: Vec<u32> = out.timeline.iter().map(|s| s.decode_tokens).collect();
    assert!(decode_rows.iter().all(|&t| t <= 6), "{decode_rows:?}");
    assert!(decode_rows.contains(&6), "{decode_rows:?}");
    assert!(out.records.requests.iter().all(|r| r.success && r.output_tokens == 20));
}

fn random_requests() -> impl Strategy<Value = Vec<RequestSpec>> {
    prop::collection::vec((0u64..20_000_000, 1u32..150, 1u32..120), 1..50).prop_map(|mut v| {
        v.sort_by_key(|r| r.0);
        v.into_iter().map(|(arrival_ns, input, output)| request(arrival_ns, input, output)).collect()
    })
}

fn random_config() -> impl Strategy<Value = SimConfig> {
    (
        1u32..7,                                  // k
        prop::collection::vec(0.0f64..=1.0, 6),   // rates
        16u32..300,                               // budget
        1u32..20,                                 // max_num_seqs
        8u32..150,                                // num_gpu_blocks: small, to force preemption
        prop_oneof![Just(1u32), Just(16u32)],
        1u32..3,                                  // replicas
        prop_oneof![Just(Policy::VllmV1), Just(Policy::Servesim)],
        any::<u64>(),
    )
        .prop_map(|(k, rates, budget, max_num_seqs, blocks, block_size, replicas, policy, seed)| {
            let mut config = v1(k, rates[..k as usize].to_vec());
            if let Some(spec) = &mut config.scheduler.speculative {
                spec.acceptance = Acceptance::Drawn { rates: rates[..k as usize].to_vec(), seed };
            }
            config.scheduler.max_num_batched_tokens = budget.max(max_num_seqs);
            config.scheduler.max_num_seqs = max_num_seqs;
            config.scheduler.num_gpu_blocks = blocks;
            config.scheduler.block_size = block_size;
            config.replicas = replicas;
            config.policy = policy;
            config
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// Every request completes once with exactly its tokens, the step budget holds with the
    /// drafts counted, the same input gives the same output, and (debug builds) the scheduler's
    /// invariants hold after every step.
    #[test]
    fn speculation_loses_no_token(requests in random_requests(), config in random_config()) {
        let out = simulate(&requests, &config, &PerToken);
        for (spec, r) in requests.iter().zip(&out.records.requests) {
            if r.success {
                prop_assert_eq!(r.output_tokens, spec.output_tokens);
            }
        }
        prop_assert_eq!(out.records.tokens_per_second.total(), out.records.requests.iter().map(|r| u64::from(r.output_tokens)).sum::<u64>());
        prop_assert!(out.spec.accepted_tokens <= out.spec.draft_tokens);
        for step in &out.timeline {
            prop_assert!(step.prefill_tokens + step.decode_tokens <= config.scheduler.max_num_batched_tokens);
            prop_assert!(step.kv_blocks_used <= config.scheduler.num_gpu_blocks);
        }
        let again = simulate(&requests, &config, &PerToken);
        prop_assert_eq!(&out.records.requests, &again.records.requests);
        prop_assert_eq!(&out.spec, &again.spec);
    }
}

// ------------------------------------------------------------------ the engine

/// A deterministic executor whose next token depends on the last token only, so outputs cycle
/// and prompt lookup finds them: it samples every row it is asked for.
struct Cycle;

fn cycle_next(last: u32) -> u32 {
    40 + (last * 7 + 3) % 11
}

impl Executor for Cycle {
    fn forward(&mut self, batch: &Batch, inputs: &StepInputs) -> Result<Vec<u32>, String> {
        let mut out = Vec::new();
        for (work, input) in batch.seqs.iter().zip(&inputs.seqs) {
            let rows = work.sampled_rows() as usize;
            out.extend(input.token_ids[input.token_ids.len() - rows..].iter().map(|&t| cycle_next(t)));
        }
        Ok(out)
    }
    fn vocab_size(&self) -> u32 {
        256
    }
    fn eos_token(&self) -> Option<u32> {
        None
    }
}

fn engine_config() -> SchedulerConfig {
    scheduler(256, 8, 512)
}

const LOOKUP: NgramLookup = NgramLookup { num_speculative_tokens: 4, min_n: 1, max_n: 3 };

async fn generate(engine: &EngineHandle, prompts: &[Vec<u32>], max_tokens: u32) -> Vec<(Vec<u32>, Vec<usize>)> {
    let mut streams = Vec::new();
    for prompt in prompts {
        let params = GenerateParams { prompt: prompt.clone(), max_tokens, ignore_eos: true, sampling: SamplingParams::default() };
        streams.push(engine.submit(params).await.expect("submitted"));
    }
    let mut results = Vec::new();
    for mut stream in streams {
        let (mut tokens, mut deliveries) = (Vec::new(), Vec::new());
        loop {
            let event = tokio::time::timeout(Duration::from_secs(60), stream.events.recv()).await.expect("a token in 60 s");
            match event.expect("the stream ends with a finish reason") {
                Event::Tokens { ids, finish } => {
                    deliveries.push(ids.len());
                    tokens.extend(ids);
                    if let Some(f) = finish {
                        assert_eq!(f, FinishReason::Length);
                        break;
                    }
                }
                Event::Error(m) => panic!("engine error: {m}"),
            }
        }
        results.push((tokens, deliveries));
    }
    results
}

fn prompts() -> Vec<Vec<u32>> {
    (0..4u32).map(|i| (0..(6 + 5 * i)).map(|t| 40 + (t * 5 + i) % 11).collect()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ngram_speculation_keeps_the_tokens_and_delivers_several_a_step() {
    let plain = generate(&EngineHandle::start(Cycle, engine_config(), Policy::Servesim, 64, 400), &prompts(), 40).await;
    let engine = EngineHandle::start_speculative(Cycle, engine_config(), Policy::Servesim, 64, 400, LOOKUP);
    let speculative = generate(&engine, &prompts(), 40).await;
    for ((plain, _), (spec, deliveries)) in plain.iter().zip(&speculative) {
        assert_eq!(plain, spec, "speculation changed the tokens");
        assert!(deliveries.len() < 20, "a cycle of at most 11 tokens is found and accepted: {deliveries:?}");
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
    let stats = engine.stats().spec_decode.expect("speculation counts");
    println!("cycle executor: {} of {} drafts accepted over {} steps", stats.accepted_tokens, stats.draft_tokens, stats.drafts);
    assert!(stats.accepted_tokens > 0 && stats.accepted_tokens <= stats.draft_tokens);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_model_gives_the_same_greedy_tokens_with_speculation() {
    let model = || {
        let weights = LlamaWeights::random(&LlamaConfig::tiny(), 7);
        ModelEngine::new(ModelExecutor::new(weights, 512, 16).expect("executor"))
    };
    let prompts: Vec<Vec<u32>> = (0..3u32).map(|i| (0..(12 + 9 * i)).map(|t| (t * 3 + i) % 50 + 1).collect()).collect();
    let plain = generate(&EngineHandle::start(model(), engine_config(), Policy::Servesim, 64, 400), &prompts, 48).await;
    let engine = EngineHandle::start_speculative(model(), engine_config(), Policy::Servesim, 64, 400, LOOKUP);
    let speculative = generate(&engine, &prompts, 48).await;
    for ((plain, _), (spec, _)) in plain.iter().zip(&speculative) {
        assert_eq!(plain, spec, "speculation changed the greedy tokens");
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
    let stats = engine.stats().spec_decode.expect("speculation counts");
    println!(
        "tiny random model: {} of {} drafts accepted ({:.1}%), {:.2} tokens per verifying step",
        stats.accepted_tokens,
        stats.draft_tokens,
        100.0 * stats.acceptance_rate(),
        stats.mean_tokens_per_step()
    );
}

// ------------------------------------------------------------------ the scenario

#[test]
fn the_example_runs_and_a_draft_costs_memory() {
    let spec = Scenario::load(std::path::Path::new("scenarios/speculative.toml"), &[]).expect("the example loads");
    let none = Scenario::load(std::path::Path::new("scenarios/quickstart.toml"), &[]).expect("loads");
    assert!(spec.engine.speculative.is_some() && none.engine.speculative.is_none());
    // The draft's weights and KV sit beside the target's: fewer KV blocks than without it.
    let text = std::fs::read_to_string("scenarios/speculative.toml").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let without = common::write_file(dir.path(), "no-draft.toml", &text.replace("method = \"draft\"", "method = \"ngram\"").replace("draft_model = \"Llama-3.2-1B\"", ""));
    let ngram = Scenario::load(&without, &[]).expect("loads");
    assert!(spec.engine.num_gpu_blocks < ngram.engine.num_gpu_blocks, "{} vs {}", spec.engine.num_gpu_blocks, ngram.engine.num_gpu_blocks);
    let rates = common::write_file(dir.path(), "rates.toml", &text.replace("acceptance_rate = 0.7", "acceptance_rates = [0.5]"));
    let err = Scenario::load(&rates, &[]).unwrap_err().to_string();
    assert!(err.contains("engine.speculative.acceptance_rates") && err.contains("one rate per draft position"), "{err}");
    let out = common::servesim(&["simulate", "scenarios/speculative.toml", "--set", "workload.num_prompts=50"]);
    assert!(out.status.success(), "{}", common::stderr(&out));
    assert!(common::stderr(&out).contains("draft tokens accepted"), "{}", common::stderr(&out));
}

#[test]
fn bad_speculative_settings_are_named() {
    let f = "scenarios/speculative.toml";
    common::assert_scenario_errors(&[
        (f, &["engine.speculative.num_speculative_tokens=0"], &["engine.speculative.num_speculative_tokens", "0"]),
        (f, &["engine.speculative.num_speculative_tokens=99"], &["engine.speculative.num_speculative_tokens", "99"]),
        (f, &["engine.speculative.acceptance_rate=1.5"], &["engine.speculative.acceptance_rate", "1.5", "probability"]),
        (f, &["engine.speculative.acceptance_rates=[0.5]"], &["engine.speculative.acceptance_rates", "not both"]),
        (f, &["engine.speculative.method=\"medusa2\""], &["engine.speculative.method", "medusa2"]),
        (f, &["engine.speculative.draft_model=\"Qwen3-30B-A3B\""], &["engine.speculative.draft_model", "vocabulary"]),
        (f, &["engine.speculative.draft_model=\"nope\""], &["engine.speculative.draft_model", "unknown preset"]),
        (f, &["engine.policy=\"vllm-v0\"", "engine.max_model_len=8192"], &["engine.speculative", "vllm-v1"]),
        (f, &["engine.speculative.method=\"ngram\""], &["engine.speculative.draft_model", "only method \"draft\""]),
        (f, &["engine.speculative.bogus=1"], &["bogus"]),
    ]);
}
