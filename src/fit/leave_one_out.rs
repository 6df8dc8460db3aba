//! Leave-one-run-out: each run predicted by a fit to all the others, so that every error in
//! the table is a prediction, not a fit of the run itself.
//!
//! ```text
//!  fit to every run ──► values θ ──────────────────────────┐ (warm start)
//!  for each run i (in parallel):  fit to the runs but i, from θ ──► θᵢ ──► simulate run i ──► error
//!  table: per run, then the median |error| per engine release and GPU, and over all
//! ```
//!
//! Folds start from the fit to every run and search from there alone: the runs but one are
//! nearly the same data, so their optimum lies near it, and a fold costs a few dozen
//! evaluations rather than a full search from five starting points.

use rayon::prelude::*;

use super::{FitConfig, FitResult, TargetFit, fit, judge};
use crate::Error;

/// One run, predicted by the fit to the others.
#[derive(Clone, Debug)]
pub struct HeldOut {
    /// The scenario's name.
    pub run: String,
    pub gpu: String,
    /// The engine and its release, e.g. `vllm 0.15.1`.
    pub engine: String,
    /// The values fitted without it.
    pub values: Vec<(String, f64)>,
    /// Its every point, judged with those values.
    pub judged: TargetFit,
}

impl HeldOut {
    /// The relative error of `metric` (its first point's), if the run recorded it.
    pub fn error(&self, metric: &str) -> Option<f64> {
        self.judged.points.first()?.metrics.iter().find(|m| m.key == metric).map(|m| m.relative_error())
    }
}

/// Every run of `config` predicted by a fit to the others, starting from `full`'s values, each
/// fold limited to `max_evaluations`. Deterministic: folds are independent, and kept in run order.
pub fn leave_one_out(config: &FitConfig, full: &FitResult, max_evaluations: usize) -> Result<Vec<HeldOut>, Error> {
    if config.targets.len() < 2 {
        return Err(Error::Usage {
            flag: "--leave-one-out",
            value: format!("{} scenario", config.targets.len()),
            reason: "needs at least two runs: each is predicted by a fit to the others".into(),
        });
    }
    let names: Vec<String> = full.values.iter().map(|(n, _)| n.clone()).collect();
    let start: Vec<f64> = full.values.iter().map(|(_, v)| *v).collect();
    (0..config.targets.len())
        .into_par_iter()
        .map(|i| {
            let mut fold = config.clone();
            let left_out = fold.targets.remove(i);
            // The parameters the full fit ended with, added ones included, from its values.
            fold.params = names.clone();
            fold.frontend_on_bursts = false;
            fold.warm_start = Some(start.clone());
            fold.max_evaluations = max_evaluations;
            fold.metrics = full.metrics.clone();
            let result = fit(&fold)?;
            let judged = judge(&left_out, &result.values, &full.metrics, config.kernels)?;
            let s = &left_out.scenario;
            let engine = match (&s.engine.profile, s.engine.version) {
                (Some(p), Some(v)) => format!("{} {v}", p.engine),
                _ => s.engine.policy.name().to_string(),
            };
            Ok(HeldOut { run: s.name.clone(), gpu: s.hardware.gpu.name.clone(), engine, values: result.values, judged })
        })
        .collect()
}

/// The median of `values` (the mean of the middle two of an even count); `None` when empty.
fn median(values: &mut [f64]) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    values.sort_by(f64::total_cmp);
    let n = values.len();
    Some(if n % 2 == 1 { values[n / 2] } else { (values[n / 2 - 1] + values[n / 2]) / 2.0 })
}

/// A signed percentage, or `—` where the run recorded no such figure.
fn percent(error: Option<f64>) -> String {
    error.map_or("—".to_string(), |e| format!("{:+.1}%", e * 100.0))
}

/// The median |error| of each metric over `runs`, as table cells, with how many runs each has.
fn median_cells(runs: &[&HeldOut], metrics: &[String]) -> Vec<String> {
    metrics
        .iter()
        .map(|m| {
            let mut errors: Vec<f64> = runs.iter().filter_map(|r| r.error(m)).map(f64::abs).collect();
            let n = errors.len();
            median(&mut errors).map_or("—".to_string(), |e| format!("{:.1}% ({n})", e * 100.0))
        })
        .collect()
}

