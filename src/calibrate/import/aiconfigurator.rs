//! NVIDIA aiconfigurator's per-op tables (`systems/data/<gpu>/…/*.parquet`): GEMMs, prefill and
//! decode attention, and the engine's all-reduce, each timed inside one engine build (vLLM,
//! SGLang or TRT-LLM) on H100, H200, B200 and A100 GPUs.
//!
//! What the rows mean (read from the collector that wrote them; see the collection's README):
//!
//! - Every `latency` is milliseconds: the mean over CUDA-graph replays of one op, after warm-up.
//! - `gemm_perf.parquet`: `y[m,n] = x[m,k] · W[n,k]ᵀ` per GPU (TP sharding already applied),
//!   weights not resident in L2. `gemm_dtype` `bfloat16` is a bf16 GEMM, `fp8` a per-tensor FP8
//!   one; block-scaled and 4-bit paths are not imported. → servesim GEMM rows `(m, n, k, dtype)`.
//! - `context_attention_perf.parquet`: `batch_size` prompts of `isl` tokens, causal, no cached
//!   prefix, per-GPU head counts. → `prefill` rows, `context_len` 0.
//! - `generation_attention_perf.parquet`: `batch_size` sequences, one new token each over `step`
//!   cached tokens. → `decode` rows, `context_len = step`.
//!   Both attention tables: dense rows only (`window_size` 0, beam width 1), bf16 queries; the KV
//!   cache dtype (`bfloat16` or `fp8`) is the row's dtype, as servesim keys attention by it.
//! - `custom_allreduce_perf.parquet`: the engine's TP all-reduce of `message_size` bf16 elements
//!   on `num_gpus` GPUs. vLLM and SGLang rows captured in a CUDA graph are kept (decode steps run
//!   the graph; the eager rows carry ~20 µs of launch time). → all-reduce rows, bytes = 2 ×
//!   elements.
//!
//! A shape timed more than once (several kernels for one shape) keeps the median of its times.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::ImportError;
use super::source::origin;
use super::table::Table;
use crate::calibrate::backend::{AllReduceShape, AttentionPhase, AttentionShape, GemmShape, Peak};
use crate::calibrate::grid::Shape;
use crate::calibrate::profile::{
    DeviceProvenance, GridProvenance, PeakProvenance, Profile, ProfileRow, Provenance, RunSummary, SourceProvenance,
    TimingProvenance,
};
use crate::calibrate::timing::Measurement;
use crate::scenario::{Dtype, GpuSpec};

/// Engines whose builds the tables were timed in, as folder names.
pub const ENGINES: [&str; 3] = ["vllm", "sglang", "trtllm"];

/// Replays averaged into each `latency` (the collector's default).
const REPLAYS: u32 = 6;

/// Dimensions above this are not a real shape (and would overflow servesim's u32 shapes).
const DIM_MAX: u64 = 1 << 24;

/// An imported profile and what the import left out, one line each.
#[derive(Clone, Debug)]
pub struct Imported {
    pub profile: Profile,
    pub notes: Vec<String>,
}

