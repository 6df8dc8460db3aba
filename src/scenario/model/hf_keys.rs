//! Every key of a Hugging Face `config.json`, sorted into what servesim reads, what it knows does
//! not change what serving costs, and what changes the architecture in a way servesim does not
//! model. The last is refused with the key's name and value: a config priced as full attention
//! everywhere when it has sliding-window or linear-attention layers gives numbers that look right
//! and are not.
//!
//! The rule, in order:
//!
//! 1. A key in [`refusal`]'s table with a value that changes the architecture is refused (for
//!    example `sliding_window` unless `use_sliding_window` is false or `layer_types` says which
//!    layers slide, an `index_*` or `linear_*` key servesim does not read).
//! 2. `quantization_config` must be a method and settings `quant` models, with only that
//!    method's keys;
//!    `rope_scaling` (or `rope_parameters`) must be of a type that does not change cost.
//! 3. `model_type`, when given, must be one of [`MODELLED_TYPES`]. vLLM picks the model's code
//!    from it, so it decides which keys matter; configs written by hand may leave it out.
//! 4. Any other key must be one servesim reads or one in [`HARMLESS`], or look like metadata by
//!    its name (token ids, dropout, auxiliary-loss coefficients, initialisers, `_private` keys:
//!    [`harmless_by_name`]). Anything else is refused as unknown: servesim cannot tell whether a
//!    key it has never seen changes the model, and a user of vLLM would rather be told than get
//!    a confident wrong answer. The error says how to go on when the key is harmless.

use super::hf_error::HfConfigError;
use serde_json::{Map, Value};
use std::path::Path;

/// The `model_type`s whose layers are all the decoder [`super::ModelSpec`] describes: grouped-query
/// attention over the whole context, a gated MLP or gated experts in every layer.
/// DeepSeek-V2/V3 and Kimi-K2 (`kimi_k2`, DeepSeek-V3's architecture) add multi-head latent
/// attention and leading dense layers, both modelled; DeepSeek-V3.2 (`deepseek_v32`) adds
/// DeepSeek sparse attention's indexer.
/// gpt-oss, Qwen3-Next, Llama 4 (its text model) and GLM-4.5 add the attention kinds of
/// [`super::AttentionMix`] and, in Llama 4, dense layers interleaved with the expert ones.
pub(super) const MODELLED_TYPES: &[&str] = &[
    "llama",
    "mistral",
    "mixtral",
    "qwen2",
    "qwen3",
    "qwen2_moe",
    "qwen3_moe",
    "deepseek_v2",
    "deepseek_v3",
    "deepseek_v32",
    "kimi_k2",
    "glm4_moe",
    "gpt_oss",
    "qwen3_next",
    "llama4_text",
];

/// The `model_type`s of multimodal wrappers whose `text_config` is a modelled text model, read
/// in their place (`super::hf_config`): the wrapper adds a vision encoder, refused when present.
pub(super) const TEXT_WRAPPERS: &[&str] = &["llama4"];

/// Keys the parser reads (see `from_hf_config_json` and `moe_from_hf_config`).
const READ: &[&str] = &[
    "num_hidden_layers",
    "hidden_size",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "intermediate_size",
    "vocab_size",
    "tie_word_embeddings",
    "max_position_embeddings",
    "torch_dtype",
    "dtype",
    "quantization_config",
    "model_type",
    "num_local_experts",
    "num_experts",
    "n_routed_experts",
    "num_experts_per_tok",
    "moe_intermediate_size",
    "shared_expert_intermediate_size",
    "n_shared_experts",
    "decoder_sparse_step",
    "mlp_only_layers",
    "first_k_dense_replace",
    "kv_lora_rank",
    "q_lora_rank",
    "qk_nope_head_dim",
    "qk_rope_head_dim",
    "v_head_dim",
    // DeepSeek sparse attention's indexer (`super::dsa`).
    "index_topk",
    "index_n_heads",
    "index_head_dim",
    // The attention kinds (`super::hf_attention`).
    "layer_types",
    "sliding_window",
    "full_attention_interval",
    "linear_num_key_heads",
    "linear_num_value_heads",
    "linear_key_head_dim",
    "linear_value_head_dim",
    "linear_conv_kernel_dim",
    "attn_output_gate",
    "attention_chunk_size",
    "no_rope_layers",
    "no_rope_layer_interval",
    // Llama 4's interleaved dense layers.
    "interleave_moe_layer_step",
    "moe_layers",
    "intermediate_size_mlp",
    // gpt-oss's second name for `num_experts_per_tok`, checked equal to it.
    "experts_per_token",
];

