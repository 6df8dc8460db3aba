//! The shape of a Llama-architecture model: from a Hugging Face `config.json`, or a named size
//! for random weights.

use std::path::Path;

use super::ModelError;

/// Hyper-parameters of a Llama-architecture decoder (Llama 2/3, Mistral without sliding window,
/// TinyLlama, SmolLM, ...). Field names follow Hugging Face's `config.json`.
#[derive(Clone, Debug, PartialEq)]
pub struct LlamaConfig {
    /// Width of the residual stream (`hidden_size`).
    pub hidden_size: usize,
    /// Decoder layers (`num_hidden_layers`).
    pub num_layers: usize,
    /// Query heads (`num_attention_heads`).
    pub num_heads: usize,
    /// Key/value heads (`num_key_value_heads`); divides `num_heads` (grouped-query attention).
    pub num_kv_heads: usize,
    /// Dimension of one head (`head_dim`, by default `hidden_size / num_heads`); even (RoPE pairs).
    pub head_dim: usize,
    /// Width of the gated MLP (`intermediate_size`).
    pub intermediate_size: usize,
    /// Tokens in the vocabulary (`vocab_size`).
    pub vocab_size: usize,
    /// RoPE base (`rope_theta`): 10 000 for Llama 2, 500 000 for Llama 3.
    pub rope_theta: f64,
    /// RMSNorm epsilon (`rms_norm_eps`).
    pub rms_norm_eps: f32,
    /// Whether the output projection is the embedding matrix (`tie_word_embeddings`).
    pub tie_word_embeddings: bool,
    /// Longest sequence, in tokens, the RoPE table covers (`max_position_embeddings`).
    pub max_position_embeddings: usize,
}

impl LlamaConfig {
    /// For tests: 2 layers, hidden 64, 4 heads of 16, 2 KV heads, MLP 128, vocab 256 (~0.1M
    /// parameters); a forward pass takes microseconds.
    pub fn tiny() -> LlamaConfig {
        LlamaConfig {
            hidden_size: 64,
            num_layers: 2,
            num_heads: 4,
            num_kv_heads: 2,
            head_dim: 16,
            intermediate_size: 128,
            vocab_size: 256,
            rope_theta: 10_000.0,
            rms_norm_eps: 1e-5,
            tie_word_embeddings: false,
            max_position_embeddings: 1024,
        }
    }

    /// For quick end-to-end runs: 4 layers, hidden 256, 8 heads of 32, 4 KV heads, MLP 768,
    /// Llama 2's vocabulary of 32 000, tied embeddings (~11M parameters).
    pub fn small() -> LlamaConfig {
        LlamaConfig {
            hidden_size: 256,
            num_layers: 4,
            num_heads: 8,
            num_kv_heads: 4,
            head_dim: 32,
            intermediate_size: 768,
            vocab_size: 32_000,
            rope_theta: 10_000.0,
            rms_norm_eps: 1e-5,
            tie_word_embeddings: true,
            max_position_embeddings: 2048,
        }
    }

    /// For CPU benchmarks: 12 layers, hidden 768, 12 heads of 64, 4 KV heads, MLP 2048,
    /// vocab 32 000, tied embeddings: ~100M parameters (24.6M of them the embedding).
    pub fn m100() -> LlamaConfig {
        LlamaConfig {
            hidden_size: 768,
            num_layers: 12,
            num_heads: 12,
            num_kv_heads: 4,
            head_dim: 64,
            intermediate_size: 2048,
            vocab_size: 32_000,
            rope_theta: 10_000.0,
            rms_norm_eps: 1e-5,
            tie_word_embeddings: true,
            max_position_embeddings: 2048,
        }
    }

    /// Llama-3.2-1B's layers (Meta's `config.json`: 16 layers, hidden 2048, 32 heads of 64, 8
    /// KV heads, MLP 8192, tied embeddings, RoPE θ 500 000), for GPU runs whose steps should be
    /// the kernels' time rather than launch latency: ~1.04B parameters. The vocabulary is Llama
    /// 2's 32 000 ids, not Llama 3's 128 256, so that a shipped tokenizer serves it (clients count
    /// tokens by re-encoding text); its RoPE scaling is left out, and positions stop at 8192.
    pub fn b1() -> LlamaConfig {
        LlamaConfig {
            hidden_size: 2048,
            num_layers: 16,
            num_heads: 32,
            num_kv_heads: 8,
            head_dim: 64,
            intermediate_size: 8192,
            vocab_size: 32_000,
            rope_theta: 500_000.0,
            rms_norm_eps: 1e-5,
            tie_word_embeddings: true,
            max_position_embeddings: 8192,
        }
    }

