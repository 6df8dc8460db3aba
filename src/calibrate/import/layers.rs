//! A transformer layer's linear projections as GEMMs: per-layer profiles (vidur, LLMServingSim)
//! time a model's projections by token count and TP degree; servesim's grid keys a GEMM by the
//! `(m, n, k)` one GPU runs, `y[m,n] = x[m,k] · W[n,k]ᵀ`, with m the tokens. This is the
//! Megatron split both sources use (and vLLM): QKV, gate and up column-parallel (n divided by
//! TP), O and down row-parallel (k divided by TP), the LM head vocabulary-parallel.

/// One projection, fused or not as the source timed it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Projection {
    /// Q, K and V in one GEMM.
    Qkv,
    Q,
    /// K or V (the same shape).
    KOrV,
    O,
    /// Gate and up in one GEMM (gated MLPs; `up` alone otherwise).
    GateUp,
    /// Gate or up alone (the same shape).
    GateOrUp,
    Down,
    LmHead,
}

/// A model's dimensions, whole model (not per GPU).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dims {
    pub hidden: u64,
    pub heads: u64,
    pub kv_heads: u64,
    pub head_dim: u64,
    pub ffn: u64,
    pub vocab: u64,
    /// Whether the MLP has a gate (SwiGLU): `GateUp` is then 2 × ffn wide.
    pub gated: bool,
}

impl Projection {
    /// `(n, k)` on one GPU at `tp`; `None` when a sharded dimension does not divide by `tp` (a
    /// configuration neither source runs).
    pub fn gemm_nk(self, d: &Dims, tp: u64) -> Option<(u64, u64)> {
        let split = |x: u64| (tp > 0 && x.is_multiple_of(tp)).then(|| x / tp);
        let q = d.heads * d.head_dim;
        // KV heads replicate once TP exceeds them: each GPU holds at least one.
        let kv = if d.kv_heads < tp { d.head_dim } else { split(d.kv_heads)? * d.head_dim };
        Some(match self {
            Projection::Qkv => (split(q)? + 2 * kv, d.hidden),
            Projection::Q => (split(q)?, d.hidden),
            Projection::KOrV => (kv, d.hidden),
            Projection::O => (d.hidden, split(q)?),
            Projection::GateUp => (split(d.ffn)? * if d.gated { 2 } else { 1 }, d.hidden),
            Projection::GateOrUp => (split(d.ffn)?, d.hidden),
            Projection::Down => (d.hidden, split(d.ffn)?),
            Projection::LmHead => (split(d.vocab)?, d.hidden),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Llama-3.1-70B (hidden 8192, 64 × 128 query heads, 8 KV heads, FFN 28672, vocabulary
    /// 128,256) at TP 4 and TP 8: the per-GPU shapes vidur's and LLMServingSim's files time.
    #[test]
    fn projections_shard_as_megatron_does() {
        let d = Dims { hidden: 8192, heads: 64, kv_heads: 8, head_dim: 128, ffn: 28672, vocab: 128_256, gated: true };
        assert_eq!(Projection::Qkv.gemm_nk(&d, 4), Some((2048 + 2 * 256, 8192)));
        assert_eq!(Projection::Q.gemm_nk(&d, 4), Some((2048, 8192)));
        assert_eq!(Projection::KOrV.gemm_nk(&d, 4), Some((256, 8192)));
        assert_eq!(Projection::O.gemm_nk(&d, 4), Some((8192, 2048)));
        assert_eq!(Projection::GateUp.gemm_nk(&d, 4), Some((14336, 8192)));
        assert_eq!(Projection::GateOrUp.gemm_nk(&d, 4), Some((7168, 8192)));
        assert_eq!(Projection::Down.gemm_nk(&d, 4), Some((8192, 7168)));
        assert_eq!(Projection::LmHead.gemm_nk(&d, 4), Some((32064, 8192)));
        // 8 KV heads over 16 GPUs: one each, replicated.
        assert_eq!(Projection::KOrV.gemm_nk(&d, 16), Some((128, 8192)));
        assert_eq!(Projection::Q.gemm_nk(&d, 3), None);
    }
}
