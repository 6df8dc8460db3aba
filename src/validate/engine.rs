//! `servesim validate --engine`: the whole prediction loop on this machine.
//!
//! ```text
//!  1 calibrate   the CPU engine's kernels on this machine's cores ──► Profile
//!  2 serve       servesim's own engine (random weights) on 127.0.0.1, in-process
//!  3 bench       a sweep: fixed-length requests at concurrency 1, 8, 32 (back to back), then a
//!                Poisson rate at a fraction of the measured saturation throughput
//!  4 simulate    the same requests (same seed, same arrival process, same concurrency gate) on
//!                the same scheduler with policy `servesim`, priced by the calibrated profile
//!  5 compare     per series: output throughput, mean TPOT, mean TTFT, measured vs simulated;
//!                per step kind: the engine's own step trace vs the simulator's step costs
//! ```
//!
//! The scenario that step 4 simulates is built from the engine's real configuration, not typed
//! twice: [`scenario_toml`] writes it from the same [`EngineSetup`] the engine is started with,
//! and it is saved beside the results so that `servesim simulate` can rerun it.
//!
//! What the step comparison is for: when a series misses its target, the trace says whether the
//! simulator mis-prices decode steps (GEMMs at small m, decode attention), prefill steps, or
//! neither (then the difference is in the client or the HTTP path, outside the engine's steps).

use std::fmt::Write as _;
use std::time::Duration;

use crate::Error;
use crate::bench::{Backend, BenchConfig};
use crate::calibrate::backend::{Backend as CalibrationBackend, Peak, SamplingMethod};
use crate::calibrate::consistency::RETIMES_DEFAULT;
use crate::calibrate::focus::{AttentionRegion, Focus};
use crate::calibrate::grid::{Grid, GridOptions, GridScale};
use crate::calibrate::profile::Profile;
use crate::calibrate::run::RunOptions;
use crate::calibrate::timing::TimingOptions;
use crate::cost::calibrated::{Calibrated, ProfileIndex};
use crate::cost::sampling::SamplingCost;
use crate::engine::model::{LlamaConfig, LlamaWeights, ModelExecutor, SamplingParams};
use crate::engine::cuda::CudaModelExecutor;
use crate::engine::server::{CudaModelEngine, EngineHandle, EngineKnobs, Executor, ModelEngine, Tokenizer};
use crate::metrics::Summary;
use crate::metrics::format::{ReportOptions, to_json};
use crate::run::{PointResult, run_point, sim_config};
use crate::scenario::{Dtype, Policy, Scenario};
use crate::timeline::StepRow;

/// The metrics compared, with the issue's error targets: ≤ 10% on output throughput and mean
/// TPOT, ≤ 20% on mean TTFT (TTFT is a few steps at most, so one mis-priced prefill weighs more).
pub const TARGETS: [(&str, f64); 3] = [("output_throughput", 0.10), ("mean_tpot_ms", 0.10), ("mean_ttft_ms", 0.20)];

/// The engine under test: model, scheduler knobs and threads. Both the engine and the simulated
/// scenario are built from it.
#[derive(Clone, Debug, PartialEq)]
pub struct EngineSetup {
    /// `--random-weights` size (`tiny`, `small`, `100m`).
    pub size: String,
    pub seed: u64,
    /// CPU threads of the engine and of calibration (on a GPU: of calibration's CPU side only).
    pub threads: usize,
    pub knobs: EngineKnobs,
    /// `None`: the CPU engine in f32; `Some(n)`: the CUDA engine on GPU `n` in bf16.
    pub device: Option<usize>,
}

impl EngineSetup {
    /// `cpu` or `cuda:N`, as `--device` takes it.
    pub fn device_label(&self) -> String {
        self.device.map_or_else(|| "cpu".to_string(), |n| format!("cuda:{n}"))
    }

    /// Where and in what the engine computes, for the report.
    pub fn runs_on(&self) -> String {
        match self.device {
            None => format!("{} threads (f32)", self.threads),
            Some(n) => format!("cuda:{n} (bf16)"),
        }
    }

    /// The dtype the engine computes, stores its KV cache and is calibrated in.
    fn dtype(&self) -> Dtype {
        if self.device.is_some() { Dtype::Bf16 } else { Dtype::Fp32 }
    }
}

/// The workload of the sweep.
#[derive(Clone, Debug, PartialEq)]
pub struct SweepSetup {
    pub input_len: u32,
    pub output_len: u32,
    /// One closed-loop series per value: at most this many requests in flight, sent back to back.
    pub concurrency: Vec<u32>,
    /// Each closed-loop series sends `rounds × concurrency` requests (at least [`MIN_PROMPTS`]).
    pub rounds: u32,
    /// The open-loop series' Poisson rate, as a fraction of the request throughput measured at
    /// the highest concurrency; 0 leaves the series out.
    pub poisson_load: f64,
}

/// Fewest requests in one series: fewer make a mean of little meaning.
pub const MIN_PROMPTS: u32 = 8;

/// Everything one run needs.
#[derive(Clone, Debug)]
pub struct EngineValidationConfig {
    pub engine: EngineSetup,
    pub sweep: SweepSetup,
    /// A CPU profile to reuse; `None` calibrates first.
    pub profile: Option<Profile>,
    pub grid: GridScale,
    pub calibration_budget: Option<Duration>,
}

/// One series: what the client measured, and what the simulator predicted.
#[derive(Clone, Debug)]
pub struct Series {
    pub label: String,
    pub scenario: Scenario,
    pub measured: Summary,
    pub simulated: PointResult,
    /// The engine's step trace while the series ran.
    pub engine_steps: Vec<StepRow>,
    pub failed: usize,
}

/// The result of [`run`].
#[derive(Clone, Debug)]
pub struct EngineValidation {
    pub setup: EngineSetup,
    pub profile: Profile,
    /// The simulated scenario's TOML (one series' workload; the others differ only there).
    pub scenario_toml: String,
    /// The engine's sampler as timed on this machine; the greedy figure prices the twin.
    pub sampling: SamplingTimes,
    pub series: Vec<Series>,
    /// Why this run cannot judge the twin (the machine's speed moved; [`super::machine`]), or
    /// `None` where it can: then no target is passed or failed.
    pub cannot_judge: Option<String>,
}

/// A metric of one series, measured and simulated.
#[derive(Clone, Debug, PartialEq)]
pub struct Comparison {
    pub key: &'static str,
    pub measured: f64,
    pub simulated: f64,
    pub target: f64,
}

impl Comparison {
    pub fn error(&self) -> f64 {
        super::relative_error(self.simulated, self.measured)
    }

    pub fn meets_target(&self) -> bool {
        self.error().abs() <= self.target
    }
}

