//! Is the machine quiet enough to calibrate? One reference kernel is timed before the first
//! pass and after every pass; if its medians disagree by more than [`NOISE_THRESHOLD`], other
//! work on the machine moved the kernels' times during the run, and the profile carries that.
//!
//! ```text
//!  reference  before ─ pass 1 ─ after 1 ─ pass 2 ─ after 2 ─ …      medians t₀, t₁, …
//!  spread     (max t − min t) / min t   > 10%  ─► WARNING naming the fastest and slowest
//! ```
//!
//! Warn, not refuse: the profile is still written (with the timings in its provenance's
//! `[run.reference]`), because a refusal would throw away minutes of measurements that may be
//! mostly sound (each shape's median over three passes drops one disturbed pass), the reference
//! cannot say which shapes a burst of load hit, and a user may have no quieter machine. The
//! warning says how far apart the timings were, so the user can judge the profile's errors.

use serde::{Deserialize, Serialize};

use super::backend::{Backend, DeviceError, GemmShape};
use super::timing::{Measurement, TimingOptions, measure_samples};
use crate::scenario::model::Dtype;

/// Relative spread of the reference kernel's medians above which a run is called noisy: the
/// cost model's own accuracy target (10% on TPOT and throughput, `validate --engine`). A machine
/// whose reference kernel moved by more cannot show whether a profile meets it.
pub const NOISE_THRESHOLD: f64 = 0.10;

/// The reference kernel: a compute-bound GEMM of about 0.5 GFLOP, a few milliseconds on two CPU
/// cores and microseconds on a GPU, in the grid's dtype.
pub fn reference_shape(dtype: Dtype) -> GemmShape {
    GemmShape { m: 256, n: 1024, k: 1024, dtype }
}

/// The reference kernel's timings over a run, for the provenance.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ReferenceTimings {
    /// What was timed, e.g. `gemm 256×1024×1024 f32`.
    pub kernel: String,
    /// Median of each timing, nanoseconds: before the first pass, then after each pass.
    pub median_ns: Vec<f64>,
    /// `(slowest − fastest) / fastest` of `median_ns`.
    pub spread: f64,
    pub threshold: f64,
    /// `spread > threshold`.
    pub noisy: bool,
}

impl ReferenceTimings {
    /// Judges `median_ns` (at least one positive, finite value each) against `threshold`.
    pub fn judge(kernel: String, median_ns: Vec<f64>, threshold: f64) -> ReferenceTimings {
        let (fastest, slowest) = extremes(&median_ns);
        let spread = if fastest > 0.0 && fastest.is_finite() && slowest.is_finite() { slowest / fastest - 1.0 } else { 0.0 };
        ReferenceTimings { kernel, median_ns, spread, threshold, noisy: spread > threshold }
    }

    /// The loud warning for a noisy run, naming the fastest and slowest timings and when they
    /// were taken; `None` for a quiet one.
    pub fn warning(&self) -> Option<String> {
        if !self.noisy {
            return None;
        }
        let (fastest, slowest) = extremes(&self.median_ns);
        let when = |value: f64| self.median_ns.iter().position(|&t| t == value).map_or_else(String::new, checkpoint);
        Some(format!(
            "WARNING: this machine was too noisy to calibrate: the reference kernel ({}) took {} {} and {} {}, \
             {:.0}% apart (more than {:.0}%). Other work on the machine moved the kernels' times; the profile's \
             timings may be off by as much. Calibrate again on an idle machine.",
            self.kernel,
            format_ns(fastest),
            when(fastest),
            format_ns(slowest),
            when(slowest),
            self.spread * 100.0,
            self.threshold * 100.0
        ))
    }
}

/// When timing `i` was taken: before the run, or after pass `i`.
fn checkpoint(i: usize) -> String {
    if i == 0 { "before the run".to_string() } else { format!("after pass {i}") }
}

fn extremes(values: &[f64]) -> (f64, f64) {
    values.iter().fold((f64::INFINITY, 0.0f64), |(lo, hi), &v| (lo.min(v), hi.max(v)))
}

/// `5.12 ms`, `830 µs`, `1.20 s`.
fn format_ns(ns: f64) -> String {
    match ns {
        x if x >= 1e9 => format!("{:.2} s", x / 1e9),
        x if x >= 1e6 => format!("{:.2} ms", x / 1e6),
        x => format!("{:.0} µs", x / 1e3),
    }
}

/// Times the reference kernel once (its median under `timing`), in the first of `dtypes` the
/// backend runs. `Ok(None)`: the backend runs none of them.
pub fn time_reference(
    backend: &mut dyn Backend,
    dtypes: &[Dtype],
    timing: &TimingOptions,
) -> Result<Option<(GemmShape, f64)>, DeviceError> {
    let Some(&dtype) = dtypes.iter().find(|&&d| backend.supports(d)) else { return Ok(None) };
    let shape = reference_shape(dtype);
    let mut op = backend.prepare_gemm(&shape)?;
    let samples = measure_samples(op.as_mut(), timing)?;
    Ok(Some((shape, Measurement::from_samples(&samples).median_ns)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn judge(medians: &[f64]) -> ReferenceTimings {
        ReferenceTimings::judge("gemm 256×1024×1024 f32".into(), medians.to_vec(), NOISE_THRESHOLD)
    }

    #[test]
    fn timings_within_the_threshold_are_quiet() {
        let r = judge(&[5.0e6, 5.2e6, 5.1e6, 5.4e6]);
        assert!(!r.noisy && (r.spread - 0.08).abs() < 1e-12, "{r:?}");
        assert_eq!(r.warning(), None);
        // Just within the threshold is quiet; so is one timing.
        assert!(!judge(&[1.0e6, 1.099e6]).noisy);
        assert_eq!(judge(&[3.0e6]).spread, 0.0);
    }

    #[test]
    fn timings_apart_beyond_the_threshold_warn_naming_both() {
        let r = judge(&[5.0e6, 5.1e6, 6.5e6, 5.2e6]);
        assert!(r.noisy && (r.spread - 0.3).abs() < 1e-12, "{r:?}");
        let w = r.warning().expect("a warning");
        assert!(w.starts_with("WARNING: this machine was too noisy to calibrate"), "{w}");
        assert!(w.contains("took 5.00 ms before the run and 6.50 ms after pass 2, 30% apart (more than 10%)"), "{w}");
        // Slower at the start than at the end counts the same.
        let w = judge(&[900e3, 600e3]).warning().expect("a warning");
        assert!(w.contains("took 600 µs after pass 1 and 900 µs before the run, 50% apart"), "{w}");
    }

    #[test]
    fn degenerate_timings_are_not_called_noisy() {
        assert!(!judge(&[]).noisy);
        assert!(!judge(&[0.0, 5.0]).noisy);
        assert!(!judge(&[f64::NAN, 5.0]).warning().is_some_and(|w| w.contains("NaN")));
    }
}
