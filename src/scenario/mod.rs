//! Scenario files: the TOML schema, presets for models and GPUs, and validation that names the
//! file, field and value of anything wrong.
//!
//! Loading is config-then-run (ripgrep's split): the raw TOML table gets `--set` overrides
//! applied, is deserialized with `deny_unknown_fields` into the raw schema, and is then resolved
//! (presets expanded, defaults filled in the way the chosen engine fills them) and validated into a
//! [`Scenario`], which the rest of the program trusts.

pub mod cost_params;
pub mod engine_profile;
pub mod error;
pub mod hardware;
pub mod model;
pub mod parallel;
pub mod schema;
pub mod speculative;
pub mod trace;
pub mod transfer;
mod resolve;

use std::path::{Path, PathBuf};

pub use error::ScenarioError;
pub use resolve::{LINK_PRESETS, MAX_OVERHEAD_US};
pub use hardware::{GpuSpec, Hardware};
pub use model::{Dtype, ModelSpec};
pub use trace::TraceRow;
pub use crate::sched::{Policy, SglangConfig, TgiConfig};

/// A validated scenario. Every field is in force; nothing is left to defaults downstream.
#[derive(Clone, Debug, PartialEq)]
pub struct Scenario {
    /// The file it was loaded from (for error messages and relative paths such as traces).
    pub path: PathBuf,
    /// Optional human name (`name = "..."` at top level); defaults to the file stem.
    pub name: String,
    pub model: ModelSpec,
    pub hardware: Hardware,
    pub engine: EngineConfig,
    pub cost: CostParams,
    pub workload: WorkloadConfig,
    /// The recorded run this scenario reproduces, if any.
    pub validation: Option<ValidationSpec>,
    /// A kernel profile that prices steps instead of the roofline (`[cost] profile = "auto"` or
    /// a profile CSV); `None` for the roofline (with a fitted profile's parameters, if named).
    pub kernel_profile: Option<KernelProfile>,
    /// The fitted profile (`servesim fit`) whose values `cost` holds, if `[cost] profile` names
    /// one.
    pub fitted_profile: Option<FittedProfile>,
    /// The bundled correction whose values `cost` holds (`calibration/transfer/`): for
    /// `cost.profile = "auto"` on a GPU priced by another GPU's profile, every pool on that GPU.
    pub transfer_correction: Option<&'static transfer::TransferCorrection>,
    /// `[[cluster.pools]]`, in routing order; empty for the one pool that `hardware` and `engine`
    /// describe. With pools, `hardware` and `engine` are the first pool's.
    pub pools: Vec<Pool>,
    /// `[cluster] mode = "disaggregated"`: the link KV moves over from the prefill pools to the
    /// decode pools; `None` otherwise.
    pub kv_link: Option<KvLink>,
}

/// One pool of a heterogeneous cluster: replicas of one GPU type and tensor-parallel degree, with
/// the scenario's engine knobs and their own KV capacity.
#[derive(Clone, Debug, PartialEq)]
pub struct Pool {
    pub gpu: GpuSpec,
    /// `tensor_parallel`, `replicas`, `num_gpu_blocks` (and TGI's token capacity) are the pool's.
    pub engine: EngineConfig,
    /// The scenario's `weight` for the weighted router; `None` derives it from the cost model.
    pub weight: Option<f64>,
    /// What its replicas do: both phases, or one side of a disaggregated deployment.
    pub role: PoolRole,
}

/// A pool's part in serving a request (docs/disaggregation.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PoolRole {
    /// Prefill and decode.
    Serve,
    /// Prefill and the first token; the KV then moves to a decode pool.
    Prefill,
    /// Decode requests whose KV came from a prefill pool.
    Decode,
}

impl PoolRole {
    pub fn name(self) -> &'static str {
        match self {
            PoolRole::Serve => "serve",
            PoolRole::Prefill => "prefill",
            PoolRole::Decode => "decode",
        }
    }
}

/// The link a disaggregated deployment moves KV over, into each decode replica.
#[derive(Clone, Debug, PartialEq)]
pub struct KvLink {
    /// The preset's name, or "custom".
    pub name: String,
    /// Bytes per second per GPU of the receiving replica: a tensor-parallel replica receives its
    /// KV shards over all its GPUs' links at once.
    pub bandwidth_bytes_per_s_per_gpu: f64,
    pub latency_ns: u64,
}

