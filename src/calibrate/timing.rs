//! Timing policy: warm-up runs, then repeats until the median is stable or a cap is reached.
//!
//! ```text
//!  warm-up × W ──► [flush cache ─► run once ─► record] × n ──► median, p10, p90, n   (flush)
//!                  [replay R times in one graph ─► record total / R] × n             (graph)
//!                   stop when  n ≥ min_repeats and the running median moved less than
//!                              stable_rel over each of the last stable_window repeats,
//!                         or   n = max_repeats,
//!                         or   the time spent on this shape reached max_time (n ≥ 1).
//! ```
//!
//! The backend reports each run's duration (CUDA events on a GPU, a monotonic clock on a CPU);
//! the wall clock here only bounds how long a shape is measured. Percentiles are numpy's default
//! (linear interpolation between closest ranks), as everywhere in servesim.

use std::time::{Duration, Instant};

pub use super::backend::TimingMethod;
use super::backend::{DeviceError, PreparedOp};

/// Replays per repeat of [`TimingMethod::Graph`], at most: enough that a microsecond kernel's
/// graph launch overhead (a few µs, paid once per replay) is a few percent of the time divided.
pub const GRAPH_REPLAYS: u32 = 20;

/// Work one graph repeat aims at: an op that takes longer is replayed fewer times (down to once),
/// since its launch gap is already negligible and repeats of a millisecond GEMM would spend the
/// budget for nothing.
pub const GRAPH_REPEAT_NS: f64 = 100_000.0;

/// How one shape is measured.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TimingOptions {
    /// Untimed runs first (caches, clocks, lazy initialisation).
    pub warmup: u32,
    /// Timed repeats made before stability is judged (unless `max_time` runs out first).
    pub min_repeats: u32,
    /// Timed repeats at most.
    pub max_repeats: u32,
    /// Wall time spent on one shape at most, warm-up and cache flushes included. At least one
    /// timed repeat is always made.
    pub max_time: Duration,
    /// The running median is stable when each of its last `stable_window` changes was below
    /// `stable_rel` (relative).
    pub stable_window: u32,
    pub stable_rel: f64,
    /// Call [`PreparedOp::flush_cache`] before every timed repeat ([`TimingMethod::Flush`] only).
    pub flush_cache: bool,
    pub method: TimingMethod,
    /// Runs per repeat under [`TimingMethod::Graph`].
    pub replays: u32,
}

impl Default for TimingOptions {
    /// For GPUs: enough repeats for a stable median of microsecond kernels, bounded at 1 s per
    /// shape.
    fn default() -> Self {
        TimingOptions {
            warmup: 3,
            min_repeats: 7,
            max_repeats: 100,
            max_time: Duration::from_secs(1),
            stable_window: 3,
            stable_rel: 0.01,
            flush_cache: true,
            method: TimingMethod::Flush,
            replays: GRAPH_REPLAYS,
        }
    }
}

impl TimingOptions {
    /// The same policy with repeats timed by `method`.
    pub fn with_method(self, method: TimingMethod) -> TimingOptions {
        TimingOptions { method, ..self }
    }

    /// For CPUs and quick runs: fewer repeats and at most 0.3 s per shape.
    pub fn quick() -> TimingOptions {
        TimingOptions {
            warmup: 1,
            min_repeats: 5,
            max_repeats: 25,
            max_time: Duration::from_millis(300),
            stable_window: 3,
            stable_rel: 0.01,
            flush_cache: true,
            method: TimingMethod::Flush,
            replays: GRAPH_REPLAYS,
        }
    }
}

/// Statistics of one shape's timed repeats, nanoseconds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Measurement {
    pub median_ns: f64,
    pub p10_ns: f64,
    pub p90_ns: f64,
    pub repeats: u32,
}

impl Measurement {
    /// Statistics of `samples_ns` (non-empty).
    pub fn from_samples(samples_ns: &[f64]) -> Measurement {
        let mut sorted = samples_ns.to_vec();
        sorted.sort_by(f64::total_cmp);
        Measurement {
            median_ns: percentile_sorted(&sorted, 50.0),
            p10_ns: percentile_sorted(&sorted, 10.0),
            p90_ns: percentile_sorted(&sorted, 90.0),
            repeats: sorted.len() as u32,
        }
    }

