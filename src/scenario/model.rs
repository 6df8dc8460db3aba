//! Transformer dimensions: presets, explicit dimensions, or a Hugging Face `config.json`.
//!
//! Every model here is a decoder-only transformer with grouped-query attention and a gated
//! (SwiGLU) MLP: per layer, a fused QKV projection, an output projection, gate + up + down MLP
//! projections and two RMSNorms; an embedding table, a final norm and an LM head (possibly tied to
//! the embedding table). In a mixture-of-experts model ([`MoeSpec`]) every layer's MLP is a
//! router and `num_experts` gated MLPs, of which each token runs `experts_per_token`, beside an
//! optional shared MLP that every token runs (`ffn_size`, 0 when there is none).

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
    /// Intermediate size of the dense MLP; in a mixture-of-experts model, of its shared experts
    /// together (0: none).
    pub ffn_size: u32,
    pub vocab_size: u32,
    pub tied_embeddings: bool,
    pub max_position_embeddings: u32,
    pub weight_dtype: Dtype,
    pub kv_dtype: Dtype,
    /// Routed experts, in a mixture-of-experts model.
    pub moe: Option<MoeSpec>,
}

/// The routed experts of a mixture-of-experts model. Every layer has them (Mixtral, Qwen3-MoE);
/// models that interleave dense and sparse layers are refused when read.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MoeSpec {
    /// Routed experts per layer.
    pub num_experts: u32,
    /// Experts each token is routed to (top-k).
    pub experts_per_token: u32,
    /// Intermediate size of one expert's gated MLP.
    pub expert_ffn_size: u32,
    /// How unevenly tokens spread over experts: expert i (from 0) draws a share ∝ (i + 1)^−skew,
    /// a Zipf law; 0 (the default) is balanced routing, what load-balancing losses train for.
    pub routing_skew: f64,
    /// How the deployment places the experts on a replica's GPUs (`engine.expert_parallel`):
    /// whole experts, `num_experts / tp` per GPU, with tokens sent to their experts' GPUs and
    /// back by all-to-all; or (false, vLLM's default) every expert split over all GPUs by its
    /// intermediate size, like a dense MLP.
    pub expert_parallel: bool,
}

impl MoeSpec {
    /// One expert's intermediate size on one GPU: a `1/t` slice, or whole under expert parallelism.
    pub fn expert_ffn_per_gpu(&self, tensor_parallel: u32) -> f64 {
        if self.expert_parallel {
            self.expert_ffn_size as f64
        } else {
            (self.expert_ffn_size as f64 / tensor_parallel.max(1) as f64).ceil()
        }
    }
}

/// vLLM pads the vocabulary of `VocabParallelEmbedding` / `ParallelLMHead` up to a multiple of
/// this (`DEFAULT_VOCAB_PADDING_SIZE`) before splitting it across tensor-parallel ranks.
const VOCAB_PADDING: u64 = 64;

fn div_ceil(a: u64, b: u64) -> u64 {
    a.div_ceil(b)
}

/// A size computed in u128, as a u64: `u64::MAX` (16 EiB, more than any GPU) where it does not
/// fit, so that a size check refuses it instead of seeing a wrapped, small number.
fn saturate(x: u128) -> u64 {
    u64::try_from(x).unwrap_or(u64::MAX)
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
    /// Elements of one layer's linear weights (QKV, output, gate, up, down; and in a
    /// mixture-of-experts model the router and this GPU's part of the experts) per GPU.
    pub linear_elements_per_layer: u64,
}

