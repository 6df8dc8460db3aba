//! The profile format: a CSV with one row per measured shape, and a TOML provenance sidecar.
//!
//! `calibration/h100-sxm.csv` comes with `calibration/h100-sxm.provenance.toml` (see
//! [`provenance_path`]). The CSV is deterministic given the measurements (rows sorted by shape,
//! numbers in Rust's shortest round-trip notation); the sidecar's `date` is the only part taken
//! from the system clock.
//!
//! # CSV columns
//!
//! A cell that does not apply to a row's op is empty.
//!
//! | column | meaning |
//! | --- | --- |
//! | `op` | `gemm`, `attention`, `allreduce` or `alltoall` |
//! | `phase` | attention only: `prefill` (whole prompts, no cache), `decode` (one token over a paged cache) or `mixed` (prefill chunks over cached context) |
//! | `dtype` | GEMM and attention: `bf16`, `fp16`, `fp8` or `fp32` (inputs; a GEMM's output is 16-bit for fp8) |
//! | `m`, `n`, `k` | GEMM: `[m × k] · [k × n]`; `m` is token rows, `n` output features, `k` input features |
//! | `batch` | attention: sequences in the batch |
//! | `query_len` | attention: new tokens per sequence (1 for decode) |
//! | `context_len` | attention: cached tokens per sequence before the step (0 for prefill); with `uneven`, the mean |
//! | `num_heads`, `num_kv_heads`, `head_dim` | attention: heads on this GPU (query and KV) and the head size |
//! | `uneven` | attention: `true` when decode contexts are spread evenly over `1..=2·context_len` |
//! | `bytes` | all-reduce: payload size, bytes; all-to-all: the whole buffer each GPU sends (nccl-tests' size), bytes |
//! | `gpus` | all-reduce and all-to-all: number of GPUs |
//! | `median_ns`, `p10_ns`, `p90_ns` | the kernel's duration over the timed repeats, nanoseconds |
//! | `repeats` | timed repeats (warm-up runs excluded) |
//! | `flops` | roofline FLOPs of the shape (GEMM `2·m·n·k`; attention `4·heads·head_dim·keys`) |
//! | `bytes_moved` | roofline memory traffic, bytes (GEMM inputs and output; attention K/V of every cached and new token plus Q and O; all-reduce `2(g−1)/g · bytes` per GPU; all-to-all `(g−1)/g · bytes`) |
//! | `utilisation` | roofline time at the sidecar's peak ÷ `median_ns`: 1 means the kernel ran at the roofline; empty for all-reduces (no link peak) |
//!
//! `flops`, `bytes_moved` and `utilisation` are derived, for readers of the file: the cost model
//! recomputes them from the shape, `median_ns` and the sidecar's peak, so editing them changes
//! nothing.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use super::backend::{AllReduceShape, AllToAllShape, AttentionPhase, AttentionShape, DeviceInfo, GemmShape, Peak, SamplingMethod, SamplingShape};
use super::grid::{GridOptions, Shape, Work};
use super::noise::ReferenceTimings;
use super::timing::{Measurement, TimingMethod, TimingOptions};
use crate::scenario::model::Dtype;

pub mod index;
pub mod interpolate;
mod lazy;
pub mod leave_one_out;
pub mod pack;

pub use index::ProfileIndex;
pub use leave_one_out::{
    LEAVE_ONE_OUT_POINTS_PER_GROUP, LeaveOneOut, leave_one_gemm_shape_out, leave_one_out, leave_one_out_points,
};

/// The CSV header, in order.
pub const COLUMNS: [&str; 22] = [
    "op",
    "phase",
    "dtype",
    "m",
    "n",
    "k",
    "batch",
    "query_len",
    "context_len",
    "num_heads",
    "num_kv_heads",
    "head_dim",
    "uneven",
    "bytes",
    "gpus",
    "median_ns",
    "p10_ns",
    "p90_ns",
    "repeats",
    "flops",
    "bytes_moved",
    "utilisation",
];

/// One measured shape.
#[derive(Clone, Debug, PartialEq)]
pub struct ProfileRow {
    pub shape: Shape,
    pub measurement: Measurement,
    /// FLOPs and bytes of the shape (see [`Shape::work`]).
    pub work: Work,
    /// Roofline time at the profile's peak ÷ median time; `None` for collectives.
    pub utilisation: Option<f64>,
}

impl ProfileRow {
    pub fn new(shape: Shape, measurement: Measurement, peak: &Peak) -> ProfileRow {
        let work = shape.work();
        let utilisation = match shape {
            Shape::AllReduce(_) | Shape::AllToAll(_) => None,
            _ => Some(work.roofline_s(peak) * 1e9 / measurement.median_ns),
        };
        ProfileRow { shape, measurement, work, utilisation }
    }
}

/// The device a profile was measured on.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct DeviceProvenance {
    pub device: String,
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub driver_version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime_version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clocks: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parallelism: Option<u32>,
}

