//! The raw TOML schema (serde, `deny_unknown_fields`).
//!
//! These structs mirror the file one-to-one; nearly everything is optional here, because which
//! fields are required, and their defaults, depend on other fields (a preset, the engine policy,
//! the dataset kind). `resolve/` decides that and validates the values. Names are strings here,
//! not enums, so that an unknown preset, policy or kind is reported by the resolver as an invalid
//! *field* with the list of known names, rather than as a serde "unknown variant".
//!
//! Keys are snake_case, as vLLM's own argument names (`max_num_seqs`, `gpu_memory_utilization`).

use serde::Deserialize;
use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use std::fmt;

/// The whole file.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawScenario {
    /// Human name; defaults to the file stem.
    pub name: Option<String>,
    pub model: RawModel,
    /// Required without `[[cluster.pools]]` (the resolver says so); with pools, each names its GPU.
    #[serde(default)]
    pub hardware: RawHardware,
    #[serde(default)]
    pub engine: RawEngine,
    #[serde(default)]
    pub cost: RawCost,
    pub workload: RawWorkload,
    pub validation: Option<RawValidation>,
    /// `[cluster]`: heterogeneous pools of replicas behind one router.
    pub cluster: Option<RawCluster>,
}

/// `[cluster]`: the replicas behind the router, as pools of GPUs of one kind each.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawCluster {
    /// `[[cluster.pools]]`, in routing order (replica indices count through them).
    #[serde(default)]
    pub pools: Vec<RawPool>,
    /// "pooled" (default: every replica prefills and decodes) or "disaggregated" (pools with
    /// `role = "prefill"` or `"decode"`; docs/disaggregation.md).
    pub mode: Option<String>,
    /// Disaggregated: the link KV moves over, a preset ("nvlink", "infiniband", "ethernet").
    pub link: Option<String>,
    /// Disaggregated: the link's bandwidth per GPU of the receiving replica, GB/s (overrides the
    /// preset's).
    pub link_bandwidth_gbps: Option<f64>,
    /// Disaggregated: the link's latency per transfer, µs (overrides the preset's).
    pub link_latency_us: Option<f64>,
}

/// One `[[cluster.pools]]` table: replicas that share a GPU type and tensor-parallel degree. The
/// `[engine]` knobs apply to every pool; the memory ones can be set per pool.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawPool {
    /// A GPU preset, as `hardware.gpu`.
    pub gpu: Option<String>,
    pub tensor_parallel: Option<u32>,
    pub replicas: Option<u32>,
    /// Overrides `engine.num_gpu_blocks` for this pool.
    pub num_gpu_blocks: Option<u32>,
    /// Overrides `engine.gpu_memory_utilization` for this pool.
    pub gpu_memory_utilization: Option<f64>,
    /// Relative speed for `router = "weighted-least-outstanding"` (default: from the cost model).
    pub weight: Option<f64>,
    /// Disaggregated: "prefill" or "decode".
    pub role: Option<String>,
    /// Override `engine.max_num_seqs` / `engine.max_num_batched_tokens` for this pool.
    pub max_num_seqs: Option<u32>,
    pub max_num_batched_tokens: Option<u32>,
}

/// `[validation]`: the recorded run this scenario reproduces.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawValidation {
    /// Recorded results (vLLM text blocks or `--save-result` JSON), relative to the scenario.
    pub recorded: String,
    /// For each `num_prompts` value, the 1-based index of its block in the recorded file.
    pub blocks: Vec<usize>,
    /// vLLM JSON keys to compare; default: throughput, TTFT, TPOT and ITL figures.
    pub metrics: Option<Vec<String>>,
    /// The recorded blocks (1-based, as in `blocks`) a fit may use; the rest are held out.
    /// Default: none.
    pub fit_blocks: Option<Vec<usize>>,
    /// Where the recorded times start: "client" (default: the benchmark client's send, as
    /// vLLM's benchmark_serving measures) or "engine" (the engine core's queue, with no API
    /// server in them: the front end's time is left out of the simulated ones too).
    pub clock: Option<String>,
}