impl ModelSpec {
    /// The per-GPU shard at tensor parallelism `tp`. Routed experts are split over the `tp`
    /// GPUs either way vLLM splits them: each expert's intermediate size by `tp` (tensor
    /// parallel), or whole experts, `num_experts / tp` per GPU (expert parallel); both hold the
    /// same elements when the sizes divide, and the larger is taken when they do not.
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
            // In u128, saturated: absurd dimensions must read as "too large", not wrap around.
            linear_elements_per_layer: saturate({
                let (h, heads, kv_heads, d, ffn) = (h as u128, heads as u128, kv_heads as u128, d as u128, ffn as u128);
                h * (heads + 2 * kv_heads) * d // QKV
                    + heads * d * h // output projection
                    + 3 * h * ffn // gate, up, down
                    + self.moe.map_or(0, |moe| {
                        let experts = moe.num_experts as u128;
                        let f = moe.expert_ffn_size as u128;
                        let tensor_parallel = experts * f.div_ceil(tp as u128);
                        let expert_parallel = experts.div_ceil(tp as u128) * f;
                        h * experts + 3 * h * tensor_parallel.max(expert_parallel)
                    })
            }),
        }
    }

    /// Parameters of the unsharded model (true vocabulary, no padding). A tied LM head is the
    /// embedding table and is counted once.
    pub fn param_count(&self) -> u64 {
        saturate(self.param_count_wide())
    }

    /// [`Self::param_count`] in u128, which no dimensions a `u32` holds can overflow.
    fn param_count_wide(&self) -> u128 {
        let h = self.hidden_size as u128;
        let q = self.num_heads as u128 * self.head_dim as u128;
        let kv = self.num_kv_heads as u128 * self.head_dim as u128;
        let f = self.ffn_size as u128;
        let v = self.vocab_size as u128;
        let experts = self.moe.map_or(0, |moe| h * moe.num_experts as u128 * (1 + 3 * moe.expert_ffn_size as u128));
        let per_layer = h * (q + 2 * kv) // fused QKV
            + q * h // output projection
            + 3 * h * f // gate, up, down (shared experts, in a mixture-of-experts model)
            + experts
            + 2 * h; // input and post-attention RMSNorm
        let embedding = v * h;
        let lm_head = if self.tied_embeddings { 0 } else { v * h };
        self.num_layers as u128 * per_layer + embedding + lm_head + h // + final norm
    }

    /// Parameters one token runs through: [`Self::param_count`] less the routed experts it is
    /// not sent to (all of them, in a dense model).
    pub fn active_param_count(&self) -> u64 {
        let idle = self.moe.map_or(0, |moe| {
            let per_expert = 3 * self.hidden_size as u128 * moe.expert_ffn_size as u128;
            (moe.num_experts - moe.experts_per_token.min(moe.num_experts)) as u128 * per_expert
        });
        saturate(self.param_count_wide() - self.num_layers as u128 * idle)
    }

    /// KV heads each GPU holds at tensor parallelism `tp`. When `tp` exceeds the number of KV
    /// heads, vLLM replicates KV heads so each rank holds one.
    pub fn kv_heads_per_gpu(&self, tp: u32) -> u32 {
        (self.num_kv_heads / tp.max(1)).max(1)
    }

    /// KV-cache bytes one token occupies on one GPU: layers × KV heads per GPU × head dim × 2 (K
    /// and V) × KV dtype bytes. Llama-3.1-405B at TP 8 in bf16: 126 × 1 × 128 × 2 × 2 = 64,512.
    pub fn kv_bytes_per_token_per_gpu(&self, tp: u32) -> u64 {
        (self.num_layers as u64)
            .saturating_mul(self.kv_heads_per_gpu(tp) as u64)
            .saturating_mul(self.head_dim as u64)
            .saturating_mul(2 * self.kv_dtype.bytes())
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
        let h = self.hidden_size as u128;
        let norm_elements = (2 * self.num_layers as u128 + 1) * h;
        let vocab_tables = if self.tied_embeddings { 1 } else { 2 };
        saturate(
            self.num_layers as u128 * shard.linear_elements_per_layer as u128 * self.weight_dtype.bytes() as u128
                + (vocab_tables * shard.vocab_rows as u128 * h + norm_elements) * self.unquantized_bytes() as u128,
        )
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
        // A routed token's experts' intermediates live beside the shared MLP's.
        let routed = self.moe.map_or(0, |moe| moe.experts_per_token as u64 * div_ceil(moe.expert_ffn_size as u64, tp));
        let f = div_ceil(self.ffn_size as u64, tp) + routed;
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

    /// The Hugging Face repository id of the preset called `name` (case-insensitive), which
    /// deploy commands serve.
    pub fn preset_hf_repo(name: &str) -> Option<&'static str> {
        let want = name.trim().to_ascii_lowercase();
        PRESETS.iter().find(|p| p.name.to_ascii_lowercase() == want).map(|p| p.hf_repo)
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
    /// methods are rejected rather than mis-sized. Mixture-of-experts keys: see
    /// [`moe_from_hf_config`].
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

        let num_layers = required("num_hidden_layers")?;
        let hidden_size = required("hidden_size")?;
        let num_heads = required("num_attention_heads")?;
        let num_kv_heads = uint("num_key_value_heads")?.unwrap_or(num_heads);
        let head_dim = uint("head_dim")?.unwrap_or(hidden_size / num_heads);
        let moe = moe_from_hf_config(&get, &uint, &required, &file_buf)?;
        let ffn_size = match moe {
            None => required("intermediate_size")?,
            Some((_, shared)) => shared,
        };
        let moe = moe.map(|(spec, _)| spec);
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
            moe,
        })
    }
}

