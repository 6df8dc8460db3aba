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
    /// Time real GEMM and attention kernels (CPU, or CUDA through cudarc) into a profile.
    Calibrate(CalibrateArgs),
    /// Measure a running OpenAI- or TGI-compatible server, as vLLM's benchmark_serving.py does.
    Bench(BenchArgs),
    /// Serve a real transformer (CPU) behind OpenAI and TGI HTTP APIs, batched by the simulator's
    /// own scheduler.
    Serve(ServeArgs),
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
    #[arg(required_unless_present = "engine")]
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
    #[command(flatten)]
    pub engine: EngineValidationArgs,
}

/// `validate --engine`: the whole loop on this machine against servesim's own engine.
#[derive(Debug, Args)]
pub struct EngineValidationArgs {
    /// Instead of recorded runs: calibrate this machine's CPU, start servesim's engine, bench a
    /// sweep, simulate the same workload with the profile, and print measured vs simulated.
    #[arg(id = "engine", long = "engine", conflicts_with_all = ["scenarios", "recorded", "set"])]
    pub enabled: bool,
    /// With --engine: the model's random-weight size (tiny, small, 100m).
    #[arg(long, default_value = "small")]
    pub random_weights: String,
    /// With --engine: threads of the engine and of calibration (default: all cores but one,
    /// which the HTTP server and the benchmark client need beside the engine).
    #[arg(long)]
    pub threads: Option<usize>,
    /// With --engine: reuse this CPU calibration profile (from an earlier `--out DIR`'s cpu.csv,
    /// or `calibrate --device cpu`) instead of calibrating.
    #[arg(long, value_name = "CSV")]
    pub profile: Option<PathBuf>,
    /// With --engine: calibration grid (tiny, quick, full) and time budget in minutes (the
    /// grid is measured in 3 passes while the budget lasts).
    #[arg(long, default_value = "tiny")]
    pub grid: String,
    #[arg(long, default_value_t = 1.5)]
    pub calibration_minutes: f64,
    /// With --engine: prompt and output tokens of every request.
    #[arg(long, default_value_t = 128)]
    pub input_len: u32,
    #[arg(long, default_value_t = 64)]
    pub output_len: u32,
    /// With --engine: one back-to-back series per concurrency (comma-separated).
    #[arg(long, default_value = "1,8,32")]
    pub concurrency: String,
    /// With --engine: each back-to-back series sends ROUNDS × concurrency requests (at least 8).
    #[arg(long, default_value_t = 4)]
    pub rounds: u32,
    /// With --engine: the Poisson series' rate as a fraction of the request throughput measured
    /// at the highest concurrency (0: no Poisson series).
    #[arg(long, default_value_t = 0.6)]
    pub poisson_load: f64,
    /// With --engine: the engine's scheduler knobs, as `servesim serve` takes them.
    #[command(flatten)]
    pub knobs: EngineKnobsArgs,
    /// With --engine: seed of the weights and of the workload.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// With --engine: exit 1 when a series misses a target (for CI).
    #[arg(long)]
    pub fail_on_miss: bool,
}

/// The scheduler knobs of servesim's engine, shared by `serve` and `validate --engine`.
#[derive(Debug, Args)]
pub struct EngineKnobsArgs {
    #[arg(long, default_value_t = 32)]
    pub max_num_seqs: u32,
    #[arg(long, default_value_t = 512)]
    pub max_num_batched_tokens: u32,
    /// KV-cache blocks (of `--block-size` tokens) for all sequences together.
    #[arg(long, default_value_t = 2048)]
    pub num_gpu_blocks: u32,
    #[arg(long, default_value_t = 16)]
    pub block_size: u32,
}

impl EngineKnobsArgs {
    /// The knobs, checked.
    fn knobs(&self) -> Result<crate::engine::server::EngineKnobs, Error> {
        let knobs = crate::engine::server::EngineKnobs {
            max_num_seqs: self.max_num_seqs,
            max_num_batched_tokens: self.max_num_batched_tokens,
            block_size: self.block_size,
            num_gpu_blocks: self.num_gpu_blocks,
        };
        knobs.check()?;
        Ok(knobs)
    }
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
    /// Price steps from a calibration profile (`servesim calibrate --out`) instead of the roofline.
    #[arg(long, value_name = "PROFILE.csv")]
    pub profile: Option<PathBuf>,
}

