//! Multi-head latent attention's work in one layer of a step, as vLLM runs it, for the roofline
//! cost model to price from these FLOPs and bytes.
//!
//! ```text
//!  decode (absorbed)                               prefill (keys and values decompressed)
//!  q_nope · W_UK → latent-width queries            kv_b over every key's latent → K_nope, V
//!  scores over the latent and k_pe (kv + rope)     scores over nope + rope per head
//!  values = the latent itself (kv)                 values of v per head
//!  · W_UV → per-head outputs                       (W_UK and W_UV are kv_b itself)
//! ```
//!
//! Decode reads each cached token's latent once for all of a GPU's heads (the cache is one
//! "KV head" of `kv_lora_rank + qk_rope_head_dim`), so its attention does far more FLOPs per
//! byte than grouped-query attention's. Absorbing W_UK and W_UV costs per decode token what one
//! row of kv_b does, and reads kv_b's weights once: it is priced as a kv_b GEMM row. Prefill
//! (vLLM's compute-friendly path for query/key ratios near 1) runs kv_b over the latents of all
//! the keys it attends to, then ordinary attention with head sizes nope + rope and v
//! (`vllm/v1/attention/backends/mla/common.py`, its module documentation).

use crate::scenario::model::MlaSpec;

/// FLOPs per multiply-accumulate.
const FLOPS_PER_MAC: f64 = 2.0;

/// One layer's attention work in a step, counted per phase over the batch's sequences.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct AttentionCounts {
    /// (query, key) pairs of decoding sequences (one token, or a few verified drafts).
    pub decode_keys: f64,
    /// Cached tokens those sequences read (their context and their new tokens).
    pub decode_kv_tokens: f64,
    /// Their query tokens.
    pub decode_queries: f64,
    /// (query, key) pairs among a prefill chunk's own tokens.
    pub prefill_keys: f64,
    /// (query, key) pairs of a prefill chunk's tokens with the keys cached before it.
    pub prefix_keys: f64,
    /// Keys prefill decompresses: its cached prefix and its own tokens.
    pub prefill_kv_tokens: f64,
    /// Prefill's query tokens.
    pub prefill_queries: f64,
}

/// What MLA's attention does per unit of [`AttentionCounts`] on one GPU of `heads` query heads.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MlaAttention {
    decode_flops_per_key: f64,
    prefill_flops_per_key: f64,
    cache_bytes_per_token: f64,
    decompressed_bytes_per_token: f64,
    decode_bytes_per_query: f64,
    prefill_bytes_per_query: f64,
}

/// One layer's attention work: FLOPs at the attention kernel's rate, FLOPs at the prefix
/// kernel's (chunked prefill over a cached prefix), and bytes moved.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AttentionWork {
    pub flops: f64,
    pub prefix_flops: f64,
    pub bytes: f64,
}

impl MlaAttention {
    /// `heads`: query heads on the GPU; `kv_bytes`: bytes per cached value; `act_bytes`: bytes
    /// per activation.
    pub fn new(mla: &MlaSpec, heads: f64, kv_bytes: f64, act_bytes: f64) -> MlaAttention {
        let latent = mla.kv_lora_rank as f64;
        let cache_width = mla.cache_width() as f64;
        let qk = mla.qk_head_dim() as f64;
        let (nope, rope, v) = (mla.qk_nope_head_dim as f64, mla.qk_rope_head_dim as f64, mla.v_head_dim as f64);
        MlaAttention {
            // Scores over the latent and k_pe, then the latent weighted as the value.
            decode_flops_per_key: FLOPS_PER_MAC * heads * (cache_width + latent),
            prefill_flops_per_key: FLOPS_PER_MAC * heads * (qk + v),
            cache_bytes_per_token: cache_width * kv_bytes,
            // K_nope and V per head, and the one k_pe all heads share.
            decompressed_bytes_per_token: (heads * (nope + v) + rope) * act_bytes,
            // Latent-width queries in, latent-width outputs out (before W_UV).
            decode_bytes_per_query: heads * (cache_width + latent) * act_bytes,
            prefill_bytes_per_query: heads * (qk + v) * act_bytes,
        }
    }

    /// One layer's attention work over `counts`.
    pub fn work(&self, counts: &AttentionCounts) -> AttentionWork {
        AttentionWork {
            flops: counts.decode_keys * self.decode_flops_per_key + counts.prefill_keys * self.prefill_flops_per_key,
            prefix_flops: counts.prefix_keys * self.prefill_flops_per_key,
            bytes: (counts.decode_kv_tokens + counts.prefill_kv_tokens) * self.cache_bytes_per_token
                + counts.prefill_kv_tokens * self.decompressed_bytes_per_token
                + counts.decode_queries * self.decode_bytes_per_query
                + counts.prefill_queries * self.prefill_bytes_per_query,
        }
    }
}
