//! A calibration run: every shape of a [`Grid`] through a [`Backend`], timed by
//! [`measure`], into a [`Profile`].
//!
//! Shapes run coarse to fine with the op kinds interleaved ([`Grid::shapes_in_run_order`]), so
//! a run cut short by its budget still spans every sweep of every kind. Shapes the backend cannot
//! run are skipped and counted (the first few reasons kept: a shape over the CPU's memory cap
//! says what it needs); a shape that fails (e.g. out of memory) is skipped, counted and its
//! reason kept; "device unavailable" ends the run with an error. With `noise_check`, a reference
//! kernel is timed before and after every pass ([`super::noise`]). With a [`Focus`], the shapes of
//! the workload it names run first in every pass. After the passes, shapes that break
//! monotonicity or whose passes disagree are timed again, a bounded number of times
//! ([`super::consistency`]).

use std::time::{Duration, Instant, SystemTime};

use super::backend::{
    AllReduceShape, AttentionShape, Backend, DeviceError, DeviceInfo, GemmShape, Peak, PreparedOp, SamplingMethod,
    SamplingShape,
};
use super::consistency::{Retimed, retime};
use super::focus::Focus;
use super::grid::{Grid, OpKind, Shape, Work, attention_work, gemm_work};
use super::noise::{NOISE_THRESHOLD, ReferenceTimings, time_reference};
use super::profile::{KernelHash, Profile, ProfileRow, Provenance, RunSummary, rfc3339_utc};
use super::progress::Progress;
use super::timing::{Measurement, TimingOptions, measure_samples};
use super::profile::{LeaveOneOut, leave_one_out};
use crate::scenario::model::Dtype;

/// Failure reasons (and reasons a shape could not run) kept in the provenance, at most.
const FAILURES_KEPT: usize = 10;

/// How a calibration run behaves. The default: no budget, no progress, GPU timing
/// ([`TimingOptions::default`]), one pass, no noise check.
#[derive(Clone, Debug, PartialEq)]
pub struct RunOptions {
    /// Stop starting new shapes once this much wall time has passed; what was measured is kept.
    pub budget: Option<Duration>,
    /// Stop starting new shapes once this many have been timed, over all passes: a cut that
    /// lands on the same shape on every machine, however busy or fast. With a budget, whichever
    /// comes first.
    pub shapes_max: Option<u64>,
    /// Report progress on standard error ([`Progress`]): a bar on a terminal, else a line
    /// every few seconds.
    pub progress: bool,
    pub timing: TimingOptions,
    /// Times the whole grid is measured, one pass after another (0 counts as 1). A shape's
    /// median is the median of its passes' medians ([`Measurement::from_passes`]): on a shared
    /// CPU a kernel's time moves by 10% or more over seconds, and a shape timed in one short
    /// window can land in a slow one. Passes after the first run only while the budget lasts.
    ///
    /// [`Measurement::from_passes`]: super::timing::Measurement::from_passes
    pub passes: u32,
    /// Time a reference kernel before the first pass and after each, and warn when the machine
    /// was too noisy ([`super::noise`]); the timings go into the provenance.
    pub noise_check: bool,
    /// The workload the profile is for: its shapes run first in every pass (after the host
    /// sampler's), so a run its budget cuts still has them.
    pub focus: Option<Focus>,
    /// Re-timings of inconsistent shapes after the passes, at most
    /// ([`super::consistency::retime`]; 0: no check). They run even when the budget is spent,
    /// and count towards `shapes_max`.
    pub retimes_max: u32,
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions {
            budget: None,
            shapes_max: None,
            progress: false,
            timing: TimingOptions::default(),
            passes: 1,
            noise_check: false,
            focus: None,
            retimes_max: 0,
        }
    }
}

/// What became of one shape over the passes.
#[derive(Default)]
struct ShapeOutcome {
    /// The repeats of each pass that measured it.
    passes: Vec<Vec<f64>>,
    /// The backend cannot run it: no later pass tries.
    unsupported: bool,
    /// Why it failed, the first time it did: no later pass tries.
    failure: Option<String>,
}

/// Measures every shape of `grid` on `backend`. The profile's rows are sorted by shape; its
/// provenance records the device, peak, kernel hashes, grid, timing policy and what was skipped
/// (see [`RunSummary`]).
///
/// Errors: [`DeviceError::Unavailable`] from the backend ends the run; so does a run in which
/// every attempted shape failed (a broken backend, not a too-large shape).
pub fn calibrate(backend: &mut dyn Backend, grid: &Grid, options: &RunOptions) -> Result<Profile, DeviceError> {
    let start = Instant::now();
    calibrate_timed(backend, grid, options, &|| start.elapsed())
}