/// What a fitted profile says it was fitted on, to check it against the scenario that loads it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FittedProfile {
    pub path: PathBuf,
    /// `provenance.hardware`, e.g. `MI300X x8`.
    pub hardware: Option<String>,
    /// `provenance.engine_policy`, e.g. `tgi`.
    pub engine_policy: Option<String>,
}

/// Which kernel profile a scenario's steps are priced by.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KernelProfile {
    /// The profile bundled for the scenario's GPU (calibration/public/), if there is one.
    Auto,
    /// A profile CSV (`servesim calibrate` or `calibrate import`), `.csv` or `.csv.zst`.
    File(PathBuf),
}

/// Resolved `[validation]`.
#[derive(Clone, Debug, PartialEq)]
pub struct ValidationSpec {
    pub recorded: PathBuf,
    /// Parallel to `workload.num_prompts`: the 1-based block of each sweep point.
    pub blocks: Vec<usize>,
    /// vLLM JSON keys compared, in report order.
    pub metrics: Vec<String>,
    /// Recorded blocks a fit may use; the others are held out.
    pub fit_blocks: Vec<usize>,
    /// Where the recorded times start.
    pub clock: RecordedClock,
}

/// Where a recorded run's times start (`[validation] clock`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RecordedClock {
    /// At the client's send: the API server's time is in every latency.
    #[default]
    Client,
    /// At the engine core's queue: no front end in them.
    Engine,
}

/// Metrics compared when a scenario does not name its own: what the accuracy targets are set on
/// (docs/recorded-runs.md), plus the figures users read first.
pub const DEFAULT_VALIDATION_METRICS: [&str; 8] = [
    "output_throughput",
    "request_throughput",
    "mean_ttft_ms",
    "median_ttft_ms",
    "mean_tpot_ms",
    "median_tpot_ms",
    "mean_itl_ms",
    "median_itl_ms",
];

/// How a cluster of replicas spreads requests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Router {
    RoundRobin,
    /// Send to the replica with the fewest requests in flight; ties go to the lowest index.
    LeastOutstanding,
    /// Send to the replica minimising (outstanding + 1) / weight, where the weight is its speed;
    /// ties go to the lowest index.
    WeightedLeastOutstanding,
    /// Send to the replica whose prefix cache holds the longest prefix of the prompt, unless its
    /// load is too far above the least loaded's (`sim::cluster`, docs/prefix-caching.md).
    PrefixAware,
    /// SGLang's router (sgl-router) `cache_aware` policy: an approximate radix tree of the
    /// prompts sent to each replica, balanced by load (`sim::sgl_router`, docs/sglang.md).
    CacheAware,
}

impl Router {
    pub fn name(self) -> &'static str {
        match self {
            Router::RoundRobin => "round-robin",
            Router::LeastOutstanding => "least-outstanding",
            Router::WeightedLeastOutstanding => "weighted-least-outstanding",
            Router::PrefixAware => "prefix-aware",
            Router::CacheAware => "cache-aware",
        }
    }
}

/// Resolved `[engine]` section.
#[derive(Clone, Debug, PartialEq)]
pub struct EngineConfig {
    pub policy: Policy,
    pub tensor_parallel: u32,
    pub replicas: u32,
    pub router: Router,
    /// Token budget of one step (prefill chunk tokens + decode tokens). For `tgi`: the prefill
    /// budget, `max_batch_prefill_tokens` padded up to whole blocks; TGI's decodes have none.
    pub max_num_batched_tokens: u32,
    /// For `tgi`, which has no cap on the batch: `u32::MAX`.
    pub max_num_seqs: u32,
    /// Always false for `tgi` (2.3 has no chunked prefill).
    pub enable_chunked_prefill: bool,
    pub block_size: u32,
    /// Fraction of GPU memory the engine may use. For `tgi`, its `CUDA_MEMORY_FRACTION`
    /// (default 1.0).
    pub gpu_memory_utilization: f64,
    /// Longest sequence (prompt + output). For `tgi`: `max_total_tokens`.
    pub max_model_len: u32,
    /// KV blocks per replica: pinned by the scenario, or computed as the engine computes it.
    pub num_gpu_blocks: u32,
    /// Blocks each sequence holds beside its tokens' in a hybrid model's layout
    /// ([`model::KvLayout`]): its sliding windows and linear-attention states; 0 otherwise.
    pub kv_blocks_per_seq: u32,
    /// Fraction of KV blocks kept free when admitting a prompt (vLLM V0: 0.01; V1: 0).
    pub watermark: f64,
    /// Reuse cached prompt blocks (`sched::prefix`); docs/prefix-caching.md.
    pub enable_prefix_caching: bool,
    /// Decode steps per scheduling decision (`sched::window`); 1 for every policy but
    /// "vllm-v0" and "servesim" (docs/multi-step.md).
    pub num_scheduler_steps: u32,
    /// `[engine.speculative]`: speculative decoding (docs/speculative-decoding.md), `None` = off.
    pub speculative: Option<speculative::SpeculativeSpec>,
    /// Memory per GPU held back for activations and runtime buffers when sizing the KV cache.
    pub activation_reserve_bytes: u64,
    /// TGI's limits (`Some` exactly for policy `tgi`); `max_batch_total_tokens` is
    /// `num_gpu_blocks × block_size` unless the scenario pins it.
    pub tgi: Option<TgiConfig>,
    /// SGLang's knobs (`Some` exactly for policy `sglang`): docs/sglang.md.
    pub sglang: Option<SglangConfig>,
    /// The engine profile of the modelled release (`None` for servesim's own engine): its
    /// engine-time values are the cost parameters' defaults, and its defaults are the knobs'.
    pub profile: Option<engine_profile::EngineProfile>,
    /// The modelled release: `[engine] version`, or the profile's default release.
    pub version: Option<engine_profile::EngineVersion>,
    /// `data_parallel` > 1: that many ranks, each an engine of `tensor_parallel` GPUs
    /// (`parallel`); `None` for one engine per replica.
    pub data_parallel: Option<parallel::DataParallel>,
}

