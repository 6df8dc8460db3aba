//! Analytic checks: the simulator against results that can be derived by hand.

use std::path::Path;

mod common;
use common::{ONE_AT_A_TIME, one_seq_batch};

use servesim::cost::CostModel;
use servesim::metrics::Summary;
use servesim::run::{cost_model, sim_config};
use servesim::scenario::Scenario;
use servesim::sim::simulate;
use servesim::workload;

fn scenario(text: &str) -> Scenario {
    Scenario::from_toml_str(text, Path::new("analytic.toml"), &[]).expect("valid scenario")
}

/// A request alone: its TTFT is the cost of its prefill step, and its TPOT the mean cost of its
/// decode steps (each over one more token of context).
#[test]
fn lone_request_ttft_and_tpot_are_the_step_costs() {
    let (input, output) = (1000u32, 17u32);
    let s = scenario(&format!(
        r#"
        [model]
        preset = "Llama-3.1-8B"
        [hardware]
        gpu = "H100-SXM"
        [engine]
        policy = "vllm-v1"
        [workload]
        num_prompts = 1
        [workload.dataset]
        kind = "fixed"
        input_len = {input}
        output_len = {output}
        "#
    ));
    let cost = cost_model(&s);
    let requests = workload::generate(&s.workload, 1);
    let out = simulate(&requests, &sim_config(&s), &cost);
    let summary = Summary::from_records(&out.records, &[99.0]);

    let prefill_ns = cost.predict(&one_seq_batch(input, 0, true)).total_ns;
    let decode_ns: u64 = (0..output - 1).map(|k| cost.predict(&one_seq_batch(1, input + k, false)).total_ns).sum();
    let tpot_ms = decode_ns as f64 / (output - 1) as f64 / 1e6;
    assert!((summary.ttft.mean_ms - prefill_ns as f64 / 1e6).abs() < 1e-9, "{} vs {}", summary.ttft.mean_ms, prefill_ns);
    assert!((summary.tpot.mean_ms - tpot_ms).abs() < 1e-9, "{} vs {}", summary.tpot.mean_ms, tpot_ms);
    assert_eq!(out.steps, u64::from(output), "one prefill step, then one step per further token");
}

/// M/D/1: Poisson arrivals at 50% load to a server that handles one request at a time with a
/// fixed service time D. Pollaczek–Khinchine gives the mean wait in queue
/// Wq = ρ·D / (2(1 − ρ)) = D/2. The simulated mean of (TTFT − D) must be within 3%.
#[test]
fn queueing_delay_matches_pollaczek_khinchine() {
    let base = ONE_AT_A_TIME;
    let probe = scenario(&base.replace("RATE", "1.0"));
    let service_ns = cost_model(&probe).predict(&one_seq_batch(512, 0, true)).total_ns as f64;
    let rho = 0.5;
    let rate = rho / (service_ns / 1e9);
    let s = scenario(&base.replace("RATE", &format!("{rate}")));
    let n = 200_000;
    let requests = workload::generate(&s.workload, n);
    let out = simulate(&requests, &sim_config(&s), &cost_model(&s));
    let summary = Summary::from_records(&out.records, &[99.0]);
    let wait_ms = summary.ttft.mean_ms - service_ns / 1e6;
    let expected_ms = rho * service_ns / 1e6 / (2.0 * (1.0 - rho));
    let error = (wait_ms - expected_ms).abs() / expected_ms;
    println!("M/D/1 at rho 0.5: simulated Wq {wait_ms:.4} ms, Pollaczek-Khinchine {expected_ms:.4} ms, error {:.2}%", error * 100.0);
    assert!(error < 0.03, "queueing delay {wait_ms} ms vs P-K {expected_ms} ms");
}
