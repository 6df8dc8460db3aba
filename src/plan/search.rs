//! The highest request rate at which a deployment still meets its objectives.
//!
//! Each probe is a full simulation of the scenario at one Poisson (or gamma) rate, with the
//! scenario's seed, so the probes share their random numbers: a higher rate replays the same
//! requests with gaps scaled down, and the verdict moves with the rate, not with the dice. The
//! search brackets the answer by doubling or halving from a start rate, then bisects until the
//! bracket is narrower than [`SearchOptions::relative_width`].

use crate::cost::CostModel;
use crate::run::{run_point_shared_cost, sim_config};
use crate::scenario::{Scenario, SweepPoint};

use super::file::PROBE_REQUESTS_MAX;
use super::objectives::{Binding, Objectives, Verdict};
use super::steady::{SteadyState, second_half, upper_bounds_ms};
use crate::metrics::Summary;

/// How the search runs. [`SearchOptions::default`] is what a plan uses.
#[derive(Clone, Debug, PartialEq)]
pub struct SearchOptions {
    /// The first rate probed, req/s.
    pub start_rate: f64,
    /// The search gives up bracketing outside `[min_rate, max_rate]` and says so ([`Bound`]).
    pub min_rate: f64,
    pub max_rate: f64,
    /// Bisection stops once (failing − passing) / failing is at most this.
    pub relative_width: f64,
    /// Requests per probe, at least; more when a high percentile needs them (see
    /// [`SearchOptions::requests_for`]).
    pub min_requests: u32,
}

impl Default for SearchOptions {
    fn default() -> SearchOptions {
        SearchOptions { start_rate: 1.0, min_rate: 1e-3, max_rate: 1e5, relative_width: 0.02, min_requests: 2000 }
    }
}

impl SearchOptions {
    /// Requests per probe: [`SearchOptions::min_requests`], or 100 / (1 − p) for the highest
    /// percentile p asked for, so that a p99 rests on about 100 requests beyond it.
    pub fn requests_for(&self, objectives: &Objectives) -> u32 {
        let tail = 1.0 - objectives.highest_percentile() / 100.0;
        let for_tail = if tail > 0.0 { (100.0 / tail).ceil().min(u32::MAX as f64) as u32 } else { u32::MAX };
        self.min_requests.max(for_tail)
    }

    /// Requests for a whole cluster of `replicas`: a probe's worth each, at most
    /// [`PROBE_REQUESTS_MAX`] in all.
    pub fn requests_for_cluster(&self, objectives: &Objectives, replicas: u32) -> u32 {
        self.requests_for(objectives).saturating_mul(replicas).min(PROBE_REQUESTS_MAX)
    }
}

/// One simulation of the search.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Probe {
    pub rate: f64,
    pub num_prompts: u32,
    pub verdict: Verdict,
    /// The run's output and total (input + output) tokens per second, vLLM's definitions.
    pub output_throughput: f64,
    pub total_token_throughput: f64,
    /// Mean TPOT, ms: 1000 / it is the tokens per second one user sees.
    pub mean_tpot_ms: f64,
    /// Whether the run was in steady state; a probe that met the objectives without it fails
    /// ([`Binding::Unsteady`]). Absent in logs written before the check.
    #[serde(default)]
    pub steady: Option<SteadyState>,
    /// Each objective's 95% upper bound over the probe's batches, ms (parallel to the verdict's
    /// values); empty in logs written before the check.
    #[serde(default)]
    pub upper_ms: Vec<f64>,
}

/// Whether the search range, rather than the objectives, decided the answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Bound {
    /// A passing and a failing rate bracket the answer within the relative width.
    Found,
    /// Even [`SearchOptions::min_rate`] fails: the deployment meets the objectives at no load
    /// the search tried (its `max_rate` is 0).
    BelowRange,
    /// [`SearchOptions::max_rate`] still passes: the answer is at least that.
    AboveRange,
}

/// The result of [`max_sustainable_rate`].
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct RateSearch {
    /// The highest rate that passed, req/s (0 when none did).
    pub max_rate: f64,
    pub bound: Bound,
    /// Every probe, in the order run, for auditing the answer.
    pub probes: Vec<Probe>,
}