/// [`calibrate`], with the time since the run began read from `elapsed` for the budget: a
/// test's own clock makes the budget cut land at the same shape however busy the machine is.
pub fn calibrate_timed(backend: &mut dyn Backend, grid: &Grid, options: &RunOptions, elapsed: &dyn Fn() -> Duration) -> Result<Profile, DeviceError> {
    let peak = backend.peak();
    let positive = |x: f64| x.is_finite() && x > 0.0;
    if !positive(peak.flops_per_s) || !positive(peak.memory_bytes_per_s) {
        return Err(DeviceError::Failed(format!("backend reports a non-positive peak: {peak:?}")));
    }
    let device = backend.device_info();
    let focused = options.focus.as_ref().map(|f| f.shapes(grid)).unwrap_or_default();
    let shapes = match &options.focus {
        Some(focus) => focus.reorder(grid, grid.shapes_in_run_order()),
        None => grid.shapes_in_run_order(),
    };

    let passes = options.passes.max(1);
    let mut progress = Progress::new(options.progress, shapes.len() as u64 * passes as u64, passes, options.budget);
    let mut reference = Vec::new();
    let mut time_reference_now = |backend: &mut dyn Backend, progress: &Progress| -> Result<(), DeviceError> {
        if !options.noise_check {
            return Ok(());
        }
        match time_reference(backend, &grid.options.dtypes, &options.timing) {
            Ok(Some((shape, median_ns))) => reference.push((shape, median_ns)),
            Ok(None) | Err(DeviceError::Unsupported(_)) => {}
            Err(e @ DeviceError::Unavailable(_)) => return Err(e),
            Err(DeviceError::Failed(reason)) => progress.note(&format!("the reference kernel failed: {reason}")),
        }
        Ok(())
    };
    time_reference_now(backend, &progress)?;
    let launch_floor = match backend.launch_floor() {
        Ok(floor) => floor,
        Err(e @ DeviceError::Unavailable(_)) => return Err(e),
        Err(e) => {
            progress.note(&format!("the launch floor could not be timed: {e}"));
            None
        }
    };

    let tp = grid.options.tensor_parallel.first().copied().unwrap_or(1);
    let elementwise = match backend.elementwise(&grid.options.models, tp) {
        Ok(timings) => timings,
        Err(e @ DeviceError::Unavailable(_)) => return Err(e),
        Err(e) => {
            progress.note(&format!("the elementwise kernels could not be timed: {e}"));
            Vec::new()
        }
    };

    // The host sampler's few shapes (a few milliseconds each) run first and are never cut: the
    // engine's twin prices every step's sampling from them, and a run cut before them would
    // leave it nothing to price with.
    let mut timed: u64 = 0;
    let spent = |shape: &Shape, pass: u32, timed: u64| {
        let required = pass == 1 && shape.kind() == OpKind::Sampling;
        !required
            && (options.budget.is_some_and(|budget| elapsed() >= budget) || options.shapes_max.is_some_and(|max| timed >= max))
    };
    let mut outcomes: Vec<ShapeOutcome> = shapes.iter().map(|_| ShapeOutcome::default()).collect();
    let mut passes_run = 0;
    let mut passes_done = 0;
    let mut reasons_unsupported: Vec<String> = Vec::new();
    'passes: for pass in 1..=passes {
        if shapes.first().is_some_and(|first| spent(first, pass, timed)) {
            break;
        }
        passes_run += 1;
        for (shape, outcome) in shapes.iter().zip(&mut outcomes) {
            if spent(shape, pass, timed) {
                break 'passes;
            }
            progress.begin(shape.kind(), pass, &describe(shape));
            if !(outcome.unsupported || outcome.failure.is_some()) {
                timed += 1;
                match measure_shape(backend, grid, shape, &options.timing) {
                    Ok(Some(samples)) => outcome.passes.push(samples),
                    Ok(None) => outcome.unsupported = true,
                    Err(DeviceError::Unsupported(reason)) => {
                        outcome.unsupported = true;
                        if reasons_unsupported.len() < FAILURES_KEPT {
                            let line = format!("{}: {reason}", describe(shape));
                            progress.note(&format!("skipped {line}"));
                            reasons_unsupported.push(line);
                        }
                    }
                    Err(e @ DeviceError::Unavailable(_)) => {
                        progress.finish();
                        return Err(e);
                    }
                    Err(DeviceError::Failed(reason)) => outcome.failure = Some(reason),
                }
            }
            progress.end();
        }
        passes_done += 1;
        time_reference_now(backend, &progress)?;
    }
    if passes_done < passes_run {
        // The budget ended a pass: the reference after it is still wanted.
        time_reference_now(backend, &progress)?;
    }
    let retimes = options.shapes_max.map_or(options.retimes_max, |max| max.saturating_sub(timed).min(u64::from(options.retimes_max)) as u32);
    let retimed = retime_inconsistent(backend, grid, &shapes, &mut outcomes, &focused, retimes, &options.timing)?;
    progress.finish();

    let mut summary = RunSummary {
        shapes_in_grid: shapes.len() as u64,
        budget_s: options.budget.map(|b| b.as_secs_f64()),
        shapes_max: options.shapes_max,
        passes: passes_run,
        cut_short: passes_done < passes,
        unsupported_reasons: reasons_unsupported,
        focus_shapes: focused.len() as u64,
        retimed: retimed.notes,
        inconsistent: retimed.inconsistent.into_iter().take(FAILURES_KEPT).collect(),
        reference: reference.first().map(|(shape, _)| {
            let kernel = describe(&Shape::Gemm(*shape));
            ReferenceTimings::judge(kernel, reference.iter().map(|r| r.1).collect(), NOISE_THRESHOLD)
        }),
        launch_floor,
        elementwise,
        ..RunSummary::default()
    };
    let mut rows = Vec::with_capacity(shapes.len());
    for (shape, outcome) in shapes.iter().zip(outcomes) {
        if !outcome.passes.is_empty() {
            rows.push(ProfileRow::new(*shape, Measurement::from_passes(&outcome.passes), &peak));
            summary.measured += 1;
            summary.focus_measured += u64::from(focused.contains(shape));
        } else if outcome.unsupported {
            summary.skipped_unsupported += 1;
        } else if let Some(reason) = outcome.failure {
            summary.failed += 1;
            if summary.failures.len() < FAILURES_KEPT {
                summary.failures.push(format!("{}: {reason}", describe(shape)));
            }
        } else {
            summary.skipped_budget += 1;
        }
    }

    if summary.measured == 0 && summary.failed > 0 {
        return Err(DeviceError::Failed(format!(
            "every shape failed ({} of them); first: {}",
            summary.failed,
            summary.failures.first().map_or("", String::as_str)
        )));
    }

    rows.sort_by_key(|row| row.shape);
    let mut kernels: Vec<KernelHash> =
        backend.kernel_hashes().into_iter().map(|(name, hash)| KernelHash { name, hash }).collect();
    kernels.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(Profile {
        rows,
        provenance: Provenance {
            servesim_version: env!("CARGO_PKG_VERSION").to_string(),
            date: rfc3339_utc(SystemTime::now()),
            device: (&device).into(),
            peak: peak.into(),
            kernels,
            grid: (&grid.options).into(),
            timing: (&options.timing).into(),
            run: summary,
            source: None,
        },
    })
}

