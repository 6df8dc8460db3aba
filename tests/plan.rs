//! The planner's rate search: against an answer known in closed form, against itself, and
//! across deployments whose order is known.

use std::path::Path;

mod common;
use common::{ONE_AT_A_TIME, one_seq_batch};

use servesim::cost::CostModel;
use servesim::metrics::LatencyMetric;
use servesim::plan::{Binding, Bound, Objectives, SearchOptions, Slo, Statistic, max_sustainable_rate, search};
use servesim::run::cost_model;
use servesim::scenario::Scenario;

fn scenario(text: &str) -> Scenario {
    Scenario::from_toml_str(text, Path::new("plan.toml"), &[]).expect("valid scenario")
}


/// ShareGPT-like chat traffic to Llama-3.1-8B on H100s, `TP` GPUs per replica.
const CHAT: &str = r#"
    [model]
    preset = "Llama-3.1-8B"
    [hardware]
    gpu = "H100-SXM"
    [engine]
    policy = "vllm-v1"
    tensor_parallel = TP
    [workload]
    num_prompts = 1
    request_rate = 1.0
    seed = 7
    [workload.dataset]
    kind = "sharegpt"
    input = { dist = "lognormal", mean = 220, std = 250, min = 4, max = 2048 }
    output = { dist = "lognormal", mean = 200, std = 200, min = 1, max = 1024 }
"#;

fn chat_objectives() -> Objectives {
    Objectives {
        slos: vec![
            Slo { metric: LatencyMetric::Ttft, statistic: Statistic::Percentile(90.0), limit_ms: 200.0 },
            Slo { metric: LatencyMetric::Tpot, statistic: Statistic::Percentile(90.0), limit_ms: 12.0 },
        ],
        attainment: None,
    }
}

/// M/D/1 (Poisson arrivals, deterministic service D): Pollaczek–Khinchine gives the mean wait
/// Wq = ρD / (2(1 − ρ)), so a mean TTFT of D + D/2 (Wq = D/2) is reached at ρ = 0.5, i.e. at
/// 0.5 / D requests per second. The search must land within 3% of it.
#[test]
fn max_rate_under_a_mean_queueing_delay_matches_pollaczek_khinchine() {
    let s = scenario(&ONE_AT_A_TIME.replace("RATE", "1.0"));
    let cost = cost_model(&s);
    let service_ms = cost.predict(&one_seq_batch(512, 0, true)).total_ns as f64 / 1e6;
    let objectives = Objectives {
        slos: vec![Slo { metric: LatencyMetric::Ttft, statistic: Statistic::Mean, limit_ms: 1.5 * service_ms }],
        attainment: None,
    };
    let options = SearchOptions { min_requests: 100_000, relative_width: 0.005, ..SearchOptions::default() };
    let found = max_sustainable_rate(&s, &cost, &objectives, &options);
    let expected = 0.5 / (service_ms / 1e3);
    let error = (found.max_rate - expected).abs() / expected;
    println!(
        "M/D/1, D = {service_ms:.4} ms: max rate {:.2} req/s against Pollaczek-Khinchine's {expected:.2}, error {:.2}%, {} probes",
        found.max_rate,
        error * 100.0,
        found.probes.len()
    );
    assert_eq!(found.bound, Bound::Found);
    assert!(error < 0.03, "max rate {} vs {expected}", found.max_rate);
}

/// Past saturation a queue grows without bound, yet a short probe can still meet a loose
/// objective: its queue had no time to grow. The steady-state check fails that probe, and a probe
/// ten times longer at the same rate misses the objective itself, as a real day would.
#[test]
fn a_short_probe_past_saturation_is_not_steady_and_a_long_one_misses() {
    let s = scenario(&ONE_AT_A_TIME.replace("RATE", "1.0"));
    let cost = cost_model(&s);
    let service_ms = cost.predict(&one_seq_batch(512, 0, true)).total_ns as f64 / 1e6;
    let limit_ms = 80.0 * service_ms;
    let objectives =
        Objectives { slos: vec![Slo { metric: LatencyMetric::Ttft, statistic: Statistic::Mean, limit_ms }], attainment: None };
    let saturation = 1000.0 / service_ms;

    let short = search::probe(&s, &cost, &objectives, 1.03 * saturation, 2_000);
    let steady = short.steady.expect("checked");
    println!("3% past saturation, 2,000 requests: mean TTFT {:.1} ms (limit {limit_ms:.1}), {steady:?}", short.verdict.values_ms[0]);
    assert!(short.verdict.values_ms[0] <= limit_ms, "the objective alone would pass: {short:?}");
    assert!(!steady.steady && !short.verdict.met, "{short:?}");
    assert_eq!(short.verdict.binding, Binding::Unsteady);

    let long = search::probe(&s, &cost, &objectives, 1.03 * saturation, 20_000);
    println!("20,000 requests: mean TTFT {:.1} ms", long.verdict.values_ms[0]);
    assert!(long.verdict.values_ms[0] > limit_ms, "{long:?}");

    let below = search::probe(&s, &cost, &objectives, 0.8 * saturation, 2_000);
    assert!(below.steady.is_some_and(|s| s.steady) && below.verdict.met, "{below:?}");
}