/// The routed experts of a Hugging Face config, and the shared experts' intermediate size (0:
/// none); `None` for a dense model. Reads the keys of Mixtral (`num_local_experts`,
/// `intermediate_size` per expert), Qwen2/Qwen3-MoE (`num_experts`, `moe_intermediate_size`,
/// `shared_expert_intermediate_size`) and DeepSeek (`n_routed_experts`, `n_shared_experts` of
/// `moe_intermediate_size` each), with `num_experts_per_tok`. Refused rather than mis-sized:
/// dense layers among the sparse ones (`decoder_sparse_step` > 1, `mlp_only_layers`,
/// `first_k_dense_replace`) and multi-head latent attention (`kv_lora_rank`).
fn moe_from_hf_config<'v>(
    get: &dyn Fn(&str) -> Option<&'v serde_json::Value>,
    uint: &dyn Fn(&str) -> Result<Option<u32>, HfConfigError>,
    required: &dyn Fn(&str) -> Result<u32, HfConfigError>,
    file: &Path,
) -> Result<Option<(MoeSpec, u32)>, HfConfigError> {
    let mut experts = None;
    for key in ["num_local_experts", "num_experts", "n_routed_experts"] {
        if let Some(n) = uint(key)? {
            experts = Some(n);
            break;
        }
    }
    let Some(num_experts) = experts.filter(|&n| n > 1) else { return Ok(None) };
    let refuse = |key: &str, value: String, reason: &str| HfConfigError::BadValue {
        file: file.to_path_buf(),
        key: key.into(),
        value,
        reason: reason.into(),
    };
    if let Some(step) = uint("decoder_sparse_step")?.filter(|&s| s > 1) {
        return Err(refuse("decoder_sparse_step", step.to_string(), "dense layers between expert layers are not modelled"));
    }
    if let Some(layers) = get("mlp_only_layers").filter(|v| v.as_array().is_none_or(|a| !a.is_empty())) {
        return Err(refuse("mlp_only_layers", layers.to_string(), "dense layers among expert layers are not modelled"));
    }
    if let Some(k) = uint("first_k_dense_replace")? {
        return Err(refuse("first_k_dense_replace", k.to_string(), "dense layers before the expert layers are not modelled"));
    }
    if let Some(rank) = get("kv_lora_rank") {
        return Err(refuse("kv_lora_rank", rank.to_string(), "multi-head latent attention is not modelled"));
    }
    let experts_per_token = required("num_experts_per_tok")?;
    if experts_per_token > num_experts {
        return Err(refuse(
            "num_experts_per_tok",
            experts_per_token.to_string(),
            &format!("more experts per token than the {num_experts} experts"),
        ));
    }
    let expert_ffn_size = match uint("moe_intermediate_size")? {
        Some(f) => f,
        None => required("intermediate_size")?,
    };
    let shared = match (uint("shared_expert_intermediate_size")?, uint("n_shared_experts")?) {
        (Some(f), _) => f,
        (None, Some(n)) => n.saturating_mul(expert_ffn_size),
        (None, None) => 0,
    };
    Ok(Some((MoeSpec { num_experts, experts_per_token, expert_ffn_size, routing_skew: 0.0, expert_parallel: false }, shared)))
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
    /// The Hugging Face repository a deploy command serves: the instruction-tuned checkpoint,
    /// which chat serving runs (its config.json has the same dimensions as the base model's).
    hf_repo: &'static str,
    num_layers: u32,
    hidden_size: u32,
    num_heads: u32,
    num_kv_heads: u32,
    head_dim: u32,
    ffn_size: u32,
    vocab_size: u32,
    tied_embeddings: bool,
    max_position_embeddings: u32,
    moe: Option<MoeSpec>,
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
            moe: self.moe,
        }
    }
}

