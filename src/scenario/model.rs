//! Transformer dimensions: presets, explicit dimensions, or a Hugging Face `config.json`.
//!
//! Every model here is a dense decoder-only transformer with grouped-query attention and a gated
//! (SwiGLU) MLP: per layer, a fused QKV projection, an output projection, gate + up + down MLP
//! projections and two RMSNorms; an embedding table, a final norm and an LM head (possibly tied to
//! the embedding table).

use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// Numeric type of weights or KV cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
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

    /// Canonical lowercase name, as accepted in scenario files.
    pub fn name(self) -> &'static str {
        match self {
            Dtype::Bf16 => "bf16",
            Dtype::Fp16 => "fp16",
            Dtype::Fp8 => "fp8",
            Dtype::Fp32 => "fp32",
        }
    }

    /// Parses a dtype name, case-insensitively. Accepts our short names and the spellings vLLM and
    /// Hugging Face use (`bfloat16`, `float16`, `half`, `fp8_e4m3`, `fp8_e5m2`, `float32`).
    /// (`auto` is handled by the caller, since its meaning depends on context.)
    pub fn parse(name: &str) -> Option<Dtype> {
        match name.trim().to_ascii_lowercase().as_str() {
            "bf16" | "bfloat16" => Some(Dtype::Bf16),
            "fp16" | "float16" | "half" => Some(Dtype::Fp16),
            "fp8" | "fp8_e4m3" | "fp8_e5m2" | "float8" | "float8_e4m3fn" => Some(Dtype::Fp8),
            "fp32" | "float32" | "float" => Some(Dtype::Fp32),
            _ => None,
        }
    }

    /// Names listed in "unknown dtype" errors.
    pub const NAMES: &'static [&'static str] = &["bf16", "fp16", "fp8", "fp32"];
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

/// vLLM pads the vocabulary of `VocabParallelEmbedding` / `ParallelLMHead` up to a multiple of
/// this (`DEFAULT_VOCAB_PADDING_SIZE`) before splitting it across tensor-parallel ranks.
const VOCAB_PADDING: u64 = 64;

fn div_ceil(a: u64, b: u64) -> u64 {
    a.div_ceil(b)
}

/// What one GPU holds of a model at a tensor-parallel degree, as vLLM shards it (Megatron split:
/// QKV and gate/up column-parallel, output and down row-parallel, vocabulary-parallel embedding
/// and LM head). Sizes that do not divide are rounded up: the slowest rank sets the pace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shard {
    pub heads: u64,
    /// KV heads per GPU: replicated when `tp` exceeds them, so at least one.
    pub kv_heads: u64,
    pub ffn: u64,
    /// The vocabulary padded to vLLM's multiple of 64, before splitting.
    pub vocab_padded: u64,
    /// Rows of the embedding table and LM head per GPU.
    pub vocab_rows: u64,
    /// Elements of one layer's linear weights (QKV, output, gate, up, down) per GPU.
    pub linear_elements_per_layer: u64,
}

impl ModelSpec {
    /// The per-GPU shard at tensor parallelism `tp`.
    pub fn shard(&self, tp: u32) -> Shard {
        let tp = tp.max(1) as u64;
        let h = self.hidden_size as u64;
        let d = self.head_dim as u64;
        let heads = div_ceil(self.num_heads as u64, tp);
        let kv_heads = self.kv_heads_per_gpu(tp as u32) as u64;
        let ffn = div_ceil(self.ffn_size as u64, tp);
        let vocab_padded = div_ceil(self.vocab_size as u64, VOCAB_PADDING) * VOCAB_PADDING;
        Shard {
            heads,
            kv_heads,
            ffn,
            vocab_padded,
            vocab_rows: div_ceil(vocab_padded, tp),
            linear_elements_per_layer: h * (heads + 2 * kv_heads) * d // QKV
                + heads * d * h // output projection
                + 3 * h * ffn, // gate, up, down
        }
    }