impl Series {
    /// [`TARGETS`]' metrics, by vLLM `--save-result` key from the one `to_json` both sides use.
    pub fn comparisons(&self) -> Vec<Comparison> {
        let opts = ReportOptions::default();
        let measured = to_json(&self.measured, &opts);
        let simulated = to_json(&self.simulated.summary, &opts);
        let get = |v: &serde_json::Value, key: &str| v.get(key).and_then(|x| x.as_f64()).unwrap_or(f64::NAN);
        TARGETS
            .iter()
            .map(|&(key, target)| Comparison { key, measured: get(&measured, key), simulated: get(&simulated, key), target })
            .collect()
    }
}

impl EngineValidation {
    /// Whether every series meets every target (false where the run cannot judge).
    pub fn meets_targets(&self) -> bool {
        self.cannot_judge.is_none() && self.series.iter().all(|s| s.failed == 0 && s.comparisons().iter().all(Comparison::meets_target))
    }
}

/// The model configuration of a `--random-weights` size.
fn llama_config(size: &str) -> Result<LlamaConfig, Error> {
    LlamaConfig::named(size).ok_or_else(|| Error::Usage {
        flag: "--random-weights",
        value: size.to_string(),
        reason: LlamaConfig::unknown_name_reason(),
    })
}

/// The scenario that describes `setup` serving `sweep`'s first closed-loop series, on the device
/// calibration measured (a CPU is a "GPU" here). The simulator needs a peak and a
/// bandwidth only for what the profile lacks (element-wise work); capacity is moot because the
/// KV cache is sized by `num_gpu_blocks` exactly as the engine's is.
/// On a GPU the hardware is named as its driver reports it, `device_name`, so that the profile
/// matches it by GPU family.
pub fn scenario_toml(setup: &EngineSetup, sweep: &SweepSetup, device_name: &str, peak: Peak, host: HostOverhead) -> Result<String, Error> {
    let m = llama_config(&setup.size)?;
    let concurrency = sweep.concurrency.first().copied().unwrap_or(1);
    let mut t = String::new();
    let _ = writeln!(t, "# Written by `servesim validate --engine`: servesim's own engine on {} as the simulator sees it.", setup.device_label());
    let _ = writeln!(t, "# Rerun with: servesim simulate THIS.toml --profile {}", profile_file_name(setup));
    let _ = writeln!(t, "name = \"engine-{}\"\n", setup.size);
    let _ = writeln!(t, "[model]");
    let _ = writeln!(t, "name = \"random-{}\"", setup.size);
    let _ = writeln!(t, "num_layers = {}", m.num_layers);
    let _ = writeln!(t, "hidden_size = {}", m.hidden_size);
    let _ = writeln!(t, "num_heads = {}", m.num_heads);
    let _ = writeln!(t, "num_kv_heads = {}", m.num_kv_heads);
    let _ = writeln!(t, "head_dim = {}", m.head_dim);
    let _ = writeln!(t, "ffn_size = {}", m.intermediate_size);
    let _ = writeln!(t, "vocab_size = {}", m.vocab_size);
    let _ = writeln!(t, "tied_embeddings = {}", m.tie_word_embeddings);
    let _ = writeln!(t, "max_position_embeddings = {}", m.max_position_embeddings);
    let dtype = setup.dtype().name();
    let _ = writeln!(t, "dtype = \"{dtype}\"\nkv_cache_dtype = \"{dtype}\"\n");
    let _ = writeln!(t, "[hardware]");
    match setup.device {
        None => writeln!(t, "name = \"CPU, {} threads (calibrated)\"", setup.threads),
        Some(n) => writeln!(t, "name = \"{device_name} (cuda:{n}, calibrated)\""),
    }
    .expect("writing to a String");
    let _ = writeln!(t, "peak_tflops_16bit = {}", peak.flops_per_s / 1e12);
    let _ = writeln!(t, "memory_bandwidth_gbps = {}", peak.memory_bytes_per_s / 1e9);
    let _ = writeln!(t, "memory_gib = 16\ninterconnect_gbps = 1\ncount = 1\n");
    let _ = writeln!(t, "[engine]");
    let k = &setup.knobs;
    if k.policy == Policy::Sglang {
        write_sglang_engine(&mut t, k);
    } else {
        write_servesim_engine(&mut t, k, m.max_position_embeddings as u32);
    }
    let _ = writeln!(t, "# The engine's host time, timed on its own loop with a forward pass that computes nothing.");
    let _ = writeln!(t, "[cost]");
    let _ = writeln!(t, "step_overhead_eager_us = {:.3}", host.step_us);
    let _ = writeln!(t, "seq_overhead_us = {:.3}", host.seq_us);
    let _ = writeln!(t, "prefill_step_overhead_us = 0.0\nprefill_seq_overhead_us = 0.0");
    let _ = writeln!(t, "# Its HTTP front end's time per request, timed on one-token requests to that loop.");
    let _ = writeln!(t, "frontend_overhead_us = {:.3}\n", host.frontend_us);
    let _ = writeln!(t, "[workload]");
    let _ = writeln!(t, "num_prompts = {}", series_prompts(sweep, concurrency));
    let _ = writeln!(t, "request_rate = \"inf\"");
    let _ = writeln!(t, "max_concurrency = {concurrency}");
    let _ = writeln!(t, "seed = {}", setup.seed);
    let _ = writeln!(t, "[workload.dataset]");
    let _ = writeln!(t, "kind = \"fixed\"");
    let _ = writeln!(t, "input_len = {}\noutput_len = {}", sweep.input_len, sweep.output_len);
    Ok(t)
}

/// `[engine]` of the twin of servesim's own engine (policy `servesim`).
fn write_servesim_engine(t: &mut String, k: &EngineKnobs, max_positions: u32) {
    let _ = writeln!(t, "policy = \"servesim\"");
    let _ = writeln!(t, "max_num_seqs = {}", k.max_num_seqs);
    let _ = writeln!(t, "max_num_batched_tokens = {}", k.max_num_batched_tokens);
    let _ = writeln!(t, "block_size = {}", k.block_size);
    let _ = writeln!(t, "num_gpu_blocks = {}", k.num_gpu_blocks);
    if k.num_scheduler_steps > 1 {
        let _ = writeln!(t, "num_scheduler_steps = {}", k.num_scheduler_steps);
        // A window schedules prompts whole, so the engine serves no sequence longer than its
        // step budget: the twin's context is bounded alike.
        let _ = writeln!(t, "max_model_len = {}", k.max_num_batched_tokens.min(max_positions));
    }
    if k.enable_prefix_caching {
        let _ = writeln!(t, "enable_prefix_caching = true");
    }
    let _ = writeln!(t, "watermark = 0.0\n");
}

/// `[engine]` of the twin of the engine run `--policy sglang`: SGLang's flags for the same
/// knobs (`EngineKnobs::sglang_config`), eager and without the overlap scheduler, as the engine
/// runs.
fn write_sglang_engine(t: &mut String, k: &EngineKnobs) {
    let _ = writeln!(t, "policy = \"sglang\"\n[engine.sglang]");
    let _ = writeln!(t, "max_running_requests = {}", k.max_num_seqs);
    let _ = writeln!(t, "chunked_prefill_size = {}", k.max_num_batched_tokens);
    let _ = writeln!(t, "page_size = {}", k.block_size);
    let _ = writeln!(t, "max_total_tokens = {}", u64::from(k.num_gpu_blocks) * u64::from(k.block_size));
    let _ = writeln!(t, "disable_radix_cache = {}", !k.enable_prefix_caching);
    let _ = writeln!(t, "disable_cuda_graph = true\ndisable_overlap_schedule = true\n");
}

