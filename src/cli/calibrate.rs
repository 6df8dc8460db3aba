//! `servesim calibrate`: real kernels timed over a grid of shapes, written as a profile.

use std::path::PathBuf;

use clap::{Args, Subcommand};

use super::flags::{self, usage};
use crate::Error;
use crate::calibrate::backend::Backend;
use crate::calibrate::cpu::{CpuBackend, PASSES_DEFAULT};
use crate::calibrate::cuda::CudaBackend;
use crate::calibrate::grid::{Grid, GridOptions, GridScale, OpKind};
use crate::calibrate::noise::ReferenceTimings;
use crate::calibrate::refine::{RefineOptions, refine, report as refine_report};
use crate::calibrate::run::{RunOptions, calibrate, leave_one_out_summary};
use crate::calibrate::timing::{TimingMethod, TimingOptions};
use crate::cost::calibrated::{LEAVE_ONE_OUT_POINTS_PER_GROUP, LeaveOneOut, leave_one_gemm_shape_out, leave_one_out};
use crate::scenario::{Dtype, ModelSpec};

#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct CalibrateArgs {
    #[command(subcommand)]
    pub action: Option<CalibrateAction>,
    /// `cpu` or `cuda:N`.
    #[arg(long, default_value = "cpu")]
    pub device: String,
    /// Where to write the profile CSV (its provenance goes beside it, `.provenance.toml`);
    /// required.
    #[arg(long, value_name = "FILE.csv")]
    pub out: Option<PathBuf>,
    /// Stop starting new shapes after this many minutes; what was measured is kept.
    #[arg(long, value_name = "N")]
    pub budget_minutes: Option<f64>,
    /// Stop starting new shapes after this many have been timed, counting every pass: a cut at
    /// the same shape on any machine (with --budget-minutes, whichever comes first). The host
    /// sampler's few shapes are always timed.
    #[arg(long, value_name = "N")]
    pub max_shapes: Option<u64>,
    /// Grid size: `full` (every preset model's shapes), `quick` or `tiny` (capped shape sizes).
    /// Default: full on a GPU, tiny on a CPU.
    #[arg(long, value_name = "SCALE")]
    pub grid: Option<String>,
    /// Only this preset model's shapes (repeatable); default: every preset on a GPU,
    /// Llama-3.2-1B on a CPU.
    #[arg(long = "model", value_name = "PRESET")]
    pub models: Vec<String>,
    /// Comma-separated tensor-parallel degrees whose per-GPU shapes are measured (default:
    /// 1,2,4,8 on a GPU, 1 on a CPU).
    #[arg(long, value_name = "LIST")]
    pub tp: Option<String>,
    /// CPU: most GiB of operands held at once; a shape that needs more is skipped, saying what
    /// it needs (default: 4, or a quarter of the memory available if less).
    #[arg(long, value_name = "GIB")]
    pub memory_gib: Option<f64>,
    /// CPU threads (default: all cores).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Times to measure the whole grid; each shape keeps the median of its passes' medians
    /// (default: 3 on a CPU, whose kernels' times move over seconds; 1 on a GPU).
    #[arg(long, value_name = "N")]
    pub passes: Option<u32>,
    /// How each repeat is timed: `graph` (the op replayed in a CUDA graph with operands warm in
    /// L2, as engines run their decode steps and aiconfigurator times; the default on a GPU) or
    /// `flush` (one launch after an L2 flush; the only method on a CPU).
    #[arg(long, value_name = "METHOD")]
    pub timing_method: Option<String>,
    /// After the grid, add shapes where leave-one-out error is largest until its median is at
    /// most GEMM% for GEMMs and ATTENTION% for attention (or the budget is spent; --max-shapes
    /// also caps the shapes added), then print the error per op, e.g. `5,10`.
    #[arg(long, value_name = "GEMM,ATTENTION")]
    pub loo_target: Option<String>,
}

#[derive(Debug, Subcommand)]
pub enum CalibrateAction {
    /// Convert published per-op GPU measurements into a profile.
    Import(ImportArgs),
}