    /// Parameters of the unsharded model (true vocabulary, no padding). A tied LM head is the
    /// embedding table and is counted once.
    pub fn param_count(&self) -> u64 {
        let h = self.hidden_size as u64;
        let q = self.num_heads as u64 * self.head_dim as u64;
        let kv = self.num_kv_heads as u64 * self.head_dim as u64;
        let f = self.ffn_size as u64;
        let v = self.vocab_size as u64;
        let per_layer = h * (q + 2 * kv) // fused QKV
            + q * h // output projection
            + 3 * h * f // gate, up, down
            + 2 * h; // input and post-attention RMSNorm
        let embedding = v * h;
        let lm_head = if self.tied_embeddings { 0 } else { v * h };
        self.num_layers as u64 * per_layer + embedding + lm_head + h // + final norm
    }

    /// KV heads each GPU holds at tensor parallelism `tp`. When `tp` exceeds the number of KV
    /// heads, vLLM replicates KV heads so each rank holds one.
    pub fn kv_heads_per_gpu(&self, tp: u32) -> u32 {
        (self.num_kv_heads / tp.max(1)).max(1)
    }

    /// KV-cache bytes one token occupies on one GPU: layers × KV heads per GPU × head dim × 2 (K
    /// and V) × KV dtype bytes. Llama-3.1-405B at TP 8 in bf16: 126 × 1 × 128 × 2 × 2 = 64,512.
    pub fn kv_bytes_per_token_per_gpu(&self, tp: u32) -> u64 {
        self.num_layers as u64
            * self.kv_heads_per_gpu(tp) as u64
            * self.head_dim as u64
            * 2
            * self.kv_dtype.bytes()
    }

    /// Bytes of the dtype that embeddings, LM head and norms are stored in. vLLM's FP8 weight
    /// quantization quantizes only the linear layers of the decoder; the embedding table, LM
    /// head and norms stay in the 16-bit activation dtype.
    fn unquantized_bytes(&self) -> u64 {
        match self.weight_dtype {
            Dtype::Fp8 => 2,
            d => d.bytes(),
        }
    }

    /// Bytes of weights one GPU holds at tensor parallelism `tp`, as vLLM shards them:
    ///
    /// - QKV and gate/up projections are column-parallel (`heads/tp` query heads, KV heads per
    ///   GPU as [`Self::kv_heads_per_gpu`] — replicated when `tp` exceeds them — and `ffn/tp`
    ///   columns); output and down projections are row-parallel. Sizes that do not divide are
    ///   rounded up.
    /// - The embedding table (`VocabParallelEmbedding`) and the LM head (`ParallelLMHead`) are
    ///   sharded along the vocabulary: the vocabulary is padded to a multiple of 64 and each rank
    ///   holds `ceil(padded / tp)` rows. A tied LM head shares the embedding's storage and is not
    ///   counted twice.
    /// - RMSNorm weights are replicated on every rank.
    ///
    /// Llama-3.1-8B in bf16 at TP 1: 8,030,261,248 parameters → 16,060,522,496 bytes.
    pub fn weight_bytes_per_gpu(&self, tp: u32) -> u64 {
        let shard = self.shard(tp);
        let h = self.hidden_size as u64;
        let norm_elements = (2 * self.num_layers as u64 + 1) * h;
        let vocab_tables = if self.tied_embeddings { 1 } else { 2 };
        self.num_layers as u64 * shard.linear_elements_per_layer * self.weight_dtype.bytes()
            + (vocab_tables * shard.vocab_rows * h + norm_elements) * self.unquantized_bytes()
    }

