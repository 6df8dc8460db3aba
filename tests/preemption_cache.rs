//! Preemption with prefix caching (issue 31, point 4; docs/prefix-caching.md): under vLLM V1 a
//! preempted request's computed blocks stay in the cache, evictable, and when it is admitted
//! again it reuses those not evicted meanwhile, recomputing only the rest. A KV-starved run of
//! long prompts then computes about its input once, where it used to recompute it several times.

use std::path::Path;

use servesim::run::{PointResult, cost_model, run_scenario_with_progress};
use servesim::scenario::Scenario;

/// 24 prompts of 6,016 tokens (the first 16 a system prompt all share, so that the simulator
/// keeps the cache on) and 400 tokens of output, sent at once to a cache of 1,024 blocks of 16
/// tokens: room for about 2.5 of them, so requests are preempted over and over.
const STARVED: &str = r#"
name = "kv-starved"

[model]
preset = "Llama-3.1-8B"

[hardware]
gpu = "H100-SXM"

[engine]
policy = "vllm-v1"
max_num_batched_tokens = 2048
max_num_seqs = 64
block_size = 16
num_gpu_blocks = 1024
max_model_len = 8192

[workload]
num_prompts = 24
request_rate = inf
seed = 3

[workload.dataset]
kind = "random"
input_len = 6000
output_len = 400
range_ratio = 0.0
prefix_len = 16
"#;

fn run(overrides: &[&str]) -> PointResult {
    let overrides: Vec<String> = overrides.iter().map(|s| s.to_string()).collect();
    let scenario = Scenario::from_toml_str(STARVED, Path::new("kv-starved.toml"), &overrides).unwrap();
    let cost = cost_model(&scenario);
    run_scenario_with_progress(&scenario, &*cost, &[99.0], true, &mut |_| {}).remove(0)
}

/// Prefill tokens computed over the run (recomputation included), per input token.
fn prefill_per_input_token(result: &PointResult) -> f64 {
    let prefill: u64 = result.output.timeline.iter().map(|row| u64::from(row.prefill_tokens)).sum();
    let input: u64 = result.output.records.requests.iter().map(|r| u64::from(r.input_tokens)).sum();
    prefill as f64 / input as f64
}

fn preemptions(result: &PointResult) -> u32 {
    result.output.extras.iter().map(|e| e.preemptions).sum()
}

#[test]
fn a_preempted_request_recomputes_only_what_eviction_took() {
    let on = run(&[]);
    let off = run(&["engine.enable_prefix_caching=false"]);
    let (ratio_on, ratio_off) = (prefill_per_input_token(&on), prefill_per_input_token(&off));
    eprintln!(
        "KV-starved: prefill tokens per input token {ratio_on:.3} with caching ({} preemptions, mean TPOT {:.2} ms), \
         {ratio_off:.3} without ({} preemptions, mean TPOT {:.2} ms)",
        preemptions(&on),
        on.summary.tpot.mean_ms,
        preemptions(&off),
        off.summary.tpot.mean_ms
    );
    // Measured: 11 preemptions with caching, 1,947 without (and 1,947 with it, before the fix,
    // which recomputed 35.16 prefill tokens per input token).
    assert!(preemptions(&on) > 0, "the run must preempt to test anything");
    assert!(preemptions(&off) > 24 * 10, "{}", preemptions(&off));
    assert_eq!(on.summary.completed, 24);
    assert_eq!(off.summary.completed, 24);
    // Without caching every preemption recomputes the prompt and the output so far.
    assert!(ratio_off > 2.0, "{ratio_off}");
    // With it, only what eviction took and the last partial block of each preemption.
    assert!(ratio_on < 1.25, "{ratio_on}");
    assert!(on.summary.tpot.mean_ms < off.summary.tpot.mean_ms, "{} vs {}", on.summary.tpot.mean_ms, off.summary.tpot.mean_ms);
    // The hit rate counts first admissions only: the shared 16 tokens, after the first.
    let prefix = on.output.prefix;
    assert_eq!(prefix.prompt_tokens, 24 * 6016);
    assert!(prefix.hit_tokens <= 23 * 16, "{prefix:?}");
}

/// vLLM V0's recompute preemption frees its blocks: caching on or off, it recomputes the same.
#[test]
fn vllm_v0_recomputes_as_before() {
    let v0 = |caching: bool| {
        let caching = format!("engine.enable_prefix_caching={caching}");
        let shorter = ["workload.dataset.input_len=2000", "workload.dataset.output_len=2000"];
        let result = run(&[&["engine.policy=vllm-v0", "engine.enable_chunked_prefill=true", &caching][..], &shorter[..]].concat());
        eprintln!("vllm-v0 (caching {caching}): {} preemptions, {:.4} prefill tokens per input token", preemptions(&result), prefill_per_input_token(&result));
        prefill_per_input_token(&result)
    };
    let (on, off) = (v0(true), v0(false));
    eprintln!("vllm-v0, KV-starved: prefill tokens per input token {on:.3} with caching, {off:.3} without");
    assert!(on > 1.5 && off > 1.5, "{on} {off}");
}

