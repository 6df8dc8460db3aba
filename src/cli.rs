//! The command line: clap definitions (raw arguments) → validated configuration → run.
//!
//! Following ripgrep's split, nothing here simulates anything: it turns flags into a
//! [`SimulateConfig`] whose every field is valid, and [`run`] hands that to the library.

use std::io::Write;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::Error;
use crate::metrics::LatencyMetric;
use crate::metrics::format::{ReportLayout, ReportOptions, write_report};
use crate::run::{self, output};
use crate::scenario::Scenario;

#[derive(Debug, Parser)]
#[command(name = "servesim", version, about = "Deterministic discrete-event simulation of LLM serving")]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Simulate a scenario and print vLLM `benchmark_serving`-style results for each sweep point.
    Simulate(SimulateArgs),
    /// Compare scenarios with the recorded benchmark runs they name in `[validation]`.
    Validate(ValidateArgs),
    /// Fit named cost-model parameters to recorded runs and write a profile.
    Fit(FitArgs),
    /// Draw charts (PNG, SVG) and a self-contained index.html from `simulate --out` directories.
    Report(ReportArgs),
}

#[derive(Debug, Args)]
pub struct ReportArgs {
    /// Directories written by `simulate --out` (summary.json, requests.csv, timeline.csv,
    /// itl.csv); each is one series on the sweep charts.
    #[arg(required = true, value_name = "RUN_DIR")]
    pub runs: Vec<PathBuf>,
    /// Directory for the charts and index.html (created).
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
    /// Recorded results (vLLM text blocks or JSON) to overlay; its blocks are matched in order
    /// to the sweep points of the run directories in order.
    #[arg(long, value_name = "FILE")]
    pub recorded: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct ValidateArgs {
    /// Scenario files; each names its recorded file and blocks in `[validation]`.
    #[arg(required = true)]
    pub scenarios: Vec<PathBuf>,
    /// Compare with this recorded file instead (its blocks in order, one per sweep point).
    #[arg(long, value_name = "FILE")]
    pub recorded: Option<PathBuf>,
    /// Also write each comparison to DIR/<scenario>.txt and a summary to DIR/README.md.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Override a scenario field in every scenario (repeatable).
    #[arg(long = "set", value_name = "FIELD=VALUE")]
    pub set: Vec<String>,
}

#[derive(Debug, Args)]
pub struct FitArgs {
    /// Scenario files with `[validation]`; their `fit_blocks` are what is fitted.
    #[arg(required = true)]
    pub scenarios: Vec<PathBuf>,
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
    /// Where to write the profile (TOML with provenance).
    #[arg(long, value_name = "FILE")]
    pub out: PathBuf,
    /// Override a scenario field in every scenario (repeatable).
    #[arg(long = "set", value_name = "FIELD=VALUE")]
    pub set: Vec<String>,
}

#[derive(Debug, Args)]
pub struct SimulateArgs {
    /// Scenario file (TOML).
    pub scenario: PathBuf,
    /// Directory for summary.json, requests.csv and timeline.csv.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Override a scenario field, e.g. `--set engine.max_num_seqs=128` (repeatable).
    #[arg(long = "set", value_name = "FIELD=VALUE")]
    pub set: Vec<String>,
    /// Override the workload seed.
    #[arg(long)]
    pub seed: Option<u64>,
    /// `current` (newer vLLM: failed requests, peak lines) or `legacy` (vLLM 0.6.x).
    #[arg(long, default_value = "current", value_name = "LAYOUT")]
    pub report_layout: String,
    /// Comma-separated percentiles to report, as vLLM's flag (e.g. `50,90,99`).
    #[arg(long, default_value = "99", value_name = "LIST")]
    pub metric_percentiles: String,
    /// Comma-separated metrics that get percentiles: ttft, tpot, itl, e2el.
    #[arg(long, default_value = "ttft,tpot,itl", value_name = "LIST")]
    pub percentile_metrics: String,
}

/// A fully validated `simulate` invocation.
#[derive(Debug)]
pub struct SimulateConfig {
    pub scenario: Scenario,
    pub out: Option<PathBuf>,
    pub report: ReportOptions,
}

impl SimulateArgs {
    pub fn validate(self) -> Result<SimulateConfig, Error> {
        let layout = ReportLayout::parse(&self.report_layout).ok_or_else(|| Error::Usage {
            flag: "--report-layout",
            value: self.report_layout.clone(),
            reason: "expected `current` or `legacy`".into(),
        })?;
        let percentiles = parse_percentiles(&self.metric_percentiles)?;
        let percentile_metrics = parse_metrics(&self.percentile_metrics)?;
        let mut overrides = self.set;
        if let Some(seed) = self.seed {
            overrides.push(format!("workload.seed={seed}"));
        }
        let scenario = Scenario::load(&self.scenario, &overrides)?;
        let report = ReportOptions {
            layout,
            percentile_metrics,
            percentiles,
            max_concurrency: scenario.workload.max_concurrency,
            request_rate: scenario.workload.request_rate,
        };
        Ok(SimulateConfig { scenario, out: self.out, report })
    }
}

fn parse_percentiles(text: &str) -> Result<Vec<f64>, Error> {
    let bad = |reason: &str| Error::Usage { flag: "--metric-percentiles", value: text.into(), reason: reason.into() };
    let mut out = Vec::new();
    for item in text.split(',') {
        let p: f64 = item.trim().parse().map_err(|_| bad("expected comma-separated numbers"))?;
        if !(p > 0.0 && p < 100.0) {
            return Err(bad("percentiles must lie strictly between 0 and 100"));
        }
        out.push(p);
    }
    Ok(out)
}

fn parse_metrics(text: &str) -> Result<Vec<LatencyMetric>, Error> {
    text.split(',')
        .map(|item| {
            LatencyMetric::parse(item.trim()).ok_or_else(|| Error::Usage {
                flag: "--percentile-metrics",
                value: text.into(),
                reason: format!("unknown metric {:?}; expected ttft, tpot, itl or e2el", item.trim()),
            })
        })
        .collect()
}

/// Runs a parsed command line.
pub fn run(cli: Cli) -> Result<(), Error> {
    match cli.command {
        Command::Simulate(args) => simulate(args.validate()?),
        Command::Validate(args) => validate(args),
        Command::Fit(args) => fit(args),
        Command::Report(args) => report(args),
    }
}

fn comma_list(text: &str) -> Vec<String> {
    text.split(',').map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).collect()
}

