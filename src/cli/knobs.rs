//! The scheduler knobs of servesim's engine, as `serve` and `validate --engine` both take them.

use clap::Args;

use crate::Error;
use crate::engine::server::{EngineKnobs, NgramLookup};
use crate::scenario::Policy;

/// The scheduler knobs of servesim's engine, shared by `serve` and `validate --engine`.
#[derive(Debug, Args)]
pub struct EngineKnobsArgs {
    /// Most sequences in one step (vLLM's `--max-num-seqs`).
    #[arg(long, default_value_t = 32)]
    pub max_num_seqs: u32,
    /// Most tokens one step computes, prompt chunks and decodes together (vLLM's
    /// `--max-num-batched-tokens`; longer prompts are prefilled in chunks).
    #[arg(long, default_value_t = 512)]
    pub max_num_batched_tokens: u32,
    /// KV-cache blocks (of `--block-size` tokens) for all sequences together.
    #[arg(long, default_value_t = 2048)]
    pub num_gpu_blocks: u32,
    /// Tokens per KV-cache block (vLLM's `--block-size`).
    #[arg(long, default_value_t = 16)]
    pub block_size: u32,
    /// Reuse the KV of cached prompt blocks, as vLLM V1's `--enable-prefix-caching` (off by
    /// default: servesim's engine caches nothing unless asked).
    #[arg(long)]
    pub enable_prefix_caching: bool,
    /// Decode steps per scheduling decision, as vLLM 0.6's `--num-scheduler-steps`: the
    /// scheduler runs once per window of this many steps, and tokens stream in chunks of it.
    #[arg(long, default_value_t = 1)]
    pub num_scheduler_steps: u32,
    /// N-gram speculative decoding (prompt lookup), as vLLM's `--speculative-config
    /// '{"method": "ngram", ...}'`: the most draft tokens a step verifies (0: off).
    #[arg(long, default_value_t = 0)]
    pub num_speculative_tokens: u32,
    /// The shortest suffix n-gram speculation matches.
    #[arg(long, default_value_t = 1)]
    pub prompt_lookup_min: u32,
    /// The longest suffix n-gram speculation tries first.
    #[arg(long, default_value_t = 4)]
    pub prompt_lookup_max: u32,
    /// The scheduler: `servesim` (vLLM V1's scheduling) or `sglang` (SGLang 0.4.9's: prefill or
    /// decode batches, its conservative admission, retraction and radix cache; the knobs above
    /// stand for its `--max-running-requests`, `--chunked-prefill-size`, `--page-size` and
    /// `--max-total-tokens`, and `--enable-prefix-caching` for its radix cache).
    #[arg(long, default_value = "servesim", value_parser = ["servesim", "sglang"])]
    pub policy: String,
}

impl EngineKnobsArgs {
    /// The knobs, checked.
    pub(super) fn knobs(&self) -> Result<EngineKnobs, Error> {
        let knobs = EngineKnobs {
            max_num_seqs: self.max_num_seqs,
            max_num_batched_tokens: self.max_num_batched_tokens,
            block_size: self.block_size,
            num_gpu_blocks: self.num_gpu_blocks,
            enable_prefix_caching: self.enable_prefix_caching,
            num_scheduler_steps: self.num_scheduler_steps,
            ngram: (self.num_speculative_tokens > 0).then_some(NgramLookup {
                num_speculative_tokens: self.num_speculative_tokens,
                min_n: self.prompt_lookup_min,
                max_n: self.prompt_lookup_max,
            }),
            policy: if self.policy == "sglang" { Policy::Sglang } else { Policy::Servesim },
        };
        knobs.check()?;
        Ok(knobs)
    }
}