impl EngineConfig {
    /// Engines the deployment runs, each with its own scheduler and KV cache: every replica's
    /// data-parallel ranks (one per replica without data parallelism).
    pub fn engines(&self) -> u32 {
        self.replicas.saturating_mul(self.data_parallel.map_or(1, |dp| dp.ranks))
    }
}

/// Named physical parameters of the cost model. Later issues calibrate and fit these.
#[derive(Clone, Debug, PartialEq)]
pub struct CostParams {
    /// Achieved fraction of peak FLOP/s in GEMMs.
    pub gemm_efficiency: f64,
    /// Achieved fraction of peak FLOP/s in attention kernels.
    pub attention_efficiency: f64,
    /// Achieved fraction of peak HBM bandwidth.
    pub memory_bandwidth_efficiency: f64,
    /// Fixed latency of one all-reduce, microseconds.
    pub collective_latency_us: f64,
    /// Achieved fraction of link bandwidth in collectives.
    pub collective_bandwidth_efficiency: f64,
    /// Achieved fraction of peak FLOP/s when prefill tokens attend to KV already in the cache
    /// (chunked prefill, recompute). Engines run this through a different kernel than one-pass
    /// prefill (vLLM 0.6.3: the paged prefix-prefill kernel), so it has its own efficiency.
    pub prefix_attention_efficiency: f64,
    /// CPU overhead of one engine step launched eagerly (kernel by kernel), microseconds.
    pub step_overhead_eager_us: f64,
    /// CPU overhead of one engine step replayed from a captured CUDA/HIP graph, microseconds.
    pub step_overhead_graph_us: f64,
    /// Extra CPU time of a step that runs prefill tokens (the prefill attention path and its
    /// metadata, outside any graph), microseconds.
    pub prefill_step_overhead_us: f64,
    /// Extra CPU time per sequence with prefill tokens in a step (building its batch entry:
    /// sampling state, block tables, input tensors), microseconds.
    pub prefill_seq_overhead_us: f64,
    /// CPU overhead per sequence in a step (input prep, detokenize, stream), microseconds.
    pub seq_overhead_us: f64,
    /// The API server's time per request before the engine's scheduler sees it (HTTP parsing,
    /// tokenization, hand-off), microseconds. A replica's front end takes requests one at a
    /// time, so a burst reaches the scheduler spread out, and the engine's first step starts on
    /// the first request alone, as real engines' do.
    pub frontend_overhead_us: f64,
    /// The API server's time per prompt token (tokenizing it), microseconds, on top of
    /// `frontend_overhead_us`: a long prompt takes longer to reach the scheduler.
    pub frontend_per_token_us: f64,
    /// Share of a step's CPU time (the overheads above) hidden behind the GPU's work: 0 when the
    /// engine schedules and prepares each step only after the last one ended (vLLM V0, V1
    /// without async scheduling), up to 1 when it prepares the next step while the GPU runs
    /// this one (V1's async scheduling, SGLang's overlap scheduler). The hidden part is at most
    /// the GPU time of the step.
    pub cpu_overlap: f64,
    /// Only for a profile transferred to a GPU it was not measured on: the share of the measured
    /// GPU's kernel utilisation that this GPU's kernels reach (1 = the same share of its
    /// datasheet peaks). A vendor's kernels and libraries are not equally tuned on every GPU, so
    /// the share is fitted to recorded runs of the GPU (`calibration/transfer/`).
    pub transfer_utilisation: f64,
}