fn series_prompts(sweep: &SweepSetup, concurrency: u32) -> u32 {
    (sweep.rounds.saturating_mul(concurrency)).max(MIN_PROMPTS)
}

/// What the engine's steps run under `sweep`, on the axes the cost model prices them by:
/// calibration measures these shapes first ([`Focus`]). A step holds at most `max_num_seqs`
/// sequences (the Poisson series is not held to a concurrency), at most its token budget and at
/// most a prompt per sequence; a decode's context runs from the prompt to the prompt plus the
/// output, and a chunk continuing a prompt sits over part of it.
pub fn focus(setup: &EngineSetup, sweep: &SweepSetup) -> Focus {
    let k = &setup.knobs;
    let closed = sweep.concurrency.iter().copied().max().unwrap_or(1);
    let seqs = if sweep.poisson_load > 0.0 { k.max_num_seqs } else { closed.min(k.max_num_seqs) }.max(1);
    let budget = k.max_num_batched_tokens.max(1);
    let prompt = sweep.input_len.clamp(1, budget);
    let tokens = budget.min(seqs.saturating_mul(sweep.input_len.max(1))).max(seqs.min(budget));
    Focus {
        gemm_m: (1, tokens),
        prefill: AttentionRegion { batch: (1, seqs.min(budget)), query_len: (1, prompt), context_len: (0, 0) },
        decode: AttentionRegion {
            batch: (1, seqs),
            query_len: (1, 1),
            context_len: (sweep.input_len, sweep.input_len.saturating_add(sweep.output_len)),
        },
        mixed: AttentionRegion { batch: (1, seqs), query_len: (1, prompt), context_len: (1, sweep.input_len.max(1)) },
    }
}

/// Calibrates (unless a profile is given), starts the engine, benches the sweep, simulates it.
/// `log` receives one line per stage.
pub fn run(config: &EngineValidationConfig, log: &mut dyn FnMut(&str)) -> Result<EngineValidation, Error> {
    let setup = &config.engine;
    let sweep = &config.sweep;
    if sweep.concurrency.is_empty() || sweep.concurrency.contains(&0) {
        return Err(Error::Usage { flag: "--concurrency", value: format!("{:?}", sweep.concurrency), reason: "expected positive integers".into() });
    }
    let llama = llama_config(&setup.size)?;
    let profile = match &config.profile {
        Some(p) => p.clone(),
        None => calibrate_engine_device(config, log)?,
    };
    let peak = Peak { flops_per_s: profile.provenance.peak.flops_per_s, memory_bytes_per_s: profile.provenance.peak.memory_bytes_per_s };
    // The HTTP server and the bench client get the cores the engine does not compute on.
    let engine_threads = if setup.device.is_some() { 0 } else { setup.threads };
    let runtime = crate::engine::server::http_runtime(engine_threads)
        .map_err(|source| Error::Output { path: "<tokio runtime>".into(), source })?;
    let bare = Scenario::from_toml_str(&scenario_toml(setup, sweep, &profile.provenance.device.name, peak, HostOverhead::default())?, "engine.toml".as_ref(), &[])?;
    let host = measure_host_overhead(&runtime, &setup.knobs, &bare, &llama);
    log(&format!(
        "    host overhead of the engine loop: {:.1} µs per step + {:.2} µs per sequence; front end {:.0} µs per request",
        host.step_us, host.seq_us, host.frontend_us
    ));
    let scenario_text = scenario_toml(setup, sweep, &profile.provenance.device.name, peak, host)?;
    let base = Scenario::from_toml_str(&scenario_text, "engine.toml".as_ref(), &[])?;
    let index = ProfileIndex::new(&profile);
    let sampling = SamplingTimes::from_index(&index, base.model.vocab_size);
    log(&format!("    sampling, ns per logit of a sampled row, as calibration timed it: {}", sampling.describe()));
    if sampling.of(SamplingMethod::Greedy).is_none() {
        log("    (the profile did not time the sampler, so the twin leaves sampling unpriced: recalibrate to price it)");
    }
    // The bench asks for greedy tokens, and the calibrated model prices greedy sampling.
    let cost = Calibrated::from_index(index, &base.model, &base.hardware.gpu, 1, &base.cost);

    log(&format!("2/4 starting the engine: random-{} weights on {}", setup.size, setup.device_label()));
    let k = &setup.knobs;
    let model = start_executor(setup, &llama)?;
    let context_len = k.context_len(llama.max_position_embeddings);
    let engine = k
        .start(model, u32::MAX, context_len)
        .with_model_name(format!("random-{}", setup.size))
        .with_tokenizer(served_tokenizer(&llama));
    let server = LocalServer::start(&runtime, &engine)?;
    let base_url = server.base_url.clone();

    // Warm-up, as vLLM's client sends a test prompt first: the first steps page in weights and
    // spin up the thread pools, which no series should pay for.
    let mut warm = base.clone();
    warm.workload.num_prompts = vec![2];
    warm.workload.max_concurrency = Some(2);
    bench(&runtime, &engine, &base_url, &warm)?;

    log(&format!("3/4 benchmarking {} series against {base_url}", sweep.concurrency.len() + usize::from(sweep.poisson_load > 0.0)));
    let mut series = Vec::new();
    for &c in &sweep.concurrency {
        let mut s = base.clone();
        s.workload.num_prompts = vec![series_prompts(sweep, c)];
        s.workload.max_concurrency = Some(c);
        s.workload.request_rate = vec![f64::INFINITY];
        series.push(measure(&runtime, &engine, &base_url, &cost, s, format!("concurrency {c}"), log)?);
    }
    if sweep.poisson_load > 0.0 {
        let saturated = series.last().expect("at least one closed-loop series");
        // Rounded so the label, the scenario and a rerun agree on one number.
        let rate = (sweep.poisson_load * saturated.measured.request_throughput * 1000.0).round() / 1000.0;
        if rate > 0.0 && rate.is_finite() {
            let mut s = base.clone();
            s.workload.num_prompts = saturated.scenario.workload.num_prompts.clone();
            s.workload.max_concurrency = None;
            s.workload.request_rate = vec![rate; s.workload.num_prompts.len()];
            let label = format!("Poisson {rate:.3} req/s");
            series.push(measure(&runtime, &engine, &base_url, &cost, s, label, log)?);
        } else {
            // Every request of the saturated series failed (reported with it): there is no
            // throughput to take a fraction of, and a rate of 0 is no arrival process.
            log(&format!("    the Poisson series is left out: {} completed no request", saturated.label));
        }
    }
    server.stop(&runtime);
    // The calibration's reference kernel and the shapes the comparison leans on once more, on
    // the engine's threads: a machine whose speed moved since calibration cannot judge the twin
    // (a GPU's are not timed again here).
    let after = match setup.device {
        None => after_run_on_cpu(config, &profile, log),
        Some(_) => super::machine::AfterRun::default(),
    };
    let cannot_judge = super::machine::verdict(&profile, &after);
    log("4/4 compared");
    Ok(EngineValidation { setup: setup.clone(), profile, scenario_toml: scenario_text, sampling, series, cannot_judge })
}

