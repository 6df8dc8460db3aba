//! Raw schema → validated [`Scenario`].
//!
//! ```text
//!  file text ──toml──► Table ──--set overrides──► RawScenario (deny_unknown_fields)
//!            ──resolve──► model → GPU → engine (policy defaults) → GPU count → memory / KV blocks
//!                         → cost → workload (dataset, length check against max_model_len)
//! ```
//!
//! Every error is a [`ScenarioError`] naming the scenario file, the dotted field and its value.
//! Defaults are filled in the way the modelled engine fills them; each says which version.

use super::cost_params;
use super::hardware::{GpuSpec, Hardware};
use super::model::{Dtype, ModelSpec, default_kv_dtype};
use super::schema::{
    NumPrompts, RawCost, RawDataset, RawEngine, RawHardware, RawLengthDist, RawModel, RawProfile,
    RawScenario, RawValidation, RawWorkload, RequestRate,
};
use super::{
    CostParams, DEFAULT_VALIDATION_METRICS, Dataset, EngineConfig, LengthDist, Policy, Router,
    Scenario, ScenarioError, TgiConfig, ValidationSpec, WorkloadConfig,
};
use std::fmt::Display;
use std::path::{Path, PathBuf};

const GIB: f64 = (1u64 << 30) as f64;

// ---- defaults -----------------------------------------------------------------------------------

/// vLLM (both engines): `--block-size` 16, `--gpu-memory-utilization` 0.90, `--max-num-seqs` 256,
/// `--tensor-parallel-size` 1.
const DEFAULT_BLOCK_SIZE: u32 = 16;
const DEFAULT_GPU_MEMORY_UTILIZATION: f64 = 0.90;
const DEFAULT_MAX_NUM_SEQS: u32 = 256;

/// vLLM 0.8.x `vllm serve` with the V1 engine: chunked prefill always on, and
/// `max_num_batched_tokens` defaults to 2048 for the OpenAI server (usage context
/// `OPENAI_API_SERVER`). Later releases raise both defaults on large-memory GPUs; pin
/// `max_num_batched_tokens` / `max_num_seqs` to model those.
const V1_MAX_NUM_BATCHED_TOKENS: u32 = 2048;
/// vLLM V1's KV cache manager admits a request whenever its blocks fit: no watermark.
const V1_WATERMARK: f64 = 0.0;

/// vLLM 0.6.3 (V0 engine, `EngineArgs.create_engine_config`): when `--enable-chunked-prefill` is
/// not given, it is turned on for long-context models, `max_model_len > 32768` (ENGINES.md),
/// and the step token budget is then 512.
const V0_LONG_CONTEXT_THRESHOLD: u32 = 32768;
const V0_CHUNKED_MAX_NUM_BATCHED_TOKENS: u32 = 512;
/// vLLM 0.6.3 `SchedulerConfig` without chunked prefill: `max(max_model_len, 2048)`.
const V0_MIN_MAX_NUM_BATCHED_TOKENS: u32 = 2048;
/// vLLM 0.6.3 `BlockSpaceManager` watermark: 1% of blocks kept free when admitting a prompt.
const V0_WATERMARK: f64 = 0.01;

/// TGI 2.3 launcher (`launcher/src/main.rs`): without `--max-input-tokens` / `--max-total-tokens`,
/// they default to the model's `max_position_embeddings` − 1 and `max_position_embeddings`, but a
/// larger `max_position_embeddings` is first capped at 4096 ("to save VRAM by refusing large
/// prompts in order to allow more users on the same hardware").
const TGI_MAX_POSITIONS_DEFAULT: u32 = 4096;
/// TGI 2.3 launcher: `max_batch_prefill_tokens` defaults to `max_input_tokens` + 50 ("some edge
/// in order to account for potential block_size alignment issue").
const TGI_PREFILL_MARGIN_TOKENS: u32 = 50;
/// TGI 2.3 launcher defaults of `--waiting-served-ratio`, `--max-waiting-tokens` and
/// `--max-concurrent-requests`.
const TGI_WAITING_SERVED_RATIO: f64 = 0.3;
const TGI_MAX_WAITING_TOKENS: u32 = 20;
const TGI_MAX_CONCURRENT_REQUESTS: u32 = 128;
/// TGI's shards read `CUDA_MEMORY_FRACTION` (default 1.0): the share of GPU memory they may use,
/// our `gpu_memory_utilization` for policy "tgi".
const TGI_MEMORY_FRACTION: f64 = 1.0;
/// TGI's warm-up sizes the KV cache to 95% of the memory left free (`FlashCausalLM.warmup`:
/// "Leave 5% for some wiggle room").
const TGI_WIGGLE_ROOM: f64 = 0.95;
/// TGI's warm-up requests ask for prefill log-probs (`prefill_logprobs: true` in the router's
/// `warmup`), so the LM head runs on every prompt token: the all-gathered logits and their
/// `log_softmax`, two `[tokens, vocab]` tensors in the activation dtype, are part of the peak that
/// the KV cache is sized after. *Unconfirmed* reading; `activation_reserve_gib` overrides it.
const TGI_WARMUP_LOGITS_COPIES: u64 = 2;

/// Memory per GPU outside PyTorch's activation peak that still is not available for the KV cache:
/// CUDA context, cuBLAS/NCCL workspaces and buffers, CUDA-graph pools, and the gap between the
/// device total we use and what `cudaMemGetInfo` reports. An *estimate*, not a measurement.
const RUNTIME_RESERVE_BYTES: u64 = 1 << 30;

/// `[cost]` defaults: roofline guesses to be replaced by calibration and fitting. They are
/// typical of large GEMMs and of FlashAttention-class kernels on current GPUs, and of vLLM's
/// per-step CPU work; none has been fitted yet.
/// The largest overhead or latency a scenario may set: no engine's CPU work per step or
/// sequence comes near 10 s, and a larger value would only make runs of absurd length.
pub const MAX_OVERHEAD_US: f64 = 1e7;

pub(super) const DEFAULT_COST: CostParams = CostParams {
    gemm_efficiency: 0.7,
    attention_efficiency: 0.5,
    memory_bandwidth_efficiency: 0.8,
    collective_latency_us: 10.0,
    collective_bandwidth_efficiency: 0.7,
    prefix_attention_efficiency: 0.5,
    step_overhead_eager_us: 1000.0,
    step_overhead_graph_us: 300.0,
    prefill_step_overhead_us: 0.0,
    prefill_seq_overhead_us: 0.0,
    seq_overhead_us: 10.0,
    // Zero: every request sent at an instant is in the scheduler's first step. Measured for
    // servesim's own engine by `validate --engine`; not fitted for vLLM or TGI.
    frontend_overhead_us: 0.0,
};

/// vLLM `benchmark_serving.py` defaults: 1000 prompts, request rate inf, burstiness 1.0 (Poisson),
/// no concurrency cap. The random dataset: input 1024, output 128, range ratio 0, no prefix. The
/// sonnet dataset: input 550, prefix 200, output 150.
const DEFAULT_NUM_PROMPTS: u32 = 1000;
const RANDOM_INPUT_LEN: u32 = 1024;
const RANDOM_OUTPUT_LEN: u32 = 128;
const SONNET_INPUT_LEN: u32 = 550;
const SONNET_PREFIX_LEN: u32 = 200;
const SONNET_OUTPUT_LEN: u32 = 150;

// ---- entry points -------------------------------------------------------------------------------

pub(super) fn load(path: &Path, overrides: &[String]) -> Result<Scenario, ScenarioError> {
    let text = std::fs::read_to_string(path).map_err(|source| ScenarioError::Io {
        file: path.to_path_buf(),
        source,
    })?;
    from_str(&text, path, overrides)
}

