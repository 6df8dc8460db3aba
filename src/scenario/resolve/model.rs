//! `[model]`: a preset or a Hugging Face config, with explicit dimensions over either.

use super::context::{Cx, positive_count, quote};
use crate::scenario::ScenarioError;
use crate::scenario::model::{Dtype, ModelSpec, default_kv_dtype};
use crate::scenario::schema::RawModel;

fn parse_dtype(field: &str, text: &str, cx: &Cx) -> Result<Dtype, ScenarioError> {
    Dtype::parse(text).ok_or_else(|| {
        cx.invalid(
            field,
            quote(text),
            format!("unknown dtype; known: {}", Dtype::NAMES.join(", ")),
        )
    })
}

pub(super) fn resolve_model(raw: &RawModel, cx: &Cx) -> Result<ModelSpec, ScenarioError> {
    let base: Option<ModelSpec> = match (&raw.preset, &raw.hf_config) {
        (Some(_), Some(h)) => {
            return Err(cx.invalid("model.hf_config", quote(h), "give model.preset or model.hf_config, not both"));
        }
        (Some(p), None) => Some(ModelSpec::preset(p).ok_or_else(|| {
            cx.invalid(
                "model.preset",
                quote(p),
                format!(
                    "unknown model preset; known: {} (or give model.hf_config or explicit dimensions)",
                    ModelSpec::preset_names().join(", ")
                ),
            )
        })?),
        (None, Some(h)) => Some(
            ModelSpec::from_hf_config_file(&cx.relative(h))
                .map_err(|e| cx.invalid("model.hf_config", quote(h), e.to_string()))?,
        ),
        (None, None) => None,
    };

    let dim = |field: &str, explicit: Option<u32>, from_base: Option<u32>| {
        positive_count(
            cx,
            &format!("model.{field}"),
            explicit.or(from_base),
            "required when neither model.preset nor model.hf_config is given",
        )
    };
    let b = base.as_ref();
    let num_layers = dim("num_layers", raw.num_layers, b.map(|m| m.num_layers))?;
    let hidden_size = dim("hidden_size", raw.hidden_size, b.map(|m| m.hidden_size))?;
    let num_heads = dim("num_heads", raw.num_heads, b.map(|m| m.num_heads))?;
    // Hugging Face's defaults where a config leaves them out: no GQA, head_dim = hidden / heads.
    let num_kv_heads = dim(
        "num_kv_heads",
        raw.num_kv_heads,
        Some(b.map_or(num_heads, |m| m.num_kv_heads)),
    )?;
    let head_dim_default = b.map_or((hidden_size / num_heads).max(1), |m| m.head_dim);
    let head_dim = dim("head_dim", raw.head_dim, Some(head_dim_default))?;
    let ffn_size = dim("ffn_size", raw.ffn_size, b.map(|m| m.ffn_size))?;
    let vocab_size = dim("vocab_size", raw.vocab_size, b.map(|m| m.vocab_size))?;
    let max_position_embeddings = dim(
        "max_position_embeddings",
        raw.max_position_embeddings,
        b.map(|m| m.max_position_embeddings),
    )?;
    let tied_embeddings = raw
        .tied_embeddings
        .or(b.map(|m| m.tied_embeddings))
        .unwrap_or(false);
    if !num_heads.is_multiple_of(num_kv_heads) {
        return Err(cx.invalid(
            "model.num_kv_heads",
            num_kv_heads,
            format!("must divide model.num_heads ({num_heads}) for grouped-query attention"),
        ));
    }

    let weight_dtype = match &raw.dtype {
        Some(d) => parse_dtype("model.dtype", d, cx)?,
        None => b.map_or(Dtype::Bf16, |m| m.weight_dtype),
    };
    // vLLM's `--kv-cache-dtype auto`: the activation dtype (see `default_kv_dtype`).
    let kv_dtype = match raw.kv_cache_dtype.as_deref() {
        None => default_kv_dtype(weight_dtype),
        Some(d) if d.trim().eq_ignore_ascii_case("auto") => default_kv_dtype(weight_dtype),
        Some(d) => parse_dtype("model.kv_cache_dtype", d, cx)?,
    };
    let name = raw
        .name
        .clone()
        .or(b.map(|m| m.name.clone()))
        .unwrap_or_else(|| "custom".into());
    Ok(ModelSpec {
        name,
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
        kv_dtype,
    })
}

#[cfg(test)]
#[path = "model_tests.rs"]
mod tests;