impl RateSearch {
    /// The probe at [`RateSearch::max_rate`], if one passed.
    pub fn operating_point(&self) -> Option<&Probe> {
        self.probes.iter().find(|p| p.verdict.met && p.rate == self.max_rate)
    }
}

/// Simulates `scenario`'s workload at `rate` with `num_prompts` requests and judges the run.
pub fn probe(scenario: &Scenario, cost: &dyn CostModel, objectives: &Objectives, rate: f64, num_prompts: u32) -> Probe {
    let mut at_rate = scenario.clone();
    at_rate.workload.request_rate = vec![rate];
    at_rate.workload.num_prompts = vec![num_prompts];
    // Totals pin a recorded run's lengths; a probe draws its own.
    at_rate.workload.input_tokens_total = None;
    at_rate.workload.output_tokens_total = None;
    let point = SweepPoint::new(num_prompts, rate);
    let result = run_point_shared_cost(&at_rate, &sim_config(&at_rate), cost, &point, &objectives.percentiles());
    // Judged on the steady part of the run, not its warm-up (see `steady::second_half`).
    let steady_part = second_half(&result.output.records);
    let mut verdict = objectives.judge(&steady_part, &Summary::from_records(&steady_part, &objectives.percentiles()));
    // Meeting the objectives over a finite run is not enough where the queue still grows: a
    // longer run, or a real day, would miss them (see `steady`).
    let steady = SteadyState::of(&result.output.records);
    // And conservatively: each objective must hold at the high end of its interval.
    let upper_ms = upper_bounds_ms(&steady_part, objectives);
    if verdict.met && !steady.steady {
        verdict.met = false;
        verdict.binding = Binding::Unsteady;
    } else if verdict.met && upper_ms.iter().zip(&objectives.slos).any(|(u, slo)| *u > slo.limit_ms) {
        verdict.met = false;
        verdict.binding = Binding::Uncertain;
    }
    Probe {
        rate,
        num_prompts,
        steady: Some(steady),
        upper_ms,
        verdict,
        output_throughput: result.summary.output_throughput,
        total_token_throughput: result.summary.total_token_throughput,
        mean_tpot_ms: result.summary.tpot.mean_ms,
    }
}

/// The highest rate (req/s) at which `scenario`'s deployment meets `objectives`, to within
/// `options.relative_width`. The scenario's arrival shape (burstiness), lengths, seed and
/// concurrency cap are kept; only the rate and the number of requests change.
pub fn max_sustainable_rate(scenario: &Scenario, cost: &dyn CostModel, objectives: &Objectives, options: &SearchOptions) -> RateSearch {
    assert!(
        options.min_rate > 0.0 && options.min_rate <= options.start_rate && options.start_rate <= options.max_rate,
        "search range must hold the start rate: {options:?}"
    );
    assert!(options.relative_width > 0.0 && options.relative_width < 1.0, "relative width in (0, 1): {options:?}");
    let num_prompts = options.requests_for(objectives);
    let mut probes = Vec::new();
    let mut run = |rate: f64| {
        let p = probe(scenario, cost, objectives, rate, num_prompts);
        let met = p.verdict.met;
        probes.push(p);
        met
    };

    // Bracket: (passing, failing).
    let (mut pass, mut fail) = if run(options.start_rate) {
        let mut pass = options.start_rate;
        loop {
            if pass >= options.max_rate {
                return RateSearch { max_rate: pass, bound: Bound::AboveRange, probes };
            }
            let next = (pass * 2.0).min(options.max_rate);
            if !run(next) {
                break (pass, next);
            }
            pass = next;
        }
    } else {
        let mut fail = options.start_rate;
        loop {
            if fail <= options.min_rate {
                return RateSearch { max_rate: 0.0, bound: Bound::BelowRange, probes };
            }
            let next = (fail / 2.0).max(options.min_rate);
            if run(next) {
                break (next, fail);
            }
            fail = next;
        }
    };
    while (fail - pass) / fail > options.relative_width {
        let mid = (pass + fail) / 2.0;
        if run(mid) {
            pass = mid;
        } else {
            fail = mid;
        }
    }
    RateSearch { max_rate: pass, bound: Bound::Found, probes }
}
