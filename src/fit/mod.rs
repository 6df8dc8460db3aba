//! `servesim fit`: fits named physical parameters of the cost model to recorded benchmark runs.
//!
//! ```text
//!  targets: (scenario, recorded plan) × k          shared parameter vector θ (unconstrained)
//!        │                                                   │ params::ParamKind transforms
//!        ▼                                                   ▼
//!  each target's own [cost], with the fitted names replaced by θ's physical values
//!        │  simulate the target's fit points (validate::simulate_metrics)
//!        ▼
//!  objective(θ) = mean over (target, fit point, metric) of ln(simulated / recorded)²
//!        │  Nelder–Mead with restarts, from the default values
//!        ▼
//!  FitResult ──► profile_toml: [provenance] + [cost] (every parameter), loadable by
//!                `[cost] profile = "…"`
//! ```
//!
//! One parameter vector is shared by all targets: that is how one set of hardware parameters
//! explains runs of two engines, or several series of one engine. Parameters not fitted stay at
//! each target's own `[cost]` values, so per-engine kernel efficiencies can be pinned per
//! scenario while a hardware parameter is fitted across them.
//!
//! The error measure is ln(simulated / recorded): symmetric in the ratio (2× too slow costs as
//! much as 2× too fast) and scale-free, so throughput in tokens/s and TTFT in ms weigh alike.
//! It is one objective over all metrics together, never a separate fit per metric.

pub mod engine_profile;
pub mod leave_one_out;
pub mod nelder_mead;
pub mod params;
pub mod results;
pub mod series;

use std::fmt::Write as _;
use std::path::PathBuf;

use crate::Error;
use crate::cost::engine_time::{EngineTimeOverlay, without_engine_time};
use crate::cost::roofline::Roofline;
use crate::scenario::{CostParams, Scenario, SweepPoint};
use crate::validate::{MetricComparison, Plan, PointComparison, simulate_metrics, simulate_metrics_with};
use params::ParamSpec;

/// Metrics fitted when none are named: those the issue's accuracy targets are set on.
pub const DEFAULT_FIT_METRICS: [&str; 3] = ["output_throughput", "mean_tpot_ms", "mean_ttft_ms"];

/// Convergence: the simplex's spread of objective values, in units of the objective (a mean
/// squared log-ratio). 10⁻¹⁰ is a relative error of 10⁻⁵: far below what any recorded run
/// resolves, so the fit stops on this only once it has truly settled.
const F_TOLERANCE: f64 = 1e-10;
/// Initial simplex edge in unconstrained coordinates: ±0.5 in log space is a factor of 1.65 on
/// an overhead; in logit space, about ±0.1 on an efficiency near 0.5. Large enough to see the
/// objective move through the simulator's discreteness, small enough to stay near the start.
const INITIAL_STEP: f64 = 0.5;
/// Restarts from the best point (each with a fresh full-size simplex) to escape stalls.
const MAX_RESTARTS: usize = 4;

/// A scenario and the recorded run it reproduces.
#[derive(Clone, Debug)]
pub struct FitTarget {
    pub scenario: Scenario,
    /// Which recorded block is which sweep point. Its `fit_blocks` (the scenario's
    /// `[validation] fit_blocks`) are the points fitted; when empty, every sweep point is fitted
    /// (and [`TargetFit::all_points`] says so).
    pub plan: Plan,
    /// True when every point of this target is held out: it is simulated for the report with
    /// the fitted values, never fitted.
    pub reported_only: bool,
}

/// What to fit, and to what.
#[derive(Clone, Debug)]
pub struct FitConfig {
    pub targets: Vec<FitTarget>,
    /// Names of the [`CostParams`] fields to fit (see [`params::PARAMS`]); the others stay at
    /// each scenario's own `[cost]` value.
    pub params: Vec<String>,
    /// vLLM `--save-result` keys compared; empty means [`DEFAULT_FIT_METRICS`].
    pub metrics: Vec<String>,
    /// Limit on objective evaluations (each one simulates every fit point of every target).
    pub max_evaluations: usize,
    /// Fit [`FRONTEND_PARAM`] too, when `params` leaves it out and a fitted point is a burst
    /// (`request_rate = inf`): with a front end that costs nothing, a burst's requests all reach
    /// the scheduler at once and prefill as one batch, which no real API server does.
    pub frontend_on_bursts: bool,
    /// Price steps as `simulate` does, with each scenario's kernel profile (bundled or named),
    /// instead of the roofline: how engine time is fitted on top of kernel tables that stay as
    /// measured (docs/engine-profiles.md).
    pub kernels: bool,
    /// Start the search here, once, instead of from the defaults and the points around them:
    /// a leave-one-out fold starts at the fit to every run. Physical values, in the order of
    /// the fitted parameters (with any added one last).
    pub warm_start: Option<Vec<f64>>,
    /// Weigh each error by [`robust_loss`] instead of its square: a run the model cannot
    /// reproduce (one that saturates in simulation and not in the recording, a 100× TTFT
    /// error) then pulls the shared values no harder than a run 3× off, where its square would
    /// outweigh every other run together.
    pub robust: bool,
}