/// The reference kernel and the engine's own shapes timed on the CPU after the benchmarks, as
/// calibration timed them ([`super::machine::after_run`]); nothing where the backend cannot start.
fn after_run_on_cpu(config: &EngineValidationConfig, profile: &Profile, log: &mut dyn FnMut(&str)) -> super::machine::AfterRun {
    let setup = &config.engine;
    let Ok(mut backend) = crate::calibrate::cpu::CpuBackend::new(setup.threads) else { return super::machine::AfterRun::default() };
    let Ok(grid) = engine_grid(config, &backend) else { return super::machine::AfterRun::default() };
    let shapes = super::machine::drift_shapes(profile, &focus(setup, &config.sweep), &grid);
    let after = super::machine::after_run(&mut backend, &grid, profile, &shapes, setup.dtype(), &TimingOptions::quick());
    if let Some(drift) = &after.drift {
        log(&format!("    after the benchmarks: {}", drift.describe()));
    }
    after
}

/// Times the kernels the engine runs, on the device it runs on, over its model's shapes up to
/// its token budget (what a step can run): the CPU's in f32 with several passes, as its kernels'
/// times move over seconds; a GPU's in bf16 with one pass and the L2 flushed, as `calibrate`
/// times them.
fn calibrate_engine_device(config: &EngineValidationConfig, log: &mut dyn FnMut(&str)) -> Result<Profile, Error> {
    let setup = &config.engine;
    let device_error = |reason: String| Error::Usage { flag: "--device", value: setup.device_label(), reason };
    let (mut backend, timing, passes): (Box<dyn CalibrationBackend>, TimingOptions, u32) = match setup.device {
        None => (
            Box::new(crate::calibrate::cpu::CpuBackend::new(setup.threads).map_err(|e| device_error(e.to_string()))?),
            TimingOptions::quick(),
            crate::calibrate::cpu::PASSES_DEFAULT,
        ),
        Some(ordinal) => (
            Box::new(crate::calibrate::cuda::CudaBackend::new(ordinal).map_err(|e| device_error(e.to_string()))?),
            // As the engine runs its decode steps: replayed in CUDA graphs, operands warm in L2.
            TimingOptions::default().with_method(crate::calibrate::timing::TimingMethod::Graph),
            1,
        ),
    };
    let grid = engine_grid(config, backend.as_ref())?;
    let on = match setup.device {
        None => format!("{} threads", setup.threads),
        Some(_) => backend.device_info().name,
    };
    log(&format!("1/4 calibrating {} shapes of the {} model on {on}, the engine's own first", grid.len(), setup.size));
    let options = RunOptions {
        budget: config.calibration_budget,
        shapes_max: None,
        progress: false,
        timing,
        passes,
        noise_check: true,
        focus: Some(focus(setup, &config.sweep)),
        retimes_max: RETIMES_DEFAULT,
    };
    let started = std::time::Instant::now();
    let profile = crate::calibrate::run::calibrate(backend.as_mut(), &grid, &options).map_err(|e| device_error(format!("calibration failed: {e}")))?;
    log(&format!("    {}; {:.0} s", profile.provenance.run, started.elapsed().as_secs_f64()));
    // A machine too noisy to calibrate is too noisy to validate against: say so first.
    if let Some(warning) = profile.provenance.run.reference.as_ref().and_then(|r| r.warning()) {
        log(&format!("    {warning}"));
    }
    Ok(profile)
}

/// The calibration grid of the engine's model on `backend`: its shapes up to its token budget
/// (what a step can run), with the host sampler's (servesim's engines sample on the host, the
/// CUDA one too: its twin prices that).
fn engine_grid(config: &EngineValidationConfig, backend: &dyn CalibrationBackend) -> Result<Grid, Error> {
    let setup = &config.engine;
    let bare =
        Scenario::from_toml_str(&scenario_toml(setup, &config.sweep, &backend.device_info().name, backend.peak(), HostOverhead::default())?, "engine.toml".as_ref(), &[])?;
    let mut options = GridOptions {
        sampling_rows: crate::calibrate::grid::SAMPLING_ROWS,
        ..GridOptions::for_model(bare.model.clone(), vec![1], vec![setup.dtype()], config.grid)
    };
    options.max_m = setup.knobs.max_num_batched_tokens.max(setup.knobs.max_num_seqs);
    options.extra_m = backend.gemm_m_breakpoints();
    Ok(Grid::new(options))
}

/// The profile's file name in `--out DIR`: `cpu.csv` or `gpu.csv`.
fn profile_file_name(setup: &EngineSetup) -> &'static str {
    if setup.device.is_some() { "gpu.csv" } else { "cpu.csv" }
}

/// The engine's forward pass and sampler on `setup`'s device, over random weights of its size.
fn start_executor(setup: &EngineSetup, llama: &LlamaConfig) -> Result<Box<dyn Executor>, Error> {
    let k = &setup.knobs;
    let weights = LlamaWeights::random(llama, setup.seed);
    let (blocks, block_size) = (k.num_gpu_blocks as usize, k.block_size as usize);
    let blocks_error = |e: String| Error::Usage { flag: "--num-gpu-blocks", value: k.num_gpu_blocks.to_string(), reason: e };
    Ok(match setup.device {
        None => {
            let mut model = ModelExecutor::new(weights, blocks, block_size).map_err(|e| blocks_error(e.to_string()))?;
            model
                .use_own_pool(setup.threads)
                .map_err(|e| Error::Usage { flag: "--threads", value: setup.threads.to_string(), reason: e.to_string() })?;
            Box::new(ModelEngine::new(model))
        }
        Some(ordinal) => {
            let mut model = CudaModelExecutor::new(&weights, blocks, block_size, ordinal)
                .map_err(|e| Error::Usage { flag: "--device", value: setup.device_label(), reason: e.to_string() })?;
            // Parts timed as on a CPU, so the step table compares them.
            model.set_time_parts(true);
            Box::new(CudaModelEngine::new(model))
        }
    })
}

/// The engine's sampler as the profile timed it (calibration's sampling rows), per logit of a
/// sampled row, for each [`SamplingMethod`] in order; `None` where the profile has no row of the
/// method (one reused from before calibration timed the sampler).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct SamplingTimes([Option<SamplingCost>; SamplingMethod::ALL.len()]);

impl SamplingTimes {
    fn from_index(index: &ProfileIndex, vocab: u32) -> SamplingTimes {
        SamplingTimes(SamplingMethod::ALL.map(|method| index.sampling_cost(method, vocab)))
    }

