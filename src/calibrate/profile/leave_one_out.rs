//! How well a profile's interpolation predicts its own measurements: each point, or each GEMM
//! shape, left out and predicted from the rest.

use std::collections::BTreeMap;

use super::index::{AttentionKey, NS_PER_S, ProfileIndex, attention_key};
use super::{Profile, ProfileRow};
use crate::calibrate::backend::GemmShape;
use crate::calibrate::grid::{Shape, gemm_work};
use crate::calibrate::timing::percentile_sorted;
use crate::scenario::model::Dtype;

/// Leave-one-out relative errors of a profile's interpolation: each measured GEMM and attention
/// point predicted from the others of its curve or surface.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LeaveOneOut {
    /// `|predicted − measured| / measured` per GEMM point, in row order.
    pub gemm: Vec<f64>,
    pub attention: Vec<f64>,
    /// Points alone in their curve, regime or surface (nothing to predict them from): among them
    /// every single-row GEMM.
    pub alone: usize,
    /// Points not predicted because their curve or surface has more than
    /// [`LEAVE_ONE_OUT_POINTS_PER_GROUP`] (an evenly spaced sample of it is predicted instead).
    pub not_sampled: usize,
}

/// The most points of one curve or surface that [`leave_one_out`] predicts. Each prediction
/// rebuilds its curve or surface from the other points, so a group of n points costs n rebuilds
/// of n points; published tables time GEMMs at every m from 1 to 2048, which made `calibrate
/// import` run for many minutes on one summary line. An evenly spaced sample of 64 (each still
/// predicted from all the others) judges the interpolation as well.
pub const LEAVE_ONE_OUT_POINTS_PER_GROUP: usize = 64;

impl LeaveOneOut {
    pub fn all(&self) -> Vec<f64> {
        self.gemm.iter().chain(&self.attention).copied().collect()
    }

    /// (median, p90) of `errors` (numpy's percentiles); NaN when empty.
    pub fn summary(errors: &[f64]) -> (f64, f64) {
        let mut sorted = errors.to_vec();
        sorted.sort_by(f64::total_cmp);
        (
            percentile_sorted(&sorted, 50.0),
            percentile_sorted(&sorted, 90.0),
        )
    }
}

/// Drops each GEMM and attention point of `profile` in turn and predicts it from the rest of its
/// curve (GEMM: same `n`, `k`, dtype, m ≥ 2; a single-row GEMM is its own regime, see
/// [`GemmCurve`](super::interpolate::GemmCurve), and so is `alone`) or surface (attention: same
/// phase, dtype, heads, evenness).
pub fn leave_one_out(profile: &Profile) -> LeaveOneOut {
    let (points, alone, not_sampled) = leave_one_out_points(profile);
    let mut result = LeaveOneOut { alone, not_sampled, ..LeaveOneOut::default() };
    for (shape, error) in points {
        match shape {
            Shape::Gemm(_) => result.gemm.push(error),
            Shape::Attention(_) => result.attention.push(error),
            Shape::AllReduce(_) | Shape::AllToAll(_) | Shape::Sampling(_) => {}
        }
    }
    result
}

/// [`leave_one_out`] point by point: each predicted GEMM and attention shape with its relative
/// error, in row order within each curve or surface; then the points alone in theirs, and those
/// not sampled. What a refining calibration (`calibrate::refine`) reads to find where the
/// interpolation is worst.
pub fn leave_one_out_points(profile: &Profile) -> (Vec<(Shape, f64)>, usize, usize) {
    let peak = profile.peak();
    type GroupKey = (u8, Option<AttentionKey>, Option<(Dtype, u32, u32, bool)>);
    let mut groups: BTreeMap<GroupKey, Vec<&ProfileRow>> = BTreeMap::new();
    for row in &profile.rows {
        match &row.shape {
            Shape::Gemm(g) => groups.entry((0, None, Some((g.dtype, g.n, g.k, g.m == 1)))).or_default().push(row),
            Shape::Attention(a) => groups.entry((1, Some(attention_key(a)), None)).or_default().push(row),
            Shape::AllReduce(_) | Shape::AllToAll(_) | Shape::Sampling(_) => {}
        }
    }
    let (mut points, mut alone, mut not_sampled) = (Vec::new(), 0, 0);
    for rows in groups.values() {
        if rows.len() < 2 {
            alone += rows.len();
            continue;
        }
        let sampled = rows.len().min(LEAVE_ONE_OUT_POINTS_PER_GROUP);
        not_sampled += rows.len() - sampled;
        // The first and the last point, and evenly between (every point of a small group).
        for i in (0..sampled).map(|s| if sampled == 1 { 0 } else { s * (rows.len() - 1) / (sampled - 1) }) {
            let row = rows[i];
            let index =
                ProfileIndex::from_rows(rows.iter().enumerate().filter(|&(j, _)| j != i).map(|(_, r)| *r), peak);
            let measured = row.measurement.median_ns;
            let predicted = match &row.shape {
                Shape::Gemm(g) => index.predict_gemm_ns(g).expect("curve of the group"),
                Shape::Attention(a) => index.predict_attention_ns(a).expect("surface of the group"),
                Shape::AllReduce(_) | Shape::AllToAll(_) | Shape::Sampling(_) => continue,
            };
            points.push((row.shape, (predicted - measured).abs() / measured));
        }
    }
    (points, alone, not_sampled)
}

/// Drops each interior GEMM shape `(dtype, n, k)` of a profile measured on an (n, k) grid in
/// turn and predicts its points from the curves around it (see [`ProfileIndex::gemm_curve`]):
/// how well the profile prices a model's GEMM shapes that fall between its grid points. The
/// relative errors, one per point predicted; empty for a profile with no interior shape.
pub fn leave_one_gemm_shape_out(profile: &Profile) -> Vec<f64> {
    let index = ProfileIndex::new(profile);
    let mut rows_of: BTreeMap<(Dtype, u32, u32), Vec<(GemmShape, f64)>> = BTreeMap::new();
    for row in &profile.rows {
        if let Shape::Gemm(g) = row.shape {
            rows_of.entry((g.dtype, g.n, g.k)).or_default().push((g, row.measurement.median_ns));
        }
    }
    let mut errors = Vec::new();
    for (&(dtype, n, k), rows) in &rows_of {
        // The grid without this shape's n and k: its neighbours on each axis span the cell.
        let (mut ns, mut ks) = index.gemm_axes(dtype);
        let interior = |axis: &[u32], v: u32| axis.first().is_some_and(|&lo| v > lo) && axis.last().is_some_and(|&hi| v < hi);
        if !(interior(&ns, n) && interior(&ks, k)) {
            continue;
        }
        ns.retain(|&x| x != n);
        ks.retain(|&x| x != k);
        let Some(curve) = index.interpolate_gemm(dtype, n, k, &ns, &ks) else { continue };
        for (shape, measured) in rows {
            let util = curve.eval(shape.m as f64).exp();
            let predicted = gemm_work(shape).roofline_s(&index.peak) * NS_PER_S / util;
            errors.push((predicted - measured).abs() / measured);
        }
    }
    errors
}
