//! Multi-head latent attention (MLA), as DeepSeek-V2/V3 and Kimi-K2 use it.
//!
//! ```text
//!  hidden ─► q_a (h → q_lora) ─► norm ─► q_b (q_lora → heads × (nope + rope))      queries
//!  hidden ─► kv_a (h → kv_lora + rope) ─► cache: the latent c (kv_lora) and k_pe (rope)
//!  latent ─► kv_b (kv_lora → heads × (nope + v))     keys' nope part and values, per head
//!  heads × v ─► o (→ h)
//! ```
//!
//! vLLM fuses q_a and kv_a into one replicated projection (`fused_qkv_a_proj`), splits q_b,
//! kv_b and o over tensor-parallel ranks by heads, and caches only `kv_lora + rope` values per
//! token and layer, the same on every rank (its `get_num_kv_heads` is 1 for MLA, and the head
//! size `kv_lora_rank + qk_rope_head_dim`: `vllm/config/model.py`; `MLAAttentionSpec` in
//! `vllm/v1/kv_cache_interface.py` sizes a page as block × 1 × head size × dtype, no factor 2).

/// The dimensions of multi-head latent attention, from a config's `q_lora_rank`,
/// `kv_lora_rank`, `qk_nope_head_dim`, `qk_rope_head_dim` and `v_head_dim`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MlaSpec {
    /// Rank of the queries' compression (1536 in DeepSeek-V3); 0 where queries are projected
    /// straight from the hidden state (DeepSeek-V2-Lite).
    pub q_lora_rank: u32,
    /// Rank of the keys' and values' latent, which the cache stores (512).
    pub kv_lora_rank: u32,
    /// Per-head query and key width without rotary embedding (128).
    pub qk_nope_head_dim: u32,
    /// Per-head width with rotary embedding, shared by all heads on the key side (64).
    pub qk_rope_head_dim: u32,
    /// Per-head value width (128).
    pub v_head_dim: u32,
}

impl MlaSpec {
    /// Values cached per token and layer: the latent and the shared rotary key.
    pub fn cache_width(&self) -> u64 {
        self.kv_lora_rank as u64 + self.qk_rope_head_dim as u64
    }

    /// Per-head query (and key) width: `qk_nope_head_dim + qk_rope_head_dim`.
    pub fn qk_head_dim(&self) -> u64 {
        self.qk_nope_head_dim as u64 + self.qk_rope_head_dim as u64
    }

    /// Width of the replicated down-projection (q_a and kv_a fused): what every rank computes.
    pub fn down_width(&self) -> u64 {
        self.q_lora_rank as u64 + self.cache_width()
    }

    /// Input width of the query up-projection: the query latent, or the hidden state itself.
    pub fn q_input(&self, hidden: u64) -> u64 {
        if self.q_lora_rank > 0 { self.q_lora_rank as u64 } else { hidden }
    }

    /// `(k, n)` of a layer's projections on a GPU with `heads` of the query heads, in the order
    /// they run: the replicated down-projection, q_b (or q), kv_b, o.
    pub fn projections(&self, hidden: u64, heads: u64) -> [(u64, u64); 4] {
        let kv_b_width = self.qk_nope_head_dim as u64 + self.v_head_dim as u64;
        [
            (hidden, self.down_width()),
            (self.q_input(hidden), heads * self.qk_head_dim()),
            (self.kv_lora_rank as u64, heads * kv_b_width),
            (heads * self.v_head_dim as u64, hidden),
        ]
    }

    /// Elements of one layer's attention weights with `heads` query heads: the projections and
    /// the two latent RMSNorms (q_a's, when queries are compressed, and kv_a's).
    pub fn weight_elements(&self, hidden: u64, heads: u64) -> u128 {
        let norms = self.q_lora_rank as u128 + self.kv_lora_rank as u128;
        self.projections(hidden, heads).iter().map(|&(k, n)| k as u128 * n as u128).sum::<u128>() + norms
    }
}
