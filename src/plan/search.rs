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
use super::steady::{SteadyState, intervals_ms, second_half};
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
    /// Each objective's 98% interval over the probe's batches, ms (parallel to the verdict's
    /// values); empty in logs written before the check.
    #[serde(default)]
    pub interval_ms: Vec<[f64; 2]>,
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
    // Goodput is the rate of good requests the deployment sustains: in steady state requests
    // complete as fast as they arrive, so it is the offered rate times the share that is good. A
    // count over the run's span would divide by the final drain too (up to 8% low).
    verdict.goodput_rps = rate * verdict.attainment;
    // Meeting the objectives over a finite run is not enough where the queue still grows: a
    // longer run, or a real day, would miss them (see `steady`).
    let steady = SteadyState::of(&result.output.records);
    // Each objective is decided by its interval, not the run's value alone: over the limit at
    // the interval's high end is no pass, under it at the low end is no fail; in between the
    // probe is too close to call (see `probe_until_decided`).
    let interval_ms = intervals_ms(&steady_part, objectives);
    let limits = || interval_ms.iter().zip(&objectives.slos);
    let surely_under = limits().all(|(i, slo)| i[1] <= slo.limit_ms);
    let surely_over = limits().any(|(i, slo)| i[0] > slo.limit_ms);
    if verdict.met && !steady.steady {
        verdict.met = false;
        verdict.binding = Binding::Unsteady;
    } else if (verdict.met && !surely_under) || (matches!(verdict.binding, Binding::Slo(_)) && !verdict.met && !surely_over) {
        verdict.met = false;
        verdict.binding = Binding::Uncertain;
    }
    Probe {
        rate,
        num_prompts,
        steady: Some(steady),
        interval_ms,
        verdict,
        output_throughput: result.summary.output_throughput,
        total_token_throughput: result.summary.total_token_throughput,
        mean_tpot_ms: result.summary.tpot.mean_ms,
    }
}

/// A probe too close to call ([`Binding::Uncertain`]: an objective's interval holds its limit)
/// runs again with twice the requests, up to
/// `most_prompts`: the interval narrows with the run's length, so
/// a rate near the answer is decided by the evidence rather than failed for want of it. Only
/// probes near the answer grow, so a search costs little more.
pub fn probe_until_decided(
    scenario: &Scenario,
    cost: &dyn CostModel,
    objectives: &Objectives,
    rate: f64,
    num_prompts: u32,
    most_prompts: u32,
) -> Probe {
    let mut n = num_prompts;
    loop {
        let p = probe(scenario, cost, objectives, rate, n);
        let grown = n.saturating_mul(2);
        if p.verdict.binding != Binding::Uncertain || grown > most_prompts || grown > PROBE_REQUESTS_MAX {
            return p;
        }
        n = grown;
    }
}

/// What the probes so far say one replica completes per second at most: past saturation a
/// probe's completions run at the service rate, so its rate times the share of arrivals it kept
/// up with; `None` until a probe has fallen behind.
pub fn capacity(probes: &[Probe]) -> Option<f64> {
    probes
        .iter()
        .filter_map(|p| p.steady.filter(|s| s.completion_ratio < 1.0 - super::steady::COMPLETION_SHORTFALL_MIN).map(|s| p.rate * s.completion_ratio))
        .reduce(f64::max)
}

/// Requests for a probe at `rate` given the capacity found so far: a queue at load ρ forgets its
/// start over a relaxation time that grows as 1 / (1 − ρ)², so near saturation a fixed count
/// judges the warm-up, not the steady state (a 2,000-request probe at ρ ≈ 0.95 met a 300 ms TTFT
/// p90 that 20,000 requests put at 586 ms). The count is the base one scaled by
/// ((1 − ρ₀) / (1 − ρ))² with ρ₀ = 0.8 (a load the base count covers), at most
/// [`UNCERTAIN_GROWTH_MAX`] times the base.
pub fn requests_near_saturation(base: u32, rate: f64, capacity: Option<f64>) -> u32 {
    const RHO_COVERED: f64 = 0.8;
    let Some(capacity) = capacity.filter(|c| *c > 0.0) else { return base };
    let rho = (rate / capacity).min(0.999);
    let scale = ((1.0 - RHO_COVERED) / (1.0 - rho)).powi(2).clamp(1.0, UNCERTAIN_GROWTH_MAX as f64);
    ((base as f64 * scale).ceil() as u32).min(PROBE_REQUESTS_MAX)
}

/// The highest share of a replica's measured capacity ([`capacity`]) a rate may load it to. Past
/// it a queue's relaxation time (∝ 1 / (1 − ρ)²) outgrows any probe the search can afford, so a
/// probe that passes there shows its warm-up, not its steady state: at 96% of capacity a probe
/// of 8,000 requests met a 300 ms TTFT p90 that 20,000 requests put at 368 ms.
pub const LOAD_MAX: f64 = 0.9;

/// The most a probe grows, near saturation or too close to call, as a multiple of the search's
/// base request count.
pub const UNCERTAIN_GROWTH_MAX: u32 = 4;

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
        let known = capacity(&probes);
        // Past LOAD_MAX of the capacity measured so far no rate passes, whatever a probe shows:
        // such a rate fails without one (these were the search's costliest probes: the longest,
        // and past saturation the slowest to simulate).
        if known.is_some_and(|c| rate > LOAD_MAX * c) {
            return false;
        }
        let n = requests_near_saturation(num_prompts, rate, known);
        // Both ways of growing a probe share one cap, so a search costs at most that many times
        // the fixed-count one.
        let most = num_prompts.saturating_mul(UNCERTAIN_GROWTH_MAX);
        let p = probe_until_decided(scenario, cost, objectives, rate, n, most);
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