/// The scale of [`robust_loss`]: errors up to about ±50% weigh as their square.
pub const ROBUST_SCALE: f64 = 0.405_465_108_108_164_4; // ln 1.5

/// The API server's per-request time, the parameter a burst identifies.
pub const FRONTEND_PARAM: &str = "frontend_overhead_us";

/// Where a fit starts [`FRONTEND_PARAM`] when its default is 0: one millisecond per request, the
/// order of an HTTP request's parsing and a short prompt's tokenization in a Python server. The
/// fit moves it from there; starting at 0 (the log transform's floor, 0.1 µs) would leave it
/// where it has no effect on any prediction, so the optimiser would never see it matter.
const FRONTEND_START_US: f64 = 1_000.0;

/// One target after the fit.
#[derive(Clone, Debug, PartialEq)]
pub struct TargetFit {
    /// The scenario file.
    pub scenario: PathBuf,
    pub recorded: PathBuf,
    /// `num_prompts` of the points fitted, in sweep order.
    pub fit_points: Vec<u32>,
    /// True when the plan named no fit points, so every sweep point was fitted (nothing held
    /// out: the errors below say nothing about prediction).
    pub all_points: bool,
    /// Every sweep point with the fitted values, `fitted` telling fitted from held-out points.
    /// Metrics a held-out point's recorded block lacks are left out of its list.
    pub points: Vec<PointComparison>,
}

/// The outcome of [`fit`].
#[derive(Clone, Debug, PartialEq)]
pub struct FitResult {
    /// Fitted values, in the order of [`FitConfig::params`], in physical units (fractions,
    /// microseconds).
    pub values: Vec<(String, f64)>,
    /// The objective at `values`: mean of ln(simulated / recorded)² over fitted
    /// (target, point, metric) triples.
    pub objective: f64,
    /// The objective at the start values.
    pub start_objective: f64,
    /// Objective evaluations used (each simulates every fit point of every target).
    pub evaluations: usize,
    /// Nelder–Mead restarts performed.
    pub restarts: usize,
    /// Whether the optimiser met its tolerance (false: it stopped at `max_evaluations`).
    pub converged: bool,
    /// The metrics fitted (the defaults if the config named none).
    pub metrics: Vec<String>,
    /// Per target, the error at every sweep point with the fitted values.
    pub targets: Vec<TargetFit>,
    /// Parameters fitted without being named, and why (e.g. [`FRONTEND_PARAM`] for bursts).
    pub added: Vec<(String, String)>,
}

impl FitResult {
    /// The root-mean-square log-ratio: roughly the typical relative error (0.05 ≈ 5%).
    pub fn rms_log_error(&self) -> f64 {
        self.objective.sqrt()
    }

    /// Fitted parameters that ended at an end of their physical range, with the end (see
    /// [`params::ParamKind::edge`]): the fit wanted a value outside it, which means the model
    /// lacks a mechanism the data shows, and is reported as such.
    pub fn range_edges(&self) -> Vec<(String, f64, params::RangeEdge)> {
        self.values
            .iter()
            .filter_map(|(name, value)| {
                let edge = params::lookup(name).ok()?.kind.edge(*value)?;
                Some((name.clone(), *value, edge))
            })
            .collect()
    }

    /// The names of [`range_edges`](Self::range_edges).
    pub fn pinned_parameters(&self) -> Vec<String> {
        self.range_edges().into_iter().map(|(name, _, _)| name).collect()
    }
}