/// A fitted cost profile file: provenance plus `[cost]` values.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawProfile {
    /// Where the values came from: free-form, written by `servesim fit`.
    pub provenance: Option<toml::Table>,
    pub cost: RawCost,
}

/// `[model]`: a `preset`, or an `hf_config` path, or explicit dimensions; explicit dimensions
/// override the preset's or config's.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawModel {
    pub preset: Option<String>,
    /// Path to a Hugging Face `config.json`, relative to the scenario file's folder.
    pub hf_config: Option<String>,
    pub name: Option<String>,
    pub num_layers: Option<u32>,
    pub hidden_size: Option<u32>,
    pub num_heads: Option<u32>,
    pub num_kv_heads: Option<u32>,
    pub head_dim: Option<u32>,
    /// The dense MLP's intermediate size; in a mixture-of-experts model, the shared experts'
    /// (0: none).
    pub ffn_size: Option<u32>,
    /// Mixture of experts: routed experts per layer (absent or 0: a dense model, unless the
    /// preset or config has experts).
    pub num_experts: Option<u32>,
    /// Mixture of experts: experts each token is routed to (top-k).
    pub experts_per_token: Option<u32>,
    /// Mixture of experts: one expert's intermediate size.
    pub expert_ffn_size: Option<u32>,
    /// Mixture of experts: Zipf exponent of the experts' shares of tokens (0: balanced).
    pub expert_routing_skew: Option<f64>,
    pub vocab_size: Option<u32>,
    pub tied_embeddings: Option<bool>,
    pub max_position_embeddings: Option<u32>,
    /// Weights: "bf16" (default), "fp16", "fp8", "fp32".
    pub dtype: Option<String>,
    /// KV cache: as `dtype`, or "auto" (the default: the activation dtype).
    pub kv_cache_dtype: Option<String>,
    /// Weight quantization scheme: "none", "fp8", "fp8-block", "awq", "gptq", "mxfp4", "nvfp4"
    /// (default: the preset's or config's).
    pub quantization: Option<String>,
}

/// `[hardware]`: a `gpu` preset and a `count`, with optional overrides of any figure.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawHardware {
    pub gpu: Option<String>,
    pub count: Option<u32>,
    pub name: Option<String>,
    /// Dense BF16/FP16 TFLOP/s.
    pub peak_tflops_16bit: Option<f64>,
    /// Dense FP8 TFLOP/s; 0 means no FP8 tensor cores.
    pub peak_tflops_fp8: Option<f64>,
    /// Capacity, GiB (2^30 bytes).
    pub memory_gib: Option<f64>,
    /// Memory bandwidth, GB/s (10^9 bytes per second).
    pub memory_bandwidth_gbps: Option<f64>,
    /// GPU-to-GPU bandwidth per GPU per direction, GB/s.
    pub interconnect_gbps: Option<f64>,
    /// The network between nodes per GPU per direction, GB/s: what a collective over more
    /// than one node's GPUs (past 8) crosses.
    pub scale_out_gbps: Option<f64>,
}

