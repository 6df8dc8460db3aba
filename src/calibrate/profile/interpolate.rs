//! The interpolation a profile's measurements are read through: piecewise-linear curves, GEMM
//! curves in ln m with their single-row regime, and trilinear surfaces with their holes filled.

#[inline]
pub(crate) fn ln1(x: f64) -> f64 {
    // ln 1 is 0 exactly: decode prices (query length 1) skip the call, about a tenth of a
    // default-path run's logarithms (issue 33). NaN gives 0 too, as `x.max(1.0).ln()` did.
    if x > 1.0 { x.ln() } else { 0.0 }
}

/// Piecewise-linear `y(x)` through sorted points, held constant outside them.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Curve {
    pub(crate) xs: Vec<f64>,
    pub(crate) ys: Vec<f64>,
}

impl Curve {
    /// From `(x, y)` points in any order; equal `x` are averaged. `None` when empty.
    pub(crate) fn new(mut points: Vec<(f64, f64)>) -> Option<Curve> {
        if points.is_empty() {
            return None;
        }
        points.sort_by(|a, b| a.0.total_cmp(&b.0));
        let mut xs: Vec<f64> = Vec::with_capacity(points.len());
        let mut ys: Vec<f64> = Vec::with_capacity(points.len());
        let mut count = 0.0;
        for (x, y) in points {
            if xs.last() == Some(&x) {
                let last = ys.len() - 1;
                ys[last] = (ys[last] * count + y) / (count + 1.0);
                count += 1.0;
            } else {
                xs.push(x);
                ys.push(y);
                count = 1.0;
            }
        }
        Some(Curve { xs, ys })
    }

    #[inline]
    pub(crate) fn eval(&self, x: f64) -> f64 {
        let (i, t) = bracket(&self.xs, x);
        if t == 0.0 { self.ys[i] } else { self.ys[i] + (self.ys[i + 1] - self.ys[i]) * t }
    }
}

/// ln utilisation of one GEMM `(n, k, dtype)`, linear in ln m. A single row (m = 1) is a
/// matrix–vector product, which BLAS libraries (cuBLASLt, the `gemm` crate) run with a different
/// kernel than m ≥ 2 — several times faster per row on a CPU — so it is its own regime: used for
/// m = 1 only, never interpolated towards m = 2.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct GemmCurve {
    pub(crate) single_row: Option<f64>,
    pub(crate) rows: Option<Curve>,
}

impl GemmCurve {
    /// From `(m, ln utilisation)` points; `None` when empty.
    pub(crate) fn new(points: Vec<(u32, f64)>) -> Option<GemmCurve> {
        let ones: Vec<f64> = points.iter().filter(|(m, _)| *m <= 1).map(|(_, u)| *u).collect();
        let single_row = (!ones.is_empty()).then(|| ones.iter().sum::<f64>() / ones.len() as f64);
        let rows = Curve::new(points.iter().filter(|(m, _)| *m > 1).map(|&(m, u)| (ln1(m as f64), u)).collect());
        (single_row.is_some() || rows.is_some()).then_some(GemmCurve { single_row, rows })
    }

    /// ln utilisation at `m` rows (≥ 1).
    #[inline]
    pub(crate) fn eval(&self, m: f64) -> f64 {
        match (&self.rows, self.single_row) {
            (_, Some(u)) if m < 1.5 => u,
            (Some(curve), _) => curve.eval(ln1(m)),
            (None, Some(u)) => u,
            (None, None) => unreachable!("a GEMM curve has a point"),
        }
    }
}

/// The cell `i` of sorted `axis` whose span `[axis[i], axis[i+1]]` holds `x` (clamped), and the
/// fraction `t` of the way across it. A single-value axis gives `(0, 0)`.
#[inline]
pub(crate) fn bracket(axis: &[f64], x: f64) -> (usize, f64) {
    let n = axis.len();
    if n <= 1 || x <= axis[0] {
        return (0, 0.0);
    }
    if x >= axis[n - 1] {
        return (n - 2, 1.0);
    }
    let i = axis.partition_point(|&v| v <= x) - 1;
    (i, (x - axis[i]) / (axis[i + 1] - axis[i]))
}

