//! Kernel tables of model families whose layers are not a GEMM-and-attention decoder's: the
//! latent-attention module (DeepSeek-V3, Kimi-K2), its sparse variant (DeepSeek-V3.2), the fused
//! mixture-of-experts layer in every weight format the engines run (bf16, FP8, block FP8, INT4
//! weight-only, MXFP4, NVFP4) and Gated DeltaNet (Qwen3-Next, Qwen3.5).
//!
//! A profile's GEMM and attention rows are keyed by a shape any model shares; these rows are
//! keyed by a whole module's configuration, so they live beside the profile in a file of their
//! own, `<profile>.families.csv.zst` with `<profile>.families.provenance.toml`. The profile's
//! own CSV and its packed index stay as they were, and only a model that needs these rows reads
//! them. One row per measured point:
//!
//! | column | meaning |
//! | --- | --- |
//! | `op` | [`FamilyOp::name`] |
//! | `key` | the module's configuration, `name=value` pairs in a fixed order, e.g. `model=DeepSeek-V3 gemm=fp8_block kv=fp8 heads=16` |
//! | `x` | sequences in the batch (MLA, DSA, GDN), or tokens (MoE, MLA's BMMs) |
//! | `y` | context tables: new tokens per sequence, from an empty cache; generation tables of MLA and DSA: the sequence's length with the new token (cached + 1); GDN prefill: tokens per sequence; otherwise 0 |
//! | `median_ns` | the time of one layer's module on one GPU, nanoseconds (the median where a point was timed more than once) |
//!
//! A key's rows form a [`RowSurface`]: ln time interpolated bilinearly in (ln x, ln y).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The tables a families file holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FamilyOp {
    /// vLLM's whole MLA module (projections, RoPE, cache write, attention, o_proj), prefill.
    MlaContext,
    /// The same, one decode token per sequence (absorbed BMMs included).
    MlaGeneration,
    /// SGLang's MLA attention kernel alone (no projections, no BMMs), prefill and decode.
    MlaKernelContext,
    MlaKernelGeneration,
    /// MLA decode's absorbed-weight BMMs: q_nope · W_UK and the output · W_UV.
    MlaBmmPre,
    MlaBmmPost,
    /// The whole DeepSeek-sparse-attention module (MLA's plus the lightning indexer and top-k).
    DsaContext,
    DsaGeneration,
    /// One MoE layer's routed experts (fused kernel: top-k, permute, two grouped GEMMs, sum).
    Moe,
    /// Gated DeltaNet's kernels (convolution and delta rule), projections excluded.
    GdnContext,
    GdnGeneration,
}

impl FamilyOp {
    pub const ALL: [FamilyOp; 11] = [
        FamilyOp::MlaContext,
        FamilyOp::MlaGeneration,
        FamilyOp::MlaKernelContext,
        FamilyOp::MlaKernelGeneration,
        FamilyOp::MlaBmmPre,
        FamilyOp::MlaBmmPost,
        FamilyOp::DsaContext,
        FamilyOp::DsaGeneration,
        FamilyOp::Moe,
        FamilyOp::GdnContext,
        FamilyOp::GdnGeneration,
    ];

    pub fn name(self) -> &'static str {
        match self {
            FamilyOp::MlaContext => "mla_context",
            FamilyOp::MlaGeneration => "mla_generation",
            FamilyOp::MlaKernelContext => "mla_kernel_context",
            FamilyOp::MlaKernelGeneration => "mla_kernel_generation",
            FamilyOp::MlaBmmPre => "mla_bmm_pre",
            FamilyOp::MlaBmmPost => "mla_bmm_post",
            FamilyOp::DsaContext => "dsa_context",
            FamilyOp::DsaGeneration => "dsa_generation",
            FamilyOp::Moe => "moe",
            FamilyOp::GdnContext => "gdn_context",
            FamilyOp::GdnGeneration => "gdn_generation",
        }
    }

    pub fn parse(name: &str) -> Option<FamilyOp> {
        FamilyOp::ALL.into_iter().find(|op| op.name() == name)
    }
}

