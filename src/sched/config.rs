//! The scheduler's configuration: knobs common to every policy, and TGI's own limits.

use super::speculative::SpeculativeConfig;

/// Knobs common to every policy (vLLM's names).
#[derive(Clone, Debug, PartialEq)]
pub struct SchedulerConfig {
    /// Token budget of one step. For TGI, which bounds only its prefill steps by tokens, the
    /// prefill budget ([`TgiConfig::prefill_budget_tokens`]).
    pub max_num_batched_tokens: u32,
    /// For TGI, which has no cap on the batch, `u32::MAX`.
    pub max_num_seqs: u32,
    pub enable_chunked_prefill: bool,
    pub block_size: u32,
    pub num_gpu_blocks: u32,
    /// Blocks each sequence holds from admission to release beside those of its tokens: a
    /// hybrid model's sliding windows and linear-attention states (`scenario::model::KvLayout`).
    pub kv_blocks_per_seq: u32,
    /// Fraction of blocks that must stay free after admitting a prompt.
    pub watermark: f64,
    /// Keep computed prompt blocks by hash and let later prompts reuse them (`sched::prefix`).
    pub enable_prefix_caching: bool,
    /// Decode steps per scheduling decision (vLLM 0.6's `--num-scheduler-steps`; 1 = off): a
    /// batch runs this many steps before the scheduler runs again, and its tokens reach the
    /// client together at the window's end (`sched::window`).
    pub num_scheduler_steps: u32,
    /// Under multi-step scheduling, each step's token reaches the client as it is sampled (vLLM
    /// 0.6.3 onwards runs its output processor after every step of a window) rather than all of
    /// a window's at its end (0.6.0–0.6.2). Requests still finish, and free their KV, when the
    /// window ends.
    pub stream_window_steps: bool,
    /// The engine schedules a step while the one before it runs (vLLM V1's async scheduling,
    /// SGLang's overlap scheduler), so a request that arrives during a step joins the batch
    /// after next: that batch was formed when the running one started. From an idle engine it
    /// joins the next. The CPU time this hides is the cost model's (`cpu_overlap`).
    pub schedule_ahead: bool,
    /// Speculative decoding (`sched::speculative`); `None` = off.
    pub speculative: Option<SpeculativeConfig>,
    /// TGI's limits: `Some` exactly when the policy is TGI's.
    pub tgi: Option<TgiConfig>,
    /// SGLang's knobs: `Some` exactly when the policy is SGLang's. Its `max_running_requests` is
    /// `max_num_seqs`, its `page_size` is `block_size`, its token pool is `num_gpu_blocks` pages,
    /// and its radix cache is on when `enable_prefix_caching` is (`--disable-radix-cache` off).
    pub sglang: Option<SglangConfig>,
}

impl SchedulerConfig {
    /// A plain vLLM-style scheduler: chunked prefill within `max_num_batched_tokens`, at most
    /// `max_num_seqs` running, `num_gpu_blocks` blocks of `block_size` tokens, and none of the
    /// rest (no watermark, prefix cache, multi-step window, step ahead, speculation, TGI or
    /// SGLang knobs). Callers name what differs with `SchedulerConfig { .., ..plain }`.
    pub fn plain(max_num_batched_tokens: u32, max_num_seqs: u32, block_size: u32, num_gpu_blocks: u32) -> SchedulerConfig {
        SchedulerConfig {
            max_num_batched_tokens,
            max_num_seqs,
            enable_chunked_prefill: true,
            block_size,
            num_gpu_blocks,
            kv_blocks_per_seq: 0,
            watermark: 0.0,
            enable_prefix_caching: false,
            num_scheduler_steps: 1,
            stream_window_steps: false,
            schedule_ahead: false,
            speculative: None,
            tgi: None,
            sglang: None,
        }
    }

    pub fn watermark_blocks(&self) -> u32 {
        (self.watermark * self.num_gpu_blocks as f64).floor() as u32
    }
}

/// SGLang's waiting-queue order (`--schedule-policy`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SchedulePolicy {
    /// First come, first served (SGLang's default).
    Fcfs,
    /// Longest prefix match in the radix cache first; FCFS when more than 128 wait, or without
    /// the radix cache.
    Lpm,
}

