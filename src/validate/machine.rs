//! Can this machine judge the twin? `validate --engine` compares a profile timed during
//! calibration with an engine timed minutes later. On a shared machine whose load changes
//! between the two (load 4–13 in the run that asked for this), the comparison measures the load,
//! not the twin: 0–5 of 12 targets were met, and the table was printed as pass/fail anyway.
//!
//! So right after the engine's benchmarks, on the engine's threads, the run times again what
//! calibration timed: its reference kernel ([`crate::calibrate::noise`]), timed before and after
//! each pass, and the shapes the comparison leans on most ([`drift_shapes`]: the decode step's
//! GEMMs and attention). If the reference's timings spread by more than [`NOISE_THRESHOLD`] (the
//! accuracy target itself: a machine that moved by more cannot show whether the twin meets it),
//! or the engine's shapes now take a median of more than that away from the profile's times, the
//! run cannot judge, and says why instead of passing or failing any target.
//!
//! ```text
//!  calibration: reference t₀ ─ pass ─ t₁ ─ pass ─ t₂ …   engine benchmarks   reference tₙ
//!  spread (max t − min t) / min t > 10%  ─►  "cannot judge", exit 3
//!  profile: shape s took p(s)                            engine benchmarks   s takes a(s)
//!  median over s of a(s) / p(s) off 1 by > 10%  ─►  "cannot judge", exit 3
//! ```

use crate::calibrate::backend::{AttentionPhase, Backend};
use crate::calibrate::consistency::median_of_passes;
use crate::calibrate::focus::Focus;
use crate::calibrate::grid::{Grid, Shape};
use crate::calibrate::noise::{NOISE_THRESHOLD, ReferenceTimings, time_reference};
use crate::calibrate::profile::Profile;
use crate::calibrate::run::{describe, time_shape};
use crate::calibrate::timing::TimingOptions;
use crate::scenario::Dtype;

/// What was timed after the benchmarks; `None`s where nothing was (a GPU, a backend that failed).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AfterRun {
    /// The reference kernel, nanoseconds.
    pub reference_ns: Option<f64>,
    pub drift: Option<Drift>,
}

/// The engine's own shapes, as calibration timed them and as they time after the benchmarks.
#[derive(Clone, Debug, PartialEq)]
pub struct Drift {
    /// (shape, the profile's median, the median now), nanoseconds.
    pub shapes: Vec<(String, f64, f64)>,
    /// The median over the shapes of now ÷ then.
    pub ratio: f64,
}

impl Drift {
    /// From each shape's times then and now; `None` without any.
    pub fn of(shapes: Vec<(String, f64, f64)>) -> Option<Drift> {
        let ratios: Vec<f64> = shapes.iter().map(|(_, then, now)| now / then).filter(|r| r.is_finite()).collect();
        (!ratios.is_empty()).then(|| Drift { ratio: median_of_passes(&ratios), shapes })
    }

    /// Whether the shapes moved by more than the accuracy target.
    pub fn moved(&self) -> bool {
        (self.ratio - 1.0).abs() > NOISE_THRESHOLD
    }

    /// "the engine's 11 shapes take a median of 3% longer than calibration timed them (gemm
    /// 1×1280×512 f32 0.120 → 0.125 ms, …)".
    pub fn describe(&self) -> String {
        let ms = |ns: f64| format!("{:.3}", ns / 1e6);
        let each: Vec<String> = self.shapes.iter().map(|(shape, then, now)| format!("{shape} {} → {} ms", ms(*then), ms(*now))).collect();
        let change = self.ratio - 1.0;
        format!(
            "the engine's {} shapes take a median of {:.0}% {} than calibration timed them ({})",
            self.shapes.len(),
            change.abs() * 100.0,
            if change >= 0.0 { "longer" } else { "less" },
            each.join(", ")
        )
    }
}

