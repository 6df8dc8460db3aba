//! SGLang against vLLM on the same machine: MLPerf v5.1 (Krai), 8 × H200, Llama-3.1-70B FP8, one
//! replica per GPU, loadgen's server scenario, in both weight formats. The recorded TTFT p99 of
//! SGLang 0.4.9 is about three times vLLM 0.9.2's (1,579.6 ms against 534.3 ms with online FP8;
//! 1,617.3 against 650.2 pre-quantized: `tests/data/public-runs/recorded.json`, from the runs'
//! `mlperf_log_detail.txt`). The simulated ratio must have the recorded sign; how close it comes
//! is in docs/accuracy.md.

use std::path::Path;

use servesim::scenario::Scenario;
use servesim::validate::{Plan, validate};

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// (recorded, simulated) `key` of a server run's scenario.
fn server_metric(engine: &str, weights: &str, key: &str) -> (f64, f64) {
    let path = repo().join(format!("scenarios/public-runs/mlperf51-krai-xd670_h200_x8_{engine}-llama3_1-70b-{weights}-server.toml"));
    let scenario = Scenario::load(&path, &[]).unwrap_or_else(|e| panic!("{e}"));
    let plan = Plan::for_scenario(&scenario, None).unwrap_or_else(|e| panic!("{e}"));
    let v = validate(&scenario, &plan).unwrap_or_else(|e| panic!("{e}"));
    let m = v.points[0].metrics.iter().find(|m| m.key == key).unwrap_or_else(|| panic!("the scenario compares {key}"));
    (m.recorded, m.simulated)
}

/// (recorded, simulated) TTFT p99 of a server run's scenario, in ms.
fn ttft_p99(engine: &str, weights: &str) -> (f64, f64) {
    server_metric(engine, weights, "p99_ttft_ms")
}

/// SGLang's TTFT p99 over vLLM's, recorded and simulated, per weight format.
fn ratios(weights: &str) -> (f64, f64) {
    let (sglang_recorded, sglang_simulated) = ttft_p99("sglang_049", weights);
    let (vllm_recorded, vllm_simulated) = ttft_p99("vllm_092", weights);
    (sglang_recorded / vllm_recorded, sglang_simulated / vllm_simulated)
}

// Four simulations of 73,728 requests, SGLang's about two minutes each: run with --ignored.
#[test]
#[ignore]
fn sglang_s_ttft_tail_over_vllm_s_has_the_recorded_sign() {
    for weights in ["fp8_dyn", "fp8_pre"] {
        let (recorded, simulated) = ratios(weights);
        eprintln!("{weights}: SGLang/vLLM TTFT p99 recorded {recorded:.3}, simulated {simulated:.3} ({:+.1}%)", (simulated / recorded - 1.0) * 100.0);
        // The facts themselves: SGLang's tail is the longer one, by 2.5-3x.
        assert!(recorded > 2.0, "{weights}: recorded ratio {recorded}");
        assert!(simulated > 1.0, "{weights}: simulated SGLang/vLLM TTFT p99 {simulated:.3}, recorded {recorded:.3}: the sign flipped");
    }
}

// What is left of SGLang's capacity gap on these runs is the number of sequences, not the price of
// a step (docs/sglang.md, "What is left"): at the recorded load, where the simulated replica runs
// its KV-bound batch, its mean TPOT stays within 10% of the recorded one. Two simulations: --ignored.
#[test]
#[ignore]
fn sglang_s_server_tpot_is_priced_within_ten_percent() {
    for weights in ["fp8_dyn", "fp8_pre"] {
        let (recorded, simulated) = server_metric("sglang_049", weights, "mean_tpot_ms");
        let error = simulated / recorded - 1.0;
        eprintln!("{weights}: SGLang mean TPOT recorded {recorded:.1} ms, simulated {simulated:.1} ms ({:+.1}%)", error * 100.0);
        assert!(error.abs() < 0.10, "{weights}: SGLang mean TPOT {simulated:.1} ms against {recorded:.1} recorded");
    }
}
