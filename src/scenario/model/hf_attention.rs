//! Reading which layers of a Hugging Face config attend how ([`AttentionMix`]).
//!
//! - `layer_types` (gpt-oss, Qwen3.5): one entry per layer, `full_attention`,
//!   `sliding_attention` (with `sliding_window`) or `linear_attention`.
//! - `full_attention_interval` (Qwen3-Next): every n-th layer is full attention, the others
//!   linear, as `Qwen3NextConfig` builds its `layer_types`.
//! - `attention_chunk_size` (Llama 4): layers with rotary embedding attend within chunks; those
//!   without (`no_rope_layers[i] = 0`, every fourth by default: `no_rope_layer_interval`) attend
//!   to everything, as vLLM's `Llama4Attention` decides.
//! - Linear layers' dimensions: `linear_num_key_heads`, `linear_num_value_heads`,
//!   `linear_key_head_dim`, `linear_value_head_dim`, `linear_conv_kernel_dim`.

use super::hf_config::HfConfigError;
use super::{AttentionMix, LinearAttention};
use serde_json::{Map, Value};
use std::path::Path;

/// Llama 4's default: a NoPE (full attention) layer every this many (`no_rope_layer_interval`).
const LLAMA4_NOPE_INTERVAL: u64 = 4;

/// The config's attention kinds, for a model of `num_layers` layers and type `model_type`.
pub(super) fn attention_from_hf_config(
    obj: &Map<String, Value>,
    file: &Path,
    num_layers: u32,
    model_type: &str,
) -> Result<AttentionMix, HfConfigError> {
    let bad = |key: &str, value: &Value, reason: String| HfConfigError::BadValue {
        file: file.to_path_buf(),
        key: key.into(),
        value: super::hf_keys::brief(value),
        reason,
    };
    let get = |key: &str| obj.get(key).filter(|v| !v.is_null());
    let count = |key: &str| -> Result<Option<u32>, HfConfigError> {
        get(key)
            .map(|v| v.as_u64().and_then(|n| u32::try_from(n).ok()).filter(|&n| n > 0).ok_or_else(|| bad(key, v, "expected a positive integer".into())))
            .transpose()
    };
    let mut mix = AttentionMix { sinks: model_type == "gpt_oss", output_gate: model_type == "qwen3_next", ..AttentionMix::default() };
    if let Some(gate) = get("attn_output_gate") {
        mix.output_gate = gate.as_bool().ok_or_else(|| bad("attn_output_gate", gate, "expected true or false".into()))?;
    }

    let mut linear_layers = 0;
    if let Some(types) = get("layer_types") {
        let entries = types.as_array().ok_or_else(|| bad("layer_types", types, "expected a list with one entry per layer".into()))?;
        if entries.len() != num_layers as usize {
            return Err(bad("layer_types", types, format!("{} entries for {num_layers} layers (num_hidden_layers)", entries.len())));
        }
        for entry in entries {
            match entry.as_str() {
                Some("full_attention") => {}
                Some("sliding_attention") => mix.sliding_layers += 1,
                Some("linear_attention") => linear_layers += 1,
                _ => {
                    return Err(bad(
                        "layer_types",
                        entry,
                        "a layer kind servesim does not model (modelled: full_attention, sliding_attention, linear_attention)".into(),
                    ));
                }
            }
        }
    } else if let Some(interval) = count("full_attention_interval")? {
        linear_layers = num_layers - num_layers / interval;
    }
    if mix.sliding_layers > 0 {
        mix.sliding_window = count("sliding_window")?.ok_or_else(|| HfConfigError::MissingKey { file: file.to_path_buf(), key: "sliding_window".into() })?;
    }
    if linear_layers > 0 {
        let required = |key: &str| count(key)?.ok_or_else(|| HfConfigError::MissingKey { file: file.to_path_buf(), key: key.into() });
        mix.linear = Some(LinearAttention {
            layers: linear_layers,
            num_k_heads: required("linear_num_key_heads")?,
            num_v_heads: required("linear_num_value_heads")?,
            head_k_dim: required("linear_key_head_dim")?,
            head_v_dim: required("linear_value_head_dim")?,
            conv_kernel: required("linear_conv_kernel_dim")?,
        });
    }

    if let Some(chunk) = count("attention_chunk_size")? {
        mix.attention_chunk = chunk;
        mix.chunked_layers = match get("no_rope_layers") {
            Some(flags) => {
                let flags = flags.as_array().filter(|a| a.len() == num_layers as usize).ok_or_else(|| {
                    bad("no_rope_layers", flags, format!("expected one 0 or 1 per layer ({num_layers})"))
                })?;
                let mut rope_layers = 0;
                for flag in flags {
                    match flag.as_u64() {
                        Some(1) => rope_layers += 1,
                        Some(0) => {}
                        _ => return Err(bad("no_rope_layers", flag, "expected 0 (no rotary embedding: full attention) or 1".into())),
                    }
                }
                rope_layers
            }
            None => {
                let interval = count("no_rope_layer_interval")?.map_or(LLAMA4_NOPE_INTERVAL, u64::from);
                (0..num_layers as u64).filter(|i| (i + 1) % interval != 0).count() as u32
            }
        };
    }
    let special = mix.sliding_layers + mix.chunked_layers + linear_layers;
    if mix.chunked_layers > 0 && (mix.sliding_layers > 0 || linear_layers > 0) {
        return Err(bad("attention_chunk_size", &Value::from(mix.attention_chunk), "chunked local attention beside sliding or linear layers is not modelled".into()));
    }
    if special >= num_layers {
        return Err(bad(
            "num_hidden_layers",
            &Value::from(num_layers),
            "no layer is full attention; a model whose every layer slides, chunks or is linear is not modelled".into(),
        ));
    }
    Ok(mix)
}