/// A target prepared for repeated evaluation: its fit points and their recorded values.
struct Prepared<'a> {
    target: &'a FitTarget,
    /// With `kernels` and only engine-time parameters fitted: the target's kernel model, built
    /// once with no engine time, which every trial's engine time is laid over
    /// ([`EngineTimeOverlay`]).
    kernel_model: Option<Box<dyn crate::cost::CostModel + Sync>>,
    /// Indices into the sweep of the points fitted.
    point_indices: Vec<usize>,
    points: Vec<SweepPoint>,
    /// `recorded[p][m]`: recorded value of metric m at fit point p, > 0; `None` where the
    /// recorded value is 0 and so carries no relative information.
    recorded: Vec<Vec<Option<f64>>>,
}

/// Fits `config.params` to every target's fit points. Deterministic: same inputs, same result.
pub fn fit(config: &FitConfig) -> Result<FitResult, Error> {
    if config.targets.is_empty() {
        return Err(Error::Usage { flag: "fit", value: String::new(), reason: "no scenarios to fit".into() });
    }
    if config.params.is_empty() {
        return Err(Error::Usage {
            flag: "--params",
            value: String::new(),
            reason: format!("name at least one parameter to fit; known parameters: {}", params::known_names()),
        });
    }
    let metrics: Vec<String> = if config.metrics.is_empty() {
        DEFAULT_FIT_METRICS.iter().map(|m| m.to_string()).collect()
    } else {
        config.metrics.clone()
    };
    if config.max_evaluations == 0 {
        return Err(Error::Usage {
            flag: "--max-evals",
            value: "0".into(),
            reason: "must be at least 1".into(),
        });
    }
    let mut prepared = config.targets.iter().map(|t| prepare(t, &metrics)).collect::<Result<Vec<_>, _>>()?;
    if prepared.iter().all(|p| p.points.is_empty()) {
        return Err(Error::Recorded("every point is held out: nothing is left to fit".into()));
    }
    let mut names = config.params.clone();
    let mut added = Vec::new();
    let bursts = prepared.iter().any(|p| p.points.iter().any(|pt| pt.request_rate.is_infinite()));
    if config.frontend_on_bursts && bursts && !names.iter().any(|n| n == FRONTEND_PARAM) {
        names.push(FRONTEND_PARAM.to_string());
        added.push((FRONTEND_PARAM.to_string(), "the fitted points include bursts (request_rate = inf)".to_string()));
    }
    let specs = params::lookup_all(&names)?;
    if config.kernels && specs.iter().all(|s| crate::scenario::engine_profile::ENGINE_TIME_KEYS.contains(&s.name)) {
        for p in &mut prepared {
            let mut base = p.target.scenario.clone();
            base.cost = without_engine_time(&base.cost);
            p.kernel_model = Some(crate::run::scenario_cost(&base, false)?.model);
        }
    }

    // Fitted parameters start from the defaults, not from the scenarios' values: scenarios load
    // the very profile a fit writes, and regenerating it must not depend on the previous result.
    let defaults = CostParams::default();
    let x0: Vec<f64> = match &config.warm_start {
        Some(values) if values.len() == specs.len() => specs.iter().zip(values).map(|(s, &v)| s.kind.to_unconstrained(v)).collect(),
        _ => specs.iter().map(|s| s.kind.to_unconstrained(start_value(s, &defaults))).collect(),
    };
    // Evaluated here so that an error (an unknown metric key) surfaces before any search.
    let start_objective = evaluate(&prepared, &specs, &x0, &metrics, config.kernels, config.robust)?;

    // Errors from later simulations are not the optimiser's business: the first one is kept and
    // returned after the minimisation, which it ends by making every later evaluation infinite.
    let mut failure: Option<Error> = None;
    let mut objective = |x: &[f64]| -> f64 {
        if failure.is_some() {
            return f64::INFINITY;
        }
        // The minimiser starts by evaluating x0: reuse the value rather than simulate again.
        if x == x0.as_slice() {
            return start_objective;
        }
        match evaluate(&prepared, &specs, x, &metrics, config.kernels, config.robust) {
            Ok(v) => v,
            Err(e) => {
                failure = Some(e);
                f64::INFINITY
            }
        }
    };

    let options = nelder_mead::Options {
        max_evaluations: config.max_evaluations,
        f_tolerance: F_TOLERANCE,
        initial_step: INITIAL_STEP,
        max_restarts: MAX_RESTARTS,
    };
    // Nelder–Mead finds a local minimum, and these objectives have several (an overhead and an
    // efficiency can trade against each other over a range of batch sizes). A few fixed
    // starting points around the defaults, each searched in full, make the result much less a
    // matter of where the search began; the best wins. Fixed points keep the fit deterministic.
    let mut best: Option<nelder_mead::Minimum> = None;
    let (mut evaluations, mut restarts) = (0, 0);
    let starts = if config.warm_start.is_some() { vec![x0.clone()] } else { start_points(&x0) };
    for start in starts {
        let minimum = nelder_mead::minimize(&mut objective, &start, &options);
        evaluations += minimum.evaluations;
        restarts += minimum.restarts;
        if best.as_ref().is_none_or(|b| minimum.f < b.f) {
            best = Some(minimum);
        }
    }
    if let Some(e) = failure {
        return Err(e);
    }
    let mut minimum = best.expect("at least one start point");
    minimum.evaluations = evaluations;
    minimum.restarts = restarts;

    let values: Vec<(String, f64)> = specs
        .iter()
        .zip(&minimum.x)
        .map(|(s, &x)| (s.name.to_string(), s.kind.from_unconstrained(x)))
        .collect();
    let targets =
        prepared.iter().map(|p| report_target(p, &specs, &minimum.x, &metrics, config.kernels)).collect::<Result<Vec<_>, _>>()?;
    Ok(FitResult {
        values,
        objective: minimum.f,
        start_objective,
        evaluations: minimum.evaluations,
        restarts: minimum.restarts,
        converged: minimum.converged,
        metrics,
        targets,
        added,
    })
}

