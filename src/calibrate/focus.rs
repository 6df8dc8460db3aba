//! The shapes one known workload runs, calibrated before the rest of the grid.
//!
//! `validate --engine` knows exactly what its engine will run: one model, a step budget, the
//! sweep's prompt and output lengths. Coarse to fine over the whole grid, a calibration that its
//! budget cut on a busy machine (199–215 of about 330 shapes) could leave the very shapes the
//! comparison prices unmeasured or measured in one pass. A [`Focus`] names the workload's region
//! on each axis the cost model interpolates over; the grid's shapes that bracket it run first in
//! every pass (after the host sampler's), so a cut run still prices the comparison from
//! measurements.
//!
//! ```text
//!  axis values of the grid     1   2   4   8  16  32  64 128 256
//!  the workload's range                  [5 ………… 40]
//!  bracketed (run first)               4   8  16  32  64
//! ```
//!
//! The cost model prices a step by interpolating between measured points, so a point on each side
//! of the range is needed as well as the points inside it.

use std::collections::{BTreeMap, BTreeSet};

use super::backend::{AttentionPhase, AttentionShape};
use super::grid::{Grid, OpKind, Shape};

/// An inclusive range on one axis.
pub type Span = (u32, u32);

/// The attention coordinates one phase of the workload takes: sequences in a step, and the mean
/// new and cached tokens of each (what the cost model looks up).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AttentionRegion {
    pub batch: Span,
    pub query_len: Span,
    pub context_len: Span,
}

/// The region of the grid a workload runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Focus {
    /// GEMM rows of a step: its tokens (the layers' projections) and its sampled rows (the LM head).
    pub gemm_m: Span,
    pub prefill: AttentionRegion,
    pub decode: AttentionRegion,
    pub mixed: AttentionRegion,
}

impl Focus {
    fn region(&self, phase: AttentionPhase) -> &AttentionRegion {
        match phase {
            AttentionPhase::Prefill => &self.prefill,
            AttentionPhase::Decode => &self.decode,
            AttentionPhase::Mixed => &self.mixed,
        }
    }

    /// The shapes of `grid` that bracket the region: on each axis, every grid value inside the
    /// range and the nearest one on either side of it. Each GEMM curve (n, k, dtype) and each
    /// attention surface (phase, heads, dtype, evenness) is bracketed on its own axes, since the
    /// work cap leaves the large ends of some out. The host sampler's shapes are all in.
    pub fn shapes(&self, grid: &Grid) -> BTreeSet<Shape> {
        let mut chosen: BTreeSet<Shape> = grid.sampling.iter().map(|s| Shape::Sampling(*s)).collect();
        let mut curves: BTreeMap<_, Vec<u32>> = BTreeMap::new();
        for g in &grid.gemms {
            curves.entry((g.n, g.k, g.dtype)).or_default().push(g.m);
        }
        for g in &grid.gemms {
            if within(&curves[&(g.n, g.k, g.dtype)], self.gemm_m, g.m) {
                chosen.insert(Shape::Gemm(*g));
            }
        }
        let surface = |a: &AttentionShape| (a.phase, a.num_heads, a.num_kv_heads, a.head_dim, a.dtype, a.uneven);
        let mut axes: BTreeMap<_, [Vec<u32>; 3]> = BTreeMap::new();
        for a in &grid.attention {
            let [b, q, c] = axes.entry(surface(a)).or_default();
            b.push(a.batch);
            q.push(a.query_len);
            c.push(a.context_len);
        }
        for a in &grid.attention {
            let [b, q, c] = &axes[&surface(a)];
            let r = self.region(a.phase);
            if within(b, r.batch, a.batch) && within(q, r.query_len, a.query_len) && within(c, r.context_len, a.context_len) {
                chosen.insert(Shape::Attention(*a));
            }
        }
        chosen
    }

    /// `order` (a grid's run order) with the focused shapes moved to the front, each part keeping
    /// its order; the host sampler's shapes, which lead the run order, stay first.
    pub fn reorder(&self, grid: &Grid, order: Vec<Shape>) -> Vec<Shape> {
        let focused = self.shapes(grid);
        let (mut first, rest): (Vec<Shape>, Vec<Shape>) =
            order.into_iter().partition(|s| s.kind() == OpKind::Sampling || focused.contains(s));
        first.sort_by_key(|s| s.kind() != OpKind::Sampling);
        first.extend(rest);
        first
    }
}

