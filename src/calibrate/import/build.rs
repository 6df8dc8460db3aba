//! What every format's importer shares: the files a user named, the GPU they were measured on,
//! rows gathered by shape (with the rule for a shape timed more than once), and the profile with
//! its provenance built from them.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use super::ImportError;
use super::source::{Origin, collection_path, origin};
use crate::calibrate::backend::Peak;
use crate::calibrate::grid::Shape;
use crate::calibrate::profile::{
    DeviceProvenance, GridProvenance, PeakProvenance, Profile, ProfileRow, Provenance, RunSummary, SourceProvenance,
    TimingProvenance,
};
use crate::calibrate::timing::Measurement;
use crate::scenario::GpuSpec;

/// Dimensions above this are not a real shape (and would overflow servesim's u32 shapes).
pub const DIM_MAX: u64 = 1 << 24;

/// Files one import may read: far above any source's (vidur's A100 set has 7), and a bound on
/// what a folder walk allocates.
const FILES_MAX: usize = 10_000;

/// An imported profile and what the import left out, one line each.
#[derive(Clone, Debug)]
pub struct Imported {
    pub profile: Profile,
    pub notes: Vec<String>,
    /// Tables of whole modules (MLA, MoE, …), written beside the profile; aiconfigurator only.
    pub families: Option<crate::calibrate::families::Families>,
}

pub fn dim(value: u64) -> u32 {
    // Callers bound every dimension by DIM_MAX first.
    value as u32
}

/// The `q` quantile of `values` (nearest rank, on a sorted copy); 0 when empty.
pub fn percentile(values: &[f64], q: f64) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    sorted.get(((sorted.len() as f64 - 1.0) * q).round() as usize).copied().unwrap_or(0.0)
}

pub fn median(values: &[f64]) -> f64 {
    percentile(values, 0.5)
}

/// The files under `paths` (each a file, or a folder walked in name order) whose names are
/// `wanted` (`mlp.csv`, …), in order; every other CSV found is returned apart, to be named in a
/// note. A path that does not exist, or a walk that finds none of `wanted`, is an error.
pub fn files_under(paths: &[PathBuf], wanted: &[&str]) -> Result<(Vec<PathBuf>, Vec<PathBuf>), ImportError> {
    let (mut kept, mut other) = (Vec::new(), Vec::new());
    let mut stack: Vec<PathBuf> = paths.iter().rev().cloned().collect();
    while let Some(path) = stack.pop() {
        if kept.len() + other.len() > FILES_MAX {
            return Err(ImportError::File { file: path, message: format!("more than {FILES_MAX} files under the paths given") });
        }
        if path.is_dir() {
            let mut entries: Vec<PathBuf> = std::fs::read_dir(&path)
                .map_err(|e| ImportError::File { file: path.clone(), message: format!("cannot read: {e}") })?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .collect();
            entries.sort();
            stack.extend(entries.into_iter().rev());
        } else if path.is_file() {
            let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            if wanted.contains(&name.as_str()) {
                kept.push(path);
            } else if name.ends_with(".csv") {
                other.push(path);
            }
        } else {
            return Err(ImportError::File { file: path, message: "no such file or folder".into() });
        }
    }
    if kept.is_empty() {
        let file = paths.first().cloned().unwrap_or_default();
        return Err(ImportError::File { file, message: format!("holds none of the files this format reads ({})", wanted.join(", ")) });
    }
    Ok((kept, other))
}

/// Rows gathered from a source's tables, by shape. A shape timed more than once (the same
/// projection in two models' files, k and v projections of one layer, a repeated row) keeps the
/// median of its timings, of an even count the upper middle one; how far such timings spread is
/// said in a note.
#[derive(Default)]
pub struct Accumulator {
    /// Per shape: (milliseconds, repeats behind that figure).
    times_ms: BTreeMap<Shape, Vec<(f64, u32)>>,
    kernels: BTreeSet<String>,
    skipped: BTreeMap<String, u64>,
    pub notes: Vec<String>,
}

impl Accumulator {
    pub fn add(&mut self, shape: Shape, latency_ms: f64, kernel: &str, repeats: u32) {
        self.times_ms.entry(shape).or_default().push((latency_ms, repeats));
        self.kernels.insert(kernel.to_string());
    }

