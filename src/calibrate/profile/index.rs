//! A profile's measurements organised for interpolation ([`ProfileIndex`]): what the
//! calibrated cost model prices a model's ops from, and what leave-one-out and `calibrate import`
//! judge a profile by.

use std::collections::BTreeMap;

use super::interpolate::{Curve, GemmCurve, Surface, bracket, ln1};
use super::lazy::LazyMap;
use super::{Profile, ProfileRow};
use crate::calibrate::backend::{AttentionPhase, AttentionShape, GemmShape, Peak, SamplingMethod};
use crate::calibrate::grid::{HeadConfig, Shape, attention_work, gemm_work};
use crate::scenario::model::Dtype;

/// Nanoseconds in a second; a profile's times are nanoseconds, a roofline's seconds.
pub(crate) const NS_PER_S: f64 = 1e9;

/// Share of the (n, k) combinations of its measured values that a profile's GEMMs must fill to
/// be interpolated between (see [`ProfileIndex::gemm_curve`]).
pub(crate) const GRID_DENSITY_MIN: f64 = 0.9;
/// Where an attention surface applies.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct AttentionKey {
    pub(crate) phase: AttentionPhase,
    pub(crate) dtype: Dtype,
    pub(crate) heads: HeadConfig,
    pub(crate) uneven: bool,
}

pub(crate) fn attention_key(s: &AttentionShape) -> AttentionKey {
    AttentionKey {
        phase: s.phase,
        dtype: s.dtype,
        heads: HeadConfig { num_heads: s.num_heads, num_kv_heads: s.num_kv_heads, head_dim: s.head_dim },
        uneven: s.uneven,
    }
}

pub(crate) fn attention_coords(batch: f64, query_len: f64, context_len: f64) -> [f64; 3] {
    [ln1(batch), ln1(query_len), ln1(context_len)]
}

/// ln of a row's measured utilisation: roofline time at `peak` ÷ median time.
fn ln_utilisation(row: &ProfileRow, peak: &Peak) -> f64 {
    (row.shape.work().roofline_s(peak) * NS_PER_S / row.measurement.median_ns).ln()
}

/// One GEMM's `(m, ln utilisation)` points with each m's time capped by every larger m's.
///
/// Within one kernel configuration a GEMM's time cannot fall as its rows grow: more rows are
/// more output tiles. Published tables break that: aiconfigurator's H100/H200 FP8 rows (vLLM
/// 0.24's and SGLang 0.5's cutlass `scaled_mm`) time m = 257 at 1.8× m = 512 and every
/// m = 256·j + 1 at 1.3–1.9× m = 256·(j + 1), and between them interpolation priced a
/// 414-sequence decode 14% above a 512-sequence one. vLLM's sm90 FP8 dispatch
/// (`scaled_mm_sm90_fp8_dispatch.cuh`, the same from 0.9 to the current source) runs one tile
/// configuration (128 × 128 × 128, cluster 2 × 1) for every m above 128: m = 257 and m = 512 launch
/// the same clusters, so the slower row is not the kernel's cost at that m. Each m is priced at
/// most as the smallest time measured at or above it. `roofline_ns` maps utilisation to time and
/// back. Equal m are averaged first, by [`Curve::new`].
///
/// FP8 only: the argument is the cutlass FP8 dispatch's. 16-bit GEMMs go through cuBLAS, whose
/// heuristics do pick other kernels by m, so their measured steps are kept (capping them too
/// raised the 0.15.1 training runs' median TPOT error from 9.9% to 11.6%, `scripts/accuracy.sh`).
fn monotone_in_rows(points: Vec<(u32, f64)>, roofline_ns: &BTreeMap<u32, f64>) -> Vec<(u32, f64)> {
    let Some(merged) = Curve::new(points.into_iter().map(|(m, u)| (f64::from(m), u)).collect()) else {
        return Vec::new();
    };
    let mut cap_ns = f64::INFINITY;
    let mut out: Vec<(u32, f64)> = merged
        .xs
        .iter()
        .zip(&merged.ys)
        .rev()
        .map(|(&m, &u)| {
            let m = m as u32;
            let roof = roofline_ns[&m];
            let ns = roof / u.exp();
            if ns < cap_ns {
                cap_ns = ns;
                (m, u)
            } else {
                (m, (roof / cap_ns).ln())
            }
        })
        .collect();
    out.reverse();
    out
}