#[cfg(test)]
impl Focus {
    /// The tests' workload: 8 sequences of 32 prompt tokens and 16 output tokens under a
    /// 128-token step budget.
    pub(crate) fn example() -> Focus {
        Focus {
            gemm_m: (1, 128),
            prefill: AttentionRegion { batch: (1, 4), query_len: (1, 32), context_len: (0, 0) },
            decode: AttentionRegion { batch: (1, 8), query_len: (1, 1), context_len: (32, 48) },
            mixed: AttentionRegion { batch: (1, 8), query_len: (1, 32), context_len: (1, 32) },
        }
    }
}

/// Whether `value` lies within `span` widened to the nearest values of `axis` outside it: the
/// largest value at or below its start and the smallest at or above its end (the axis's ends
/// where none is).
fn within(axis: &[u32], span: Span, value: u32) -> bool {
    let (lo, hi) = (span.0.min(span.1), span.0.max(span.1));
    let below = axis.iter().copied().filter(|&v| v <= lo).max().unwrap_or(0);
    let above = axis.iter().copied().filter(|&v| v >= hi).min().unwrap_or(u32::MAX);
    (below..=above).contains(&value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::calibrate::grid::{GridOptions, GridScale};
    use crate::scenario::ModelSpec;
    use crate::scenario::model::Dtype;

    fn grid() -> Grid {
        let model = ModelSpec::preset("Llama-3.2-1B").unwrap();
        let options = GridOptions { sampling_rows: 32, ..GridOptions::for_model(model, vec![1], vec![Dtype::Fp32], GridScale::Tiny) };
        Grid::new(options)
    }

    fn focus() -> Focus {
        Focus::example()
    }

    #[test]
    fn a_range_takes_the_axis_values_inside_it_and_one_on_each_side() {
        let axis = [1, 2, 4, 8, 16, 32, 64, 128, 256];
        let inside: Vec<u32> = axis.iter().copied().filter(|&v| within(&axis, (5, 40), v)).collect();
        assert_eq!(inside, vec![4, 8, 16, 32, 64]);
        // A range on grid points needs nothing beyond them; one past the axis takes its end.
        assert_eq!(axis.iter().filter(|&&v| within(&axis, (8, 16), v)).count(), 2);
        let past: Vec<u32> = axis.iter().copied().filter(|&v| within(&axis, (200, 900), v)).collect();
        assert_eq!(past, vec![128, 256]);
    }

    #[test]
    fn the_workloads_shapes_bracket_every_coordinate_it_prices() {
        let grid = grid();
        let f = focus();
        let shapes = f.shapes(&grid);
        assert!(shapes.len() < grid.len() / 2, "{} of {}", shapes.len(), grid.len());
        // Every decode the workload runs (1–8 sequences over 32–48 cached tokens) has measured
        // points on both sides, on every axis.
        let decode: Vec<&AttentionShape> = shapes
            .iter()
            .filter_map(|s| match s {
                Shape::Attention(a) if a.phase == AttentionPhase::Decode && !a.uneven => Some(a),
                _ => None,
            })
            .collect();
        let contexts: BTreeSet<u32> = decode.iter().map(|a| a.context_len).collect();
        let batches: BTreeSet<u32> = decode.iter().map(|a| a.batch).collect();
        assert_eq!(contexts.into_iter().collect::<Vec<_>>(), vec![32, 48]);
        assert_eq!(batches.into_iter().collect::<Vec<_>>(), vec![1, 2, 4, 8]);
        // Decodes over 1,024 tokens are in the grid, and not in the workload's region.
        assert!(grid.attention.iter().any(|a| a.phase == AttentionPhase::Decode && a.context_len == 1024));
        // Every GEMM row count up to the step budget, and the sampler.
        for g in &grid.gemms {
            assert_eq!(shapes.contains(&Shape::Gemm(*g)), g.m <= 128, "{g:?}");
        }
        assert!(grid.sampling.iter().all(|s| shapes.contains(&Shape::Sampling(*s))));
    }

    #[test]
    fn the_run_order_puts_the_sampler_then_the_workloads_shapes_first() {
        let grid = grid();
        let f = focus();
        let focused = f.shapes(&grid);
        let order = f.reorder(&grid, grid.shapes_in_run_order());
        assert_eq!(order.len(), grid.len());
        let samplers = grid.sampling.len();
        assert!(order[..samplers].iter().all(|s| s.kind() == OpKind::Sampling));
        assert!(order[..focused.len()].iter().all(|s| focused.contains(s)));
        assert!(order[focused.len()..].iter().all(|s| !focused.contains(s)));
        // Each part keeps the grid's coarse-to-fine order.
        let plain: Vec<Shape> = grid.shapes_in_run_order().into_iter().filter(|s| !focused.contains(s)).collect();
        assert_eq!(order[focused.len()..], plain[..]);
    }
}
