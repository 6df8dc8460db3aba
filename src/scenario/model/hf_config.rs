//! Reading a Hugging Face `config.json`.

use super::hf_attention::attention_from_hf_config;
use super::hf_keys::{TEXT_WRAPPERS, brief, check_keys, harmless_by_name};
use super::hf_error::HfConfigError;
use super::quant::{HfQuant, from_hf_config};
use super::{Dtype, MlaSpec, ModelSpec, MoeSpec, default_kv_dtype};
use serde_json::{Map, Value};
use std::path::Path;

impl ModelSpec {
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
    /// `quantization_config` is read by `quant::from_hf_config` (fp8, block-scaled fp8, AWQ, GPTQ,
    /// MXFP4, NVFP4); other methods and settings are rejected rather than mis-sized. Mixture-of-experts keys: see
    /// [`moe_from_hf_config`]. Every other key is checked first, by the rule in `hf_keys`:
    /// architecture that is not modelled is refused, naming the key, never priced as if absent.
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
        if let Some(text) = text_model(obj, file)? {
            return Self::from_hf_config_object(&text, file, name).map_err(|e| e.within("text_config"));
        }
        Self::from_hf_config_object(obj, file, name)
    }

    /// [`Self::from_hf_config_json`] on the parsed object of a text model's config.
    fn from_hf_config_object(obj: &Map<String, Value>, file: &Path, name: &str) -> Result<ModelSpec, HfConfigError> {
        let file_buf = file.to_path_buf();
        check_keys(obj, file)?;
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
        let mla = mla_from_hf_config(&uint, &required)?;
        // With MLA, what an engine without it would run: every head its own key and value, of
        // the query-key width (vLLM's head size with MLA disabled).
        let (num_kv_heads, head_dim) = match &mla {
            Some(mla) => (num_heads, u32::try_from(mla.qk_head_dim()).unwrap_or(u32::MAX)),
            None => (uint("num_key_value_heads")?.unwrap_or(num_heads), uint("head_dim")?.unwrap_or(hidden_size / num_heads)),
        };
        let model_type = get("model_type").and_then(Value::as_str).unwrap_or_default();
        let dsa = super::dsa::from_hf_config(&uint, &required, mla.as_ref(), model_type, file)?;
        let moe = moe_from_hf_config(&get, &uint, &required, &file_buf, num_layers, model_type)?;
        let attention = attention_from_hf_config(obj, file, num_layers, model_type)?;
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
        // `check_keys` has refused what `quant` does not model.
        let refuse = |key: &str, value: &serde_json::Value, reason: &str| HfConfigError::BadValue {
            file: file_buf.clone(),
            key: key.into(),
            value: brief(value),
            reason: reason.into(),
        };
        let weight_quant = match get("quantization_config").map(|q| from_hf_config(q, &refuse)).transpose()? {
            None => None,
            Some(HfQuant::Fp8PerTensor) => {
                weight_dtype = Dtype::Fp8;
                None
            }
            Some(HfQuant::Scheme(quant)) => {
                weight_dtype = quant.scheme.weight_dtype(weight_dtype);
                Some(quant)
            }
        };
        let model = ModelSpec {
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
            mla,
            dsa,
            attention,
            weight_quant,
        };
        match model.weight_quant.and_then(|q| q.mismatch(&model)) {
            Some(why) => Err(refuse("quantization_config.quant_method", &obj["quantization_config"]["quant_method"], &why)),
            None => Ok(model),
        }
    }
}

/// Where `obj` is a multimodal wrapper of a modelled text model ([`TEXT_WRAPPERS`]), that text
/// model's config, with the wrapper's dtype where it gives none of its own. The wrapper may hold
/// only what says what the checkpoint is; a vision encoder is refused (its weights would take
/// memory that the text model's sizes do not count).
fn text_model(obj: &Map<String, Value>, file: &Path) -> Result<Option<Map<String, Value>>, HfConfigError> {
    let wrapper = obj.get("model_type").and_then(Value::as_str).is_some_and(|t| TEXT_WRAPPERS.contains(&t));
    let Some(Value::Object(text)) = obj.get("text_config").filter(|_| wrapper) else { return Ok(None) };
    const WRAPPER_KEYS: &[&str] = &["architectures", "model_type", "text_config", "torch_dtype", "dtype", "transformers_version", "tie_word_embeddings"];
    let metadata = |key: &str| WRAPPER_KEYS.contains(&key) || harmless_by_name(key);
    if let Some((key, value)) = obj.iter().filter(|(_, v)| !v.is_null()).find(|(key, _)| !metadata(key)) {
        let reason = if key == "vision_config" {
            "a vision encoder is not modelled; to simulate text-only serving, remove `vision_config` from a copy of config.json (its weights are then not counted)"
        } else {
            "a key of the multimodal wrapper servesim does not know (it reads the wrapper's text_config)"
        };
        return Err(HfConfigError::BadValue { file: file.to_path_buf(), key: key.clone(), value: brief(value), reason: reason.into() });
    }
    let mut text = text.clone();
    for key in ["torch_dtype", "dtype"] {
        if let Some(dtype) = obj.get(key).filter(|_| !text.contains_key("torch_dtype") && !text.contains_key("dtype")) {
            text.insert(key.into(), dtype.clone());
        }
    }
    Ok(Some(text))
}