    /// Estimated peak activation bytes on one GPU during the engine's start-up profiling forward
    /// pass, which vLLM runs with `max_num_batched_tokens` tokens spread over `max_num_seqs`
    /// sequences, then samples one token per sequence. The peak memory it measures there (weights
    /// excluded) is held back from the KV cache. This is an *estimate* of PyTorch's allocator
    /// peak, not a measurement:
    ///
    /// - per token, in the activation dtype (2 bytes; 4 for fp32 models): about four hidden-sized
    ///   tensors alive at once (residual, normed input, attention output, MLP output), this
    ///   GPU's QKV output, and the MLP's gate/up output (2 × ffn/tp) plus its activated output
    ///   (ffn/tp);
    /// - per sampled sequence (min(max_num_seqs, tokens)): logits over the full vocabulary in
    ///   fp32, gathered onto the first rank, with about three live copies (logits, probabilities,
    ///   log-probabilities) in the sampler.
    pub fn profile_activation_bytes_per_gpu(
        &self,
        tp: u32,
        max_num_batched_tokens: u32,
        max_num_seqs: u32,
    ) -> u64 {
        let tp = tp.max(1) as u64;
        let act_bytes = if self.weight_dtype == Dtype::Fp32 {
            4
        } else {
            2
        };
        let h = self.hidden_size as u64;
        let qkv = (div_ceil(self.num_heads as u64, tp)
            + 2 * self.kv_heads_per_gpu(tp as u32) as u64)
            * self.head_dim as u64;
        let f = div_ceil(self.ffn_size as u64, tp);
        let tokens = max_num_batched_tokens as u64;
        let per_token = (4 * h + qkv + 3 * f) * act_bytes;
        let sampled = (max_num_seqs as u64).min(tokens);
        let logits = sampled * self.vocab_size as u64 * 4 * 3;
        tokens * per_token + logits
    }

    /// A preset by name, case-insensitively, with bf16 weights and KV cache.
    pub fn preset(name: &str) -> Option<ModelSpec> {
        let want = name.trim().to_ascii_lowercase();
        PRESETS
            .iter()
            .find(|p| p.name.to_ascii_lowercase() == want)
            .map(Preset::spec)
    }

