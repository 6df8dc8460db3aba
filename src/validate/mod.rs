//! Comparing a simulation with a recorded benchmark: per sweep point and metric, the recorded
//! value, the simulated value and the relative error, then the median and worst error per metric.
//!
//! The comparison is by vLLM `--save-result` key (`output_throughput`, `mean_ttft_ms`, ...): the
//! recorded side comes from [`crate::metrics::recorded`], the simulated side from the same
//! [`crate::metrics::format::to_json`] that `simulate --out` writes, so both speak one vocabulary.

pub mod engine;
pub mod machine;

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use crate::Error;
use crate::metrics::LatencyMetric;
use crate::metrics::format::{ReportOptions, to_json};
use crate::metrics::sglang;
use crate::metrics::recorded::{RecordedBlock, parse_file};
use crate::cost::CostModel;
use crate::run::{cost_model, run_point, sim_config};
use crate::scenario::{DEFAULT_VALIDATION_METRICS, RecordedClock, Scenario, SweepPoint};

/// One metric at one sweep point.
#[derive(Clone, Debug, PartialEq)]
pub struct MetricComparison {
    pub key: String,
    pub recorded: f64,
    pub simulated: f64,
}

impl MetricComparison {
    /// (simulated − recorded) / recorded; see [`relative_error`].
    pub fn relative_error(&self) -> f64 {
        relative_error(self.simulated, self.recorded)
    }
}

/// (simulated − recorded) / recorded. 0 when both are 0; NaN (no figure) when only the recorded
/// value is 0: vLLM prints two decimals, so a recorded 0.00 (e.g. 0.0013 req/s for one 128k
/// prompt) says nothing about the relative size of the true value.
pub fn relative_error(simulated: f64, recorded: f64) -> f64 {
    if recorded == 0.0 {
        if simulated == 0.0 { 0.0 } else { f64::NAN }
    } else {
        (simulated - recorded) / recorded
    }
}

/// One sweep point against its recorded block.
#[derive(Clone, Debug, PartialEq)]
pub struct PointComparison {
    pub num_prompts: u32,
    /// 1-based block index in the recorded file.
    pub block: usize,
    /// Whether a fit may use this point (the others are held out).
    pub fitted: bool,
    pub metrics: Vec<MetricComparison>,
}

/// A whole scenario against its recorded file.
#[derive(Clone, Debug, PartialEq)]
pub struct Validation {
    pub scenario: String,
    pub recorded: PathBuf,
    pub points: Vec<PointComparison>,
}

/// What to compare: the recorded blocks of each sweep point and the metric keys.
#[derive(Clone, Debug)]
pub struct Plan {
    pub recorded: PathBuf,
    pub blocks: Vec<RecordedBlock>,
    /// Parallel to the scenario's sweep: the block index (1-based) of each point.
    pub block_of_point: Vec<usize>,
    pub metrics: Vec<String>,
    /// Blocks (1-based) a fit may use; the others are held out.
    pub fit_blocks: Vec<usize>,
}