/// SGLang 0.4.9's scheduler knobs, resolved (`server_args.py` flags, under their names).
#[derive(Clone, Debug, PartialEq)]
pub struct SglangConfig {
    pub schedule_policy: SchedulePolicy,
    /// `--chunked-prefill-size`: prompt tokens of one request per prefill batch; `None`
    /// (the flag's -1) prefills prompts whole.
    pub chunked_prefill_size: Option<u32>,
    /// `--max-prefill-tokens` (16384): new tokens of one prefill batch, past its first request.
    pub max_prefill_tokens: u32,
    /// `--schedule-conservativeness` (1.0): scales the initial `new_token_ratio`.
    pub schedule_conservativeness: f64,
    /// The CUDA-graph batch sizes decodes are padded up to (`cuda_graph_runner.py`'s
    /// `get_batch_sizes_to_capture`, cut at `--cuda-graph-max-bs`); empty: no graphs.
    pub cuda_graph_bs: Vec<u32>,
    /// `--disable-overlap-schedule`: the CPU's scheduling runs in series with the GPU.
    pub disable_overlap_schedule: bool,
    /// The FP8 checkpoint holds one weight scale per tensor: SGLang multiplies through
    /// `torch._scaled_mm` (cuBLASLt), not its cutlass `fp8_scaled_mm` (`run::fp8_gemms`). Only
    /// the cost model reads it.
    pub fp8_tensor_scales: bool,
}

/// TGI's limits, resolved (launcher and router flags, and what warm-up measured).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TgiConfig {
    /// `--max-input-tokens`: a longer prompt is refused with HTTP 422.
    pub max_input_tokens: u32,
    /// `--max-total-tokens`: a request whose prompt + `max_new_tokens` exceeds it is refused with
    /// HTTP 422. Also the longest sequence the engine serves.
    pub max_total_tokens: u32,
    /// `--max-batch-prefill-tokens`: prompt tokens in one prefill batch. `next_batch` pads it up to
    /// whole KV blocks (see [`TgiConfig::prefill_budget_tokens`]).
    pub max_batch_prefill_tokens: u32,
    /// KV cache capacity in tokens (TGI's `max_batch_total_tokens`, measured at warm-up as whole
    /// blocks). `next_batch` also requires the new requests' prompt + `max_new_tokens` to fit in
    /// this minus the tokens of the blocks the running batch holds.
    pub max_batch_total_tokens: u32,
    /// `--waiting-served-ratio`: with B running, a prefill needs ⌊ratio × B⌋ requests that fit.
    /// `f32`, as TGI computes `(batch_size as f32 * waiting_served_ratio).floor()`.
    pub waiting_served_ratio: f32,
    /// `--max-waiting-tokens`: after this many `waiting_tokens`, any one request may be prefilled.
    pub max_waiting_tokens: u32,
    /// `--max-concurrent-requests`: requests in flight (queued or running) beyond it get HTTP 429.
    pub max_concurrent_requests: u32,
}

impl TgiConfig {
    /// The prefill token budget as `next_batch` applies it: `max_batch_prefill_tokens` padded up
    /// to a multiple of the block size ("Pad prefill_token_budget to be a multiple of block size").
    pub fn prefill_budget_tokens(&self, block_size: u32) -> u32 {
        let padded = (self.max_batch_prefill_tokens as u64).div_ceil(block_size as u64) * block_size as u64;
        padded.min(u32::MAX as u64) as u32
    }

    /// TGI's start-up checks that the policy relies on, against a cache of `num_gpu_blocks` blocks
    /// of `block_size` tokens. Each failure names the rule and where TGI enforces it.
    pub fn check(&self, block_size: u32, num_gpu_blocks: u32) -> Result<(), String> {
        let kv_tokens = num_gpu_blocks as u64 * block_size as u64;
        if self.max_input_tokens == 0 {
            return Err("max_input_tokens must be at least 1".into());
        }
        if self.max_input_tokens >= self.max_total_tokens {
            return Err(format!(
                "max_input_tokens ({}) must be < max_total_tokens ({}) (TGI launcher)",
                self.max_input_tokens, self.max_total_tokens
            ));
        }
        if self.max_batch_prefill_tokens < self.max_input_tokens {
            return Err(format!(
                "max_batch_prefill_tokens ({}) must be >= max_input_tokens ({}) (TGI launcher)",
                self.max_batch_prefill_tokens, self.max_input_tokens
            ));
        }
        if self.max_total_tokens > self.max_batch_total_tokens {
            return Err(format!(
                "max_total_tokens ({}) exceeds max_batch_total_tokens ({}): TGI's router refuses to start \
                 (\"Not enough memory to handle max_total_tokens\")",
                self.max_total_tokens, self.max_batch_total_tokens
            ));
        }
        if self.max_batch_total_tokens as u64 > kv_tokens {
            return Err(format!(
                "max_batch_total_tokens ({}) exceeds the KV cache ({num_gpu_blocks} blocks × {block_size} = {kv_tokens} tokens)",
                self.max_batch_total_tokens
            ));
        }
        if !(self.waiting_served_ratio.is_finite() && self.waiting_served_ratio >= 0.0) {
            return Err(format!("waiting_served_ratio ({}) must be a finite number ≥ 0", self.waiting_served_ratio));
        }
        if self.max_concurrent_requests == 0 {
            return Err("max_concurrent_requests must be at least 1".into());
        }
        Ok(())
    }
}