impl From<&DeviceInfo> for DeviceProvenance {
    fn from(d: &DeviceInfo) -> Self {
        DeviceProvenance {
            device: d.device.clone(),
            name: d.name.clone(),
            driver_version: d.driver_version.clone(),
            runtime_version: d.runtime_version.clone(),
            clocks: d.clocks.clone(),
            parallelism: d.parallelism,
        }
    }
}

/// The peaks utilisation is measured against.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct PeakProvenance {
    pub flops_per_s: f64,
    pub memory_bytes_per_s: f64,
}

impl From<Peak> for PeakProvenance {
    fn from(p: Peak) -> Self {
        PeakProvenance { flops_per_s: p.flops_per_s, memory_bytes_per_s: p.memory_bytes_per_s }
    }
}

impl PeakProvenance {
    pub fn peak(&self) -> Peak {
        Peak { flops_per_s: self.flops_per_s, memory_bytes_per_s: self.memory_bytes_per_s }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct KernelHash {
    pub name: String,
    pub hash: String,
}

/// The grid a profile was measured over ([`GridOptions`] with models by name).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct GridProvenance {
    pub scale: String,
    pub dtypes: Vec<String>,
    pub tensor_parallel: Vec<u32>,
    pub models: Vec<String>,
    pub max_m: u32,
    #[serde(default)]
    pub allreduce_gpus: Vec<u32>,
    #[serde(default)]
    pub sampling_rows: u32,
}

impl From<&GridOptions> for GridProvenance {
    fn from(g: &GridOptions) -> Self {
        GridProvenance {
            scale: g.scale.name().to_string(),
            dtypes: g.dtypes.iter().map(|d| d.name().to_string()).collect(),
            tensor_parallel: g.tensor_parallel.clone(),
            models: g.models.iter().map(|m| m.name.clone()).collect(),
            max_m: g.max_m,
            allreduce_gpus: g.allreduce_gpus.clone(),
            sampling_rows: g.sampling_rows,
        }
    }
}

/// The timing policy a profile was measured with ([`TimingOptions`]).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TimingProvenance {
    pub warmup: u32,
    pub min_repeats: u32,
    pub max_repeats: u32,
    pub max_time_ms: u64,
    pub stable_window: u32,
    pub stable_rel: f64,
    pub flush_cache: bool,
    /// How each repeat ran (`TimingMethod::name`): `flush` (one launch after a cache flush; every
    /// profile from before the field) or `graph` (replayed `replays` times in a CUDA graph).
    #[serde(default = "flush_method")]
    pub method: String,
    /// Runs per repeat of the graph method; absent for the flush method.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replays: Option<u32>,
}

fn flush_method() -> String {
    TimingMethod::Flush.name().to_string()
}

impl From<&TimingOptions> for TimingProvenance {
    fn from(t: &TimingOptions) -> Self {
        TimingProvenance {
            warmup: t.warmup,
            min_repeats: t.min_repeats,
            max_repeats: t.max_repeats,
            max_time_ms: t.max_time.as_millis() as u64,
            stable_window: t.stable_window,
            stable_rel: t.stable_rel,
            flush_cache: t.flush_cache && t.method == TimingMethod::Flush,
            method: t.method.name().to_string(),
            replays: (t.method == TimingMethod::Graph).then_some(t.replays.max(1)),
        }
    }
}

/// What a calibration run did with the grid.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RunSummary {
    pub shapes_in_grid: u64,
    pub measured: u64,
    /// Shapes the backend cannot run (a dtype it lacks, no collective on one device).
    pub skipped_unsupported: u64,
    /// Shapes left unmeasured when the budget ran out.
    pub skipped_budget: u64,
    /// Shapes whose preparation or run failed (e.g. out of memory); the first few reasons are in
    /// `failures`.
    pub failed: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget_s: Option<f64>,
    /// Most shapes the run would time (`RunOptions::shapes_max`), when limited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shapes_max: Option<u64>,
    /// Passes over the grid that started (see `RunOptions::passes`); a pass the budget cut
    /// short counts. Profiles written before passes existed made one.
    #[serde(default = "one_pass")]
    pub passes: u32,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failures: Vec<String>,
    /// The budget ran out before every pass asked for finished: some shapes were measured in
    /// fewer passes (or not at all: `skipped_budget`).
    #[serde(default)]
    pub cut_short: bool,
    /// Why the backend could not run a shape, for the first few it could not (e.g. a CPU shape
    /// over the memory cap, with what it needs).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unsupported_reasons: Vec<String>,
    /// Shapes of the workload the run was for (`RunOptions::focus`), which ran first in every
    /// pass, and how many of them were measured; 0 for a run over the grid alone.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub focus_shapes: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub focus_measured: u64,
    /// Each re-timing of a shape that broke monotonicity or whose passes disagreed, with why and
    /// its median before and after (`calibrate::consistency`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub retimed: Vec<String>,
    /// Shapes still inconsistent when the re-timings ran out (the first few), with why.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub inconsistent: Vec<String>,
    /// The reference kernel timed before and after the passes, and whether the machine was too
    /// noisy ([`ReferenceTimings`]); absent when not checked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reference: Option<ReferenceTimings>,
    /// What refining the grid did (`calibrate::refine`), when the run refined it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refine: Option<RefineSummary>,
    /// The GPU's per-launch floor, when the backend timed it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub launch_floor: Option<crate::calibrate::backend::LaunchFloor>,
    /// The elementwise kernels of a layer at the grid's models' shapes, when the backend timed
    /// them (recorded; the cost model still prices them by the roofline).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub elementwise: Vec<crate::calibrate::backend::ElementwiseTiming>,
}

