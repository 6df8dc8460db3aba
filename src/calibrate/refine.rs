//! A grid that converges: after a calibration run, shapes are added where the profile's own
//! interpolation predicts its points worst, until each kind's leave-one-out median is under its
//! target, the budget is spent, or nothing is left to add.
//!
//! ```text
//!  profile ─► leave-one-out error of every point ─► kinds (GEMM, attention) over their target
//!     ▲            ─► their worst points ─► midpoints with each neighbour (GEMM: in ln m;
//!     │               attention: in ln batch, ln query length, ln context, one axis at a time)
//!     └──────────── time the new shapes, add their rows ◄┘
//! ```
//!
//! Why midpoints beside the worst points: a point's leave-one-out error is how far the curve or
//! surface through its neighbours misses it, which is largest where the kernel's time bends
//! between widely spaced points (a tile-size or wave change, the knee of the roofline); halving
//! the spacing there is what lowers it, and a smooth region needs no more points.

use std::collections::BTreeSet;
use std::time::Duration;

use super::backend::{AttentionPhase, AttentionShape, Backend, DeviceError, GemmShape};
use super::grid::{Grid, Shape, model_gemm_nk};
use super::profile::{LeaveOneOut, OpLeaveOneOut, Profile, ProfileRow, RefineSummary, leave_one_out_points};
use super::run::{describe, measure_shape};
use super::timing::{Measurement, TimingOptions};

/// When refinement stops.
#[derive(Clone, Debug, PartialEq)]
pub struct RefineOptions {
    /// Leave-one-out median to reach, relative (0.05 = 5%), for GEMMs and for attention.
    pub gemm_target: f64,
    pub attention_target: f64,
    /// Stop starting new shapes once the run's clock reads this.
    pub budget: Option<Duration>,
    /// Worst points of each kind over its target refined per round.
    pub points_per_round: usize,
    pub rounds_max: u32,
    /// Shapes added at most (a cut at the same shape on every machine, as `--max-shapes`).
    pub added_max: Option<u64>,
    pub timing: TimingOptions,
}

/// Targets of issue 37: a GEMM median of 5%, an attention median of 10%.
pub const GEMM_TARGET: f64 = 0.05;
pub const ATTENTION_TARGET: f64 = 0.10;

impl Default for RefineOptions {
    fn default() -> Self {
        RefineOptions {
            gemm_target: GEMM_TARGET,
            attention_target: ATTENTION_TARGET,
            budget: None,
            points_per_round: 16,
            rounds_max: 64,
            added_max: None,
            timing: TimingOptions::default(),
        }
    }
}

/// Fewest points of a kind whose median is judged: fewer cannot say the interpolation is good.
const POINTS_MIN: usize = 3;

/// The median leave-one-out error of each kind, `None` when it has too few points.
fn medians(loo: &LeaveOneOut) -> (Option<f64>, Option<f64>) {
    let median = |e: &[f64]| (e.len() >= POINTS_MIN).then(|| LeaveOneOut::summary(e).0);
    (median(&loo.gemm), median(&loo.attention))
}