/// Imports `engine`'s tables under `gpu_dir` (`…/systems/data/h100_sxm`), at `version` or the
/// newest version there.
pub fn import(gpu_dir: &Path, engine: &str, version: Option<&str>) -> Result<Imported, ImportError> {
    let bad_dir = |message: String| ImportError::File { file: gpu_dir.to_path_buf(), message };
    if !ENGINES.contains(&engine) {
        return Err(bad_dir(format!("unknown engine `{engine}`; known: {}", ENGINES.join(", "))));
    }
    let version = match version {
        Some(v) => v.to_string(),
        None => newest_version(&gpu_dir.join("gemm").join(engine)).ok_or_else(|| {
            bad_dir(format!("no gemm/{engine}/<version>/ folder (is this an aiconfigurator systems/data/<gpu> folder?)"))
        })?,
    };
    let at = |kind: &str, file: &str| gpu_dir.join(kind).join(engine).join(&version).join(file);
    let gemm_file = at("gemm", "gemm_perf.parquet");
    let context_file = at("attention", "context_attention_perf.parquet");
    let generation_file = at("attention", "generation_attention_perf.parquet");
    let allreduce_file = at("comm", "custom_allreduce_perf.parquet");

    let mut acc = Accumulator::default();
    let gemm = Table::read_parquet(&gemm_file)?;
    let (device, gpu) = device_of(&gemm)?;
    read_gemms(&gemm, &mut acc)?;
    let mut files = vec![gemm_file.clone()];
    for (file, phase) in [(&context_file, AttentionPhase::Prefill), (&generation_file, AttentionPhase::Decode)] {
        if file.exists() {
            read_attention(&Table::read_parquet(file)?, phase, &mut acc)?;
            files.push(file.clone());
        } else {
            acc.notes.push(format!("{}: absent; that attention phase falls back to the roofline", file.display()));
        }
    }
    if allreduce_file.exists() {
        read_allreduce(&Table::read_parquet(&allreduce_file)?, engine, &mut acc)?;
        files.push(allreduce_file.clone());
    }

    // Where other engines' builds timed the same GEMMs, how far they differ from this one: the
    // rule keeps one source per profile (the engine asked for, its newest version), and says
    // how much the choice matters.
    let mut agreement = Vec::new();
    for other in ENGINES.iter().filter(|&&e| e != engine) {
        let Some(other_version) = newest_version(&gpu_dir.join("gemm").join(other)) else { continue };
        let file = gpu_dir.join("gemm").join(other).join(&other_version).join("gemm_perf.parquet");
        let Ok(table) = Table::read_parquet(&file) else { continue };
        let mut theirs = Accumulator::default();
        read_gemms(&table, &mut theirs)?;
        let errors: Vec<f64> = theirs
            .times_ms
            .iter()
            .filter_map(|(shape, times)| {
                let ours = acc.times_ms.get(shape)?;
                let (a, b) = (median(ours), median(times));
                Some((b - a).abs() / a)
            })
            .collect();
        if errors.is_empty() {
            continue;
        }
        let (mid, p90) = (percentile(&errors, 0.5), percentile(&errors, 0.9));
        let line = format!(
            "{other} {other_version} against {engine} {version} on {} shared GEMM shapes: median {:.1}%, p90 {:.1}%",
            errors.len(),
            mid * 100.0,
            p90 * 100.0
        );
        acc.notes.push(format!("sources differ: {line}"));
        agreement.push(line);
    }

    let peak = Peak { flops_per_s: gpu.peak_flops_16bit, memory_bytes_per_s: gpu.memory_bandwidth_bytes_per_s };
    let origin = origin(&gemm_file);
    if !origin.is_known() {
        acc.notes.push(format!("{}: no MANIFEST.tsv names it; the profile's source is marked unknown", gemm_file.display()));
    }
    let data_root = gpu_dir.parent().unwrap_or(gpu_dir);
    let relative = |f: &PathBuf| f.strip_prefix(data_root).unwrap_or(f).to_string_lossy().replace('\\', "/");
    let (rows, kernels, dtypes, notes) = acc.finish(&peak);
    let measured = rows.len() as u64;
    let provenance = Provenance {
        servesim_version: env!("CARGO_PKG_VERSION").to_string(),
        date: crate::calibrate::profile::now_rfc3339(),
        device: DeviceProvenance { device: "imported".into(), name: device, ..DeviceProvenance::default() },
        peak: PeakProvenance::from(peak),
        kernels: Vec::new(),
        grid: GridProvenance { scale: "imported".into(), dtypes: dtypes.clone(), ..GridProvenance::default() },
        timing: TimingProvenance { min_repeats: REPLAYS, max_repeats: REPLAYS, ..TimingProvenance::default() },
        run: RunSummary { shapes_in_grid: measured, measured, passes: 1, ..RunSummary::default() },
        source: Some(SourceProvenance {
            format: "aiconfigurator".into(),
            repository: origin.repository,
            commit: origin.commit,
            license: origin.license,
            gpu: gpu.name.clone(),
            engine: engine.into(),
            engine_version: version,
            kernels,
            dtypes,
            files: files.iter().map(relative).collect(),
            agreement,
            method: "mean of CUDA-graph replays per op after warm-up (aiconfigurator collector); GEMM weights not \
                     resident in L2; attention excludes the QKV/O projections and RoPE"
                .into(),
        }),
    };
    Ok(Imported { profile: Profile { rows, provenance }, notes })
}

