//! The scheduler knobs of servesim's own engine: what `servesim serve` takes as flags, and what
//! `validate --engine` both starts the engine with and writes into the scenario it simulates.

use super::{EngineHandle, Executor, NgramLookup};
use crate::Error;
use crate::scenario::Policy;
use crate::sched::{Acceptance, SchedulePolicy, SchedulerConfig, SglangConfig, SpeculativeConfig};

/// SGLang 0.4.9's `--max-prefill-tokens` default (`server_args.py`).
pub const SGLANG_MAX_PREFILL_TOKENS: u32 = 16384;

/// `--max-num-seqs`, `--max-num-batched-tokens`, `--block-size`, `--num-gpu-blocks`,
/// `--enable-prefix-caching`, `--num-scheduler-steps`, `--num-speculative-tokens` with
/// `--prompt-lookup-min/max`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EngineKnobs {
    pub max_num_seqs: u32,
    pub max_num_batched_tokens: u32,
    pub block_size: u32,
    pub num_gpu_blocks: u32,
    pub enable_prefix_caching: bool,
    pub num_scheduler_steps: u32,
    /// N-gram speculative decoding, `None` = off.
    pub ngram: Option<NgramLookup>,
    /// `servesim` (vLLM V1's scheduling) or `sglang` (SGLang 0.4.9's, `--policy sglang`: the
    /// knobs above stand for its flags, below).
    pub policy: Policy,
}

/// The longest multi-step window `serve` takes: a window holds a batch's tokens back for this
/// many steps, so a larger one only delays streaming (vLLM's docs use 8 to 16).
pub const NUM_SCHEDULER_STEPS_MAX: u32 = 256;

impl EngineKnobs {
    /// Checks the knobs, naming the first bad flag.
    pub fn check(&self) -> Result<(), Error> {
        let bad = |flag: &'static str, value: u32, reason: &str| Err(Error::Usage { flag, value: value.to_string(), reason: reason.into() });
        if self.max_num_seqs == 0 {
            return bad("--max-num-seqs", 0, "must be positive");
        }
        if self.max_num_batched_tokens == 0 {
            return bad("--max-num-batched-tokens", 0, "must be positive");
        }
        if self.num_gpu_blocks == 0 {
            return bad("--num-gpu-blocks", 0, "must be positive");
        }
        if !(1..=NUM_SCHEDULER_STEPS_MAX).contains(&self.num_scheduler_steps) {
            return bad("--num-scheduler-steps", self.num_scheduler_steps, &format!("must be in 1..={NUM_SCHEDULER_STEPS_MAX}"));
        }
        if let Some(lookup) = &self.ngram {
            lookup.check().map_err(|(flag, value, reason)| Error::Usage { flag, value: value.to_string(), reason })?;
            if self.num_scheduler_steps > 1 {
                return bad("--num-speculative-tokens", lookup.num_speculative_tokens, "cannot be used with --num-scheduler-steps (neither can vLLM's)");
            }
        }
        if !self.block_size.is_power_of_two() {
            return bad("--block-size", self.block_size, "must be a power of two");
        }
        if self.policy == Policy::Sglang {
            if self.num_scheduler_steps > 1 {
                return bad("--num-scheduler-steps", self.num_scheduler_steps, "is vLLM's; --policy sglang has no multi-step scheduling");
            }
            if let Some(lookup) = &self.ngram {
                return bad("--num-speculative-tokens", lookup.num_speculative_tokens, "servesim models SGLang without speculative decoding");
            }
        }
        Ok(())
    }

    /// SGLang's flags these knobs stand for under `--policy sglang`: `--max-running-requests`
    /// (`max_num_seqs`), `--chunked-prefill-size` (`max_num_batched_tokens`), `--page-size`
    /// (`block_size`), `--max-total-tokens` (`num_gpu_blocks` pages), `--disable-radix-cache`
    /// (without `--enable-prefix-caching`); the engine runs eagerly and schedules in series with
    /// its steps (`--disable-cuda-graph`, `--disable-overlap-schedule`), and the rest are
    /// SGLang 0.4.9's defaults.
    pub fn sglang_config(&self) -> Option<SglangConfig> {
        (self.policy == Policy::Sglang).then(|| SglangConfig {
            schedule_policy: SchedulePolicy::Fcfs,
            chunked_prefill_size: Some(self.max_num_batched_tokens),
            max_prefill_tokens: SGLANG_MAX_PREFILL_TOKENS,
            schedule_conservativeness: 1.0,
            cuda_graph_bs: Vec::new(),
            disable_overlap_schedule: true,
            fp8_tensor_scales: false,
        })
    }

    /// The engine's scheduler: the servesim policy is vLLM V1's, so prefills are always chunked;
    /// no watermark (V1 has none).
    pub fn scheduler_config(&self) -> SchedulerConfig {
        SchedulerConfig {
            max_num_batched_tokens: self.max_num_batched_tokens,
            max_num_seqs: self.max_num_seqs,
            enable_chunked_prefill: true,
            block_size: self.block_size,
            num_gpu_blocks: self.num_gpu_blocks,
            kv_blocks_per_seq: 0,
            watermark: 0.0,
            enable_prefix_caching: self.enable_prefix_caching,
            num_scheduler_steps: self.num_scheduler_steps,
            // servesim's engine hands a window's tokens out at its end.
            stream_window_steps: false,
            // servesim's engine runs its steps in series.
            schedule_ahead: false,
            speculative: self.speculative(),
            tgi: None,
            sglang: self.sglang_config(),
        }
    }

    /// Starts servesim's engine on `executor`: these knobs, their policy, at most
    /// `max_waiting` requests waiting, prompts plus outputs of at most `context_len` tokens.
    pub fn start<E: Executor>(&self, executor: E, max_waiting: u32, context_len: u32) -> EngineHandle {
        match self.ngram {
            Some(lookup) => EngineHandle::start_speculative(executor, self.scheduler_config(), self.policy, max_waiting, context_len, lookup),
            None => EngineHandle::start(executor, self.scheduler_config(), self.policy, max_waiting, context_len),
        }
    }

    /// The scheduler's side of n-gram speculation: the engine proposes and verifies.
    fn speculative(&self) -> Option<SpeculativeConfig> {
        self.ngram.map(|l| SpeculativeConfig { num_speculative_tokens: l.num_speculative_tokens, acceptance: Acceptance::Verified })
    }

    /// Longest prompt + output a request may ask for: the model's positions, or the whole KV
    /// cache if that is smaller.
    pub fn context_len(&self, max_position_embeddings: usize) -> u32 {
        let cache_tokens = u64::from(self.num_gpu_blocks) * u64::from(self.block_size);
        (max_position_embeddings as u64).min(cache_tokens).min(u64::from(u32::MAX)) as u32
    }
}