/// `servesim serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// A folder with a Hugging Face `config.json` and `.safetensors` weights.
    #[arg(long, value_name = "DIR", conflicts_with = "random_weights")]
    pub model: Option<PathBuf>,
    /// Seeded random weights of a named size: tiny, small or 100m.
    #[arg(long, value_name = "SIZE")]
    pub random_weights: Option<String>,
    /// A Hugging Face tokenizer directory (its `tokenizer.json`) or file. Default: the `--model`
    /// directory's own `tokenizer.json`, else the shipped `tokenizers/servesim-char-N` whose N
    /// is the model's vocabulary size.
    #[arg(long, value_name = "DIR")]
    pub tokenizer: Option<PathBuf>,
    /// On shutdown, write the engine's step trace to FILE, in the columns of the simulator's
    /// timeline.csv (`num_prompts` is 0; only `step_ms` of the cost columns is measured).
    #[arg(long, value_name = "FILE")]
    pub timeline: Option<PathBuf>,
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    #[arg(long, default_value_t = 8000)]
    pub port: u16,
    /// `cpu` (the CPU kernels, multi-threaded) or `cuda:N` (bf16 on GPU N: cuBLASLt and the
    /// kernels in `kernels/`).
    #[arg(long, default_value = "cpu")]
    pub device: String,
    #[command(flatten)]
    pub knobs: EngineKnobsArgs,
    /// Requests that may wait for a batch slot; more get 503.
    #[arg(long, default_value_t = 1024)]
    pub max_waiting: u32,
    /// Every request runs to its `max_tokens`, ignoring EOS whatever it asks.
    #[arg(long)]
    pub ignore_eos: bool,
    /// Seed of random weights.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// CPU threads for the forward pass (default: all cores).
    #[arg(long)]
    pub threads: Option<usize>,
}

/// `servesim bench`, with vLLM benchmark_serving.py's flag names.
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// `openai` (also `vllm`) or `tgi`.
    #[arg(long, default_value = "openai")]
    pub backend: String,
    #[arg(long, default_value = "http://127.0.0.1:8000")]
    pub base_url: String,
    /// Default: /v1/completions (openai) or /generate_stream (tgi).
    #[arg(long)]
    pub endpoint: Option<String>,
    /// The `model` field sent to OpenAI servers.
    #[arg(long, default_value = "servesim")]
    pub model: String,
    /// A Hugging Face tokenizer directory (its `tokenizer.json`) or file: prompts become text
    /// decoded from ids below its vocab_size (vLLM's random dataset), counted with it, and output
    /// text is counted with it when the server reports no usage (TGI).
    #[arg(long, value_name = "DIR")]
    pub tokenizer: Option<PathBuf>,
    /// `random`, `fixed` (every request exactly `--random-input-len` in and
    /// `--random-output-len` out), `sonnet` (fixed input length, `--sonnet-output-len` tokens
    /// out), `sharegpt` (`--dataset-path` a ShareGPT JSON file, counted with `--tokenizer`) or
    /// `trace` (`--dataset-path` a CSV).
    #[arg(long, default_value = "random")]
    pub dataset_name: String,
    #[arg(long, default_value_t = 1024)]
    pub random_input_len: u32,
    #[arg(long, default_value_t = 128)]
    pub random_output_len: u32,
    #[arg(long, default_value_t = 0.0)]
    pub random_range_ratio: f64,
    #[arg(long, default_value_t = 0)]
    pub random_prefix_len: u32,
    #[arg(long, default_value_t = 550)]
    pub sonnet_input_len: u32,
    #[arg(long, default_value_t = 200)]
    pub sonnet_prefix_len: u32,
    #[arg(long, default_value_t = 150)]
    pub sonnet_output_len: u32,
    /// CSV of `arrival_s,input_tokens,output_tokens` for `--dataset-name trace`.
    #[arg(long)]
    pub dataset_path: Option<PathBuf>,
    /// A number, or a comma list for a sweep (one report block per value).
    #[arg(long, default_value = "1000")]
    pub num_prompts: String,
    /// Requests per second, or `inf` (all at once).
    #[arg(long, default_value = "inf")]
    pub request_rate: String,
    #[arg(long, default_value_t = 1.0)]
    pub burstiness: f64,
    #[arg(long)]
    pub max_concurrency: Option<u32>,
    #[arg(long)]
    pub ignore_eos: bool,
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    #[arg(long, default_value = "current")]
    pub report_layout: String,
    #[arg(long, default_value = "99")]
    pub metric_percentiles: String,
    #[arg(long, default_value = "ttft,tpot,itl")]
    pub percentile_metrics: String,
    /// Save each sweep point's results as vLLM --save-result JSON into `--result-dir`.
    #[arg(long)]
    pub save_result: bool,
    #[arg(long, default_value = ".")]
    pub result_dir: PathBuf,
}

