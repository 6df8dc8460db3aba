//! Is a profile consistent with itself? On a busy machine one burst of load can land on one
//! shape: a profile measured beside other work had a 3-row GEMM timed 17× slower than the 5-row
//! GEMM of the same (n, k), and the twin priced every step of 3 sequences from it. Two checks
//! find such shapes, and the run times them again ([`retime`]), a bounded number of times:
//!
//! - **Monotonicity.** More rows, sequences, new or cached tokens are never less work, so along
//!   each axis of a GEMM curve (m) or an attention surface (batch, query, context), a shape that
//!   took more than [`INVERSION_RATIO`] times its larger neighbour is suspect. A shape far above
//!   both neighbours is blamed alone, one far below both alone, otherwise both.
//! - **Noise.** A shape measured in several passes whose pass medians do not agree, no two of
//!   them within [`PASS_AGREEMENT`], has no median to trust.
//!
//! ```text
//!  m        1      2      3      4      5
//!  median  1.0    1.1   17.0    1.2    1.3  ms    3 → 17× its neighbour 4, above 2 as well: 3
//!  re-time 3: passes 17.0, 1.15 disagree → again: 17.0, 1.15, 1.16 → median 1.16 ms, consistent
//! ```
//!
//! A re-time adds a pass to the shape, so its median is the median of more passes; what was
//! re-timed and why goes into the provenance (`run.retimed`), and what stayed inconsistent after
//! the bound (a kernel switch can be a real step) into `run.inconsistent`.

use std::collections::BTreeMap;

use super::backend::DeviceError;
use super::grid::Shape;
use super::timing::{Measurement, percentile_sorted};

/// How many times its larger neighbour's time a shape may take before it is suspect. The
/// kernel switches this must let through are 1.5× at most: the `gemm` crate's few-row path,
/// which the CPU engine no longer runs, took 1.47× at m = 4 what it took at m = 7.
pub const INVERSION_RATIO: f64 = 1.5;

/// Two passes agree when they are this close (relative to the faster).
pub const PASS_AGREEMENT: f64 = 0.25;

/// Re-timings a run makes at most: 32 shapes are under 10 s on a CPU (0.3 s a shape at most).
pub const RETIMES_DEFAULT: u32 = 32;

/// Rounds of checking and re-timing: a shape disturbed in its one pass needs two more to make a
/// median that drops it.
const ROUNDS_MAX: u32 = 3;

/// A shape the checks doubt, and why.
#[derive(Clone, Debug, PartialEq)]
pub struct Suspect {
    /// Its index in the shapes checked.
    pub index: usize,
    pub reason: String,
    /// How far off: the inversion's ratio, or the passes' slowest over fastest.
    pub severity: f64,
}

/// The median the profile will hold for a shape measured in `passes` (each pass's median, ns).
pub fn median_of_passes(passes: &[f64]) -> f64 {
    let mut sorted = passes.to_vec();
    sorted.sort_by(f64::total_cmp);
    percentile_sorted(&sorted, 50.0)
}