/// Multi-head latent attention's dimensions, where `kv_lora_rank` is given: then
/// `qk_nope_head_dim`, `qk_rope_head_dim` and `v_head_dim` are required, and `q_lora_rank` is
/// optional (absent or null in DeepSeek-V2-Lite, whose queries are projected from the hidden
/// state).
fn mla_from_hf_config(
    uint: &dyn Fn(&str) -> Result<Option<u32>, HfConfigError>,
    required: &dyn Fn(&str) -> Result<u32, HfConfigError>,
) -> Result<Option<MlaSpec>, HfConfigError> {
    let Some(kv_lora_rank) = uint("kv_lora_rank")? else { return Ok(None) };
    Ok(Some(MlaSpec {
        q_lora_rank: uint("q_lora_rank")?.unwrap_or(0),
        kv_lora_rank,
        qk_nope_head_dim: required("qk_nope_head_dim")?,
        qk_rope_head_dim: required("qk_rope_head_dim")?,
        v_head_dim: required("v_head_dim")?,
    }))
}

/// The routed experts of a Hugging Face config, and the shared experts' intermediate size (0:
/// none); `None` for a dense model. Reads the keys of Mixtral (`num_local_experts`,
/// `intermediate_size` per expert), Qwen2/Qwen3-MoE (`num_experts`, `moe_intermediate_size`,
/// `shared_expert_intermediate_size`) and DeepSeek (`n_routed_experts`, `n_shared_experts` of
/// `moe_intermediate_size` each), with `num_experts_per_tok`, and DeepSeek's leading dense
/// layers (`first_k_dense_replace` of `intermediate_size`). Refused rather than mis-sized:
/// dense layers among the sparse ones (`decoder_sparse_step` > 1, `mlp_only_layers`; and
/// `moe_layer_freq` ≠ 1, refused with the other architectural keys in `hf_keys`).
fn moe_from_hf_config<'v>(
    get: &dyn Fn(&str) -> Option<&'v serde_json::Value>,
    uint: &dyn Fn(&str) -> Result<Option<u32>, HfConfigError>,
    required: &dyn Fn(&str) -> Result<u32, HfConfigError>,
    file: &Path,
    num_layers: u32,
    model_type: &str,
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
    let experts_per_token = required("num_experts_per_tok")?;
    // gpt-oss gives the count twice.
    if let Some(also) = uint("experts_per_token")?.filter(|&k| k != experts_per_token) {
        return Err(refuse("experts_per_token", also.to_string(), &format!("differs from num_experts_per_tok ({experts_per_token})")));
    }
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
        // Llama 4's MoE layer runs a shared expert of the experts' size (`Llama4MoE`'s
        // `shared_expert`).
        (None, None) if model_type == "llama4_text" => expert_ffn_size,
        (None, None) => 0,
    };
    let (dense_layers, dense_ffn_size) = match interleaved_dense_layers(get, uint, &refuse, num_layers)? {
        Some(dense) => (dense, if dense > 0 { required("intermediate_size_mlp")? } else { 0 }),
        None => {
            // 0 is a valid count here (every layer has experts), which `uint` refuses.
            let dense_layers = match get("first_k_dense_replace") {
                None => 0,
                Some(v) => match v.as_u64().and_then(|k| u32::try_from(k).ok()).filter(|&k| k < num_layers) {
                    Some(k) => k,
                    None => {
                        return Err(refuse(
                            "first_k_dense_replace",
                            v.to_string(),
                            &format!("expected a count of leading dense layers below the {num_layers} layers"),
                        ));
                    }
                },
            };
            // The dense layers' MLP is `intermediate_size`; DeepSeek's experts are `moe_intermediate_size`.
            (dense_layers, if dense_layers > 0 { required("intermediate_size")? } else { 0 })
        }
    };
    let moe = MoeSpec { num_experts, experts_per_token, expert_ffn_size, routing_skew: 0.0, expert_parallel: false, dense_layers, dense_ffn_size };
    Ok(Some((moe, shared)))
}

/// Llama 4's dense layers among its expert layers, where the config places experts by
/// `moe_layers` (their indices) or `interleave_moe_layer_step` (every n-th layer from the n-th,
/// as `Llama4TextConfig` builds `moe_layers`): how many layers have a dense MLP. `None` where
/// neither key is given.
fn interleaved_dense_layers<'v>(
    get: &dyn Fn(&str) -> Option<&'v Value>,
    uint: &dyn Fn(&str) -> Result<Option<u32>, HfConfigError>,
    refuse: &dyn Fn(&str, String, &str) -> HfConfigError,
    num_layers: u32,
) -> Result<Option<u32>, HfConfigError> {
    if let Some(layers) = get("moe_layers") {
        let indices = layers.as_array().ok_or_else(|| refuse("moe_layers", brief(layers), "expected a list of layer indices"))?;
        let mut seen = vec![false; num_layers as usize];
        for index in indices {
            match index.as_u64().filter(|&i| i < num_layers as u64) {
                Some(i) if !seen[i as usize] => seen[i as usize] = true,
                _ => return Err(refuse("moe_layers", brief(index), &format!("expected distinct layer indices below {num_layers}"))),
            }
        }
        return Ok(Some(num_layers - indices.len() as u32));
    }
    Ok(uint("interleave_moe_layer_step")?.map(|step| num_layers - num_layers / step))
}
