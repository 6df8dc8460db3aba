//! A series of user results → fit targets: the base scenario (model, hardware, engine, dataset)
//! with its sweep replaced by the series' points, one request rate per point.
//!
//! ```text
//!  base.toml + [point 1 … point n] ──group by (max_concurrency, burstiness)──► one scenario per
//!  group: num_prompts = [...], request_rate = [...], token totals = [...]; [validation] dropped
//!        │
//!        ▼
//!  FitTarget { scenario, plan: one block per point, fit_blocks = the points not held out }
//! ```
//!
//! A scenario's client has one concurrency cap and one burstiness for its whole sweep, so points
//! that differ in those become separate scenarios; rates and prompt counts vary per point.

use std::path::{Path, PathBuf};

use super::FitTarget;
use super::results::{ResultPoint, Series};
use crate::Error;
use crate::scenario::Scenario;
use crate::validate::Plan;

/// Targets for `series`, built on the scenario at `base` with `overrides` (`--set`) applied.
/// `hold_out` holds 1-based point numbers (in reading order) that are reported but not fitted;
/// every point fitted must carry each of `metrics`.
pub fn targets(base: &Path, overrides: &[String], series: &Series, hold_out: &[usize], metrics: &[String]) -> Result<Vec<FitTarget>, Error> {
    let n = series.points.len();
    if let Some(&bad) = hold_out.iter().find(|&&i| i == 0 || i > n) {
        return Err(Error::Usage { flag: "--hold-out", value: bad.to_string(), reason: format!("points are numbered 1..={n}") });
    }
    if hold_out.len() >= n && (1..=n).all(|i| hold_out.contains(&i)) {
        return Err(Error::Usage { flag: "--hold-out", value: format!("{hold_out:?}"), reason: "holds out every point: nothing is left to fit".into() });
    }
    for (i, point) in series.points.iter().enumerate() {
        if hold_out.contains(&(i + 1)) {
            continue;
        }
        for key in metrics {
            match point.metrics.get(key) {
                Some(v) if *v >= 0.0 && v.is_finite() => {}
                Some(v) => {
                    return Err(Error::Recorded(format!(
                        "{}: {key} = {v} cannot be fitted (the error is a log-ratio, so it needs a value ≥ 0)",
                        point.source
                    )));
                }
                None => {
                    return Err(Error::Recorded(format!(
                        "{}: no {key}, which the fit compares (choose others with --metrics)",
                        point.source
                    )));
                }
            }
        }
    }

    let text = std::fs::read_to_string(base).map_err(|source| crate::scenario::ScenarioError::Io { file: base.to_path_buf(), source })?;
    let base_table: toml::Table = toml::from_str(&text).map_err(|e| Error::Recorded(format!("{}: {e}", base.display())))?;

    let mut groups: Vec<(Option<u32>, u64, Vec<usize>)> = Vec::new();
    for (i, p) in series.points.iter().enumerate() {
        let key = (p.max_concurrency, p.burstiness.to_bits());
        match groups.iter_mut().find(|(c, b, _)| (*c, *b) == key) {
            Some((_, _, members)) => members.push(i),
            None => groups.push((key.0, key.1, vec![i])),
        }
    }
    groups
        .into_iter()
        .map(|(_, _, members)| {
            let points: Vec<&ResultPoint> = members.iter().map(|&i| &series.points[i]).collect();
            let scenario = group_scenario(&base_table, base, overrides, &points)?;
            let fitted: Vec<usize> = (1..=members.len()).filter(|k| !hold_out.contains(&(members[k - 1] + 1))).collect();
            let mut files: Vec<String> = Vec::new();
            for p in &points {
                let file = p.source.split(" line ").next().unwrap_or(&p.source).to_string();
                if !files.contains(&file) {
                    files.push(file);
                }
            }
            let plan = Plan {
                recorded: PathBuf::from(files.join(", ")),
                blocks: points.iter().enumerate().map(|(k, p)| p.to_block(k + 1)).collect(),
                block_of_point: (1..=members.len()).collect(),
                metrics: metrics.to_vec(),
                // Empty means every point is fitted (the report says nothing was held out).
                fit_blocks: if fitted.len() == members.len() { Vec::new() } else { fitted.clone() },
            };
            Ok(FitTarget { scenario, plan, reported_only: fitted.is_empty() })
        })
        .collect()
}

/// The base scenario whose sweep is `points`: their prompt counts, rates and (where every point
/// has them) token totals, their client's burstiness and concurrency cap; `[validation]` is
/// dropped, since the series is the recorded run.
fn group_scenario(base_table: &toml::Table, base: &Path, overrides: &[String], points: &[&ResultPoint]) -> Result<Scenario, Error> {
    let mut table = base_table.clone();
    table.remove("validation");
    let workload = table.entry("workload").or_insert_with(|| toml::Value::Table(toml::Table::new()));
    let toml::Value::Table(workload) = workload else {
        return Err(Error::Recorded(format!("{}: [workload] is not a table", base.display())));
    };
    let array = |values: Vec<toml::Value>| toml::Value::Array(values);
    workload.insert("num_prompts".into(), array(points.iter().map(|p| toml::Value::Integer(p.num_prompts as i64)).collect()));
    workload.insert("request_rate".into(), array(points.iter().map(|p| toml::Value::Float(p.request_rate)).collect()));
    workload.insert("burstiness".into(), toml::Value::Float(points[0].burstiness));
    match points[0].max_concurrency {
        Some(c) => workload.insert("max_concurrency".into(), toml::Value::Integer(c as i64)),
        None => workload.remove("max_concurrency"),
    };
    for (key, total) in [
        ("input_tokens_total", points.iter().map(|p| p.input_tokens_total).collect::<Option<Vec<u64>>>()),
        ("output_tokens_total", points.iter().map(|p| p.output_tokens_total).collect::<Option<Vec<u64>>>()),
    ] {
        // The base's totals belong to its own sweep; a total known for only some points cannot
        // be stated per point, so then the dataset's sampled lengths stand.
        workload.remove(key);
        if let Some(list) = total {
            let values = list.into_iter().map(|t| i64::try_from(t).map(toml::Value::Integer)).collect::<Result<Vec<_>, _>>();
            if let Ok(values) = values {
                workload.insert(key.into(), array(values));
            }
        }
    }
    let text = toml::to_string(&table).map_err(|e| Error::Recorded(format!("{}: {e}", base.display())))?;
    Scenario::from_toml_str(&text, base, overrides).map_err(|e| {
        let first = points.first().map_or("", |p| p.source.as_str());
        Error::Recorded(format!("{e}\n  (the sweep comes from the results, {} point(s) from {first} on)", points.len()))
    })
}
