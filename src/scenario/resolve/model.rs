//! `[model]`: a preset or a Hugging Face config, with explicit dimensions over either.

use super::context::{Cx, positive_count, quote};
use crate::scenario::ScenarioError;
use crate::scenario::model::{Dtype, ModelSpec, MoeSpec, WeightQuant, default_kv_dtype};
use crate::scenario::model::QUANT_SCENARIO_NAMES as SCENARIO_NAMES;
use crate::scenario::GpuSpec;
use crate::scenario::schema::{RawEngine, RawModel};
use crate::scenario::{EngineConfig, Policy};

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
    // Which layers are sliding, chunked or linear comes with the model's layer count: another
    // count would leave their share undefined.
    if let Some(base) = b.filter(|m| m.attention.is_mixed() && m.num_layers != num_layers) {
        return Err(cx.invalid(
            "model.num_layers",
            num_layers,
            format!(
                "{} mixes attention kinds over its {} layers (sliding, chunked or linear), which fix the layer count; leave model.num_layers out",
                base.name, base.num_layers
            ),
        ));
    }
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
    let moe = resolve_moe(raw, b, cx)?;
    // A mixture-of-experts model's dense MLP is its shared experts, which it may not have.
    let ffn_size = match (moe, raw.ffn_size.or(b.map(|m| m.ffn_size))) {
        (Some(_), ffn) => ffn.unwrap_or(0),
        (None, _) => dim("ffn_size", raw.ffn_size, b.map(|m| m.ffn_size))?,
    };
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

    let (weight_dtype, weight_quant) = resolve_weights(raw, b, cx)?;
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
        moe,
        // Latent attention comes only from a preset or config, whose dimensions it is read with.
        mla: b.and_then(|m| m.mla),
        dsa: b.and_then(|m| m.dsa),
        weight_quant,
        attention: b.map(|m| m.attention).unwrap_or_default(),
    })
}

/// `model.dtype` and `model.quantization` over the preset's or config's weights. Without
/// `quantization`, the base's scheme stays, except that a `dtype` other than fp8 replaces
/// block-scaled fp8 weights (as it replaces per-tensor ones); a 4-bit scheme's `dtype` is its
/// activations'. "none" drops the base's scheme, "fp8" is per-tensor FP8.
fn resolve_weights(raw: &RawModel, base: Option<&ModelSpec>, cx: &Cx) -> Result<(Dtype, Option<WeightQuant>), ScenarioError> {
    let dtype = raw.dtype.as_deref().map(|d| parse_dtype("model.dtype", d, cx)).transpose()?;
    let base_dtype = base.map_or(Dtype::Bf16, |m| m.weight_dtype);
    let Some(name) = &raw.quantization else {
        let replaced = |q: &WeightQuant| q.scheme.weight_dtype(Dtype::Bf16) == Dtype::Fp8 && dtype.is_some_and(|d| d != Dtype::Fp8);
        return Ok((dtype.unwrap_or(base_dtype), base.and_then(|m| m.weight_quant).filter(|q| !replaced(q))));
    };
    let quant = WeightQuant::from_scenario_name(name)
        .map_err(|()| cx.invalid("model.quantization", quote(name), format!("unknown scheme; known: {}", SCENARIO_NAMES.join(", "))))?;
    let activation = default_kv_dtype(base_dtype);
    let implied = match quant {
        Some(q) => q.scheme.weight_dtype(dtype.unwrap_or(activation)),
        None if name.trim().eq_ignore_ascii_case("fp8") => Dtype::Fp8,
        None => dtype.unwrap_or(activation),
    };
    if let Some(d) = dtype.filter(|&d| d != implied) {
        return Err(cx.invalid("model.dtype", quote(d.name()), format!("model.quantization = {} stores {} weights", quote(name), implied.name())));
    }
    Ok((implied, quant))
}

/// Refuses weights the deployment cannot run as stored: a scheme the model cannot carry, or
/// NVFP4 on GPUs without FP4 tensor cores, naming the field that chose the scheme.
pub(super) fn check_weights<'g>(raw: &RawModel, model: &ModelSpec, gpus: impl IntoIterator<Item = &'g GpuSpec>, cx: &Cx) -> Result<(), ScenarioError> {
    let (field, value) = match (&raw.quantization, &raw.hf_config, &raw.preset) {
        (Some(q), _, _) => ("model.quantization", q),
        (None, Some(h), _) => ("model.hf_config", h),
        (None, None, Some(p)) => ("model.preset", p),
        (None, None, None) => return Ok(()),
    };
    let why = model.weight_quant.and_then(|q| q.mismatch(model)).or_else(|| gpus.into_iter().find_map(|gpu| model.weight_quant.and_then(|q| q.refusal_on(gpu))));
    why.map_or(Ok(()), |why| Err(cx.invalid(field, quote(value), why)))
}