impl Plan {
    /// The scenario's `[validation]`, or `recorded_override` with blocks taken in order.
    pub fn for_scenario(scenario: &Scenario, recorded_override: Option<&Path>) -> Result<Plan, Error> {
        let spec = scenario.validation.as_ref();
        let recorded = match (recorded_override, spec) {
            (Some(path), _) => path.to_path_buf(),
            (None, Some(spec)) => spec.recorded.clone(),
            (None, None) => {
                return Err(Error::Usage {
                    flag: "--recorded",
                    value: scenario.path.display().to_string(),
                    reason: "the scenario has no [validation] section; name the recorded file with --recorded".into(),
                });
            }
        };
        let blocks = parse_file(&recorded).map_err(|e| Error::Recorded(e.to_string()))?;
        let points = scenario.workload.num_prompts.len();
        let block_of_point = match spec {
            Some(spec) if recorded_override.is_none() => spec.blocks.clone(),
            _ => (1..=points).collect(),
        };
        if let Some(&missing) = block_of_point.iter().find(|&&b| b > blocks.len()) {
            return Err(Error::Recorded(format!(
                "{}: block {missing} requested, but the file has {} blocks",
                recorded.display(),
                blocks.len()
            )));
        }
        // The default metrics that no recorded block has are left out, so that a client that
        // reports fewer (SGLang 0.4.9 prints no TPOT) still compares; `servesim validate` names
        // them. A metric a scenario names, or that some blocks have, is still required.
        let metrics = spec.map_or_else(
            || {
                DEFAULT_VALIDATION_METRICS
                    .iter()
                    .filter(|m| blocks.iter().any(|b| b.get(m).is_some()))
                    .map(|m| m.to_string())
                    .collect()
            },
            |s| s.metrics.clone(),
        );
        if metrics.is_empty() {
            return Err(Error::Recorded(format!(
                "{}: the blocks have none of the metrics compared by default ({})",
                recorded.display(),
                DEFAULT_VALIDATION_METRICS.join(", ")
            )));
        }
        let fit_blocks = spec.map(|s| s.fit_blocks.clone()).unwrap_or_default();
        Ok(Plan { recorded, blocks, block_of_point, metrics, fit_blocks })
    }

    /// The recorded block of sweep point `i`.
    pub fn block(&self, i: usize) -> &RecordedBlock {
        &self.blocks[self.block_of_point[i] - 1]
    }
}

/// The percentiles the metric keys ask for (`p99_ttft_ms` → 99), so the simulated summary has
/// them.
pub fn percentiles_for(metrics: &[String]) -> Vec<f64> {
    let mut out: Vec<f64> = metrics
        .iter()
        .filter_map(|k| k.strip_prefix('p')?.split('_').next()?.parse::<f64>().ok())
        .collect();
    out.sort_by(f64::total_cmp);
    out.dedup();
    if out.is_empty() {
        out.push(99.0);
    }
    out
}

/// Simulates `points` of `scenario` priced by the roofline with its `[cost]` parameters (what
/// `servesim fit` varies, whatever kernel profile the scenario names), and reads `metrics` from
/// each summary, by vLLM JSON key.
pub fn simulate_metrics(scenario: &Scenario, points: &[SweepPoint], metrics: &[String]) -> Result<Vec<Vec<f64>>, Error> {
    simulate_metrics_with(scenario, &*cost_model(scenario), points, metrics)
}

/// [`simulate_metrics`] priced by `cost`.
pub fn simulate_metrics_with(
    scenario: &Scenario,
    cost: &dyn CostModel,
    points: &[SweepPoint],
    metrics: &[String],
) -> Result<Vec<Vec<f64>>, Error> {
    if !scenario.pools.is_empty() {
        // Recorded runs and fits are of one deployment; a cluster's pools would be priced as its first.
        return Err(crate::scenario::ScenarioError::Invalid {
            file: scenario.path.clone(),
            field: "cluster.pools".into(),
            value: format!("({} pools)", scenario.pools.len()),
            reason: "validate and fit compare one pool of replicas with recorded runs; use `servesim simulate`".into(),
        }
        .into());
    }
    let percentiles = percentiles_for(metrics);
    let opts = ReportOptions { percentile_metrics: LatencyMetric::ALL.to_vec(), percentiles: percentiles.clone(), ..ReportOptions::default() };
    let mut config = sim_config(scenario);
    // Times recorded from the engine's queue hold no API server: nor do the simulated ones.
    if scenario.validation.as_ref().is_some_and(|v| v.clock == RecordedClock::Engine) {
        config.frontend_overhead_ns = 0;
        config.frontend_per_token_ns = 0;
    }
    points
        .iter()
        .map(|point| {
            let result = run_point(scenario, &config, cost, point, &percentiles);
            let json = to_json(&result.summary, &opts);
            metrics
                .iter()
                .map(|key| {
                    // vLLM's keys, then the SGLang metrics vLLM has no key for (concurrency …).
                    json.get(key).and_then(|v| v.as_f64()).or_else(|| sglang::extra_metric(&result.summary, key)).ok_or_else(|| {
                        Error::Recorded(format!(
                            "metric {key:?} is not one servesim computes (a vLLM --save-result key, or SGLang's concurrency, input_throughput, total_output_tokens_retokenized)"
                        ))
                    })
                })
                .collect()
        })
        .collect()
}