/// Decode steps, one GEMM row a sequence, are most of the engine's time: the shapes the
/// comparison leans on are each GEMM of the workload at its fewest rows and at the rows nearest
/// its most sequences, and its even decode attention nearest its most sequences and longest
/// context, as far as the profile measured them.
pub fn drift_shapes(profile: &Profile, focus: &Focus, grid: &Grid) -> Vec<Shape> {
    let measured: std::collections::BTreeSet<Shape> = profile.rows.iter().map(|r| r.shape).collect();
    let focused: Vec<Shape> = focus.shapes(grid).into_iter().filter(|s| measured.contains(s)).collect();
    let nearest = |values: &mut dyn Iterator<Item = u32>, target: u32| values.min_by_key(|&v| (v.abs_diff(target), u32::MAX - v));
    let gemm_ms: Vec<u32> = focused.iter().filter_map(|s| if let Shape::Gemm(g) = s { Some(g.m) } else { None }).collect();
    let smallest = gemm_ms.iter().copied().min();
    let decode_rows = nearest(&mut gemm_ms.iter().copied(), focus.decode.batch.1);
    let decodes: Vec<_> = focused
        .iter()
        .filter_map(|s| match s {
            Shape::Attention(a) if a.phase == AttentionPhase::Decode && !a.uneven => Some(*a),
            _ => None,
        })
        .collect();
    let batch = nearest(&mut decodes.iter().map(|a| a.batch), focus.decode.batch.1);
    let context = nearest(&mut decodes.iter().filter(|a| Some(a.batch) == batch).map(|a| a.context_len), focus.decode.context_len.1);
    focused
        .into_iter()
        .filter(|s| match s {
            Shape::Gemm(g) => Some(g.m) == smallest || Some(g.m) == decode_rows,
            Shape::Attention(a) => decodes.contains(a) && Some(a.batch) == batch && Some(a.context_len) == context,
            _ => false,
        })
        .collect()
}

/// Times the reference kernel in `dtype` and `shapes` again on `backend`, as calibration timed
/// them, against what `profile` holds for them. A shape the backend cannot time now is left out.
pub fn after_run(backend: &mut dyn Backend, grid: &Grid, profile: &Profile, shapes: &[Shape], dtype: Dtype, timing: &TimingOptions) -> AfterRun {
    let reference_ns = time_reference(backend, &[dtype], timing).ok().flatten().map(|(_, ns)| ns);
    let mut timed = Vec::new();
    for shape in shapes {
        let Some(then) = profile.rows.iter().find(|r| r.shape == *shape).map(|r| r.measurement.median_ns) else { continue };
        if let Ok(Some(now)) = time_shape(backend, grid, shape, timing) {
            timed.push((describe(shape), then, now));
        }
    }
    AfterRun { reference_ns, drift: Drift::of(timed) }
}

/// Why the run cannot judge the twin, or `None` where it can: the reference kernel's timings from
/// the profile's calibration and one more after the benchmarks, then the engine's own shapes.
pub fn verdict(profile: &Profile, after: &AfterRun) -> Option<String> {
    if let Some(reason) = reference_verdict(profile, after.reference_ns) {
        return Some(reason);
    }
    let drift = after.drift.as_ref().filter(|d| d.moved())?;
    Some(format!(
        "the machine's speed changed between calibration and the benchmarks: {} (more than {:.0}%); the errors would measure the \
         load, not the twin. Run it on a quieter machine",
        drift.describe(),
        NOISE_THRESHOLD * 100.0
    ))
}