/// A parameter's starting value: its default, except [`FRONTEND_START_US`] for a front end
/// whose default is 0.
fn start_value(spec: &ParamSpec, defaults: &CostParams) -> f64 {
    let value = spec.get(defaults);
    if spec.name == FRONTEND_PARAM && value == 0.0 { FRONTEND_START_US } else { value }
}

/// Distance of the extra starting points from the defaults, in optimiser coordinates: a factor
/// of e^1.5 ≈ 4.5 on an overhead, and from 0.5 to 0.18 or 0.82 on an efficiency.
const START_SPREAD: f64 = 1.5;

/// How many starting points a fit searches from; each gets the full evaluation budget.
pub const START_POINTS: usize = 5;

/// The defaults, then four points around them: all coordinates up, all down, and the two
/// alternating patterns (one parameter up, the next down), which separate parameters that
/// trade against each other.
fn start_points(x0: &[f64]) -> Vec<Vec<f64>> {
    let shifted = |sign: &dyn Fn(usize) -> f64| x0.iter().enumerate().map(|(i, &x)| x + START_SPREAD * sign(i)).collect();
    let alternate = |i: usize| if i.is_multiple_of(2) { 1.0 } else { -1.0 };
    let starts = vec![
        x0.to_vec(),
        shifted(&|_| 1.0),
        shifted(&|_| -1.0),
        shifted(&alternate),
        shifted(&|i| -alternate(i)),
    ];
    debug_assert_eq!(starts.len(), START_POINTS);
    starts
}

/// Picks a target's fit points and reads their recorded values, checking that each exists and
/// is positive (a log-ratio needs both sides > 0).
fn prepare<'a>(target: &'a FitTarget, metrics: &[String]) -> Result<Prepared<'a>, Error> {
    let scenario = &target.scenario;
    let plan = &target.plan;
    let sweep = scenario.workload.points();
    if plan.block_of_point.len() != sweep.len() {
        return Err(Error::Recorded(format!(
            "{}: the plan maps {} sweep points to recorded blocks, but the sweep has {}",
            scenario.path.display(),
            plan.block_of_point.len(),
            sweep.len()
        )));
    }
    if let Some(&bad) = plan.block_of_point.iter().find(|&&b| b == 0 || b > plan.blocks.len()) {
        return Err(Error::Recorded(format!(
            "{}: block {bad} requested, but the file has {} blocks",
            plan.recorded.display(),
            plan.blocks.len()
        )));
    }
    if let Some(&missing) = plan.fit_blocks.iter().find(|b| !plan.block_of_point.contains(b)) {
        return Err(Error::Recorded(format!(
            "{}: fit block {missing} is not the block of any sweep point {:?}",
            scenario.path.display(),
            plan.block_of_point
        )));
    }
    let point_indices: Vec<usize> = (0..sweep.len())
        .filter(|_| !target.reported_only)
        .filter(|&i| plan.fit_blocks.is_empty() || plan.fit_blocks.contains(&plan.block_of_point[i]))
        .collect();
    let mut recorded = Vec::with_capacity(point_indices.len());
    for &i in &point_indices {
        let block = plan.block(i);
        let row = metrics
            .iter()
            .map(|key| match block.get(key) {
                Some(v) if v > 0.0 && v.is_finite() => Ok(Some(v)),
                // A recorded 0 (TPOT of one-token outputs, a rate printed as 0.00) says nothing
                // about relative error: that metric is left out at that point.
                Some(0.0) => Ok(None),
                Some(v) => Err(Error::Recorded(format!(
                    "{}: block {} (line {}): {key} = {v} cannot be fitted (the error is a log-ratio, so it needs a positive value)",
                    plan.recorded.display(),
                    plan.block_of_point[i],
                    block.line
                ))),
                // A run that recorded fewer figures names them in its [validation] metrics:
                // the others are not fitted there.
                None if scenario.validation.as_ref().is_some_and(|v| !v.metrics.contains(key)) => Ok(None),
                None => Err(Error::Recorded(format!(
                    "{}: block {} (line {}) has no {key:?}",
                    plan.recorded.display(),
                    plan.block_of_point[i],
                    block.line
                ))),
            })
            .collect::<Result<Vec<Option<f64>>, Error>>()?;
        recorded.push(row);
    }
    let points = point_indices.iter().map(|&i| sweep[i]).collect();
    Ok(Prepared { target, kernel_model: None, point_indices, points, recorded })
}