/// What refining a profile's grid did (`calibrate::refine`): shapes added where leave-one-out
/// error was worst, until each kind's median met its target.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RefineSummary {
    pub gemm_target: f64,
    pub attention_target: f64,
    /// Leave-one-out medians before and after; absent where a kind had too few points.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gemm_before: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attention_before: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gemm_after: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attention_after: Option<f64>,
    pub rounds: u32,
    pub added: u64,
    /// "targets met", "budget spent" (time or shapes), "round limit" or "no midpoint left".
    pub stopped: String,
    /// Leave-one-out error per op at the end.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub per_op: Vec<OpLeaveOneOut>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failed: Vec<String>,
}

/// One op's leave-one-out error: `GEMM QKV`, `attention decode`, ….
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct OpLeaveOneOut {
    pub op: String,
    pub points: usize,
    pub median: f64,
    pub p90: f64,
}

fn one_pass() -> u32 {
    1
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// Re-timings the one-line summary shows; the provenance keeps them all.
const RETIMED_SHOWN: usize = 3;

impl std::fmt::Display for RunSummary {
    /// One line for the end of a run: `measured 120 of 130 shapes; 4 unsupported, 6 skipped
    /// (budget spent), 0 failed` (and `, in 3 passes` when more than one started), with the
    /// first failure reasons on following lines.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "measured {} of {} shapes; {} unsupported, {} skipped (budget spent), {} failed",
            self.measured, self.shapes_in_grid, self.skipped_unsupported, self.skipped_budget, self.failed
        )?;
        if self.passes > 1 {
            write!(f, ", in {} passes", self.passes)?;
        }
        if self.cut_short {
            write!(f, "; cut short by the budget")?;
        }
        if self.focus_shapes > 0 {
            write!(f, "; the workload's {} shapes first, {} of them measured", self.focus_shapes, self.focus_measured)?;
        }
        if let Some(floor) = &self.launch_floor {
            write!(f, "; launch floor {:.2} µs eager, {:.2} µs in a CUDA graph", floor.eager_ns * 1e-3, floor.graph_ns * 1e-3)?;
        }
        if !self.retimed.is_empty() {
            write!(f, "; inconsistent shapes re-timed: {}", self.retimed.len())?;
        }
        for note in self.retimed.iter().take(RETIMED_SHOWN) {
            write!(f, "\n  re-timed: {note}")?;
        }
        if self.retimed.len() > RETIMED_SHOWN {
            write!(f, "\n  re-timed: … {} more in the provenance's run.retimed", self.retimed.len() - RETIMED_SHOWN)?;
        }
        for note in &self.inconsistent {
            write!(f, "\n  still inconsistent: {note}")?;
        }
        for failure in &self.failures {
            write!(f, "\n  failed: {failure}")?;
        }
        for reason in &self.unsupported_reasons {
            write!(f, "\n  skipped: {reason}")?;
        }
        Ok(())
    }
}

/// Where a profile came from: everything needed to judge whether it applies.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Provenance {
    pub servesim_version: String,
    /// When the run ended, RFC 3339 (UTC) from the system clock.
    pub date: String,
    pub device: DeviceProvenance,
    pub peak: PeakProvenance,
    /// (kernel, hash of its source) for every kernel the backend runs.
    #[serde(default)]
    pub kernels: Vec<KernelHash>,
    pub grid: GridProvenance,
    pub timing: TimingProvenance,
    pub run: RunSummary,
    /// For a profile imported from published measurements (`calibrate import`): where they
    /// come from. `None` for a profile servesim measured itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<SourceProvenance>,
}

/// Where an imported profile's measurements come from, and what they timed.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SourceProvenance {
    /// The format imported (`aiconfigurator`, …).
    pub format: String,
    /// `owner/repository` that published the measurements, at `commit`, under `license`.
    pub repository: String,
    pub commit: String,
    pub license: String,
    /// The hardware preset the rows were measured on (its datasheet gives the profile's peak).
    pub gpu: String,
    /// The engine build whose kernels were timed, e.g. `vllm` `0.24.0`.
    pub engine: String,
    pub engine_version: String,
    /// Kernels the source names for the rows imported.
    pub kernels: Vec<String>,
    pub dtypes: Vec<String>,
    /// Files read, relative to the source's data folder.
    pub files: Vec<String>,
    /// How far other sources' timings of the same shapes differ, one line each.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub agreement: Vec<String>,
    /// How the source timed each op.
    pub method: String,
}