/// One measured point.
#[derive(Clone, Debug, PartialEq)]
pub struct FamilyRow {
    pub op: FamilyOp,
    pub key: String,
    pub x: u64,
    pub y: u64,
    pub median_ns: f64,
}

/// Where the rows come from, as a profile's `[source]` says it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct FamiliesProvenance {
    pub format: String,
    pub repository: String,
    pub commit: String,
    pub license: String,
    pub gpu: String,
    pub engine: String,
    pub engine_version: String,
    pub method: String,
    pub files: Vec<String>,
    pub kernels: Vec<String>,
    /// Rows per table, and what the import left out.
    pub notes: Vec<String>,
}

/// A families file: its rows (sorted) and provenance.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Families {
    pub rows: Vec<FamilyRow>,
    pub provenance: FamiliesProvenance,
}

/// Why a families file could not be read.
#[derive(Debug, thiserror::Error)]
pub enum FamiliesError {
    #[error("{}: {message}", file.display())]
    File { file: PathBuf, message: String },
    #[error("{}: line {line}: {message}", file.display())]
    Line { file: PathBuf, line: usize, message: String },
}

pub const HEADER: &str = "op,key,x,y,median_ns";

/// The families file beside the profile CSV `csv` (`a.csv.zst` → `a.families.csv.zst`, `a.csv`
/// → `a.families.csv`).
pub fn families_path(csv: &Path) -> PathBuf {
    let name = csv.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let (stem, ext) = match name.strip_suffix(".csv.zst") {
        Some(stem) => (stem.to_string(), ".csv.zst"),
        None => (name.strip_suffix(".csv").unwrap_or(&name).to_string(), ".csv"),
    };
    csv.with_file_name(format!("{stem}.families{ext}"))
}

/// Its provenance sidecar (`a.families.csv.zst` → `a.families.provenance.toml`).
pub fn provenance_path(families: &Path) -> PathBuf {
    let name = families.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let stem = name.strip_suffix(".csv.zst").or_else(|| name.strip_suffix(".csv")).unwrap_or(&name);
    families.with_file_name(format!("{stem}.provenance.toml"))
}

impl Families {
    pub fn to_csv_string(&self) -> String {
        let mut out = String::with_capacity(self.rows.len() * 48);
        out.push_str(HEADER);
        out.push('\n');
        for r in &self.rows {
            debug_assert!(!r.key.contains(',') && !r.key.contains('\n'), "a key is one CSV cell");
            let _ = writeln!(out, "{},{},{},{},{}", r.op.name(), r.key, r.x, r.y, r.median_ns);
        }
        out
    }

    /// Writes the rows to `path` (zstd-compressed when it ends in `.zst`) and the provenance
    /// beside it.
    pub fn write(&self, path: &Path) -> std::io::Result<()> {
        let text = self.to_csv_string();
        let bytes = if path.extension().is_some_and(|e| e == "zst") { zstd::encode_all(text.as_bytes(), 19)? } else { text.into_bytes() };
        std::fs::write(path, bytes)?;
        let toml = toml::to_string(&self.provenance).map_err(std::io::Error::other)?;
        std::fs::write(provenance_path(path), toml)
    }

    /// Reads the families file beside the profile CSV `csv`; `Ok(None)` when it has none.
    pub fn read_beside(csv: &Path) -> Result<Option<Families>, FamiliesError> {
        let path = families_path(csv);
        if !path.exists() {
            return Ok(None);
        }
        let bad = |message: String| FamiliesError::File { file: path.clone(), message };
        let bytes = std::fs::read(&path).map_err(|e| bad(format!("cannot read: {e}")))?;
        let bytes = if path.extension().is_some_and(|e| e == "zst") {
            zstd::decode_all(bytes.as_slice()).map_err(|e| bad(format!("cannot decompress: {e}")))?
        } else {
            bytes
        };
        let text = String::from_utf8(bytes).map_err(|e| bad(format!("not UTF-8: {e}")))?;
        let sidecar = provenance_path(&path);
        let toml_text = std::fs::read_to_string(&sidecar)
            .map_err(|e| FamiliesError::File { file: sidecar.clone(), message: format!("cannot read: {e}") })?;
        let provenance = toml::from_str(&toml_text).map_err(|e| FamiliesError::File { file: sidecar, message: e.to_string() })?;
        Ok(Some(Families { rows: parse_csv(&text, &path)?, provenance }))
    }