/// Keys that only some families' code reads, with those families' `model_type`s. In another
/// family vLLM would ignore them, so a config that has them is not what it seems: refused, as a
/// config with none of `model_type` (written by hand) is read with them.
const FAMILY_KEYS: &[(&str, &[&str])] = &[
    ("attention_chunk_size", &["llama4_text"]),
    ("no_rope_layers", &["llama4_text"]),
    ("no_rope_layer_interval", &["llama4_text"]),
    ("interleave_moe_layer_step", &["llama4_text"]),
    ("moe_layers", &["llama4_text"]),
    ("intermediate_size_mlp", &["llama4_text"]),
    ("full_attention_interval", &["qwen3_next"]),
    ("attn_output_gate", &["qwen3_next"]),
    ("linear_num_key_heads", &["qwen3_next"]),
    ("linear_num_value_heads", &["qwen3_next"]),
    ("linear_key_head_dim", &["qwen3_next"]),
    ("linear_value_head_dim", &["qwen3_next"]),
    ("linear_conv_kernel_dim", &["qwen3_next"]),
    ("experts_per_token", &["gpt_oss"]),
    ("index_topk", &["deepseek_v32"]),
    ("index_n_heads", &["deepseek_v32"]),
    ("index_head_dim", &["deepseek_v32"]),
];

/// Keys known not to change what a forward pass costs, each group with why.
const HARMLESS: &[&str] = &[
    // What the checkpoint is and how it was saved.
    "architectures",
    "transformers_version",
    "auto_map",
    "use_cache",
    "pretraining_tp",
    "torch_dtype_original",
    // Numerical constants: the same kernels run whatever their value.
    "rms_norm_eps",
    "layer_norm_eps",
    "rope_theta",
    "partial_rotary_factor",
    "initializer_range",
    "hidden_act",
    "swiglu_limit",
    "attn_logit_softcapping",
    // Llama 4's attention temperature for long contexts: a scale on the queries.
    "attn_temperature_tuning",
    "attn_scale",
    "floor_scale",
    // Bias adds and q/k norms are elementwise, a few hundred nanoseconds beside the GEMMs.
    "attention_bias",
    "mlp_bias",
    "qkv_bias",
    "use_qk_norm",
    // Only meaningful with `use_sliding_window: true`, which is refused.
    "max_window_layers",
    // Which experts a token goes to, not how many: the cost is the same.
    "norm_topk_prob",
    "routed_scaling_factor",
    "scoring_func",
    "topk_method",
    "n_group",
    "topk_group",
    "seq_aux",
    // Training-time settings.
    "ep_size",
    "output_router_logits",
    "router_jitter_noise",
    // Multi-token-prediction layers: vLLM loads them only as a speculative proposer
    // (`[engine.speculative] method = "mtp"`), not with the model.
    "num_nextn_predict_layers",
    // gpt-oss's context length before YaRN.
    "initial_context_length",
];

/// Keys that look like metadata by their name: token ids, dropout probabilities (0 at inference),
/// auxiliary-loss coefficients (training only), initialisers and `_private` keys.
pub(super) fn harmless_by_name(key: &str) -> bool {
    key.starts_with('_')
        || key.starts_with("initializer_")
        || key.contains("dropout")
        || key.contains("aux_loss")
        || ["_token_id", "_token_ids", "_token_index"].iter().any(|end| key.ends_with(end))
}