impl Provenance {
    /// What the profile was measured on, as a phrase: the imported source's GPU preset, `a CPU`,
    /// or the device's name.
    pub fn measured_on(&self) -> String {
        match &self.source {
            Some(source) => source.gpu.clone(),
            None if self.device.device == "cpu" => format!("a CPU ({})", self.device.name),
            None => self.device.name.clone(),
        }
    }

    pub fn to_toml_string(&self) -> String {
        let body = toml::to_string(self).expect("provenance serializes to TOML");
        format!("# servesim calibration profile provenance (the CSV beside this file holds the measurements)\n{body}")
    }
}

/// A calibration profile: measured rows and their provenance.
#[derive(Clone, Debug, PartialEq)]
pub struct Profile {
    pub rows: Vec<ProfileRow>,
    pub provenance: Provenance,
}

/// What decides whether a profile describes a scenario's kernels, beyond its provenance (see
/// `cost::profile_match`): the dtypes of its GEMMs, in the order its rows first name them, and
/// whether it timed attention. A bundled profile keeps them in its packed index, so that
/// matching reads no rows.
#[derive(Clone, Debug, PartialEq)]
pub struct ProfileFacts {
    pub gemm_dtypes: Vec<Dtype>,
    pub has_attention: bool,
}

impl ProfileFacts {
    pub fn of(rows: &[ProfileRow]) -> ProfileFacts {
        let mut gemm_dtypes = Vec::new();
        for row in rows {
            if let Shape::Gemm(g) = &row.shape
                && !gemm_dtypes.contains(&g.dtype)
            {
                gemm_dtypes.push(g.dtype);
            }
        }
        ProfileFacts { gemm_dtypes, has_attention: rows.iter().any(|row| matches!(row.shape, Shape::Attention(_))) }
    }
}

/// Why a profile could not be read or written. Each names the file (and the line, for CSV
/// content).
#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    #[error("{}: cannot read: {source}", file.display())]
    Read { file: PathBuf, source: std::io::Error },
    #[error("{}: cannot write: {source}", file.display())]
    Write { file: PathBuf, source: std::io::Error },
    #[error("{}:{line}: {message}", file.display())]
    Csv { file: PathBuf, line: u64, message: String },
    #[error("{}: {message}", file.display())]
    Provenance { file: PathBuf, message: String },
}

/// The provenance sidecar of a profile CSV: `x.csv` → `x.provenance.toml`.
pub fn provenance_path(csv: &Path) -> PathBuf {
    let csv = if is_compressed(csv) { csv.with_extension("") } else { csv.to_path_buf() };
    csv.with_extension("provenance.toml")
}

/// A profile CSV compressed with zstd (`x.csv.zst`), as the bundled profiles are: published
/// tables hold hundreds of thousands of shapes.
fn is_compressed(csv: &Path) -> bool {
    csv.extension().is_some_and(|e| e == "zst")
}

pub(crate) fn phase_name(phase: AttentionPhase) -> &'static str {
    match phase {
        AttentionPhase::Prefill => "prefill",
        AttentionPhase::Decode => "decode",
        AttentionPhase::Mixed => "mixed",
    }
}

pub(crate) fn parse_phase(s: &str) -> Option<AttentionPhase> {
    match s {
        "prefill" => Some(AttentionPhase::Prefill),
        "decode" => Some(AttentionPhase::Decode),
        "mixed" => Some(AttentionPhase::Mixed),
        _ => None,
    }
}

impl Profile {
    /// The rows' peak (from the provenance).
    pub fn peak(&self) -> Peak {
        self.provenance.peak.peak()
    }

    /// The CSV text: header, then one line per row in the order of `rows`.
    pub fn to_csv_string(&self) -> String {
        let mut out = String::with_capacity(64 * (self.rows.len() + 1));
        out.push_str(&COLUMNS.join(","));
        out.push('\n');
        for row in &self.rows {
            // op, phase, dtype, m, n, k, batch, query_len, context_len, num_heads, num_kv_heads,
            // head_dim, uneven, bytes, gpus
            let mut cells: [String; 15] = Default::default();
            match &row.shape {
                Shape::Gemm(g) => {
                    cells[0] = "gemm".into();
                    cells[2] = g.dtype.name().into();
                    cells[3] = g.m.to_string();
                    cells[4] = g.n.to_string();
                    cells[5] = g.k.to_string();
                }
                Shape::Attention(a) => {
                    cells[0] = "attention".into();
                    cells[1] = phase_name(a.phase).into();
                    cells[2] = a.dtype.name().into();
                    cells[6] = a.batch.to_string();
                    cells[7] = a.query_len.to_string();
                    cells[8] = a.context_len.to_string();
                    cells[9] = a.num_heads.to_string();
                    cells[10] = a.num_kv_heads.to_string();
                    cells[11] = a.head_dim.to_string();
                    cells[12] = a.uneven.to_string();
                }
                Shape::AllReduce(r) => {
                    cells[0] = "allreduce".into();
                    cells[13] = r.bytes.to_string();
                    cells[14] = r.gpus.to_string();
                }
                Shape::AllToAll(r) => {
                    cells[0] = "alltoall".into();
                    cells[13] = r.bytes.to_string();
                    cells[14] = r.gpus.to_string();
                }
                Shape::Sampling(s) => {
                    cells[0] = "sampling".into();
                    cells[1] = s.method.name().into();
                    cells[3] = s.rows.to_string();
                    cells[4] = s.vocab.to_string();
                }
            }
            let m = &row.measurement;
            let utilisation = row.utilisation.map(|u| u.to_string()).unwrap_or_default();
            let _ = writeln!(
                out,
                "{},{},{},{},{},{},{},{}",
                cells.join(","),
                m.median_ns,
                m.p10_ns,
                m.p90_ns,
                m.repeats,
                row.work.flops,
                row.work.bytes,
                utilisation
            );
        }
        out
    }