/// `metrics` at `points` of `scenario` (target `p` with a trial's values), priced by its kernel
/// profile (`kernels`: the prepared kernel model with the trial's engine time laid over it, or
/// one built for the trial) or the roofline.
fn simulate(p: &Prepared, scenario: &Scenario, points: &[SweepPoint], metrics: &[String], kernels: bool) -> Result<Vec<Vec<f64>>, Error> {
    if !kernels {
        return simulate_metrics(scenario, points, metrics);
    }
    match &p.kernel_model {
        Some(gpu) => {
            let cpu = Roofline::new(&scenario.model, &scenario.hardware.gpu, scenario.engine.tensor_parallel, &scenario.cost);
            simulate_metrics_with(scenario, &EngineTimeOverlay::new(gpu.as_ref(), cpu), points, metrics)
        }
        None => {
            let cost = crate::run::scenario_cost(scenario, false)?;
            simulate_metrics_with(scenario, cost.model.as_ref(), points, metrics)
        }
    }
}

/// `scenario` with the fitted parameters set to the physical values of coordinates `x`.
fn with_params(scenario: &Scenario, specs: &[&ParamSpec], x: &[f64]) -> Scenario {
    let mut s = scenario.clone();
    for (spec, &xi) in specs.iter().zip(x) {
        spec.set(&mut s.cost, spec.kind.from_unconstrained(xi));
    }
    s
}

/// Cauchy's loss of a log error e at scale c: c² ln(1 + e²/c²), which is e² for small errors and
/// grows only logarithmically beyond c.
pub fn robust_loss(squared_log_error: f64) -> f64 {
    let c2 = ROBUST_SCALE * ROBUST_SCALE;
    c2 * (squared_log_error / c2).ln_1p()
}

/// ln(simulated / recorded)², with a non-positive or non-finite simulated value (a run that
/// produced no tokens) made infinite so the optimiser moves away.
fn squared_log_ratio(simulated: f64, recorded: f64) -> f64 {
    if simulated > 0.0 && simulated.is_finite() { (simulated / recorded).ln().powi(2) } else { f64::INFINITY }
}

/// The objective at coordinates `x`.
fn evaluate(prepared: &[Prepared], specs: &[&ParamSpec], x: &[f64], metrics: &[String], kernels: bool, robust: bool) -> Result<f64, Error> {
    use rayon::prelude::*;
    // Targets simulate in parallel; their errors are summed in target order, so the objective
    // is the same at any thread count.
    let simulated: Vec<Vec<Vec<f64>>> = prepared
        .par_iter()
        .map(|p| simulate(p, &with_params(&p.target.scenario, specs, x), &p.points, metrics, kernels))
        .collect::<Result<_, _>>()?;
    let mut sum = 0.0;
    let mut count = 0usize;
    for (p, simulated) in prepared.iter().zip(simulated) {
        for (sim_row, rec_row) in simulated.iter().zip(&p.recorded) {
            for (&sim, rec) in sim_row.iter().zip(rec_row) {
                if let Some(rec) = *rec {
                    let squared = squared_log_ratio(sim, rec);
                    sum += if robust { robust_loss(squared) } else { squared };
                    count += 1;
                }
            }
        }
    }
    Ok(if count == 0 { 0.0 } else { sum / count as f64 })
}