#[derive(Debug, Args)]
pub struct CalibrateArgs {
    /// `cpu` or `cuda:N`.
    #[arg(long, default_value = "cpu")]
    pub device: String,
    /// Where to write the profile CSV (its provenance goes beside it, `.provenance.toml`).
    #[arg(long, value_name = "FILE.csv")]
    pub out: PathBuf,
    /// Stop starting new shapes after this many minutes; what was measured is kept.
    #[arg(long, value_name = "N")]
    pub budget_minutes: Option<f64>,
    /// Grid size: `full` (every preset model's shapes), `quick` or `tiny` (capped shape sizes).
    /// Default: full on a GPU, tiny on a CPU.
    #[arg(long, value_name = "SCALE")]
    pub grid: Option<String>,
    /// Only this preset model's shapes (repeatable); default: every preset.
    #[arg(long = "model", value_name = "PRESET")]
    pub models: Vec<String>,
    /// Comma-separated tensor-parallel degrees whose per-GPU shapes are measured.
    #[arg(long, default_value = "1,2,4,8", value_name = "LIST")]
    pub tp: String,
    /// CPU threads (default: all cores).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Times to measure the whole grid; each shape keeps the median of its passes' medians
    /// (default: 3 on a CPU, whose kernels' times move over seconds; 1 on a GPU).
    #[arg(long, value_name = "N")]
    pub passes: Option<u32>,
}

/// A fully validated `simulate` invocation.
#[derive(Debug)]
pub struct SimulateConfig {
    pub scenario: Scenario,
    pub out: Option<PathBuf>,
    pub report: ReportOptions,
    /// A calibration profile that prices steps instead of the roofline.
    pub profile: Option<crate::calibrate::profile::Profile>,
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
        let profile = match &self.profile {
            None => None,
            Some(path) => Some(crate::calibrate::profile::Profile::read(path).map_err(|e| Error::Usage {
                flag: "--profile",
                value: path.display().to_string(),
                reason: e.to_string(),
            })?),
        };
        Ok(SimulateConfig { scenario, out: self.out, report, profile })
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
        Command::Calibrate(args) => calibrate(args),
        Command::Bench(args) => bench(args),
        Command::Serve(args) => serve(args),
        Command::Report(args) => report(args),
    }
}

fn comma_list(text: &str) -> Vec<String> {
    text.split(',').map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).collect()
}

fn validate(args: ValidateArgs) -> Result<(), Error> {
    if args.engine.enabled {
        return validate_engine(args.engine, args.out.as_deref());
    }
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

/// vLLM's client shows a bar of finished requests; so does `bench`, on a terminal only.
fn request_progress(requests: usize) -> indicatif::ProgressBar {
    use std::io::IsTerminal;
    if !std::io::stderr().is_terminal() {
        return indicatif::ProgressBar::hidden();
    }
    let bar = indicatif::ProgressBar::new(requests as u64);
    let style = indicatif::ProgressStyle::with_template("{bar:30} {pos}/{len} requests, {elapsed} elapsed, ETA {eta}")
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
    let cost: Box<dyn crate::cost::CostModel> = match &config.profile {
        None => Box::new(run::cost_model(scenario)),
        Some(profile) => {
            let calibrated = crate::cost::calibrated::Calibrated::new(
                profile,
                &scenario.model,
                &scenario.hardware.gpu,
                e.tensor_parallel,
                &scenario.cost,
            );
            for notice in calibrated.notices() {
                eprintln!("note: {notice}");
            }
            Box::new(calibrated)
        }
    };
    let progress = sweep_progress(scenario.workload.num_prompts.len());
    let points =
        run::run_scenario_with_progress(scenario, cost.as_ref(), &config.report.percentiles, &mut |_| progress.inc(1));
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
        output::write_all(dir, scenario, &points, &config.report, cost.source())?;
        eprintln!("wrote {}", dir.join("{summary.json,requests.csv,timeline.csv,itl.csv}").display());
    }
    Ok(())
}