    /// What `method` costs, if the profile timed it.
    pub fn of(&self, method: SamplingMethod) -> Option<SamplingCost> {
        SamplingMethod::ALL.iter().zip(self.0).find_map(|(&m, cost)| (m == method).then_some(cost).flatten())
    }

    /// "greedy 0.599, temperature 1 0.516, …" in ns per logit, "—" for a method not timed.
    fn describe(&self) -> String {
        let figure = |cost: Option<SamplingCost>| cost.map_or("—".to_string(), |c| format!("{:.3}", c.ns_per_logit()));
        let parts: Vec<String> = SamplingMethod::ALL.iter().zip(self.0).map(|(m, cost)| format!("{} {}", m.label(), figure(cost))).collect();
        parts.join(", ")
    }
}

/// The engine's host time per step: scheduling, building the step's inputs, delivering tokens.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct HostOverhead {
    /// Per step, µs (the simulator's `step_overhead_eager_us`: the engine runs no graphs).
    pub step_us: f64,
    /// Per sequence in the step, µs (`seq_overhead_us`).
    pub seq_us: f64,
    /// Per request, from the client's send to the scheduler, µs (`frontend_overhead_us`).
    pub frontend_us: f64,
}

/// The tokenizer `servesim serve` gives a random-weight model: every generated id has text, so
/// the client times every token.
fn served_tokenizer(llama: &LlamaConfig) -> std::sync::Arc<Tokenizer> {
    std::sync::Arc::new(Tokenizer::shipped(llama.vocab_size as u32).unwrap_or_else(Tokenizer::bytes))
}

/// An engine served over HTTP on 127.0.0.1 (an ephemeral port) until [`LocalServer::stop`].
struct LocalServer {
    base_url: String,
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl LocalServer {
    fn start(runtime: &tokio::runtime::Runtime, engine: &EngineHandle) -> Result<LocalServer, Error> {
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .map_err(|source| Error::Output { path: "127.0.0.1:0".into(), source })?;
        let address = listener.local_addr().map_err(|source| Error::Output { path: "127.0.0.1:0".into(), source })?;
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = runtime.spawn(crate::engine::server::serve(listener, engine.clone(), async {
            let _ = stopped.await;
        }));
        Ok(LocalServer { base_url: format!("http://{address}"), stop, task })
    }

    fn stop(self, runtime: &tokio::runtime::Runtime) {
        let _ = self.stop.send(());
        let _ = runtime.block_on(self.task);
    }
}

/// A forward pass that computes nothing: the engine loop around it is all that takes time.
/// No-op steps outrun request arrivals, so while a step's batch is smaller than `batch_target`
/// it lingers a millisecond, letting the engine admit the rest of a burst between steps; the
/// steps of the full batch, the ones timed, do no such thing.
struct NoCompute {
    vocab_size: u32,
    batch_target: std::sync::Arc<std::sync::atomic::AtomicU32>,
}

impl crate::engine::server::Executor for NoCompute {
    fn forward(&mut self, batch: &crate::sched::Batch, _inputs: &crate::engine::server::StepInputs) -> Result<Vec<u32>, String> {
        if (batch.seqs.len() as u32) < self.batch_target.load(std::sync::atomic::Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(1));
        }
        // Token 1: any id but an EOS (there is none) would do.
        Ok(vec![1; batch.seqs.iter().filter(|w| w.samples_token).count()])
    }
    fn vocab_size(&self) -> u32 {
        self.vocab_size
    }
    fn eos_token(&self) -> Option<u32> {
        None
    }
}

/// Times the engine's loop, with the scenario's scheduler, around [`NoCompute`]: a batch of one
/// sequence, then a full batch of `max_num_seqs`, each decoding 64 tokens. The line through the
/// median step time of the two is the overhead per step and per sequence. The model's own forward
/// pass (and its sampling) is priced by calibration, not here.
///
/// Then the front end: the same engine over HTTP, one request at a time of `bare`'s prompts
/// and one output token. Such a request's time to first token is the front end's plus one step
/// of one sequence, so the front end's is the median TTFT less that step. Its requests reach the
/// scheduler through the same HTTP parsing, tokenizer and channel as the real run's.
fn measure_host_overhead(runtime: &tokio::runtime::Runtime, knobs: &EngineKnobs, bare: &Scenario, llama: &LlamaConfig) -> HostOverhead {
    use crate::engine::server::GenerateParams;
    const DECODE_TOKENS: u32 = 64;
    let batch_target = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
    let executor = NoCompute { vocab_size: llama.vocab_size as u32, batch_target: batch_target.clone() };
    let engine = knobs
        .start(executor, u32::MAX, knobs.context_len(llama.max_position_embeddings))
        .with_model_name(bare.model.name.clone())
        .with_tokenizer(served_tokenizer(llama));
    let median_step_ns = |seqs: u32| -> Option<f64> {
        let before = engine.stats().steps_total;
        batch_target.store(seqs, std::sync::atomic::Ordering::Relaxed);
        runtime.block_on(async {
            let mut streams = Vec::new();
            for _ in 0..seqs {
                let params = GenerateParams { prompt: vec![1; 16], max_tokens: DECODE_TOKENS, ignore_eos: true, sampling: SamplingParams::GREEDY };
                streams.push(engine.submit(params).await.ok()?);
            }
            for mut s in streams {
                while s.events.recv().await.is_some() {}
            }
            Some(())
        })?;
        let steps = (engine.stats().steps_total - before) as usize;
        let trace = engine.trace();
        // Decode steps of the full batch only: the ramp-up and the prefill are not what is timed.
        let mut full: Vec<u64> = trace[trace.len().saturating_sub(steps)..]
            .iter()
            .filter(|s| s.prefill_tokens == 0 && s.batch_seqs == seqs)
            .map(|s| s.cost.total_ns)
            .collect();
        // The median, not the mean: one step preempted by another process (CI shares its two
        // cores with the build) would otherwise tilt the line, down to a negative step overhead.
        full.sort_unstable();
        full.get(full.len() / 2).map(|&ns| ns as f64)
    };
    let wide = knobs.max_num_seqs.clamp(2, 256);
    let (step_us, seq_us) = match (median_step_ns(1), median_step_ns(wide)) {
        (Some(one), Some(many)) => {
            let seq_ns = ((many - one) / f64::from(wide - 1)).max(0.0);
            ((one - seq_ns).max(0.0) / 1e3, seq_ns / 1e3)
        }
        // Nothing ran (the engine refused the requests): no overhead is better than a guess.
        _ => return HostOverhead::default(),
    };
    batch_target.store(1, std::sync::atomic::Ordering::Relaxed);
    let frontend_us = measure_frontend_us(runtime, &engine, bare).map_or(0.0, |ttft_us| (ttft_us - step_us - seq_us).max(0.0));
    HostOverhead { step_us, seq_us, frontend_us }
}