/// The shapes that break monotonicity or whose passes disagree. `pass_medians[i]` holds shape
/// `i`'s median in each pass that measured it (empty: not measured, not judged). At most one
/// suspect per shape, its worst reason.
pub fn suspects(shapes: &[Shape], pass_medians: &[Vec<f64>], label: &dyn Fn(&Shape) -> String) -> Vec<Suspect> {
    let mut found: BTreeMap<usize, Suspect> = BTreeMap::new();
    let mut add = |s: Suspect| {
        if found.get(&s.index).is_none_or(|old| old.severity < s.severity) {
            found.insert(s.index, s);
        }
    };
    let ms = |ns: f64| format!("{:.3} ms", ns / 1e6);
    for (index, passes) in pass_medians.iter().enumerate() {
        if passes.len() >= 2 && !agree(passes) {
            let (lo, hi) = passes.iter().fold((f64::INFINITY, 0.0f64), |(lo, hi), &t| (lo.min(t), hi.max(t)));
            let times: Vec<String> = passes.iter().map(|&t| ms(t)).collect();
            add(Suspect { index, reason: format!("its passes disagree ({})", times.join(", ")), severity: hi / lo });
        }
    }
    let median: Vec<Option<f64>> =
        pass_medians.iter().map(|p| (!p.is_empty()).then(|| median_of_passes(p)).filter(|t| *t > 0.0)).collect();
    for line in lines(shapes) {
        let points: Vec<(usize, f64)> = line.into_iter().filter_map(|i| median[i].map(|t| (i, t))).collect();
        for w in 0..points.len().saturating_sub(1) {
            let ((a, ta), (b, tb)) = (points[w], points[w + 1]);
            let ratio = ta / tb;
            if ratio <= INVERSION_RATIO {
                continue;
            }
            // Far above its other neighbour too: a spike. Far below its other neighbour: a dip.
            let spike = w > 0 && ta > INVERSION_RATIO * points[w - 1].1;
            let dip = points.get(w + 2).is_some_and(|&(_, tc)| tb * INVERSION_RATIO < tc);
            let reason = format!("{} took {}, {ratio:.1}× the {} of {}, which has more work", label(&shapes[a]), ms(ta), ms(tb), label(&shapes[b]));
            if !dip {
                add(Suspect { index: a, reason: reason.clone(), severity: ratio });
            }
            if !spike || dip {
                add(Suspect { index: b, reason, severity: ratio });
            }
        }
    }
    found.into_values().collect()
}

/// Whether two of the pass medians lie within [`PASS_AGREEMENT`] of each other.
fn agree(passes: &[f64]) -> bool {
    let mut sorted = passes.to_vec();
    sorted.sort_by(f64::total_cmp);
    sorted.windows(2).any(|w| w[1] <= w[0] * (1.0 + PASS_AGREEMENT))
}

/// The shapes grouped into lines along one axis each (GEMM m; attention batch, query and context
/// lengths), every other coordinate equal, each line sorted along its axis.
fn lines(shapes: &[Shape]) -> Vec<Vec<usize>> {
    // (which axis, every other coordinate) → (the axis's value, index).
    let mut groups: BTreeMap<(u8, Shape), Vec<(u32, usize)>> = BTreeMap::new();
    for (i, shape) in shapes.iter().enumerate() {
        match *shape {
            Shape::Gemm(g) => {
                groups.entry((0, Shape::Gemm(super::backend::GemmShape { m: 0, ..g }))).or_default().push((g.m, i));
            }
            Shape::Attention(a) => {
                let along = [
                    (1, a.batch, super::backend::AttentionShape { batch: 0, ..a }),
                    (2, a.query_len, super::backend::AttentionShape { query_len: 0, ..a }),
                    (3, a.context_len, super::backend::AttentionShape { context_len: 0, ..a }),
                ];
                for (axis, value, rest) in along {
                    groups.entry((axis, Shape::Attention(rest))).or_default().push((value, i));
                }
            }
            Shape::AllReduce(_) | Shape::AllToAll(_) | Shape::Sampling(_) => {}
        }
    }
    groups
        .into_values()
        .filter(|line| line.len() >= 2)
        .map(|mut line| {
            line.sort();
            line.into_iter().map(|(_, i)| i).collect()
        })
        .collect()
}

/// What [`retime`] did.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Retimed {
    /// One line per re-timing: the shape, why, and its median before and after.
    pub notes: Vec<String>,
    /// Shapes still suspect when the re-timings or rounds ran out, with why.
    pub inconsistent: Vec<String>,
}