fn validate_engine(args: EngineValidationArgs, out: Option<&std::path::Path>) -> Result<(), Error> {
    use crate::calibrate::grid::GridScale;
    use crate::validate::engine::{EngineSetup, EngineValidationConfig, SweepSetup};

    let usage = |flag: &'static str, value: &str, reason: &str| Error::Usage { flag, value: value.into(), reason: reason.into() };
    let concurrency: Vec<u32> = args
        .concurrency
        .split(',')
        .map(|n| n.trim().parse::<u32>().ok().filter(|&n| n > 0))
        .collect::<Option<_>>()
        .ok_or_else(|| usage("--concurrency", &args.concurrency, "expected positive integers, comma-separated"))?;
    if !(args.poisson_load >= 0.0 && args.poisson_load.is_finite()) {
        return Err(usage("--poisson-load", &args.poisson_load.to_string(), "must be a fraction ≥ 0"));
    }
    if !(args.calibration_minutes > 0.0 && args.calibration_minutes.is_finite()) {
        return Err(usage("--calibration-minutes", &args.calibration_minutes.to_string(), "must be a positive number of minutes"));
    }
    if args.input_len == 0 || args.output_len == 0 {
        return Err(usage("--input-len", &format!("{}/{}", args.input_len, args.output_len), "input and output lengths must be positive"));
    }
    let knobs = args.knobs.knobs()?;
    let grid = GridScale::parse(&args.grid).ok_or_else(|| usage("--grid", &args.grid, "expected `full`, `quick` or `tiny`"))?;
    let profile = match &args.profile {
        None => None,
        Some(path) => Some(
            crate::calibrate::profile::Profile::read(path)
                .map_err(|e| usage("--profile", &path.display().to_string(), &e.to_string()))?,
        ),
    };
    let config = EngineValidationConfig {
        engine: EngineSetup {
            size: args.random_weights,
            seed: args.seed,
            // One core is left to the HTTP server and the client: with every core computing, each
            // streamed token preempts a compute thread and a step is no longer its kernels' time
            // (on 2 cores, 2 threads priced 5–8-sequence decodes 25% too cheap, 1 thread 14%).
            threads: args.threads.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get().saturating_sub(1).max(1))),
            knobs,
        },
        sweep: SweepSetup {
            input_len: args.input_len,
            output_len: args.output_len,
            concurrency,
            rounds: args.rounds,
            poisson_load: args.poisson_load,
        },
        profile,
        grid,
        calibration_budget: Some(std::time::Duration::from_secs_f64(args.calibration_minutes * 60.0)),
    };
    let validation = crate::validate::engine::run(&config, &mut |line| eprintln!("{line}"))?;
    print!("{}", crate::validate::engine::render(&validation));
    if let Some(dir) = out {
        crate::validate::engine::write_outputs(&validation, dir)?;
        eprintln!("wrote {}", dir.display());
    }
    if args.fail_on_miss && !validation.meets_targets() {
        return Err(Error::Output { path: "validate --engine".into(), source: std::io::Error::other("a series missed its error target") });
    }
    Ok(())
}

