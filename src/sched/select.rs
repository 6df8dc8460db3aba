//! Which policy a deployment runs: the names scenarios and `serve` use, and the policy object
//! for each. The one place that knows every policy, so the simulator and the engine pick them
//! alike.

use super::config::SchedulerConfig;
use super::policy::{SchedulingPolicy, Servesim, VllmV0, VllmV1};
use super::sglang::Sglang;
use super::tgi::Tgi;

/// Batching policy of the engine being modelled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Policy {
    /// vLLM V1 scheduler: one token budget shared by prefill chunks and decodes.
    VllmV1,
    /// vLLM V0 scheduler: prefills before decodes; mixes them only with chunked prefill.
    VllmV0,
    /// Text Generation Inference 2.3: whole-prompt prefill steps that pause the decodes, the
    /// `waiting_served_ratio` / `max_waiting_tokens` rules, KV reserved up front, no preemption.
    Tgi,
    /// servesim's own engine (`servesim serve`): vLLM V1's scheduling without graphs.
    Servesim,
    /// SGLang 0.4.9: prefill or decode batches, its PrefillAdder's conservative admission,
    /// retraction, and RadixAttention's token-level prefix cache (`sched::sglang`).
    Sglang,
}

impl Policy {
    pub fn name(self) -> &'static str {
        match self {
            Policy::VllmV1 => "vllm-v1",
            Policy::VllmV0 => "vllm-v0",
            Policy::Tgi => "tgi",
            Policy::Servesim => "servesim",
            Policy::Sglang => "sglang",
        }
    }

    /// The policy object. TGI's takes its limits from `config.tgi`, which must be set exactly
    /// for it.
    pub fn build(self, config: &SchedulerConfig) -> Box<dyn SchedulingPolicy> {
        assert_eq!(self == Policy::Tgi, config.tgi.is_some(), "SchedulerConfig.tgi is set exactly for policy tgi");
        assert_eq!(self == Policy::Sglang, config.sglang.is_some(), "SchedulerConfig.sglang is set exactly for policy sglang");
        match self {
            Policy::VllmV1 => Box::new(VllmV1),
            Policy::VllmV0 => Box::new(VllmV0),
            Policy::Tgi => Box::new(Tgi::new(config)),
            Policy::Servesim => Box::new(Servesim),
            Policy::Sglang => Box::new(Sglang::new(config)),
        }
    }
}