/// Adds shapes to `profile` (measured on `backend` over `grid`) until the targets of `options`
/// hold; `elapsed` is the run's clock for the budget. Records what it did in the provenance
/// (`run.refine`) and returns it. Shapes that cannot run are skipped; an unavailable device ends
/// it with the error.
pub fn refine(
    backend: &mut dyn Backend,
    grid: &Grid,
    profile: &mut Profile,
    options: &RefineOptions,
    elapsed: &dyn Fn() -> Duration,
) -> Result<RefineSummary, DeviceError> {
    let peak = profile.peak();
    let before = medians(&crate::calibrate::profile::leave_one_out(profile));
    let mut tried: BTreeSet<Shape> = profile.rows.iter().map(|r| r.shape).collect();
    let mut summary = RefineSummary {
        gemm_target: options.gemm_target,
        attention_target: options.attention_target,
        gemm_before: before.0,
        attention_before: before.1,
        ..RefineSummary::default()
    };
    let out_of_time = |added: u64| options.budget.is_some_and(|b| elapsed() >= b) || options.added_max.is_some_and(|max| added >= max);
    let stop = loop {
        let (points, _, _) = leave_one_out_points(profile);
        let loo = split(&points);
        let (gemm, attention) = medians(&loo);
        let over = |median: Option<f64>, target: f64| median.is_some_and(|m| m > target);
        let (gemm_over, attention_over) = (over(gemm, options.gemm_target), over(attention, options.attention_target));
        if !gemm_over && !attention_over {
            break "targets met";
        }
        if summary.rounds >= options.rounds_max {
            break "round limit";
        }
        if out_of_time(summary.added) {
            break "budget spent";
        }
        let mut worst: Vec<&(Shape, f64)> = points
            .iter()
            .filter(|(s, _)| match s {
                Shape::Gemm(_) => gemm_over,
                Shape::Attention(_) => attention_over,
                _ => false,
            })
            .collect();
        worst.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        let (mut gemm_picked, mut attention_picked) = (0, 0);
        let mut new_shapes: Vec<Shape> = Vec::new();
        for (shape, _) in worst {
            let picked = if matches!(shape, Shape::Gemm(_)) { &mut gemm_picked } else { &mut attention_picked };
            if *picked >= options.points_per_round {
                continue;
            }
            let candidates: Vec<Shape> =
                midpoints(profile, shape).into_iter().filter(|c| !tried.contains(c)).collect();
            if !candidates.is_empty() {
                *picked += 1;
            }
            for c in candidates {
                tried.insert(c);
                new_shapes.push(c);
            }
        }
        if new_shapes.is_empty() {
            break "no midpoint left";
        }
        summary.rounds += 1;
        let mut cut = false;
        for shape in new_shapes {
            if out_of_time(summary.added) {
                cut = true;
                break;
            }
            match measure_shape(backend, grid, &shape, &options.timing) {
                Ok(Some(samples)) => {
                    profile.rows.push(ProfileRow::new(shape, Measurement::from_samples(&samples), &peak));
                    summary.added += 1;
                }
                Ok(None) | Err(DeviceError::Unsupported(_)) => {}
                Err(e @ DeviceError::Unavailable(_)) => return Err(e),
                Err(DeviceError::Failed(reason)) => summary.failed.push(format!("{}: {reason}", describe(&shape))),
            }
        }
        profile.rows.sort_by_key(|r| r.shape);
        if cut {
            break "budget spent";
        }
    };
    let after = medians(&crate::calibrate::profile::leave_one_out(profile));
    summary.gemm_after = after.0;
    summary.attention_after = after.1;
    summary.stopped = stop.to_string();
    summary.per_op = per_op(profile, grid);
    profile.provenance.run.measured += summary.added;
    profile.provenance.run.refine = Some(summary.clone());
    Ok(summary)
}

fn split(points: &[(Shape, f64)]) -> LeaveOneOut {
    let mut loo = LeaveOneOut::default();
    for (shape, e) in points {
        match shape {
            Shape::Gemm(_) => loo.gemm.push(*e),
            Shape::Attention(_) => loo.attention.push(*e),
            _ => {}
        }
    }
    loo
}

/// The rounded geometric mean of `a < b`, when it lies strictly between them (the interpolation
/// runs in logarithms, so this halves the cell there).
fn between(a: u32, b: u32) -> Option<u32> {
    let (lo, hi) = (a.min(b), a.max(b));
    let mid = if lo == 0 { (lo + hi) / 2 } else { ((lo as f64) * (hi as f64)).sqrt().round() as u32 };
    (mid > lo && mid < hi).then_some(mid)
}