/// A profile's measurements organised for interpolation: one utilisation curve per GEMM
/// `(dtype, n, k)` and one surface per attention (phase, dtype, heads, uneven). Each curve and
/// surface is built from its own key's rows alone, so a bundled profile's are built only when
/// read (see [`LazyMap`]).
#[derive(Clone, Debug, PartialEq)]
pub struct ProfileIndex {
    pub(crate) peak: Peak,
    pub(crate) gemm: LazyMap<(Dtype, u32, u32), GemmCurve>,
    pub(crate) attention: LazyMap<AttentionKey, Surface>,
    /// Per GPU count: ln seconds against ln bytes of one all-reduce.
    pub(crate) allreduce: BTreeMap<u32, Curve>,
    /// Per GPU count: ln seconds against ln bytes each GPU sends in one all-to-all.
    pub(crate) alltoall: BTreeMap<u32, Curve>,
    /// Per sampling method: (vocabulary, ns per logit of a sampled row).
    pub(crate) sampling: BTreeMap<SamplingMethod, Vec<(u32, f64)>>,
}

impl ProfileIndex {
    pub fn new(profile: &Profile) -> ProfileIndex {
        Self::from_rows(profile.rows.iter(), profile.peak())
    }

    pub(crate) fn from_rows<'a>(rows: impl Iterator<Item = &'a ProfileRow>, peak: Peak) -> ProfileIndex {
        let mut gemm_points: BTreeMap<(Dtype, u32, u32), Vec<(u32, f64)>> = BTreeMap::new();
        let mut gemm_rooflines: BTreeMap<(Dtype, u32, u32), BTreeMap<u32, f64>> = BTreeMap::new();
        let mut attention_points: BTreeMap<AttentionKey, Vec<([f64; 3], f64)>> = BTreeMap::new();
        let mut allreduce_points: BTreeMap<u32, Vec<(f64, f64)>> = BTreeMap::new();
        let mut alltoall_points: BTreeMap<u32, Vec<(f64, f64)>> = BTreeMap::new();
        let mut sampling: BTreeMap<SamplingMethod, Vec<(u32, f64)>> = BTreeMap::new();
        for row in rows {
            if !(row.measurement.median_ns.is_finite() && row.measurement.median_ns > 0.0) {
                continue;
            }
            match &row.shape {
                Shape::Gemm(g) => {
                    let key = (g.dtype, g.n, g.k);
                    gemm_points.entry(key).or_default().push((g.m, ln_utilisation(row, &peak)));
                    if g.dtype == Dtype::Fp8 {
                        gemm_rooflines.entry(key).or_default().insert(g.m, row.shape.work().roofline_s(&peak) * NS_PER_S);
                    }
                }
                Shape::Attention(a) => attention_points.entry(attention_key(a)).or_default().push((
                    attention_coords(a.batch as f64, a.query_len as f64, a.context_len as f64),
                    ln_utilisation(row, &peak),
                )),
                Shape::AllReduce(a) => allreduce_points.entry(a.gpus).or_default().push(collective_point(a.bytes, row)),
                Shape::AllToAll(a) => alltoall_points.entry(a.gpus).or_default().push(collective_point(a.bytes, row)),
                Shape::Sampling(s) => {
                    let ns_per_logit = row.measurement.median_ns / (f64::from(s.rows) * f64::from(s.vocab));
                    sampling.entry(s.method).or_default().push((s.vocab, ns_per_logit));
                }
            }
        }
        let curves = |points: BTreeMap<u32, Vec<(f64, f64)>>| -> BTreeMap<u32, Curve> {
            points.into_iter().filter_map(|(k, v)| Curve::new(v).map(|c| (k, c))).collect()
        };
        ProfileIndex {
            allreduce: curves(allreduce_points),
            alltoall: curves(alltoall_points),
            sampling,
            peak,
            gemm: LazyMap::built(
                gemm_points
                    .into_iter()
                    .filter_map(|(k, v)| {
                        let v = if k.0 == Dtype::Fp8 { monotone_in_rows(v, &gemm_rooflines[&k]) } else { v };
                        GemmCurve::new(v).map(|c| (k, c))
                    })
                    .collect(),
            ),
            attention: LazyMap::built(
                attention_points.into_iter().filter_map(|(k, v)| Surface::new(&v).map(|s| (k, s))).collect(),
            ),
        }
    }

    pub fn peak(&self) -> Peak {
        self.peak
    }

    /// The host sampler's nanoseconds per logit of a sampled row for `method` and a vocabulary
    /// of `vocab` logits: the profile's row of the nearest vocabulary (its passes over the
    /// logits scale with their number, so the figure is per logit); `None` when the profile did
    /// not time it. `cost` makes it a `SamplingCost` (`ProfileIndex::sampling_cost`).
    pub fn sampling_ns_per_logit(&self, method: SamplingMethod, vocab: u32) -> Option<f64> {
        let distance = |v: u32| (f64::from(v) / f64::from(vocab.max(1))).ln().abs();
        let &(_, ns_per_logit) = self.sampling.get(&method)?.iter().min_by(|a, b| distance(a.0).total_cmp(&distance(b.0)))?;
        Some(ns_per_logit)
    }

    /// The GEMM's time, nanoseconds, from the curve of its `(n, k, dtype)`: measured, or
    /// interpolated between measured `(n, k)` (see [`ProfileIndex::gemm_curve`]); `None` when
    /// the profile has neither.
    pub fn predict_gemm_ns(&self, shape: &GemmShape) -> Option<f64> {
        let curve = self.gemm_curve(shape.dtype, shape.n, shape.k)?;
        let util = curve.eval(shape.m as f64).exp();
        Some(gemm_work(shape).roofline_s(&self.peak) * NS_PER_S / util)
    }

    /// The ln-utilisation curve of GEMM `(dtype, n, k)`: the
    /// measured curve, or, where the profile measured a full grid of `(n, k)` around the shape (as
    /// published tables do, on round sizes that miss most models' 14336 or 28672), one
    /// interpolated bilinearly in (ln n, ln k) between the four surrounding curves, held at the
    /// grid's edge beyond it. `None` when a surrounding curve is missing.
    /// This index with its FP8 GEMMs replaced by `other`'s: another kernel's rows of the same
    /// GPU (SGLang runs per-tensor FP8 checkpoints through cuBLASLt, not its own cutlass kernel).
    /// `None` where the two were measured against different peaks, whose utilisations differ.
    pub fn with_fp8_gemms_of(&self, other: &ProfileIndex) -> Option<ProfileIndex> {
        (self.peak == other.peak).then(|| ProfileIndex { gemm: self.gemm.spliced(&other.gemm, |key| key.0 == Dtype::Fp8), ..self.clone() })
    }

    pub(crate) fn gemm_curve(&self, dtype: Dtype, n: u32, k: u32) -> Option<GemmCurve> {
        if let Some(curve) = self.gemm.get(&(dtype, n, k)) {
            return Some(curve.clone());
        }
        let (ns, ks) = self.gemm_axes(dtype);
        // Only a grid (nearly every measured n with every measured k: published tables leave
        // out a few shapes too large to allocate) has neighbours with a meaning; a profile of
        // some models' shapes has scattered (n, k) that say little of another shape's
        // efficiency (Llama-3.2-1B's own shapes fill 5 of the 8 (n, k) their values span).
        let measured = self.gemm.keys().filter(|key| key.0 == dtype).count();
        if (measured as f64) < GRID_DENSITY_MIN * (ns.len() * ks.len()) as f64 {
            return None;
        }
        self.interpolate_gemm(dtype, n, k, &ns, &ks)
    }

    /// The `n` and `k` values of the profile's `dtype` GEMMs, sorted.
    pub(crate) fn gemm_axes(&self, dtype: Dtype) -> (Vec<u32>, Vec<u32>) {
        let axis = |pick: fn(&(Dtype, u32, u32)) -> u32| -> Vec<u32> {
            let mut values: Vec<u32> = self.gemm.keys().filter(|key| key.0 == dtype).map(pick).collect();
            values.sort_unstable();
            values.dedup();
            values
        };
        (axis(|key| key.1), axis(|key| key.2))
    }

    /// The curve of `(dtype, n, k)` interpolated between the curves at the grid points of `ns`
    /// and `ks` around it.
    pub(crate) fn interpolate_gemm(&self, dtype: Dtype, n: u32, k: u32, ns: &[u32], ks: &[u32]) -> Option<GemmCurve> {
        let around = |values: &[u32], x: u32| -> Option<[(u32, f64); 2]> {
            let logs: Vec<f64> = values.iter().map(|&v| ln1(v as f64)).collect();
            let (i, t) = bracket(&logs, ln1(x as f64));
            let lo = *values.get(i)?;
            let hi = *values.get(i + 1).unwrap_or(&lo);
            Some([(lo, 1.0 - t), (hi, t)])
        };
        let (n_side, k_side) = (around(ns, n)?, around(ks, k)?);
        let mut corners = Vec::with_capacity(4);
        for (cn, wn) in n_side {
            for (ck, wk) in k_side {
                if wn * wk > 0.0 {
                    corners.push((self.gemm.get(&(dtype, cn, ck))?, wn * wk));
                }
            }
        }
        let mut xs: Vec<f64> = corners.iter().flat_map(|(c, _)| c.rows.iter().flat_map(|r| r.xs.iter().copied())).collect();
        xs.sort_by(f64::total_cmp);
        xs.dedup();
        let blend = |eval: &dyn Fn(&GemmCurve) -> f64| corners.iter().map(|(c, w)| w * eval(c)).sum::<f64>();
        let rows = (!xs.is_empty()).then(|| Curve {
            ys: xs.iter().map(|&x| blend(&|c| c.eval(x.exp()))).collect(),
            xs: xs.clone(),
        });
        let single_row = corners.iter().any(|(c, _)| c.single_row.is_some()).then(|| blend(&|c| c.eval(1.0)));
        Some(GemmCurve { single_row, rows })
    }

    /// One all-reduce of `bytes` on `gpus` GPUs, seconds, from the measured curve for that GPU
    /// count (log-log interpolation; below the smallest size its time, the latency floor; above
    /// the largest, linear in bytes from it); `None` when the profile has none.
    pub fn allreduce_s(&self, bytes: f64, gpus: u32) -> Option<f64> {
        self.allreduce.get(&gpus).map(|curve| collective_time_s(curve, bytes))
    }

    /// One all-to-all of `bytes` sent by each of `gpus` GPUs (nccl-tests' size), seconds, from
    /// the measured curve for that GPU count, interpolated as [`ProfileIndex::allreduce_s`];
    /// `None` when the profile has none.
    pub fn alltoall_s(&self, bytes: f64, gpus: u32) -> Option<f64> {
        self.alltoall.get(&gpus).map(|curve| collective_time_s(curve, bytes))
    }

    /// The attention shape's time, nanoseconds, from the surface of its exact phase, dtype, head
    /// configuration and evenness; `None` when the profile has none.
    pub fn predict_attention_ns(&self, shape: &AttentionShape) -> Option<f64> {
        let surface = self.attention.get(&attention_key(shape))?;
        let util =
            surface.eval(attention_coords(shape.batch as f64, shape.query_len as f64, shape.context_len as f64)).exp();
        Some(attention_work(shape).roofline_s(&self.peak) * NS_PER_S / util)
    }
}