fn calibrate(args: CalibrateArgs) -> Result<(), Error> {
    use crate::calibrate::backend::Backend;
    use crate::calibrate::grid::{Grid, GridOptions, GridScale};
    use crate::calibrate::run::RunOptions;
    use crate::calibrate::timing::TimingOptions;
    use crate::scenario::{Dtype, ModelSpec};
    use std::io::IsTerminal;

    let usage = |flag: &'static str, value: &str, reason: String| Error::Usage { flag, value: value.into(), reason };
    let on_gpu = args.device.starts_with("cuda");
    let mut backend: Box<dyn Backend> = if args.device == "cpu" {
        let threads = args.threads.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
        Box::new(crate::calibrate::cpu::CpuBackend::new(threads).map_err(|e| usage("--device", &args.device, e.to_string()))?)
    } else if let Some(ordinal) = args.device.strip_prefix("cuda:").and_then(|n| n.parse::<usize>().ok()) {
        Box::new(crate::calibrate::cuda::CudaBackend::new(ordinal).map_err(|e| usage("--device", &args.device, e.to_string()))?)
    } else {
        return Err(usage("--device", &args.device, "expected `cpu` or `cuda:N`".into()));
    };
    let scale_name = args.grid.clone().unwrap_or_else(|| if on_gpu { "full" } else { "tiny" }.into());
    let scale = GridScale::parse(&scale_name)
        .ok_or_else(|| usage("--grid", &scale_name, "expected `full`, `quick` or `tiny`".into()))?;
    let tensor_parallel = args
        .tp
        .split(',')
        .map(|t| t.trim().parse::<u32>().ok().filter(|&t| t > 0))
        .collect::<Option<Vec<u32>>>()
        .ok_or_else(|| usage("--tp", &args.tp, "expected comma-separated positive integers".into()))?;
    // The CPU engine computes in f32; GPUs are calibrated in the dtypes engines serve with.
    let dtypes = if on_gpu { vec![Dtype::Bf16, Dtype::Fp16, Dtype::Fp8] } else { vec![Dtype::Fp32] };
    let mut options = GridOptions::all_presets(scale);
    options.tensor_parallel = tensor_parallel;
    options.dtypes = dtypes;
    options.extra_m = backend.gemm_m_breakpoints();
    if !args.models.is_empty() {
        options.models = args
            .models
            .iter()
            .map(|name| {
                ModelSpec::preset(name).ok_or_else(|| {
                    usage("--model", name, format!("unknown preset; known: {}", ModelSpec::preset_names().join(", ")))
                })
            })
            .collect::<Result<_, _>>()?;
    }
    let grid = Grid::new(options);
    if let Some(minutes) = args.budget_minutes.filter(|m| !(m.is_finite() && *m > 0.0)) {
        return Err(usage("--budget-minutes", &minutes.to_string(), "must be a positive number of minutes".into()));
    }
    if args.passes == Some(0) {
        return Err(usage("--passes", "0", "must be at least 1".into()));
    }
    let run_options = RunOptions {
        budget: args.budget_minutes.map(|m| std::time::Duration::from_secs_f64(m * 60.0)),
        progress: std::io::stderr().is_terminal(),
        timing: if on_gpu { TimingOptions::default() } else { TimingOptions::quick() },
        passes: args.passes.unwrap_or(if on_gpu { 1 } else { crate::calibrate::cpu::PASSES_DEFAULT }),
    };
    eprintln!("calibrating {} shapes on {} ({scale_name} grid)", grid.len(), args.device);
    let profile = crate::calibrate::run::calibrate(backend.as_mut(), &grid, &run_options)
        .map_err(|e| usage("--device", &args.device, e.to_string()))?;
    profile.write(&args.out).map_err(|e| Error::Output {
        path: args.out.clone(),
        source: std::io::Error::other(e.to_string()),
    })?;
    let loo = crate::cost::calibrated::leave_one_out(&profile);
    let (median, p90) = crate::cost::calibrated::LeaveOneOut::summary(&loo.all());
    eprintln!("{}", profile.provenance.run);
    eprintln!(
        "leave-one-out interpolation error: median {:.1}%, p90 {:.1}%; wrote {}",
        median * 100.0,
        p90 * 100.0,
        args.out.display()
    );
    Ok(())
}