    /// Statistics of a shape measured in several passes, each a non-empty list of repeats: the
    /// median is the median of the passes' medians, so one pass disturbed throughout (another
    /// process busy for a few seconds) drops out of it instead of shifting it; p10, p90 and the
    /// repeats count every repeat. One pass gives exactly [`Measurement::from_samples`].
    pub fn from_passes(passes: &[Vec<f64>]) -> Measurement {
        let all: Vec<f64> = passes.iter().flatten().copied().collect();
        let pooled = Measurement::from_samples(&all);
        if passes.len() < 2 {
            return pooled;
        }
        let mut medians: Vec<f64> = passes.iter().map(|p| Measurement::from_samples(p).median_ns).collect();
        medians.sort_by(f64::total_cmp);
        Measurement { median_ns: percentile_sorted(&medians, 50.0), ..pooled }
    }
}

/// numpy's default percentile (linear interpolation between closest ranks) of sorted values.
pub fn percentile_sorted(sorted: &[f64], q: f64) -> f64 {
    match sorted.len() {
        0 => f64::NAN,
        1 => sorted[0],
        n => {
            let rank = q / 100.0 * (n - 1) as f64;
            let lo = rank.floor() as usize;
            let hi = (lo + 1).min(n - 1);
            let frac = rank - lo as f64;
            sorted[lo] + (sorted[hi] - sorted[lo]) * frac
        }
    }
}

/// Measures `op` under `options`.
pub fn measure(op: &mut dyn PreparedOp, options: &TimingOptions) -> Result<Measurement, DeviceError> {
    measure_samples(op, options).map(|samples| Measurement::from_samples(&samples))
}

/// The timed repeats [`measure`] makes, nanoseconds each, in order (at least one).
pub fn measure_samples(op: &mut dyn PreparedOp, options: &TimingOptions) -> Result<Vec<f64>, DeviceError> {
    let start = Instant::now();
    let out_of_time = || start.elapsed() >= options.max_time;
    let mut options = *options;
    if options.method == TimingMethod::Graph {
        // One plain run sizes the replays (it warms up as well).
        let once = op.run_once()?;
        let fit = if once > 0.0 { (GRAPH_REPEAT_NS / once).ceil() } else { f64::INFINITY };
        options.replays = options.replays.max(1).min(fit.min(f64::from(u32::MAX)) as u32).max(1);
        options.warmup = options.warmup.saturating_sub(1);
    }
    let options = &options;

    for _ in 0..options.warmup {
        run_repeat(op, options)?;
        if out_of_time() {
            break;
        }
    }

    let max_repeats = options.max_repeats.max(1) as usize;
    let mut samples: Vec<f64> = Vec::with_capacity(max_repeats.min(1024));
    let mut scratch: Vec<f64> = Vec::with_capacity(samples.capacity());
    let mut medians: Vec<f64> = Vec::new();
    loop {
        if options.flush_cache && options.method == TimingMethod::Flush {
            op.flush_cache()?;
        }
        let ns = run_repeat(op, options)?;
        if !(ns.is_finite() && ns >= 0.0) {
            return Err(DeviceError::Failed(format!("backend reported a duration of {ns} ns")));
        }
        samples.push(ns);
        if samples.len() >= max_repeats || out_of_time() {
            break;
        }
        if samples.len() >= options.min_repeats as usize {
            scratch.clear();
            scratch.extend_from_slice(&samples);
            scratch.sort_by(f64::total_cmp);
            medians.push(percentile_sorted(&scratch, 50.0));
            if is_stable(&medians, options.stable_window as usize, options.stable_rel) {
                break;
            }
        }
    }
    Ok(samples)
}

/// One timed repeat of `op` by the method of `options`, nanoseconds per run.
fn run_repeat(op: &mut dyn PreparedOp, options: &TimingOptions) -> Result<f64, DeviceError> {
    match options.method {
        TimingMethod::Flush => op.run_once(),
        TimingMethod::Graph => op.run_replayed(options.replays.max(1)),
    }
}