/// Numbers from each model's `config.json` on the Hugging Face Hub (the repository is named per
/// entry). Where `head_dim` is absent from the config, it is hidden / heads.
const PRESETS: &[Preset] = &[
    // meta-llama/Llama-3.1-8B (and -Instruct): config.json
    Preset {
        name: "Llama-3.1-8B",
        hf_repo: "meta-llama/Llama-3.1-8B-Instruct",
        num_layers: 32,
        hidden_size: 4096,
        num_heads: 32,
        num_kv_heads: 8,
        head_dim: 128,
        ffn_size: 14336,
        vocab_size: 128256,
        tied_embeddings: false,
        max_position_embeddings: 131072,
        moe: None,
    },
    // meta-llama/Llama-3.1-70B (and -Instruct): config.json
    Preset {
        name: "Llama-3.1-70B",
        hf_repo: "meta-llama/Llama-3.1-70B-Instruct",
        num_layers: 80,
        hidden_size: 8192,
        num_heads: 64,
        num_kv_heads: 8,
        head_dim: 128,
        ffn_size: 28672,
        vocab_size: 128256,
        tied_embeddings: false,
        max_position_embeddings: 131072,
        moe: None,
    },
    // meta-llama/Llama-3.1-405B (and -Instruct): config.json
    Preset {
        name: "Llama-3.1-405B",
        hf_repo: "meta-llama/Llama-3.1-405B-Instruct",
        num_layers: 126,
        hidden_size: 16384,
        num_heads: 128,
        num_kv_heads: 8,
        head_dim: 128,
        ffn_size: 53248,
        vocab_size: 128256,
        tied_embeddings: false,
        max_position_embeddings: 131072,
        moe: None,
    },
    // meta-llama/Llama-3.2-1B (and -Instruct): config.json (tie_word_embeddings: true, head_dim 64)
    Preset {
        name: "Llama-3.2-1B",
        hf_repo: "meta-llama/Llama-3.2-1B-Instruct",
        num_layers: 16,
        hidden_size: 2048,
        num_heads: 32,
        num_kv_heads: 8,
        head_dim: 64,
        ffn_size: 8192,
        vocab_size: 128256,
        tied_embeddings: true,
        max_position_embeddings: 131072,
        moe: None,
    },
    // meta-llama/Llama-3.2-3B (and -Instruct): config.json (tie_word_embeddings: true)
    Preset {
        name: "Llama-3.2-3B",
        hf_repo: "meta-llama/Llama-3.2-3B-Instruct",
        num_layers: 28,
        hidden_size: 3072,
        num_heads: 24,
        num_kv_heads: 8,
        head_dim: 128,
        ffn_size: 8192,
        vocab_size: 128256,
        tied_embeddings: true,
        max_position_embeddings: 131072,
        moe: None,
    },
    // Qwen/Qwen2.5-7B-Instruct: config.json (head_dim = 3584 / 28 = 128)
    Preset {
        name: "Qwen2.5-7B",
        hf_repo: "Qwen/Qwen2.5-7B-Instruct",
        num_layers: 28,
        hidden_size: 3584,
        num_heads: 28,
        num_kv_heads: 4,
        head_dim: 128,
        ffn_size: 18944,
        vocab_size: 152064,
        tied_embeddings: false,
        max_position_embeddings: 32768,
        moe: None,
    },
    // Qwen/Qwen2.5-72B-Instruct: config.json
    Preset {
        name: "Qwen2.5-72B",
        hf_repo: "Qwen/Qwen2.5-72B-Instruct",
        num_layers: 80,
        hidden_size: 8192,
        num_heads: 64,
        num_kv_heads: 8,
        head_dim: 128,
        ffn_size: 29568,
        vocab_size: 152064,
        tied_embeddings: false,
        max_position_embeddings: 32768,
        moe: None,
    },
    // mistralai/Mistral-7B-Instruct-v0.3: config.json (v0.3: vocab 32768, no sliding window)
    Preset {
        name: "Mistral-7B",
        hf_repo: "mistralai/Mistral-7B-Instruct-v0.3",
        num_layers: 32,
        hidden_size: 4096,
        num_heads: 32,
        num_kv_heads: 8,
        head_dim: 128,
        ffn_size: 14336,
        vocab_size: 32768,
        tied_embeddings: false,
        max_position_embeddings: 32768,
        moe: None,
    },
    // mistralai/Mixtral-8x7B-v0.1 (and -Instruct-v0.1): config.json (num_local_experts 8,
    // num_experts_per_tok 2, intermediate_size 14336 per expert, no shared expert)
    Preset {
        name: "Mixtral-8x7B",
        hf_repo: "mistralai/Mixtral-8x7B-Instruct-v0.1",
        num_layers: 32,
        hidden_size: 4096,
        num_heads: 32,
        num_kv_heads: 8,
        head_dim: 128,
        ffn_size: 0,
        vocab_size: 32000,
        tied_embeddings: false,
        max_position_embeddings: 32768,
        moe: Some(MoeSpec { num_experts: 8, experts_per_token: 2, expert_ffn_size: 14336, routing_skew: 0.0, expert_parallel: false }),
    },
    // Qwen/Qwen3-30B-A3B: config.json (num_experts 128, num_experts_per_tok 8,
    // moe_intermediate_size 768, head_dim 128, decoder_sparse_step 1, mlp_only_layers [])
    Preset {
        name: "Qwen3-30B-A3B",
        hf_repo: "Qwen/Qwen3-30B-A3B",
        num_layers: 48,
        hidden_size: 2048,
        num_heads: 32,
        num_kv_heads: 4,
        head_dim: 128,
        ffn_size: 0,
        vocab_size: 151936,
        tied_embeddings: false,
        max_position_embeddings: 40960,
        moe: Some(MoeSpec { num_experts: 128, experts_per_token: 8, expert_ffn_size: 768, routing_skew: 0.0, expert_parallel: false }),
    },
];