/// With the planner's own settings (2,000 requests a probe, the steady-state check and the
/// interval), the M/D/1 answer lands within 10% below Pollaczek–Khinchine's and never above it,
/// at every seed.
#[test]
fn the_default_search_is_within_ten_percent_below_the_exact_m_d_1_rate_at_every_seed() {
    for seed in 1..=5 {
        let s = scenario(&ONE_AT_A_TIME.replace("RATE", "1.0").replace("seed = 42", &format!("seed = {seed}")));
        let cost = cost_model(&s);
        let service_ms = cost.predict(&one_seq_batch(512, 0, true)).total_ns as f64 / 1e6;
        let objectives = Objectives {
            slos: vec![Slo { metric: LatencyMetric::Ttft, statistic: Statistic::Mean, limit_ms: 1.5 * service_ms }],
            attainment: None,
        };
        let found = max_sustainable_rate(&s, &cost, &objectives, &SearchOptions::default());
        let exact = 0.5 / (service_ms / 1e3);
        let error = found.max_rate / exact - 1.0;
        println!("seed {seed}: {:.2} req/s against {exact:.2}, {:+.1}%", found.max_rate, error * 100.0);
        assert!((-0.10..=0.0).contains(&error), "seed {seed}: {} against {exact}", found.max_rate);
        // No rate past LOAD_MAX of the capacity measured before it is simulated: it fails anyway.
        for (i, p) in found.probes.iter().enumerate() {
            let known = servesim::plan::search::capacity(&found.probes[..i]);
            assert!(known.is_none_or(|c| p.rate <= servesim::plan::search::LOAD_MAX * c), "seed {seed}: probe {i} at {} past {known:?}", p.rate);
        }
    }
}

/// The answer checks itself: the objectives hold at the reported rate and fail 5% above it.
#[test]
fn the_objectives_hold_at_the_answer_and_fail_just_above_it() {
    let s = scenario(&CHAT.replace("TP", "1"));
    let cost = cost_model(&s);
    let objectives = chat_objectives();
    let options = SearchOptions::default();
    let found = max_sustainable_rate(&s, &cost, &objectives, &options);
    assert_eq!(found.bound, Bound::Found, "{found:?}");
    let at = found.operating_point().expect("a passing probe at the answer");
    assert!(at.verdict.met);
    let above = search::probe(&s, &cost, &objectives, found.max_rate * 1.05, options.requests_for(&objectives));
    println!(
        "max rate {:.2} req/s: ttft p90 {:.1} ms, tpot p90 {:.2} ms; at 1.05x: {:?}",
        found.max_rate, at.verdict.values_ms[0], at.verdict.values_ms[1], above.verdict.values_ms
    );
    assert!(!above.verdict.met, "still met at 1.05 × {}: {:?}", found.max_rate, above.verdict);
    // Every probe is kept, passing below the answer and failing above it.
    for p in &found.probes {
        assert_eq!(p.verdict.met, p.rate <= found.max_rate, "probe {p:?}");
    }
}

/// More GPUs of the same kind per replica never sustain less load.
#[test]
fn more_gpus_per_replica_never_lower_the_max_rate() {
    let objectives = chat_objectives();
    let rates: Vec<f64> = ["1", "2", "4"]
        .iter()
        .map(|tp| {
            let s = scenario(&CHAT.replace("TP", tp));
            max_sustainable_rate(&s, &cost_model(&s), &objectives, &SearchOptions::default()).max_rate
        })
        .collect();
    println!("max rate at TP 1, 2, 4: {rates:?} req/s");
    assert!(rates.windows(2).all(|w| w[1] >= w[0]), "{rates:?}");
}

/// Objectives nothing can meet, and a range too narrow to find the answer, are said as such.
#[test]
fn the_range_bounding_the_answer_is_reported() {
    let s = scenario(&CHAT.replace("TP", "1"));
    let cost = cost_model(&s);
    let impossible = Objectives {
        slos: vec![Slo { metric: LatencyMetric::Ttft, statistic: Statistic::Percentile(90.0), limit_ms: 0.001 }],
        attainment: None,
    };
    let narrow = SearchOptions { min_rate: 0.25, ..SearchOptions::default() };
    let none = max_sustainable_rate(&s, &cost, &impossible, &narrow);
    assert_eq!((none.bound, none.max_rate), (Bound::BelowRange, 0.0));
    assert_eq!(none.probes.last().map(|p| p.rate), Some(0.25));

    let capped = SearchOptions { max_rate: 2.0, ..SearchOptions::default() };
    let all = max_sustainable_rate(&s, &cost, &chat_objectives(), &capped);
    assert_eq!((all.bound, all.max_rate), (Bound::AboveRange, 2.0));
}

/// The same search twice gives the same probes and answer, bit for bit.
#[test]
fn the_search_is_deterministic() {
    let s = scenario(&CHAT.replace("TP", "2"));
    let cost = cost_model(&s);
    let a = max_sustainable_rate(&s, &cost, &chat_objectives(), &SearchOptions::default());
    let b = max_sustainable_rate(&s, &cost, &chat_objectives(), &SearchOptions::default());
    assert_eq!(a, b);
}