/// `[engine]`. Every field defaults the way the chosen `policy`'s engine defaults it.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawEngine {
    /// "vllm-v1" (default), "vllm-v0", "tgi", or "servesim" (`servesim serve`: V1 without graphs).
    pub policy: Option<String>,
    /// The engine's release, e.g. "0.6.3" or "0.15.1": picks its engine profile (engine time and
    /// defaults; docs/engine-profiles.md). Default: the policy's newest profiled release. A
    /// number (`version = 0.9`) reaches the resolver as such, to be refused by name: `0.10`
    /// would read as 0.1.
    pub version: Option<RawVersion>,
    pub tensor_parallel: Option<u32>,
    /// Mixture-of-experts models: whole experts per GPU, tokens sent to them by all-to-all
    /// (vLLM's `--enable-expert-parallel`); default false, each expert split like a dense MLP.
    pub expert_parallel: Option<bool>,
    /// vLLM's `--data-parallel-size`: engines (ranks) of `tensor_parallel` GPUs each, with their
    /// own schedulers and KV caches, sharing a mixture of experts' expert layers (default 1).
    pub data_parallel: Option<u32>,
    /// vLLM's `--all2all-backend`: how expert layers move tokens between data-parallel ranks.
    pub all2all_backend: Option<String>,
    pub replicas: Option<u32>,
    /// "round-robin" (default), "least-outstanding" or "weighted-least-outstanding".
    pub router: Option<String>,
    pub max_num_batched_tokens: Option<u32>,
    pub max_num_seqs: Option<u32>,
    pub enable_chunked_prefill: Option<bool>,
    pub block_size: Option<u32>,
    pub gpu_memory_utilization: Option<f64>,
    pub max_model_len: Option<u32>,
    /// Pins the number of KV blocks per replica (vLLM's `num_gpu_blocks_override`).
    pub num_gpu_blocks: Option<u32>,
    pub watermark: Option<f64>,
    /// Reuse cached prompt blocks (default: on for "vllm-v1", off for the other policies, as the
    /// engines ship; "tgi" cannot turn it on).
    pub enable_prefix_caching: Option<bool>,
    /// Decode steps per scheduling decision, vLLM 0.6's `--num-scheduler-steps` (default 1;
    /// policies "vllm-v0" and "servesim"): docs/multi-step.md.
    pub num_scheduler_steps: Option<u32>,
    /// `[engine.speculative]`: speculative decoding (policies "vllm-v1" and "servesim").
    pub speculative: Option<RawSpeculative>,
    /// vLLM V1's `--async-scheduling` / `--no-async-scheduling` (0.10 on). Default: the release's
    /// (on from 0.14, unless a draft-model or n-gram proposer turns it off).
    pub async_scheduling: Option<bool>,
    /// Overrides the estimated activation + runtime reserve per GPU, GiB.
    pub activation_reserve_gib: Option<f64>,
    // TGI's launcher flags (policy "tgi" only), under their own names.
    pub max_input_tokens: Option<u32>,
    pub max_total_tokens: Option<u32>,
    pub max_batch_prefill_tokens: Option<u32>,
    /// Pins the KV capacity in tokens, a multiple of `block_size` (TGI 2.3 measures it at
    /// warm-up and ignores the flag for flash-attention models; here it stands for that measure).
    pub max_batch_total_tokens: Option<u32>,
    pub waiting_served_ratio: Option<f64>,
    pub max_waiting_tokens: Option<u32>,
    pub max_concurrent_requests: Option<u32>,
    /// `[engine.sglang]`: SGLang 0.4.9's server flags under their own names (policy "sglang"
    /// only; docs/sglang.md).
    pub sglang: Option<RawSglang>,
}

/// `[engine.sglang]`: SGLang's `server_args.py` flags, `--` and dashes dropped. Any other key is
/// refused by name.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSglang {
    /// "fcfs" (default) or "lpm".
    pub schedule_policy: Option<String>,
    /// Tokens of one request per prefill batch; -1 turns chunking off. Default by GPU memory.
    pub chunked_prefill_size: Option<i64>,
    /// New tokens of one prefill batch (16384).
    pub max_prefill_tokens: Option<u32>,
    /// Default: the KV pool's tokens / 2, at most the request pool's size.
    pub max_running_requests: Option<u32>,
    /// Caps the KV pool, in tokens.
    pub max_total_tokens: Option<u32>,
    /// Share of GPU memory for weights and the KV pool. Default by GPU memory and TP.
    pub mem_fraction_static: Option<f64>,
    /// Scales the initial new_token_ratio (1.0).
    pub schedule_conservativeness: Option<f64>,
    /// Tokens per KV page (1).
    pub page_size: Option<u32>,
    pub disable_radix_cache: Option<bool>,
    /// Largest CUDA-graph batch. Default by GPU memory.
    pub cuda_graph_max_bs: Option<u32>,
    pub disable_cuda_graph: Option<bool>,
    pub disable_overlap_schedule: Option<bool>,
    /// An FP8 checkpoint's weight scales: "channel" (default; also `--quantization fp8`'s online
    /// quantization) or "tensor" (one per tensor): docs/sglang.md.
    pub fp8_weight_scale: Option<String>,
    /// The model's context length, overridden.
    pub context_length: Option<u32>,
}