/// Rope scaling types that leave the attention kernels' work unchanged: they rescale positions
/// or frequencies (linear, NTK-dynamic, YaRN, Llama 3's smoothed interpolation, LongRoPE's
/// per-dimension factors) and YaRN's softmax scale, all folded into the rotary embedding.
const ROPE_TYPES_SAME_COST: &[&str] = &["default", "linear", "dynamic", "yarn", "llama3", "longrope"];

/// Whether a present value of `key` changes the architecture in a way not modelled, and why.
/// `obj` is the whole config, for keys whose meaning depends on another (`sliding_window` on
/// `use_sliding_window`). Checked in [`REFUSED`]'s order, so a config with several is refused
/// for the same key whatever order its file lists them in.
fn refusal(key: &str, value: &Value, obj: &Map<String, Value>) -> Option<&'static str> {
    let flag = |k: &str| obj.get(k).and_then(Value::as_bool);
    let lists_sliding_layers =
        obj.get("layer_types").and_then(Value::as_array).is_some_and(|a| a.iter().any(|t| t == "sliding_attention"));
    match key {
        "use_sliding_window" => {
            (value == &Value::Bool(true) && !lists_sliding_layers).then_some("sliding-window attention on layers not listed by `layer_types` is not modelled")
        }
        // Qwen2 and Qwen3 configs carry a window with `use_sliding_window: false`; a window as
        // long as the context attends to all of it. Where `layer_types` lists sliding layers,
        // the window is theirs (gpt-oss), which is modelled.
        "sliding_window" => {
            let longer_than_context = value.as_u64().zip(obj.get("max_position_embeddings").and_then(Value::as_u64)).is_some_and(|(w, ctx)| w >= ctx);
            (flag("use_sliding_window") != Some(false) && !longer_than_context && !lists_sliding_layers)
                .then_some("sliding-window attention on every layer (none listed as full attention) is not modelled")
        }
        "use_mrope" => (value == &Value::Bool(true)).then_some("multimodal rotary embeddings (M-RoPE) are not modelled"),
        "moe_layer_freq" => (value.as_u64() != Some(1)).then_some("dense layers between expert layers are not modelled"),
        "text_config" => Some("a multimodal model's configuration; its text model (with its own architecture) is not modelled"),
        "vision_config" => Some("a vision encoder is not modelled; to simulate text-only serving, remove `vision_config` from a copy of config.json (its weights are then not counted)"),
        "nope_layer_interval" => Some("layers without rotary embedding set by this key are not modelled (Llama 4's are `no_rope_layers`)"),
        "sinks" | "attention_sink" | "use_attention_sink" => Some("attention sinks outside gpt-oss are not modelled"),
        _ if key.starts_with("index_") && !READ.contains(&key) => Some("an indexer key servesim does not know (DeepSeek sparse attention's are index_topk, index_n_heads and index_head_dim)"),
        _ if key.starts_with("linear_") && !READ.contains(&key) => Some("a linear-attention key servesim does not know"),
        _ => None,
    }
}

/// The keys [`refusal`] knows, in the order they are checked: the attention's kind first (what
/// most changes the cost), then the layers' mix of dense and expert MLPs, then multimodal wrappers.
const REFUSED: &[&str] = &[
    "use_sliding_window",
    "sliding_window",
    "nope_layer_interval",
    "sinks",
    "attention_sink",
    "use_attention_sink",
    "use_mrope",
    "moe_layer_freq",
    "text_config",
    "vision_config",
];

/// Why a `model_type` that is not modelled is not, where it is a family people deploy.
fn model_type_reason(model_type: &str) -> String {
    let why = match model_type {
        "qwen3_5" | "qwen3_5_moe" | "qwen3_5_moe_text" => "Qwen3.5's multimodal rotary embedding and vision encoder are not modelled (Qwen3-Next, its text-only sibling, is)",
        _ => "this model family is not modelled",
    };
    format!("{why}; modelled: {}", MODELLED_TYPES.join(", "))
}

