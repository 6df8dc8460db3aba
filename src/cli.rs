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
    }
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
    let points = run::run_scenario(scenario, &config.report.percentiles);
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
        eprintln!("wrote {}", dir.join("{summary.json,requests.csv,timeline.csv}").display());
    }
    Ok(())
}