/// The newest `<version>` folder in `dir`, comparing dotted numbers numerically (`0.24.0` after
/// `0.9.1`; a pre-release such as `1.3.0rc20` sorts by its numbers).
fn newest_version(dir: &Path) -> Option<String> {
    let key = |v: &str| -> Vec<u64> {
        v.split(|c: char| !c.is_ascii_digit()).filter(|s| !s.is_empty()).map(|s| s.parse().unwrap_or(0)).collect()
    };
    std::fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok())
        .filter(|e| e.path().is_dir())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .max_by(|a, b| key(a).cmp(&key(b)).then(a.cmp(b)))
}

/// The GPU the table was measured on: its `device` column, matched to a hardware preset (whose
/// datasheet peaks the utilisations are relative to).
fn device_of(table: &Table) -> Result<(String, GpuSpec), ImportError> {
    let [col] = table.columns(["device"])?;
    let row = table.rows().next().ok_or_else(|| ImportError::File { file: table.file.clone(), message: "no rows".into() })?;
    let device = row.text(col)?.to_string();
    let preset = [("H100", "H100-SXM"), ("H200", "H200"), ("B200", "B200"), ("A100", "A100-80G-SXM")]
        .iter()
        .find(|(needle, _)| device.contains(needle))
        .and_then(|(_, preset)| GpuSpec::preset(preset))
        .ok_or_else(|| ImportError::Cell {
            file: table.file.clone(),
            row: row.number,
            column: "device".into(),
            message: format!("{device:?} is none of the GPUs servesim has a preset for (H100, H200, B200, A100)"),
        })?;
    Ok((device, preset))
}

/// Rows gathered from the tables, by shape.
#[derive(Default)]
struct Accumulator {
    times_ms: BTreeMap<Shape, Vec<f64>>,
    kernels: std::collections::BTreeSet<String>,
    skipped: BTreeMap<String, u64>,
    notes: Vec<String>,
}

impl Accumulator {
    fn add(&mut self, shape: Shape, latency_ms: f64, kernel: &str) {
        self.times_ms.entry(shape).or_default().push(latency_ms);
        self.kernels.insert(kernel.to_string());
    }

    fn skip(&mut self, what: String) {
        *self.skipped.entry(what).or_default() += 1;
    }

    /// Profile rows sorted by shape, the kernels named, the dtypes present, and the notes.
    fn finish(mut self, peak: &Peak) -> (Vec<ProfileRow>, Vec<String>, Vec<String>, Vec<String>) {
        for (what, count) in std::mem::take(&mut self.skipped) {
            self.notes.push(format!("left out {count} rows: {what}"));
        }
        let mut dtypes = std::collections::BTreeSet::new();
        let rows = std::mem::take(&mut self.times_ms)
            .into_iter()
            .map(|(shape, mut times)| {
                match &shape {
                    Shape::Gemm(g) => drop(dtypes.insert(g.dtype.name().to_string())),
                    Shape::Attention(a) => drop(dtypes.insert(a.dtype.name().to_string())),
                    Shape::AllReduce(_) => {}
                }
                times.sort_by(f64::total_cmp);
                // Whole nanoseconds: the sources' sub-nanosecond digits are float noise of a
                // millisecond mean, and dropping them halves a profile's size.
                let ns = |ms: f64| (ms * 1e6).round().max(1.0);
                let measurement = Measurement {
                    median_ns: ns(times[times.len() / 2]),
                    p10_ns: ns(times[0]),
                    p90_ns: ns(times[times.len() - 1]),
                    repeats: REPLAYS * times.len() as u32,
                };
                ProfileRow::new(shape, measurement, peak)
            })
            .collect();
        (rows, self.kernels.into_iter().collect(), dtypes.into_iter().collect(), self.notes)
    }
}

fn median(values: &[f64]) -> f64 {
    percentile(values, 0.5)
}

