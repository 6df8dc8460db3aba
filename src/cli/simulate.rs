//! `servesim simulate`: a scenario's sweep, printed as vLLM's benchmark blocks (or SGLang's).

use std::io::Write;
use std::path::PathBuf;

use clap::Args;

use super::flags::{self, ReportFormat, usage};
use super::progress;
use crate::Error;
use crate::metrics::format::{ReportOptions, write_report};
use crate::metrics::sglang::{self, SglangReport};
use crate::run::{PointResult, output};
use crate::scenario::{Dataset, Scenario};

#[derive(Debug, Args)]
pub struct SimulateArgs {
    /// Scenario file (TOML).
    pub scenario: PathBuf,
    /// Directory for four files: summary.json (vLLM's --save-result keys per sweep point),
    /// requests.csv (one row per request), timeline.csv (one row per engine step) and itl.csv
    /// (the pooled inter-token latencies).
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
    /// `vllm`: vLLM benchmark_serving's block (its version by `--report-layout`); `sglang`:
    /// SGLang 0.4.9 bench_serving's block, and with `--out` its `--output-file` record of each
    /// sweep point in `sglang.jsonl`.
    #[arg(long, default_value = "vllm", value_name = "FORMAT")]
    pub report_format: String,
    /// Comma-separated percentiles to report, as vLLM's flag (e.g. `50,90,99`).
    #[arg(long, default_value = "99", value_name = "LIST")]
    pub metric_percentiles: String,
    /// Comma-separated metrics that get percentiles: ttft, tpot, itl, e2el.
    #[arg(long, default_value = "ttft,tpot,itl", value_name = "LIST")]
    pub percentile_metrics: String,
    /// Price steps from a calibration profile instead of the roofline: a file
    /// (`servesim calibrate --out`, or `calibrate import`), or `auto` for the profile bundled
    /// for the scenario's GPU (calibration/public/).
    #[arg(long, value_name = "PROFILE.csv|auto")]
    pub profile: Option<PathBuf>,
    /// Use a profile measured on other hardware than the scenario's, with a warning (without
    /// this flag, that is an error).
    #[arg(long)]
    pub allow_profile_mismatch: bool,
    /// `roofline`: price steps by the datasheet roofline even where a kernel profile is bundled
    /// for the GPU (the same as `--set cost.profile=roofline`).
    #[arg(long, value_name = "roofline")]
    pub cost: Option<String>,
}

/// A fully validated `simulate` invocation.
#[derive(Debug)]
pub struct SimulateConfig {
    pub scenario: Scenario,
    pub out: Option<PathBuf>,
    pub report: ReportOptions,
    format: ReportFormat,
    /// Price steps with a profile that does not describe the scenario, with a warning.
    pub allow_profile_mismatch: bool,
}

impl SimulateArgs {
    pub fn validate(self) -> Result<SimulateConfig, Error> {
        let layout = flags::report_layout(&self.report_layout)?;
        let format = flags::report_format(&self.report_format)?;
        let mut percentiles = flags::percentiles(&self.metric_percentiles)?;
        let mut percentile_metrics = flags::percentile_metrics(&self.percentile_metrics)?;
        if format == ReportFormat::Sglang {
            (percentiles, percentile_metrics) = flags::with_sglang_needs(percentiles, percentile_metrics);
        }
        let mut overrides = self.set;
        match self.cost.as_deref() {
            None => {}
            Some("roofline") => overrides.push("cost.profile=\"roofline\"".into()),
            Some(other) => return Err(usage("--cost", other, "expected `roofline` (see also --profile)")),
        }
        if let Some(seed) = self.seed {
            overrides.push(format!("workload.seed={seed}"));
        }
        // `--profile` is `[cost] profile`, with a path from the working directory rather than
        // the scenario's folder.
        if let Some(path) = &self.profile {
            let value = if path.as_os_str() == "auto" {
                "auto".to_string()
            } else {
                std::path::absolute(path).map_err(|e| usage("--profile", path.display(), e.to_string()))?.display().to_string()
            };
            overrides.push(format!("cost.profile={}", toml::Value::from(value)));
        }
        let scenario = Scenario::load(&self.scenario, &overrides)?;
        if let Some(dir) = &self.out {
            flags::output_dir("--out", dir)?;
        }
        let report = ReportOptions {
            layout,
            percentile_metrics,
            percentiles,
            max_concurrency: scenario.workload.max_concurrency,
            // Each sweep point prints its own rate (set per point below).
            request_rate: f64::INFINITY,
        };
        Ok(SimulateConfig { scenario, out: self.out, report, format, allow_profile_mismatch: self.allow_profile_mismatch })
    }
}