    /// The keys measured for `op`.
    pub fn keys(&self, op: FamilyOp) -> BTreeSet<&str> {
        self.rows.iter().filter(|r| r.op == op).map(|r| r.key.as_str()).collect()
    }

    /// The surface of `op` at `key`, when it has rows.
    pub fn surface(&self, op: FamilyOp, key: &str) -> Option<RowSurface> {
        RowSurface::new(self.rows.iter().filter(|r| r.op == op && r.key == key).map(|r| (r.x, r.y, r.median_ns)))
    }

    /// Rows per table, for a summary line.
    pub fn counts(&self) -> BTreeMap<&'static str, usize> {
        let mut counts = BTreeMap::new();
        for r in &self.rows {
            *counts.entry(r.op.name()).or_default() += 1;
        }
        counts
    }
}

/// Parses a families CSV's text; `file` names it in errors.
pub fn parse_csv(text: &str, file: &Path) -> Result<Vec<FamilyRow>, FamiliesError> {
    let err = |line: usize, message: String| FamiliesError::Line { file: file.to_path_buf(), line, message };
    let mut lines = text.lines();
    match lines.next() {
        Some(h) if h.trim() == HEADER => {}
        other => return Err(err(1, format!("header must be `{HEADER}`, found `{}`", other.unwrap_or("")))),
    }
    let mut rows = Vec::new();
    for (i, line) in lines.enumerate() {
        let line_no = i + 2;
        if line.trim().is_empty() {
            continue;
        }
        let cells: Vec<&str> = line.split(',').map(str::trim).collect();
        let [op, key, x, y, ns] = cells[..] else {
            return Err(err(line_no, format!("expected 5 cells ({HEADER}), found {}", cells.len())));
        };
        let op = FamilyOp::parse(op).ok_or_else(|| err(line_no, format!("op: unknown table {op:?}")))?;
        let whole = |name: &str, v: &str| v.parse::<u64>().map_err(|_| err(line_no, format!("{name}: expected a whole number, found {v:?}")));
        let median_ns = ns
            .parse::<f64>()
            .ok()
            .filter(|v| v.is_finite() && *v > 0.0)
            .ok_or_else(|| err(line_no, format!("median_ns: expected a positive number, found {ns:?}")))?;
        rows.push(FamilyRow { op, key: key.to_string(), x: whole("x", x)?, y: whole("y", y)?, median_ns });
    }
    Ok(rows)
}

/// The value of `name` in a row key (`heads` in `kv=fp8 heads=16` is `16`).
pub fn key_field<'a>(key: &'a str, name: &str) -> Option<&'a str> {
    key.split(' ').find_map(|pair| pair.strip_prefix(name)?.strip_prefix('='))
}

/// One key's measured points: ln time, linear in ln y along each measured x, and linear in ln x
/// between them. Beyond the largest x or y measured, time grows in proportion (a batch twice the
/// largest measured takes twice its time; so does a context twice the longest); below the
/// smallest, the smallest's time is held. Nothing is extrapolated from a slope.
#[derive(Clone, Debug, PartialEq)]
pub struct RowSurface {
    /// `(ln x, [(ln y, ln ns)])`, both ascending.
    lines: Vec<(f64, Vec<(f64, f64)>)>,
}

fn ln_at_least_1(v: f64) -> f64 {
    v.max(1.0).ln()
}

impl RowSurface {
    /// `None` without points.
    pub fn new(points: impl Iterator<Item = (u64, u64, f64)>) -> Option<RowSurface> {
        let mut by_x: BTreeMap<u64, BTreeMap<u64, f64>> = BTreeMap::new();
        for (x, y, ns) in points {
            by_x.entry(x).or_default().insert(y, ns);
        }
        let lines: Vec<_> = by_x
            .into_iter()
            .map(|(x, ys)| {
                let line: Vec<(f64, f64)> = ys.into_iter().map(|(y, ns)| (ln_at_least_1(y as f64), ns.ln())).collect();
                (ln_at_least_1(x as f64), line)
            })
            .collect();
        (!lines.is_empty()).then_some(RowSurface { lines })
    }