/// Checks `pass_medians` ([`suspects`]) and times suspects again with `time_shape` (given the
/// shape's index; it returns the repeats of one more pass, or `None` where the shape cannot run
/// now), adding each as a pass, at most
/// `max` times over [`ROUNDS_MAX`] rounds. Within a round, `first` shapes go first (the ones a
/// comparison leans on), then the worst. `max` 0 checks nothing.
pub fn retime(
    shapes: &[Shape],
    pass_medians: &mut [Vec<f64>],
    first: &dyn Fn(&Shape) -> bool,
    max: u32,
    label: &dyn Fn(&Shape) -> String,
    time_shape: &mut dyn FnMut(usize) -> Result<Option<Vec<f64>>, DeviceError>,
) -> Result<Retimed, DeviceError> {
    let mut out = Retimed::default();
    if max == 0 {
        return Ok(out);
    }
    let mut left = max;
    let ms = |ns: f64| format!("{:.3} ms", ns / 1e6);
    for _ in 0..ROUNDS_MAX {
        let mut found = suspects(shapes, pass_medians, label);
        if found.is_empty() || left == 0 {
            break;
        }
        found.sort_by(|a, b| {
            (!first(&shapes[a.index]))
                .cmp(&!first(&shapes[b.index]))
                .then(b.severity.total_cmp(&a.severity))
                .then(a.index.cmp(&b.index))
        });
        for s in found.into_iter().take(left as usize) {
            left -= 1;
            let before = median_of_passes(&pass_medians[s.index]);
            let Some(samples) = time_shape(s.index)? else { continue };
            pass_medians[s.index].push(Measurement::from_samples(&samples).median_ns);
            let after = median_of_passes(&pass_medians[s.index]);
            out.notes.push(format!("{}: {}; median {} → {}", label(&shapes[s.index]), s.reason, ms(before), ms(after)));
        }
    }
    out.inconsistent = suspects(shapes, pass_medians, label)
        .into_iter()
        .map(|s| format!("{}: {}", label(&shapes[s.index]), s.reason))
        .collect();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::calibrate::backend::{AttentionPhase, AttentionShape, GemmShape};
    use crate::scenario::model::Dtype;

    fn gemm(m: u32) -> Shape {
        Shape::Gemm(GemmShape { m, n: 1280, k: 768, dtype: Dtype::Fp32 })
    }

    fn decode(batch: u32, context_len: u32) -> Shape {
        Shape::Attention(AttentionShape {
            phase: AttentionPhase::Decode,
            batch,
            query_len: 1,
            context_len,
            num_heads: 8,
            num_kv_heads: 2,
            head_dim: 64,
            uneven: false,
            dtype: Dtype::Fp32,
        })
    }

    /// A short label of the shapes these tests use (the run labels them with `run::describe`).
    fn label(s: &Shape) -> String {
        match s {
            Shape::Gemm(g) => format!("gemm m{}", g.m),
            Shape::Attention(a) => format!("decode b{} c{}", a.batch, a.context_len),
            _ => unreachable!("only GEMMs and decodes here"),
        }
    }

    fn one_pass(ms: &[f64]) -> Vec<Vec<f64>> {
        ms.iter().map(|&t| if t > 0.0 { vec![t * 1e6] } else { Vec::new() }).collect()
    }

    #[test]
    fn a_spike_is_blamed_alone_and_a_flat_inversion_on_both() {
        let shapes: Vec<Shape> = (1..=5).map(gemm).collect();
        // The issue's profile: m = 3 at 17× m = 5's time, above m = 2's as well.
        let found = suspects(&shapes, &one_pass(&[1.0, 1.1, 17.0, 1.2, 1.0]), &label);
        assert_eq!(found.iter().map(|s| s.index).collect::<Vec<_>>(), vec![2], "{found:?}");
        assert!(found[0].reason.contains("gemm m3 took 17.000 ms, 14.2× the 1.200 ms of gemm m4, which has more work"), "{found:?}");
        // A dip far below both neighbours is blamed alone too.
        let found = suspects(&shapes, &one_pass(&[1.0, 1.1, 0.1, 1.2, 1.3]), &label);
        assert_eq!(found.iter().map(|s| s.index).collect::<Vec<_>>(), vec![2], "{found:?}");
        // The first point above the second: which is wrong cannot be told, so both.
        let found = suspects(&shapes, &one_pass(&[5.0, 1.1, 1.15, 1.2, 1.3]), &label);
        assert_eq!(found.iter().map(|s| s.index).collect::<Vec<_>>(), vec![0, 1], "{found:?}");
        // Within 1.5× (a kernel switch) is no inversion; nor is a shape not measured.
        assert!(suspects(&shapes, &one_pass(&[1.0, 1.4, 1.0, 1.2, 1.3]), &label).is_empty());
        assert!(suspects(&shapes, &one_pass(&[1.0, 1.1, 0.0, 1.2, 1.3]), &label).is_empty());
    }

    #[test]
    fn attention_is_checked_along_each_axis() {
        let shapes = vec![decode(1, 32), decode(2, 32), decode(1, 64), decode(2, 64), decode(1, 128), decode(2, 128)];
        // (2, 64) is 3× slower than (2, 128), which has more context; along the batch axis it
        // is merely slower than (1, 64), as it should be.
        let found = suspects(&shapes, &one_pass(&[1.0, 2.0, 1.5, 9.0, 2.0, 3.0]), &label);
        assert_eq!(found.iter().map(|s| s.index).collect::<Vec<_>>(), vec![3], "{found:?}");
        assert!(found[0].reason.starts_with("decode b2 c64 took 9.000 ms, 3.0× the 3.000 ms of decode b2 c128"), "{found:?}");
    }

    #[test]
    fn passes_that_do_not_agree_are_noise() {
        let shapes = vec![gemm(1)];
        let found = suspects(&shapes, &[vec![1e6, 2.5e6, 4e6]], &label);
        assert!(found.len() == 1 && found[0].reason.contains("its passes disagree (1.000 ms, 2.500 ms, 4.000 ms)"), "{found:?}");
        // Two of three agree: the median is theirs, the third pass drops out.
        assert!(suspects(&shapes, &[vec![1e6, 1.1e6, 4e6]], &label).is_empty());
    }

    #[test]
    fn a_disturbed_shape_is_retimed_until_its_passes_agree_and_the_retimes_are_bounded() {
        let shapes: Vec<Shape> = (1..=5).map(gemm).collect();
        let mut medians = one_pass(&[1.0, 1.1, 17.0, 1.2, 1.3]);
        let mut timed = Vec::new();
        let mut time = |i: usize| -> Result<Option<Vec<f64>>, DeviceError> {
            timed.push(shapes[i]);
            Ok(Some(vec![1.15e6]))
        };
        let out = retime(&shapes, &mut medians, &|_| false, 8, &label, &mut time).unwrap();
        // Once (17 and 1.15 disagree), then again: 17, 1.15, 1.15 → a median of 1.15 ms.
        assert_eq!(timed, vec![gemm(3), gemm(3)]);
        assert_eq!(median_of_passes(&medians[2]), 1.15e6);
        assert_eq!(out.notes.len(), 2, "{out:?}");
        assert!(out.notes[0].starts_with("gemm m3: gemm m3 took 17.000 ms") && out.notes[1].ends_with("median 9.075 ms → 1.150 ms"), "{out:?}");
        assert!(out.inconsistent.is_empty(), "{out:?}");

        // A shape slow every time it is timed stays inconsistent, after at most `max` re-times.
        let mut medians = one_pass(&[1.0, 1.1, 17.0, 1.2, 1.3]);
        let mut count = 0;
        let mut slow = |_: usize| -> Result<Option<Vec<f64>>, DeviceError> {
            count += 1;
            Ok(Some(vec![17e6]))
        };
        let out = retime(&shapes, &mut medians, &|_| false, 1, &label, &mut slow).unwrap();
        assert_eq!(count, 1);
        assert_eq!(out.inconsistent.len(), 1, "{out:?}");
        // Nothing at all when re-timing is off.
        let mut never = |_: usize| -> Result<Option<Vec<f64>>, DeviceError> { panic!("re-timed with max 0") };
        assert_eq!(retime(&shapes, &mut one_pass(&[1.0, 9.0, 1.0, 1.0, 1.0]), &|_| false, 0, &label, &mut never).unwrap(), Retimed::default());
    }

    #[test]
    fn the_shapes_a_comparison_leans_on_are_retimed_first() {
        let shapes: Vec<Shape> = (1..=6).map(gemm).collect();
        // Two spikes; m = 2's is the worse, m = 5's is the comparison's.
        let mut medians = one_pass(&[1.0, 30.0, 1.1, 1.2, 5.0, 1.3]);
        let mut timed = Vec::new();
        let mut time = |i: usize| -> Result<Option<Vec<f64>>, DeviceError> {
            timed.push(shapes[i]);
            Ok(Some(vec![1.2e6]))
        };
        retime(&shapes, &mut medians, &|s| *s == gemm(5), 1, &label, &mut time).unwrap();
        assert_eq!(timed, vec![gemm(5)]);
    }
}