/// Which release's engine time priced the run, and whether the scenario or a fitted profile
/// replaced any of it: `engine profile: vllm-v1-0.19 (vLLM 0.19.0): …`.
fn engine_profile_line(scenario: &crate::scenario::Scenario) -> Option<String> {
    let (profile, version) = (scenario.engine.profile.as_ref()?, scenario.engine.version?);
    let mut in_force = scenario.cost.clone();
    profile.apply(&mut in_force);
    let replaced = if scenario.fitted_profile.is_some() {
        "; its engine time replaced by the fitted profile's"
    } else if in_force != scenario.cost {
        "; some of its engine time replaced by [cost]"
    } else {
        ""
    };
    Some(format!("engine profile: {} ({} {version}){replaced}", profile.name, profile.engine))
}

pub(super) fn run(config: SimulateConfig) -> Result<(), Error> {
    let scenario = &config.scenario;
    let runs = crate::run::pool_runs(scenario, config.allow_profile_mismatch)?;
    print_header(scenario, &runs);
    for run in &runs {
        for warning in &run.cost.warnings {
            eprintln!("WARNING: {warning}");
        }
        for note in &run.cost.notes {
            eprintln!("note: {note}");
        }
    }
    // Named for a roofline too, with what it rests on: a user who asked for it (or whose GPU has
    // no profile) reads the figures as guesses, not measurements.
    if scenario.pools.is_empty() {
        match runs[0].cost.kind {
            crate::run::CostKind::Roofline => eprintln!(
                "cost model: roofline ({} datasheet peaks × the [cost] efficiencies; no kernel measured)",
                scenario.hardware.gpu.name
            ),
            _ => eprintln!("cost model: {}", runs[0].cost.label),
        }
    }
    if let Some(line) = engine_profile_line(scenario) {
        eprintln!("{line}");
    }
    let cost_label = runs.iter().map(|run| run.cost.label.as_str()).collect::<Vec<_>>().join("; ");
    let bar = progress::sweep(scenario.workload.num_prompts.len());
    let points =
        crate::run::run_pools_with_progress(
            scenario,
            &runs,
            &config.report.percentiles,
            config.out.is_some(),
            &mut |_| bar.inc(1),
        );
    bar.finish_and_clear();
    let mut text = String::new();
    for (i, point) in points.iter().enumerate() {
        if i > 0 {
            text.push('\n');
        }
        text.push_str(&format!("num_prompts: {}\n", point.num_prompts));
        if scenario.workload.sweeps_rate() {
            text.push_str(&format!("request_rate: {}\n", point.request_rate));
        }
        match config.format {
            ReportFormat::Vllm => {
                let report = ReportOptions { request_rate: point.request_rate, ..config.report.clone() };
                write_report(&mut text, &point.summary, &report).expect("writing to a String");
            }
            ReportFormat::Sglang => {
                sglang::write_block(&mut text, &point.summary, &sglang_report(scenario, point)).expect("writing to a String");
            }
        }
    }
    // Not part of vLLM's block, whose lines stay as its client prints them.
    if scenario.engine.enable_prefix_caching {
        for point in &points {
            let p = point.output.prefix;
            eprintln!(
                "prefix cache (num_prompts {}): hit rate {:.2}% ({} of {} prompt tokens)",
                point.num_prompts,
                100.0 * p.hit_rate(),
                p.hit_tokens,
                p.prompt_tokens
            );
        }
    }
    if let Some(spec) = &scenario.engine.speculative {
        for point in &points {
            let s = &point.output.spec;
            eprintln!(
                "speculative decoding (num_prompts {}, {} k = {}): {} of {} draft tokens accepted ({:.2}%), {:.3} tokens per verifying step",
                point.num_prompts,
                spec.method.name(),
                spec.scheduler.num_speculative_tokens,
                s.accepted_tokens,
                s.draft_tokens,
                100.0 * s.acceptance_rate(),
                s.mean_tokens_per_step()
            );
        }
    }
    let stdout = std::io::stdout();
    let mut lock = stdout.lock();
    lock.write_all(text.as_bytes())
        .and_then(|()| lock.flush())
        .map_err(|source| Error::Output { path: "<stdout>".into(), source })?;
    if let Some(dir) = &config.out {
        let pools = if scenario.pools.is_empty() { &[][..] } else { &runs[..] };
        output::write_all(dir, scenario, &points, &config.report, &cost_label, pools)?;
        eprintln!("wrote {}", dir.join("{summary.json,requests.csv,timeline.csv,itl.csv}").display());
        if config.format == ReportFormat::Sglang {
            let path = dir.join("sglang.jsonl");
            let lines: String = points.iter().map(|p| sglang::record(&p.summary, &sglang_report(scenario, p)) + "\n").collect();
            std::fs::write(&path, lines).map_err(|source| Error::Output { path: path.clone(), source })?;
            eprintln!("wrote {}", path.display());
        }
    }
    Ok(())
}