/// Times again, as one more pass, the measured shapes that break monotonicity or whose passes
/// disagree ([`retime`]), the `focused` ones first, at most `max` times. A shape that fails now
/// keeps what it had; an unavailable device ends the run.
fn retime_inconsistent(
    backend: &mut dyn Backend,
    grid: &Grid,
    shapes: &[Shape],
    outcomes: &mut [ShapeOutcome],
    focused: &std::collections::BTreeSet<Shape>,
    max: u32,
    timing: &TimingOptions,
) -> Result<Retimed, DeviceError> {
    let mut pass_medians: Vec<Vec<f64>> =
        outcomes.iter().map(|o| o.passes.iter().map(|p| Measurement::from_samples(p).median_ns).collect()).collect();
    let mut time_shape = |i: usize| match measure_shape(backend, grid, &shapes[i], timing) {
        Ok(Some(samples)) => {
            outcomes[i].passes.push(samples.clone());
            Ok(Some(samples))
        }
        Ok(None) | Err(DeviceError::Unsupported(_) | DeviceError::Failed(_)) => Ok(None),
        Err(e @ DeviceError::Unavailable(_)) => Err(e),
    };
    retime(shapes, &mut pass_medians, &|s| focused.contains(s), max, &describe, &mut time_shape)
}

/// Fewest leave-one-out points of a kind whose median and p90 are worth printing.
const LOO_POINTS_MIN: usize = 3;

/// One line for the end of a run: the leave-one-out interpolation error
/// ([`leave_one_out`]) of GEMMs and of attention, each as median and p90 over its points, or
/// "too few points to judge" (a run cut short early, or a kind the grid barely covers): never
/// NaN.
pub fn leave_one_out_summary(profile: &Profile) -> String {
    let loo = leave_one_out(profile);
    let part = |name: &str, errors: &[f64]| {
        if errors.len() < LOO_POINTS_MIN {
            return format!("{name} too few points to judge ({})", errors.len());
        }
        let (median, p90) = LeaveOneOut::summary(errors);
        format!("{name} median {:.1}%, p90 {:.1}% over {} points", median * 100.0, p90 * 100.0, errors.len())
    };
    format!("leave-one-out interpolation error: {}; {}", part("GEMM", &loo.gemm), part("attention", &loo.attention))
}

/// The median of one measurement of `shape`, timed as a calibration run times it (a GEMM among
/// its step's GEMMs); `Ok(None)`: the backend cannot run this kind of shape at all.
pub fn time_shape(backend: &mut dyn Backend, grid: &Grid, shape: &Shape, timing: &TimingOptions) -> Result<Option<f64>, DeviceError> {
    Ok(measure_shape(backend, grid, shape, timing)?.map(|samples| Measurement::from_samples(&samples).median_ns))
}

/// The repeats of one measurement of `shape`; `Ok(None)`: the backend cannot run this kind of
/// shape at all.
pub(super) fn measure_shape(
    backend: &mut dyn Backend,
    grid: &Grid,
    shape: &Shape,
    timing: &TimingOptions,
) -> Result<Option<Vec<f64>>, DeviceError> {
    if let Some(dtype) = shape.dtype()
        && !backend.supports(dtype)
    {
        return Ok(None);
    }
    let mut op: Box<dyn PreparedOp + '_> = match shape {
        Shape::Gemm(g) => match grid.step_gemms(g) {
            Some(step) => backend.prepare_gemm_in_step(g, &step)?,
            None => backend.prepare_gemm(g)?,
        },
        Shape::Attention(a) => backend.prepare_attention(a)?,
        Shape::AllReduce(r) => match backend.prepare_allreduce(r)? {
            Some(op) => op,
            None => return Ok(None),
        },
        // No backend times an all-to-all (the rows are imported): unsupported, as an
        // all-reduce is without a collective.
        Shape::AllToAll(_) => return Ok(None),
        Shape::Sampling(s) => match backend.prepare_sampling(s)? {
            Some(op) => op,
            None => return Ok(None),
        },
    };
    measure_samples(op.as_mut(), timing).map(Some)
}

/// A short label for progress and failure messages.
pub fn describe(shape: &Shape) -> String {
    match shape {
        Shape::Gemm(g) => format!("gemm {}×{}×{} {}", g.m, g.n, g.k, g.dtype.name()),
        Shape::Attention(a) => format!(
            "attention {:?} b{} q{} c{}{} h{}/{}/{} {}",
            a.phase,
            a.batch,
            a.query_len,
            a.context_len,
            if a.uneven { " uneven" } else { "" },
            a.num_heads,
            a.num_kv_heads,
            a.head_dim,
            a.dtype.name()
        ),
        Shape::AllReduce(r) => format!("all-reduce {} B over {} GPUs", r.bytes, r.gpus),
        Shape::AllToAll(r) => format!("all-to-all {} B per GPU over {} GPUs", r.bytes, r.gpus),
        Shape::Sampling(s) => format!("sampling {} of {} rows × {} logits", s.method.name(), s.rows, s.vocab),
    }
}

/// A deterministic backend whose kernels take no time but report a duration from a known smooth
/// law that is *not* a roofline (a soft maximum of compute and memory time at efficiencies that
/// grow with the problem size, plus a launch latency). For tests of the harness and of the
/// calibrated cost model, where interpolation error must be checked against exact values.
#[derive(Clone, Debug)]
pub struct SyntheticBackend {
    pub peak: Peak,
    pub dtypes: Vec<Dtype>,
    /// Relative jitter of each reported run (deterministic, from a counter), e.g. 0.01.
    pub jitter: f64,
    /// Number of runs so far (drives the jitter).
    runs: u64,
}

