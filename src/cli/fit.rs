//! `servesim fit`: named cost-model parameters fitted to recorded runs, written as a profile.
//!
//! Two ways to say what was recorded: scenarios with `[validation]` (a recorded text block per
//! sweep point), or one scenario plus `--results` files as benchmark clients write them (vLLM's
//! `--save-result` JSON, one per rate; `servesim bench --save-result`; a CSV of results), whose
//! points become the scenario's sweep.

use std::path::PathBuf;

use clap::Args;

use super::flags::{comma_list, positive_integers};
use crate::Error;
use crate::fit::{FitResult, FitTarget, results, series};
use crate::scenario::Scenario;
use crate::validate::{Validation, error_stats};

#[derive(Debug, Args)]
pub struct FitArgs {
    /// Scenario files with `[validation]`, whose `fit_blocks` are what is fitted; with
    /// `--results`, one scenario giving the model, hardware, engine and dataset.
    #[arg(required = true)]
    pub scenarios: Vec<PathBuf>,
    /// Benchmark results to fit instead of the scenario's `[validation]`: vLLM `--save-result`
    /// JSON files (one per rate, as its sweeps write them), `servesim bench --save-result` files,
    /// or CSV tables (num_prompts, request_rate, max_concurrency, input_len, output_len, and
    /// metric columns named as vLLM saves them). The points, in the order read, are the sweep.
    #[arg(long, num_args = 1.., value_name = "FILE")]
    pub results: Vec<PathBuf>,
    /// With `--results`: comma-separated point numbers (1-based, in the order read) to hold
    /// out: simulated and reported with the fitted values, never fitted.
    #[arg(long, value_name = "LIST", requires = "results")]
    pub hold_out: Option<String>,
    /// Comma-separated cost parameters to fit (the rest keep each scenario's values).
    #[arg(long, value_name = "LIST")]
    pub params: String,
    /// Comma-separated vLLM metric keys whose relative error is minimised.
    #[arg(long, default_value = "output_throughput,mean_tpot_ms,mean_ttft_ms", value_name = "LIST")]
    pub metrics: String,
    /// Most objective evaluations per starting point (the fit searches from 5; each evaluation
    /// simulates every fitted point once).
    #[arg(long, default_value_t = 3000)]
    pub max_evals: usize,
    /// Do not add frontend_overhead_us to the fitted parameters when a fitted point is a burst
    /// (request_rate = inf); by default it is added, since a burst is what identifies it.
    #[arg(long)]
    pub no_frontend_on_bursts: bool,
    /// Price steps with each scenario's kernel profile (the bundled one for its GPU, or the one
    /// it names), as `simulate` does, instead of the roofline: engine time fitted on top of
    /// kernels that stay as measured.
    #[arg(long)]
    pub kernels: bool,
    /// Weigh each error by Cauchy's loss at ±50% rather than its square, so that a run the
    /// model cannot reproduce (say, one that saturates only in simulation) does not outweigh
    /// the others.
    #[arg(long)]
    pub robust: bool,
    /// Also predict each scenario's run from a fit to the others (leave-one-run-out), and print
    /// each one's error and the median errors per engine release and GPU.
    #[arg(long)]
    pub leave_one_out: bool,
    /// With --leave-one-out: most objective evaluations per fold (each starts from the fit to
    /// every run).
    #[arg(long, default_value_t = 60, value_name = "N")]
    pub fold_evals: usize,
    /// With --leave-one-out: also write its table (markdown) to FILE.
    #[arg(long, value_name = "FILE", requires = "leave_one_out")]
    pub table: Option<PathBuf>,
    /// Also write the fitted engine-time values into this engine profile (a file of
    /// calibration/engine/), each with the command as its source; its other keys are kept.
    /// Repeatable: releases that run the same CPU code but hide a different share of it
    /// (`cpu_overlap`) take the same values.
    #[arg(long, value_name = "FILE")]
    pub engine_profile: Vec<PathBuf>,
    /// Where to write the profile (TOML with provenance).
    #[arg(long, value_name = "FILE")]
    pub out: PathBuf,
    /// Override a scenario field in every scenario (repeatable).
    #[arg(long = "set", value_name = "FIELD=VALUE")]
    pub set: Vec<String>,
}