    /// Counts a row left out, by why.
    pub fn skip(&mut self, what: String) {
        self.skip_n(what, 1);
    }

    pub fn skip_n(&mut self, what: String, count: u64) {
        *self.skipped.entry(what).or_default() += count;
    }

    /// The median timing of each GEMM shape, milliseconds (to compare sources on shared shapes).
    pub fn gemm_medians_ms(&self) -> BTreeMap<Shape, f64> {
        self.times_ms
            .iter()
            .filter(|(s, _)| matches!(s, Shape::Gemm(_)))
            .map(|(s, t)| (*s, median(&t.iter().map(|p| p.0).collect::<Vec<_>>())))
            .collect()
    }

    /// Profile rows sorted by shape, the kernels named, the dtypes present, the fewest and most
    /// repeats behind one timing, and the notes.
    fn finish(mut self, peak: &Peak) -> Finished {
        for (what, count) in std::mem::take(&mut self.skipped) {
            self.notes.push(format!("left out {count} rows: {what}"));
        }
        let spreads: Vec<f64> = self
            .times_ms
            .values()
            .filter(|t| t.len() > 1)
            .map(|t| {
                let (lo, hi) = t.iter().fold((f64::MAX, 0.0f64), |(lo, hi), p| (lo.min(p.0), hi.max(p.0)));
                hi / lo - 1.0
            })
            .collect();
        if !spreads.is_empty() {
            self.notes.push(format!(
                "{} shapes timed more than once keep the median of their timings (of an even count, the upper \
                 middle one); slowest over fastest differ by median {:.1}%, p90 {:.1}%",
                spreads.len(),
                median(&spreads) * 100.0,
                percentile(&spreads, 0.9) * 100.0
            ));
        }
        let mut dtypes = BTreeSet::new();
        let (mut min_repeats, mut max_repeats) = (u32::MAX, 0);
        let rows = std::mem::take(&mut self.times_ms)
            .into_iter()
            .map(|(shape, mut times)| {
                match &shape {
                    Shape::Gemm(g) => drop(dtypes.insert(g.dtype.name().to_string())),
                    Shape::Attention(a) => drop(dtypes.insert(a.dtype.name().to_string())),
                    Shape::AllReduce(_) | Shape::AllToAll(_) | Shape::Sampling(_) => {}
                }
                times.sort_by(|a, b| a.0.total_cmp(&b.0));
                // Whole nanoseconds: the sources' sub-nanosecond digits are float noise of a
                // millisecond figure, and dropping them halves a profile's size.
                let ns = |ms: f64| (ms * 1e6).round().max(1.0);
                for &(_, r) in &times {
                    min_repeats = min_repeats.min(r);
                    max_repeats = max_repeats.max(r);
                }
                let repeats = times.iter().map(|p| p.1).sum::<u32>();
                let measurement = Measurement {
                    median_ns: ns(times[times.len() / 2].0),
                    p10_ns: ns(times[0].0),
                    p90_ns: ns(times[times.len() - 1].0),
                    repeats,
                };
                ProfileRow::new(shape, measurement, peak)
            })
            .collect();
        Finished {
            rows,
            kernels: self.kernels.into_iter().collect(),
            dtypes: dtypes.into_iter().collect(),
            repeats: (min_repeats.min(max_repeats), max_repeats),
            notes: self.notes,
        }
    }
}

struct Finished {
    rows: Vec<ProfileRow>,
    kernels: Vec<String>,
    dtypes: Vec<String>,
    repeats: (u32, u32),
    notes: Vec<String>,
}

/// What a format says of its source beyond the rows: the fields of the profile's `[source]`
/// that the rows do not give.
pub struct Source {
    pub format: &'static str,
    /// The device as the source names it (`NVIDIA H100 80GB HBM3`, `H800`).
    pub device: String,
    pub gpu: GpuSpec,
    pub engine: String,
    pub engine_version: String,
    /// Files read: their repository, commit and license come from the collection's manifest.
    pub files: Vec<PathBuf>,
    /// Files are named in the provenance relative to this; without it, by their path in the
    /// collection whose manifest names them (or as given).
    pub files_root: Option<PathBuf>,
    pub agreement: Vec<String>,
    /// Whether to compare the rows with the profile bundled for the same GPU (another source's
    /// measurements), recording the difference in `agreement` and a note.
    pub compare_bundled: bool,
    pub method: String,
}