impl Default for CostParams {
    /// The unfitted roofline guesses a scenario gets when it names no profile.
    fn default() -> Self {
        resolve::DEFAULT_COST
    }
}

/// The longest simulated run, seconds (about 32 years): arrival times are nanoseconds in a
/// `u64`, which holds 585 years, so a run this long keeps every sum of a time and a step exact.
/// A trace row or a rate that would arrive later is refused when the scenario is loaded, so
/// the limit is the scenario's, which `workload` generates within.
pub const HORIZON_MAX_S: f64 = 1e9;

/// Most requests one sweep point may send: each costs about 200 bytes while it runs, so this
/// bounds a run near 2 GB. The simulator does 1M in well under a second.
pub const NUM_PROMPTS_MAX: u32 = 10_000_000;

/// Resolved `[workload]` section.
#[derive(Clone, Debug, PartialEq)]
pub struct WorkloadConfig {
    /// One simulation per value: a sweep, printed as one report block per value.
    pub num_prompts: Vec<u32>,
    /// Requests per second, per sweep point (as long as `num_prompts`: a scenario that sweeps
    /// one of the two repeats the other); `f64::INFINITY` sends everything at time zero.
    pub request_rate: Vec<f64>,
    /// Shape of the gamma distribution of inter-arrival gaps (1.0 = Poisson), as vLLM's client.
    pub burstiness: f64,
    /// At most this many requests in flight from the client; `None` = unbounded.
    pub max_concurrency: Option<u32>,
    pub dataset: Dataset,
    pub seed: u64,
    /// Per sweep point (parallel to `num_prompts`): the exact total of input tokens that the
    /// sampled lengths are scaled to, as a recorded run reports it.
    pub input_tokens_total: Option<Vec<u64>>,
    /// Per sweep point: the exact total of output tokens (recorded runs whose model stopped on
    /// its own, so only totals are known).
    pub output_tokens_total: Option<Vec<u64>>,
    /// `[workload.dataset.prefix]`: system prompts the requests begin with (random and sharegpt).
    pub system_prompts: Option<SystemPrompts>,
    /// `[workload.sessions]`: requests grouped into multi-turn chat sessions.
    pub sessions: Option<Sessions>,
}

/// Multi-turn chat sessions: `turns` requests each, every turn's prompt the previous prompt, its
/// answer and the new user text, sent a think time after the previous answer ends.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sessions {
    pub turns: u32,
    /// Mean think time between a turn's last token and the next turn's send, seconds.
    pub think_time_s: f64,
    pub think_time: ThinkTime,
    /// The engine's `max_model_len`: a turn that would not fit starts a new conversation.
    pub context_len: u32,
}

/// How think times are drawn around their mean.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ThinkTime {
    Exponential,
    Fixed,
}

/// N distinct system prompts of one length; each request begins with one of them, added to the
/// prompt length the dataset draws.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SystemPrompts {
    pub count: u32,
    pub tokens: u32,
    pub law: PrefixLaw,
}

/// How often each system prompt is chosen.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum PrefixLaw {
    Uniform,
    /// Prompt of rank k (from 1) with probability ∝ k^−exponent.
    Zipf { exponent: f64 },
}

/// One point of a workload sweep.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SweepPoint {
    pub num_prompts: u32,
    pub request_rate: f64,
    pub input_tokens_total: Option<u64>,
    pub output_tokens_total: Option<u64>,
}

impl SweepPoint {
    /// `num_prompts` requests at `request_rate`, with lengths as sampled.
    pub fn new(num_prompts: u32, request_rate: f64) -> SweepPoint {
        SweepPoint { num_prompts, request_rate, input_tokens_total: None, output_tokens_total: None }
    }
}

impl WorkloadConfig {
    /// Whether the sweep varies the request rate (and so load is the rate, not `num_prompts`).
    pub fn sweeps_rate(&self) -> bool {
        self.request_rate.windows(2).any(|w| w[0].to_bits() != w[1].to_bits())
    }

