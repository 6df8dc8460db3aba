//! DeepSeek sparse attention (DSA), as DeepSeek-V3.2 adds it to multi-head latent attention.
//!
//! ```text
//!  query latent (q_lora) ─► wq_b ─► index_n_heads × index_head_dim     indexer queries (fp8)
//!  hidden ─► wk ‖ weights_proj ─► one key of index_head_dim, LayerNorm   cached: fp8 + a scale
//!                               └► index_n_heads weights, one per head
//!  score(t, s) = Σ_h w_h · ReLU(q_h(t) · k(s))     over every earlier key s
//!  MLA attends to the index_topk keys of highest score (all of them while fewer are cached)
//! ```
//!
//! vLLM (`vllm/model_executor/models/deepseek_v2.py`, class `Indexer`) replicates `wq_b` and the
//! fused `wk_weights_proj` on every tensor-parallel rank ("no tensor parallel, just
//! replicated"), keeps `wk_weights_proj` unquantized, and caches per token and layer
//! `index_head_dim` fp8 values plus one fp32 scale per 128 of them
//! (`DeepseekV32IndexerCache`, an `MLAAttentionSpec` of one head of
//! `head_dim + head_dim / 128 × 4` uint8). That spec and the latent's share one KV-cache group
//! (`UniformTypeKVCacheSpecs` in `vllm/v1/kv_cache_interface.py`: layers that "need the same
//! number of token slots", whose page is the sum of their pages), so a block holds both.

use super::hf_error::HfConfigError;
use super::MlaSpec;
use std::path::Path;

/// Values sharing one fp32 scale in the indexer's key cache (vLLM's `quant_block_size`).
const INDEX_QUANT_BLOCK: u64 = 128;
/// Bytes of one such scale.
const INDEX_SCALE_BYTES: u64 = 4;
/// Bytes of one cached indexer key value (fp8, whatever the KV cache's dtype).
const INDEX_VALUE_BYTES: u64 = 1;

/// The lightning indexer's dimensions, from a config's `index_topk`, `index_n_heads` and
/// `index_head_dim` (DeepSeek-V3.2: 2048, 64, 128).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DsaSpec {
    /// Keys each query's MLA attends to once more are cached.
    pub index_topk: u32,
    /// The indexer's query heads, each scoring every key.
    pub index_n_heads: u32,
    /// Width of the indexer's queries' heads and of its one key per token.
    pub index_head_dim: u32,
}

impl DsaSpec {
    /// Bytes of one token's indexer key in one layer, on every GPU: fp8 values and their
    /// scales. DeepSeek-V3.2: 128 + 4 = 132.
    pub fn cache_bytes_per_token(&self) -> u64 {
        let d = self.index_head_dim as u64;
        d * INDEX_VALUE_BYTES + d.div_ceil(INDEX_QUANT_BLOCK) * INDEX_SCALE_BYTES
    }

    /// Keys MLA attends to for a query that sees `visible` keys: all of them up to `index_topk`.
    pub fn selected(&self, visible: u64) -> u64 {
        visible.min(self.index_topk as u64)
    }

    /// `(k, n)` of the indexer's projections, in the order they run, on every GPU alike
    /// (replicated): `wq_b` from the query latent, and `wk` fused with `weights_proj`.
    pub fn projections(&self, hidden: u64, mla: &MlaSpec) -> [(u64, u64); 2] {
        let heads = self.index_n_heads as u64;
        let d = self.index_head_dim as u64;
        [(mla.q_input(hidden), heads * d), (hidden, d + heads)]
    }

    /// Elements of one layer's indexer weights: the projections and `k_norm`, a LayerNorm with
    /// a weight and a bias. DeepSeek-V3.2: 1536 × 8192 + 7168 × (128 + 64) + 2 × 128 =
    /// 13,959,424.
    pub fn weight_elements(&self, hidden: u64, mla: &MlaSpec) -> u128 {
        let norm = 2 * self.index_head_dim as u128;
        self.projections(hidden, mla).iter().map(|&(k, n)| k as u128 * n as u128).sum::<u128>() + norm
    }
}

/// The indexer of a config, where it has one: all three `index_*` keys are then required, and
/// so is MLA with a query latent (the indexer's queries come from it). `model_type` has been
/// checked by `hf_keys` (the keys are read only for `deepseek_v32`); a `deepseek_v32` config
/// without them is refused, since vLLM's DeepSeek-V3.2 code reads them.
pub(super) fn from_hf_config(
    uint: &dyn Fn(&str) -> Result<Option<u32>, HfConfigError>,
    required: &dyn Fn(&str) -> Result<u32, HfConfigError>,
    mla: Option<&MlaSpec>,
    model_type: &str,
    file: &Path,
) -> Result<Option<DsaSpec>, HfConfigError> {
    let Some(index_topk) = uint("index_topk")? else {
        return match model_type {
            "deepseek_v32" => Err(HfConfigError::MissingKey { file: file.to_path_buf(), key: "index_topk".into() }),
            _ if uint("index_n_heads")?.is_some() || uint("index_head_dim")?.is_some() => {
                Err(HfConfigError::MissingKey { file: file.to_path_buf(), key: "index_topk".into() })
            }
            _ => Ok(None),
        };
    };
    let dsa = DsaSpec { index_topk, index_n_heads: required("index_n_heads")?, index_head_dim: required("index_head_dim")? };
    match mla {
        Some(mla) if mla.q_lora_rank > 0 => Ok(Some(dsa)),
        _ => Err(HfConfigError::BadValue {
            file: file.to_path_buf(),
            key: "index_topk".into(),
            value: index_topk.to_string(),
            reason: "DeepSeek sparse attention needs multi-head latent attention with a query latent (`kv_lora_rank` and `q_lora_rank`)".into(),
        }),
    }
}
