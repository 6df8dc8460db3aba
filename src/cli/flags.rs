//! Flag values that several subcommands parse alike, each with its one error message.

use std::fmt::Display;
use std::path::Path;

use crate::Error;
use crate::calibrate::profile::Profile;
use crate::metrics::LatencyMetric;
use crate::metrics::format::ReportLayout;

/// The usage error every bad flag value becomes: exit code 2, naming the flag and the value.
pub(super) fn usage(flag: &'static str, value: impl Display, reason: impl Into<String>) -> Error {
    Error::Usage { flag, value: value.to_string(), reason: reason.into() }
}

/// An output directory, made now (with its parents) so that a path that cannot be written is
/// refused before the work, not after it.
pub(super) fn output_dir(flag: &'static str, dir: &Path) -> Result<(), Error> {
    std::fs::create_dir_all(dir).map_err(|e| usage(flag, dir.display(), format!("cannot create this directory: {e}")))
}

/// An output file's folder, made now, and the file's own path not a directory: a file that
/// cannot be written is refused before the work. The file itself is written at the end.
pub(super) fn output_file(flag: &'static str, file: &Path) -> Result<(), Error> {
    if file.is_dir() {
        return Err(usage(flag, file.display(), "is a directory; give a file's path"));
    }
    match file.parent().filter(|p| !p.as_os_str().is_empty()) {
        Some(dir) => std::fs::create_dir_all(dir).map_err(|e| usage(flag, file.display(), format!("cannot create its directory: {e}"))),
        None => Ok(()),
    }
}

pub(super) fn comma_list(text: &str) -> Vec<String> {
    text.split(',').map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).collect()
}

/// A comma-separated list of whole numbers ≥ 1 (concurrencies, prompt counts, TP degrees).
pub(super) fn positive_integers(flag: &'static str, text: &str) -> Result<Vec<u32>, Error> {
    text.split(',')
        .map(|n| n.trim().parse::<u32>().ok().filter(|&n| n > 0))
        .collect::<Option<_>>()
        .ok_or_else(|| usage(flag, text, "expected positive integers, comma-separated"))
}

/// Whose client's report a run prints: vLLM's `benchmark_serving.py` (whose version
/// `--report-layout` picks) or SGLang's `bench_serving` (`crate::metrics::sglang`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum ReportFormat {
    Vllm,
    Sglang,
}

/// `--report-format`: `vllm` or `sglang`.
pub(super) fn report_format(text: &str) -> Result<ReportFormat, Error> {
    match text {
        "vllm" => Ok(ReportFormat::Vllm),
        "sglang" => Ok(ReportFormat::Sglang),
        _ => Err(usage("--report-format", text, "expected `vllm` or `sglang`")),
    }
}

/// The percentiles and metrics asked for, with those SGLang's report needs: P95, P99 and the
/// maximum, and the E2E latency (its record holds every metric), so that a `--save-result` or
/// `summary.json` beside it holds the same numbers.
pub(super) fn with_sglang_needs(mut percentiles: Vec<f64>, mut metrics: Vec<LatencyMetric>) -> (Vec<f64>, Vec<LatencyMetric>) {
    percentiles.extend(crate::metrics::sglang::PERCENTILES);
    percentiles.sort_by(f64::total_cmp);
    percentiles.dedup();
    for metric in LatencyMetric::ALL {
        if !metrics.contains(&metric) {
            metrics.push(metric);
        }
    }
    (percentiles, metrics)
}

pub(super) fn report_layout(text: &str) -> Result<ReportLayout, Error> {
    ReportLayout::parse(text).ok_or_else(|| usage("--report-layout", text, "expected `current` or `legacy`"))
}

/// `--metric-percentiles`, as vLLM's flag: numbers strictly between 0 and 100.
pub(super) fn percentiles(text: &str) -> Result<Vec<f64>, Error> {
    let bad = |reason: &str| usage("--metric-percentiles", text, reason);
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

/// `--percentile-metrics`, as vLLM's flag.
pub(super) fn percentile_metrics(text: &str) -> Result<Vec<LatencyMetric>, Error> {
    text.split(',')
        .map(|item| {
            LatencyMetric::parse(item.trim()).ok_or_else(|| {
                usage(
                    "--percentile-metrics",
                    text,
                    format!("unknown metric {:?}; expected ttft, tpot, itl or e2el", item.trim()),
                )
            })
        })
        .collect()
}

/// A calibration profile named by `--profile`.
pub(super) fn profile(path: &Path) -> Result<Profile, Error> {
    Profile::read(path).map_err(|e| usage("--profile", path.display(), e.to_string()))
}

/// `cpu` → `None`, `cuda:N` → `Some(N)`.
pub(super) fn device(text: &str) -> Result<Option<usize>, Error> {
    match text {
        "cpu" => Ok(None),
        other => match other.strip_prefix("cuda:").and_then(|n| n.parse::<usize>().ok()) {
            Some(ordinal) => Ok(Some(ordinal)),
            None => Err(usage("--device", text, "expected `cpu` or `cuda:N`")),
        },
    }
}

/// Every core, when `--threads` is not given.
pub(super) fn all_cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// The most threads `--threads` may ask for: far past any machine's cores, and short of the
/// thread limits that made `--threads 100000` fail with EAGAIN after minutes of work.
pub(super) const THREADS_MAX: usize = 1024;

/// `--threads`: the value given, else every core; 0 and more than [`THREADS_MAX`] are refused.
pub(super) fn threads(value: Option<usize>) -> Result<usize, Error> {
    let threads = value.unwrap_or_else(all_cores);
    if threads == 0 {
        return Err(usage("--threads", 0, "must be at least 1"));
    }
    if threads > THREADS_MAX {
        return Err(usage("--threads", threads, format!("at most {THREADS_MAX} (this machine has {} cores)", all_cores())));
    }
    Ok(threads)
}
