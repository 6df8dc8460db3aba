//! `[engine.speculative]`, resolved: how drafts are made, what they cost, and what the scheduler
//! needs (docs/speculative-decoding.md).

use super::model::ModelSpec;
use crate::sched::SpeculativeConfig;

/// Where drafts come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SpecMethod {
    /// A smaller model of the same vocabulary (vLLM's `model = "..."` draft).
    Draft,
    /// Prompt lookup: no model, drafts copied from earlier in the sequence (vLLM's `ngram`).
    Ngram,
    /// A one-layer head on the target's hidden states: multi-token prediction (DeepSeek-V3,
    /// Qwen3-Next) or EAGLE. Priced as one decoder layer of the target and its LM head.
    Mtp,
}

impl SpecMethod {
    pub fn name(self) -> &'static str {
        match self {
            SpecMethod::Draft => "draft",
            SpecMethod::Ngram => "ngram",
            SpecMethod::Mtp => "mtp",
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct SpeculativeSpec {
    pub method: SpecMethod,
    /// The model that proposes, as the cost model prices its passes: the draft preset, or for
    /// `mtp` the target cut to one layer; `None` for `ngram`.
    pub draft: Option<ModelSpec>,
    /// The scheduler's share: k and the acceptance rates.
    pub scheduler: SpeculativeConfig,
}

impl SpeculativeSpec {
    /// GPU memory per GPU the proposer's weights take at tensor parallelism `tp`. An `mtp` head is
    /// its one decoder layer (its embedding and LM head are the target's): an expert layer in
    /// DeepSeek-V3, not the mean of its dense and expert layers.
    pub fn weight_bytes_per_gpu(&self, tp: u32) -> u64 {
        match (self.method, &self.draft) {
            (SpecMethod::Draft, Some(draft)) => draft.weight_bytes_per_gpu(tp),
            (SpecMethod::Mtp, Some(head)) => {
                head.weight_bytes_per_gpu(tp) - ModelSpec { num_layers: 0, ..head.clone() }.weight_bytes_per_gpu(tp)
            }
            _ => 0,
        }
    }

    /// KV bytes per token per GPU of the proposer's layers, which share the target's blocks.
    pub fn kv_bytes_per_token_per_gpu(&self, tp: u32) -> u64 {
        self.draft.as_ref().map_or(0, |draft| draft.kv_bytes_per_token_per_gpu(tp))
    }
}