/// Midpoints between `shape` and each of its neighbours in the profile: along m for a GEMM
/// (its curve: same n, k, dtype; a single row is its own regime), along each of batch, query
/// length and context for attention (its surface: same phase, dtype, heads, evenness, the other
/// two coordinates equal).
fn midpoints(profile: &Profile, shape: &Shape) -> Vec<Shape> {
    let mut out = Vec::new();
    match shape {
        Shape::Gemm(g) if g.m >= 2 => {
            let ms: Vec<u32> = profile
                .rows
                .iter()
                .filter_map(|r| match r.shape {
                    Shape::Gemm(o) if (o.n, o.k, o.dtype) == (g.n, g.k, g.dtype) && o.m >= 2 => Some(o.m),
                    _ => None,
                })
                .collect();
            for m in neighbour_midpoints(&ms, g.m) {
                out.push(Shape::Gemm(GemmShape { m, ..*g }));
            }
        }
        Shape::Attention(a) => {
            let same_surface = |o: &AttentionShape| {
                (o.phase, o.dtype, o.num_heads, o.num_kv_heads, o.head_dim, o.uneven)
                    == (a.phase, a.dtype, a.num_heads, a.num_kv_heads, a.head_dim, a.uneven)
            };
            let coords = |s: &AttentionShape| [s.batch, s.query_len, s.context_len];
            let surface: Vec<[u32; 3]> = profile
                .rows
                .iter()
                .filter_map(|r| match &r.shape {
                    Shape::Attention(o) if same_surface(o) => Some(coords(o)),
                    _ => None,
                })
                .collect();
            let at = coords(a);
            for axis in 0..3 {
                // Decode has one query token; prefill no context: those axes stay.
                if (axis == 1 && a.phase == AttentionPhase::Decode) || (axis == 2 && a.phase == AttentionPhase::Prefill) {
                    continue;
                }
                let line: Vec<u32> = surface
                    .iter()
                    .filter(|c| (0..3).all(|j| j == axis || c[j] == at[j]))
                    .map(|c| c[axis])
                    .collect();
                for value in neighbour_midpoints(&line, at[axis]) {
                    let mut c = at;
                    c[axis] = value;
                    let new = AttentionShape { batch: c[0], query_len: c[1], context_len: c[2], ..*a };
                    if new.check().is_ok() {
                        out.push(Shape::Attention(new));
                    }
                }
            }
        }
        _ => {}
    }
    out
}

/// Midpoints between `value` and its nearest smaller and larger neighbours in `axis`.
fn neighbour_midpoints(axis: &[u32], value: u32) -> Vec<u32> {
    let below = axis.iter().copied().filter(|&v| v < value).max();
    let above = axis.iter().copied().filter(|&v| v > value).min();
    [below, above].into_iter().flatten().filter_map(|n| between(n, value)).collect()
}

/// Leave-one-out error per op: GEMMs by the projection of the grid's models whose (n, k) they
/// have (the first match; "GEMM n×k" for none), attention by phase.
pub fn per_op(profile: &Profile, grid: &Grid) -> Vec<OpLeaveOneOut> {
    let (points, _, _) = leave_one_out_points(profile);
    let tps: &[u32] = if grid.options.tensor_parallel.is_empty() { &[1] } else { &grid.options.tensor_parallel };
    let gemm_name = |g: &GemmShape| {
        for model in &grid.options.models {
            for &tp in tps {
                if let Some((op, _, _)) = model_gemm_nk(model, tp).into_iter().find(|&(_, n, k)| (n, k) == (g.n, g.k)) {
                    return format!("GEMM {}", op.name());
                }
            }
        }
        format!("GEMM {}×{}", g.n, g.k)
    };
    let mut by_op: std::collections::BTreeMap<String, Vec<f64>> = std::collections::BTreeMap::new();
    for (shape, e) in &points {
        let name = match shape {
            Shape::Gemm(g) => gemm_name(g),
            Shape::Attention(a) => format!("attention {}", phase_name(a.phase)),
            _ => continue,
        };
        by_op.entry(name).or_default().push(*e);
    }
    by_op
        .into_iter()
        .map(|(name, errors)| {
            let (median, p90) = LeaveOneOut::summary(&errors);
            OpLeaveOneOut { op: name, points: errors.len(), median, p90 }
        })
        .collect()
}