/// `y` over a 3-D grid, interpolated trilinearly; held constant outside the grid. Cells without
/// a measured point are filled when built (see [`Surface::new`]).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Surface {
    pub(crate) axes: [Vec<f64>; 3],
    /// Row-major over the axes: index `(i0 · n1 + i1) · n2 + i2`.
    pub(crate) values: Vec<f64>,
}

impl Surface {
    /// From `([x0, x1, x2], y)` points; equal coordinates are averaged. The grid is every
    /// combination of the coordinates seen on each axis. A combination without a point (a hole:
    /// a shape the grid capped, or one a run skipped) is filled, in this order of preference:
    ///
    /// 1. interpolation along each axis on which measured cells bracket it (the nearest on each
    ///    side), averaged with weights 1/span², so the tightest bracket counts most;
    /// 2. the parallelogram rule over adjacent measured cells, `y(c+a) + y(c+b) − y(c+a+b)`,
    ///    averaged over the pairs of axes and directions available: exact where `y` is additive
    ///    in the (log) coordinates, as ln utilisation is where it depends on products such as
    ///    batch × length;
    /// 3. interpolation (1) between cells filled so far, repeatedly;
    /// 4. the nearest known cell along an axis (holding the edge), else the nearest anywhere.
    ///
    /// A filled value stays within the measured ones' range: no hole is made faster than the
    /// best a kernel achieved, nor slower than the worst. `None` when there are no points.
    pub(crate) fn new(points: &[([f64; 3], f64)]) -> Option<Surface> {
        if points.is_empty() {
            return None;
        }
        let axes: [Vec<f64>; 3] = std::array::from_fn(|a| {
            let mut v: Vec<f64> = points.iter().map(|(x, _)| x[a]).collect();
            v.sort_by(f64::total_cmp);
            v.dedup();
            v
        });
        let dims = [axes[0].len(), axes[1].len(), axes[2].len()];
        let cells = dims[0] * dims[1] * dims[2];
        let mut sums = vec![0.0; cells];
        let mut counts = vec![0u32; cells];
        for (x, y) in points {
            let idx: [usize; 3] = std::array::from_fn(|a| axes[a].partition_point(|&v| v < x[a]));
            let c = flat(dims, idx);
            sums[c] += y;
            counts[c] += 1;
        }
        let measured: Vec<bool> = counts.iter().map(|&c| c > 0).collect();
        let mut values: Vec<f64> =
            sums.iter().zip(&counts).map(|(s, &c)| if c > 0 { s / c as f64 } else { 0.0 }).collect();
        let measured_values = || values.iter().zip(&measured).filter(|(_, m)| **m).map(|(v, _)| *v);
        let ceiling = measured_values().fold(f64::NEG_INFINITY, f64::max);
        let floor = measured_values().fold(f64::INFINITY, f64::min);
        let mut known = measured.clone();
        let grid = Grid3 { axes: &axes, dims };

        // 1 and 2, from measured cells only.
        for c in (0..cells).filter(|&c| !measured[c]) {
            if let Some(v) =
                grid.interpolate(c, &measured, &values).or_else(|| grid.parallelogram(c, &measured, &values))
            {
                values[c] = v.clamp(floor, ceiling);
                known[c] = true;
            }
        }
        loop {
            // 3: interpolation between known cells until nothing more fills.
            loop {
                let snapshot = known.clone();
                let mut filled = false;
                for c in (0..cells).filter(|&c| !snapshot[c]) {
                    if let Some(v) = grid.interpolate(c, &snapshot, &values) {
                        values[c] = v.clamp(floor, ceiling);
                        known[c] = true;
                        filled = true;
                    }
                }
                if !filled {
                    break;
                }
            }
            if known.iter().all(|&k| k) {
                break;
            }
            // 4: hold the nearest known cell along the first axis that has one, else anywhere.
            let snapshot = known.clone();
            let mut filled = false;
            for axis in 0..3 {
                for c in 0..cells {
                    if snapshot[c] || known[c] {
                        continue;
                    }
                    if let Some(k) = grid.nearest_along(c, axis, &snapshot) {
                        values[c] = values[k];
                        known[c] = true;
                        filled = true;
                    }
                }
                if filled {
                    break;
                }
            }
            if !filled {
                for c in (0..cells).filter(|&c| !snapshot[c]) {
                    let k = grid.nearest_anywhere(c, &snapshot).expect("a measured cell");
                    values[c] = values[k];
                    known[c] = true;
                }
            }
        }
        Some(Surface { axes, values })
    }

