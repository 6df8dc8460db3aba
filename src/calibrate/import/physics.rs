//! What the physics allows of an imported table. Parquet data pages carry no checksum, so one
//! flipped byte can turn a GEMM time into another plausible-looking number (100× slower, in the
//! case that asked for this check) and the import would exit 0. Every imported row is held to:
//!
//! - **the compute floor**: no GEMM or attention faster than its FLOPs at the GPU's datasheet
//!   peak for its dtype (5% over it for boost-clock rounding). The memory floor is not a bound:
//!   small GEMMs whose weights sit in L2 beat HBM bandwidth in the published tables (up to 1.29×
//!   its roofline on H100);
//! - **its neighbours**: no time 10× off both neighbours along its size axis (GEMM `m` at fixed
//!   dtype, `n`, `k`; attention context at fixed everything else; a collective's bytes at fixed
//!   GPUs).
//!
//! Either is an error naming the row. On the four bundled tables (aiconfigurator: H100, H200,
//! B200, A100; 131,569 rows each for the first three) neither fires: the fastest GEMM reaches
//! 97% of its compute peak and no row is 10× off both neighbours. Times that fall with size
//! (a bigger shape faster by over 2×, which a kernel switch can do: the H100 table has a 9.5×
//! drop) are only counted in a note, with the largest named.

use std::collections::BTreeMap;

use crate::calibrate::grid::Shape;
use crate::calibrate::run::describe;
use crate::calibrate::profile::ProfileRow;
use crate::scenario::GpuSpec;

/// Over the datasheet peak a measured time may seem to run (boost-clock rounding).
const PEAK_TOLERANCE: f64 = 1.05;
/// How far off both neighbours a time may be before it is refused as corrupt.
const SPIKE_FACTOR: f64 = 10.0;
/// A bigger shape this much faster than the next smaller one is counted in a note.
const DROP_FACTOR: f64 = 2.0;

/// The series a row belongs to (every dimension but its size axis) and its place on that axis.
fn series(shape: &Shape) -> Option<(String, u64)> {
    match shape {
        Shape::Gemm(g) => Some((format!("gemm {} n={} k={}", g.dtype.name(), g.n, g.k), u64::from(g.m))),
        Shape::Attention(a) => Some((
            format!(
                "attention {:?} {} {} {} {}/{} {} {}",
                a.phase,
                a.dtype.name(),
                a.batch,
                a.query_len,
                a.num_heads,
                a.num_kv_heads,
                a.head_dim,
                a.uneven
            ),
            u64::from(a.context_len),
        )),
        Shape::AllReduce(c) => Some((format!("allreduce {}", c.gpus), c.bytes)),
        Shape::AllToAll(c) => Some((format!("alltoall {}", c.gpus), c.bytes)),
        Shape::Sampling(_) => None,
    }
}

/// Checks `rows` (measured on `gpu`): an error naming the first row the physics rules out, or
/// the notes for what is only unusual.
pub fn check(rows: &[ProfileRow], gpu: &GpuSpec) -> Result<Vec<String>, String> {
    for row in rows {
        let dtype = match &row.shape {
            Shape::Gemm(g) => g.dtype,
            Shape::Attention(a) => a.dtype,
            _ => continue,
        };
        let floor_ns = row.work.flops / gpu.peak_flops(dtype) * 1e9;
        if row.measurement.median_ns * PEAK_TOLERANCE < floor_ns {
            return Err(format!(
                "{}: {:.0} ns is faster than its {:.3e} FLOPs allow at the {} peak of {:.0} TFLOP/s ({floor_ns:.0} ns): not a physical time",
                describe(&row.shape),
                row.measurement.median_ns,
                row.work.flops,
                gpu.name,
                gpu.peak_flops(dtype) / 1e12
            ));
        }
    }
    let mut by_series: BTreeMap<String, Vec<(u64, &ProfileRow)>> = BTreeMap::new();
    for row in rows {
        if let Some((key, at)) = series(&row.shape) {
            by_series.entry(key).or_default().push((at, row));
        }
    }
    let (mut drops, mut worst): (u64, Option<(f64, &ProfileRow, &ProfileRow)>) = (0, None);
    for points in by_series.values_mut() {
        points.sort_by_key(|p| p.0);
        let ns = |i: usize| points[i].1.measurement.median_ns;
        for i in 1..points.len() {
            let fall = ns(i - 1) / ns(i);
            if fall > DROP_FACTOR {
                drops += 1;
                if worst.is_none_or(|w| fall > w.0) {
                    worst = Some((fall, points[i - 1].1, points[i].1));
                }
            }
            if i + 1 < points.len() {
                let (before, here, after) = (ns(i - 1), ns(i), ns(i + 1));
                let off = |other: f64| here > other * SPIKE_FACTOR || here * SPIKE_FACTOR < other;
                if off(before) && off(after) {
                    return Err(format!(
                        "{}: {here:.0} ns is over {SPIKE_FACTOR}× off both its neighbours ({before:.0} ns at {}, {after:.0} ns at {}): a corrupt value",
                        describe(&points[i].1.shape),
                        describe(&points[i - 1].1.shape),
                        describe(&points[i + 1].1.shape)
                    ));
                }
            }
        }
    }
    Ok(worst
        .map(|(fall, smaller, bigger)| {
            format!(
                "{drops} rows are over {DROP_FACTOR}× faster than the next smaller shape of their series (a kernel switch can do \
                 that); the largest fall, {fall:.1}×: {} after {}",
                describe(&bigger.shape),
                describe(&smaller.shape)
            )
        })
        .into_iter()
        .collect())
}