fn bench(args: BenchArgs) -> Result<(), Error> {
    use crate::bench::{Backend, BenchConfig};
    use crate::scenario::{Dataset, LengthDist, WorkloadConfig};

    let usage = |flag: &'static str, value: &str, reason: &str| Error::Usage { flag, value: value.into(), reason: reason.into() };
    let backend = Backend::parse(&args.backend).ok_or_else(|| usage("--backend", &args.backend, "expected openai or tgi"))?;
    let layout = ReportLayout::parse(&args.report_layout)
        .ok_or_else(|| usage("--report-layout", &args.report_layout, "expected `current` or `legacy`"))?;
    let percentiles = parse_percentiles(&args.metric_percentiles)?;
    let percentile_metrics = parse_metrics(&args.percentile_metrics)?;
    let num_prompts: Vec<u32> = args
        .num_prompts
        .split(',')
        .map(|n| n.trim().parse::<u32>().ok().filter(|&n| n > 0))
        .collect::<Option<_>>()
        .ok_or_else(|| usage("--num-prompts", &args.num_prompts, "expected positive integers, comma-separated"))?;
    let request_rate = match args.request_rate.trim() {
        "inf" => f64::INFINITY,
        text => text.parse::<f64>().ok().filter(|r| *r > 0.0).ok_or_else(|| {
            usage("--request-rate", &args.request_rate, "expected a positive number of requests per second, or inf")
        })?,
    };
    if !(args.burstiness > 0.0 && args.burstiness.is_finite()) {
        return Err(usage("--burstiness", &args.burstiness.to_string(), "must be a positive gamma shape"));
    }
    if !(0.0..1.0).contains(&args.random_range_ratio) {
        return Err(usage("--random-range-ratio", &args.random_range_ratio.to_string(), "must be in [0, 1)"));
    }
    let dataset = match args.dataset_name.as_str() {
        "random" => Dataset::Random {
            input_len: args.random_input_len,
            output_len: args.random_output_len,
            range_ratio: args.random_range_ratio,
            prefix_len: args.random_prefix_len,
        },
        "sonnet" => Dataset::Sonnet {
            input_len: args.sonnet_input_len,
            prefix_len: args.sonnet_prefix_len,
            output: LengthDist::Fixed { value: args.sonnet_output_len },
        },
        "trace" => {
            let path = args.dataset_path.clone().ok_or_else(|| usage("--dataset-path", "", "needed with --dataset-name trace"))?;
            let rows = crate::scenario::trace::read_trace(&path).map_err(|e| usage("--dataset-path", &path.display().to_string(), &e.to_string()))?;
            if let Some(&n) = num_prompts.iter().find(|&&n| n as usize > rows.len()) {
                return Err(usage("--num-prompts", &n.to_string(), "more prompts than the trace has rows"));
            }
            Dataset::Trace { path, rows }
        }
        // The simulator's name for every request at the random dataset's lengths, exactly.
        "fixed" => Dataset::Fixed { input_len: args.random_input_len, output_len: args.random_output_len },
        // Lengths come from the file (below); the dataset only sets the arrival process's seed.
        "sharegpt" => Dataset::Fixed { input_len: 1, output_len: 1 },
        other => return Err(usage("--dataset-name", other, "expected random, sonnet, sharegpt, fixed or trace")),
    };
    let workload = WorkloadConfig {
        num_prompts: num_prompts.clone(),
        request_rate,
        burstiness: args.burstiness,
        max_concurrency: args.max_concurrency,
        dataset,
        seed: args.seed,
        input_tokens_total: None,
        output_tokens_total: None,
    };
    let report = ReportOptions { layout, percentile_metrics, percentiles, max_concurrency: args.max_concurrency, request_rate };
    let tokenizer = match &args.tokenizer {
        Some(path) => Some(std::sync::Arc::new(
            crate::engine::server::Tokenizer::load(path).map_err(|e| usage("--tokenizer", &path.display().to_string(), &e.to_string()))?,
        )),
        None => None,
    };
    // ShareGPT: vLLM's sampling of a conversation file, counted with --tokenizer.
    let sharegpt = if args.dataset_name == "sharegpt" {
        let path = args.dataset_path.clone().ok_or_else(|| usage("--dataset-path", "", "needed with --dataset-name sharegpt (a ShareGPT JSON file)"))?;
        let tokenizer = tokenizer.clone().ok_or_else(|| {
            usage("--tokenizer", "", "needed with --dataset-name sharegpt: ShareGPT conversations are text, counted in the server's tokens")
        })?;
        let most = num_prompts.iter().copied().max().unwrap_or(0) as usize;
        let count = |text: &str| tokenizer.encode(text, true).map(|ids| ids.len());
        Some(
            crate::workload::sharegpt::sample_lengths(&path, most, args.seed, count)
                .map_err(|e| usage("--dataset-path", &path.display().to_string(), &e))?,
        )
    } else {
        None
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|source| Error::Output { path: "<tokio runtime>".into(), source })?;
    for (i, &n) in num_prompts.iter().enumerate() {
        let mut requests = crate::workload::generate(&workload, n);
        if let Some(lengths) = &sharegpt {
            // vLLM sends each completion's length as max_tokens.
            for (r, &(input, output)) in requests.iter_mut().zip(lengths) {
                (r.input_tokens, r.output_tokens, r.max_tokens) = (input, output, output);
            }
        }
        let mut config = BenchConfig::new(backend, args.base_url.clone(), args.model.clone(), requests);
        if let Some(endpoint) = &args.endpoint {
            config.endpoint = endpoint.clone();
        }
        config.max_concurrency = args.max_concurrency;
        config.ignore_eos = args.ignore_eos;
        config.tokenizer = tokenizer.clone();
        let progress = request_progress(config.requests.len());
        let tick = progress.clone();
        let run = runtime
            .block_on(crate::bench::run_with_progress(&config, std::sync::Arc::new(move |_| tick.inc(1))))
            .map_err(|e| usage("--base-url", &args.base_url, &e.to_string()));
        progress.finish_and_clear();
        let run = run?;
        let summary = crate::metrics::Summary::from_records(&run.records, &report.percentiles);
        let mut text = String::new();
        if i > 0 {
            text.push('\n');
        }
        text.push_str(&format!("num_prompts: {n}\n"));
        write_report(&mut text, &summary, &report).expect("writing to a String");
        print!("{text}");
        if let Some(first) = run.details.iter().find_map(|d| d.error.as_deref()) {
            eprintln!("{} request(s) failed; the first: {first}", run.failed());
        }
        if args.save_result {
            let mut json = crate::metrics::format::to_json(&summary, &report);
            let obj = json.as_object_mut().expect("to_json returns an object");
            let records = &run.records.requests;
            obj.insert("backend".into(), serde_json::json!(args.backend));
            obj.insert("model_id".into(), serde_json::json!(args.model));
            obj.insert("num_prompts".into(), serde_json::json!(n));
            crate::metrics::format::insert_request_arrays(obj, records);
            obj.insert(
                "itls".into(),
                serde_json::json!(run.details.iter().map(|d| d.itl_ns.iter().map(|&g| g as f64 / 1e9).collect::<Vec<_>>()).collect::<Vec<_>>()),
            );
            obj.insert("errors".into(), serde_json::json!(run.details.iter().map(|d| d.error.clone().unwrap_or_default()).collect::<Vec<_>>()));
            let path = args.result_dir.join(format!("bench-{}-{n}.json", args.backend));
            std::fs::create_dir_all(&args.result_dir).map_err(|source| Error::Output { path: args.result_dir.clone(), source })?;
            std::fs::write(&path, serde_json::to_string_pretty(&json).expect("plain JSON"))
                .map_err(|source| Error::Output { path: path.clone(), source })?;
            // Per request, in the columns of `simulate --out`'s requests.csv, plus the error.
            let csv = path.with_extension("csv");
            let rows = run.records.requests.iter().zip(&run.details).enumerate().map(|(request_id, (record, detail))| {
                crate::run::output::RequestRow {
                    num_prompts: n,
                    request_id,
                    record,
                    replica: None,
                    preemptions: None,
                    error: detail.error.as_deref(),
                }
            });
            crate::run::output::write_requests_file(&csv, rows)?;
            eprintln!("wrote {} and {}", path.display(), csv.display());
        }
    }
    Ok(())
}