    /// The sweep: one point per `num_prompts` (and `request_rate`) value.
    pub fn points(&self) -> Vec<SweepPoint> {
        let total = |list: &Option<Vec<u64>>, i: usize| list.as_ref().map(|l| l[i]);
        self.num_prompts
            .iter()
            .enumerate()
            .map(|(i, &num_prompts)| SweepPoint {
                num_prompts,
                request_rate: self.request_rate[i],
                input_tokens_total: total(&self.input_tokens_total, i),
                output_tokens_total: total(&self.output_tokens_total, i),
            })
            .collect()
    }
}

/// Where request lengths (and, for traces, arrival times) come from.
#[derive(Clone, Debug, PartialEq)]
pub enum Dataset {
    /// Every request has the same input and output length.
    Fixed { input_len: u32, output_len: u32 },
    /// vLLM's random dataset: lengths uniform in
    /// `[floor(len × (1 − range_ratio)), ceil(len × (1 + range_ratio))]`, plus a fixed prefix.
    Random { input_len: u32, output_len: u32, range_ratio: f64, prefix_len: u32 },
    /// Sonnet-like: fixed input length (of which `prefix_len` tokens are shared), output lengths
    /// from a distribution (a model stopping on its own before `max_tokens`).
    Sonnet { input_len: u32, prefix_len: u32, output: LengthDist },
    /// ShareGPT-like: input and output lengths from distributions.
    ShareGpt { input: LengthDist, output: LengthDist },
    /// A recorded trace: rows of (arrival seconds, input tokens, output tokens). Arrival times
    /// come from the trace, not from `request_rate`.
    Trace { path: PathBuf, rows: Vec<TraceRow> },
}

/// A distribution of token counts, always clamped to `[min, max]` and at least 1.
#[derive(Clone, Debug, PartialEq)]
pub enum LengthDist {
    Fixed { value: u32 },
    /// Uniform over the integers `min..=max`.
    Uniform { min: u32, max: u32 },
    /// Normal with the given mean and standard deviation, rounded, clamped.
    Normal { mean: f64, std: f64, min: u32, max: u32 },
    /// Log-normal whose own mean and standard deviation are the given ones, rounded, clamped.
    LogNormal { mean: f64, std: f64, min: u32, max: u32 },
}

impl Dataset {
    /// The client's `max_tokens` when it differs per dataset from the output length: datasets
    /// whose outputs end on their own (sonnet, ShareGPT) send the distribution's maximum;
    /// the others (vLLM's `ignore_eos` style) send each request's output length (`None`).
    pub fn max_tokens(&self) -> Option<u32> {
        match self {
            Dataset::Sonnet { output, .. } | Dataset::ShareGpt { output, .. } => Some(output.max()),
            Dataset::Fixed { .. } | Dataset::Random { .. } | Dataset::Trace { .. } => None,
        }
    }
}

impl LengthDist {
    /// The largest value the distribution can produce.
    pub fn max(&self) -> u32 {
        match *self {
            LengthDist::Fixed { value } => value,
            LengthDist::Uniform { max, .. }
            | LengthDist::Normal { max, .. }
            | LengthDist::LogNormal { max, .. } => max,
        }
    }
}

impl Scenario {
    /// Reads, overrides, resolves and validates a scenario file.
    ///
    /// `overrides` are `dotted.key=value` strings as given to `--set`; the value is parsed as a
    /// TOML value, and as a plain string if that fails.
    pub fn load(path: &Path, overrides: &[String]) -> Result<Scenario, ScenarioError> {
        resolve::load(path, overrides)
    }

    /// The scenario as each pool alone would be: its GPU, TP, replicas and KV capacity, the rest
    /// shared. A scenario without pools is its own one pool.
    pub fn pool_scenarios(&self) -> Vec<Scenario> {
        if self.pools.is_empty() {
            return vec![self.clone()];
        }
        self.pools
            .iter()
            .map(|pool| Scenario {
                hardware: Hardware { gpu: pool.gpu.clone(), count: pool.engine.tensor_parallel * pool.engine.replicas },
                engine: pool.engine.clone(),
                pools: Vec::new(),
                ..self.clone()
            })
            .collect()
    }

    /// Parses scenario text as if it came from `path` (used by tests and built-in examples).
    pub fn from_toml_str(text: &str, path: &Path, overrides: &[String]) -> Result<Scenario, ScenarioError> {
        resolve::from_str(text, path, overrides)
    }
}