/// The `q` quantile of `values` (nearest rank, on a sorted copy); 0 when empty.
fn percentile(values: &[f64], q: f64) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    sorted.get(((sorted.len() as f64 - 1.0) * q).round() as usize).copied().unwrap_or(0.0)
}

fn dim(value: u64) -> u32 {
    // Callers bound every dimension by DIM_MAX first.
    value as u32
}

fn read_gemms(table: &Table, acc: &mut Accumulator) -> Result<(), ImportError> {
    let [dtype, m, n, k, latency, kernel] = table.columns(["gemm_dtype", "m", "n", "k", "latency", "kernel_source"])?;
    for row in table.rows() {
        let dtype = match row.text(dtype)? {
            "bfloat16" => Dtype::Bf16,
            "fp8" => Dtype::Fp8,
            other => {
                acc.skip(format!("GEMM dtype {other} (servesim prices bf16 and per-tensor fp8 GEMMs)"));
                continue;
            }
        };
        let shape = GemmShape { m: dim(row.count(m, DIM_MAX)?), n: dim(row.count(n, DIM_MAX)?), k: dim(row.count(k, DIM_MAX)?), dtype };
        acc.add(Shape::Gemm(shape), row.positive(latency)?, row.text(kernel)?);
    }
    Ok(())
}

fn read_attention(table: &Table, phase: AttentionPhase, acc: &mut Accumulator) -> Result<(), ImportError> {
    let [batch, isl, heads, kv_heads, head_dim, attn_dtype, kv_dtype, step, latency, kernel] = table.columns([
        "batch_size",
        "isl",
        "num_heads",
        "num_key_value_heads",
        "head_dim",
        "attn_dtype",
        "kv_cache_dtype",
        "step",
        "latency",
        "kernel_source",
    ])?;
    let window = table.has_column("window_size").then(|| table.columns(["window_size"])).transpose()?.map(|[c]| c);
    let beam = table.has_column("beam_width").then(|| table.columns(["beam_width"])).transpose()?.map(|[c]| c);
    for row in table.rows() {
        if let Some(w) = window
            && row.whole(w, u64::MAX >> 1)? != 0
        {
            acc.skip("sliding-window attention".into());
            continue;
        }
        if let Some(b) = beam
            && row.count(b, DIM_MAX)? != 1
        {
            acc.skip("beam search attention".into());
            continue;
        }
        if row.text(attn_dtype)? != "bfloat16" {
            acc.skip(format!("attention with {} queries", row.text(attn_dtype)?));
            continue;
        }
        let dtype = match row.text(kv_dtype)? {
            "bfloat16" => Dtype::Bf16,
            "fp8" => Dtype::Fp8,
            other => {
                acc.skip(format!("KV cache dtype {other}"));
                continue;
            }
        };
        let (query_len, context_len) = match phase {
            AttentionPhase::Decode => (1, dim(row.whole(step, DIM_MAX)?)),
            _ => (dim(row.count(isl, DIM_MAX)?), 0),
        };
        let shape = AttentionShape {
            phase,
            batch: dim(row.count(batch, DIM_MAX)?),
            query_len,
            context_len,
            num_heads: dim(row.count(heads, DIM_MAX)?),
            num_kv_heads: dim(row.count(kv_heads, DIM_MAX)?),
            head_dim: dim(row.count(head_dim, DIM_MAX)?),
            uneven: false,
            dtype,
        };
        acc.add(Shape::Attention(shape), row.positive(latency)?, row.text(kernel)?);
    }
    Ok(())
}

fn read_allreduce(table: &Table, engine: &str, acc: &mut Accumulator) -> Result<(), ImportError> {
    let [gpus, size, latency, kernel] = table.columns(["num_gpus", "message_size", "latency", "kernel_source"])?;
    for row in table.rows() {
        let source = row.text(kernel)?;
        if engine != "trtllm" && !source.contains("graph") {
            acc.skip(format!("all-reduce outside a CUDA graph ({source})"));
            continue;
        }
        let shape = AllReduceShape { bytes: 2 * row.count(size, DIM_MAX * DIM_MAX)?, gpus: dim(row.count(gpus, 1024)?) };
        acc.add(Shape::AllReduce(shape), row.positive(latency)?, source);
    }
    Ok(())
}