    /// Writes the CSV to `csv` and the provenance to [`provenance_path`]`(csv)`.
    pub fn write(&self, csv: &Path) -> Result<(), ProfileError> {
        if let Some(dir) = csv.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|source| ProfileError::Write { file: dir.to_path_buf(), source })?;
        }
        let text = self.to_csv_string();
        let bytes = if is_compressed(csv) {
            zstd::encode_all(text.as_bytes(), 19).map_err(|source| ProfileError::Write { file: csv.to_path_buf(), source })?
        } else {
            text.into_bytes()
        };
        std::fs::write(csv, bytes).map_err(|source| ProfileError::Write { file: csv.to_path_buf(), source })?;
        let sidecar = provenance_path(csv);
        std::fs::write(&sidecar, self.provenance.to_toml_string())
            .map_err(|source| ProfileError::Write { file: sidecar, source })
    }

    /// Reads a profile CSV and its provenance sidecar (which must exist: it holds the peak that
    /// the utilisations are relative to).
    pub fn read(csv: &Path) -> Result<Profile, ProfileError> {
        let sidecar = provenance_path(csv);
        let toml_text =
            std::fs::read_to_string(&sidecar).map_err(|source| ProfileError::Read { file: sidecar.clone(), source })?;
        let provenance = parse_provenance(&toml_text, &sidecar)?;
        let read_err = |source| ProfileError::Read { file: csv.to_path_buf(), source };
        let bytes = std::fs::read(csv).map_err(read_err)?;
        let bytes = if is_compressed(csv) { zstd::decode_all(bytes.as_slice()).map_err(read_err)? } else { bytes };
        let text = String::from_utf8(bytes)
            .map_err(|e| read_err(std::io::Error::new(std::io::ErrorKind::InvalidData, e.to_string())))?;
        let rows = parse_csv(&text, csv, &provenance.peak.peak())?;
        Ok(Profile { rows, provenance })
    }
}

/// Parses a provenance sidecar's text; `file` names it in errors.
pub fn parse_provenance(text: &str, file: &Path) -> Result<Provenance, ProfileError> {
    let provenance: Provenance = toml::from_str(text)
        .map_err(|e| ProfileError::Provenance { file: file.to_path_buf(), message: e.to_string() })?;
    let peak = provenance.peak;
    for (name, value) in [("peak.flops_per_s", peak.flops_per_s), ("peak.memory_bytes_per_s", peak.memory_bytes_per_s)]
    {
        if !(value.is_finite() && value > 0.0) {
            return Err(ProfileError::Provenance {
                file: file.to_path_buf(),
                message: format!("{name} = {value}: must be positive and finite"),
            });
        }
    }
    Ok(provenance)
}