/// The tokenizer `serve` uses: `--tokenizer`, else the `--model` directory's `tokenizer.json`,
/// else the shipped one for the model's vocabulary size; refused if its ids do not fit the model.
fn serve_tokenizer(args: &ServeArgs, model: &str, vocab_size: u32) -> Result<crate::engine::server::Tokenizer, Error> {
    use crate::engine::server::Tokenizer;
    let usage = |flag: &'static str, value: &std::path::Path, reason: String| Error::Usage { flag, value: value.display().to_string(), reason };
    let (flag, value, tokenizer) = match (&args.tokenizer, &args.model) {
        (Some(path), _) => ("--tokenizer", path.clone(), Tokenizer::load(path).map_err(|e| usage("--tokenizer", path, e.to_string()))?),
        (None, Some(dir)) if dir.join("tokenizer.json").exists() => {
            ("--model", dir.clone(), Tokenizer::load(dir).map_err(|e| usage("--model", dir, e.to_string()))?)
        }
        _ => {
            let tokenizer = Tokenizer::shipped(vocab_size).ok_or_else(|| {
                let reason = format!(
                    "model {model} has a vocabulary of {vocab_size} ids and no tokenizer.json; servesim ships tokenizers for 256 and 32000 ids only: give --tokenizer DIR"
                );
                usage("--tokenizer", std::path::Path::new(""), reason)
            })?;
            return Ok(tokenizer);
        }
    };
    tokenizer.check_fits(vocab_size, model).map_err(|reason| usage(flag, &value, reason))?;
    Ok(tokenizer)
}

