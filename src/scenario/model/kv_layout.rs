//! How vLLM V1 lays out the KV cache of a model whose layers attend differently: its hybrid
//! KV-cache manager (`vllm/v1/core/kv_cache_utils.py`, `_get_kv_cache_groups_uniform_page_size`;
//! `vllm/model_executor/models/config.py`, `HybridAttentionMambaModelConfig`).
//!
//! ```text
//!  layers of each kind ─► groups of `group_size` layers, one block table per group
//!  one pool of blocks, each `group_size` pages (a page: one layer's block_size tokens, or one
//!  linear-attention state padded to that size); every group draws from the same pool
//!
//!  a sequence of T tokens holds   full groups    × ⌈T / block⌉
//!                               + sliding groups × at most ⌈(W − 1) / block⌉ + 1
//!                               + linear groups  × 1
//! ```
//!
//! `group_size` is the fewest layers of any kind (the "1" of the n:1 patterns that hybrid models
//! follow), or the most where that is under 1.5 times the fewest, so that 12 + 13 layers pad to
//! two groups of 13 rather than three of 12.
//!
//! The scheduler counts blocks of the growing kind: one of its blocks is the pool blocks of
//! every full-attention group, and what the other groups hold is a fixed number of blocks per
//! sequence (rounded up to whole scheduler blocks), held from admission to release. That is
//! vLLM's steady state; a sliding window holds fewer blocks while its sequence is shorter than
//! the window, and a prefill chunk briefly holds the blocks of its whole chunk before the
//! window's old ones are freed. Neither transient is modelled.
//!
//! Llama 4's chunked local attention is laid out as full attention: vLLM turns the hybrid
//! manager off for it by default ("a latency regression", unless
//! `VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE=1`), and then every layer with a KV
//! cache keeps all of its tokens (`unify_hybrid_kv_cache_specs`).

use super::ModelSpec;

/// The alignment of an attention block, tokens: FlashAttention's kernels need a multiple of 16
/// (`kernel_block_alignment_size` in `HybridAttentionMambaModelConfig`).
const KERNEL_BLOCK_ALIGNMENT: u64 = 16;

/// The KV cache's blocks for one GPU of a replica, as the scheduler counts them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KvLayout {
    /// Tokens per block: the engine's, or larger where a linear-attention state must fit one
    /// attention page (vLLM raises it, and logs "Setting attention block size to … tokens").
    pub block_size: u32,
    /// Bytes of one scheduler block on one GPU: `block_size` tokens of every full-attention
    /// layer (all KV layers, in a model without a hybrid layout).
    pub block_bytes: u64,
    /// Blocks each running sequence holds beside those of its tokens: its sliding windows and
    /// linear-attention states (0 without a hybrid layout).
    pub blocks_per_seq: u32,
}

impl ModelSpec {
    /// KV bytes one token of one KV layer (full, sliding or chunked attention) takes on one GPU.
    /// With DeepSeek sparse attention, the indexer's key beside the latent: vLLM puts both in
    /// one group, whose page is the sum of theirs (see [`super::DsaSpec`]).
    pub fn kv_bytes_per_token_per_layer_per_gpu(&self, tp: u32) -> u64 {
        match &self.mla {
            Some(mla) => mla
                .cache_width()
                .saturating_mul(self.kv_dtype.bytes())
                .saturating_add(self.dsa.map_or(0, |dsa| dsa.cache_bytes_per_token())),
            None => (self.kv_heads_per_gpu(tp) as u64).saturating_mul(self.head_dim as u64).saturating_mul(2 * self.kv_dtype.bytes()),
        }
    }

    /// The KV cache's layout at tensor parallelism `tp` for an engine configured with
    /// `block_size` tokens per block (see the module's documentation).
    pub fn kv_layout(&self, tp: u32, block_size: u32) -> KvLayout {
        let mix = &self.attention;
        let per_layer = self.kv_bytes_per_token_per_layer_per_gpu(tp);
        let kv_layers = mix.kv_layers(self.num_layers) as u64;
        let plain = KvLayout {
            block_size,
            block_bytes: (block_size as u64).saturating_mul(kv_layers).saturating_mul(per_layer),
            blocks_per_seq: 0,
        };
        // Chunked local attention turns the hybrid manager off (see the module's documentation).
        let sliding = if mix.chunked_layers > 0 { 0 } else { mix.sliding_layers as u64 };
        let linear = mix.linear.map_or(0, |l| l.layers as u64);
        let full = kv_layers - sliding;
        if (sliding == 0 && linear == 0) || full == 0 {
            return plain;
        }
        let counts: Vec<u64> = [full, sliding, linear].into_iter().filter(|&n| n > 0).collect();
        let fewest = *counts.iter().min().expect("full layers are present");
        let most = *counts.iter().max().expect("full layers are present");
        let group_size = if 2 * most < 3 * fewest { most } else { fewest };
        let groups = |layers: u64| layers.div_ceil(group_size);

        // A linear-attention state is one page: the attention block grows until its page holds
        // one, in steps of the kernels' alignment.
        let state_bytes = mix.linear.map_or(0, |l| l.state_bytes_per_gpu(tp, self.activation_bytes()));
        let state_block = KERNEL_BLOCK_ALIGNMENT * state_bytes.div_ceil(KERNEL_BLOCK_ALIGNMENT * per_layer.max(1));
        let block_size = (block_size as u64).max(state_block);

        let window_blocks = if sliding > 0 {
            (mix.sliding_window as u64).saturating_sub(1).div_ceil(block_size) + 1
        } else {
            0
        };
        let other_pool_blocks = groups(sliding) * window_blocks + groups(linear);
        let full_groups = groups(full);
        KvLayout {
            block_size: u32::try_from(block_size).unwrap_or(u32::MAX),
            block_bytes: block_size.saturating_mul(per_layer).saturating_mul(group_size).saturating_mul(full_groups),
            blocks_per_seq: u32::try_from(other_pool_blocks.div_ceil(full_groups)).unwrap_or(u32::MAX),
        }
    }

    /// Bytes of an activation element: what a linear-attention state is kept in (vLLM's
    /// `mamba_ssm_cache_dtype = auto` is the model's dtype), 4 in an f32 model, else 2.
    pub fn activation_bytes(&self) -> u64 {
        if self.weight_dtype == super::Dtype::Fp32 { 4 } else { 2 }
    }
}
