//! How far one source's measurements are from another's on the same shapes: each imported row
//! priced by another profile (the one bundled for the same GPU), as a relative difference.

use crate::calibrate::backend::{AttentionPhase, AttentionShape, GemmShape};
use crate::calibrate::grid::Shape;
use crate::calibrate::profile::ProfileRow;
use crate::calibrate::profile::{LeaveOneOut, ProfileIndex};
use crate::scenario::Dtype;

/// `(other − ours) / ours` per row the other profile prices, by kind: negative where the other
/// source is faster.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Agreement {
    pub gemm: Vec<f64>,
    pub prefill: Vec<f64>,
    pub decode: Vec<f64>,
    pub all_reduce: Vec<f64>,
    pub all_to_all: Vec<f64>,
}

/// The dtypes whose measurements price a `dtype` row: its own, then, for fp16 and bf16 (the
/// same tensor cores at the same rate), the other.
fn dtypes_for(dtype: Dtype) -> [Dtype; 2] {
    match dtype {
        Dtype::Fp16 => [Dtype::Fp16, Dtype::Bf16],
        Dtype::Bf16 => [Dtype::Bf16, Dtype::Fp16],
        other => [other, other],
    }
}

/// Prices each of `rows` with `other` (GEMMs interpolated between its grid points; attention of
/// the same phase and head configuration; all-reduces and all-to-alls of the same GPU count; fp16 rows by bf16
/// measurements where it has no fp16 ones). Chunks over a
/// cached prefix are not compared: published tables elsewhere have none.
pub fn against(rows: &[ProfileRow], other: &ProfileIndex) -> Agreement {
    let mut out = Agreement::default();
    for row in rows {
        let ours = row.measurement.median_ns;
        let (theirs, into) = match &row.shape {
            Shape::Gemm(g) => {
                let price = |dtype| other.predict_gemm_ns(&GemmShape { dtype, ..*g });
                (dtypes_for(g.dtype).into_iter().find_map(price), &mut out.gemm)
            }
            Shape::Attention(a) if a.phase != AttentionPhase::Mixed => {
                let price = |dtype| other.predict_attention_ns(&AttentionShape { dtype, ..*a });
                let into = if a.phase == AttentionPhase::Prefill { &mut out.prefill } else { &mut out.decode };
                (dtypes_for(a.dtype).into_iter().find_map(price), into)
            }
            Shape::AllReduce(r) => (other.allreduce_s(r.bytes as f64, r.gpus).map(|s| s * 1e9), &mut out.all_reduce),
            Shape::AllToAll(r) => (other.alltoall_s(r.bytes as f64, r.gpus).map(|s| s * 1e9), &mut out.all_to_all),
            Shape::Attention(_) | Shape::Sampling(_) => continue,
        };
        if let Some(theirs) = theirs {
            into.push((theirs - ours) / ours);
        }
    }
    out
}

impl Agreement {
    /// The differences' sizes, `|other − ours| / ours`.
    pub fn magnitudes(signed: &[f64]) -> Vec<f64> {
        signed.iter().map(|d| d.abs()).collect()
    }

    /// One line per kind compared: `{what} on N GEMMs: median X%, p90 Y% (median signed Z%)`.
    pub fn lines(&self, what: &str) -> Vec<String> {
        [
            ("GEMMs", &self.gemm),
            ("prefill attention shapes", &self.prefill),
            ("decode attention shapes", &self.decode),
            ("all-reduces", &self.all_reduce),
            ("all-to-alls", &self.all_to_all),
        ]
        .into_iter()
        .filter(|(_, e)| !e.is_empty())
        .map(|(kind, signed)| {
            let (median, p90) = LeaveOneOut::summary(&Self::magnitudes(signed));
            let (direction, _) = LeaveOneOut::summary(signed);
            format!(
                "{what} on {} {kind}: median {:.1}%, p90 {:.1}% (signed median {:+.1}%)",
                signed.len(),
                median * 100.0,
                p90 * 100.0,
                direction * 100.0
            )
        })
        .collect()
    }
}
