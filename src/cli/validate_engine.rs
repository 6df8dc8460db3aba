//! `servesim validate --engine`: calibrate this machine, serve servesim's own engine, bench it,
//! simulate the same requests with the profile, and compare.

use std::path::{Path, PathBuf};

use clap::Args;

use super::flags::{self, usage};
use super::knobs::EngineKnobsArgs;
use crate::Error;
use crate::calibrate::grid::GridScale;
use crate::validate::engine::{self, EngineSetup, EngineValidationConfig, SweepSetup};

/// `validate --engine`: the whole loop on this machine against servesim's own engine.
#[derive(Debug, Args)]
pub struct EngineValidationArgs {
    /// Instead of recorded runs: calibrate this machine's CPU (or GPU, `--device`), start
    /// servesim's engine, bench a sweep, simulate the same workload with the profile, and print measured vs simulated.
    #[arg(id = "engine", long = "engine", conflicts_with_all = ["scenarios", "recorded", "set"])]
    pub enabled: bool,
    /// With --engine: the model's random-weight size (tiny, small, 100m, 1b).
    #[arg(long, default_value = "small")]
    pub random_weights: String,
    /// With --engine: `cpu` (the CPU engine in f32) or `cuda:N` (the CUDA engine on GPU N in
    /// bf16, calibrated there with cuBLASLt and its kernels).
    #[arg(long, default_value = "cpu")]
    pub device: String,
    /// With --engine: threads of the engine and of calibration (default: all cores but one,
    /// which the HTTP server and the benchmark client need beside the engine).
    #[arg(long)]
    pub threads: Option<usize>,
    /// With --engine: reuse this calibration profile of the device (from an earlier `--out DIR`'s
    /// cpu.csv or gpu.csv, or `calibrate`) instead of calibrating.
    #[arg(long, value_name = "CSV")]
    pub profile: Option<PathBuf>,
    /// With --engine: calibration grid (tiny, quick, full).
    #[arg(long, default_value = "tiny")]
    pub grid: String,
    /// With --engine: calibration's time budget in minutes: the grid is measured in 3 passes
    /// while it lasts (the host sampler's few shapes always are).
    #[arg(long, default_value_t = 1.5)]
    pub calibration_minutes: f64,
    /// With --engine: prompt tokens of every request.
    #[arg(long, default_value_t = 128)]
    pub input_len: u32,
    /// With --engine: output tokens of every request (end-of-sequence ignored).
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

pub(super) fn run(args: EngineValidationArgs, out: Option<&Path>) -> Result<(), Error> {
    let concurrency = flags::positive_integers("--concurrency", &args.concurrency)?;
    if !(args.poisson_load >= 0.0 && args.poisson_load.is_finite()) {
        return Err(usage("--poisson-load", args.poisson_load, "must be a fraction ≥ 0"));
    }
    if !(args.calibration_minutes > 0.0 && args.calibration_minutes.is_finite()) {
        return Err(usage("--calibration-minutes", args.calibration_minutes, "must be a positive number of minutes"));
    }
    if args.input_len == 0 || args.output_len == 0 {
        return Err(usage("--input-len", format!("{}/{}", args.input_len, args.output_len), "input and output lengths must be positive"));
    }
    let knobs = args.knobs.knobs()?;
    if let Some(lookup) = knobs.ngram {
        // The twin would draw acceptances at rates the scenario must be given, while the engine's
        // n-gram drafts vary in number from step to step: the comparison would not be like for like.
        return Err(Error::Usage {
            flag: "--num-speculative-tokens",
            value: lookup.num_speculative_tokens.to_string(),
            reason: "validate --engine does not compare speculative decoding: serve with it and read its acceptance from /metrics \
                     (docs/speculative-decoding.md)"
                .into(),
        });
    }
    let grid = GridScale::parse(&args.grid).ok_or_else(|| usage("--grid", &args.grid, "expected `full`, `quick` or `tiny`"))?;
    let profile = args.profile.as_deref().map(flags::profile).transpose()?;
    let device = flags::device(&args.device)?;
    let config = EngineValidationConfig {
        engine: EngineSetup {
            size: args.random_weights,
            seed: args.seed,
            // One core is left to the HTTP server and the client: with every core computing, each
            // streamed token preempts a compute thread and a step is no longer its kernels' time
            // (on 2 cores, 2 threads priced 5–8-sequence decodes 25% too cheap, 1 thread 14%).
            threads: args.threads.unwrap_or_else(|| flags::all_cores().saturating_sub(1).max(1)),
            knobs,
            device,
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
    let validation = engine::run(&config, &mut |line| eprintln!("{line}"))?;
    print!("{}", engine::render(&validation));
    if let Some(dir) = out {
        engine::write_outputs(&validation, dir)?;
        eprintln!("wrote {}", dir.display());
    }
    // A run that cannot judge says so and fails, whatever --fail-on-miss says: its table is no
    // verdict (exit 3, as a plan that ran and found no answer).
    if let Some(reason) = &validation.cannot_judge {
        return Err(Error::NoAnswer(format!("validate --engine cannot judge the twin on this machine: {reason}")));
    }
    if args.fail_on_miss && !validation.meets_targets() {
        return Err(Error::Output { path: "validate --engine".into(), source: std::io::Error::other("a series missed its error target") });
    }
    Ok(())
}