#[derive(Debug, Args)]
pub struct ImportArgs {
    /// The source's format: aiconfigurator, vidur, llmservingsim or frontier.
    #[arg(long = "from", value_name = "FORMAT")]
    pub format: String,
    /// The source's data. aiconfigurator: one GPU's folder (`…/systems/data/h100_sxm`). vidur,
    /// llmservingsim, frontier: one GPU's files, or folders holding them (vidur: `mlp.csv`,
    /// `all_reduce.csv`, `attention.csv`; LLMServingSim: its profiler's bundles, `meta.yaml`
    /// beside `tp<N>/` folders of `dense.csv`, `per_sequence.csv`, `attention.csv`, `moe.csv`, or
    /// its older `layers.csv`, `attention.csv` under a folder named as the model's preset;
    /// Frontier: `attention*.csv`).
    #[arg(value_name = "PATH", required = true, num_args = 1..)]
    pub paths: Vec<PathBuf>,
    /// aiconfigurator: the engine whose kernels were timed: vllm, sglang or trtllm.
    #[arg(long, default_value = "vllm")]
    pub engine: String,
    /// aiconfigurator: the engine version's folder (default: the newest present).
    #[arg(long = "engine-version", value_name = "VERSION")]
    pub engine_version: Option<String>,
    /// vidur, llmservingsim, frontier: the GPU the files were measured on, a preset or a .toml
    /// file whose [hardware] table gives a GPU's figures as a scenario's does (name,
    /// peak_tflops_16bit, peak_tflops_fp8, memory_gib, memory_bandwidth_gbps,
    /// interconnect_gbps). Default: the one their folders (`a100`, `h100`, `h800`) or
    /// LLMServingSim's meta.yaml name, where it is a preset.
    #[arg(long, value_name = "PRESET|FILE.toml")]
    pub gpu: Option<String>,
    /// llmservingsim: the model the files time, a preset or a Hugging Face config.json.
    /// Default: the folder named as a preset, or for a profiler bundle the checkout's
    /// configs/model/<org>/<model>.json, else the preset named as its model.
    #[arg(long, value_name = "PRESET|CONFIG.json")]
    pub model: Option<String>,
    /// llmservingsim: the engine's TP all-reduce, timed on the same GPU in the same vLLM release
    /// (aiconfigurator's `custom_allreduce_perf.parquet`): LLMServingSim's profiler ran one GPU
    /// and times none.
    #[arg(long, value_name = "FILE.parquet")]
    pub allreduce: Option<PathBuf>,
    /// Where to write the profile CSV (its provenance goes beside it, `.provenance.toml`).
    #[arg(long, value_name = "FILE.csv")]
    pub out: PathBuf,
}

fn import(args: ImportArgs) -> Result<(), Error> {
    flags::output_file("--out", &args.out)?;
    use crate::calibrate::import::{FORMATS, aiconfigurator, frontier, llmservingsim, vidur};
    let gpu = args.gpu.as_deref();
    if let Some(model) = args.model.as_deref().filter(|_| args.format != "llmservingsim") {
        return Err(usage("--model", model, "applies to --from llmservingsim only (the other formats' rows carry their dimensions)"));
    }
    if let Some(file) = args.allreduce.as_deref().filter(|_| args.format != "llmservingsim") {
        return Err(usage(
            "--allreduce",
            file.display(),
            "applies to --from llmservingsim only (an aiconfigurator folder brings its own all-reduce; vidur's has all_reduce.csv)",
        ));
    }
    let imported = match args.format.as_str() {
        "aiconfigurator" => match args.paths.as_slice() {
            [path] => aiconfigurator::import(path, &args.engine, args.engine_version.as_deref()),
            _ => return Err(usage("PATH", args.paths.len(), "aiconfigurator reads one GPU's folder")),
        },
        "vidur" => vidur::import(&args.paths, gpu),
        "llmservingsim" => llmservingsim::import(&args.paths, gpu, args.model.as_deref(), args.allreduce.as_deref()),
        "frontier" => frontier::import(&args.paths, gpu),
        other => return Err(usage("--from", other, format!("unknown format; known: {}", FORMATS.join(", ")))),
    }
    .map_err(|e| Error::Import(e.to_string()))?;
    for note in &imported.notes {
        eprintln!("note: {note}");
    }
    let profile = &imported.profile;
    profile.write(&args.out).map_err(|e| Error::Output { path: args.out.clone(), source: std::io::Error::other(e.to_string()) })?;
    if let Some(families) = &imported.families {
        let path = crate::calibrate::families::families_path(&args.out);
        families.write(&path).map_err(|source| Error::Output { path: path.clone(), source })?;
        let counts = families.counts().into_iter().map(|(op, n)| format!("{op} {n}")).collect::<Vec<_>>().join(", ");
        eprintln!("imported whole-module rows ({counts}); wrote {}", path.display());
    }
    let loo = leave_one_out(profile);
    let (median, p90) = LeaveOneOut::summary(&loo.all());
    // Only a GEMM grid (aiconfigurator's) has interior (n, k) to leave out; a model's own
    // shapes (vidur, LLMServingSim) have none.
    let between = leave_one_gemm_shape_out(profile);
    let between = if between.is_empty() {
        "no GEMM grid to leave (n, k) out of".to_string()
    } else {
        let (median, p90) = LeaveOneOut::summary(&between);
        format!("GEMM shapes between grid points (each (n, k) left out): median {:.1}%, p90 {:.1}%", median * 100.0, p90 * 100.0)
    };
    let sampled = if loo.not_sampled > 0 {
        format!(", {LEAVE_ONE_OUT_POINTS_PER_GROUP} per curve or surface where one has more")
    } else {
        String::new()
    };
    eprintln!(
        "imported {} shapes from {}; leave-one-out interpolation error over {} points{sampled}: median {:.1}%, p90 {:.1}%; {between}; wrote {}",
        profile.rows.len(),
        args.paths.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", "),
        loo.gemm.len() + loo.attention.len(),
        median * 100.0,
        p90 * 100.0,
        args.out.display()
    );
    Ok(())
}