/// Parses a profile CSV's text; `file` names it in errors, `peak` gives the utilisations.
pub fn parse_csv(text: &str, file: &Path, peak: &Peak) -> Result<Vec<ProfileRow>, ProfileError> {
    let err = |line: u64, message: String| ProfileError::Csv { file: file.to_path_buf(), line, message };
    let mut reader = csv::ReaderBuilder::new().has_headers(true).flexible(false).from_reader(text.as_bytes());
    let header = reader.headers().map_err(|e| err(1, e.to_string()))?.clone();
    let got: Vec<&str> = header.iter().map(str::trim).collect();
    if got != COLUMNS {
        return Err(err(1, format!("header must be `{}`, found `{}`", COLUMNS.join(","), got.join(","))));
    }
    let mut rows = Vec::new();
    for record in reader.records() {
        let record = record.map_err(|e| {
            let line = e.position().map_or(0, |p| p.line());
            err(line, e.to_string())
        })?;
        let line = record.position().map_or(0, |p| p.line());
        let cell = |i: usize| record.get(i).unwrap_or("").trim();
        let uint = |i: usize| -> Result<u64, ProfileError> {
            cell(i)
                .parse::<u64>()
                .map_err(|_| err(line, format!("{}: expected a non-negative integer, found {:?}", COLUMNS[i], cell(i))))
        };
        let pos32 = |i: usize| -> Result<u32, ProfileError> {
            match uint(i)? {
                v @ 1..=0xFFFF_FFFF => Ok(v as u32),
                v => Err(err(line, format!("{}: expected a positive 32-bit integer, found {v}", COLUMNS[i]))),
            }
        };
        let float = |i: usize| -> Result<f64, ProfileError> {
            match cell(i).parse::<f64>() {
                Ok(v) if v.is_finite() && v >= 0.0 => Ok(v),
                _ => Err(err(line, format!("{}: expected a non-negative number, found {:?}", COLUMNS[i], cell(i)))),
            }
        };
        let dtype = || -> Result<Dtype, ProfileError> {
            Dtype::parse(cell(2)).ok_or_else(|| {
                err(line, format!("dtype: expected one of {}, found {:?}", Dtype::NAMES.join(", "), cell(2)))
            })
        };
        let shape = match cell(0) {
            "gemm" => Shape::Gemm(GemmShape { m: pos32(3)?, n: pos32(4)?, k: pos32(5)?, dtype: dtype()? }),
            "attention" => {
                let phase = parse_phase(cell(1)).ok_or_else(|| {
                    err(line, format!("phase: expected prefill, decode or mixed, found {:?}", cell(1)))
                })?;
                let uneven = match cell(12) {
                    "true" => true,
                    "false" | "" => false,
                    other => return Err(err(line, format!("uneven: expected true or false, found {other:?}"))),
                };
                let context_len = uint(8)?;
                let context_len = u32::try_from(context_len)
                    .map_err(|_| err(line, format!("context_len: {context_len} is too large")))?;
                Shape::Attention(AttentionShape {
                    phase,
                    batch: pos32(6)?,
                    query_len: pos32(7)?,
                    context_len,
                    num_heads: pos32(9)?,
                    num_kv_heads: pos32(10)?,
                    head_dim: pos32(11)?,
                    uneven,
                    dtype: dtype()?,
                })
            }
            "allreduce" => Shape::AllReduce(AllReduceShape { bytes: uint(13)?, gpus: pos32(14)? }),
            "alltoall" => Shape::AllToAll(AllToAllShape { bytes: uint(13)?, gpus: pos32(14)? }),
            "sampling" => {
                let method = SamplingMethod::parse(cell(1)).ok_or_else(|| {
                    let names: Vec<&str> = SamplingMethod::ALL.iter().map(|m| m.name()).collect();
                    err(line, format!("phase: expected a sampling method ({}), found {:?}", names.join(", "), cell(1)))
                })?;
                Shape::Sampling(SamplingShape { method, rows: pos32(3)?, vocab: pos32(4)? })
            }
            other => {
                return Err(err(line, format!("op: expected gemm, attention, allreduce, alltoall or sampling, found {other:?}")));
            }
        };
        let measurement = Measurement {
            median_ns: float(15)?,
            p10_ns: float(16)?,
            p90_ns: float(17)?,
            repeats: u32::try_from(uint(18)?).map_err(|_| err(line, "repeats: too large".into()))?,
        };
        if measurement.median_ns <= 0.0 {
            return Err(err(line, "median_ns: must be positive".into()));
        }
        rows.push(ProfileRow::new(shape, measurement, peak));
    }
    // A profile of nothing would price every step by fallbacks without saying so.
    if rows.is_empty() {
        return Err(err(1, "no measured rows: the profile holds only its header".into()));
    }
    Ok(rows)
}

/// `time` as RFC 3339 in UTC, to the second (`2025-06-01T12:34:56Z`).
/// The current time, as [`rfc3339_utc`] writes it.
pub fn now_rfc3339() -> String {
    rfc3339_utc(SystemTime::now())
}

