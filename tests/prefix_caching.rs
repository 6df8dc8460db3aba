//! Prefix caching in the simulator (docs/prefix-caching.md): the example scenario's hit rate and
//! its effect on TTFT, the prefix-aware router, byte-identical reruns, and field-named errors.

mod common;
use common::assert_scenario_errors;
use std::path::Path;

use servesim::run::{PointResult, run_scenario};
use servesim::scenario::Scenario;

const EXAMPLE: &str = "scenarios/prefix-caching.toml";

/// The example, smaller: one rate, 600 requests.
fn example(overrides: &[&str]) -> Scenario {
    let mut all = vec!["workload.num_prompts=600".to_string(), "workload.request_rate=20".to_string()];
    all.extend(overrides.iter().map(|s| s.to_string()));
    Scenario::load(Path::new(EXAMPLE), &all).unwrap()
}

fn run(scenario: &Scenario) -> PointResult {
    run_scenario(scenario, &[99.0]).remove(0)
}

#[test]
fn shared_system_prompts_hit_the_cache_and_cut_ttft() {
    let on = run(&example(&[]));
    let off = run(&example(&["engine.enable_prefix_caching=false", "engine.router=least-outstanding"]));
    let hit = on.output.prefix;
    // 8 system prompts of 1024 tokens, ~1250 tokens per prompt: after each replica's first
    // request of a prompt, its 64 blocks hit, so most prompt tokens are hits.
    assert!(hit.hit_rate() > 0.6 && hit.hit_rate() < 0.85, "hit rate {}", hit.hit_rate());
    assert_eq!(off.output.prefix.prompt_tokens, 0);
    assert!(on.summary.ttft.mean_ms < 0.8 * off.summary.ttft.mean_ms, "{} vs {}", on.summary.ttft.mean_ms, off.summary.ttft.mean_ms);
    assert_eq!(on.summary.completed, off.summary.completed);
}

#[test]
fn the_prefix_aware_router_beats_round_robin_on_hits() {
    let aware = run(&example(&[])).output.prefix.hit_rate();
    let round_robin = run(&example(&["engine.router=round-robin", "engine.replicas=4", "hardware.count=4"])).output.prefix.hit_rate();
    let aware4 = run(&example(&["engine.replicas=4", "hardware.count=4"])).output.prefix.hit_rate();
    assert!(aware4 > round_robin, "prefix-aware {aware4} vs round-robin {round_robin}");
    assert!(aware > 0.0);
}

#[test]
fn reruns_are_byte_identical() {
    let a = run(&example(&[]));
    let b = run(&example(&[]));
    assert_eq!(format!("{:?}", a.output.records.requests), format!("{:?}", b.output.records.requests));
    assert_eq!(a.output.prefix, b.output.prefix);
}

#[test]
fn bad_values_name_the_field_and_value() {
    const TGI: &str = "scenarios/recorded/run-003-tgi-80.toml";
    let cases: [(&str, &[&str], &[&str]); 5] = [
        (TGI, &["engine.enable_prefix_caching=true"], &["engine.enable_prefix_caching", "true", "TGI"]),
        (EXAMPLE, &["workload.dataset.prefix.law=pareto"], &["workload.dataset.prefix.law", "pareto"]),
        (EXAMPLE, &["workload.dataset.prefix.count=0"], &["workload.dataset.prefix.count", "0"]),
        (EXAMPLE, &["workload.dataset.prefix.zipf_exponent=-1"], &["workload.dataset.prefix.zipf_exponent", "-1"]),
        (EXAMPLE, &["engine.enable_prefix_caching=false"], &["engine.router", "prefix-aware"]),
    ];
    assert_scenario_errors(&cases);
}

#[test]
fn defaults_follow_the_engines() {
    let load = |policy: &str| {
        let overrides = vec![format!("engine.policy={policy}"), "engine.router=least-outstanding".into()];
        let s = Scenario::load(Path::new("scenarios/quickstart.toml"), &overrides).unwrap();
        s.engine.enable_prefix_caching
    };
    assert!(load("vllm-v1"));
    assert!(!load("vllm-v0"));
    assert!(!load("servesim"));
}

/// With no prompt sharing text nothing can be cached, so caching on changes no step: the run is
/// the run with caching off, and the cache looked up every prompt once and found nothing.
#[test]
fn caching_with_nothing_shared_changes_nothing_but_the_lookups() {
    let load = |on: bool| {
        let overrides = vec![format!("engine.enable_prefix_caching={on}"), "workload.num_prompts=300".to_string()];
        Scenario::load(Path::new("scenarios/quickstart.toml"), &overrides).unwrap()
    };
    let (on, off) = (run(&load(true)), run(&load(false)));
    assert_eq!(format!("{:?}", on.output.records), format!("{:?}", off.output.records));
    let prompts: u64 = on.output.records.requests.iter().filter(|r| r.success).map(|r| u64::from(r.input_tokens)).sum();
    assert_eq!((on.output.prefix.prompt_tokens, on.output.prefix.hit_tokens), (prompts, 0));
    assert_eq!(off.output.prefix.prompt_tokens, 0);
}