/// Runs the scenario, priced as `simulate` prices it, and compares every sweep point with its
/// recorded block.
pub fn validate(scenario: &Scenario, plan: &Plan) -> Result<Validation, Error> {
    let points = scenario.workload.points();
    let cost = crate::run::scenario_cost(scenario, false)?;
    let simulated = simulate_metrics_with(scenario, cost.model.as_ref(), &points, &plan.metrics)?;
    let mut out = Vec::with_capacity(points.len());
    for (i, (point, values)) in points.iter().zip(simulated).enumerate() {
        let block = plan.block(i);
        let metrics = plan
            .metrics
            .iter()
            .zip(values)
            .map(|(key, simulated)| {
                let recorded = block.get(key).ok_or_else(|| {
                    Error::Recorded(format!(
                        "{}: block {} (line {}) has no {key:?}",
                        plan.recorded.display(),
                        plan.block_of_point[i],
                        block.line
                    ))
                })?;
                Ok(MetricComparison { key: key.clone(), recorded, simulated })
            })
            .collect::<Result<Vec<_>, Error>>()?;
        out.push(PointComparison {
            num_prompts: point.num_prompts,
            block: plan.block_of_point[i],
            fitted: plan.fit_blocks.contains(&plan.block_of_point[i]),
            metrics,
        });
    }
    Ok(Validation { scenario: scenario.name.clone(), recorded: plan.recorded.clone(), points: out })
}

/// Median and worst absolute relative error of one metric over a set of points.
#[derive(Clone, Debug, PartialEq)]
pub struct ErrorStats {
    pub key: String,
    pub points: usize,
    pub median_abs: f64,
    pub worst_abs: f64,
    /// `num_prompts` of the worst point.
    pub worst_at: u32,
}

/// Error statistics per metric over the points `include` selects.
pub fn error_stats(v: &Validation, include: impl Fn(&PointComparison) -> bool) -> Vec<ErrorStats> {
    let Some(first) = v.points.first() else { return Vec::new() };
    first
        .metrics
        .iter()
        .enumerate()
        .filter_map(|(m, metric)| {
            let mut errors: Vec<(f64, u32)> = v
                .points
                .iter()
                .filter(|p| include(p))
                .map(|p| (p.metrics[m].relative_error().abs(), p.num_prompts))
                .filter(|(e, _)| !e.is_nan())
                .collect();
            if errors.is_empty() {
                return None;
            }
            errors.sort_by(|a, b| a.0.total_cmp(&b.0));
            let n = errors.len();
            let median_abs = if n % 2 == 1 { errors[n / 2].0 } else { (errors[n / 2 - 1].0 + errors[n / 2].0) / 2.0 };
            let (worst_abs, worst_at) = errors[n - 1];
            Some(ErrorStats { key: metric.key.clone(), points: n, median_abs, worst_abs, worst_at })
        })
        .collect()
}