/// Median time to first token, µs, of [`FRONTEND_REQUESTS`] one-token requests sent one at a
/// time to `engine` over HTTP; `None` if the server could not start or any request failed.
fn measure_frontend_us(runtime: &tokio::runtime::Runtime, engine: &EngineHandle, bare: &Scenario) -> Option<f64> {
    const FRONTEND_REQUESTS: u32 = 16;
    let mut s = bare.clone();
    s.workload.num_prompts = vec![FRONTEND_REQUESTS];
    s.workload.max_concurrency = Some(1);
    s.workload.request_rate = vec![f64::INFINITY];
    if let crate::scenario::Dataset::Fixed { output_len, .. } = &mut s.workload.dataset {
        *output_len = 1;
    }
    let server = LocalServer::start(runtime, engine).ok()?;
    let run = bench(runtime, engine, &server.base_url, &s);
    server.stop(runtime);
    let run = run.ok().filter(|r| r.failed() == 0)?;
    let mut ttft_ns: Vec<u64> = run.records.requests.iter().filter_map(|r| Some(r.first_token_ns? - r.send_ns)).collect();
    ttft_ns.sort_unstable();
    ttft_ns.get(ttft_ns.len() / 2).map(|&ns| ns as f64 / 1e3)
}

/// Benches `scenario`'s one sweep point against the engine, returning the client's records.
fn bench(runtime: &tokio::runtime::Runtime, engine: &EngineHandle, base_url: &str, scenario: &Scenario) -> Result<crate::bench::BenchRun, Error> {
    let requests = crate::workload::generate(&scenario.workload, scenario.workload.num_prompts[0]);
    let mut config = BenchConfig::new(Backend::OpenAi, base_url, engine.model_name(), requests);
    config.max_concurrency = scenario.workload.max_concurrency;
    // Every request runs to its length, as the simulator's fixed dataset says.
    config.ignore_eos = true;
    runtime
        .block_on(crate::bench::run(&config))
        .map_err(|e| Error::Usage { flag: "--engine", value: base_url.into(), reason: e.to_string() })
}

fn measure(
    runtime: &tokio::runtime::Runtime,
    engine: &EngineHandle,
    base_url: &str,
    cost: &Calibrated,
    scenario: Scenario,
    label: String,
    log: &mut dyn FnMut(&str),
) -> Result<Series, Error> {
    let steps_before = engine.stats().steps_total;
    let run = bench(runtime, engine, base_url, &scenario)?;
    let steps = (engine.stats().steps_total - steps_before) as usize;
    let trace = engine.trace();
    let engine_steps = trace[trace.len().saturating_sub(steps)..].to_vec();
    let percentiles = ReportOptions::default().percentiles;
    let measured = Summary::from_records(&run.records, &percentiles);
    let point = scenario.workload.points()[0];
    let config = crate::sim::SimConfig { timeline: true, ..sim_config(&scenario) };
    let simulated = run_point(&scenario, &config, cost, &point, &percentiles);
    log(&format!(
        "    {label}: {} requests, {} engine steps; output throughput measured {:.1} tok/s, simulated {:.1} tok/s",
        point.num_prompts,
        engine_steps.len(),
        measured.output_throughput,
        simulated.summary.output_throughput
    ));
    if let Some(first) = run.details.iter().find_map(|d| d.error.as_deref()) {
        log(&format!("    {label}: {} request(s) failed; the first: {first}", run.failed()));
    }
    Ok(Series { label, scenario, measured, simulated, engine_steps, failed: run.failed() })
}

/// A kind of engine step, for comparing mean step times: decode-only steps by batch size, steps
/// with prefill tokens by how many.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum StepKind {
    /// Decode-only, batch of `lo..=hi` sequences.
    Decode { lo: u32, hi: u32 },
    /// With `lo..=hi` prefill tokens (and any decodes).
    Prefill { lo: u32, hi: u32 },
}

impl StepKind {
    const BOUNDS: [u32; 8] = [1, 2, 4, 8, 16, 32, 64, 128];

    fn of(step: &StepRow) -> StepKind {
        let bucket = |n: u32| {
            let mut lo = 1;
            for &b in &Self::BOUNDS {
                if n <= b {
                    return (lo, b);
                }
                lo = b + 1;
            }
            let hi = n.next_power_of_two();
            (hi / 2 + 1, hi)
        };
        if step.prefill_tokens == 0 {
            let (lo, hi) = bucket(step.batch_seqs);
            StepKind::Decode { lo, hi }
        } else {
            let (lo, hi) = bucket(step.prefill_tokens);
            StepKind::Prefill { lo, hi }
        }
    }

    pub fn describe(self) -> String {
        let range = |lo: u32, hi: u32| if lo == hi { lo.to_string() } else { format!("{lo}–{hi}") };
        match self {
            StepKind::Decode { lo, hi } => format!("decode, {} seqs", range(lo, hi)),
            StepKind::Prefill { lo, hi } => format!("prefill, {} tokens", range(lo, hi)),
        }
    }
}

/// Mean step time of one kind on one side (the engine's trace or the simulation), and its
/// parts. On the engine, `overhead` is the host time outside the forward pass; in the
/// simulation, the cost model's overhead term.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct StepMeans {
    pub steps: usize,
    pub total_ms: f64,
    pub gemm_ms: f64,
    pub attention_ms: f64,
    pub elementwise_ms: f64,
    pub overhead_ms: f64,
}

impl StepMeans {
    fn of<'a>(steps: impl Iterator<Item = &'a StepRow>) -> StepMeans {
        let mut sum = StepMeans::default();
        for step in steps {
            let c = &step.cost;
            sum.steps += 1;
            sum.total_ms += c.total_ns as f64 * 1e-6;
            sum.gemm_ms += c.gemm_ns as f64 * 1e-6;
            sum.attention_ms += c.attention_ns as f64 * 1e-6;
            sum.elementwise_ms += c.elementwise_ns as f64 * 1e-6;
            sum.overhead_ms += c.overhead_ns as f64 * 1e-6;
        }
        let n = if sum.steps == 0 { f64::NAN } else { sum.steps as f64 };
        StepMeans {
            steps: sum.steps,
            total_ms: sum.total_ms / n,
            gemm_ms: sum.gemm_ms / n,
            attention_ms: sum.attention_ms / n,
            elementwise_ms: sum.elementwise_ms / n,
            overhead_ms: sum.overhead_ms / n,
        }
    }
}

/// Steps of one kind on the engine and in the simulation.
#[derive(Clone, Debug, PartialEq)]
pub struct StepComparison {
    pub kind: StepKind,
    pub engine: StepMeans,
    pub simulated: StepMeans,
}

/// Steps of every series grouped by [`StepKind`]: where the simulator's step cost is wrong, and
/// in which part.
pub fn step_comparison(v: &EngineValidation) -> Vec<StepComparison> {
    use std::collections::BTreeMap;
    let mut groups: BTreeMap<StepKind, [Vec<&StepRow>; 2]> = BTreeMap::new();
    for s in &v.series {
        for (side, steps) in [(0, &s.engine_steps), (1, &s.simulated.output.timeline)] {
            for step in steps {
                groups.entry(StepKind::of(step)).or_default()[side].push(step);
            }
        }
    }
    groups
        .into_iter()
        .map(|(kind, [e, s])| StepComparison {
            kind,
            engine: StepMeans::of(e.into_iter()),
            simulated: StepMeans::of(s.into_iter()),
        })
        .collect()
}

