//! `servesim report`: charts (PNG and SVG) and one self-contained `index.html` from the
//! directories that `simulate --out` writes.
//!
//! ```text
//!  RUN_DIR/{summary.json, requests.csv,       input: parse, errors name file and line
//!           timeline.csv, itl.csv}  ───────►  RunData { points: [PointData] }
//!  --recorded FILE ─► recorded::parse_file ─►     │  blocks matched to sweep points in order
//!                                                 ▼
//!                                   figures: Chart descriptions (pure data)
//!                                                 │
//!                         chart: one plotters draw fn ──► <name>.png, <name>.svg
//!                                                 │
//!                                   html: tables + PNGs inlined as data: URIs ──► index.html
//! ```
//!
//! Everything is deterministic: no clock, no map iteration order, a bundled font, and PNGs
//! encoded without timestamps, so the same inputs give byte-identical files.

pub mod chart;
pub mod figures;
pub mod html;
pub mod input;

use std::path::{Path, PathBuf};

use crate::Error;
use crate::metrics::recorded::{RecordedBlock, parse_file};
use crate::metrics::samples::numpy_percentile;
use chart::Chart;

pub use input::{PointData, RunData, read_run};

/// A validated `servesim report` invocation.
#[derive(Clone, Debug)]
pub struct ReportConfig {
    /// Directories written by `simulate --out`, one series each.
    pub runs: Vec<PathBuf>,
    /// Output directory (created).
    pub out: PathBuf,
    /// Recorded results to overlay: its blocks are matched, in order, to the sweep points of the
    /// run directories in order.
    pub recorded: Option<PathBuf>,
}

/// Everything a report is made of, once read.
#[derive(Clone, Debug)]
pub struct ReportData {
    pub runs: Vec<RunData>,
    /// Per run, per sweep point: its recorded block, if `--recorded` was given and has one.
    pub recorded: Vec<Vec<Option<RecordedBlock>>>,
    /// The recorded file and how many blocks it had (for the notes).
    pub recorded_file: Option<(PathBuf, usize)>,
}

/// Reads every input of `config`.
pub fn read(config: &ReportConfig) -> Result<ReportData, Error> {
    let runs = config.runs.iter().map(|dir| read_run(dir)).collect::<Result<Vec<_>, _>>()?;
    let mut recorded: Vec<Vec<Option<RecordedBlock>>> = runs.iter().map(|r| vec![None; r.points.len()]).collect();
    let mut recorded_file = None;
    if let Some(path) = &config.recorded {
        let blocks = parse_file(path).map_err(|e| Error::Report(e.to_string()))?;
        recorded_file = Some((path.clone(), blocks.len()));
        let mut blocks = blocks.into_iter();
        for slot in recorded.iter_mut().flatten() {
            *slot = blocks.next();
        }
    }
    Ok(ReportData { runs, recorded, recorded_file })
}

/// Reads the inputs, draws every chart and writes them with `index.html` into `config.out`.
/// Returns the files written, in order.
pub fn generate(config: &ReportConfig) -> Result<Vec<PathBuf>, Error> {
    let data = read(config)?;
    let charts = figures::all(&data);
    let out = &config.out;
    std::fs::create_dir_all(out).map_err(|source| Error::Output { path: out.clone(), source })?;
    let (mut written, rendered) = write_charts(out, &charts)?;
    let page = html::page(&data, &rendered);
    let path = out.join("index.html");
    write(&path, page.as_bytes())?;
    written.push(path);
    Ok(written)
}