    /// The names of all model presets, in the order they are listed in errors.
    pub fn preset_names() -> Vec<&'static str> {
        PRESETS.iter().map(|p| p.name).collect()
    }

    /// Reads a Hugging Face `config.json` (Llama, Qwen2, Mistral and other dense GQA models).
    pub fn from_hf_config_file(path: &Path) -> Result<ModelSpec, HfConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| HfConfigError::Io {
            file: path.to_path_buf(),
            source,
        })?;
        let default_name = path
            .parent()
            .and_then(|p| p.file_name())
            .map(|n| n.to_string_lossy().into_owned())
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| "custom".to_string());
        Self::from_hf_config_json(&text, path, &default_name)
    }

    /// Parses the text of a Hugging Face `config.json`; `file` is only used in errors. Keys:
    /// `num_hidden_layers`, `hidden_size`, `num_attention_heads`, `num_key_value_heads`
    /// (default: `num_attention_heads`, i.e. no GQA), `head_dim` (default: hidden / heads),
    /// `intermediate_size`, `vocab_size`, `tie_word_embeddings` (default false, as in
    /// `LlamaConfig`, `Qwen2Config` and `MistralConfig`), `max_position_embeddings`, and
    /// `torch_dtype` (or `dtype`, its newer name) for the weights' dtype: float32 checkpoints are
    /// served in bf16 (vLLM's `--dtype auto` downcasts them), absent means bf16. A
    /// `quantization_config` with `quant_method = "fp8"` means fp8 weights; other quantization
    /// methods and mixture-of-experts configs are rejected rather than mis-sized.
    pub fn from_hf_config_json(
        text: &str,
        file: &Path,
        name: &str,
    ) -> Result<ModelSpec, HfConfigError> {
        let file_buf = file.to_path_buf();
        let json: serde_json::Value =
            serde_json::from_str(text).map_err(|source| HfConfigError::Json {
                file: file_buf.clone(),
                source,
            })?;
        let obj = json.as_object().ok_or_else(|| HfConfigError::BadValue {
            file: file_buf.clone(),
            key: "(top level)".into(),
            value: "not an object".into(),
            reason: "config.json must hold a JSON object".into(),
        })?;
        let get = |key: &str| obj.get(key).filter(|v| !v.is_null());
        let uint = |key: &str| -> Result<Option<u32>, HfConfigError> {
            match get(key) {
                None => Ok(None),
                Some(v) => match v.as_u64() {
                    Some(n) if n > 0 && n <= u32::MAX as u64 => Ok(Some(n as u32)),
                    _ => Err(HfConfigError::BadValue {
                        file: file_buf.clone(),
                        key: key.into(),
                        value: v.to_string(),
                        reason: "expected a positive integer".into(),
                    }),
                },
            }
        };
        let required = |key: &str| -> Result<u32, HfConfigError> {
            uint(key)?.ok_or_else(|| HfConfigError::MissingKey {
                file: file_buf.clone(),
                key: key.into(),
            })
        };

        for moe_key in ["num_local_experts", "num_experts", "n_routed_experts"] {
            if let Some(n) = get(moe_key).and_then(|v| v.as_u64()).filter(|&n| n > 1) {
                return Err(HfConfigError::BadValue {
                    file: file_buf.clone(),
                    key: moe_key.into(),
                    value: n.to_string(),
                    reason: "mixture-of-experts models are not modelled (dense models only)".into(),
                });
            }
        }

        let num_layers = required("num_hidden_layers")?;
        let hidden_size = required("hidden_size")?;
        let num_heads = required("num_attention_heads")?;
        let num_kv_heads = uint("num_key_value_heads")?.unwrap_or(num_heads);
        let head_dim = uint("head_dim")?.unwrap_or(hidden_size / num_heads);
        let ffn_size = required("intermediate_size")?;
        let vocab_size = required("vocab_size")?;
        let max_position_embeddings = required("max_position_embeddings")?;
        let tied_embeddings = match get("tie_word_embeddings") {
            None => false,
            Some(v) => v.as_bool().ok_or_else(|| HfConfigError::BadValue {
                file: file_buf.clone(),
                key: "tie_word_embeddings".into(),
                value: v.to_string(),
                reason: "expected true or false".into(),
            })?,
        };
        let dtype_key = if get("torch_dtype").is_some() {
            "torch_dtype"
        } else {
            "dtype"
        };
        let mut weight_dtype = match get(dtype_key) {
            None => Dtype::Bf16,
            Some(v) => match v.as_str().and_then(Dtype::parse) {
                Some(Dtype::Fp32) => Dtype::Bf16,
                Some(d) => d,
                None => {
                    return Err(HfConfigError::BadValue {
                        file: file_buf.clone(),
                        key: dtype_key.into(),
                        value: v.to_string(),
                        reason: "expected \"bfloat16\", \"float16\" or \"float32\"".into(),
                    });
                }
            },
        };
        if let Some(q) = get("quantization_config") {
            let method = q.get("quant_method").and_then(|m| m.as_str()).unwrap_or("");
            if method.eq_ignore_ascii_case("fp8") {
                weight_dtype = Dtype::Fp8;
            } else {
                return Err(HfConfigError::BadValue {
                    file: file_buf.clone(),
                    key: "quantization_config.quant_method".into(),
                    value: format!("{method:?}"),
                    reason: "only fp8 quantization is modelled".into(),
                });
            }
        }
        Ok(ModelSpec {
            name: name.to_string(),
            num_layers,
            hidden_size,
            num_heads,
            num_kv_heads,
            head_dim,
            ffn_size,
            vocab_size,
            tied_embeddings,
            max_position_embeddings,
            weight_dtype,
            kv_dtype: default_kv_dtype(weight_dtype),
        })
    }
}

/// The KV-cache dtype vLLM uses with `--kv-cache-dtype auto`: the model's activation dtype. FP8
/// weight quantization keeps 16-bit activations, so fp8 weights still get a bf16 KV cache.
pub fn default_kv_dtype(weight_dtype: Dtype) -> Dtype {
    match weight_dtype {
        Dtype::Fp8 => Dtype::Bf16,
        d => d,
    }
}