impl SyntheticBackend {
    pub fn new(peak: Peak, dtypes: Vec<Dtype>) -> SyntheticBackend {
        SyntheticBackend { peak, dtypes, jitter: 0.0, runs: 0 }
    }

    /// The law's time for a GEMM, nanoseconds.
    pub fn gemm_ns(&self, shape: &GemmShape) -> f64 {
        let work = gemm_work(shape);
        let m = shape.m as f64;
        // Tiles are under-filled at small m; wide outputs fill the device better.
        let compute_eff = 0.85 * m / (m + 24.0) * (shape.n as f64 / (shape.n as f64 + 256.0));
        let memory_eff = 0.8;
        self.law_ns(work, compute_eff, memory_eff, 4_000.0)
    }

    /// The law's time for an attention shape, nanoseconds.
    pub fn attention_ns(&self, shape: &AttentionShape) -> f64 {
        let work = attention_work(shape);
        let tokens = (shape.batch * shape.query_len) as f64;
        let kv = shape.batch as f64 * (shape.context_len + shape.query_len) as f64;
        let compute_eff = 0.6 * tokens / (tokens + 48.0) * if shape.query_len == 1 { 0.5 } else { 1.0 };
        let mut memory_eff = 0.75 * kv / (kv + 512.0);
        if shape.uneven {
            memory_eff *= 0.9;
        }
        self.law_ns(work, compute_eff, memory_eff, 3_000.0)
    }

    /// The law's time for an all-reduce, nanoseconds: 10 µs plus the ring traffic at 100 GB/s.
    pub fn allreduce_ns(&self, shape: &AllReduceShape) -> f64 {
        let g = shape.gpus as f64;
        10_000.0 + 2.0 * (g - 1.0) / g * shape.bytes as f64 / 100.0
    }

    /// The law's time for the sampler, nanoseconds: 5 µs plus a pass per method over the logits
    /// at 1 ns per logit.
    pub fn sampling_ns(&self, shape: &SamplingShape) -> f64 {
        let passes = 1.0 + SamplingMethod::ALL.iter().position(|&m| m == shape.method).unwrap_or(0) as f64;
        5_000.0 + passes * f64::from(shape.rows) * f64::from(shape.vocab)
    }

    /// `latency + (tc³ + tm³)^(1/3)`: a smooth maximum, which a roofline is not.
    fn law_ns(&self, work: Work, compute_eff: f64, memory_eff: f64, latency_ns: f64) -> f64 {
        let tc = work.flops / (self.peak.flops_per_s * compute_eff) * 1e9;
        let tm = work.bytes / (self.peak.memory_bytes_per_s * memory_eff) * 1e9;
        latency_ns + (tc.powi(3) + tm.powi(3)).cbrt()
    }

    fn jittered(&mut self, ns: f64) -> f64 {
        self.runs += 1;
        // A fixed pseudo-random sequence in [-1, 1).
        let x = (self.runs.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 11) as f64 / (1u64 << 53) as f64;
        ns * (1.0 + self.jitter * (2.0 * x - 1.0))
    }
}

struct SyntheticOp<'a> {
    backend: &'a mut SyntheticBackend,
    ns: f64,
}

impl PreparedOp for SyntheticOp<'_> {
    fn run_once(&mut self) -> Result<f64, DeviceError> {
        Ok(self.backend.jittered(self.ns))
    }
}

impl Backend for SyntheticBackend {
    fn device_info(&self) -> DeviceInfo {
        DeviceInfo { device: "synthetic".into(), name: "synthetic kernel-time law".into(), ..DeviceInfo::default() }
    }

    fn peak(&self) -> Peak {
        self.peak
    }

    fn supports(&self, dtype: Dtype) -> bool {
        self.dtypes.contains(&dtype)
    }

    fn kernel_hashes(&self) -> Vec<(String, String)> {
        vec![("synthetic".into(), "0".into())]
    }