fn validate(args: ValidateArgs) -> Result<(), Error> {
    let mut rendered = Vec::new();
    for path in &args.scenarios {
        let scenario = Scenario::load(path, &args.set)?;
        let plan = crate::validate::Plan::for_scenario(&scenario, args.recorded.as_deref())?;
        let validation = crate::validate::validate(&scenario, &plan)?;
        let text = crate::validate::render(&validation);
        print!("{text}");
        println!();
        rendered.push((path.clone(), validation, text));
    }
    if let Some(dir) = &args.out {
        let io_err = |path: PathBuf| move |source| Error::Output { path, source };
        std::fs::create_dir_all(dir).map_err(io_err(dir.clone()))?;
        for (path, _, text) in &rendered {
            let stem = path.file_stem().map_or("scenario".into(), |s| s.to_string_lossy().into_owned());
            let file = dir.join(format!("{stem}.txt"));
            std::fs::write(&file, text).map_err(io_err(file.clone()))?;
        }
        let summary = crate::validate::summary_markdown(rendered.iter().map(|(p, v, _)| (p.as_path(), v)));
        let file = dir.join("README.md");
        std::fs::write(&file, summary).map_err(io_err(file.clone()))?;
        eprintln!("wrote {}", dir.display());
    }
    Ok(())
}