#[cfg(test)]
mod tests {
    use super::*;

    /// Published totals: Mixtral-8x7B 46.7B parameters, 12.9B active per token (Mistral AI's
    /// announcement; 46,702,792,704 in the Hub's safetensors index); Qwen3-30B-A3B 30.5B and
    /// 3.3B (its model card). Qwen3's q/k norms (256 per layer) are left out.
    #[test]
    fn mixture_of_experts_presets_count_their_published_parameters() {
        let mixtral = ModelSpec::preset("Mixtral-8x7B").unwrap();
        assert_eq!(mixtral.param_count(), 46_702_792_704);
        assert!((mixtral.active_param_count() as f64 / 12.9e9 - 1.0).abs() < 0.005, "{}", mixtral.active_param_count());
        let qwen = ModelSpec::preset("Qwen3-30B-A3B").unwrap();
        assert!((qwen.param_count() as f64 / 30.5e9 - 1.0).abs() < 0.005, "{}", qwen.param_count());
        assert!((qwen.active_param_count() as f64 / 3.3e9 - 1.0).abs() < 0.02, "{}", qwen.active_param_count());
        // Every expert's weights are resident: a GPU at TP 2 holds half, either way of splitting.
        assert_eq!(mixtral.weight_bytes_per_gpu(2), {
            let mut ep = mixtral.clone();
            ep.moe.as_mut().unwrap().expert_parallel = true;
            ep.weight_bytes_per_gpu(2)
        });
        let dense_part = ModelSpec { moe: None, ..mixtral.clone() };
        assert!(mixtral.weight_bytes_per_gpu(1) > 10 * dense_part.weight_bytes_per_gpu(1) / 2);
        assert_eq!(dense_part.active_param_count(), dense_part.param_count());
    }

    #[test]
    fn hf_configs_of_mixture_of_experts_models() {
        let mixtral = r#"{"num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32,
            "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 32000,
            "max_position_embeddings": 32768, "num_local_experts": 8, "num_experts_per_tok": 2,
            "torch_dtype": "bfloat16"}"#;
        let m = ModelSpec::from_hf_config_json(mixtral, Path::new("m.json"), "Mixtral-8x7B").unwrap();
        assert_eq!(m, ModelSpec::preset("Mixtral-8x7B").unwrap());
        // Qwen2-MoE: a shared expert beside 60 routed ones of 1408.
        let qwen2 = r#"{"num_hidden_layers": 24, "hidden_size": 2048, "num_attention_heads": 16,
            "num_key_value_heads": 16, "intermediate_size": 5632, "moe_intermediate_size": 1408,
            "shared_expert_intermediate_size": 5632, "num_experts": 60, "num_experts_per_tok": 4,
            "vocab_size": 151936, "max_position_embeddings": 8192, "decoder_sparse_step": 1,
            "mlp_only_layers": []}"#;
        let m = ModelSpec::from_hf_config_json(qwen2, Path::new("q.json"), "q").unwrap();
        assert_eq!((m.ffn_size, m.moe.unwrap().num_experts, m.moe.unwrap().expert_ffn_size), (5632, 60, 1408));
        // What is not modelled is refused, naming the key.
        for (key, value) in [("decoder_sparse_step", "2"), ("mlp_only_layers", "[0, 1]"), ("kv_lora_rank", "512"), ("num_experts_per_tok", "9")] {
            let text = mixtral.replace("\"torch_dtype\"", &format!("\"{key}\": {value}, \"torch_dtype\""));
            let text = if key == "num_experts_per_tok" { mixtral.replace("\"num_experts_per_tok\": 2", "\"num_experts_per_tok\": 9") } else { text };
            let err = ModelSpec::from_hf_config_json(&text, Path::new("m.json"), "m").unwrap_err().to_string();
            assert!(err.contains(&format!("`{key}`")), "{err}");
        }
        let no_k = mixtral.replace("\"num_experts_per_tok\": 2,", "");
        let err = ModelSpec::from_hf_config_json(&no_k, Path::new("m.json"), "m").unwrap_err().to_string();
        assert!(err.contains("num_experts_per_tok"), "{err}");
    }

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
        assert_eq!(ModelSpec::preset_names().len(), 10);
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