pub(super) fn from_str(
    text: &str,
    path: &Path,
    overrides: &[String],
) -> Result<Scenario, ScenarioError> {
    let cx = Cx {
        file: path.to_path_buf(),
    };
    let raw: RawScenario = if overrides.is_empty() {
        // Straight from the text, so that errors point at a line and column.
        toml::from_str(text).map_err(|e| cx.parse(e.to_string()))?
    } else {
        let mut table: toml::Table = toml::from_str(text).map_err(|e| cx.parse(e.to_string()))?;
        for o in overrides {
            apply_override(&mut table, o, &cx)?;
        }
        // Errors from a table name the dotted key instead of a line.
        table.try_into().map_err(|e: toml::de::Error| {
            cx.parse(format!(
                "{} (after --set overrides)",
                e.to_string().trim_end().replace('\n', " ")
            ))
        })?
    };
    resolve(raw, &cx)
}

/// Applies one `--set dotted.key=value`: the value is parsed as a TOML value (`128`, `[1, 2]`,
/// `inf`, `true`, `{ dist = "fixed", value = 5 }`), or taken as a plain string if that fails
/// (`model.preset=Llama-3.1-8B`). Missing intermediate tables are created.
fn apply_override(table: &mut toml::Table, set: &str, cx: &Cx) -> Result<(), ScenarioError> {
    let bad = |reason: String| cx.invalid("--set", quote(set), reason);
    let Some((key, value)) = set.split_once('=') else {
        return Err(bad(
            "expected KEY=VALUE, e.g. engine.max_num_seqs=128".into()
        ));
    };
    let parts: Vec<&str> = key.trim().split('.').map(str::trim).collect();
    if parts.iter().any(|p| p.is_empty()) {
        return Err(bad(format!(
            "`{}` is not a dotted key like engine.max_num_seqs",
            key.trim()
        )));
    }
    let value_text = value.trim();
    let value = value_text
        .parse::<toml::Value>()
        .unwrap_or_else(|_| toml::Value::String(value_text.to_string()));
    let (last, path) = parts.split_last().expect("split yields at least one part");
    let mut current = table;
    for (i, part) in path.iter().enumerate() {
        let entry = current
            .entry(part.to_string())
            .or_insert_with(|| toml::Value::Table(toml::Table::new()));
        match entry {
            toml::Value::Table(inner) => current = inner,
            _ => return Err(bad(format!("`{}` is not a table", parts[..=i].join(".")))),
        }
    }
    current.insert(last.to_string(), value);
    Ok(())
}

/// Error context: the scenario file.
struct Cx {
    file: PathBuf,
}

impl Cx {
    fn invalid(
        &self,
        field: &str,
        value: impl Display,
        reason: impl Into<String>,
    ) -> ScenarioError {
        ScenarioError::Invalid {
            file: self.file.clone(),
            field: field.to_string(),
            value: value.to_string(),
            reason: reason.into(),
        }
    }

    fn parse(&self, message: String) -> ScenarioError {
        ScenarioError::Parse {
            file: self.file.clone(),
            message: message.trim_end().to_string(),
        }
    }

    /// Paths in the scenario (HF config, traces) are relative to the scenario file's folder.
    fn relative(&self, p: &str) -> PathBuf {
        match self.file.parent() {
            Some(dir) => dir.join(p),
            None => PathBuf::from(p),
        }
    }
}

fn quote(s: &str) -> String {
    format!("{s:?}")
}

fn gib(bytes: f64) -> String {
    format!("{:.2} GiB", bytes / GIB)
}

// ---- the whole scenario -------------------------------------------------------------------------

fn resolve(raw: RawScenario, cx: &Cx) -> Result<Scenario, ScenarioError> {
    let name = raw.name.clone().unwrap_or_else(|| {
        cx.file
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "scenario".into())
    });
    let model = resolve_model(&raw.model, cx)?;
    let gpu = resolve_gpu(&raw.hardware, cx)?;
    let mut engine = resolve_engine(&raw.engine, &model, cx)?;
    let count = resolve_count(&raw.hardware, &engine, cx)?;
    size_memory(&raw.engine, &model, &gpu, &mut engine, cx)?;
    let cost = resolve_cost(&raw.cost, cx)?;
    let workload = resolve_workload(&raw.workload, &engine, cx)?;
    let validation = raw.validation.as_ref().map(|v| resolve_validation(v, &workload, cx)).transpose()?;
    Ok(Scenario {
        path: cx.file.clone(),
        name,
        model,
        hardware: Hardware { gpu, count },
        engine,
        cost,
        workload,
        validation,
    })
}

// ---- [validation] -------------------------------------------------------------------------------

fn resolve_validation(raw: &RawValidation, workload: &WorkloadConfig, cx: &Cx) -> Result<ValidationSpec, ScenarioError> {
    if raw.blocks.len() != workload.num_prompts.len() || raw.blocks.contains(&0) {
        return Err(cx.invalid(
            "validation.blocks",
            format!("{:?}", raw.blocks),
            format!(
                "needs one 1-based block index per workload.num_prompts value ({} of them)",
                workload.num_prompts.len()
            ),
        ));
    }
    let fit_blocks = raw.fit_blocks.clone().unwrap_or_default();
    if let Some(b) = fit_blocks.iter().find(|b| !raw.blocks.contains(b)) {
        return Err(cx.invalid("validation.fit_blocks", b, "is not one of validation.blocks"));
    }
    let metrics = match &raw.metrics {
        Some(list) if list.is_empty() => {
            return Err(cx.invalid("validation.metrics", "[]", "name at least one metric"));
        }
        Some(list) => list.clone(),
        None => DEFAULT_VALIDATION_METRICS.iter().map(|m| m.to_string()).collect(),
    };
    Ok(ValidationSpec { recorded: cx.relative(&raw.recorded), blocks: raw.blocks.clone(), metrics, fit_blocks })
}

// ---- [model] ------------------------------------------------------------------------------------

fn parse_dtype(field: &str, text: &str, cx: &Cx) -> Result<Dtype, ScenarioError> {
    Dtype::parse(text).ok_or_else(|| {
        cx.invalid(
            field,
            quote(text),
            format!("unknown dtype; known: {}", Dtype::NAMES.join(", ")),
        )
    })
}