    /// Trilinear interpolation at `x`. The corners run in the order of their index bits
    /// (axis 0 lowest), each weighted by the product of its axes' factors in axis order, and a
    /// corner of weight 0 is skipped: so the sum is the same bits whichever way it is written.
    /// An axis whose fraction is 0 has no upper corners, so most decode prices (query length 1,
    /// on the axis's first point) visit four corners, not eight (issue 33).
    #[inline]
    pub(crate) fn eval(&self, x: [f64; 3]) -> f64 {
        self.eval_bracketed(std::array::from_fn(|a| bracket(&self.axes[a], x[a])))
    }

    /// [`Surface::eval`] from each axis's [`bracket`] of the point, for a caller that has some
    /// of them worked out already (a step's batch size, a decode's query length of 1). The
    /// corners are written out in the order of the loops they replace (axis 2 outermost, axis 0
    /// innermost), each weighted `(f0 · f1) · f2`, and an axis with `t = 0` has no upper
    /// corners: the loops' dynamic bounds and bounds checks cost more than the sum (issue 33).
    #[inline]
    pub(crate) fn eval_bracketed(&self, b: [(usize, f64); 3]) -> f64 {
        let (n1, n2) = (self.axes[1].len(), self.axes[2].len());
        let (s0, s1) = (n1 * n2, n2);
        let base = (b[0].0 * n1 + b[1].0) * n2 + b[2].0;
        let [(_, t0), (_, t1), (_, t2)] = b;
        let (f0, f1, f2) = ([1.0 - t0, t0], [1.0 - t1, t1], [1.0 - t2, t2]);
        let values = &self.values;
        let mut sum = 0.0;
        let mut corner = |c0: usize, c1: usize, c2: usize| {
            let weight = f0[c0] * f1[c1] * f2[c2];
            if weight != 0.0 {
                sum += weight * values[base + c0 * s0 + c1 * s1 + c2];
            }
        };
        let (upper0, upper1, upper2) = (t0 != 0.0, t1 != 0.0, t2 != 0.0);
        for c2 in [0, 1] {
            if c2 == 1 && !upper2 {
                break;
            }
            corner(0, 0, c2);
            if upper0 {
                corner(1, 0, c2);
            }
            if upper1 {
                corner(0, 1, c2);
                if upper0 {
                    corner(1, 1, c2);
                }
            }
        }
        sum
    }
}

#[inline]
fn flat(dims: [usize; 3], idx: [usize; 3]) -> usize {
    (idx[0] * dims[1] + idx[1]) * dims[2] + idx[2]
}

fn unflat(dims: [usize; 3], c: usize) -> [usize; 3] {
    [c / (dims[1] * dims[2]), c / dims[2] % dims[1], c % dims[2]]
}

fn with(mut idx: [usize; 3], axis: usize, j: usize) -> [usize; 3] {
    idx[axis] = j;
    idx
}

/// The axes and dimensions of a surface under construction, for filling holes.
struct Grid3<'a> {
    pub(crate) axes: &'a [Vec<f64>; 3],
    dims: [usize; 3],
}