/// What the docs print: every run's held-out error per metric, then the median absolute
/// errors per engine release and GPU and over all runs (each cell says over how many runs).
pub fn table_markdown(held: &[HeldOut], metrics: &[String]) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    let header = metrics.join(" | ");
    let _ = writeln!(s, "| run | GPU | engine | {header} |");
    let _ = writeln!(s, "| --- | --- | --- |{}", " ---: |".repeat(metrics.len()));
    for h in held {
        let cells: Vec<String> = metrics.iter().map(|m| percent(h.error(m))).collect();
        let _ = writeln!(s, "| `{}` | {} | {} | {} |", h.run, h.gpu, h.engine, cells.join(" | "));
    }
    let _ = writeln!(s);
    let _ = writeln!(s, "Median absolute error, leave-one-run-out (over how many runs):");
    let _ = writeln!(s);
    let _ = writeln!(s, "| engine | GPU | runs | {header} |");
    let _ = writeln!(s, "| --- | --- | ---: |{}", " ---: |".repeat(metrics.len()));
    let mut groups: Vec<(String, String)> = held.iter().map(|h| (h.engine.clone(), h.gpu.clone())).collect();
    groups.sort();
    groups.dedup();
    for (engine, gpu) in &groups {
        let runs: Vec<&HeldOut> = held.iter().filter(|h| &h.engine == engine && &h.gpu == gpu).collect();
        let _ = writeln!(s, "| {engine} | {gpu} | {} | {} |", runs.len(), median_cells(&runs, metrics).join(" | "));
    }
    let all: Vec<&HeldOut> = held.iter().collect();
    let _ = writeln!(s, "| **all** | | {} | {} |", all.len(), median_cells(&all, metrics).join(" | "));
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::validate::{MetricComparison, PointComparison};

    fn held(run: &str, engine: &str, errors: &[(&str, f64)]) -> HeldOut {
        let metrics =
            errors.iter().map(|(k, e)| MetricComparison { key: k.to_string(), recorded: 100.0, simulated: 100.0 * (1.0 + e) }).collect();
        HeldOut {
            run: run.into(),
            gpu: "H100-SXM".into(),
            engine: engine.into(),
            values: vec![],
            judged: TargetFit {
                scenario: run.into(),
                recorded: "r.json".into(),
                fit_points: vec![],
                all_points: false,
                points: vec![PointComparison { num_prompts: 1, block: 1, fitted: false, metrics }],
            },
        }
    }

    #[test]
    fn the_table_gives_each_run_and_the_medians_by_engine_and_gpu() {
        let metrics = vec!["output_throughput".to_string(), "mean_ttft_ms".to_string()];
        let runs = vec![
            held("a", "vllm 0.15.1", &[("output_throughput", 0.1), ("mean_ttft_ms", -0.3)]),
            held("b", "vllm 0.15.1", &[("output_throughput", -0.2)]),
            held("c", "vllm 0.19.0", &[("output_throughput", 0.05), ("mean_ttft_ms", 0.1)]),
        ];
        let table = table_markdown(&runs, &metrics);
        assert!(table.contains("| `a` | H100-SXM | vllm 0.15.1 | +10.0% | -30.0% |"), "{table}");
        assert!(table.contains("| `b` | H100-SXM | vllm 0.15.1 | -20.0% | — |"), "{table}");
        // Medians of |error|: 0.15.1 throughput over two runs (15%), TTFT over the one that has it.
        assert!(table.contains("| vllm 0.15.1 | H100-SXM | 2 | 15.0% (2) | 30.0% (1) |"), "{table}");
        assert!(table.contains("| **all** | | 3 | 10.0% (3) | 20.0% (2) |"), "{table}");
    }

    #[test]
    fn medians_of_odd_and_even_counts() {
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&mut [4.0, 1.0, 2.0, 3.0]), Some(2.5));
        assert_eq!(median(&mut []), None);
    }
}