/// The comparison as Markdown tables: per series and metric, then per step kind.
pub fn render(v: &EngineValidation) -> String {
    let mut t = String::new();
    let s = &v.setup;
    let _ = writeln!(
        t,
        "Engine: random-{} weights, {}, max_num_seqs {}, max_num_batched_tokens {}, {} KV blocks of {}. \
         Profile: {}.\n",
        s.size, s.runs_on(), s.knobs.max_num_seqs, s.knobs.max_num_batched_tokens, s.knobs.num_gpu_blocks, s.knobs.block_size, v.profile.provenance.device.name
    );
    let _ = writeln!(
        t,
        "Sampling, ns per logit of each sampled row, as calibration timed it (the twin prices its greedy steps with the first): {}.\n",
        v.sampling.describe()
    );
    let _ = writeln!(t, "| series | metric | measured | simulated | error | target |");
    let _ = writeln!(t, "|---|---|---:|---:|---:|---:|");
    for series in &v.series {
        if series.failed > 0 {
            let _ = writeln!(t, "| {} | failed requests | {} | 0 | | |", series.label, series.failed);
        }
        for c in series.comparisons() {
            let _ = writeln!(
                t,
                "| {} | {} | {:.2} | {:.2} | {:+.1}% | {}≤ {:.0}% |",
                series.label,
                c.key,
                c.measured,
                c.simulated,
                c.error() * 100.0,
                match (&v.cannot_judge, c.meets_target()) {
                    (Some(_), _) => "not judged: ",
                    (None, true) => "",
                    (None, false) => "**missed** ",
                },
                c.target * 100.0
            );
        }
    }
    if let Some(reason) = &v.cannot_judge {
        let _ = writeln!(t, "\n**Cannot judge**: {reason}. The figures above are printed as measured; no target is passed or failed.");
    }
    let _ = writeln!(
        t,
        "\nMean step time by kind, engine / simulated: the engine's step trace (its forward pass timed kernel by \
         kernel on a CPU; on a GPU by CUDA events between kernels of different kinds, inside its CUDA graphs too) \
         against the simulator's step costs. Host is the engine's time outside the forward pass, and the cost \
         model's overhead term.\n"
    );
    // The CPU executor times each kernel as it returns; the CUDA executor records events between
    // kernels of different kinds (`set_time_parts`), read after each step.
    let engine_parts_timed = true;
    let _ = writeln!(t, "| step kind | steps | step (ms) | error | GEMM (ms) | attention (ms) | elementwise (ms) | host (ms) |");
    let _ = writeln!(t, "|---|---:|---:|---:|---:|---:|---:|---:|");
    for g in step_comparison(v) {
        let _ = writeln!(t, "{}", step_row(&g.kind.describe(), &g.engine, &g.simulated, engine_parts_timed));
    }
    t
}

/// One row of the step table. A kind that only one side ran has no mean on the other side and
/// no error: those cells are "—", not NaN. So are the engine's GEMM, attention and elementwise
/// parts where it did not time them (`engine_parts_timed` false): its trace holds zeros there,
/// which are no measurement.
fn step_row(kind: &str, e: &StepMeans, s: &StepMeans, engine_parts_timed: bool) -> String {
    let mean = |m: &StepMeans, v: f64| if m.steps == 0 { "—".to_string() } else { format!("{v:.3}") };
    let pair = |a: f64, b: f64| format!("{} / {}", mean(e, a), mean(s, b));
    let part = |a: f64, b: f64| if engine_parts_timed { pair(a, b) } else { format!("— / {}", mean(s, b)) };
    let error = if e.steps == 0 || s.steps == 0 {
        "—".to_string()
    } else {
        format!("{:+.1}%", super::relative_error(s.total_ms, e.total_ms) * 100.0)
    };
    format!(
        "| {kind} | {} / {} | {} | {error} | {} | {} | {} | {} |",
        e.steps,
        s.steps,
        pair(e.total_ms, s.total_ms),
        part(e.gemm_ms, s.gemm_ms),
        part(e.attention_ms, s.attention_ms),
        part(e.elementwise_ms, s.elementwise_ms),
        pair(e.overhead_ms, s.overhead_ms),
    )
}

