//! The calibrated model's attention: each phase's predictor, resolved from the profile (its
//! surfaces, or the roofline where it has none), and its price for a step's sums.

use super::Calibrated;
use super::surface::AttentionSurface;
use crate::calibrate::backend::AttentionPhase;
use crate::calibrate::grid::{HeadConfig, attention_work_from_totals};
use crate::calibrate::profile::ProfileIndex;
use crate::calibrate::profile::index::AttentionKey;
use crate::scenario::model::Dtype;

/// Coefficient of variation of contexts spread evenly over `1..=2c` (the profile's uneven
/// decode shapes): `1/√3`.
const UNEVEN_CV: f64 = 0.577_350_269_189_625_8;

pub(super) const PREFILL: usize = 0;
pub(super) const DECODE: usize = 1;
pub(super) const MIXED: usize = 2;

/// One attention phase of the model: interpolated from the profile, or the roofline.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum AttentionPredictor {
    Profiled {
        /// The dtype of the measurements used (the model's KV dtype, unless the profile lacks
        /// it); the model's own head configuration prices the work.
        dtype: Dtype,
        even: Option<AttentionSurface>,
        uneven: Option<AttentionSurface>,
    },
    Roofline,
}

/// Per-phase sums over one step's sequences.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct PhaseSums {
    pub(super) seqs: f64,
    pub(super) query_tokens: f64,
    pub(super) context_tokens: f64,
    pub(super) context_squares: f64,
    pub(super) keys: f64,
    /// Keys read from the cache by prefill chunks (the prefix-attention kernel).
    pub(super) prefix_keys: f64,
    pub(super) kv_tokens: f64,
}

impl Calibrated {
    /// Attention time of one phase's sequences, seconds per layer.
    #[inline]
    pub(super) fn attention_s(&self, phase: usize, sums: &PhaseSums) -> f64 {
        if sums.seqs == 0.0 {
            return 0.0;
        }
        match &self.attention[phase] {
            AttentionPredictor::Profiled { dtype, even, uneven } => {
                let n = sums.seqs;
                let (q, c) = (sums.query_tokens / n, sums.context_tokens / n);
                let util = match (even, uneven) {
                    (Some(e), Some(u)) => {
                        let variance = (sums.context_squares / n - c * c).max(0.0);
                        let cv = if c > 0.0 { variance.sqrt() / c } else { 0.0 };
                        let w = (cv / UNEVEN_CV).min(1.0);
                        (1.0 - w) * e.eval(n, q, c) + w * u.eval(n, q, c)
                    }
                    (Some(s), None) | (None, Some(s)) => s.eval(n, q, c),
                    (None, None) => unreachable!("a profiled phase has a surface"),
                };
                let work = attention_work_from_totals(self.heads, *dtype, sums.keys, sums.kv_tokens, sums.query_tokens);
                work.roofline_s(&self.peak) / util.exp()
            }
            AttentionPredictor::Roofline => {
                let compute = (sums.keys - sums.prefix_keys) * self.fallback_attention_s_per_key
                    + sums.prefix_keys * self.fallback_prefix_attention_s_per_key;
                let memory = (sums.kv_tokens * self.fallback_kv_token_bytes
                    + sums.query_tokens * self.fallback_query_bytes)
                    / self.fallback_bytes_per_s;
                compute.max(memory)
            }
        }
    }
}

/// The attention predictor of one phase: the profile's surfaces for the model's KV dtype (or
/// another, said) and its head configuration (or the nearest measured, said); else the roofline
/// (said).
pub(super) fn resolve_attention(
    index: &ProfileIndex,
    phase: AttentionPhase,
    kv_dtype: Dtype,
    heads: HeadConfig,
    notices: &mut Vec<String>,
) -> AttentionPredictor {
    let phase_name = match phase {
        AttentionPhase::Prefill => "prefill",
        AttentionPhase::Decode => "decode",
        AttentionPhase::Mixed => "mixed (chunked-prefill)",
    };
    let of_phase = || index.attention.keys().filter(move |k| k.phase == phase);
    let dtype = if of_phase().any(|k| k.dtype == kv_dtype) {
        kv_dtype
    } else if let Some(k) = of_phase().next() {
        notices.push(format!(
            "calibrated profile: no {} {phase_name} attention; using its {} measurements",
            kv_dtype.name(),
            k.dtype.name()
        ));
        k.dtype
    } else {
        notices.push(format!("calibrated profile: no {phase_name} attention measured; priced by the roofline"));
        return AttentionPredictor::Roofline;
    };
    let distance = |h: &HeadConfig| {
        let r = |a: u32, b: u32| ((a.max(1) as f64) / (b.max(1) as f64)).ln().abs();
        r(h.num_heads, heads.num_heads) + r(h.num_kv_heads, heads.num_kv_heads) + r(h.head_dim, heads.head_dim)
    };
    let nearest = of_phase()
        .filter(|k| k.dtype == dtype)
        .map(|k| k.heads)
        .min_by(|a, b| distance(a).total_cmp(&distance(b)))
        .expect("a key of this phase and dtype");
    if nearest != heads {
        notices.push(format!(
            "calibrated profile: no {phase_name} attention for {}/{}/{} heads/KV heads/head dim; using the nearest measured, {}/{}/{}",
            heads.num_heads, heads.num_kv_heads, heads.head_dim, nearest.num_heads, nearest.num_kv_heads, nearest.head_dim
        ));
    }
    let surface =
        |uneven| index.attention.get(&AttentionKey { phase, dtype, heads: nearest, uneven }).cloned().map(AttentionSurface::new);
    AttentionPredictor::Profiled { dtype, even: surface(false), uneven: surface(true) }
}

