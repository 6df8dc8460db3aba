//! Heterogeneous pools (`[[cluster.pools]]`): the weighted router sends the faster pool more,
//! round-robin an equal share; one pool is exactly the pool-less scenario; runs are
//! byte-identical; `summary.json` describes the pools.

mod common;
use common::*;

use std::path::Path;

use servesim::run::{PointResult, pool_runs, run_pools_with_progress, run_scenario_with_progress, scenario_cost};
use servesim::scenario::Scenario;

/// One H100 and one A100 replica of Llama-3.1-8B, loaded enough that requests queue.
const TWO_POOLS: &str = r#"
[model]
preset = "Llama-3.1-8B"

[engine]
router = "weighted-least-outstanding"

[cost]
profile = "roofline"

[[cluster.pools]]
gpu = "H100-SXM"
replicas = 1

[[cluster.pools]]
gpu = "A100-80G-SXM"
replicas = 1

[workload]
num_prompts = 600
request_rate = 40
seed = 3

[workload.dataset]
kind = "sharegpt"
input = { dist = "lognormal", mean = 220, std = 250, min = 4, max = 2048 }
output = { dist = "lognormal", mean = 200, std = 200, min = 1, max = 1024 }
"#;

fn load(text: &str, sets: &[&str]) -> Scenario {
    let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
    Scenario::from_toml_str(text, Path::new("pools.toml"), &sets).unwrap()
}

fn simulate(scenario: &Scenario) -> PointResult {
    let runs = pool_runs(scenario, false).unwrap();
    run_pools_with_progress(scenario, &runs, &[99.0], true, &mut |_| {}).remove(0)
}

/// Requests sent to replica 0 (the H100) and replica 1 (the A100).
fn shares(point: &PointResult) -> [u32; 2] {
    let mut sent = [0; 2];
    for extra in &point.output.extras {
        sent[extra.replica as usize] += 1;
    }
    sent
}

#[test]
fn weighted_router_sends_the_faster_pool_more() {
    let scenario = load(TWO_POOLS, &[]);
    let runs = pool_runs(&scenario, false).unwrap();
    // By the roofline, an H100 decodes about 1.6 times as fast as an A100 (HBM 3.35 vs 2.04 TB/s).
    let ratio = runs[0].weight / runs[1].weight;
    assert!((1.3..2.0).contains(&ratio), "H100/A100 weight {ratio}");
    let weighted = shares(&simulate(&scenario));
    assert!(weighted[0] as f64 > 1.2 * weighted[1] as f64, "{weighted:?}");
    assert_eq!(shares(&simulate(&load(TWO_POOLS, &["engine.router=round-robin"]))), [300, 300]);
    // Given weights replace the derived ones: three times the A100's way, it gets the most.
    let given = TWO_POOLS
        .replace("replicas = 1\n\n[workload]", "replicas = 1\nweight = 3\n\n[workload]")
        .replace("replicas = 1\n\n[[cluster", "replicas = 1\nweight = 1\n\n[[cluster");
    let favoured = shares(&simulate(&load(&given, &[])));
    assert!(favoured[1] > favoured[0], "{favoured:?}");
}

#[test]
fn each_replica_is_priced_by_its_pool() {
    // One token budget for both (left to the release's defaults, the H100's would be 8192 and
    // the A100's 2048).
    let point = simulate(&load(TWO_POOLS, &["workload.num_prompts=40", "workload.request_rate=inf", "engine.max_num_batched_tokens=2048"]));
    // The same first step (a full token budget of prefill) on each: the A100 takes longer.
    let first = |replica| point.output.timeline.iter().find(|s| s.replica == replica).unwrap();
    let (h100, a100) = (first(0), first(1));
    assert_eq!(h100.prefill_tokens, a100.prefill_tokens);
    assert!(a100.cost.total_ns > h100.cost.total_ns, "{} vs {}", a100.cost.total_ns, h100.cost.total_ns);
}

#[test]
fn one_pool_is_the_pool_less_scenario() {
    let pool_less = TWO_POOLS
        .replace("[[cluster.pools]]\ngpu = \"H100-SXM\"\nreplicas = 1\n\n[[cluster.pools]]\ngpu = \"A100-80G-SXM\"\nreplicas = 1\n", "")
        .replace("[engine]\n", "[hardware]\ngpu = \"H100-SXM\"\n\n[engine]\nreplicas = 2\n");
    let one_pool = TWO_POOLS.replace("gpu = \"A100-80G-SXM\"", "gpu = \"H100-SXM\"");
    let plain = load(&pool_less, &[]);
    assert!(plain.pools.is_empty());
    let cost = scenario_cost(&plain, false).unwrap();
    let a = run_scenario_with_progress(&plain, cost.model.as_ref(), &[99.0], true, &mut |_| {}).remove(0);
    let b = simulate(&load(&one_pool, &[]));
    assert_eq!(a.output.records.requests, b.output.records.requests);
    assert_eq!(a.output.extras, b.output.extras);
    assert_eq!(a.output.timeline, b.output.timeline);
}

#[test]
fn runs_are_byte_identical_and_describe_the_pools() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = repo().join("scenarios/hetero-h100-a100.toml");
    let mut printed = Vec::new();
    for run in ["a", "b"] {
        let out_dir = dir.path().join(run);
        let out = servesim(&[
            "simulate",
            scenario.to_str().unwrap(),
            "--set",
            "workload.num_prompts=300",
            "--set",
            "workload.request_rate=[20,60]",
            "--out",
            out_dir.to_str().unwrap(),
        ]);
        assert!(out.status.success(), "{}", stderr(&out));
        assert!(stderr(&out).contains("2 × H100-SXM (TP 1) + 2 × A100-80G-SXM (TP 1)"), "{}", stderr(&out));
        printed.push(out.stdout);
    }
    assert_eq!(printed[0], printed[1]);
    for file in ["summary.json", "requests.csv", "timeline.csv", "itl.csv"] {
        let a = std::fs::read(dir.path().join("a").join(file)).unwrap();
        assert!(a == std::fs::read(dir.path().join("b").join(file)).unwrap(), "{file} differs between identical runs");
    }
    let summary: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("a/summary.json")).unwrap()).unwrap();
    let pools = summary["servesim"]["pools"].as_array().unwrap();
    assert_eq!(pools.len(), 2);
    assert_eq!((pools[1]["gpu"].as_str(), pools[1]["replicas"].as_u64()), (Some("A100-80G-SXM"), Some(2)));
    assert!(pools[0]["cost_model"].as_str().unwrap().contains("H100"), "{}", pools[0]["cost_model"]);
    assert!(pools[1]["cost_model"].as_str().unwrap().contains("A100"), "{}", pools[1]["cost_model"]);
    assert_eq!(summary["servesim"]["router"], "weighted-least-outstanding");
    for result in summary["results"].as_array().unwrap() {
        let sent: Vec<u64> = result["pool_requests"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap()).collect();
        assert_eq!(sent.iter().sum::<u64>(), 300);
        assert!(sent[0] > sent[1], "{sent:?}");
    }
}