/// Writes each chart as `<file>.png` and `<file>.svg` into `out` (which must exist). Returns the
/// paths written, and each chart with its PNG bytes for inlining in a page.
pub fn write_charts<'a>(out: &Path, charts: &'a [Chart]) -> Result<(Vec<PathBuf>, Vec<(&'a Chart, Vec<u8>)>), Error> {
    let mut written = Vec::new();
    let mut rendered = Vec::new();
    for chart in charts {
        let render_err = |path: &Path, msg: String| Error::Output { path: path.to_path_buf(), source: std::io::Error::other(msg) };
        let png_path = out.join(format!("{}.png", chart.file));
        let png = chart::render_png(chart).map_err(|m| render_err(&png_path, m))?;
        write(&png_path, &png)?;
        let svg_path = out.join(format!("{}.svg", chart.file));
        let svg = chart::render_svg(chart).map_err(|m| render_err(&svg_path, m))?;
        write(&svg_path, svg.as_bytes())?;
        written.push(png_path);
        written.push(svg_path);
        rendered.push((chart, png));
    }
    Ok((written, rendered))
}

fn write(path: &Path, bytes: &[u8]) -> Result<(), Error> {
    std::fs::write(path, bytes).map_err(|source| Error::Output { path: path.to_path_buf(), source })
}

/// Per-request latency samples of one sweep point, sorted, in ms (vLLM's definitions, from
/// `requests.csv`; successful requests only), plus the ITL runs.
#[derive(Clone, Debug, Default)]
pub struct Latencies {
    pub ttft_ms: Vec<f64>,
    /// Requests with more than one output token.
    pub tpot_ms: Vec<f64>,
    pub e2el_ms: Vec<f64>,
    /// `(value_ms, cumulative count)` ascending.
    pub itl_ms: Vec<(f64, u64)>,
}

impl Latencies {
    pub fn of(point: &PointData) -> Latencies {
        let mut l = Latencies::default();
        for r in point.requests.iter().filter(|r| r.success) {
            if r.first_token_ns.is_none() {
                continue;
            }
            l.ttft_ms.push(r.ttft_ns() as f64 / 1e6);
            l.e2el_ms.push(r.e2el_ns() as f64 / 1e6);
            if let Some(tpot_ns) = r.tpot_ns() {
                l.tpot_ms.push(tpot_ns / 1e6);
            }
        }
        for v in [&mut l.ttft_ms, &mut l.tpot_ms, &mut l.e2el_ms] {
            v.sort_by(f64::total_cmp);
        }
        let mut end = 0;
        for &(value_ns, count) in &point.itl_runs {
            end += count;
            l.itl_ms.push((value_ns as f64 / 1e6, end));
        }
        l
    }
}

/// Mean and numpy-linear percentile of a sorted sample; `None` when empty.
pub fn mean_and_percentile(sorted: &[f64], p: f64) -> Option<(f64, f64)> {
    if sorted.is_empty() {
        return None;
    }
    let mean = sorted.iter().sum::<f64>() / sorted.len() as f64;
    Some((mean, numpy_percentile(sorted.len() as u64, p, |k| sorted[k as usize])))
}

/// Mean and numpy-linear percentile of `(value, cumulative count)` runs; `None` when empty.
pub fn runs_mean_and_percentile(runs: &[(f64, u64)], p: f64) -> Option<(f64, f64)> {
    let n = runs.last()?.1;
    if n == 0 {
        return None;
    }
    let mut sum = 0.0;
    let mut start = 0;
    for &(v, end) in runs {
        sum += v * (end - start) as f64;
        start = end;
    }
    let nth = |k: u64| runs[runs.partition_point(|&(_, end)| end <= k).min(runs.len() - 1)].0;
    Some((sum / n as f64, numpy_percentile(n, p, nth)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_follow_numpy() {
        let v = [1.0, 2.0, 3.0, 4.0];
        assert_eq!(mean_and_percentile(&v, 50.0), Some((2.5, 2.5)));
        // numpy.percentile([1,2,3,4], 99) = 3.97
        let (_, p99) = mean_and_percentile(&v, 99.0).unwrap();
        assert!((p99 - 3.97).abs() < 1e-12);
        // The same multiset as runs: 1, 2, 3, 4 with cumulative counts.
        let runs = [(1.0, 1), (2.0, 2), (3.0, 3), (4.0, 4)];
        assert_eq!(runs_mean_and_percentile(&runs, 99.0), mean_and_percentile(&v, 99.0));
        assert_eq!(runs_mean_and_percentile(&[(5.0, 3)], 50.0), Some((5.0, 5.0)));
        assert_eq!(mean_and_percentile(&[], 50.0), None);
    }
}