fn phase_name(phase: AttentionPhase) -> &'static str {
    match phase {
        AttentionPhase::Prefill => "prefill",
        AttentionPhase::Decode => "decode",
        AttentionPhase::Mixed => "mixed",
    }
}

/// Lines for the end of a run: how refinement went, then the leave-one-out error per op.
pub fn report(summary: &RefineSummary) -> String {
    let pct = |x: Option<f64>| x.map_or("–".to_string(), |v| format!("{:.1}%", v * 100.0));
    let mut out = format!(
        "refined the grid: {} shapes added in {} rounds, stopped: {}; leave-one-out median GEMM {} → {} (target {:.0}%), attention {} → {} (target {:.0}%)",
        summary.added,
        summary.rounds,
        summary.stopped,
        pct(summary.gemm_before),
        pct(summary.gemm_after),
        summary.gemm_target * 100.0,
        pct(summary.attention_before),
        pct(summary.attention_after),
        summary.attention_target * 100.0,
    );
    for o in &summary.per_op {
        out.push_str(&format!(
            "\n  leave-one-out {}: median {:.1}%, p90 {:.1}% over {} points",
            o.op,
            o.median * 100.0,
            o.p90 * 100.0,
            o.points
        ));
    }
    for failure in &summary.failed {
        out.push_str(&format!("\n  failed: {failure}"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::calibrate::backend::Peak;
    use crate::calibrate::grid::{GridOptions, GridScale, model_heads};
    use crate::calibrate::run::{RunOptions, SyntheticBackend, calibrate};
    use crate::scenario::{Dtype, ModelSpec};

    fn peak() -> Peak {
        Peak { flops_per_s: 1e15, memory_bytes_per_s: 3e12 }
    }

    /// A deliberately coarse grid of Llama-3.2-1B's shapes at TP 1: a few m per projection, a
    /// 2 × 2 decode surface and a 2 × 2 prefill one, so the first profile interpolates badly.
    fn coarse_grid() -> Grid {
        let model = ModelSpec::preset("Llama-3.2-1B").unwrap();
        let options = GridOptions::for_model(model.clone(), vec![1], vec![Dtype::Bf16], GridScale::Tiny);
        let gemms = model_gemm_nk(&model, 1)
            .into_iter()
            .flat_map(|(_, n, k)| [2u32, 64, 4096].map(|m| GemmShape { m, n, k, dtype: Dtype::Bf16 }))
            .collect();
        let h = model_heads(&model, 1);
        let attention = |phase, batch, query_len, context_len| AttentionShape {
            phase,
            batch,
            query_len,
            context_len,
            num_heads: h.num_heads,
            num_kv_heads: h.num_kv_heads,
            head_dim: h.head_dim,
            uneven: false,
            dtype: Dtype::Bf16,
        };
        let mut attn = Vec::new();
        for batch in [1, 256] {
            for context in [16, 16_384] {
                attn.push(attention(AttentionPhase::Decode, batch, 1, context));
            }
            for query in [16, 8192] {
                attn.push(attention(AttentionPhase::Prefill, batch.min(4), query, 0));
            }
        }
        Grid { options, gemms, attention: attn, allreduce: Vec::new(), sampling: Vec::new() }
    }

    fn measured(grid: &Grid) -> (SyntheticBackend, Profile) {
        let mut backend = SyntheticBackend::new(peak(), vec![Dtype::Bf16]);
        let timing = TimingOptions { warmup: 0, min_repeats: 1, max_repeats: 1, ..TimingOptions::default() };
        let profile = calibrate(&mut backend, grid, &RunOptions { timing, ..RunOptions::default() }).unwrap();
        (backend, profile)
    }

    fn exact() -> RefineOptions {
        RefineOptions { timing: TimingOptions { warmup: 0, min_repeats: 1, max_repeats: 1, ..TimingOptions::default() }, ..RefineOptions::default() }
    }

    #[test]
    fn a_coarse_grid_converges_to_the_targets_and_stops_there() {
        let grid = coarse_grid();
        let (mut backend, mut profile) = measured(&grid);
        let start = profile.rows.len();
        let summary = refine(&mut backend, &grid, &mut profile, &exact(), &|| Duration::ZERO).unwrap();
        println!("{}", report(&summary));
        // It had work to do: both kinds started over their targets.
        assert!(summary.gemm_before.unwrap() > GEMM_TARGET, "{summary:?}");
        assert!(summary.attention_before.unwrap() > ATTENTION_TARGET, "{summary:?}");
        // It stopped because both targets hold, with the rows it added in the profile.
        assert_eq!(summary.stopped, "targets met", "{summary:?}");
        assert!(summary.gemm_after.unwrap() <= GEMM_TARGET && summary.attention_after.unwrap() <= ATTENTION_TARGET);
        assert_eq!(profile.rows.len() as u64, start as u64 + summary.added);
        assert!(summary.added > 0 && summary.rounds > 0);
        assert!(profile.rows.windows(2).all(|w| w[0].shape < w[1].shape), "rows stay sorted and distinct");
        assert_eq!(profile.provenance.run.refine.as_ref(), Some(&summary));
        // Per op: every projection of the model and both attention phases.
        let ops: Vec<&str> = summary.per_op.iter().map(|o| o.op.as_str()).collect();
        for op in ["GEMM QKV", "GEMM O", "GEMM gate+up", "GEMM down", "GEMM LM head", "attention decode", "attention prefill"] {
            assert!(ops.contains(&op), "{op} missing from {ops:?}");
        }
        // Stopping on the target, not running on: a looser GEMM target takes fewer shapes.
        let (mut backend, mut loose) = measured(&grid);
        let looser = RefineOptions { gemm_target: 0.2, attention_target: 0.3, ..exact() };
        let fewer = refine(&mut backend, &grid, &mut loose, &looser, &|| Duration::ZERO).unwrap();
        assert_eq!(fewer.stopped, "targets met");
        assert!(fewer.added < summary.added, "{} vs {}", fewer.added, summary.added);
        // Deterministic: the same run adds the same shapes.
        let (mut backend, mut again) = measured(&grid);
        refine(&mut backend, &grid, &mut again, &exact(), &|| Duration::ZERO).unwrap();
        let shapes = |p: &Profile| p.rows.iter().map(|r| r.shape).collect::<Vec<_>>();
        assert_eq!(shapes(&again), shapes(&profile));
    }

    #[test]
    fn the_budget_and_the_round_limit_stop_it_too() {
        let grid = coarse_grid();
        let (mut backend, mut profile) = measured(&grid);
        let spent = RefineOptions { budget: Some(Duration::from_secs(1)), ..exact() };
        let summary = refine(&mut backend, &grid, &mut profile, &spent, &|| Duration::from_secs(2)).unwrap();
        assert_eq!((summary.stopped.as_str(), summary.added), ("budget spent", 0));
        let (mut backend, mut profile) = measured(&grid);
        let five = RefineOptions { added_max: Some(5), ..exact() };
        let summary = refine(&mut backend, &grid, &mut profile, &five, &|| Duration::ZERO).unwrap();
        assert_eq!((summary.stopped.as_str(), summary.added), ("budget spent", 5));
        let (mut backend, mut profile) = measured(&grid);
        let one = RefineOptions { rounds_max: 1, ..exact() };
        let summary = refine(&mut backend, &grid, &mut profile, &one, &|| Duration::ZERO).unwrap();
        assert_eq!((summary.stopped.as_str(), summary.rounds), ("round limit", 1));
        assert!(summary.added > 0);
    }

    #[test]
    fn midpoints_halve_the_cells_beside_a_point() {
        assert_eq!(between(2, 8), Some(4));
        assert_eq!(between(64, 4096), Some(512));
        assert_eq!(between(3, 4), None);
        assert_eq!(between(0, 16), Some(8));
        assert_eq!(neighbour_midpoints(&[2, 64, 4096], 64), vec![11, 512]);
        assert_eq!(neighbour_midpoints(&[2, 64, 4096], 2), vec![11]);
    }
}
