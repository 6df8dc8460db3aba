//! `[engine.speculative]`: the method, k, the acceptance rates and the draft model, checked
//! against the engine that must run them.

use super::context::{Cx, quote};
use super::hardware::check_tp;
use crate::scenario::model::{ModelSpec, MoeSpec};
use crate::scenario::schema::RawSpeculative;
use crate::scenario::speculative::{SpecMethod, SpeculativeSpec};
use crate::scenario::{Policy, ScenarioError};
use crate::sched::{Acceptance, SpeculativeConfig};

/// The most draft tokens a step may verify. vLLM takes any number; published deployments use
/// 1 to 8, and each costs a query row per sequence per step.
pub const NUM_SPECULATIVE_TOKENS_MAX: u32 = 32;

pub(super) fn resolve_speculative(
    raw: Option<&RawSpeculative>,
    policy: Policy,
    tensor_parallel: u32,
    num_scheduler_steps: u32,
    model: &ModelSpec,
    cx: &Cx,
) -> Result<Option<SpeculativeSpec>, ScenarioError> {
    let Some(raw) = raw else { return Ok(None) };
    if !matches!(policy, Policy::VllmV1 | Policy::Servesim) {
        return Err(cx.invalid(
            "engine.speculative",
            quote(policy.name()),
            "servesim models speculative decoding as vLLM V1 schedules it: use policy \"vllm-v1\" or \"servesim\"",
        ));
    }
    if num_scheduler_steps > 1 {
        return Err(cx.invalid(
            "engine.speculative",
            format!("with num_scheduler_steps = {num_scheduler_steps}"),
            "vLLM cannot combine speculative decoding with multi-step scheduling",
        ));
    }
    let method = match raw.method.as_deref().map(|m| m.trim().to_ascii_lowercase()) {
        None => return Err(cx.invalid("engine.speculative.method", "(missing)", "required: \"draft\", \"ngram\", \"mtp\" or \"eagle\"")),
        Some(m) => match m.as_str() {
            "draft" | "draft_model" => SpecMethod::Draft,
            "ngram" => SpecMethod::Ngram,
            "mtp" | "eagle" | "eagle3" => SpecMethod::Mtp,
            _ => return Err(cx.invalid("engine.speculative.method", quote(&m), "unknown method; known: draft, ngram, mtp, eagle")),
        },
    };
    let k = match raw.num_speculative_tokens {
        None => return Err(cx.invalid("engine.speculative.num_speculative_tokens", "(missing)", "required: the drafts per step, k")),
        Some(k) if !(1..=NUM_SPECULATIVE_TOKENS_MAX).contains(&k) => {
            return Err(cx.invalid("engine.speculative.num_speculative_tokens", k, format!("must be in 1..={NUM_SPECULATIVE_TOKENS_MAX}")));
        }
        Some(k) => k,
    };
    let rates = match (raw.acceptance_rate, &raw.acceptance_rates) {
        (Some(_), Some(_)) => {
            return Err(cx.invalid("engine.speculative.acceptance_rates", "(with acceptance_rate)", "give acceptance_rate or acceptance_rates, not both"));
        }
        (None, None) => {
            return Err(cx.invalid(
                "engine.speculative.acceptance_rate",
                "(missing)",
                "required: the chance a draft token is accepted (or acceptance_rates, one per position)",
            ));
        }
        (Some(rate), None) => {
            check_rate(cx, "engine.speculative.acceptance_rate", rate)?;
            vec![rate; k as usize]
        }
        (None, Some(rates)) => {
            if rates.len() != k as usize {
                return Err(cx.invalid(
                    "engine.speculative.acceptance_rates",
                    format!("{} values", rates.len()),
                    format!("must hold one rate per draft position, num_speculative_tokens = {k}"),
                ));
            }
            for (i, &rate) in rates.iter().enumerate() {
                check_rate(cx, &format!("engine.speculative.acceptance_rates[{i}]"), rate)?;
            }
            rates.clone()
        }
    };
    let draft = match (method, &raw.draft_model) {
        (SpecMethod::Draft, None) => {
            return Err(cx.invalid("engine.speculative.draft_model", "(missing)", "method \"draft\" needs the draft model's preset"));
        }
        (SpecMethod::Draft, Some(name)) => Some(draft_preset(name, model, tensor_parallel, cx)?),
        (_, Some(name)) => {
            return Err(cx.invalid(
                "engine.speculative.draft_model",
                quote(name),
                format!("only method \"draft\" takes a draft model (method is \"{}\")", method.name()),
            ));
        }
        (SpecMethod::Mtp, None) => Some(mtp_head(model)),
        (SpecMethod::Ngram, None) => None,
    };
    let scheduler = SpeculativeConfig { num_speculative_tokens: k, acceptance: Acceptance::Drawn { rates, seed: raw.seed.unwrap_or(0) } };
    Ok(Some(SpeculativeSpec { method, draft, scheduler }))
}

/// The MTP head a model proposes with: one more of its layers. DeepSeek-V3's is an expert
/// layer, as every layer past the leading dense ones is, so the head keeps no dense layer.
fn mtp_head(model: &ModelSpec) -> ModelSpec {
    let moe = model.moe.map(|moe| MoeSpec { dense_layers: 0, ..moe });
    ModelSpec { num_layers: 1, name: format!("{} MTP head", model.name), moe, ..model.clone() }
}

fn check_rate(cx: &Cx, field: &str, rate: f64) -> Result<(), ScenarioError> {
    if (0.0..=1.0).contains(&rate) {
        Ok(())
    } else {
        Err(cx.invalid(field, rate, "must be a probability, in [0, 1]"))
    }
}

/// The draft model: a preset with the target's vocabulary (its tokens are the target's), split
/// over the target's GPUs as vLLM splits it by default.
fn draft_preset(name: &str, target: &ModelSpec, tp: u32, cx: &Cx) -> Result<ModelSpec, ScenarioError> {
    let field = "engine.speculative.draft_model";
    let Some(draft) = ModelSpec::preset(name) else {
        return Err(cx.invalid(field, quote(name), format!("unknown preset; known: {}", ModelSpec::preset_names().join(", "))));
    };
    if draft.vocab_size != target.vocab_size {
        return Err(cx.invalid(
            field,
            quote(name),
            format!("its vocabulary ({}) is not the target's ({}): a draft must share the target's tokenizer", draft.vocab_size, target.vocab_size),
        ));
    }
    check_tp(&draft, tp).map_err(|reason| cx.invalid(field, quote(name), format!("at tensor_parallel = {tp}: {reason}")))?;
    Ok(draft)
}