pub(super) fn run(args: CalibrateArgs) -> Result<(), Error> {
    if let Some(CalibrateAction::Import(import_args)) = args.action {
        return import(import_args);
    }
    let out = args.out.clone().ok_or_else(|| usage("--out", "", "give the profile's path, FILE.csv"))?;
    flags::output_file("--out", &out)?;
    let gpu = flags::device(&args.device)?;
    let on_gpu = gpu.is_some();
    if let Some(minutes) = args.budget_minutes.filter(|m| !(m.is_finite() && *m > 0.0)) {
        return Err(usage("--budget-minutes", minutes, "must be a positive number of minutes"));
    }
    if args.max_shapes == Some(0) {
        return Err(usage("--max-shapes", "0", "must be at least 1"));
    }
    if args.passes == Some(0) {
        return Err(usage("--passes", "0", "must be at least 1"));
    }
    // Bounded so that GiB → bytes cannot overflow: no machine holds a million GiB.
    if let Some(gib) = args.memory_gib.filter(|g| !(g.is_finite() && *g > 0.0 && *g <= 1e6)) {
        return Err(usage("--memory-gib", gib, "must be a positive number of GiB, at most 1000000"));
    }
    if on_gpu && args.memory_gib.is_some() {
        return Err(usage("--memory-gib", args.memory_gib.unwrap_or_default(), "applies to `--device cpu` only"));
    }
    let scale_name = args.grid.clone().unwrap_or_else(|| if on_gpu { "full" } else { "tiny" }.into());
    let scale = GridScale::parse(&scale_name).ok_or_else(|| usage("--grid", &scale_name, "expected `full`, `quick` or `tiny`"))?;
    let tp_default = if on_gpu { "1,2,4,8" } else { "1" };
    let tensor_parallel = flags::positive_integers("--tp", args.tp.as_deref().unwrap_or(tp_default))?;
    let mut options = if on_gpu {
        // GPUs are calibrated in the dtypes engines serve with.
        GridOptions { dtypes: vec![Dtype::Bf16, Dtype::Fp16, Dtype::Fp8], ..GridOptions::all_presets(scale) }
    } else {
        // The CPU engine computes in f32, on one device: see `GridOptions::cpu_default`.
        GridOptions { scale, ..GridOptions::cpu_default() }
    };
    options.tensor_parallel = tensor_parallel;
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

    let loo_target = args.loo_target.as_deref().map(parse_loo_target).transpose()?;
    // A name no backend knows is refused before the backend measures anything.
    select_timing_method(args.timing_method.as_deref(), &TimingMethod::ALL, &args.device)?;
    let mut backend: Box<dyn Backend> = match gpu {
        None => {
            let threads = flags::threads(args.threads)?;
            eprintln!("measuring this CPU's peak FLOP/s and memory bandwidth on {threads} threads");
            let mut cpu = CpuBackend::new(threads).map_err(|e| usage("--device", &args.device, e.to_string()))?;
            if let Some(gib) = args.memory_gib {
                cpu.set_memory_cap((gib * (1u64 << 30) as f64) as u64);
            }
            eprintln!("operands held at once are capped at {:.2} GiB (--memory-gib)", cpu.memory_cap_bytes() as f64 / (1u64 << 30) as f64);
            Box::new(cpu)
        }
        Some(ordinal) => Box::new(CudaBackend::new(ordinal).map_err(|e| usage("--device", &args.device, e.to_string()))?),
    };
    options.extra_m = backend.gemm_m_breakpoints();
    let method = select_timing_method(args.timing_method.as_deref(), &backend.timing_methods(), &args.device)?;
    let grid = Grid::new(options);
    let timing = (if on_gpu { TimingOptions::default() } else { TimingOptions::quick() }).with_method(method);
    let budget = args.budget_minutes.map(|m| std::time::Duration::from_secs_f64(m * 60.0));
    let run_options = RunOptions {
        budget,
        shapes_max: args.max_shapes,
        progress: true,
        timing,
        passes: args.passes.unwrap_or(if on_gpu { 1 } else { PASSES_DEFAULT }),
        noise_check: true,
        focus: None,
        retimes_max: crate::calibrate::consistency::RETIMES_DEFAULT,
    };
    eprintln!("{}, timed by the {} method", plan(&grid, &args.device, &scale_name, run_options.passes), method.name());
    let started = std::time::Instant::now();
    let mut profile = calibrate(backend.as_mut(), &grid, &run_options)
        .map_err(|e| usage("--device", &args.device, e.to_string()))?;
    if let Some((gemm_target, attention_target)) = loo_target {
        let options =
            RefineOptions { gemm_target, attention_target, budget, timing, added_max: args.max_shapes, ..RefineOptions::default() };
        let summary = refine(backend.as_mut(), &grid, &mut profile, &options, &|| started.elapsed())
            .map_err(|e| usage("--device", &args.device, e.to_string()))?;
        eprintln!("{}", refine_report(&summary));
    }
    if on_gpu {
        eprintln!("{}", crate::calibrate::compare::against_bundled(&profile));
    }
    profile.write(&out).map_err(|e| Error::Output {
        path: out.clone(),
        source: std::io::Error::other(e.to_string()),
    })?;
    let run = &profile.provenance.run;
    eprintln!("{run}");
    if run.cut_short {
        let limit = match (args.budget_minutes, args.max_shapes) {
            (None, Some(n)) => format!("--max-shapes {n} was reached"),
            (Some(_), Some(n)) => format!("the budget ran out (--budget-minutes or --max-shapes {n})"),
            _ => "the budget ran out".to_string(),
        };
        eprintln!(
            "{limit}: the profile holds what was measured ({} of {} shapes), coarse to fine over every op kind",
            run.measured, run.shapes_in_grid
        );
    }
    eprintln!("{}", leave_one_out_summary(&profile));
    for line in elementwise_summary(&run.elementwise) {
        eprintln!("{line}");
    }
    if let Some(warning) = run.reference.as_ref().and_then(ReferenceTimings::warning) {
        eprintln!("\n{warning}\n");
    }
    eprintln!("wrote {}", out.display());
    Ok(())
}