/// The origins of `files`, merged: one repository, commit and license where they agree, each
/// distinct value joined with `; ` where they do not (vidur's attention file is from an older
/// commit than its per-layer files).
fn merged_origin(files: &[PathBuf]) -> Origin {
    let origins: Vec<Origin> = files.iter().map(|f| origin(f)).collect();
    let join = |pick: fn(&Origin) -> &String| {
        let mut seen: Vec<&str> = Vec::new();
        for o in &origins {
            if !seen.contains(&pick(o).as_str()) {
                seen.push(pick(o));
            }
        }
        seen.join("; ")
    };
    Origin { repository: join(|o| &o.repository), commit: join(|o| &o.commit), license: join(|o| &o.license) }
}

/// The profile of `acc`'s rows, with its provenance; refused where a row is not physical
/// ([`super::physics`]), naming it and the files read.
pub fn assemble(acc: Accumulator, source: Source) -> Result<Imported, ImportError> {
    let gpu = &source.gpu;
    let peak = Peak { flops_per_s: gpu.peak_flops_16bit, memory_bytes_per_s: gpu.memory_bandwidth_bytes_per_s };
    let origin = merged_origin(&source.files);
    let mut acc = acc;
    for file in &source.files {
        if !super::source::origin(file).is_known() {
            acc.notes.push(format!("{}: no MANIFEST.tsv or installed wheel names it; the profile's source is marked unknown", file.display()));
        }
    }
    let name = |f: &PathBuf| match source.files_root.as_deref().and_then(|root| f.strip_prefix(root).ok()) {
        Some(relative) => relative.to_string_lossy().replace('\\', "/"),
        None => collection_path(f).unwrap_or_else(|| f.to_string_lossy().replace('\\', "/")),
    };
    let files = source.files.iter().map(name).collect();
    let mut done = acc.finish(&peak);
    let unusual = super::physics::check(&done.rows, gpu).map_err(|message| ImportError::File {
        file: source.files_root.clone().or_else(|| source.files.first().cloned()).unwrap_or_default(),
        message: format!("{message} (measured on {}; refused: a corrupt or mislabelled table)", gpu.name),
    })?;
    done.notes.extend(unusual);
    let mut agreement = source.agreement;
    if source.compare_bundled
        && let Some(bundled) = crate::calibrate::bundled::for_gpu(gpu)
    {
        let against = super::compare::against(&done.rows, &bundled.index);
        for line in against.lines(&format!("the bundled {} (aiconfigurator) against these rows", bundled.name)) {
            done.notes.push(format!("sources differ: {line}"));
            agreement.push(line);
        }
    }
    let measured = done.rows.len() as u64;
    let provenance = Provenance {
        servesim_version: env!("CARGO_PKG_VERSION").to_string(),
        date: crate::calibrate::profile::now_rfc3339(),
        device: DeviceProvenance { device: "imported".into(), name: source.device, ..DeviceProvenance::default() },
        peak: PeakProvenance::from(peak),
        kernels: Vec::new(),
        grid: GridProvenance { scale: "imported".into(), dtypes: done.dtypes.clone(), ..GridProvenance::default() },
        timing: TimingProvenance { min_repeats: done.repeats.0, max_repeats: done.repeats.1, ..TimingProvenance::default() },
        run: RunSummary { shapes_in_grid: measured, measured, passes: 1, ..RunSummary::default() },
        source: Some(SourceProvenance {
            format: source.format.into(),
            repository: origin.repository,
            commit: origin.commit,
            license: origin.license,
            gpu: gpu.name.clone(),
            engine: source.engine,
            engine_version: source.engine_version,
            kernels: done.kernels,
            dtypes: done.dtypes,
            files,
            agreement,
            method: source.method,
        }),
    };
    Ok(Imported { profile: Profile { rows: done.rows, provenance }, notes: done.notes, families: None })
}