/// `target` simulated at every sweep point with `values` (physical, named) in place, and compared
/// with its recorded blocks: how a run left out of a fit is judged.
pub fn judge(target: &FitTarget, values: &[(String, f64)], metrics: &[String], kernels: bool) -> Result<TargetFit, Error> {
    let specs = params::lookup_all(&values.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>())?;
    let x: Vec<f64> = specs.iter().zip(values).map(|(s, (_, v))| s.kind.to_unconstrained(*v)).collect();
    let mut p = prepare(target, metrics)?;
    // Every point is judged, none fitted.
    p.point_indices.clear();
    report_target(&p, &specs, &x, metrics, kernels)
}

/// Simulates every sweep point of a target with the fitted values and compares it with the
/// recorded blocks.
fn report_target(p: &Prepared, specs: &[&ParamSpec], x: &[f64], metrics: &[String], kernels: bool) -> Result<TargetFit, Error> {
    let scenario = with_params(&p.target.scenario, specs, x);
    let plan = &p.target.plan;
    let sweep = scenario.workload.points();
    let simulated = simulate(p, &scenario, &sweep, metrics, kernels)?;
    let points = sweep
        .iter()
        .zip(simulated)
        .enumerate()
        .map(|(i, (point, values))| {
            let block = plan.block(i);
            let metrics = metrics
                .iter()
                .zip(values)
                .filter_map(|(key, simulated)| {
                    block.get(key).map(|recorded| MetricComparison { key: key.clone(), recorded, simulated })
                })
                .collect();
            PointComparison {
                num_prompts: point.num_prompts,
                block: plan.block_of_point[i],
                fitted: p.point_indices.contains(&i),
                metrics,
            }
        })
        .collect();
    Ok(TargetFit {
        scenario: p.target.scenario.path.clone(),
        recorded: plan.recorded.clone(),
        fit_points: p.points.iter().map(|pt| pt.num_prompts).collect(),
        all_points: plan.fit_blocks.is_empty() && !p.target.reported_only,
        points,
    })
}