/// The human-readable table `servesim validate` prints.
pub fn render(v: &Validation) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "validation of {} against {}", v.scenario, v.recorded.display());
    for p in &v.points {
        let role = if p.fitted { "fitted" } else { "held out" };
        let _ = writeln!(s, "\nnum_prompts {} (block {}, {role})", p.num_prompts, p.block);
        let _ = writeln!(s, "  {:<26} {:>14} {:>14} {:>9}", "metric", "recorded", "simulated", "error");
        for m in &p.metrics {
            let error = m.relative_error();
            let error = if error.is_nan() { "n/a".to_string() } else { format!("{:.1}%", error * 100.0) };
            let _ = writeln!(s, "  {:<26} {:>14.2} {:>14.2} {:>9}", m.key, m.recorded, m.simulated, error);
        }
    }
    let any_fitted = v.points.iter().any(|p| p.fitted);
    let groups: Vec<(&str, Box<dyn Fn(&PointComparison) -> bool>)> = if any_fitted {
        vec![("held-out points", Box::new(|p: &PointComparison| !p.fitted)), ("fitted points", Box::new(|p: &PointComparison| p.fitted))]
    } else {
        vec![("all points", Box::new(|_: &PointComparison| true))]
    };
    for (name, include) in groups {
        let stats = error_stats(v, include);
        if stats.is_empty() {
            continue;
        }
        let _ = writeln!(s, "\nabsolute error over {name} ({}):", stats[0].points);
        let _ = writeln!(s, "  {:<26} {:>9} {:>9}  {}", "metric", "median", "worst", "worst at num_prompts");
        for st in stats {
            let _ = writeln!(
                s,
                "  {:<26} {:>8.1}% {:>8.1}%  {}",
                st.key,
                st.median_abs * 100.0,
                st.worst_abs * 100.0,
                st.worst_at
            );
        }
    }
    s
}

/// A Markdown summary of several validations: per scenario and metric, the median and worst
/// absolute error over held-out and fitted points.
pub fn summary_markdown<'a>(validations: impl IntoIterator<Item = (&'a Path, &'a Validation)>) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "# Simulated against recorded\n");
    let _ = writeln!(s, "Regenerate with `cargo run --release -- validate scenarios/recorded/*.toml --out reports/recorded`.\n");
    let _ = writeln!(s, "| scenario | points | metric | median abs. error | worst abs. error (at num_prompts) |");
    let _ = writeln!(s, "| --- | --- | --- | ---: | ---: |");
    for (path, v) in validations {
        for (role, fitted) in [("held out", false), ("fitted", true)] {
            for st in error_stats(v, |p| p.fitted == fitted) {
                let _ = writeln!(
                    s,
                    "| `{}` | {role} ({}) | {} | {:.1}% | {:.1}% ({}) |",
                    path.display(),
                    st.points,
                    st.key,
                    st.median_abs * 100.0,
                    st.worst_abs * 100.0,
                    st.worst_at
                );
            }
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_error_handles_zero() {
        assert_eq!(relative_error(0.0, 0.0), 0.0);
        assert!(relative_error(1.0, 0.0).is_nan(), "a recorded 0.00 gives no relative figure");
        assert!((relative_error(110.0, 100.0) - 0.1).abs() < 1e-12);
    }

    #[test]
    fn percentiles_come_from_metric_keys() {
        let keys: Vec<String> = ["mean_ttft_ms", "p99_itl_ms", "p50_tpot_ms", "p99_ttft_ms", "p99.9_e2el_ms"].iter().map(|s| s.to_string()).collect();
        assert_eq!(percentiles_for(&keys), vec![50.0, 99.0, 99.9]);
    }

    #[test]
    fn stats_take_median_and_worst_over_selected_points() {
        let point = |n: u32, fitted: bool, sim: f64| PointComparison {
            num_prompts: n,
            block: 1,
            fitted,
            metrics: vec![MetricComparison { key: "x".into(), recorded: 100.0, simulated: sim }],
        };
        let v = Validation {
            scenario: "t".into(),
            recorded: "r".into(),
            points: vec![point(1, true, 150.0), point(2, false, 90.0), point(4, false, 120.0), point(8, false, 101.0)],
        };
        let held_out = error_stats(&v, |p| !p.fitted);
        assert_eq!(held_out.len(), 1);
        assert!((held_out[0].median_abs - 0.10).abs() < 1e-12);
        assert!((held_out[0].worst_abs - 0.20).abs() < 1e-12);
        assert_eq!(held_out[0].worst_at, 4);
        assert!(render(&v).contains("held-out points (3)"));
    }
}