/// `engine.version` as written: a string, or a number to be refused with a reason.
#[derive(Clone, Debug, PartialEq)]
pub enum RawVersion {
    Text(String),
    Number(String),
}

impl<'de> Deserialize<'de> for RawVersion {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = RawVersion;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a release number as a string, such as \"0.6.3\"")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(RawVersion::Text(v.to_string()))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Self::Value, E> {
                Ok(RawVersion::Number(v.to_string()))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
                Ok(RawVersion::Number(v.to_string()))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
                Ok(RawVersion::Number(v.to_string()))
            }
        }
        d.deserialize_any(V)
    }
}

/// `[engine.speculative]`: docs/speculative-decoding.md.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSpeculative {
    /// "draft", "ngram", "mtp" (or "eagle", priced alike).
    pub method: Option<String>,
    pub num_speculative_tokens: Option<u32>,
    /// Per draft token, independent: one rate for every position.
    pub acceptance_rate: Option<f64>,
    /// Per position: the rate of draft i given drafts before it were accepted (k values).
    pub acceptance_rates: Option<Vec<f64>>,
    /// Method "draft": the draft model's preset.
    pub draft_model: Option<String>,
    /// Seed of the acceptance draws (default 0).
    pub seed: Option<u64>,
}

/// `[cost]`: `profile` (a fitted profile's path) and any of the named parameters of
/// [`super::cost_params::PARAMS`]. A table rather than a struct so that the registry is the one
/// list of parameters: keys are checked against it when the scenario is resolved.
pub type RawCost = toml::Table;

/// `[workload]` and its `[workload.dataset]`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawWorkload {
    pub num_prompts: Option<NumPrompts>,
    pub request_rate: Option<RequestRates>,
    pub burstiness: Option<f64>,
    pub max_concurrency: Option<u32>,
    pub seed: Option<u64>,
    pub input_tokens_total: Option<Vec<u64>>,
    pub output_tokens_total: Option<Vec<u64>>,
    pub dataset: RawDataset,
    /// `[workload.sessions]`: multi-turn chat sessions.
    pub sessions: Option<RawSessions>,
}

/// `[workload.sessions]`: `turns` per session, `think_time_s` between them (mean), drawn
/// `think_time = "exponential"` (default) or `"fixed"`.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSessions {
    pub turns: Option<u32>,
    pub think_time_s: Option<f64>,
    pub think_time: Option<String>,
}

/// `[workload.dataset]`: `kind` picks which of the other fields apply.
///
/// | kind       | fields                                                              |
/// |------------|---------------------------------------------------------------------|
/// | `fixed`    | `input_len`, `output_len`                                           |
/// | `random`   | `input_len`, `output_len`, `range_ratio`, `prefix_len`              |
/// | `sonnet`   | `input_len`, `prefix_len`, `output` (or `output_len`, fixed)        |
/// | `sharegpt` | `input`, `output`                                                   |
///
/// `random` and `sharegpt` also take `[workload.dataset.prefix]` ([`RawPrefix`]).
/// | `trace`    | `path` (CSV, relative to the scenario file's folder)                |
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawDataset {
    pub kind: String,
    pub input_len: Option<u32>,
    pub output_len: Option<u32>,
    pub range_ratio: Option<f64>,
    pub prefix_len: Option<u32>,
    pub input: Option<RawLengthDist>,
    pub output: Option<RawLengthDist>,
    pub path: Option<String>,
    /// `[workload.dataset.prefix]` (random and sharegpt): system prompts the requests share.
    pub prefix: Option<RawPrefix>,
}