/// What SGLang's client would have been run with to send a sweep point of the scenario: its
/// native backend, the point's rate, and the dataset's arguments where SGLang's client has the
/// dataset. Its `random` draws lengths uniform in `[len × ratio, len]`, so exact lengths are
/// ratio 1; a servesim dataset SGLang lacks is named as servesim names it (`vllm-random` for
/// vLLM's `len × (1 ± ratio)`), with SGLang's default lengths.
fn sglang_report(scenario: &Scenario, point: &PointResult) -> SglangReport {
    let mut report = SglangReport {
        request_rate: point.request_rate,
        max_concurrency: scenario.workload.max_concurrency,
        accept_length: scenario.engine.speculative.as_ref().map(|_| point.output.spec.mean_tokens_per_step()),
        ..SglangReport::default()
    };
    sglang_dataset(&scenario.workload.dataset, &mut report);
    report
}

/// The dataset arguments of SGLang's record for `dataset` (see [`sglang_report`]).
pub(super) fn sglang_dataset(dataset: &Dataset, report: &mut SglangReport) {
    let (name, lengths) = match *dataset {
        Dataset::Fixed { input_len, output_len } => ("random", Some((input_len, output_len, 1.0))),
        Dataset::Random { input_len, output_len, range_ratio, prefix_len } if range_ratio == 0.0 && prefix_len == 0 => {
            ("random", Some((input_len, output_len, 1.0)))
        }
        Dataset::Random { input_len, output_len, range_ratio, .. } => ("vllm-random", Some((input_len, output_len, range_ratio))),
        Dataset::Sonnet { .. } => ("sonnet", None),
        Dataset::ShareGpt { .. } => ("sharegpt", None),
        Dataset::Trace { .. } => ("trace", None),
    };
    report.dataset_name = name.to_string();
    if let Some((input_len, output_len, ratio)) = lengths {
        (report.random_input_len, report.random_output_len, report.random_range_ratio) = (input_len, output_len, ratio);
    }
}

/// What is simulated, on stderr: the deployment; with pools, a line per pool with its cost model.
fn print_header(scenario: &Scenario, runs: &[crate::run::PoolRun]) {
    let e = &scenario.engine;
    if let Some(dp) = e.data_parallel {
        eprintln!(
            "{}: {} on {} × {} (TP {} × {} data-parallel ranks{}, {} replica(s)), {}, {} KV blocks of {} tokens per rank",
            scenario.name,
            scenario.model.name,
            scenario.hardware.count,
            scenario.hardware.gpu.name,
            e.tensor_parallel,
            dp.ranks,
            if dp.lockstep { format!(" in lockstep, {}", dp.all2all.name()) } else { String::new() },
            e.replicas,
            e.policy.name(),
            e.num_gpu_blocks,
            e.block_size
        );
        return;
    }
    if scenario.pools.is_empty() {
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
        return;
    }
    eprintln!(
        "{}: {} on {}, {}, router {}",
        scenario.name,
        scenario.model.name,
        crate::run::pools_text(runs),
        e.policy.name(),
        e.router.name()
    );
    for (i, run) in runs.iter().enumerate() {
        let pool = &run.scenario.engine;
        eprintln!(
            "  cluster.pools[{i}]: {} KV blocks of {} tokens per replica, weight {:.2}, cost model: {}",
            pool.num_gpu_blocks, pool.block_size, run.weight, run.cost.label
        );
    }
}