    fn prepare_gemm(&mut self, shape: &GemmShape) -> Result<Box<dyn PreparedOp + '_>, DeviceError> {
        let ns = self.gemm_ns(shape);
        Ok(Box::new(SyntheticOp { backend: self, ns }))
    }

    fn prepare_attention(&mut self, shape: &AttentionShape) -> Result<Box<dyn PreparedOp + '_>, DeviceError> {
        let ns = self.attention_ns(shape);
        Ok(Box::new(SyntheticOp { backend: self, ns }))
    }

    fn prepare_allreduce(
        &mut self,
        shape: &AllReduceShape,
    ) -> Result<Option<Box<dyn PreparedOp + '_>>, DeviceError> {
        let ns = self.allreduce_ns(shape);
        Ok(Some(Box::new(SyntheticOp { backend: self, ns })))
    }

    fn prepare_sampling(&mut self, shape: &SamplingShape) -> Result<Option<Box<dyn PreparedOp + '_>>, DeviceError> {
        let ns = self.sampling_ns(shape);
        Ok(Some(Box::new(SyntheticOp { backend: self, ns })))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::calibrate::grid::{GridOptions, GridScale, OpKind};
    use crate::scenario::ModelSpec;

    fn gpu_peak() -> Peak {
        Peak { flops_per_s: 1e15, memory_bytes_per_s: 3e12 }
    }

    fn tiny_grid(dtypes: Vec<Dtype>) -> Grid {
        let model = ModelSpec::preset("Llama-3.2-1B").unwrap();
        Grid::new(GridOptions::for_model(model, vec![1, 2], dtypes, GridScale::Tiny))
    }

    #[test]
    fn an_all_to_all_is_unsupported_not_a_panic() {
        use crate::calibrate::backend::AllToAllShape;
        let grid = tiny_grid(vec![Dtype::Bf16]);
        let mut backend = SyntheticBackend::new(gpu_peak(), vec![Dtype::Bf16]);
        let shape = Shape::AllToAll(AllToAllShape { bytes: 1 << 20, gpus: 8 });
        let measured = measure_shape(&mut backend, &grid, &shape, &TimingOptions::default()).unwrap();
        assert_eq!(measured, None);
        assert_eq!(describe(&shape), "all-to-all 1048576 B per GPU over 8 GPUs");
    }

    #[test]
    fn measures_every_shape_exactly_without_jitter() {
        let grid = tiny_grid(vec![Dtype::Bf16]);
        let mut backend = SyntheticBackend::new(gpu_peak(), vec![Dtype::Bf16]);
        let profile = calibrate(&mut backend, &grid, &RunOptions::default()).unwrap();
        assert_eq!(profile.rows.len(), grid.len());
        assert_eq!(profile.provenance.run.measured, grid.len() as u64);
        assert!(profile.rows.windows(2).all(|w| w[0].shape < w[1].shape));
        let law = SyntheticBackend::new(gpu_peak(), vec![]);
        for row in &profile.rows {
            let expected = match &row.shape {
                Shape::Gemm(g) => law.gemm_ns(g),
                Shape::Attention(a) => law.attention_ns(a),
                Shape::AllReduce(r) => law.allreduce_ns(r),
                Shape::Sampling(s) => law.sampling_ns(s),
                Shape::AllToAll(_) => continue, // no grid holds one
            };
            assert_eq!(row.measurement.median_ns, expected);
            let u = row.utilisation.unwrap();
            assert!(u > 0.0 && u < 1.0, "{row:?}");
        }
        assert_eq!(profile.provenance.device.device, "synthetic");
        assert_eq!(profile.provenance.grid.scale, "tiny");
        assert!(profile.provenance.date.ends_with('Z'));
    }

    #[test]
    fn unsupported_dtypes_are_skipped_and_counted() {
        let grid = tiny_grid(vec![Dtype::Bf16, Dtype::Fp8]);
        let fp8 = grid.gemms.iter().filter(|g| g.dtype == Dtype::Fp8).count();
        assert!(fp8 > 0);
        let mut backend = SyntheticBackend::new(gpu_peak(), vec![Dtype::Bf16]);
        let profile = calibrate(&mut backend, &grid, &RunOptions::default()).unwrap();
        assert_eq!(profile.provenance.run.skipped_unsupported, fp8 as u64);
        assert_eq!(profile.rows.len() + fp8, grid.len());
    }

    #[test]
    fn budget_stops_the_run_and_keeps_what_was_measured() {
        let grid = tiny_grid(vec![Dtype::Bf16]);
        let mut backend = Ticking::new(Duration::from_millis(2), true);
        let timing = TimingOptions { warmup: 0, min_repeats: 1, max_repeats: 1, ..TimingOptions::default() };
        let options = RunOptions { budget: Some(Duration::from_millis(30)), timing, passes: 2, ..RunOptions::default() };
        let clock = backend.clock.clone();
        let profile = calibrate_timed(&mut backend, &grid, &options, &|| clock.now()).unwrap();
        let run = &profile.provenance.run;
        assert!(run.measured >= 1 && run.skipped_budget > 0 && run.cut_short, "{run:?}");
        assert_eq!(run.measured + run.skipped_budget + run.failed + run.skipped_unsupported, grid.len() as u64);
        assert_eq!(profile.rows.len() as u64, run.measured);
        // Coarse to fine: the measured GEMMs include m = 1 for several (n, k).
        assert!(profile.rows.iter().filter(|r| matches!(r.shape, Shape::Gemm(g) if g.m == 1)).count() >= 2);
    }

    #[test]
    fn a_shape_limit_cuts_at_the_same_shape_on_every_machine() {
        let grid = tiny_grid(vec![Dtype::Bf16]);
        let timing = TimingOptions { warmup: 0, min_repeats: 1, max_repeats: 1, ..TimingOptions::default() };
        let options = RunOptions { shapes_max: Some(25), timing, passes: 2, ..RunOptions::default() };
        let profile = calibrate(&mut SyntheticBackend::new(gpu_peak(), vec![Dtype::Bf16]), &grid, &options).unwrap();
        let run = &profile.provenance.run;
        assert_eq!((run.measured, run.cut_short, run.shapes_max, run.passes), (25, true, Some(25), 1), "{run:?}");
        let first: Vec<Shape> = grid.shapes_in_run_order().into_iter().take(25).collect();
        let mut measured: Vec<Shape> = profile.rows.iter().map(|r| r.shape).collect();
        measured.sort();
        let mut expected = first.clone();
        expected.sort();
        assert_eq!(measured, expected, "the first 25 in run order");
        // Over two passes the limit counts every timing: 1.5 grids' worth measures the whole
        // grid once and half of it twice.
        let half = grid.len() as u64 / 2;
        let options = RunOptions { shapes_max: Some(grid.len() as u64 + half), timing, passes: 2, ..RunOptions::default() };
        let run = calibrate(&mut SyntheticBackend::new(gpu_peak(), vec![Dtype::Bf16]), &grid, &options).unwrap().provenance.run;
        assert_eq!((run.measured, run.passes, run.cut_short), (grid.len() as u64, 2, true), "{run:?}");
    }

    #[test]
    fn the_sampler_shapes_are_measured_even_when_the_budget_is_spent() {
        let mut options = GridOptions::cpu_default();
        options.dtypes = vec![Dtype::Bf16];
        let grid = Grid::new(options);
        assert!(!grid.sampling.is_empty());
        let timing = TimingOptions { warmup: 0, min_repeats: 1, max_repeats: 1, ..TimingOptions::default() };
        for options in [
            RunOptions { budget: Some(Duration::ZERO), timing, passes: 3, ..RunOptions::default() },
            RunOptions { shapes_max: Some(1), timing, passes: 3, ..RunOptions::default() },
        ] {
            // A clock already past any budget.
            let late = || Duration::from_secs(3600);
            let profile = calibrate_timed(&mut SyntheticBackend::new(gpu_peak(), vec![Dtype::Bf16]), &grid, &options, &late).unwrap();
            let sampled = profile.rows.iter().filter(|r| r.shape.kind() == OpKind::Sampling).count();
            assert_eq!(sampled, grid.sampling.len(), "{options:?}");
            let run = &profile.provenance.run;
            assert!(run.cut_short && run.measured == grid.sampling.len() as u64 && run.passes == 1, "{options:?}: {run:?}");
        }
    }

    /// A test's clock: only the runs of [`Ticking`]'s ops move it, so a budget measured on it
    /// cuts a run at the same shape on any machine, idle or busy.
    #[derive(Clone, Default)]
    struct TestClock(std::sync::Arc<std::sync::atomic::AtomicU64>);

    impl TestClock {
        fn now(&self) -> Duration {
            Duration::from_nanos(self.0.load(std::sync::atomic::Ordering::Relaxed))
        }
        fn advance(&self, by: Duration) {
            self.0.fetch_add(by.as_nanos() as u64, std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// Each run moves `clock` on by `tick` and reports the synthetic law's duration; with
    /// `attention_fails`, attention cannot be prepared (as if out of memory). `disturbed` takes
    /// 17× the law's time the first `disturbed_times` times it is prepared (a burst of load
    /// landing on it).
    struct Ticking {
        law: SyntheticBackend,
        clock: TestClock,
        tick: Duration,
        attention_fails: bool,
        disturbed: Option<GemmShape>,
        disturbed_times: u32,
    }
    impl Ticking {
        fn new(tick: Duration, attention_fails: bool) -> Ticking {
            let law = SyntheticBackend::new(gpu_peak(), vec![Dtype::Bf16]);
            Ticking { law, clock: TestClock::default(), tick, attention_fails, disturbed: None, disturbed_times: 0 }
        }
        fn op(&self, ns: f64) -> Box<dyn PreparedOp + '_> {
            Box::new(TickingOp { clock: self.clock.clone(), tick: self.tick, ns })
        }
    }
    struct TickingOp {
        clock: TestClock,
        tick: Duration,
        ns: f64,
    }
    impl PreparedOp for TickingOp {
        fn run_once(&mut self) -> Result<f64, DeviceError> {
            self.clock.advance(self.tick);
            Ok(self.ns)
        }
    }
    impl Backend for Ticking {
        fn device_info(&self) -> DeviceInfo {
            self.law.device_info()
        }
        fn peak(&self) -> Peak {
            self.law.peak()
        }
        fn supports(&self, dtype: Dtype) -> bool {
            self.law.supports(dtype)
        }
        fn kernel_hashes(&self) -> Vec<(String, String)> {
            vec![]
        }
        fn prepare_gemm(&mut self, shape: &GemmShape) -> Result<Box<dyn PreparedOp + '_>, DeviceError> {
            let slow = Some(*shape) == self.disturbed && self.disturbed_times > 0;
            self.disturbed_times -= u32::from(slow);
            Ok(self.op(self.law.gemm_ns(shape) * if slow { 17.0 } else { 1.0 }))
        }
        fn prepare_attention(&mut self, shape: &AttentionShape) -> Result<Box<dyn PreparedOp + '_>, DeviceError> {
            if self.attention_fails {
                return Err(DeviceError::Failed("out of memory".into()));
            }
            Ok(self.op(self.law.attention_ns(shape)))
        }
    }

    #[test]
    fn a_budget_cut_run_covers_every_op_kind() {
        let grid = tiny_grid(vec![Dtype::Bf16]);
        let mut backend = Ticking::new(Duration::from_millis(1), false);
        let timing = TimingOptions { warmup: 0, min_repeats: 1, max_repeats: 1, ..TimingOptions::default() };
        // Three passes take over 1.5 s; the budget is an eighth of that. Before kinds were
        // interleaved, GEMMs ran first and alone until a budget was spent.
        assert!(grid.len() > 500, "{}", grid.len());
        let options = RunOptions { budget: Some(Duration::from_millis(200)), timing, passes: 3, ..RunOptions::default() };
        let clock = backend.clock.clone();
        let profile = calibrate_timed(&mut backend, &grid, &options, &|| clock.now()).unwrap();
        let run = &profile.provenance.run;
        assert!(run.cut_short && run.skipped_budget > 0, "{run:?}");
        for kind in [OpKind::Gemm, OpKind::Prefill, OpKind::Decode, OpKind::Mixed] {
            let rows = profile.rows.iter().filter(|r| r.shape.kind() == kind).count();
            assert!(rows >= 1, "no {} rows in {} measured", kind.name(), profile.rows.len());
        }
        // Whatever was cut, the leave-one-out line has no NaN.
        let line = leave_one_out_summary(&profile);
        assert!(line.starts_with("leave-one-out interpolation error: GEMM ") && !line.contains("NaN"), "{line}");
    }

    #[test]
    fn the_workloads_shapes_run_first_so_a_cut_run_has_them() {
        let grid = tiny_grid(vec![Dtype::Bf16]);
        let focus = crate::calibrate::focus::Focus::example();
        let wanted = focus.shapes(&grid);
        let timing = TimingOptions { warmup: 0, min_repeats: 1, max_repeats: 1, ..TimingOptions::default() };
        // A run cut as soon as it has timed as many shapes as the workload has.
        let cut = RunOptions { shapes_max: Some(wanted.len() as u64), timing, passes: 3, ..RunOptions::default() };
        let measured = |options: &RunOptions| -> std::collections::BTreeSet<Shape> {
            let profile = calibrate(&mut SyntheticBackend::new(gpu_peak(), vec![Dtype::Bf16]), &grid, options).unwrap();
            profile.rows.iter().map(|r| r.shape).collect()
        };
        let focused = RunOptions { focus: Some(focus.clone()), ..cut.clone() };
        assert_eq!(measured(&focused), wanted);
        // Coarse to fine over the whole grid, the same cut misses some of them.
        assert!(!wanted.is_subset(&measured(&cut)));
        let profile = calibrate(&mut SyntheticBackend::new(gpu_peak(), vec![Dtype::Bf16]), &grid, &focused).unwrap();
        let run = &profile.provenance.run;
        assert_eq!((run.focus_shapes, run.focus_measured), (wanted.len() as u64, wanted.len() as u64));
        assert!(run.to_string().contains(&format!("the workload's {} shapes first, {} of them measured", wanted.len(), wanted.len())), "{run}");
    }

    #[test]
    fn a_shape_a_burst_of_load_hit_is_retimed_and_the_provenance_says_so() {
        let grid = tiny_grid(vec![Dtype::Bf16]);
        let law = SyntheticBackend::new(gpu_peak(), vec![Dtype::Bf16]);
        let g = grid.gemms.iter().find(|g| g.m == 3).copied().expect("a 3-row GEMM");
        let timing = TimingOptions { warmup: 0, min_repeats: 1, max_repeats: 1, ..TimingOptions::default() };
        let run = |retimes_max: u32, times: u32| {
            let mut backend = Ticking { disturbed: Some(g), disturbed_times: times, ..Ticking::new(Duration::ZERO, false) };
            let options = RunOptions { timing, retimes_max, ..RunOptions::default() };
            let profile = calibrate(&mut backend, &grid, &options).unwrap();
            let median = profile.rows.iter().find(|r| r.shape == Shape::Gemm(g)).unwrap().measurement.median_ns;
            (median / law.gemm_ns(&g), profile.provenance.run)
        };
        // Unchecked, the profile keeps the 17× timing.
        let (ratio, summary) = run(0, 1);
        assert_eq!((ratio, summary.retimed.len()), (17.0, 0));
        // Checked: timed twice more (17× and the law disagree, so a third pass decides), then
        // the law's time; each re-timing named in the provenance and the summary line.
        let (ratio, summary) = run(32, 1);
        assert_eq!(ratio, 1.0, "{summary:?}");
        assert_eq!(summary.retimed.len(), 2, "{:?}", summary.retimed);
        assert!(summary.retimed.iter().all(|r| r.starts_with(&describe(&Shape::Gemm(g)))), "{:?}", summary.retimed);
        assert!(summary.inconsistent.is_empty(), "{:?}", summary.inconsistent);
        assert!(summary.to_string().contains("; inconsistent shapes re-timed: 2\n  re-timed: gemm 3×"), "{summary}");
        // Slow every time within the bound: re-timed as often as allowed, and still named.
        let (ratio, summary) = run(2, 100);
        assert_eq!((ratio, summary.retimed.len(), summary.inconsistent.len()), (17.0, 2, 1), "{summary:?}");
        assert!(summary.to_string().contains("\n  still inconsistent: gemm 3×"), "{summary}");
    }

    #[test]
    fn the_leave_one_out_line_says_when_a_kind_has_too_few_points() {
        let grid = tiny_grid(vec![Dtype::Bf16]);
        let mut profile = calibrate(&mut SyntheticBackend::new(gpu_peak(), vec![Dtype::Bf16]), &grid, &RunOptions::default()).unwrap();
        let line = leave_one_out_summary(&profile);
        assert!(line.contains("GEMM median ") && line.contains("attention median "), "{line}");
        // GEMMs and one attention row, alone in its surface.
        let last = profile.rows.last().cloned().expect("rows");
        profile.rows.retain(|r| matches!(r.shape, Shape::Gemm(_)) || *r == last);
        let line = leave_one_out_summary(&profile);
        assert!(line.contains("GEMM median ") && line.ends_with("attention too few points to judge (0)"), "{line}");
        profile.rows.clear();
        assert_eq!(
            leave_one_out_summary(&profile),
            "leave-one-out interpolation error: GEMM too few points to judge (0); attention too few points to judge (0)"
        );
    }

    #[test]
    fn a_reference_kernel_that_slows_down_marks_the_run_noisy() {
        /// The reference GEMM takes 5 ms, then 6.5 ms from its third timing on (another process
        /// started during pass 2); every other op 1 µs.
        struct Busy {
            references: u32,
        }
        struct Op(f64);
        impl PreparedOp for Op {
            fn run_once(&mut self) -> Result<f64, DeviceError> {
                Ok(self.0)
            }
        }
        impl Backend for Busy {
            fn device_info(&self) -> DeviceInfo {
                DeviceInfo::default()
            }
            fn peak(&self) -> Peak {
                gpu_peak()
            }
            fn supports(&self, _: Dtype) -> bool {
                true
            }
            fn kernel_hashes(&self) -> Vec<(String, String)> {
                vec![]
            }
            fn prepare_gemm(&mut self, shape: &GemmShape) -> Result<Box<dyn PreparedOp + '_>, DeviceError> {
                if *shape != crate::calibrate::noise::reference_shape(shape.dtype) {
                    return Ok(Box::new(Op(1000.0)));
                }
                self.references += 1;
                Ok(Box::new(Op(if self.references >= 3 { 6.5e6 } else { 5e6 })))
            }
            fn prepare_attention(&mut self, _: &AttentionShape) -> Result<Box<dyn PreparedOp + '_>, DeviceError> {
                Ok(Box::new(Op(1000.0)))
            }
        }
        let grid = tiny_grid(vec![Dtype::Bf16]);
        let timing = TimingOptions { warmup: 0, min_repeats: 1, max_repeats: 1, ..TimingOptions::default() };
        let options = RunOptions { timing, passes: 3, noise_check: true, ..RunOptions::default() };
        let mut backend = Busy { references: 0 };
        let profile = calibrate(&mut backend, &grid, &options).unwrap();
        let reference = profile.provenance.run.reference.clone().expect("timed");
        assert_eq!(reference.median_ns, vec![5e6, 5e6, 6.5e6, 6.5e6]);
        assert_eq!(reference.kernel, "gemm 256×1024×1024 bf16");
        assert!(reference.noisy, "{reference:?}");
        assert!(reference.warning().unwrap().contains("5.00 ms before the run and 6.50 ms after pass 2"));
        // In the provenance file, under [run.reference].
        let text = profile.provenance.to_toml_string();
        assert!(text.contains("[run.reference]") && text.contains("noisy = true"), "{text}");
        // A quiet machine: no warning. Without the check: nothing timed.
        let quiet = calibrate(&mut SyntheticBackend::new(gpu_peak(), vec![Dtype::Bf16]), &grid, &options).unwrap();
        assert!(quiet.provenance.run.reference.as_ref().is_some_and(|r| !r.noisy && r.median_ns.len() == 4));
        let unchecked = calibrate(&mut Busy { references: 0 }, &grid, &RunOptions { timing, ..RunOptions::default() }).unwrap();
        assert_eq!(unchecked.provenance.run.reference, None);
    }

    #[test]
    fn a_pass_disturbed_throughout_drops_out_of_the_median() {
        /// Every op takes 1 µs, except in the second pass over the grid, which runs 5× slow
        /// (another process busy for a while); attention fails in the second pass.
        struct Disturbed {
            prepared: usize,
            shapes: usize,
        }
        struct Op(f64);
        impl PreparedOp for Op {
            fn run_once(&mut self) -> Result<f64, DeviceError> {
                Ok(self.0)
            }
        }
        impl Disturbed {
            fn next(&mut self) -> (usize, f64) {
                let pass = self.prepared / self.shapes;
                self.prepared += 1;
                (pass, if pass == 1 { 5000.0 } else { 1000.0 })
            }
        }
        impl Backend for Disturbed {
            fn device_info(&self) -> DeviceInfo {
                DeviceInfo::default()
            }
            fn peak(&self) -> Peak {
                gpu_peak()
            }
            fn supports(&self, _: Dtype) -> bool {
                true
            }
            fn kernel_hashes(&self) -> Vec<(String, String)> {
                vec![]
            }
            fn prepare_gemm(&mut self, _: &GemmShape) -> Result<Box<dyn PreparedOp + '_>, DeviceError> {
                Ok(Box::new(Op(self.next().1)))
            }
            fn prepare_attention(&mut self, _: &AttentionShape) -> Result<Box<dyn PreparedOp + '_>, DeviceError> {
                match self.next() {
                    (1, _) => Err(DeviceError::Failed("out of memory".into())),
                    (_, ns) => Ok(Box::new(Op(ns))),
                }
            }
        }
        let grid = tiny_grid(vec![Dtype::Bf16]);
        let timing = TimingOptions { warmup: 0, min_repeats: 2, max_repeats: 2, ..TimingOptions::default() };
        let mut backend = Disturbed { prepared: 0, shapes: grid.len() };
        let options = RunOptions { timing, passes: 3, ..RunOptions::default() };
        let profile = calibrate(&mut backend, &grid, &options).unwrap();
        let run = &profile.provenance.run;
        assert_eq!((run.passes, run.measured, run.failed), (3, grid.len() as u64, 0), "{run:?}");
        for row in &profile.rows {
            assert_eq!(row.measurement.median_ns, 1000.0, "{row:?}");
            match row.shape {
                // Three passes of two repeats; the slow pass shows in p90 only.
                Shape::Gemm(_) => assert_eq!((row.measurement.repeats, row.measurement.p90_ns), (6, 5000.0)),
                // The failure in pass 2 stops later passes: pass 1's repeats stand.
                _ => assert_eq!(row.measurement.repeats, 2),
            }
        }
        // One pass: what the grid measured first.
        let mut backend = Disturbed { prepared: 0, shapes: grid.len() };
        let profile = calibrate(&mut backend, &grid, &RunOptions { timing, ..RunOptions::default() }).unwrap();
        assert_eq!(profile.provenance.run.passes, 1);
        assert!(profile.rows.iter().all(|r| r.measurement.repeats == 2));
    }

    #[test]
    fn all_failures_is_an_error_and_unavailable_stops_at_once() {
        struct Broken(bool);
        impl Backend for Broken {
            fn device_info(&self) -> DeviceInfo {
                DeviceInfo::default()
            }
            fn peak(&self) -> Peak {
                Peak { flops_per_s: 1.0, memory_bytes_per_s: 1.0 }
            }
            fn supports(&self, _: Dtype) -> bool {
                true
            }
            fn kernel_hashes(&self) -> Vec<(String, String)> {
                vec![]
            }
            fn prepare_gemm(&mut self, _: &GemmShape) -> Result<Box<dyn PreparedOp + '_>, DeviceError> {
                Err(if self.0 {
                    DeviceError::Unavailable("no driver".into())
                } else {
                    DeviceError::Failed("boom".into())
                })
            }
            fn prepare_attention(&mut self, _: &AttentionShape) -> Result<Box<dyn PreparedOp + '_>, DeviceError> {
                Err(DeviceError::Failed("boom".into()))
            }
        }
        let grid = tiny_grid(vec![Dtype::Bf16]);
        let e = calibrate(&mut Broken(false), &grid, &RunOptions::default()).unwrap_err();
        assert!(e.to_string().contains("every shape failed") && e.to_string().contains("boom"), "{e}");
        let e = calibrate(&mut Broken(true), &grid, &RunOptions::default()).unwrap_err();
        assert!(matches!(e, DeviceError::Unavailable(_)), "{e}");
    }

    #[test]
    fn jitter_is_deterministic_and_bounded() {
        let grid = tiny_grid(vec![Dtype::Bf16]);
        let run = || {
            let mut backend = SyntheticBackend::new(gpu_peak(), vec![Dtype::Bf16]);
            backend.jitter = 0.02;
            calibrate(&mut backend, &grid, &RunOptions::default()).unwrap().to_csv_string()
        };
        assert_eq!(run(), run());
    }
}