impl Grid3<'_> {
    /// Interpolation of cell `c` along every axis on which `known` cells bracket it, weighted by
    /// 1/span².
    fn interpolate(&self, c: usize, known: &[bool], values: &[f64]) -> Option<f64> {
        let idx = unflat(self.dims, c);
        let (mut sum, mut weights) = (0.0, 0.0);
        for axis in 0..3 {
            let at = |j: usize| flat(self.dims, with(idx, axis, j));
            let below = (0..idx[axis]).rev().find(|&j| known[at(j)]);
            let above = (idx[axis] + 1..self.dims[axis]).find(|&j| known[at(j)]);
            if let (Some(lo), Some(hi)) = (below, above) {
                let a = &self.axes[axis];
                let span = a[hi] - a[lo];
                let (y0, y1) = (values[at(lo)], values[at(hi)]);
                let weight = 1.0 / (span * span);
                sum += weight * (y0 + (y1 - y0) * (a[idx[axis]] - a[lo]) / span);
                weights += weight;
            }
        }
        (weights > 0.0).then(|| sum / weights)
    }

    /// The parallelogram rule over adjacent `known` cells, averaged over the pairs of axes and
    /// directions where all three neighbours are known.
    fn parallelogram(&self, c: usize, known: &[bool], values: &[f64]) -> Option<f64> {
        let idx = unflat(self.dims, c);
        let step = |i: usize, d: isize, n: usize| i.checked_add_signed(d).filter(|&j| j < n);
        let (mut sum, mut count) = (0.0, 0.0);
        for a1 in 0..3 {
            for a2 in a1 + 1..3 {
                for d1 in [-1isize, 1] {
                    for d2 in [-1isize, 1] {
                        let (Some(i1), Some(i2)) = (step(idx[a1], d1, self.dims[a1]), step(idx[a2], d2, self.dims[a2]))
                        else {
                            continue;
                        };
                        let p = flat(self.dims, with(idx, a1, i1));
                        let q = flat(self.dims, with(idx, a2, i2));
                        let r = flat(self.dims, with(with(idx, a1, i1), a2, i2));
                        if known[p] && known[q] && known[r] {
                            sum += values[p] + values[q] - values[r];
                            count += 1.0;
                        }
                    }
                }
            }
        }
        (count > 0.0).then(|| sum / count)
    }

    /// The `known` cell nearest to `c` along `axis` (by coordinate; ties to the lower).
    fn nearest_along(&self, c: usize, axis: usize, known: &[bool]) -> Option<usize> {
        let idx = unflat(self.dims, c);
        let a = &self.axes[axis];
        (0..self.dims[axis])
            .map(|j| flat(self.dims, with(idx, axis, j)))
            .zip(a.iter())
            .filter(|(k, _)| known[*k])
            .min_by(|x, y| (x.1 - a[idx[axis]]).abs().total_cmp(&(y.1 - a[idx[axis]]).abs()))
            .map(|(k, _)| k)
    }

    /// The `known` cell nearest to `c` (Euclidean in the coordinates; ties to the lower index).
    fn nearest_anywhere(&self, c: usize, known: &[bool]) -> Option<usize> {
        let idx = unflat(self.dims, c);
        let distance = |k: usize| {
            let kidx = unflat(self.dims, k);
            (0..3).map(|a| (self.axes[a][idx[a]] - self.axes[a][kidx[a]]).powi(2)).sum::<f64>()
        };
        (0..known.len()).filter(|&k| known[k]).min_by(|&x, &y| distance(x).total_cmp(&distance(y)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn curve_and_surface_interpolate_exactly_on_linear_data() {
        let curve = Curve::new(vec![(2.0, 20.0), (0.0, 0.0), (1.0, 10.0), (1.0, 12.0)]).unwrap();
        assert_eq!(curve.xs, [0.0, 1.0, 2.0]);
        assert_eq!(curve.ys, [0.0, 11.0, 20.0]);
        assert_eq!(curve.eval(0.5), 5.5);
        assert_eq!(curve.eval(-3.0), 0.0);
        assert_eq!(curve.eval(9.0), 20.0);

        // y = x0 + 2·x1 + 3·x2 on a 3×3×2 grid with two holes: filled and evaluated exactly.
        let f = |x: [f64; 3]| x[0] + 2.0 * x[1] + 3.0 * x[2];
        let mut points = Vec::new();
        for a in [0.0, 1.0, 3.0] {
            for b in [0.0, 2.0, 4.0] {
                for c in [1.0, 5.0] {
                    if (a, b, c) != (1.0, 2.0, 1.0) && (a, b, c) != (3.0, 4.0, 5.0) {
                        points.push(([a, b, c], f([a, b, c])));
                    }
                }
            }
        }
        let s = Surface::new(&points).unwrap();
        for x in [[1.0, 2.0, 1.0], [0.5, 1.0, 3.0], [2.0, 1.0, 4.0], [0.0, 0.0, 1.0]] {
            assert!((s.eval(x) - f(x)).abs() < 1e-12, "{x:?}: {} vs {}", s.eval(x), f(x));
        }
        // The corner (3, 4, 5) has known cells on one side only along every axis: it holds the
        // nearest along the first axis, (1, 4, 5), rather than extrapolate.
        assert_eq!(s.eval([3.0, 4.0, 5.0]), f([1.0, 4.0, 5.0]));
        // Outside the grid: clamped.
        assert_eq!(s.eval([-10.0, 0.0, 1.0]), f([0.0, 0.0, 1.0]));
    }

    /// The trilinear sum as first written, eight corners each time: the faster `eval` must give
    /// its very bits, or every calibrated price (and the goldens) would move.
    fn eval_eight_corners(s: &Surface, x: [f64; 3]) -> f64 {
        let dims = [s.axes[0].len(), s.axes[1].len(), s.axes[2].len()];
        let b: [(usize, f64); 3] = std::array::from_fn(|a| bracket(&s.axes[a], x[a]));
        let mut sum = 0.0;
        for corner in 0..8usize {
            let mut weight = 1.0;
            let mut idx = [0usize; 3];
            for a in 0..3 {
                let (i, t) = b[a];
                if corner >> a & 1 == 1 {
                    if t == 0.0 {
                        weight = 0.0;
                        break;
                    }
                    idx[a] = i + 1;
                    weight *= t;
                } else {
                    idx[a] = i;
                    weight *= 1.0 - t;
                }
            }
            if weight != 0.0 {
                sum += weight * s.values[flat(dims, idx)];
            }
        }
        sum
    }

    #[test]
    fn eval_gives_the_eight_corner_sums_bits() {
        // An uneven grid of irregular values, one axis of a single point (as a decode surface's
        // query length is), probed on, between and beyond its points.
        let mut points = Vec::new();
        let mut v = 0.37_f64;
        for a in [0.0, 0.7, 1.9, 3.3] {
            for c in [0.0, 1.1, 2.05, 4.6, 8.0] {
                v = (v * 7.31 + 0.113).fract() - 0.5;
                points.push(([a, 0.0, c], v));
            }
        }
        let s = Surface::new(&points).unwrap();
        let probes = [-1.0, 0.0, 0.35, 0.7, 1.0, 1.9, 2.2, 3.3, 4.6, 5.0, 8.0, 9.0];
        let mut checked = 0;
        for &a in &probes {
            for &q in &[0.0, 0.5] {
                for &c in &probes {
                    let x = [a, q, c];
                    assert_eq!(s.eval(x).to_bits(), eval_eight_corners(&s, x).to_bits(), "at {x:?}");
                    checked += 1;
                }
            }
        }
        assert_eq!(checked, 288);
    }

    #[test]
    fn ln1_skips_the_logarithm_of_one_and_below_with_the_same_bits() {
        for i in 0..3000u32 {
            let x = f64::from(i);
            assert_eq!(ln1(x).to_bits(), x.max(1.0).ln().to_bits(), "ln1({x})");
        }
        for x in [0.5, 1.0, 1.5, 255.5, 1023.999, -3.0, f64::NAN] {
            assert_eq!(ln1(x).to_bits(), x.max(1.0).ln().to_bits(), "ln1({x})");
        }
    }
}