/// Checks every key of a config's top-level object by the rule in this module's documentation.
pub(super) fn check_keys(obj: &Map<String, Value>, file: &Path) -> Result<(), HfConfigError> {
    let refuse = |key: &str, value: String, reason: &str| HfConfigError::BadValue {
        file: file.to_path_buf(),
        key: key.into(),
        value,
        reason: reason.into(),
    };
    let present = |key: &str| obj.get(key).filter(|v| !v.is_null());
    // A multimodal wrapper's text model names the reason better than the wrapper does.
    if let Some(Value::Object(text)) = present("text_config") {
        for key in REFUSED.iter().filter(|k| **k != "text_config") {
            if let Some(why) = text.get(*key).filter(|v| !v.is_null()).and_then(|v| refusal(key, v, text)) {
                return Err(refuse(&format!("text_config.{key}"), brief(&text[*key]), why));
            }
        }
    }
    for key in REFUSED {
        if let Some(why) = present(key).and_then(|v| refusal(key, v, obj)) {
            return Err(refuse(key, brief(&obj[*key]), why));
        }
    }
    // Keys starting `index_` or `linear_` that the table does not list by name.
    for (key, value) in obj.iter().filter(|(_, v)| !v.is_null()) {
        if let Some(why) = (key.starts_with("index_") || key.starts_with("linear_")).then(|| refusal(key, value, obj)).flatten() {
            return Err(refuse(key, brief(value), why));
        }
    }
    let model_type = present("model_type").and_then(Value::as_str);
    for (key, families) in FAMILY_KEYS {
        if let (Some(value), Some(family)) = (present(key), model_type.filter(|t| !families.contains(t))) {
            return Err(refuse(
                key,
                brief(value),
                &format!("read only for {} models; a {family} model with it is not modelled", families.join(", ")),
            ));
        }
    }
    if let Some(q) = present("quantization_config") {
        check_quantization(q, &refuse)?;
    }
    for key in ["rope_scaling", "rope_parameters"] {
        if let Some(rope) = present(key) {
            let kind = rope.get("rope_type").or_else(|| rope.get("type")).and_then(Value::as_str).unwrap_or("default");
            if !ROPE_TYPES_SAME_COST.contains(&kind) {
                return Err(refuse(
                    &format!("{key}.rope_type"),
                    format!("{kind:?}"),
                    &format!("a rope scaling whose cost is not known; those priced as plain RoPE: {}", ROPE_TYPES_SAME_COST.join(", ")),
                ));
            }
        }
    }
    if let Some(model_type) = present("model_type") {
        let name = model_type.as_str().unwrap_or_default();
        if !MODELLED_TYPES.contains(&name) {
            return Err(refuse("model_type", model_type.to_string(), &model_type_reason(name)));
        }
    }
    let known = |key: &str| {
        READ.contains(&key)
            || HARMLESS.contains(&key)
            || REFUSED.contains(&key)
            || ["rope_scaling", "rope_parameters"].contains(&key)
            || harmless_by_name(key)
    };
    if let Some((key, value)) = obj.iter().find(|(key, _)| !known(key)) {
        return Err(refuse(
            key,
            brief(value),
            "a key servesim does not know, so it cannot tell whether it changes the model's cost; if it does not, \
             remove it from a copy of config.json (and report it, to be added to the keys known harmless)",
        ));
    }
    Ok(())
}

/// The quantization methods and keys `quant` models; anything else is refused, naming its key.
fn check_quantization(q: &Value, refuse: &dyn Fn(&str, String, &str) -> HfConfigError) -> Result<(), HfConfigError> {
    super::quant::from_hf_config(q, &|key, value, why| refuse(key, brief(value), why)).map(drop)
}

/// A value as an error shows it: arrays and objects cut to their first 80 characters, since a
/// 94-entry `layer_types` would bury the message.
pub(super) fn brief(value: &Value) -> String {
    let text = value.to_string();
    match text.char_indices().nth(80) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text,
    }
}