fn resolve_model(raw: &RawModel, cx: &Cx) -> Result<ModelSpec, ScenarioError> {
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

// ---- [hardware] ---------------------------------------------------------------------------------

fn resolve_gpu(raw: &RawHardware, cx: &Cx) -> Result<GpuSpec, ScenarioError> {
    let base = match &raw.gpu {
        Some(g) => Some(GpuSpec::preset(g).ok_or_else(|| {
            cx.invalid(
                "hardware.gpu",
                quote(g),
                format!(
                    "unknown GPU preset; known: {} (or leave out `gpu` and give name, peak_tflops_16bit, \
                     memory_gib, memory_bandwidth_gbps and interconnect_gbps)",
                    GpuSpec::preset_names().join(", ")
                ),
            )
        })?),
        None => None,
    };
    let b = base.as_ref();
    let missing = |field: &str| {
        cx.invalid(
            &format!("hardware.{field}"),
            "(missing)",
            "required when hardware.gpu (a preset) is not given",
        )
    };
    // A positive, finite figure in the file's unit, scaled to SI units.
    let figure = |field: &str,
                  v: Option<f64>,
                  scale: f64,
                  from_base: Option<f64>|
     -> Result<f64, ScenarioError> {
        match v {
            Some(x) if x.is_finite() && x > 0.0 => Ok(x * scale),
            Some(x) => Err(cx.invalid(
                &format!("hardware.{field}"),
                x,
                "must be a positive, finite number",
            )),
            None => from_base.ok_or_else(|| missing(field)),
        }
    };
    let name = match (&raw.name, b) {
        (Some(n), _) => n.clone(),
        (None, Some(g)) => g.name.clone(),
        (None, None) => return Err(missing("name")),
    };
    let peak_flops_16bit = figure(
        "peak_tflops_16bit",
        raw.peak_tflops_16bit,
        1e12,
        b.map(|g| g.peak_flops_16bit),
    )?;
    // FP8 is optional even for an explicit GPU: absent or 0 means no FP8 tensor cores (FP8 then
    // runs at the 16-bit rate, no error).
    let peak_flops_fp8 = match raw.peak_tflops_fp8 {
        Some(0.0) => None,
        Some(x) if x.is_finite() && x > 0.0 => Some(x * 1e12),
        Some(x) => {
            return Err(cx.invalid(
                "hardware.peak_tflops_fp8",
                x,
                "must be a positive, finite number (0 = no FP8)",
            ));
        }
        None => b.and_then(|g| g.peak_flops_fp8),
    };
    let memory_bytes = figure(
        "memory_gib",
        raw.memory_gib,
        GIB,
        b.map(|g| g.memory_bytes as f64),
    )?
    .round() as u64;
    let memory_bandwidth_bytes_per_s = figure(
        "memory_bandwidth_gbps",
        raw.memory_bandwidth_gbps,
        1e9,
        b.map(|g| g.memory_bandwidth_bytes_per_s),
    )?;
    let interconnect_bandwidth_bytes_per_s = figure(
        "interconnect_gbps",
        raw.interconnect_gbps,
        1e9,
        b.map(|g| g.interconnect_bandwidth_bytes_per_s),
    )?;
    Ok(GpuSpec {
        name,
        peak_flops_16bit,
        peak_flops_fp8,
        memory_bytes,
        memory_bandwidth_bytes_per_s,
        interconnect_bandwidth_bytes_per_s,
    })
}

fn resolve_count(raw: &RawHardware, engine: &EngineConfig, cx: &Cx) -> Result<u32, ScenarioError> {
    let needed = engine.tensor_parallel as u64 * engine.replicas as u64;
    let needed_u32 = u32::try_from(needed).map_err(|_| {
        cx.invalid(
            "engine.replicas",
            engine.replicas,
            "tensor_parallel × replicas is too large",
        )
    })?;
    match raw.count {
        None => Ok(needed_u32),
        Some(c) if (c as u64) < needed => Err(cx.invalid(
            "hardware.count",
            c,
            format!(
                "fewer than tensor_parallel × replicas = {} × {} = {needed} GPUs",
                engine.tensor_parallel, engine.replicas
            ),
        )),
        Some(c) => Ok(c),
    }
}

// ---- [engine] -----------------------------------------------------------------------------------

fn resolve_engine(
    raw: &RawEngine,
    model: &ModelSpec,
    cx: &Cx,
) -> Result<EngineConfig, ScenarioError> {
    let policy = match raw.policy.as_deref() {
        None => Policy::VllmV1,
        Some(p) => match p.trim().to_ascii_lowercase().replace('_', "-").as_str() {
            "vllm-v1" => Policy::VllmV1,
            "vllm-v0" => Policy::VllmV0,
            "tgi" => Policy::Tgi,
            "servesim" => Policy::Servesim,
            _ => {
                return Err(cx.invalid(
                    "engine.policy",
                    quote(p),
                    "unknown policy; known: vllm-v1, vllm-v0, tgi, servesim",
                ));
            }
        },
    };
    let router = match raw.router.as_deref() {
        None => Router::RoundRobin,
        Some(r) => match r.trim().to_ascii_lowercase().replace('_', "-").as_str() {
            "round-robin" => Router::RoundRobin,
            "least-outstanding" | "least-outstanding-requests" => Router::LeastOutstanding,
            _ => {
                return Err(cx.invalid(
                    "engine.router",
                    quote(r),
                    "unknown router; known: round-robin, least-outstanding",
                ));
            }
        },
    };
    let positive = |field: &str, v: Option<u32>, default: u32| -> Result<u32, ScenarioError> {
        match v {
            Some(0) => Err(cx.invalid(&format!("engine.{field}"), 0, "must be at least 1")),
            Some(x) => Ok(x),
            None => Ok(default),
        }
    };

    let tp = positive("tensor_parallel", raw.tensor_parallel, 1)?;
    check_tp(model, tp).map_err(|reason| cx.invalid("engine.tensor_parallel", tp, reason))?;
    let replicas = positive("replicas", raw.replicas, 1)?;
    let block_size = positive("block_size", raw.block_size, DEFAULT_BLOCK_SIZE)?;
    reject_other_policy_fields(raw, policy, cx)?;
    if policy == Policy::Tgi {
        let common = EngineConfig {
            policy,
            tensor_parallel: tp,
            replicas,
            router,
            block_size,
            // The rest is TGI's, filled in by `resolve_tgi` and `size_memory`.
            max_num_batched_tokens: 0,
            max_num_seqs: 0,
            enable_chunked_prefill: false,
            gpu_memory_utilization: 0.0,
            max_model_len: 0,
            num_gpu_blocks: 0,
            watermark: 0.0,
            activation_reserve_bytes: 0,
            tgi: None,
        };
        return resolve_tgi(raw, model, common, cx);
    }
    let max_num_seqs = positive("max_num_seqs", raw.max_num_seqs, DEFAULT_MAX_NUM_SEQS)?;
    let max_model_len = positive(
        "max_model_len",
        raw.max_model_len,
        model.max_position_embeddings,
    )?;
    if max_model_len > model.max_position_embeddings {
        return Err(cx.invalid(
            "engine.max_model_len",
            max_model_len,
            format!(
                "exceeds the model's max_position_embeddings ({}); vLLM refuses this unless \
                 VLLM_ALLOW_LONG_MAX_MODEL_LEN is set",
                model.max_position_embeddings
            ),
        ));
    }
    let gpu_memory_utilization = raw
        .gpu_memory_utilization
        .unwrap_or(DEFAULT_GPU_MEMORY_UTILIZATION);
    if !(gpu_memory_utilization > 0.0 && gpu_memory_utilization <= 1.0) {
        return Err(cx.invalid(
            "engine.gpu_memory_utilization",
            gpu_memory_utilization,
            "must be in (0, 1]",
        ));
    }

    let (enable_chunked_prefill, default_budget, default_watermark) = match policy {
        Policy::VllmV1 | Policy::Servesim => {
            if raw.enable_chunked_prefill == Some(false) {
                return Err(cx.invalid(
                    "engine.enable_chunked_prefill",
                    false,
                    "the vLLM V1 scheduler always chunks prefills (vLLM 0.8 falls back to the V0 engine \
                     when it is disabled); use policy = \"vllm-v0\" to model that",
                ));
            }
            (true, V1_MAX_NUM_BATCHED_TOKENS, V1_WATERMARK)
        }
        Policy::VllmV0 => {
            let chunked = raw
                .enable_chunked_prefill
                .unwrap_or(max_model_len > V0_LONG_CONTEXT_THRESHOLD);
            let budget = if chunked {
                V0_CHUNKED_MAX_NUM_BATCHED_TOKENS
            } else {
                max_model_len.max(V0_MIN_MAX_NUM_BATCHED_TOKENS)
            };
            (chunked, budget, V0_WATERMARK)
        }
        Policy::Tgi => unreachable!("resolved by resolve_tgi"),
    };
    let max_num_batched_tokens = positive(
        "max_num_batched_tokens",
        raw.max_num_batched_tokens,
        default_budget,
    )?;
    if !enable_chunked_prefill && max_num_batched_tokens < max_model_len {
        // vLLM's SchedulerConfig check, in its words.
        return Err(cx.invalid(
            "engine.max_num_batched_tokens",
            max_num_batched_tokens,
            format!(
                "smaller than max_model_len ({max_model_len}) with chunked prefill off: this would limit the \
                 maximum sequence length to max_num_batched_tokens; increase max_num_batched_tokens, decrease \
                 max_model_len or enable chunked prefill"
            ),
        ));
    }
    if max_num_batched_tokens < max_num_seqs {
        // Also vLLM's SchedulerConfig check.
        return Err(cx.invalid(
            "engine.max_num_batched_tokens",
            max_num_batched_tokens,
            format!("must be at least max_num_seqs ({max_num_seqs})"),
        ));
    }
    let watermark = raw.watermark.unwrap_or(default_watermark);
    if !(0.0..1.0).contains(&watermark) {
        return Err(cx.invalid("engine.watermark", watermark, "must be in [0, 1)"));
    }

    Ok(EngineConfig {
        policy,
        tensor_parallel: tp,
        replicas,
        router,
        max_num_batched_tokens,
        max_num_seqs,
        enable_chunked_prefill,
        block_size,
        gpu_memory_utilization,
        max_model_len,
        // Filled in by `size_memory`.
        num_gpu_blocks: 0,
        watermark,
        activation_reserve_bytes: 0,
        tgi: None,
    })
}

/// Engine keys that every policy takes; the others belong to one kind of engine.
const ENGINE_COMMON_FIELDS: [&str; 8] = [
    "policy",
    "tensor_parallel",
    "replicas",
    "router",
    "block_size",
    "gpu_memory_utilization",
    "num_gpu_blocks",
    "activation_reserve_gib",
];
const ENGINE_VLLM_FIELDS: [&str; 5] =
    ["max_num_batched_tokens", "max_num_seqs", "enable_chunked_prefill", "max_model_len", "watermark"];
const ENGINE_TGI_FIELDS: [&str; 7] = [
    "max_input_tokens",
    "max_total_tokens",
    "max_batch_prefill_tokens",
    "max_batch_total_tokens",
    "waiting_served_ratio",
    "max_waiting_tokens",
    "max_concurrent_requests",
];

/// vLLM's keys with policy "tgi", or TGI's with a vLLM policy, are errors: each engine has its
/// own names for its limits, and a key the chosen engine does not read would be silently ignored.
fn reject_other_policy_fields(raw: &RawEngine, policy: Policy, cx: &Cx) -> Result<(), ScenarioError> {
    let show = |v: Option<u32>| v.map(|v| v.to_string());
    let present: [(&str, Option<String>); 12] = [
        ("max_num_batched_tokens", show(raw.max_num_batched_tokens)),
        ("max_num_seqs", show(raw.max_num_seqs)),
        ("enable_chunked_prefill", raw.enable_chunked_prefill.map(|v| v.to_string())),
        ("max_model_len", show(raw.max_model_len)),
        ("watermark", raw.watermark.map(|v| v.to_string())),
        ("max_input_tokens", show(raw.max_input_tokens)),
        ("max_total_tokens", show(raw.max_total_tokens)),
        ("max_batch_prefill_tokens", show(raw.max_batch_prefill_tokens)),
        ("max_batch_total_tokens", show(raw.max_batch_total_tokens)),
        ("waiting_served_ratio", raw.waiting_served_ratio.map(|v| v.to_string())),
        ("max_waiting_tokens", show(raw.max_waiting_tokens)),
        ("max_concurrent_requests", show(raw.max_concurrent_requests)),
    ];
    let own: &[&str] = match policy {
        Policy::VllmV1 | Policy::VllmV0 | Policy::Servesim => &ENGINE_VLLM_FIELDS,
        Policy::Tgi => &ENGINE_TGI_FIELDS,
    };
    let allowed: Vec<&str> = ENGINE_COMMON_FIELDS.iter().chain(own).copied().collect();
    reject_unused_fields(cx, "engine", &present, &allowed, &format!("policy {:?}", policy.name()))
}

/// `[engine]` for policy "tgi": TGI 2.3's launcher defaults and start-up checks. The KV capacity
/// (`max_batch_total_tokens`) comes later, from `size_memory`, as TGI measures it at warm-up.
fn resolve_tgi(
    raw: &RawEngine,
    model: &ModelSpec,
    mut engine: EngineConfig,
    cx: &Cx,
) -> Result<EngineConfig, ScenarioError> {
    let positive = |field: &str, v: Option<u32>, default: u32| -> Result<u32, ScenarioError> {
        match v {
            Some(0) => Err(cx.invalid(&format!("engine.{field}"), 0, "must be at least 1")),
            Some(x) => Ok(x),
            None => Ok(default),
        }
    };
    let positions = model.max_position_embeddings.min(TGI_MAX_POSITIONS_DEFAULT);
    let max_total_tokens = positive("max_total_tokens", raw.max_total_tokens, positions)?;
    let max_input_tokens = positive("max_input_tokens", raw.max_input_tokens, positions.saturating_sub(1))?;
    if max_input_tokens == 0 {
        return Err(cx.invalid(
            "model.max_position_embeddings",
            model.max_position_embeddings,
            "leaves TGI's default max_input_tokens (max_position_embeddings − 1) at 0; set engine.max_input_tokens",
        ));
    }
    if max_input_tokens >= max_total_tokens {
        // TGI's launcher: "`max_input_tokens` must be < `max_total_tokens`". Blame the key given.
        let (field, value) = if raw.max_input_tokens.is_some() || raw.max_total_tokens.is_none() {
            ("engine.max_input_tokens", max_input_tokens)
        } else {
            ("engine.max_total_tokens", max_total_tokens)
        };
        return Err(cx.invalid(
            field,
            value,
            format!(
                "max_input_tokens ({max_input_tokens}) must be < max_total_tokens ({max_total_tokens}), as TGI's \
                 launcher requires (defaults: max_position_embeddings capped at {TGI_MAX_POSITIONS_DEFAULT}, minus 1 \
                 for max_input_tokens)"
            ),
        ));
    }
    let max_batch_prefill_tokens = positive(
        "max_batch_prefill_tokens",
        raw.max_batch_prefill_tokens,
        max_input_tokens.saturating_add(TGI_PREFILL_MARGIN_TOKENS),
    )?;
    if max_batch_prefill_tokens < max_input_tokens {
        return Err(cx.invalid(
            "engine.max_batch_prefill_tokens",
            max_batch_prefill_tokens,
            format!("must be >= max_input_tokens ({max_input_tokens}), as TGI's launcher requires"),
        ));
    }
    if let Some(total) = raw.max_batch_total_tokens {
        let field = "engine.max_batch_total_tokens";
        if raw.num_gpu_blocks.is_some() {
            return Err(cx.invalid(
                field,
                total,
                "pins the KV capacity, as engine.num_gpu_blocks does; give one of them",
            ));
        }
        if total == 0 || !total.is_multiple_of(engine.block_size) {
            return Err(cx.invalid(
                field,
                total,
                format!("must be a positive multiple of block_size ({}): TGI's KV cache is whole blocks", engine.block_size),
            ));
        }
        // TGI's launcher checks these two when the flag is given.
        if total < max_batch_prefill_tokens {
            return Err(cx.invalid(
                field,
                total,
                format!("must be >= max_batch_prefill_tokens ({max_batch_prefill_tokens}), as TGI's launcher requires"),
            ));
        }
        if total < max_total_tokens {
            return Err(cx.invalid(
                field,
                total,
                format!("must be >= max_total_tokens ({max_total_tokens}), as TGI's launcher requires"),
            ));
        }
    }
    let waiting_served_ratio = raw.waiting_served_ratio.unwrap_or(TGI_WAITING_SERVED_RATIO);
    if !(waiting_served_ratio >= 0.0 && (waiting_served_ratio as f32).is_finite()) {
        return Err(cx.invalid(
            "engine.waiting_served_ratio",
            waiting_served_ratio,
            "must be a finite number ≥ 0 (waiting requests needed per running request to start a prefill)",
        ));
    }
    let max_concurrent_requests =
        positive("max_concurrent_requests", raw.max_concurrent_requests, TGI_MAX_CONCURRENT_REQUESTS)?;
    let gpu_memory_utilization = raw.gpu_memory_utilization.unwrap_or(TGI_MEMORY_FRACTION);
    if !(gpu_memory_utilization > 0.0 && gpu_memory_utilization <= 1.0) {
        return Err(cx.invalid(
            "engine.gpu_memory_utilization",
            gpu_memory_utilization,
            "must be in (0, 1] (TGI's CUDA_MEMORY_FRACTION)",
        ));
    }
    let tgi = TgiConfig {
        max_input_tokens,
        max_total_tokens,
        max_batch_prefill_tokens,
        // Measured (or pinned) by `size_memory`.
        max_batch_total_tokens: raw.max_batch_total_tokens.unwrap_or(0),
        waiting_served_ratio: waiting_served_ratio as f32,
        max_waiting_tokens: raw.max_waiting_tokens.unwrap_or(TGI_MAX_WAITING_TOKENS),
        max_concurrent_requests,
    };
    // The scheduler's generic knobs, made to say what TGI does: the token budget is the
    // prefill budget, there is no cap on the batch, no chunking and no watermark.
    engine.max_num_batched_tokens = tgi.prefill_budget_tokens(engine.block_size);
    engine.max_num_seqs = u32::MAX;
    engine.enable_chunked_prefill = false;
    engine.gpu_memory_utilization = gpu_memory_utilization;
    engine.max_model_len = max_total_tokens;
    engine.watermark = 0.0;
    engine.tgi = Some(tgi);
    Ok(engine)
}

/// vLLM's sharding rules: TP divides the query heads; the KV heads are either split evenly
/// (`kv % tp == 0`) or replicated (`tp % kv == 0`).
fn check_tp(model: &ModelSpec, tp: u32) -> Result<(), String> {
    if !model.num_heads.is_multiple_of(tp) {
        return Err(format!("must divide model.num_heads ({})", model.num_heads));
    }
    let kv = model.num_kv_heads;
    if (tp >= kv && !tp.is_multiple_of(kv)) || (tp < kv && !kv.is_multiple_of(tp)) {
        return Err(format!(
            "model.num_kv_heads ({kv}) must be divisible by tensor_parallel or divide it"
        ));
    }
    Ok(())
}

/// Weights fit check, activation reserve and KV blocks, as the engine computes them at start-up:
/// `floor((memory × utilization − weights − activation reserve) / (block_size × KV bytes per token))`
/// per GPU (every GPU of a replica holds the same share, so the minimum over them is this).
fn size_memory(
    raw: &RawEngine,
    model: &ModelSpec,
    gpu: &GpuSpec,
    engine: &mut EngineConfig,
    cx: &Cx,
) -> Result<(), ScenarioError> {
    let tp = engine.tensor_parallel;
    let usable = gpu.memory_bytes as f64 * engine.gpu_memory_utilization;
    let weights = model.weight_bytes_per_gpu(tp) as f64;
    if weights > usable {
        let why = format!(
            "model weights need {} per GPU but only {} usable (memory {} × utilization {}); short by {}",
            gib(weights),
            gib(usable),
            gib(gpu.memory_bytes as f64),
            engine.gpu_memory_utilization,
            gib(weights - usable)
        );
        // Suggest the smallest larger tensor-parallel degree that fits, if there is one.
        let fits = (tp + 1..=model.num_heads).find(|&t| {
            check_tp(model, t).is_ok() && model.weight_bytes_per_gpu(t) as f64 <= usable
        });
        return Err(match fits {
            Some(t) => cx.invalid(
                "engine.tensor_parallel",
                tp,
                format!("{why}; tensor_parallel = {t} would fit"),
            ),
            None => cx.invalid(
                "hardware",
                quote(&gpu.name),
                format!("{why}; no tensor_parallel fits on this GPU"),
            ),
        });
    }

    if engine.tgi.is_some() {
        return size_tgi_memory(raw, model, usable, weights, engine, cx);
    }

    let activation_reserve_bytes = match raw.activation_reserve_gib {
        Some(g) if g.is_finite() && g >= 0.0 => (g * GIB).round() as u64,
        Some(g) => {
            return Err(cx.invalid(
                "engine.activation_reserve_gib",
                g,
                "must be a finite number ≥ 0",
            ));
        }
        None => {
            model.profile_activation_bytes_per_gpu(
                tp,
                engine.max_num_batched_tokens,
                engine.max_num_seqs,
            ) + RUNTIME_RESERVE_BYTES
        }
    };
    engine.activation_reserve_bytes = activation_reserve_bytes;

    let block_bytes = engine.block_size as u64 * model.kv_bytes_per_token_per_gpu(tp);
    engine.num_gpu_blocks = match raw.num_gpu_blocks {
        Some(0) => return Err(cx.invalid("engine.num_gpu_blocks", 0, "must be at least 1")),
        Some(n) => n,
        None => {
            let left = usable - weights - activation_reserve_bytes as f64;
            let blocks = if left > 0.0 {
                (left / block_bytes as f64).floor()
            } else {
                0.0
            };
            if blocks < 1.0 {
                // vLLM: "No available memory for the cache blocks. Try increasing
                // `gpu_memory_utilization` when initializing the engine."
                return Err(cx.invalid(
                    "engine.gpu_memory_utilization",
                    engine.gpu_memory_utilization,
                    format!(
                        "no memory left for the KV cache: usable {} − weights {} − activation reserve {} = {} \
                         per GPU, less than one block ({} B)",
                        gib(usable),
                        gib(weights),
                        gib(activation_reserve_bytes as f64),
                        gib(left),
                        block_bytes
                    ),
                ));
            }
            blocks.min(u32::MAX as f64) as u32
        }
    };
    let kv_tokens = engine.num_gpu_blocks as u64 * engine.block_size as u64;
    if kv_tokens < engine.max_model_len as u64 {
        return Err(cx.invalid(
            "engine.max_model_len",
            engine.max_model_len,
            format!(
                "the KV cache holds only {kv_tokens} tokens per replica ({} blocks × {}), fewer than one \
                 max_model_len sequence; lower max_model_len to at most {kv_tokens} or give the KV cache more \
                 memory",
                engine.num_gpu_blocks, engine.block_size
            ),
        ));
    }
    Ok(())
}

/// TGI's warm-up (`FlashCausalLM.warmup`, after the router's `warmup` request): a prefill of
/// `max_batch_prefill_tokens` tokens in requests of at most `max_input_tokens`, each with
/// `max_new_tokens` = `max_total_tokens` − its prompt, so each holds the KV blocks of
/// `max_total_tokens` − 1 tokens. Then, with that batch's blocks and the forward's activation peak
/// still allocated, KV blocks = ⌊0.95 × free memory / block bytes⌋ + the warm-up batch's blocks,
/// and `max_batch_total_tokens` = blocks × block size. `CUDA_MEMORY_FRACTION` (our
/// `gpu_memory_utilization`) bounds the memory it may use. The router then refuses to start if
/// `max_total_tokens` exceeds it.
fn size_tgi_memory(
    raw: &RawEngine,
    model: &ModelSpec,
    usable: f64,
    weights: f64,
    engine: &mut EngineConfig,
    cx: &Cx,
) -> Result<(), ScenarioError> {
    let mut tgi = engine.tgi.expect("policy tgi");
    let tp = engine.tensor_parallel;
    let block_size = engine.block_size as u64;
    let block_bytes = block_size * model.kv_bytes_per_token_per_gpu(tp);
    let prefill_tokens = tgi.max_batch_prefill_tokens as u64;
    let warmup_requests = prefill_tokens.div_ceil(tgi.max_input_tokens as u64);
    let warmup_blocks = warmup_requests * (tgi.max_total_tokens as u64 - 1).div_ceil(block_size);

    engine.activation_reserve_bytes = match raw.activation_reserve_gib {
        Some(g) if g.is_finite() && g >= 0.0 => (g * GIB).round() as u64,
        Some(g) => {
            return Err(cx.invalid("engine.activation_reserve_gib", g, "must be a finite number ≥ 0"));
        }
        None => {
            // Per-token activations of the warm-up prefill (no sampled rows: its logits follow).
            let per_token = model.profile_activation_bytes_per_gpu(tp, tgi.max_batch_prefill_tokens, 0);
            let act_bytes = if model.weight_dtype == Dtype::Fp32 { 4 } else { 2 };
            let logits = TGI_WARMUP_LOGITS_COPIES * prefill_tokens * model.vocab_size as u64 * act_bytes;
            per_token + logits + RUNTIME_RESERVE_BYTES
        }
    };

    let blocks: u64 = match (raw.num_gpu_blocks, raw.max_batch_total_tokens) {
        (Some(0), _) => return Err(cx.invalid("engine.num_gpu_blocks", 0, "must be at least 1")),
        (Some(n), _) => n as u64,
        (None, Some(total)) => total as u64 / block_size,
        (None, None) => {
            let warmup_kv_bytes = (warmup_blocks * block_bytes) as f64;
            let free = usable - weights - engine.activation_reserve_bytes as f64 - warmup_kv_bytes;
            if free < 0.0 {
                // TGI: "Not enough memory to handle {n} prefill tokens. You need to decrease
                // `--max-batch-prefill-tokens`".
                return Err(cx.invalid(
                    "engine.max_batch_prefill_tokens",
                    tgi.max_batch_prefill_tokens,
                    format!(
                        "TGI's warm-up runs out of memory: usable {} − weights {} − activations {} − the warm-up \
                         batch's KV ({warmup_blocks} blocks, {}) = {} per GPU; decrease max_batch_prefill_tokens or \
                         max_total_tokens",
                        gib(usable),
                        gib(weights),
                        gib(engine.activation_reserve_bytes as f64),
                        gib(warmup_kv_bytes),
                        gib(free)
                    ),
                ));
            }
            (free * TGI_WIGGLE_ROOM / block_bytes as f64).floor() as u64 + warmup_blocks
        }
    };
    engine.num_gpu_blocks = blocks.min(u32::MAX as u64 / block_size) as u32;
    let kv_tokens = engine.num_gpu_blocks as u64 * block_size;
    tgi.max_batch_total_tokens = raw.max_batch_total_tokens.unwrap_or(kv_tokens as u32);
    if tgi.max_total_tokens > tgi.max_batch_total_tokens {
        // TGI's router: "Not enough memory to handle `max_total_tokens={max_total_tokens}`".
        return Err(cx.invalid(
            "engine.max_total_tokens",
            tgi.max_total_tokens,
            format!(
                "more than the KV cache holds ({} tokens: {} blocks × {block_size}), so TGI refuses to start \
                 (\"Not enough memory to handle max_total_tokens\"); lower max_total_tokens or give the KV cache \
                 more memory",
                tgi.max_batch_total_tokens, engine.num_gpu_blocks
            ),
        ));
    }
    debug_assert_eq!(tgi.check(engine.block_size, engine.num_gpu_blocks), Ok(()));
    engine.tgi = Some(tgi);
    Ok(())
}

// ---- [cost] -------------------------------------------------------------------------------------

/// `[cost]`: defaults, replaced by a fitted profile's values if one is named, then overridden
/// by the keys given in the scenario.
fn resolve_cost(raw: &RawCost, cx: &Cx) -> Result<CostParams, ScenarioError> {
    // An empty path (`--set cost.profile=`) means no profile: how a profile is fitted afresh
    // from scenarios that normally load it.
    let base = match raw.get("profile") {
        None => DEFAULT_COST,
        Some(toml::Value::String(path)) if path.is_empty() => DEFAULT_COST,
        Some(toml::Value::String(path)) => load_profile(&cx.relative(path))?,
        Some(other) => return Err(cx.invalid("cost.profile", other, "must be the path of a profile (a string)")),
    };
    resolve_cost_over(raw, base, cx)
}

/// Reads a profile written by `servesim fit`; errors name the profile file.
fn load_profile(path: &Path) -> Result<CostParams, ScenarioError> {
    let cx = Cx { file: path.to_path_buf() };
    let text = std::fs::read_to_string(path).map_err(|source| ScenarioError::Io { file: path.to_path_buf(), source })?;
    let profile: RawProfile = toml::from_str(&text).map_err(|e| cx.parse(e.to_string()))?;
    if let Some(nested) = profile.cost.get("profile") {
        return Err(cx.invalid("cost.profile", nested, "a profile cannot name another profile"));
    }
    resolve_cost_over(&profile.cost, DEFAULT_COST, &cx)
}

/// `base` with every named parameter of `raw` set, each checked against the registry's range.
fn resolve_cost_over(raw: &RawCost, base: CostParams, cx: &Cx) -> Result<CostParams, ScenarioError> {
    let mut params = base;
    for (key, value) in raw.iter().filter(|(key, _)| key.as_str() != "profile") {
        let field = format!("cost.{key}");
        let spec = cost_params::find(key).ok_or_else(|| {
            cx.invalid(&field, value, format!("unknown cost parameter; known: profile, {}", cost_params::known_names()))
        })?;
        let number = value.as_float().or_else(|| value.as_integer().map(|i| i as f64));
        let number = number.ok_or_else(|| cx.invalid(&field, value, "must be a number"))?;
        spec.kind.check(number).map_err(|reason| cx.invalid(&field, number, reason))?;
        spec.set(&mut params, number);
    }
    Ok(params)
}

// ---- [workload] ---------------------------------------------------------------------------------

fn resolve_workload(
    raw: &RawWorkload,
    engine: &EngineConfig,
    cx: &Cx,
) -> Result<WorkloadConfig, ScenarioError> {
    let dataset = resolve_dataset(&raw.dataset, engine.max_model_len, cx)?;
    let trace_rows = match &dataset {
        Dataset::Trace { rows, .. } => Some(rows.len()),
        _ => None,
    };

    let num_prompts = match &raw.num_prompts {
        None => vec![trace_rows.map_or(DEFAULT_NUM_PROMPTS, |n| n.min(u32::MAX as usize) as u32)],
        Some(NumPrompts(list)) => {
            let shown = || format!("{list:?}");
            if list.is_empty() {
                return Err(cx.invalid(
                    "workload.num_prompts",
                    shown(),
                    "must hold at least one value",
                ));
            }
            let mut out = Vec::with_capacity(list.len());
            for &n in list {
                if n < 1 || n > u32::MAX as i64 {
                    let value = if list.len() == 1 {
                        n.to_string()
                    } else {
                        shown()
                    };
                    return Err(cx.invalid(
                        "workload.num_prompts",
                        value,
                        format!("{n} is not a positive count"),
                    ));
                }
                if let Some(rows) = trace_rows
                    && n as usize > rows
                {
                    return Err(cx.invalid(
                        "workload.num_prompts",
                        n,
                        format!("the trace has only {rows} rows"),
                    ));
                }
                out.push(n as u32);
            }
            out
        }
    };

    let request_rate = match &raw.request_rate {
        None => f64::INFINITY,
        Some(RequestRate::Number(r)) => *r,
        Some(RequestRate::Text(t)) => {
            let lower = t.trim().to_ascii_lowercase();
            if lower == "inf" || lower == "infinity" {
                f64::INFINITY
            } else {
                lower.parse::<f64>().map_err(|_| {
                    cx.invalid(
                        "workload.request_rate",
                        quote(t),
                        "expected requests per second or \"inf\"",
                    )
                })?
            }
        }
    };
    if request_rate.is_nan() || request_rate <= 0.0 {
        return Err(cx.invalid(
            "workload.request_rate",
            request_rate,
            "must be a positive number of requests per second, or inf",
        ));
    }
    let burstiness = raw.burstiness.unwrap_or(1.0);
    if !(burstiness > 0.0 && burstiness.is_finite()) {
        return Err(cx.invalid(
            "workload.burstiness",
            burstiness,
            "must be a positive, finite gamma shape",
        ));
    }
    if raw.max_concurrency == Some(0) {
        return Err(cx.invalid(
            "workload.max_concurrency",
            0,
            "must be at least 1 (leave it out for no limit)",
        ));
    }
    let output_max = dataset.max_tokens().unwrap_or(u32::MAX);
    let input_tokens_total =
        resolve_totals("workload.input_tokens_total", &raw.input_tokens_total, &num_prompts, u32::MAX, cx)?;
    let output_tokens_total =
        resolve_totals("workload.output_tokens_total", &raw.output_tokens_total, &num_prompts, output_max, cx)?;
    Ok(WorkloadConfig {
        num_prompts,
        request_rate,
        burstiness,
        max_concurrency: raw.max_concurrency,
        dataset,
        seed: raw.seed.unwrap_or(0),
        input_tokens_total,
        output_tokens_total,
    })
}

/// Token totals per sweep point: one per `num_prompts` value, each reachable with lengths in
/// `1..=max_per_request`.
fn resolve_totals(
    field: &str,
    raw: &Option<Vec<u64>>,
    num_prompts: &[u32],
    max_per_request: u32,
    cx: &Cx,
) -> Result<Option<Vec<u64>>, ScenarioError> {
    let Some(list) = raw else { return Ok(None) };
    if list.len() != num_prompts.len() {
        return Err(cx.invalid(
            field,
            format!("{list:?}"),
            format!("needs one total per workload.num_prompts value ({} of them)", num_prompts.len()),
        ));
    }
    for (&total, &n) in list.iter().zip(num_prompts) {
        let most = n as u64 * max_per_request as u64;
        if total < n as u64 || total > most {
            return Err(cx.invalid(
                field,
                total,
                format!("{n} requests can only total {n}..={most} tokens"),
            ));
        }
    }
    Ok(Some(list.clone()))
}

/// A count that must be given (else `missing_reason`) and at least 1.
fn positive_count(cx: &Cx, field: &str, value: Option<u32>, missing_reason: &str) -> Result<u32, ScenarioError> {
    match value {
        Some(0) => Err(cx.invalid(field, 0, "must be at least 1")),
        Some(v) => Ok(v),
        None => Err(cx.invalid(field, "(missing)", missing_reason)),
    }
}

/// A field given that the chosen variant (`owner`) does not use is an error, not silently ignored.
fn reject_unused_fields(
    cx: &Cx,
    prefix: &str,
    present: &[(&str, Option<String>)],
    allowed: &[&str],
    owner: &str,
) -> Result<(), ScenarioError> {
    match present.iter().find(|(f, v)| v.is_some() && !allowed.contains(f)) {
        Some((f, Some(value))) => Err(cx.invalid(
            &format!("{prefix}.{f}"),
            value,
            format!("not used by {owner}, which takes: {}", allowed.join(", ")),
        )),
        _ => Ok(()),
    }
}

const KINDS: &str = "fixed, random, sonnet, sharegpt, trace";

fn resolve_dataset(
    raw: &RawDataset,
    max_model_len: u32,
    cx: &Cx,
) -> Result<Dataset, ScenarioError> {
    let kind = raw.kind.trim().to_ascii_lowercase();
    let allowed: &[&str] = match kind.as_str() {
        "fixed" => &["input_len", "output_len"],
        "random" => &["input_len", "output_len", "range_ratio", "prefix_len"],
        "sonnet" => &["input_len", "prefix_len", "output", "output_len"],
        "sharegpt" => &["input", "output"],
        "trace" => &["path"],
        _ => {
            return Err(cx.invalid(
                "workload.dataset.kind",
                quote(&raw.kind),
                format!("unknown dataset kind; known: {KINDS}"),
            ));
        }
    };
    let present: [(&str, Option<String>); 7] = [
        ("input_len", raw.input_len.map(|v| v.to_string())),
        ("output_len", raw.output_len.map(|v| v.to_string())),
        ("range_ratio", raw.range_ratio.map(|v| v.to_string())),
        ("prefix_len", raw.prefix_len.map(|v| v.to_string())),
        (
            "input",
            raw.input.as_ref().map(|_| "(a distribution)".to_string()),
        ),
        (
            "output",
            raw.output.as_ref().map(|_| "(a distribution)".to_string()),
        ),
        ("path", raw.path.as_deref().map(quote)),
    ];
    reject_unused_fields(cx, "workload.dataset", &present, allowed, &format!("dataset kind {kind:?}"))?;
    let count = |field: &str, v: Option<u32>, default: Option<u32>| {
        positive_count(
            cx,
            &format!("workload.dataset.{field}"),
            v.or(default),
            &format!("required for dataset kind {kind:?}"),
        )
    };
    // The longest request the dataset can produce must fit max_model_len: vLLM rejects a request
    // whose prompt + max_tokens exceeds it.
    let check_len = |field: &str, input_max: u64, output_max: u64| -> Result<(), ScenarioError> {
        if input_max + output_max > max_model_len as u64 {
            return Err(cx.invalid(
                &format!("workload.dataset.{field}"),
                input_max,
                format!(
                    "the longest request has input {input_max} + output {output_max} = {} tokens, more than \
                     engine.max_model_len ({max_model_len}); vLLM rejects such requests",
                    input_max + output_max
                ),
            ));
        }
        Ok(())
    };

    match kind.as_str() {
        "fixed" => {
            let input_len = count("input_len", raw.input_len, None)?;
            let output_len = count("output_len", raw.output_len, None)?;
            check_len("input_len", input_len as u64, output_len as u64)?;
            Ok(Dataset::Fixed {
                input_len,
                output_len,
            })
        }
        "random" => {
            let input_len = count("input_len", raw.input_len, Some(RANDOM_INPUT_LEN))?;
            let output_len = count("output_len", raw.output_len, Some(RANDOM_OUTPUT_LEN))?;
            let prefix_len = raw.prefix_len.unwrap_or(0);
            let range_ratio = raw.range_ratio.unwrap_or(0.0);
            if !(0.0..1.0).contains(&range_ratio) {
                return Err(cx.invalid(
                    "workload.dataset.range_ratio",
                    range_ratio,
                    "must be in [0, 1)",
                ));
            }
            // vLLM's random dataset: lengths uniform in [floor(len·(1−r)), ceil(len·(1+r))].
            let low = |len: u32| (len as f64 * (1.0 - range_ratio)).floor() as u64;
            let high = |len: u32| (len as f64 * (1.0 + range_ratio)).ceil() as u64;
            if low(output_len) < 1 || prefix_len as u64 + low(input_len) < 1 {
                return Err(cx.invalid(
                    "workload.dataset.range_ratio",
                    range_ratio,
                    "makes the shortest input or output 0 tokens; lower it or raise the lengths",
                ));
            }
            check_len(
                "input_len",
                prefix_len as u64 + high(input_len),
                high(output_len),
            )?;
            Ok(Dataset::Random {
                input_len,
                output_len,
                range_ratio,
                prefix_len,
            })
        }
        "sonnet" => {
            let input_len = count("input_len", raw.input_len, Some(SONNET_INPUT_LEN))?;
            let prefix_len = raw.prefix_len.unwrap_or(SONNET_PREFIX_LEN);
            if prefix_len > input_len {
                return Err(cx.invalid(
                    "workload.dataset.prefix_len",
                    prefix_len,
                    format!("longer than input_len ({input_len})"),
                ));
            }
            let output = match (&raw.output, raw.output_len) {
                (Some(_), Some(_)) => {
                    return Err(cx.invalid(
                        "workload.dataset.output_len",
                        raw.output_len.unwrap_or(0),
                        "give output (a distribution) or output_len (fixed), not both",
                    ));
                }
                (Some(d), None) => resolve_dist("workload.dataset.output", d, cx)?,
                (None, len) => LengthDist::Fixed {
                    value: count("output_len", len, Some(SONNET_OUTPUT_LEN))?,
                },
            };
            check_len("input_len", input_len as u64, output.max() as u64)?;
            Ok(Dataset::Sonnet {
                input_len,
                prefix_len,
                output,
            })
        }
        "sharegpt" => {
            let dist = |field: &str, d: &Option<RawLengthDist>| {
                match d {
                Some(d) => resolve_dist(&format!("workload.dataset.{field}"), d, cx),
                None => Err(cx.invalid(
                    &format!("workload.dataset.{field}"),
                    "(missing)",
                    "required for dataset kind \"sharegpt\", e.g. { dist = \"lognormal\", mean = 200, std = 150, min = 1, max = 1024 }",
                )),
            }
            };
            let input = dist("input", &raw.input)?;
            let output = dist("output", &raw.output)?;
            check_len("input.max", input.max() as u64, output.max() as u64)?;
            Ok(Dataset::ShareGpt { input, output })
        }
        "trace" => {
            let Some(p) = &raw.path else {
                return Err(cx.invalid(
                    "workload.dataset.path",
                    "(missing)",
                    "required for dataset kind \"trace\"",
                ));
            };
            let path = cx.relative(p);
            let rows = crate::workload::trace::read_trace(&path)
                .map_err(|e| cx.invalid("workload.dataset.path", quote(p), e.to_string()))?;
            if let Some((i, row)) = rows.iter().enumerate().find(|(_, r)| {
                r.input_tokens as u64 + r.output_tokens as u64 > max_model_len as u64
            }) {
                return Err(cx.invalid(
                    "workload.dataset.path",
                    quote(p),
                    format!(
                        "request {} (data row {} of {}) has input {} + output {} = {} tokens, more than \
                         engine.max_model_len ({max_model_len}); vLLM rejects such requests",
                        i + 1,
                        i + 1,
                        path.display(),
                        row.input_tokens,
                        row.output_tokens,
                        row.input_tokens as u64 + row.output_tokens as u64
                    ),
                ));
            }
            Ok(Dataset::Trace { path, rows })
        }
        _ => unreachable!("kind checked above"),
    }
}

/// A length distribution; `field` is its dotted name (`workload.dataset.output`).
fn resolve_dist(field: &str, raw: &RawLengthDist, cx: &Cx) -> Result<LengthDist, ScenarioError> {
    let t = match raw {
        RawLengthDist::Fixed(v) => {
            if *v < 1 || *v > u32::MAX as i64 {
                return Err(cx.invalid(field, v, "must be a token count ≥ 1"));
            }
            return Ok(LengthDist::Fixed { value: *v as u32 });
        }
        RawLengthDist::Table(t) => t,
    };
    let dist = t.dist.trim().to_ascii_lowercase();
    let allowed: &[&str] = match dist.as_str() {
        "fixed" => &["value"],
        "uniform" => &["min", "max"],
        "normal" | "lognormal" => &["mean", "std", "min", "max"],
        _ => {
            return Err(cx.invalid(
                &format!("{field}.dist"),
                quote(&t.dist),
                "unknown distribution; known: fixed, uniform, normal, lognormal",
            ));
        }
    };
    let present = [
        ("value", t.value.map(|v| v.to_string())),
        ("mean", t.mean.map(|v| v.to_string())),
        ("std", t.std.map(|v| v.to_string())),
        ("min", t.min.map(|v| v.to_string())),
        ("max", t.max.map(|v| v.to_string())),
    ];
    reject_unused_fields(cx, field, &present, allowed, &format!("dist {dist:?}"))?;
    let required = |f: &str, v: Option<u32>| -> Result<u32, ScenarioError> {
        match v {
            Some(0) => Err(cx.invalid(&format!("{field}.{f}"), 0, "must be at least 1")),
            Some(x) => Ok(x),
            None => Err(cx.invalid(
                &format!("{field}.{f}"),
                "(missing)",
                format!("required for dist {dist:?}"),
            )),
        }
    };
    if dist == "fixed" {
        return Ok(LengthDist::Fixed {
            value: required("value", t.value)?,
        });
    }
    let min = required("min", Some(t.min.unwrap_or(1)))?;
    let max = required("max", t.max)?;
    if min > max {
        return Err(cx.invalid(
            &format!("{field}.min"),
            min,
            format!("greater than max ({max})"),
        ));
    }
    if dist == "uniform" {
        return Ok(LengthDist::Uniform { min, max });
    }
    let real =
        |f: &str, v: Option<f64>, ok: fn(f64) -> bool, what: &str| -> Result<f64, ScenarioError> {
            match v {
                Some(x) if ok(x) => Ok(x),
                Some(x) => Err(cx.invalid(&format!("{field}.{f}"), x, format!("must be {what}"))),
                None => Err(cx.invalid(
                    &format!("{field}.{f}"),
                    "(missing)",
                    format!("required for dist {dist:?}"),
                )),
            }
        };
    if dist == "normal" {
        let mean = real("mean", t.mean, |x| x.is_finite(), "a finite number")?;
        let std = real(
            "std",
            t.std,
            |x| x.is_finite() && x >= 0.0,
            "a finite number ≥ 0",
        )?;
        Ok(LengthDist::Normal {
            mean,
            std,
            min,
            max,
        })
    } else {
        let mean = real(
            "mean",
            t.mean,
            |x| x.is_finite() && x > 0.0,
            "a positive, finite number",
        )?;
        let std = real(
            "std",
            t.std,
            |x| x.is_finite() && x >= 0.0,
            "a finite number ≥ 0",
        )?;
        Ok(LengthDist::LogNormal {
            mean,
            std,
            min,
            max,
        })
    }
}

#[cfg(test)]
#[path = "resolve_tests.rs"]
mod tests;