    /// Nanoseconds at `(x, y)`.
    pub fn eval_ns(&self, x: f64, y: f64) -> f64 {
        let (lx, ly) = (ln_at_least_1(x), ln_at_least_1(y));
        let first = &self.lines[0];
        let last = &self.lines[self.lines.len() - 1];
        let ln_ns = if lx <= first.0 {
            line_eval(&first.1, ly)
        } else if lx >= last.0 {
            line_eval(&last.1, ly) + (lx - last.0)
        } else {
            let above = self.lines.partition_point(|(l, _)| *l < lx);
            let (lo, hi) = (&self.lines[above - 1], &self.lines[above]);
            let w = (lx - lo.0) / (hi.0 - lo.0);
            (1.0 - w) * line_eval(&lo.1, ly) + w * line_eval(&hi.1, ly)
        };
        ln_ns.exp()
    }
}

/// ln ns at `ly` along one line of points.
fn line_eval(points: &[(f64, f64)], ly: f64) -> f64 {
    let (first, last) = (points[0], points[points.len() - 1]);
    if ly <= first.0 {
        return first.1;
    }
    if ly >= last.0 {
        return last.1 + (ly - last.0);
    }
    let above = points.partition_point(|(l, _)| *l < ly);
    let (lo, hi) = (points[above - 1], points[above]);
    let w = (ly - lo.0) / (hi.0 - lo.0);
    (1.0 - w) * lo.1 + w * hi.1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_sit_beside_the_profile() {
        assert_eq!(families_path(Path::new("p/h100.csv.zst")), Path::new("p/h100.families.csv.zst"));
        assert_eq!(families_path(Path::new("h100.csv")), Path::new("h100.families.csv"));
        assert_eq!(provenance_path(Path::new("p/h100.families.csv.zst")), Path::new("p/h100.families.provenance.toml"));
    }

    #[test]
    fn a_surface_interpolates_log_log_and_grows_in_proportion_beyond_its_points() {
        let s = RowSurface::new([(1, 2, 100.0), (1, 8, 400.0), (4, 2, 200.0), (4, 8, 800.0)].into_iter()).unwrap();
        assert!((s.eval_ns(1.0, 2.0) - 100.0).abs() < 1e-9);
        // Halfway in ln y between 2 and 8 at x = 1: √(100 · 400).
        assert!((s.eval_ns(1.0, 4.0) - 200.0).abs() < 1e-9);
        // Halfway in ln x too: √(200 · 400).
        assert!((s.eval_ns(2.0, 4.0) - (200.0f64 * 400.0).sqrt()).abs() < 1e-9);
        // Twice the largest y and x: twice and four times.
        assert!((s.eval_ns(4.0, 16.0) - 1600.0).abs() < 1e-6);
        assert!((s.eval_ns(8.0, 8.0) - 1600.0).abs() < 1e-6);
        // Below the smallest: held.
        assert!((s.eval_ns(1.0, 1.0) - 100.0).abs() < 1e-9);
    }

    #[test]
    fn the_csv_round_trips_and_bad_cells_are_named() {
        let families = Families {
            rows: vec![FamilyRow { op: FamilyOp::Moe, key: "dtype=fp8_block hidden=7168".into(), x: 16, y: 0, median_ns: 12345.0 }],
            provenance: FamiliesProvenance::default(),
        };
        let text = families.to_csv_string();
        assert_eq!(parse_csv(&text, Path::new("f.csv")).unwrap(), families.rows);
        let bad = text.replace("12345", "-1");
        let e = parse_csv(&bad, Path::new("f.csv")).unwrap_err().to_string();
        assert!(e.contains("f.csv: line 2: median_ns"), "{e}");
        let e = parse_csv("op,key\n", Path::new("f.csv")).unwrap_err().to_string();
        assert!(e.contains("header"), "{e}");
        assert_eq!(key_field("dtype=fp8_block hidden=7168", "hidden"), Some("7168"));
    }
}