/// Why a Hugging Face `config.json` could not be used. Each names the file.
#[derive(Debug, thiserror::Error)]
pub enum HfConfigError {
    #[error("{}: cannot read: {source}", file.display())]
    Io {
        file: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: not valid JSON: {source}", file.display())]
    Json {
        file: PathBuf,
        source: serde_json::Error,
    },
    #[error("{}: missing key `{key}`", file.display())]
    MissingKey { file: PathBuf, key: String },
    #[error("{}: key `{key}` = {value}: {reason}", file.display())]
    BadValue {
        file: PathBuf,
        key: String,
        value: String,
        reason: String,
    },
}

struct Preset {
    name: &'static str,
    num_layers: u32,
    hidden_size: u32,
    num_heads: u32,
    num_kv_heads: u32,
    head_dim: u32,
    ffn_size: u32,
    vocab_size: u32,
    tied_embeddings: bool,
    max_position_embeddings: u32,
}

impl Preset {
    fn spec(&self) -> ModelSpec {
        ModelSpec {
            name: self.name.to_string(),
            num_layers: self.num_layers,
            hidden_size: self.hidden_size,
            num_heads: self.num_heads,
            num_kv_heads: self.num_kv_heads,
            head_dim: self.head_dim,
            ffn_size: self.ffn_size,
            vocab_size: self.vocab_size,
            tied_embeddings: self.tied_embeddings,
            max_position_embeddings: self.max_position_embeddings,
            weight_dtype: Dtype::Bf16,
            kv_dtype: Dtype::Bf16,
        }
    }
}

/// Numbers from each model's `config.json` on the Hugging Face Hub (the repository is named per
/// entry). Where `head_dim` is absent from the config, it is hidden / heads.
const PRESETS: &[Preset] = &[
    // meta-llama/Llama-3.1-8B (and -Instruct): config.json
    Preset {
        name: "Llama-3.1-8B",
        num_layers: 32,
        hidden_size: 4096,
        num_heads: 32,
        num_kv_heads: 8,
        head_dim: 128,
        ffn_size: 14336,
        vocab_size: 128256,
        tied_embeddings: false,
        max_position_embeddings: 131072,
    },
    // meta-llama/Llama-3.1-70B (and -Instruct): config.json
    Preset {
        name: "Llama-3.1-70B",
        num_layers: 80,
        hidden_size: 8192,
        num_heads: 64,
        num_kv_heads: 8,
        head_dim: 128,
        ffn_size: 28672,
        vocab_size: 128256,
        tied_embeddings: false,
        max_position_embeddings: 131072,
    },
    // meta-llama/Llama-3.1-405B (and -Instruct): config.json
    Preset {
        name: "Llama-3.1-405B",
        num_layers: 126,
        hidden_size: 16384,
        num_heads: 128,
        num_kv_heads: 8,
        head_dim: 128,
        ffn_size: 53248,
        vocab_size: 128256,
        tied_embeddings: false,
        max_position_embeddings: 131072,
    },
    // meta-llama/Llama-3.2-1B (and -Instruct): config.json (tie_word_embeddings: true, head_dim 64)
    Preset {
        name: "Llama-3.2-1B",
        num_layers: 16,
        hidden_size: 2048,
        num_heads: 32,
        num_kv_heads: 8,
        head_dim: 64,
        ffn_size: 8192,
        vocab_size: 128256,
        tied_embeddings: true,
        max_position_embeddings: 131072,
    },
    // meta-llama/Llama-3.2-3B (and -Instruct): config.json (tie_word_embeddings: true)
    Preset {
        name: "Llama-3.2-3B",
        num_layers: 28,
        hidden_size: 3072,
        num_heads: 24,
        num_kv_heads: 8,
        head_dim: 128,
        ffn_size: 8192,
        vocab_size: 128256,
        tied_embeddings: true,
        max_position_embeddings: 131072,
    },
    // Qwen/Qwen2.5-7B-Instruct: config.json (head_dim = 3584 / 28 = 128)
    Preset {
        name: "Qwen2.5-7B",
        num_layers: 28,
        hidden_size: 3584,
        num_heads: 28,
        num_kv_heads: 4,
        head_dim: 128,
        ffn_size: 18944,
        vocab_size: 152064,
        tied_embeddings: false,
        max_position_embeddings: 32768,
    },
    // Qwen/Qwen2.5-72B-Instruct: config.json
    Preset {
        name: "Qwen2.5-72B",
        num_layers: 80,
        hidden_size: 8192,
        num_heads: 64,
        num_kv_heads: 8,
        head_dim: 128,
        ffn_size: 29568,
        vocab_size: 152064,
        tied_embeddings: false,
        max_position_embeddings: 32768,
    },
    // mistralai/Mistral-7B-Instruct-v0.3: config.json (v0.3: vocab 32768, no sliding window)
    Preset {
        name: "Mistral-7B",
        num_layers: 32,
        hidden_size: 4096,
        num_heads: 32,
        num_kv_heads: 8,
        head_dim: 128,
        ffn_size: 14336,
        vocab_size: 32768,
        tied_embeddings: false,
        max_position_embeddings: 32768,
    },
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn llama_8b_params_and_weight_bytes() {
        let m = ModelSpec::preset("llama-3.1-8b").unwrap();
        assert_eq!(m.name, "Llama-3.1-8B");
        assert_eq!(m.param_count(), 8_030_261_248);
        assert_eq!(m.weight_bytes_per_gpu(1), 16_060_522_496);
        assert!((m.weight_bytes_per_gpu(1) as f64 - 16.06e9).abs() < 0.01e9);
    }

    #[test]
    fn kv_bytes_405b_tp8() {
        let m = ModelSpec::preset("Llama-3.1-405B").unwrap();
        assert_eq!(m.kv_heads_per_gpu(8), 1);
        assert_eq!(m.kv_bytes_per_token_per_gpu(8), 64_512);
        // ENGINES.md: about 101 GB of bf16 weights per GPU at TP 8.
        let gb = m.weight_bytes_per_gpu(8) as f64 / 1e9;
        assert!((100.0..103.0).contains(&gb), "{gb}");
    }

    #[test]
    fn kv_heads_replicate_beyond_tp() {
        let m = ModelSpec::preset("Qwen2.5-7B").unwrap();
        assert_eq!(m.kv_heads_per_gpu(1), 4);
        assert_eq!(m.kv_heads_per_gpu(2), 2);
        assert_eq!(m.kv_heads_per_gpu(4), 1);
        assert_eq!(m.kv_heads_per_gpu(7), 1);
    }

    #[test]
    fn tied_embeddings_counted_once() {
        let m = ModelSpec::preset("Llama-3.2-1B").unwrap();
        // meta-llama/Llama-3.2-1B: 1,235,814,400 parameters.
        assert_eq!(m.param_count(), 1_235_814_400);
        assert_eq!(m.weight_bytes_per_gpu(1), 2 * 1_235_814_400);
    }

    #[test]
    fn fp8_weights_keep_16bit_embeddings() {
        let mut m = ModelSpec::preset("Llama-3.1-8B").unwrap();
        m.weight_dtype = Dtype::Fp8;
        let embed = 2 * 128256u64 * 4096;
        let norms = 65u64 * 4096;
        assert_eq!(
            m.weight_bytes_per_gpu(1),
            (m.param_count() - embed - norms) + 2 * (embed + norms)
        );
    }

    #[test]
    fn unknown_preset_is_none() {
        assert!(ModelSpec::preset("gpt-5").is_none());
        assert_eq!(ModelSpec::preset_names().len(), 8);
    }

    #[test]
    fn hf_config_parses_and_defaults() {
        let text = r#"{"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
            "intermediate_size": 128, "vocab_size": 1000, "max_position_embeddings": 512,
            "torch_dtype": "float16", "head_dim": null}"#;
        let m = ModelSpec::from_hf_config_json(text, Path::new("x/config.json"), "x").unwrap();
        assert_eq!(
            (m.num_kv_heads, m.head_dim, m.tied_embeddings),
            (4, 16, false)
        );
        assert_eq!((m.weight_dtype, m.kv_dtype), (Dtype::Fp16, Dtype::Fp16));
    }

    #[test]
    fn hf_config_missing_key_names_file_and_key() {
        let text = r#"{"num_hidden_layers": 2}"#;
        let e = ModelSpec::from_hf_config_json(text, Path::new("m/config.json"), "m").unwrap_err();
        let s = e.to_string();
        assert!(
            s.contains("m/config.json") && s.contains("hidden_size"),
            "{s}"
        );
    }
}
