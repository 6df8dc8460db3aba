//! Transformer dimensions: presets, explicit dimensions, or a Hugging Face `config.json`.

use serde::{Deserialize, Serialize};

/// Numeric type of weights or KV cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Dtype {
    Bf16,
    Fp16,
    Fp8,
    Fp32,
}

impl Dtype {
    pub fn bytes(self) -> u64 {
        match self {
            Dtype::Fp8 => 1,
            Dtype::Bf16 | Dtype::Fp16 => 2,
            Dtype::Fp32 => 4,
        }
    }
}

/// A decoder-only transformer with grouped-query attention and a gated (SwiGLU) MLP.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelSpec {
    pub name: String,
    pub num_layers: u32,
    pub hidden_size: u32,
    pub num_heads: u32,
    pub num_kv_heads: u32,
    pub head_dim: u32,
    /// Intermediate size of the MLP.
    pub ffn_size: u32,
    pub vocab_size: u32,
    pub tied_embeddings: bool,
    pub max_position_embeddings: u32,
    pub weight_dtype: Dtype,
    pub kv_dtype: Dtype,
}
