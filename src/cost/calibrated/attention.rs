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
    /// Of prefill chunks: the sum of (context + new tokens − 1)², the squared context of a
    /// decode at the chunk's end.
    pub(super) chunk_end_squares: f64,
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

    /// Attention of the chunks over a cached prefix, seconds per layer. Where the profile
    /// measured such chunks, their rows; else (published tables have none) a chunk of q tokens
    /// over c cached computes the keys a prefill of its whole prompt computes beyond its
    /// prefix's own, prefill(c + q) − prefill(c) from the prefill rows, and reads its prompt's
    /// K and V at least as a decode at length c + q does, from the decode rows. Either alone
    /// fails one end: a prefill kernel's utilisation at a few query tokens is its launch floor,
    /// which laid over a long prefix priced a 2-token chunk over 786 cached tokens (vLLM's
    /// recomputed last block of a prompt cached whole) at 84 ms a step for Llama-2-7B; a
    /// decode's read misses a long chunk's compute.
    #[inline]
    pub(super) fn chunk_attention_s(&self, s: &PhaseSums) -> f64 {
        if s.seqs == 0.0 || !self.chunks_from_prefill {
            return self.attention_s(MIXED, s);
        }
        let (n, q, c) = (s.seqs, s.query_tokens, s.context_tokens);
        // Σ c(c + 1)/2: the keys of the prefixes' own causal prefill.
        let prefix_keys = (s.context_squares + c) / 2.0;
        let prefill = |tokens: f64, keys: f64| {
            let sums = PhaseSums { seqs: n, query_tokens: tokens, keys, kv_tokens: tokens, ..PhaseSums::default() };
            self.attention_s(PREFILL, &sums)
        };
        let beyond = prefill(q + c, s.keys + prefix_keys) - prefill(c, prefix_keys);
        let read = PhaseSums {
            seqs: n,
            query_tokens: n,
            context_tokens: q + c - n,
            context_squares: s.chunk_end_squares,
            keys: q + c,
            kv_tokens: q + c,
            ..PhaseSums::default()
        };
        beyond.max(self.attention_s(DECODE, &read))
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