/// The routed experts: the preset's or config's, with explicit fields over them; explicit
/// fields alone make a dense model a mixture of experts (all three sizes then needed).
fn resolve_moe(raw: &RawModel, base: Option<&ModelSpec>, cx: &Cx) -> Result<Option<MoeSpec>, ScenarioError> {
    let from_base = base.and_then(|m| m.moe);
    let explicit = raw.num_experts.is_some() || raw.experts_per_token.is_some() || raw.expert_ffn_size.is_some();
    if raw.num_experts == Some(0) {
        if raw.experts_per_token.is_some() || raw.expert_ffn_size.is_some() {
            return Err(cx.invalid("model.num_experts", 0, "0 means a dense model, which has no experts_per_token or expert_ffn_size"));
        }
        // A mixture of experts made dense keeps only its shared experts' MLP (none in Mixtral):
        // without a dense ffn_size of its own it would be refused as `ffn_size = 0`, blaming
        // a field the user never wrote.
        if from_base.is_some() && raw.ffn_size.is_none() && base.is_some_and(|m| m.ffn_size == 0) {
            return Err(cx.invalid(
                "model.num_experts",
                0,
                "0 makes this mixture-of-experts model dense, and it has no dense MLP to keep; set model.ffn_size too, or leave model.num_experts out",
            ));
        }
        return Ok(None);
    }
    if from_base.is_none() && !explicit {
        if let Some(skew) = raw.expert_routing_skew {
            return Err(cx.invalid("model.expert_routing_skew", skew, "the model has no experts"));
        }
        return Ok(None);
    }
    let need = "required for a mixture-of-experts model (with model.num_experts)";
    let num_experts = positive_count(cx, "model.num_experts", raw.num_experts.or(from_base.map(|m| m.num_experts)), need)?;
    let experts_per_token =
        positive_count(cx, "model.experts_per_token", raw.experts_per_token.or(from_base.map(|m| m.experts_per_token)), need)?;
    let expert_ffn_size =
        positive_count(cx, "model.expert_ffn_size", raw.expert_ffn_size.or(from_base.map(|m| m.expert_ffn_size)), need)?;
    if experts_per_token > num_experts {
        return Err(cx.invalid(
            "model.experts_per_token",
            experts_per_token,
            format!("more than the model's {num_experts} experts (model.num_experts)"),
        ));
    }
    let routing_skew = raw.expert_routing_skew.unwrap_or(from_base.map_or(0.0, |m| m.routing_skew));
    if !(routing_skew.is_finite() && (0.0..=MAX_ROUTING_SKEW).contains(&routing_skew)) {
        return Err(cx.invalid(
            "model.expert_routing_skew",
            routing_skew,
            format!("expected a Zipf exponent from 0 (balanced) to {MAX_ROUTING_SKEW}"),
        ));
    }
    // Leading dense layers come only from a preset or config, as latent attention does.
    let (dense_layers, dense_ffn_size) = from_base.map_or((0, 0), |m| (m.dense_layers, m.dense_ffn_size));
    Ok(Some(MoeSpec { num_experts, experts_per_token, expert_ffn_size, routing_skew, expert_parallel: false, dense_layers, dense_ffn_size }))
}

/// `engine.expert_parallel` (vLLM's `--enable-expert-parallel`): whole experts per GPU. Needs
/// experts, a vLLM-like policy (TGI 2.3 has none) and experts that divide over the GPUs.
pub(super) fn place_experts(raw: &RawEngine, model: &mut ModelSpec, engine: &EngineConfig, cx: &Cx) -> Result<(), ScenarioError> {
    let Some(wanted) = raw.expert_parallel else { return Ok(()) };
    let Some(moe) = model.moe.as_mut() else {
        return Err(cx.invalid("engine.expert_parallel", wanted, "the model has no experts (a dense model)"));
    };
    if wanted && engine.policy == Policy::Tgi {
        return Err(cx.invalid("engine.expert_parallel", wanted, "TGI 2.3 has no expert parallelism; use a vLLM policy"));
    }
    let tp = engine.tensor_parallel;
    if wanted && !moe.num_experts.is_multiple_of(tp) {
        return Err(cx.invalid(
            "engine.expert_parallel",
            wanted,
            format!("the model's {} experts do not divide over tensor_parallel = {tp} GPUs", moe.num_experts),
        ));
    }
    moe.expert_parallel = wanted;
    Ok(())
}

/// Beyond this the first expert takes nearly every token (its share at 8 experts: 99.6%).
const MAX_ROUTING_SKEW: f64 = 8.0;

#[cfg(test)]
#[path = "model_tests.rs"]
mod tests;

#[cfg(test)]
#[path = "model_quant_tests.rs"]
mod quant_tests;