/// `--timing-method`: the one asked for, which the backend must run, else the backend's first.
pub(crate) fn select_timing_method(asked: Option<&str>, offered: &[TimingMethod], device: &str) -> Result<TimingMethod, Error> {
    let default = offered.first().copied().unwrap_or_default();
    let Some(name) = asked else { return Ok(default) };
    let names = || TimingMethod::ALL.map(TimingMethod::name).join(", ");
    let method = TimingMethod::parse(name).ok_or_else(|| usage("--timing-method", name, format!("expected one of {}", names())))?;
    if !offered.contains(&method) {
        let runs = offered.iter().map(|m| m.name()).collect::<Vec<_>>().join(", ");
        return Err(usage(
            "--timing-method",
            name,
            format!("--device {device} times with {runs} only (graph replays CUDA graphs: a GPU's method)"),
        ));
    }
    Ok(method)
}

/// One line per model: a decoder layer's elementwise kernels (two residual-add norms, rotary,
/// the cache write, SiLU·mul) per token count, as the run timed them.
fn elementwise_summary(timings: &[crate::calibrate::backend::ElementwiseTiming]) -> Vec<String> {
    let mut by_model: std::collections::BTreeMap<&str, std::collections::BTreeMap<u32, f64>> = Default::default();
    for t in timings {
        let per_layer = match t.kernel.as_str() {
            "fused_add_rmsnorm" => 2.0,
            "rotary" | "reshape_and_cache" | "silu_mul" => 1.0,
            _ => 0.0,
        };
        *by_model.entry(&t.model).or_default().entry(t.tokens).or_default() += per_layer * t.ns;
    }
    by_model
        .into_iter()
        .map(|(model, sums)| {
            let parts: Vec<String> = sums.iter().map(|(tokens, ns)| format!("{tokens} tokens {:.1} µs", ns * 1e-3)).collect();
            format!("elementwise kernels of one {model} layer (2 norms, rotary, cache write, SiLU; graph replay): {}", parts.join(", "))
        })
        .collect()
}