/// A collective's measured row as a curve point: (ln bytes, ln seconds).
fn collective_point(bytes: u64, row: &ProfileRow) -> (f64, f64) {
    (ln1(bytes as f64), (row.measurement.median_ns / NS_PER_S).ln())
}

/// One collective (all-reduce or all-to-all) of `bytes` from a measured (ln bytes, ln seconds)
/// curve: interpolated inside it, its first time below it (the latency floor), linear in bytes
/// from its last point above.
pub(crate) fn collective_time_s(curve: &Curve, bytes: f64) -> f64 {
    let x = ln1(bytes);
    match (curve.xs.last(), curve.ys.last()) {
        (Some(&last_x), Some(&last_y)) if x > last_x => (last_y + x - last_x).exp(),
        _ => curve.eval(x).exp(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::calibrate::timing::Measurement;

    /// aiconfigurator's H200 vLLM 0.24 FP8 rows for n = k = 8192 (0.0337, 0.0728 and 0.0559 ms):
    /// the row just past 256 is slower than 512's, which the same cutlass configuration runs.
    const ROWS_NS: [(u32, f64); 3] = [(256, 33_700.0), (257, 72_800.0), (512, 55_900.0)];

    fn index(dtype: Dtype) -> ProfileIndex {
        let peak = Peak { flops_per_s: 989e12, memory_bytes_per_s: 4.8e12 };
        let rows: Vec<ProfileRow> = ROWS_NS
            .iter()
            .map(|&(m, ns)| {
                let measurement = Measurement { median_ns: ns, p10_ns: ns, p90_ns: ns, repeats: 1 };
                ProfileRow::new(Shape::Gemm(GemmShape { m, n: 8192, k: 8192, dtype }), measurement, &peak)
            })
            .collect();
        ProfileIndex::from_rows(rows.iter(), peak)
    }

    fn ns(index: &ProfileIndex, dtype: Dtype, m: u32) -> f64 {
        index.predict_gemm_ns(&GemmShape { m, n: 8192, k: 8192, dtype }).unwrap()
    }

    #[test]
    fn an_fp8_gemm_is_priced_at_most_as_a_larger_measured_one() {
        let fp8 = index(Dtype::Fp8);
        assert!((ns(&fp8, Dtype::Fp8, 256) - 33_700.0).abs() < 1e-6 * 33_700.0, "the fastest rows stay");
        assert!((ns(&fp8, Dtype::Fp8, 257) - 55_900.0).abs() < 1e-6 * 55_900.0, "257 capped by 512");
        for m in [300, 414, 500] {
            assert!(ns(&fp8, Dtype::Fp8, m) <= 55_900.0 * (1.0 + 1e-9), "m = {m} above 512's time");
        }
    }

    #[test]
    fn a_16_bit_gemm_keeps_its_measured_steps() {
        let bf16 = index(Dtype::Bf16);
        assert!((ns(&bf16, Dtype::Bf16, 257) - 72_800.0).abs() < 1e-6 * 72_800.0);
        assert!(ns(&bf16, Dtype::Bf16, 414) > 55_900.0, "interpolated between 257's and 512's rows");
    }
}