pub(super) fn run(args: FitArgs) -> Result<(), Error> {
    super::flags::output_file("--out", &args.out)?;
    let metrics = comma_list(&args.metrics);
    let targets = if args.results.is_empty() {
        let mut targets = Vec::new();
        for path in &args.scenarios {
            let scenario = Scenario::load(path, &args.set)?;
            let plan = crate::validate::Plan::for_scenario(&scenario, None)?;
            targets.push(FitTarget { scenario, plan, reported_only: false });
        }
        targets
    } else {
        results_targets(&args, &metrics)?
    };
    let config = crate::fit::FitConfig {
        targets,
        params: comma_list(&args.params),
        metrics,
        max_evaluations: args.max_evals,
        frontend_on_bursts: !args.no_frontend_on_bursts,
        kernels: args.kernels,
        warm_start: None,
        robust: args.robust,
    };
    if let Some(path) = &args.table {
        super::flags::output_file("--table", path)?;
    }
    let result = crate::fit::fit(&config)?;
    // The command line, minus the binary's path, regenerates the profile.
    let command_line = std::iter::once("servesim".to_string()).chain(std::env::args_os().skip(1).map(|a| a.to_string_lossy().into_owned())).collect::<Vec<_>>().join(" ");
    let held_out = if args.leave_one_out {
        Some(crate::fit::leave_one_out::leave_one_out(&config, &result, args.fold_evals)?)
    } else {
        None
    };
    let base = config.targets[0].scenario.cost.clone();
    let text = crate::fit::profile_toml(&result, &config, &base, &command_line);
    if let Some(dir) = args.out.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|source| Error::Output { path: dir.to_path_buf(), source })?;
    }
    std::fs::write(&args.out, text).map_err(|source| Error::Output { path: args.out.clone(), source })?;
    eprint!("{}", summary(&result));
    eprintln!("wrote {}", args.out.display());
    if let Some(held) = &held_out {
        let table = crate::fit::leave_one_out::table_markdown(held, &result.metrics);
        println!("{table}");
        if let Some(path) = &args.table {
            std::fs::write(path, &table).map_err(|source| Error::Output { path: path.clone(), source })?;
            eprintln!("wrote {}", path.display());
        }
    }
    let source = format!("fitted on {} recorded runs by `{command_line}`", config.targets.len());
    for path in &args.engine_profile {
        crate::fit::engine_profile::rewrite(path, &result.values, &source)?;
        eprintln!("wrote {}", path.display());
    }
    Ok(())
}

/// One scenario and `--results`: the files read into a series, numbered as `--hold-out` counts.
fn results_targets(args: &FitArgs, metrics: &[String]) -> Result<Vec<FitTarget>, Error> {
    let [base] = args.scenarios.as_slice() else {
        return Err(Error::Usage {
            flag: "--results",
            value: format!("{} scenarios", args.scenarios.len()),
            reason: "with --results, name one scenario (the model, hardware, engine and dataset the results were taken on)".into(),
        });
    };
    // Loaded first so that a broken base scenario is reported as itself, with its line.
    let scenario = Scenario::load(base, &args.set)?;
    let rates = &scenario.workload.request_rate;
    let single_rate = rates.windows(2).all(|w| w[0].to_bits() == w[1].to_bits()).then(|| rates[0]);
    let series = results::read_series(&args.results, results::Defaults { request_rate: single_rate })?;
    let hold_out: Vec<usize> = match &args.hold_out {
        Some(list) => positive_integers("--hold-out", list)?.into_iter().map(|n| n as usize).collect(),
        None => Vec::new(),
    };
    for note in &series.notes {
        eprintln!("note: {note}");
    }
    for (i, p) in series.points.iter().enumerate() {
        let role = if hold_out.contains(&(i + 1)) { "held out" } else { "fitted" };
        let concurrency = p.max_concurrency.map_or("-".to_string(), |c| c.to_string());
        eprintln!(
            "point {:>3}: num_prompts {:>6}  request_rate {:>7}  max_concurrency {:>5}  {role:<8}  {}",
            i + 1,
            p.num_prompts,
            p.request_rate,
            concurrency,
            p.source
        );
    }
    series::targets(base, &args.set, &series, &hold_out, metrics)
}

/// What `fit` prints: the objective, the values (flagged where at an end of their range), and
/// the median and worst error over held-out and fitted points of each target.
fn summary(result: &FitResult) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    let _ = writeln!(s, "objective {:.6} → {:.6} in {} evaluations", result.start_objective, result.objective, result.evaluations);
    for (name, why) in &result.added {
        let _ = writeln!(s, "  {name} fitted too: {why}");
    }
    let edges = result.range_edges();
    for (name, value) in &result.values {
        match edges.iter().find(|(n, _, _)| n == name) {
            Some((_, _, edge)) => {
                let _ = writeln!(s, "  {name} = {value}  FLAGGED: {edge}; the model lacks a mechanism the data shows");
            }
            None => {
                let _ = writeln!(s, "  {name} = {value}");
            }
        }
    }
    for target in &result.targets {
        let validation =
            Validation { scenario: target.scenario.display().to_string(), recorded: target.recorded.clone(), points: target.points.clone() };
        for (role, fitted) in [("held out", false), ("fitted", true)] {
            for st in error_stats(&validation, |p| p.fitted == fitted) {
                let _ = writeln!(
                    s,
                    "  {} {role} ({} points): {:<20} median {:5.1}%  worst {:5.1}%",
                    target.scenario.display(),
                    st.points,
                    st.key,
                    st.median_abs * 100.0,
                    st.worst_abs * 100.0
                );
            }
        }
    }
    s
}