pub fn rfc3339_utc(time: SystemTime) -> String {
    let secs = time.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs()) as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z", rem / 3600, rem % 3600 / 60, rem % 60)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::calibrate::grid::GridScale;
    use std::time::Duration;

    fn peak() -> Peak {
        Peak { flops_per_s: 1e12, memory_bytes_per_s: 1e11 }
    }

    fn sample() -> Profile {
        let m = |median_ns: f64| Measurement {
            median_ns,
            p10_ns: median_ns * 0.9,
            p90_ns: median_ns * 1.1 + 0.125,
            repeats: 7,
        };
        let rows = vec![
            ProfileRow::new(
                Shape::Gemm(GemmShape { m: 16, n: 3072, k: 2048, dtype: Dtype::Bf16 }),
                m(12345.678),
                &peak(),
            ),
            ProfileRow::new(
                Shape::Attention(AttentionShape {
                    phase: AttentionPhase::Decode,
                    batch: 8,
                    query_len: 1,
                    context_len: 1024,
                    num_heads: 32,
                    num_kv_heads: 8,
                    head_dim: 64,
                    uneven: true,
                    dtype: Dtype::Fp32,
                }),
                m(1.0 / 3.0 * 1e5),
                &peak(),
            ),
            ProfileRow::new(
                Shape::Attention(AttentionShape {
                    phase: AttentionPhase::Prefill,
                    batch: 1,
                    query_len: 512,
                    context_len: 0,
                    num_heads: 32,
                    num_kv_heads: 8,
                    head_dim: 64,
                    uneven: false,
                    dtype: Dtype::Bf16,
                }),
                m(9.5e6),
                &peak(),
            ),
            ProfileRow::new(Shape::AllReduce(AllReduceShape { bytes: 1 << 20, gpus: 8 }), m(40000.0), &peak()),
            ProfileRow::new(Shape::AllToAll(AllToAllShape { bytes: 1 << 20, gpus: 8 }), m(30000.0), &peak()),
            ProfileRow::new(Shape::Sampling(SamplingShape { method: SamplingMethod::TopK, rows: 32, vocab: 1000 }), m(64000.0), &peak()),
        ];
        let mut options = GridOptions::all_presets(GridScale::Tiny);
        options.allreduce_gpus = vec![8];
        Profile {
            rows,
            provenance: Provenance {
                servesim_version: env!("CARGO_PKG_VERSION").into(),
                date: rfc3339_utc(UNIX_EPOCH + Duration::from_secs(1_700_000_000)),
                device: DeviceProvenance {
                    device: "cpu".into(),
                    name: "Test CPU \"quoted\"".into(),
                    driver_version: None,
                    runtime_version: Some("12.8".into()),
                    clocks: None,
                    parallelism: Some(2),
                },
                peak: peak().into(),
                kernels: vec![KernelHash { name: "attention.cu".into(), hash: "abc123".into() }],
                grid: (&options).into(),
                timing: (&TimingOptions::default().with_method(TimingMethod::Graph)).into(),
                source: None,
                run: RunSummary {
                    shapes_in_grid: 10,
                    measured: 4,
                    skipped_unsupported: 1,
                    skipped_budget: 5,
                    failed: 0,
                    budget_s: Some(60.0),
                    shapes_max: Some(40),
                    passes: 2,
                    failures: vec![],
                    cut_short: true,
                    unsupported_reasons: vec!["gemm 1×2×3 fp32: needs 9 GiB".into()],
                    focus_shapes: 3,
                    focus_measured: 2,
                    retimed: vec!["gemm 3×2×3 fp32: its passes disagree (1.000 ms, 17.000 ms); median 9.000 ms → 1.100 ms".into()],
                    inconsistent: vec!["gemm 1×2×3 fp32: gemm 1×2×3 fp32 took 5.000 ms, 2.0× the 2.500 ms of gemm 3×2×3 fp32, which has more work".into()],
                    reference: Some(ReferenceTimings::judge("gemm 256×1024×1024 f32".into(), vec![5e6, 6e6], 0.1)),
                    refine: Some(RefineSummary {
                        gemm_target: 0.05,
                        attention_target: 0.1,
                        gemm_before: Some(0.2),
                        attention_before: None,
                        gemm_after: Some(0.04),
                        attention_after: None,
                        rounds: 3,
                        added: 12,
                        stopped: "targets met".into(),
                        per_op: vec![OpLeaveOneOut { op: "GEMM QKV".into(), points: 7, median: 0.03, p90: 0.08 }],
                        failed: vec![],
                    }),
                    launch_floor: Some(crate::calibrate::backend::LaunchFloor {
                        kernel: "fill_uniform_bf16".into(),
                        eager_ns: 2500.0,
                        graph_ns: 1200.0,
                    }),
                    elementwise: vec![crate::calibrate::backend::ElementwiseTiming {
                        model: "Llama-3.2-1B".into(),
                        kernel: "rotary".into(),
                        tokens: 16,
                        ns: 2100.0,
                    }],
                },
            },
        }
    }

    #[test]
    fn round_trip_through_files() {
        let dir = tempfile::tempdir().unwrap();
        let csv = dir.path().join("sub/profile.csv");
        let profile = sample();
        profile.write(&csv).unwrap();
        assert!(dir.path().join("sub/profile.provenance.toml").exists());
        let back = Profile::read(&csv).unwrap();
        assert_eq!(back, profile);
        // Byte-identical when written again.
        assert_eq!(back.to_csv_string(), profile.to_csv_string());
        assert_eq!(back.provenance.to_toml_string(), profile.provenance.to_toml_string());
        assert_eq!(
            back.provenance.run.to_string(),
            "measured 4 of 10 shapes; 1 unsupported, 5 skipped (budget spent), 0 failed, in 2 passes; cut short by the \
             budget; the workload's 3 shapes first, 2 of them measured; launch floor 2.50 µs eager, 1.20 µs in a CUDA \
             graph; inconsistent shapes re-timed: 1\n  re-timed: gemm \
             3×2×3 fp32: its passes disagree (1.000 ms, 17.000 ms); median 9.000 ms → 1.100 ms\n  still inconsistent: gemm \
             1×2×3 fp32: gemm 1×2×3 fp32 took 5.000 ms, 2.0× the 2.500 ms of gemm 3×2×3 fp32, which has more work\n  \
             skipped: gemm 1×2×3 fp32: needs 9 GiB"
        );
        // The timing method is named, with its replays; a provenance from before methods existed
        // timed with the flush method.
        let text = profile.provenance.to_toml_string();
        assert!(text.contains("method = \"graph\"\n") && text.contains("replays = 20\n"), "{text}");
        let flush: Provenance = toml::from_str(&text.replace("method = \"graph\"\n", "").replace("replays = 20\n", "")).unwrap();
        assert_eq!((flush.timing.method.as_str(), flush.timing.replays), ("flush", None));
        // A provenance written before passes existed made one.
        assert!(text.contains("passes = 2\n"), "{text}");
        let old: Provenance = toml::from_str(&text.replace("passes = 2\n", "")).unwrap();
        assert_eq!(old.run.passes, 1);
        assert!(!old.run.to_string().contains(", in 1 passes") && !old.run.to_string().contains(", in 2 passes"));
    }

    #[test]
    fn csv_has_the_documented_header_and_empty_cells() {
        let text = sample().to_csv_string();
        let mut lines = text.lines();
        assert_eq!(lines.next().unwrap(), COLUMNS.join(","));
        let gemm = lines.next().unwrap();
        assert!(gemm.starts_with("gemm,,bf16,16,3072,2048,,,,,,,,,,12345.678,"), "{gemm}");
        let allreduce = text.lines().nth_back(2).unwrap();
        assert!(allreduce.starts_with("allreduce,,,,,,,,,,,,,1048576,8,40000,"), "{allreduce}");
        assert!(allreduce.ends_with(','), "no utilisation for all-reduce: {allreduce}");
        let alltoall = text.lines().nth_back(1).unwrap();
        // 7/8 of the buffer leaves each GPU.
        assert!(alltoall.starts_with("alltoall,,,,,,,,,,,,,1048576,8,30000,"), "{alltoall}");
        assert!(alltoall.ends_with(",0,917504,"), "no FLOPs, 7/8 moved, no utilisation: {alltoall}");
        // The method in the phase column, rows as m and the vocabulary as n; the logits read.
        let sampling = text.lines().last().unwrap();
        assert!(sampling.starts_with("sampling,top_k,,32,1000,,,,,,,,,,,64000,"), "{sampling}");
        assert!(sampling.contains(",0,128000,"), "no FLOPs, 32 × 1000 f32 logits read: {sampling}");
    }

    #[test]
    fn errors_name_file_line_and_column() {
        let peak = peak();
        let file = Path::new("calibration/x.csv");
        let good = sample().to_csv_string();
        let error = |bad: &str| parse_csv(bad, file, &peak).unwrap_err().to_string();
        let bad = good.replacen("gemm,,bf16,16,", "gemm,,bf16,zero,", 1);
        let e = error(&bad);
        assert!(e.starts_with("calibration/x.csv:2: m:"), "{e}");
        let bad = good.replacen(",decode,", ",sideways,", 1);
        let e = error(&bad);
        assert!(e.starts_with("calibration/x.csv:3: phase"), "{e}");
        let bad = good.replacen("op,phase", "operation,phase", 1);
        let e = error(&bad);
        assert!(e.starts_with("calibration/x.csv:1: header"), "{e}");
        let bad = format!("{good}gemm,,bf16,1,2\n");
        let e = error(&bad);
        assert!(e.starts_with("calibration/x.csv:8:"), "{e}");
        let bad = good.replacen("sampling,top_k,", "sampling,beam,", 1);
        let e = error(&bad);
        assert!(e.starts_with("calibration/x.csv:7: phase: expected a sampling method (greedy, temperature, top_p, top_k), found \"beam\""), "{e}");
        let bad = good.replacen("sampling,top_k,,32,1000,", "sampling,top_k,,32,0,", 1);
        let e = error(&bad);
        assert!(e.starts_with("calibration/x.csv:7: n:"), "{e}");
        let bad = good.replacen("alltoall,,,,,,,,,,,,,1048576,8,", "alltoall,,,,,,,,,,,,,1048576,0,", 1);
        let e = error(&bad);
        assert!(e.starts_with("calibration/x.csv:6: gpus:"), "{e}");
        let bad = good.replacen("alltoall,", "alltoallv,", 1);
        let e = error(&bad);
        assert!(e.contains("op: expected gemm, attention, allreduce, alltoall or sampling, found \"alltoallv\""), "{e}");
        // A header alone is not a profile.
        let header = good.lines().next().unwrap();
        let e = error(&format!("{header}\n"));
        assert!(e.starts_with("calibration/x.csv:1: no measured rows"), "{e}");

        let dir = tempfile::tempdir().unwrap();
        let csv = dir.path().join("p.csv");
        std::fs::write(&csv, &good).unwrap();
        let e = Profile::read(&csv).unwrap_err().to_string();
        assert!(e.contains("p.provenance.toml") && e.contains("cannot read"), "{e}");
        std::fs::write(provenance_path(&csv), "servesim_version = 3").unwrap();
        let e = Profile::read(&csv).unwrap_err().to_string();
        assert!(e.contains("p.provenance.toml"), "{e}");
    }

    #[test]
    fn rfc3339_dates() {
        assert_eq!(rfc3339_utc(UNIX_EPOCH), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339_utc(UNIX_EPOCH + Duration::from_secs(1_700_000_000)), "2023-11-14T22:13:20Z");
        assert_eq!(rfc3339_utc(UNIX_EPOCH + Duration::from_secs(951_782_400)), "2000-02-29T00:00:00Z");
    }
}