/// `--loo-target GEMM,ATTENTION` in percent, as fractions.
fn parse_loo_target(text: &str) -> Result<(f64, f64), Error> {
    let bad = || usage("--loo-target", text, "expected two percentages, GEMM,ATTENTION (e.g. 5,10), each above 0");
    let parts: Vec<f64> = text.split(',').map(|p| p.trim().parse::<f64>()).collect::<Result<_, _>>().map_err(|_| bad())?;
    match parts.as_slice() {
        [g, a] if g.is_finite() && a.is_finite() && *g > 0.0 && *a > 0.0 => Ok((g / 100.0, a / 100.0)),
        _ => Err(bad()),
    }
}

/// What the run will measure, before it starts: shapes by op kind, models, TP degrees, passes.
fn plan(grid: &Grid, device: &str, scale_name: &str, passes: u32) -> String {
    let shapes = grid.shapes_in_run_order();
    let kinds: Vec<String> = OpKind::ALL
        .iter()
        .map(|&kind| (kind, shapes.iter().filter(|s| s.kind() == kind).count()))
        .filter(|&(_, n)| n > 0)
        .map(|(kind, n)| format!("{n} {}", kind.name()))
        .collect();
    let models: Vec<&str> = grid.options.models.iter().map(|m| m.name.as_str()).collect();
    let tp: Vec<String> = grid.options.tensor_parallel.iter().map(u32::to_string).collect();
    format!(
        "calibrating {} shapes ({}) of {} at TP {} on {device} ({scale_name} grid, {passes} pass{})",
        grid.len(),
        kinds.join(", "),
        models.join(", "),
        tp.join("/"),
        if passes == 1 { "" } else { "es" }
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_timing_method_is_the_backends_first_unless_asked_and_must_be_one_it_runs() {
        let gpu = [TimingMethod::Graph, TimingMethod::Flush];
        let cpu = [TimingMethod::Flush];
        assert_eq!(select_timing_method(None, &gpu, "cuda:0").unwrap(), TimingMethod::Graph);
        assert_eq!(select_timing_method(None, &cpu, "cpu").unwrap(), TimingMethod::Flush);
        assert_eq!(select_timing_method(Some("flush"), &gpu, "cuda:0").unwrap(), TimingMethod::Flush);
        let e = select_timing_method(Some("graph"), &cpu, "cpu").unwrap_err().to_string();
        assert!(e.contains("--timing-method") && e.contains("graph") && e.contains("--device cpu times with flush only"), "{e}");
        let e = select_timing_method(Some("events"), &gpu, "cuda:0").unwrap_err().to_string();
        assert!(e.contains("events") && e.contains("flush, graph"), "{e}");
    }

    #[test]
    fn a_layers_elementwise_time_counts_its_two_norms() {
        use crate::calibrate::backend::ElementwiseTiming;
        let t = |kernel: &str, tokens, ns| ElementwiseTiming { model: "M".into(), kernel: kernel.into(), tokens, ns };
        let lines = elementwise_summary(&[
            t("rmsnorm", 1, 9_000.0),
            t("fused_add_rmsnorm", 1, 2_000.0),
            t("rotary", 1, 1_000.0),
            t("reshape_and_cache", 1, 1_500.0),
            t("silu_mul", 1, 500.0),
            t("silu_mul", 16, 700.0),
        ]);
        assert_eq!(lines, ["elementwise kernels of one M layer (2 norms, rotary, cache write, SiLU; graph replay): 1 tokens 7.0 µs, 16 tokens 0.7 µs"]);
    }

    #[test]
    fn loo_targets_are_two_positive_percentages() {
        assert_eq!(parse_loo_target("5,10").unwrap(), (0.05, 0.1));
        assert_eq!(parse_loo_target(" 2.5 , 8 ").unwrap(), (0.025, 0.08));
        for bad in ["5", "5,10,1", "0,10", "-1,5", "a,b", "inf,5"] {
            assert!(parse_loo_target(bad).unwrap_err().to_string().contains("--loo-target"), "{bad}");
        }
    }
}