    /// The named random-weight sizes of `--random-weights`.
    pub const NAMES: [&'static str; 4] = ["tiny", "small", "100m", "1b"];

    /// One of [`Self::NAMES`]; `None` for any other name.
    pub fn named(name: &str) -> Option<LlamaConfig> {
        match name {
            "tiny" => Some(LlamaConfig::tiny()),
            "small" => Some(LlamaConfig::small()),
            "100m" => Some(LlamaConfig::m100()),
            "1b" => Some(LlamaConfig::b1()),
            _ => None,
        }
    }

    /// Why a `--random-weights` name was refused.
    pub fn unknown_name_reason() -> String {
        format!("expected one of {}", Self::NAMES.join(", "))
    }

    /// Reads a Hugging Face `config.json`.
    pub fn from_file(path: &Path) -> Result<LlamaConfig, ModelError> {
        let text = std::fs::read_to_string(path).map_err(|source| ModelError::Io { path: path.to_owned(), source })?;
        LlamaConfig::from_json(&text).map_err(|message| ModelError::Config { path: path.to_owned(), message })
    }

    /// Parses a Hugging Face `config.json`'s text. Optional keys take Hugging Face's defaults
    /// (`num_key_value_heads` = heads, `head_dim` = hidden / heads, `rope_theta` 10 000,
    /// `rms_norm_eps` 1e-6, untied embeddings, 2048 positions). Refuses what would make it
    /// compute a different function silently: another architecture, RoPE scaling, biases.
    pub fn from_json(text: &str) -> Result<LlamaConfig, String> {
        let json: serde_json::Value = serde_json::from_str(text).map_err(|e| format!("not valid JSON: {e}"))?;
        let obj = json.as_object().ok_or("expected a JSON object")?;
        if let Some(model_type) = obj.get("model_type").and_then(|v| v.as_str())
            && !matches!(model_type, "llama" | "mistral")
        {
            return Err(format!("model_type {model_type:?} is not a Llama-architecture model (llama, mistral)"));
        }
        if obj.get("rope_scaling").is_some_and(|v| !v.is_null()) {
            return Err("rope_scaling is not supported (plain RoPE only)".into());
        }
        for key in ["attention_bias", "mlp_bias"] {
            if obj.get(key).and_then(|v| v.as_bool()) == Some(true) {
                return Err(format!("{key} = true is not supported (Llama has no biases)"));
            }
        }
        if let Some(window) = obj.get("sliding_window").and_then(|v| v.as_u64()) {
            let positions = obj.get("max_position_embeddings").and_then(|v| v.as_u64()).unwrap_or(2048);
            if window < positions {
                return Err(format!("sliding_window {window} is not supported (full attention only)"));
            }
        }
        let uint = |key: &str| -> Result<Option<usize>, String> {
            match obj.get(key) {
                None | Some(serde_json::Value::Null) => Ok(None),
                Some(v) => v.as_u64().map(|n| Some(n as usize)).ok_or_else(|| format!("{key}: expected a non-negative integer, got {v}")),
            }
        };
        let required = |key: &str| uint(key)?.ok_or_else(|| format!("{key}: missing"));
        let float = |key: &str, default: f64| -> Result<f64, String> {
            match obj.get(key) {
                None | Some(serde_json::Value::Null) => Ok(default),
                Some(v) => v.as_f64().ok_or_else(|| format!("{key}: expected a number, got {v}")),
            }
        };
        let hidden_size = required("hidden_size")?;
        let num_heads = required("num_attention_heads")?;
        if num_heads == 0 {
            return Err("num_attention_heads: must be positive".into());
        }
        let config = LlamaConfig {
            hidden_size,
            num_layers: required("num_hidden_layers")?,
            num_heads,
            num_kv_heads: uint("num_key_value_heads")?.unwrap_or(num_heads),
            head_dim: uint("head_dim")?.unwrap_or(hidden_size / num_heads),
            intermediate_size: required("intermediate_size")?,
            vocab_size: required("vocab_size")?,
            rope_theta: float("rope_theta", 10_000.0)?,
            rms_norm_eps: float("rms_norm_eps", 1e-6)? as f32,
            tie_word_embeddings: obj.get("tie_word_embeddings").and_then(|v| v.as_bool()).unwrap_or(false),
            max_position_embeddings: uint("max_position_embeddings")?.unwrap_or(2048),
        };
        config.validate()?;
        Ok(config)
    }

    /// This config as a Hugging Face `config.json` (`LlamaForCausalLM`), which
    /// [`LlamaConfig::from_json`] reads back unchanged.
    pub fn to_hf_json(&self) -> String {
        let json = serde_json::json!({
            "architectures": ["LlamaForCausalLM"],
            "model_type": "llama",
            "hidden_size": self.hidden_size,
            "num_hidden_layers": self.num_layers,
            "num_attention_heads": self.num_heads,
            "num_key_value_heads": self.num_kv_heads,
            "head_dim": self.head_dim,
            "intermediate_size": self.intermediate_size,
            "vocab_size": self.vocab_size,
            "rope_theta": self.rope_theta,
            "rms_norm_eps": self.rms_norm_eps as f64,
            "tie_word_embeddings": self.tie_word_embeddings,
            "max_position_embeddings": self.max_position_embeddings,
            "hidden_act": "silu",
            "torch_dtype": "float32",
        });
        serde_json::to_string_pretty(&json).expect("a JSON value always serialises")
    }

    /// Checks the sizes the kernels rely on; the message names the offending key.
    pub fn validate(&self) -> Result<(), String> {
        let positive = [
            ("hidden_size", self.hidden_size),
            ("num_hidden_layers", self.num_layers),
            ("num_attention_heads", self.num_heads),
            ("num_key_value_heads", self.num_kv_heads),
            ("head_dim", self.head_dim),
            ("intermediate_size", self.intermediate_size),
            ("vocab_size", self.vocab_size),
            ("max_position_embeddings", self.max_position_embeddings),
        ];
        if let Some((key, _)) = positive.iter().find(|(_, v)| *v == 0) {
            return Err(format!("{key}: must be positive"));
        }
        if !self.num_heads.is_multiple_of(self.num_kv_heads) {
            return Err(format!(
                "num_attention_heads {} is not a multiple of num_key_value_heads {}",
                self.num_heads, self.num_kv_heads
            ));
        }
        if !self.head_dim.is_multiple_of(2) {
            return Err(format!("head_dim {} must be even (RoPE rotates pairs)", self.head_dim));
        }
        if self.vocab_size > u32::MAX as usize {
            return Err(format!("vocab_size {} does not fit token ids of 32 bits", self.vocab_size));
        }
        // Written so that NaN fails too.
        if !(self.rope_theta.is_finite() && self.rope_theta > 0.0 && self.rms_norm_eps.is_finite() && self.rms_norm_eps >= 0.0) {
            return Err("rope_theta must be positive and rms_norm_eps non-negative".into());
        }
        Ok(())
    }

    /// Width of all query heads together, `num_heads · head_dim`.
    pub fn q_dim(&self) -> usize {
        self.num_heads * self.head_dim
    }

    /// Width of the keys (or values) of one token, `num_kv_heads · head_dim`.
    pub fn kv_dim(&self) -> usize {
        self.num_kv_heads * self.head_dim
    }

    /// Parameters, as Hugging Face counts them (a tied output projection counts once).
    pub fn num_parameters(&self) -> u64 {
        let (h, q, kv, f, v) = (self.hidden_size, self.q_dim(), self.kv_dim(), self.intermediate_size, self.vocab_size);
        let layer = h * (q + 2 * kv) + q * h + 3 * h * f + 2 * h;
        let head = if self.tie_word_embeddings { 0 } else { h * v };
        (v * h + self.num_layers * layer + h + head) as u64
    }

    /// Bytes of f32 KV cache one block of `block_size` positions takes, all layers together.
    pub fn kv_bytes_per_block(&self, block_size: usize) -> usize {
        2 * self.num_layers * block_size * self.kv_dim() * std::mem::size_of::<f32>()
    }
}