/// [`verdict`] by the reference kernel alone.
fn reference_verdict(profile: &Profile, after_run_ns: Option<f64>) -> Option<String> {
    let reference = profile.provenance.run.reference.as_ref()?;
    let mut medians = reference.median_ns.clone();
    medians.extend(after_run_ns);
    let judged = ReferenceTimings::judge(reference.kernel.clone(), medians, NOISE_THRESHOLD);
    if !judged.noisy {
        return None;
    }
    let fmt = |ns: &[f64]| ns.iter().map(|t| format!("{:.2} ms", t / 1e6)).collect::<Vec<_>>().join(", ");
    Some(match after_run_ns {
        Some(after) if !reference.noisy => format!(
            "the machine's speed changed between calibration and the benchmarks: the reference kernel ({}) took {} during \
             calibration and {:.2} ms after the benchmarks, {:.0}% apart (more than {:.0}%); the errors would measure the load, \
             not the twin. Run it on a quieter machine",
            reference.kernel,
            fmt(&reference.median_ns),
            after / 1e6,
            judged.spread * 100.0,
            NOISE_THRESHOLD * 100.0
        ),
        _ => format!(
            "the machine was too noisy to calibrate: the reference kernel ({}) took {}, {:.0}% apart (more than {:.0}%). \
             Run it on a quieter machine",
            reference.kernel,
            fmt(&reference.median_ns),
            reference.spread * 100.0,
            NOISE_THRESHOLD * 100.0
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn profile(medians: &[f64]) -> Profile {
        let text = include_str!("../../tests/data/cpu-profile/tiny.provenance.toml");
        let mut provenance = crate::calibrate::profile::parse_provenance(text, "tiny.provenance.toml".as_ref()).unwrap();
        provenance.run.reference = Some(ReferenceTimings::judge("gemm 256×1024×1024 f32".into(), medians.to_vec(), NOISE_THRESHOLD));
        Profile { rows: Vec::new(), provenance }
    }

    use crate::calibrate::backend::{AttentionShape, DeviceError, DeviceInfo, GemmShape, Peak, PreparedOp};
    use crate::calibrate::grid::{GridOptions, GridScale};
    use crate::calibrate::run::{RunOptions, SyntheticBackend, calibrate};

    /// The synthetic law with every shape but the reference kernel `factor` times slower: a
    /// neighbour that takes memory bandwidth slows the engine's memory-bound decode shapes, not
    /// the compute-bound reference GEMM, so the reference alone would not see it.
    struct Slowed {
        law: SyntheticBackend,
        factor: f64,
    }
    struct Fixed(f64);
    impl PreparedOp for Fixed {
        fn run_once(&mut self) -> Result<f64, DeviceError> {
            Ok(self.0)
        }
    }
    impl Backend for Slowed {
        fn device_info(&self) -> DeviceInfo {
            self.law.device_info()
        }
        fn peak(&self) -> Peak {
            self.law.peak
        }
        fn supports(&self, dtype: Dtype) -> bool {
            self.law.supports(dtype)
        }
        fn kernel_hashes(&self) -> Vec<(String, String)> {
            vec![]
        }
        fn prepare_gemm(&mut self, shape: &GemmShape) -> Result<Box<dyn PreparedOp + '_>, DeviceError> {
            let reference = *shape == crate::calibrate::noise::reference_shape(shape.dtype);
            Ok(Box::new(Fixed(self.law.gemm_ns(shape) * if reference { 1.0 } else { self.factor })))
        }
        fn prepare_attention(&mut self, shape: &AttentionShape) -> Result<Box<dyn PreparedOp + '_>, DeviceError> {
            Ok(Box::new(Fixed(self.law.attention_ns(shape) * self.factor)))
        }
    }

    fn grid() -> Grid {
        let model = crate::scenario::ModelSpec::preset("Llama-3.2-1B").unwrap();
        Grid::new(GridOptions::for_model(model, vec![1], vec![Dtype::Bf16], GridScale::Tiny))
    }

    fn focus() -> Focus {
        Focus::example()
    }

    #[test]
    fn the_shapes_timed_again_are_the_decode_steps() {
        let grid = grid();
        let law = SyntheticBackend::new(Peak { flops_per_s: 1e15, memory_bytes_per_s: 3e12 }, vec![Dtype::Bf16]);
        let profile = calibrate(&mut law.clone(), &grid, &RunOptions::default()).unwrap();
        let shapes = drift_shapes(&profile, &focus(), &grid);
        let labels: Vec<String> = shapes.iter().map(describe).collect();
        // Each of the five GEMMs at 1 row and at the 8 rows of the most sequences, and the
        // decode of 8 sequences over the longest context.
        assert_eq!(shapes.iter().filter(|s| matches!(s, Shape::Gemm(g) if g.m == 1)).count(), 5, "{labels:?}");
        assert_eq!(shapes.iter().filter(|s| matches!(s, Shape::Gemm(g) if g.m == 8)).count(), 5, "{labels:?}");
        assert_eq!(labels.iter().filter(|l| l.starts_with("attention")).collect::<Vec<_>>(), vec!["attention Decode b8 q1 c48 h32/8/64 bf16"]);
        assert_eq!(shapes.len(), 11, "{labels:?}");
    }

    #[test]
    fn engine_shapes_that_moved_since_calibration_stop_the_verdict() {
        let grid = grid();
        let law = SyntheticBackend::new(Peak { flops_per_s: 1e15, memory_bytes_per_s: 3e12 }, vec![Dtype::Bf16]);
        let timing = TimingOptions { warmup: 0, min_repeats: 1, max_repeats: 1, ..TimingOptions::default() };
        let options = RunOptions { timing, passes: 3, noise_check: true, ..RunOptions::default() };
        let profile = calibrate(&mut law.clone(), &grid, &options).unwrap();
        let shapes = drift_shapes(&profile, &focus(), &grid);
        let judge = |factor: f64| {
            let after = after_run(&mut Slowed { law: law.clone(), factor }, &grid, &profile, &shapes, Dtype::Bf16, &timing);
            (verdict(&profile, &after), after)
        };
        // The same machine, and one 4% slower: within the target, judged.
        let (same, after) = judge(1.0);
        assert_eq!(same, None);
        assert_eq!(after.drift.as_ref().map(|d| (d.shapes.len(), d.ratio)), Some((11, 1.0)));
        assert_eq!(judge(1.04).0, None);
        // 30% slower: the reference kernel is as calibration timed it, the engine's shapes are not.
        let (changed, after) = judge(1.3);
        assert_eq!(after.reference_ns, profile.provenance.run.reference.as_ref().map(|r| r.median_ns[0]));
        let changed = changed.expect("cannot judge");
        assert!(
            changed.contains("changed between calibration and the benchmarks: the engine's 11 shapes take a median of 30% longer than calibration timed them (gemm 1×"),
            "{changed}"
        );
        // And faster alike.
        assert!(judge(0.8).0.is_some_and(|r| r.contains("a median of 20% less")));
    }

    #[test]
    fn a_steady_machine_judges_and_a_changed_or_noisy_one_says_why() {
        let after = |ns: f64| AfterRun { reference_ns: Some(ns), drift: None };
        // Calibration and the run agree within 10%: judged.
        assert_eq!(verdict(&profile(&[5.0e6, 5.1e6, 5.2e6]), &after(5.3e6)), None);
        // The load changed after calibration: the run's timing is 30% over.
        let changed = verdict(&profile(&[5.0e6, 5.1e6, 5.0e6]), &after(6.5e6)).expect("cannot judge");
        assert!(changed.contains("changed between calibration and the benchmarks") && changed.contains("6.50 ms"), "{changed}");
        // A noisy calibration cannot judge, whatever came after.
        let noisy = verdict(&profile(&[5.0e6, 6.5e6]), &after(5.0e6)).expect("cannot judge");
        assert!(noisy.contains("too noisy to calibrate"), "{noisy}");
        // A profile without reference timings (imported, or older) has nothing to judge by.
        let mut bare = profile(&[5.0e6]);
        bare.provenance.run.reference = None;
        assert_eq!(verdict(&bare, &after(9.0e6)), None);
    }
}