/// A profile that `[cost] profile = "…"` loads: `[provenance]` (what was fitted to what, and
/// the command that regenerates it) and `[cost]` with every parameter: the fitted values, and
/// `base`'s values for the rest (normally the first target's `[cost]`, where the fit started).
///
/// Byte-identical for identical inputs: no date, no wall-clock, no map iteration; floats are
/// written in Rust's shortest round-trip form, so loading the file gives back the exact `f64`s.
pub fn profile_toml(result: &FitResult, config: &FitConfig, base: &CostParams, command_line: &str) -> String {
    let fitted: Vec<&str> = result.values.iter().map(|(n, _)| n.as_str()).collect();
    let edges = result.range_edges();
    let unique = |f: &dyn Fn(&FitTarget) -> String| -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for t in &config.targets {
            let v = f(t);
            if !out.contains(&v) {
                out.push(v);
            }
        }
        out
    };
    let hardware = unique(&|t| format!("{} x{}", t.scenario.hardware.gpu.name, t.scenario.hardware.count));
    let policies = unique(&|t| t.scenario.engine.policy.name().to_string());
    let models = unique(&|t| t.scenario.model.name.clone());

    let mut s = String::new();
    let _ = writeln!(s, "# Cost profile written by `servesim fit`. Regenerate it with provenance.command_line.");
    let _ = writeln!(s, "# Load it from a scenario with [cost] profile = \"<this file>\".");
    let _ = writeln!(s);
    let _ = writeln!(s, "[provenance]");
    let _ = writeln!(s, "servesim_version = {}", string(env!("CARGO_PKG_VERSION")));
    let _ = writeln!(s, "command_line = {}", string(command_line));
    let _ = writeln!(s, "hardware = {}", string(&hardware.join(", ")));
    let _ = writeln!(s, "engine_policy = {}", string(&policies.join(", ")));
    let _ = writeln!(s, "model = {}", string(&models.join(", ")));
    let _ = writeln!(s, "objective = {}", string(if config.robust { "mean over (target, fit point, metric) of c^2 ln(1 + ln(simulated / recorded)^2 / c^2), c = ln 1.5" } else { "mean over (target, fit point, metric) of ln(simulated / recorded)^2" }));
    let _ = writeln!(s, "metrics = {}", string_array(result.metrics.iter().map(String::as_str)));
    let _ = writeln!(s, "fitted_parameters = {}", string_array(fitted.iter().copied()));
    let _ = writeln!(
        s,
        "fixed_parameters = {}",
        string_array(params::PARAMS.iter().map(|p| p.name).filter(|n| !fitted.contains(n)))
    );
    let _ = writeln!(s, "pinned_at_range_edge = {}", string_array(edges.iter().map(|(n, _, _)| n.as_str())));
    let _ = writeln!(
        s,
        "added_parameters = {}",
        string_array(result.added.iter().map(|(n, _)| n.as_str()))
    );
    let _ = writeln!(s, "objective_before = {}", float(result.start_objective));
    let _ = writeln!(s, "objective_after = {}", float(result.objective));
    let _ = writeln!(s, "evaluations = {}", result.evaluations);
    let _ = writeln!(s, "max_evaluations_per_start = {}", config.max_evaluations);
    let _ = writeln!(s, "start_points = {START_POINTS}");
    let _ = writeln!(s, "converged = {}", result.converged);
    for (target, fit) in config.targets.iter().zip(&result.targets) {
        let _ = writeln!(s);
        let _ = writeln!(s, "[[provenance.targets]]");
        let _ = writeln!(s, "scenario = {}", string(&target.scenario.path.display().to_string()));
        let _ = writeln!(s, "recorded = {}", string(&target.plan.recorded.display().to_string()));
        let _ = writeln!(s, "hardware = {}", string(&target.scenario.hardware.gpu.name));
        let _ = writeln!(s, "engine_policy = {}", string(target.scenario.engine.policy.name()));
        if target.scenario.workload.sweeps_rate() {
            let rates: Vec<String> = target.scenario.workload.request_rate.iter().map(|&r| float(r)).collect();
            let _ = writeln!(s, "request_rates = [{}]", rates.join(", "));
        }
        let _ = writeln!(s, "num_prompts_fitted = [{}]", fit.fit_points.iter().map(u32::to_string).collect::<Vec<_>>().join(", "));
        let held_out: Vec<String> =
            fit.points.iter().filter(|p| !p.fitted).map(|p| p.num_prompts.to_string()).collect();
        let _ = writeln!(s, "num_prompts_held_out = [{}]", held_out.join(", "));
        let blocks = |fitted: bool| {
            fit.points.iter().filter(|p| p.fitted == fitted).map(|p| p.block.to_string()).collect::<Vec<_>>().join(", ")
        };
        let _ = writeln!(s, "recorded_blocks_fitted = [{}]", blocks(true));
        let _ = writeln!(s, "recorded_blocks_held_out = [{}]", blocks(false));
        let _ = writeln!(s, "all_points_fitted = {}", fit.all_points);
    }
    let _ = writeln!(s);
    let _ = writeln!(s, "[cost]");
    for spec in &params::PARAMS {
        let value = result.values.iter().find(|(n, _)| n == spec.name).map_or_else(|| spec.get(base), |(_, v)| *v);
        let role = if fitted.contains(&spec.name) { "fitted" } else { "fixed" };
        let flag = match edges.iter().find(|(n, _, _)| n == spec.name) {
            Some((_, _, edge)) => format!("; FLAGGED: {edge}"),
            None => String::new(),
        };
        let _ = writeln!(s, "{} = {}  # {role}, {}{flag}", spec.name, float(value), spec.kind.describe());
    }
    s
}

/// A TOML basic string, escaped by the `toml` crate.
fn string(v: &str) -> String {
    toml::Value::String(v.to_string()).to_string()
}

fn string_array<'a>(items: impl Iterator<Item = &'a str>) -> String {
    format!("[{}]", items.map(string).collect::<Vec<_>>().join(", "))
}

/// A TOML float that parses back to exactly `v`: Rust's `{:?}` is the shortest round-trip form
/// (`0.45`, `4000.0`, `1e-5`, all valid TOML); non-finite values get TOML's spelling.
fn float(v: f64) -> String {
    if v.is_nan() {
        "nan".into()
    } else if v.is_infinite() {
        if v > 0.0 { "inf".into() } else { "-inf".into() }
    } else {
        format!("{v:?}")
    }
}

#[cfg(test)]
mod tests;