/// `[workload.dataset.prefix]`: `count` distinct system prompts of `len` tokens, each request
/// beginning with one chosen by `law` ("uniform", default, or "zipf" with `zipf_exponent`).
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawPrefix {
    pub count: Option<u32>,
    pub len: Option<u32>,
    pub law: Option<String>,
    pub zipf_exponent: Option<f64>,
}

/// A length distribution: an integer (a fixed length) or an inline table
/// `{ dist = "fixed" | "uniform" | "normal" | "lognormal", value, mean, std, min, max }`.
#[derive(Clone, Debug, PartialEq)]
pub enum RawLengthDist {
    Fixed(i64),
    Table(RawLengthDistTable),
}

#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawLengthDistTable {
    pub dist: String,
    pub value: Option<u32>,
    pub mean: Option<f64>,
    pub std: Option<f64>,
    pub min: Option<u32>,
    pub max: Option<u32>,
}

impl<'de> Deserialize<'de> for RawLengthDist {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = RawLengthDist;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a token count or a table like { dist = \"lognormal\", mean = 200, std = 150, min = 1, max = 1024 }")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
                Ok(RawLengthDist::Fixed(v))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
                Ok(RawLengthDist::Fixed(i64::try_from(v).unwrap_or(i64::MAX)))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
                RawLengthDistTable::deserialize(de::value::MapAccessDeserializer::new(map))
                    .map(RawLengthDist::Table)
            }
        }
        d.deserialize_any(V)
    }
}

/// A field that takes one value or a list of them (a sweep: one simulation per value), such as
/// `num_prompts = 100` or `num_prompts = [100, 1000]`.
#[derive(Clone, Debug, PartialEq)]
pub struct OneOrList<T>(pub Vec<T>);

/// `num_prompts`, kept as `i64` so that 0 and negatives reach the resolver and get a field-named
/// error.
pub type NumPrompts = OneOrList<i64>;

/// `request_rate`: each value a number or `inf`.
pub type RequestRates = OneOrList<RequestRate>;

impl<'de, T: Deserialize<'de>> Deserialize<'de> for OneOrList<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use de::IntoDeserializer;
        struct V<T>(std::marker::PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for V<T> {
            type Value = OneOrList<T>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a value or a list of values")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
                T::deserialize(v.into_deserializer()).map(|t| OneOrList(vec![t]))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
                T::deserialize(v.into_deserializer()).map(|t| OneOrList(vec![t]))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Self::Value, E> {
                T::deserialize(v.into_deserializer()).map(|t| OneOrList(vec![t]))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                T::deserialize(v.into_deserializer()).map(|t| OneOrList(vec![t]))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let mut out = Vec::new();
                while let Some(v) = seq.next_element::<T>()? {
                    out.push(v);
                }
                Ok(OneOrList(out))
            }
        }
        d.deserialize_any(V(std::marker::PhantomData))
    }
}

/// One `request_rate` value: a number (TOML's `inf` included) or a string ("inf"). Strings are
/// parsed and checked by the resolver, so that a bad one is reported against the field.
#[derive(Clone, Debug, PartialEq)]
pub enum RequestRate {
    Number(f64),
    Text(String),
}


impl<'de> Deserialize<'de> for RequestRate {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = RequestRate;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("requests per second (a number, or inf)")
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Self::Value, E> {
                Ok(RequestRate::Number(v))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
                Ok(RequestRate::Number(v as f64))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
                Ok(RequestRate::Number(v as f64))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(RequestRate::Text(v.to_string()))
            }
        }
        d.deserialize_any(V)
    }
}