/// Writes `dir/README.md` (the tables), `dir/engine.toml` (the simulated scenario), `dir/cpu.csv`
/// (`gpu.csv` on a GPU)
/// with its provenance (the profile), and per series `dir/<i>-<label>/`: `engine-summary.json`
/// and `engine-timeline.csv` (what the client measured, the engine's step trace) beside
/// `simulated/` (what `simulate --out` writes).
pub fn write_outputs(v: &EngineValidation, dir: &std::path::Path) -> Result<(), Error> {
    let io = |path: &std::path::Path| {
        let path = path.to_path_buf();
        move |source| Error::Output { path, source }
    };
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    let readme = dir.join("README.md");
    let text = format!("# `servesim validate --engine`\n\n{}", render(v));
    std::fs::write(&readme, text).map_err(io(&readme))?;
    let toml_path = dir.join("engine.toml");
    std::fs::write(&toml_path, &v.scenario_toml).map_err(io(&toml_path))?;
    let csv = dir.join(profile_file_name(&v.setup));
    v.profile.write(&csv).map_err(|e| Error::Output { path: csv.clone(), source: std::io::Error::other(e.to_string()) })?;
    let opts = ReportOptions::default();
    for (i, s) in v.series.iter().enumerate() {
        let slug: String = s.label.chars().map(|c| if c.is_ascii_alphanumeric() || c == '.' { c } else { '-' }).collect();
        let series_dir = dir.join(format!("{}-{slug}", i + 1));
        std::fs::create_dir_all(&series_dir).map_err(io(&series_dir))?;
        let summary = series_dir.join("engine-summary.json");
        let json = serde_json::to_string_pretty(&to_json(&s.measured, &opts)).expect("plain JSON");
        std::fs::write(&summary, json + "\n").map_err(io(&summary))?;
        let key = crate::run::output::PointKey { point: 1, num_prompts: s.simulated.num_prompts };
        crate::run::output::write_timeline_file(
            &series_dir.join("engine-timeline.csv"),
            s.engine_steps.iter().map(|row| (key, row)),
            v.setup.knobs.num_gpu_blocks,
        )?;
        crate::run::output::write_all(&series_dir.join("simulated"), &s.scenario, std::slice::from_ref(&s.simulated), &opts, "calibrated profile", &[])?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run::scheduler_config;
    use crate::scenario::Policy;
    use crate::cost::StepCost;

    fn setup() -> (EngineSetup, SweepSetup) {
        let engine = EngineSetup {
            size: "tiny".into(),
            seed: 0,
            threads: 1,
            knobs: EngineKnobs {
                max_num_seqs: 8,
                max_num_batched_tokens: 64,
                block_size: 16,
                num_gpu_blocks: 64,
                enable_prefix_caching: false,
                num_scheduler_steps: 1,
                ngram: None,
                policy: Policy::Servesim,
            },
            device: None,
        };
        let sweep = SweepSetup { input_len: 16, output_len: 8, concurrency: vec![1, 4], rounds: 2, poisson_load: 0.5 };
        (engine, sweep)
    }

    #[test]
    fn a_step_kind_one_side_never_ran_prints_dashes_not_nan() {
        let ran = StepMeans::of([StepRow::default()].iter());
        let never = StepMeans::of(std::iter::empty());
        let row = step_row("decode, 1 seq", &ran, &never, true);
        assert!(!row.contains("NaN") && row.contains("0.000 / —") && row.contains("| — |"), "{row}");
        assert_eq!(row.matches('—').count(), 6, "{row}");
    }

    #[test]
    fn engine_parts_not_timed_print_dashes_not_zeros() {
        let step = |total_ns, gemm_ns| StepRow { cost: StepCost { total_ns, gemm_ns, overhead_ns: 2_000, ..Default::default() }, ..Default::default() };
        let (engine, simulated) = (StepMeans::of([step(500_000, 0)].iter()), StepMeans::of([step(177_000, 106_000)].iter()));
        let untimed = step_row("decode, 1 seqs", &engine, &simulated, false);
        assert!(untimed.contains("| — / 0.106 | — / 0.000 | — / 0.000 | 0.002 / 0.002 |"), "{untimed}");
        assert!(untimed.contains("| 0.500 / 0.177 |"), "the whole step is still compared: {untimed}");
        let timed = step_row("decode, 1 seqs", &engine, &simulated, true);
        assert!(timed.contains("| 0.000 / 0.106 |") && !timed.contains('—'), "{timed}");
    }

    #[test]
    fn the_scenario_is_the_engines_configuration() {
        let (engine, sweep) = setup();
        let peak = Peak { flops_per_s: 5e10, memory_bytes_per_s: 2e10 };
        let host = HostOverhead { step_us: 3.0, seq_us: 0.25, frontend_us: 120.0 };
        let text = scenario_toml(&engine, &sweep, "CPU", peak, host).unwrap();
        let s = Scenario::from_toml_str(&text, "engine.toml".as_ref(), &[]).unwrap();
        let m = LlamaConfig::tiny();
        assert_eq!((s.model.hidden_size as usize, s.model.num_layers as usize), (m.hidden_size, m.num_layers));
        assert_eq!(s.engine.policy, Policy::Servesim);
        // The simulated scheduler is the one the engine runs, knob for knob: with multi-step
        // windows too.
        assert_eq!(scheduler_config(&s), engine.knobs.scheduler_config());
        let windowed = EngineSetup { knobs: EngineKnobs { num_scheduler_steps: 4, ..engine.knobs }, ..engine.clone() };
        let text = scenario_toml(&windowed, &sweep, "CPU", peak, host).unwrap();
        let w = Scenario::from_toml_str(&text, "engine.toml".as_ref(), &[]).unwrap();
        assert_eq!(scheduler_config(&w), windowed.knobs.scheduler_config());
        // And with SGLang's scheduler (`--policy sglang`), the radix cache on or off.
        for cache in [false, true] {
            let knobs = EngineKnobs { policy: Policy::Sglang, enable_prefix_caching: cache, ..engine.knobs };
            let sglang = EngineSetup { knobs, ..engine.clone() };
            let text = scenario_toml(&sglang, &sweep, "CPU", peak, host).unwrap();
            let g = Scenario::from_toml_str(&text, "engine.toml".as_ref(), &[]).unwrap();
            assert_eq!(g.engine.policy, Policy::Sglang);
            assert_eq!(scheduler_config(&g), sglang.knobs.scheduler_config(), "{text}");
            assert_eq!(g.cost.cpu_overlap, 0.0, "the engine schedules in series with its steps");
        }
        assert_eq!((s.cost.step_overhead_eager_us, s.cost.seq_overhead_us, s.cost.frontend_overhead_us), (3.0, 0.25, 120.0));
        assert_eq!(sim_config(&s).frontend_overhead_ns, 120_000);
        assert_eq!(s.hardware.gpu.peak_flops_16bit, 5e10);
        assert_eq!(s.workload.max_concurrency, Some(1));
        assert_eq!(s.workload.num_prompts, vec![MIN_PROMPTS]);
    }

    /// On a GPU the twin is the bf16 model on hardware named as the driver names it, which is
    /// what lets the profile measured there match it by GPU family.
    #[test]
    fn on_a_gpu_the_scenario_is_bf16_on_the_named_gpu() {
        let (mut engine, sweep) = setup();
        engine.device = Some(0);
        let peak = Peak { flops_per_s: 989e12, memory_bytes_per_s: 3.35e12 };
        let text = scenario_toml(&engine, &sweep, "NVIDIA H100 80GB HBM3", peak, HostOverhead::default()).unwrap();
        let s = Scenario::from_toml_str(&text, "engine.toml".as_ref(), &[]).unwrap();
        assert_eq!((s.model.weight_dtype, s.model.kv_dtype), (Dtype::Bf16, Dtype::Bf16));
        assert_eq!(s.hardware.gpu.name, "NVIDIA H100 80GB HBM3 (cuda:0, calibrated)");
        assert_eq!(crate::cost::profile_match::gpu_family(&s.hardware.gpu.name), Some("H100"));
        assert!(text.contains("--profile gpu.csv"), "{text}");
        assert_eq!((engine.runs_on(), engine.device_label()), ("cuda:0 (bf16)".to_string(), "cuda:0".to_string()));
    }

    #[test]
    fn the_host_overhead_is_timed_on_the_engine_loop() {
        let (engine, sweep) = setup();
        let peak = Peak { flops_per_s: 5e10, memory_bytes_per_s: 2e10 };
        let text = scenario_toml(&engine, &sweep, "CPU", peak, HostOverhead::default()).unwrap();
        let s = Scenario::from_toml_str(&text, "engine.toml".as_ref(), &[]).unwrap();
        let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
        let host = measure_host_overhead(&runtime, &engine.knobs, &s, &LlamaConfig::tiny());
        // A loop of channel sends and scheduler bookkeeping: above nothing, far below a
        // millisecond (vLLM's Python step overhead, the default it replaces).
        // The line's parts are clamped at zero, and noise may move time between them; a step of
        // one sequence, their sum, is never free.
        let one_seq_step_us = host.step_us + host.seq_us;
        assert!(one_seq_step_us > 0.0 && one_seq_step_us < 1000.0, "{host:?}");
        assert!(host.step_us >= 0.0 && host.seq_us >= 0.0 && host.seq_us < 100.0, "{host:?}");
        // HTTP parsing, tokenizing a 16-token prompt and a channel hop on loopback: some time,
        // far below the 100 ms of a slow network.
        assert!(host.frontend_us > 0.0 && host.frontend_us < 100_000.0, "{host:?}");
    }
}