/// Whether each of the last `window` changes of the running median was below `rel` (relative).
fn is_stable(medians: &[f64], window: usize, rel: f64) -> bool {
    let window = window.max(1);
    if medians.len() < window + 1 {
        return false;
    }
    medians[medians.len() - window - 1..].windows(2).all(|w| {
        let (a, b) = (w[0], w[1]);
        let scale = a.abs().max(b.abs());
        scale == 0.0 || (b - a).abs() <= rel * scale
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Returns `times` in turn (cycling); counts runs and flushes.
    struct Scripted {
        times: Vec<f64>,
        runs: usize,
        flushes: usize,
    }

    impl PreparedOp for Scripted {
        fn run_once(&mut self) -> Result<f64, DeviceError> {
            let t = self.times[self.runs % self.times.len()];
            self.runs += 1;
            Ok(t)
        }
        fn flush_cache(&mut self) -> Result<(), DeviceError> {
            self.flushes += 1;
            Ok(())
        }
    }

    #[test]
    fn constant_kernel_stops_at_min_repeats_plus_window() {
        let mut op = Scripted { times: vec![1000.0], runs: 0, flushes: 0 };
        let options = TimingOptions { max_time: Duration::from_secs(60), ..TimingOptions::default() };
        let m = measure(&mut op, &options).unwrap();
        // Medians are judged from repeat 7 on; stable once 3 changes (4 medians) are in.
        assert_eq!(m.repeats, 7 + 3);
        assert_eq!(op.runs, 3 + 10);
        assert_eq!(op.flushes, 10);
        assert_eq!((m.median_ns, m.p10_ns, m.p90_ns), (1000.0, 1000.0, 1000.0));
    }

    #[test]
    fn noisy_kernel_runs_to_the_cap() {
        // Alternating 1 and 100: the running median jumps with every repeat.
        let mut op = Scripted { times: vec![1.0, 100.0], runs: 0, flushes: 0 };
        let options =
            TimingOptions { warmup: 0, max_repeats: 20, max_time: Duration::from_secs(60), ..TimingOptions::default() };
        let m = measure(&mut op, &options).unwrap();
        assert_eq!(m.repeats, 20);
        assert_eq!(m.median_ns, 50.5);
        assert_eq!(m.p10_ns, 1.0);
        assert_eq!(m.p90_ns, 100.0);
    }

    #[test]
    fn time_cap_wins_but_one_repeat_is_made() {
        struct Slow;
        impl PreparedOp for Slow {
            fn run_once(&mut self) -> Result<f64, DeviceError> {
                std::thread::sleep(Duration::from_millis(5));
                Ok(5e6)
            }
        }
        let options = TimingOptions { max_time: Duration::from_millis(1), ..TimingOptions::default() };
        let m = measure(&mut Slow, &options).unwrap();
        assert_eq!(m.repeats, 1);
        assert_eq!(m.median_ns, 5e6);
    }

    #[test]
    fn passes_combine_by_the_median_of_their_medians() {
        let one = vec![3.0, 1.0, 2.0];
        assert_eq!(Measurement::from_passes(std::slice::from_ref(&one)), Measurement::from_samples(&one));
        // A pass that ran slow throughout does not move the median; it widens p90.
        let passes = vec![vec![10.0, 11.0, 12.0], vec![30.0, 31.0, 32.0], vec![11.0, 12.0, 13.0]];
        let m = Measurement::from_passes(&passes);
        assert_eq!(m.median_ns, 12.0);
        assert_eq!(m.repeats, 9);
        assert_eq!(m.p10_ns, Measurement::from_samples(&passes.concat()).p10_ns);
        assert!(m.p90_ns > 30.0, "{m:?}");
    }

    #[test]
    fn numpy_percentiles() {
        let v = [1.0, 2.0, 3.0, 4.0];
        assert_eq!(percentile_sorted(&v, 50.0), 2.5);
        assert!((percentile_sorted(&v, 10.0) - 1.3).abs() < 1e-12);
        assert!((percentile_sorted(&v, 90.0) - 3.7).abs() < 1e-12);
    }

    #[test]
    fn the_graph_method_replays_without_flushing() {
        let mut op = Scripted { times: vec![1000.0], runs: 0, flushes: 0 };
        let options = TimingOptions { max_time: Duration::from_secs(60), ..TimingOptions::default() }.with_method(TimingMethod::Graph);
        let m = measure(&mut op, &options).unwrap();
        // The same repeats as the flush method, each GRAPH_REPLAYS runs long, none flushed, after
        // one plain run that sized them (a 1 µs op is replayed the most, 20 times); the default
        // replay reports the mean run.
        assert_eq!(m.repeats, 7 + 3);
        assert_eq!(op.runs, 1 + (2 + 10) * GRAPH_REPLAYS as usize);
        assert_eq!(op.flushes, 0);
        assert_eq!(m.median_ns, 1000.0);
        // A 1 ms op fills a repeat alone: replayed once.
        let mut slow = Scripted { times: vec![1e6], runs: 0, flushes: 0 };
        measure(&mut slow, &options).unwrap();
        assert_eq!(slow.runs, 1 + 2 + 10);
        for method in TimingMethod::ALL {
            assert_eq!(TimingMethod::parse(method.name()), Some(method));
        }
        assert_eq!(TimingMethod::parse("events"), None);
        assert_eq!(TimingOptions::default().method, TimingMethod::Flush);
    }

    #[test]
    fn bad_duration_is_an_error() {
        let mut op = Scripted { times: vec![f64::NAN], runs: 0, flushes: 0 };
        assert!(matches!(measure(&mut op, &TimingOptions::quick()), Err(DeviceError::Failed(_))));
    }
}