fn fit(args: FitArgs) -> Result<(), Error> {
    let mut targets = Vec::new();
    for path in &args.scenarios {
        let scenario = Scenario::load(path, &args.set)?;
        let plan = crate::validate::Plan::for_scenario(&scenario, None)?;
        targets.push(crate::fit::FitTarget { scenario, plan });
    }
    let config = crate::fit::FitConfig {
        targets,
        params: comma_list(&args.params),
        metrics: comma_list(&args.metrics),
        max_evaluations: args.max_evals,
    };
    let result = crate::fit::fit(&config)?;
    // The command line, minus the binary's path, regenerates the profile.
    let command_line = std::iter::once("servesim".to_string()).chain(std::env::args().skip(1)).collect::<Vec<_>>().join(" ");
    let base = config.targets[0].scenario.cost.clone();
    let text = crate::fit::profile_toml(&result, &config, &base, &command_line);
    if let Some(dir) = args.out.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|source| Error::Output { path: dir.to_path_buf(), source })?;
    }
    std::fs::write(&args.out, text).map_err(|source| Error::Output { path: args.out.clone(), source })?;
    eprintln!(
        "objective {:.6} → {:.6} in {} evaluations; wrote {}",
        result.start_objective,
        result.objective,
        result.evaluations,
        args.out.display()
    );
    for (name, value) in &result.values {
        eprintln!("  {name} = {value}");
    }
    Ok(())
}

fn report(args: ReportArgs) -> Result<(), Error> {
    let config = crate::report::ReportConfig { runs: args.runs, out: args.out, recorded: args.recorded };
    let written = crate::report::generate(&config)?;
    eprintln!("wrote {} files to {} (open index.html)", written.len(), config.out.display());
    Ok(())
}

/// A progress bar over the sweep points on stderr when it is a terminal and the sweep has more
/// than one point; hidden (and silent) otherwise, so piped output stays clean.
fn sweep_progress(points: usize) -> indicatif::ProgressBar {
    use std::io::IsTerminal;
    if points < 2 || !std::io::stderr().is_terminal() {
        return indicatif::ProgressBar::hidden();
    }
    let bar = indicatif::ProgressBar::new(points as u64);
    let style = indicatif::ProgressStyle::with_template("{bar:30} {pos}/{len} sweep points, {elapsed}")
        .expect("a valid template");
    bar.set_style(style);
    bar
}

fn simulate(config: SimulateConfig) -> Result<(), Error> {
    let scenario = &config.scenario;
    let e = &scenario.engine;
    eprintln!(
        "{}: {} on {} × {} (TP {}, {} replica(s)), {}, {} KV blocks of {} tokens per replica",
        scenario.name,
        scenario.model.name,
        scenario.hardware.count,
        scenario.hardware.gpu.name,
        e.tensor_parallel,
        e.replicas,
        e.policy.name(),
        e.num_gpu_blocks,
        e.block_size
    );
    let progress = sweep_progress(scenario.workload.num_prompts.len());
    let points = run::run_scenario_with_progress(scenario, &config.report.percentiles, &mut |_| progress.inc(1));
    progress.finish_and_clear();
    let mut text = String::new();
    for (i, point) in points.iter().enumerate() {
        if i > 0 {
            text.push('\n');
        }
        text.push_str(&format!("num_prompts: {}\n", point.num_prompts));
        write_report(&mut text, &point.summary, &config.report).expect("writing to a String");
    }
    let stdout = std::io::stdout();
    let mut lock = stdout.lock();
    lock.write_all(text.as_bytes())
        .and_then(|()| lock.flush())
        .map_err(|source| Error::Output { path: "<stdout>".into(), source })?;
    if let Some(dir) = &config.out {
        output::write_all(dir, scenario, &points, &config.report)?;
        eprintln!("wrote {}", dir.join("{summary.json,requests.csv,timeline.csv,itl.csv}").display());
    }
    Ok(())
}