fn serve(args: ServeArgs) -> Result<(), Error> {
    use crate::engine::cuda::CudaModelExecutor;
    use crate::engine::model::{LlamaConfig, LlamaWeights, ModelExecutor};
    use crate::engine::server::{CudaModelEngine, Executor, ModelEngine};

    let usage = |flag: &'static str, value: &str, reason: String| Error::Usage { flag, value: value.into(), reason };
    // `None` for the CPU, `Some(N)` for cuda:N.
    let gpu = match args.device.as_str() {
        "cpu" => None,
        other => match other.strip_prefix("cuda:").and_then(|n| n.parse::<usize>().ok()) {
            Some(ordinal) => Some(ordinal),
            None => return Err(usage("--device", &args.device, "expected `cpu` or `cuda:N`".into())),
        },
    };
    let (name, weights) = match (&args.model, &args.random_weights) {
        (Some(dir), _) => {
            let weights = LlamaWeights::load_dir(dir).map_err(|e| usage("--model", &dir.display().to_string(), e.to_string()))?;
            (dir.display().to_string(), weights)
        }
        (None, Some(size)) => {
            let config = LlamaConfig::named(size)
                .ok_or_else(|| usage("--random-weights", size, "expected tiny, small or 100m".into()))?;
            (format!("random-{size}"), LlamaWeights::random(&config, args.seed))
        }
        (None, None) => return Err(usage("--model", "", "give --model DIR or --random-weights SIZE".into())),
    };
    let knobs = args.knobs.knobs()?;
    let tokenizer = serve_tokenizer(&args, &name, weights.config.vocab_size as u32)?;
    let context_len = knobs.context_len(weights.config.max_position_embeddings);
    let (blocks, block_size) = (knobs.num_gpu_blocks as usize, knobs.block_size as usize);
    // Cores the CPU engine computes on (none on a GPU): the HTTP runtime gets the rest.
    let mut engine_threads = 0;
    let executor: Box<dyn Executor> = match gpu {
        None => {
            let threads = args.threads.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
            engine_threads = threads;
            let mut model = ModelExecutor::new(weights, blocks, block_size)
                .map_err(|e| usage("--num-gpu-blocks", &knobs.num_gpu_blocks.to_string(), e.to_string()))?;
            model.use_own_pool(threads).map_err(|e| usage("--threads", &threads.to_string(), e.to_string()))?;
            Box::new(ModelEngine::new(model))
        }
        Some(ordinal) => {
            // A missing driver or GPU is reported as calibrate reports it: the --device value
            // cannot be used on this machine (exit code 2), with the CUDA layer's reason.
            let model = CudaModelExecutor::new(&weights, blocks, block_size, ordinal)
                .map_err(|e| usage("--device", &args.device, e.to_string()))?;
            drop(weights);
            let d = model.device();
            eprintln!("forward pass on {} ({}, compute capability {:?}, driver {})", d.label(), d.name(), d.compute_capability(), d.driver_version());
            Box::new(CudaModelEngine::new(model))
        }
    };
    let runtime = crate::engine::server::http_runtime(engine_threads)
        .map_err(|source| Error::Output { path: "<tokio runtime>".into(), source })?;
    runtime.block_on(async move {
        let address = format!("{}:{}", args.host, args.port);
        let listener = tokio::net::TcpListener::bind(&address)
            .await
            .map_err(|e| usage("--port", &address, format!("cannot listen: {e}")))?;
        let engine = knobs
            .start(executor, args.max_waiting, context_len)
            .with_model_name(name.clone())
            .with_tokenizer(std::sync::Arc::new(tokenizer))
            .with_ignore_eos(args.ignore_eos);
        eprintln!("serving {name} on http://{address} (servesim policy: vLLM V1 scheduling, eager; context {context_len} tokens, tokenizer {})", engine.tokenizer().origin());
        // SIGTERM or Ctrl-C: stop accepting and let in-flight requests finish.
        let shutdown = async {
            let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = async { match term.as_mut() { Some(t) => { t.recv().await; } None => std::future::pending::<()>().await } } => {}
            }
            eprintln!("shutting down");
        };
        let trace = engine.clone();
        crate::engine::server::serve(listener, engine, shutdown)
            .await
            .map_err(|source| Error::Output { path: address.into(), source })?;
        if let Some(path) = &args.timeline {
            let steps = trace.trace();
            crate::run::output::write_timeline_file(path, steps.iter().map(|s| (0, s)), knobs.num_gpu_blocks)?;
            eprintln!("wrote {} ({} steps)", path.display(), steps.len());
        }
        Ok(())
    })
}
