//! Multi-turn chat sessions (docs/prefix-caching.md#multi-turn-chat-sessions): each turn is sent
//! a think time after the turn before it ends, its prompt holds the conversation so far, and a
//! prefix cache finds the previous prompts' full blocks.

mod common;
use common::assert_scenario_errors;
use std::path::Path;

use servesim::run::{PointResult, run_scenario};
use servesim::scenario::Scenario;
use servesim::workload::generate_point;

const EXAMPLE: &str = "scenarios/chat-sessions.toml";

fn load(overrides: &[&str]) -> Scenario {
    let all: Vec<String> = overrides.iter().map(|s| s.to_string()).collect();
    Scenario::load(Path::new(EXAMPLE), &all).unwrap()
}

fn run(scenario: &Scenario) -> PointResult {
    run_scenario(scenario, &[99.0]).remove(0)
}

#[test]
fn each_turn_is_sent_its_think_time_after_the_turn_before_ends() {
    let s = load(&["workload.num_prompts=60", "workload.sessions.turns=6", "workload.sessions.think_time=\"fixed\"",
        "workload.sessions.think_time_s=2"]);
    let requests = generate_point(&s.workload, &s.workload.points()[0]);
    let result = run(&s);
    let records = &result.output.records.requests;
    assert_eq!(requests.len(), 60);
    let mut turns = 0;
    for (i, spec) in requests.iter().enumerate() {
        match spec.follows {
            // No concurrency cap: nothing delays a send past its think time.
            Some(f) => {
                assert_eq!(records[i].send_ns, records[f.request as usize].end_ns + 2_000_000_000, "request {i}");
                // The prompt holds the turn before it and its answer (the context never runs out here).
                assert!(spec.input_tokens > requests[i - 1].input_tokens + requests[i - 1].output_tokens, "request {i}");
                turns += 1;
            }
            None => assert_eq!(records[i].send_ns, spec.arrival_ns, "request {i}"),
        }
    }
    assert_eq!(turns, 50, "10 sessions of 6 turns: 50 follow a turn");
    assert_eq!(result.summary.completed, 60);
}

/// One session of 3 turns, 100 tokens of new text and 50 of answer each, blocks of 16: prompts
/// of 100, 250 and 400 tokens. A turn computes its prompt and all but its last answer token
/// (149 and 299 tokens), so turn 1 finds turn 0's 9 full blocks (144 tokens), answer included,
/// and turn 2 finds turn 1's 18 (288).
#[test]
fn later_turns_find_the_previous_prompts_full_blocks() {
    let text = r#"
        [model]
        preset = "Llama-3.1-8B"
        [hardware]
        gpu = "H100-SXM"
        [engine]
        policy = "vllm-v1"
        block_size = 16
        [workload]
        num_prompts = 3
        [workload.dataset]
        kind = "fixed"
        input_len = 100
        output_len = 50
        [workload.sessions]
        turns = 3
    "#;
    let scenario = |overrides: &[String]| Scenario::from_toml_str(text, Path::new("one-session.toml"), overrides).unwrap();
    let s = scenario(&[]);
    let requests = generate_point(&s.workload, &s.workload.points()[0]);
    assert_eq!(requests.iter().map(|r| r.input_tokens).collect::<Vec<_>>(), [100, 250, 400]);
    let prefix = run(&s).output.prefix;
    assert_eq!((prefix.hit_tokens, prefix.prompt_tokens), (144 + 288, 750));
    let off = run(&scenario(&["engine.enable_prefix_caching=false".to_string()]));
    assert_eq!(off.output.prefix.hit_tokens, 0);
}

#[test]
fn the_example_hits_the_cache_and_reruns_identically() {
    let s = load(&["workload.num_prompts=240"]);
    let a = run(&s);
    assert!(a.output.prefix.hit_rate() > 0.5, "hit rate {}", a.output.prefix.hit_rate());
    let b = run(&s);
    assert_eq!(format!("{:?}", a.output.records.requests), format!("{:?}", b.output.records.requests));
    let off = run(&load(&["workload.num_prompts=240", "engine.enable_prefix_caching=false"]));
    assert!(a.summary.ttft.mean_ms < off.summary.ttft.mean_ms, "{} vs {}", a.summary.ttft.mean_ms, off.summary.ttft.mean_ms);
}

#[test]
fn bad_values_name_the_field_and_value() {
    let cases: [(&str, &[&str], &[&str]); 5] = [
        (EXAMPLE, &["workload.sessions.turns=0"], &["workload.sessions.turns", "0"]),
        (EXAMPLE, &["workload.sessions.think_time_s=-1"], &["workload.sessions.think_time_s", "-1"]),
        (EXAMPLE, &["workload.sessions.think_time=\"gaussian\""], &["workload.sessions.think_time", "gaussian"]),
        (EXAMPLE, &["workload.sessions.turns=20000"], &["workload.sessions.turns", "20000"]),
        ("scenarios/prefix-caching.toml", &["workload.sessions.turns=2"], &["workload.dataset.prefix", "sessions"]),
    ];
    assert_scenario_errors(&cases);
}
