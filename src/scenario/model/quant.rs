//! Weight quantization schemes beyond per-tensor FP8, and the bytes each stores.
//!
//! Per-tensor FP8 stays what it was: `weight_dtype = Fp8` and no [`WeightQuant`]. The schemes
//! here store weights in blocks or groups that share a scale, so their bytes per weight are the
//! value's bits plus the group's scale (and zero point) spread over the group:
//!
//! | scheme | value | one scale (+ zero) per | bytes per weight |
//! | --- | --- | --- | --- |
//! | block-scaled FP8 (DeepSeek) | 8 bits | 128 × 128 block, fp32 | 1 + 4/16384 |
//! | AWQ 4-bit, group 128 | 4 bits | 128, fp16 scale + 4-bit zero | 0.5 + 2.5/128 = 0.51953125 |
//! | GPTQ 4-bit symmetric, group 128 | 4 bits | 128, fp16 scale | 0.5 + 2/128 = 0.515625 |
//! | MXFP4 (OCP MX, gpt-oss) | 4 bits (E2M1) | 32, E8M0 (8 bits) | 0.5 + 1/32 = 0.53125 |
//! | NVFP4 | 4 bits (E2M1) | 16, E4M3 (8 bits) | 0.5 + 1/16 = 0.5625 |
//!
//! NVFP4's second, per-tensor fp32 scale (4 bytes a matrix) and the edge blocks of a matrix whose
//! sides do not divide by the block are left out: under a kilobyte per layer. Per-channel
//! integer scales (`group_size: -1`) are one per output column, priced as groups of the hidden
//! size (exact for the projections that read the hidden state, the widest of a layer's inputs
//! besides the MLP's down projection). Which layers a scheme quantizes is its [`QuantScope`]:
//! the embedding table, LM head, norms and a mixture of experts' router stay in the activation
//! dtype under every scheme, as vLLM loads them (its routers are `ReplicatedLinear` layers built
//! without a quantization config; the vocabulary-parallel tables are embeddings).

use super::{Dtype, HfConfigError, ModelSpec, MoeSpec};
use crate::scenario::GpuSpec;
use serde_json::{Map, Value};

/// A weight quantization scheme and the layers it covers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WeightQuant {
    pub scheme: QuantScheme,
    pub scope: QuantScope,
}

/// How quantized weights are stored and multiplied.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QuantScheme {
    /// FP8 values with one fp32 scale per `block_n × block_k` block; FP8 GEMMs where the GPU has
    /// FP8 tensor cores.
    Fp8Block { block_n: u32, block_k: u32 },
    /// Integer weights with 16-bit activations (AWQ, GPTQ, compressed-tensors W4A16): vLLM
    /// converts them to 16 bits inside its Marlin kernels, which multiply on the 16-bit tensor
    /// cores. `group_size` `None` is one scale per output channel.
    IntWeightOnly { method: IntMethod, bits: u32, group_size: Option<u32>, zero_points: bool },
    /// OCP MXFP4 experts with 16-bit activations (gpt-oss).
    Mxfp4,
    /// NVFP4 weights and activations, multiplied on FP4 tensor cores.
    Nvfp4,
}

/// Where integer weight-only weights come from; the same kernels run them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IntMethod {
    Awq,
    Gptq,
    CompressedTensors,
}

/// Which of a model's linear layers a scheme stores quantized.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QuantScope {
    /// QKV and output projections (MLA's projections).
    pub attention: bool,
    /// The dense MLP, a mixture of experts' shared experts and its leading dense layers.
    pub dense_mlp: bool,
    /// The routed experts.
    pub experts: bool,
}

impl QuantScope {
    pub const ALL_LINEAR: QuantScope = QuantScope { attention: true, dense_mlp: true, experts: true };
    /// vLLM's `Mxfp4Config` quantizes `FusedMoE` layers only; linear layers load unquantized.
    pub const EXPERTS: QuantScope = QuantScope { attention: false, dense_mlp: false, experts: true };
}

const FP32_BITS: u128 = 32;
const FP16_BITS: u128 = 16;
const E8M0_BITS: u128 = 8;
const E4M3_BITS: u128 = 8;
const FP4_BITS: u128 = 4;
/// OCP Microscaling spec v1.0: MXFP4 blocks of 32 share one E8M0 scale.
const MX_BLOCK: u128 = 32;
/// NVIDIA's NVFP4: blocks of 16 share one E4M3 scale.
const NVFP4_BLOCK: u128 = 16;

impl QuantScheme {
    /// Bits of one stored value, weights that share a scale, and the bits of that scale with its
    /// zero point; `k` is the matrix's input width, for per-channel scales.
    fn layout(self, k: u64) -> (u128, u128, u128) {
        match self {
            QuantScheme::Fp8Block { block_n, block_k } => (8, block_n as u128 * block_k as u128, FP32_BITS),
            QuantScheme::IntWeightOnly { bits, group_size, zero_points, .. } => {
                let bits = bits as u128;
                (bits, group_size.map_or(k as u128, u128::from), FP16_BITS + if zero_points { bits } else { 0 })
            }
            QuantScheme::Mxfp4 => (FP4_BITS, MX_BLOCK, E8M0_BITS),
            QuantScheme::Nvfp4 => (FP4_BITS, NVFP4_BLOCK, E4M3_BITS),
        }
    }

    /// Bytes of `elements` weights with scales, in matrices `k` wide.
    pub fn bytes(self, elements: u128, k: u64) -> u128 {
        let (value_bits, group, scale_bits) = self.layout(k);
        (elements * value_bits + elements.div_ceil(group.max(1)) * scale_bits).div_ceil(8)
    }

    /// Bytes per weight with its share of the scales, what a GEMM reads per weight element.
    pub fn bytes_per_element(self, k: u64) -> f64 {
        let (value_bits, group, scale_bits) = self.layout(k);
        (value_bits as f64 + scale_bits as f64 / group.max(1) as f64) / 8.0
    }

    /// A short name for notes and errors.
    pub fn name(self) -> String {
        match self {
            QuantScheme::Fp8Block { block_n, block_k } => format!("block-scaled FP8 ({block_n}×{block_k})"),
            QuantScheme::IntWeightOnly { method, bits, group_size, .. } => {
                let method = match method {
                    IntMethod::Awq => "AWQ",
                    IntMethod::Gptq => "GPTQ",
                    IntMethod::CompressedTensors => "compressed-tensors W4A16",
                };
                let group = group_size.map_or("per channel".to_string(), |g| format!("group {g}"));
                format!("{method} {bits}-bit ({group})")
            }
            QuantScheme::Mxfp4 => "MXFP4".into(),
            QuantScheme::Nvfp4 => "NVFP4".into(),
        }
    }

    /// The dtype `ModelSpec::weight_dtype` holds with this scheme: FP8 for block-scaled FP8 (the
    /// per-tensor paths read it), else the activation dtype, in which unquantized layers stay.
    pub fn weight_dtype(self, activation: Dtype) -> Dtype {
        match self {
            QuantScheme::Fp8Block { .. } => Dtype::Fp8,
            _ => activation,
        }
    }
}

/// The schemes `model.quantization` names, with the checkpoints' usual settings.
pub const SCENARIO_NAMES: &[&str] = &["none", "fp8", "fp8-block", "awq", "gptq", "mxfp4", "nvfp4"];

impl WeightQuant {
    /// `model.quantization` in a scenario: `Ok(None)` for "none" and "fp8" (per-tensor FP8, the
    /// dtype alone), `Err(())` for a name not in [`SCENARIO_NAMES`].
    pub fn from_scenario_name(name: &str) -> Result<Option<WeightQuant>, ()> {
        let int = |method, zero_points| QuantScheme::IntWeightOnly { method, bits: 4, group_size: Some(128), zero_points };
        let scheme = match name.trim().to_ascii_lowercase().as_str() {
            "none" | "fp8" => return Ok(None),
            "fp8-block" => QuantScheme::Fp8Block { block_n: 128, block_k: 128 },
            "awq" => int(IntMethod::Awq, true),
            "gptq" => int(IntMethod::Gptq, false),
            "mxfp4" => QuantScheme::Mxfp4,
            "nvfp4" => QuantScheme::Nvfp4,
            _ => return Err(()),
        };
        let scope = if scheme == QuantScheme::Mxfp4 { QuantScope::EXPERTS } else { QuantScope::ALL_LINEAR };
        Ok(Some(WeightQuant { scheme, scope }))
    }

    /// Why `model` cannot carry this scheme, if it cannot.
    pub fn mismatch(&self, model: &ModelSpec) -> Option<String> {
        if self.scope == QuantScope::EXPERTS && model.moe.is_none() {
            return Some(format!("{} is modelled on a mixture of experts' routed experts only (vLLM's Mxfp4Config leaves linear layers unquantized), and this model has none", self.scheme.name()));
        }
        let fp8 = matches!(self.scheme, QuantScheme::Fp8Block { .. });
        match model.weight_dtype {
            Dtype::Fp8 if !fp8 => Some(format!("{} keeps 16-bit activations; give dtype bf16 or fp16, not fp8", self.scheme.name())),
            Dtype::Fp32 => Some(format!("{} is served with 16-bit activations, not fp32", self.scheme.name())),
            d if fp8 && d != Dtype::Fp8 => Some(format!("{} weights are fp8, not {}", self.scheme.name(), d.name())),
            _ => None,
        }
    }

    /// Why a deployment on `gpu` cannot run these weights as stored, if it cannot: NVFP4 without
    /// FP4 tensor cores. vLLM would run them weight-only through its FP4 Marlin kernel
    /// (`marlin_utils_fp4.py` warns "Your GPU does not have native support for FP4 computation"),
    /// which servesim does not price.
    pub fn refusal_on(&self, gpu: &GpuSpec) -> Option<String> {
        (self.scheme == QuantScheme::Nvfp4 && gpu.peak_flops_fp4.is_none()).then(|| {
            format!(
                "{} weights multiply on FP4 tensor cores, which {} lacks (B200 has them); vLLM would run them weight-only \
                 through its FP4 Marlin kernel, which servesim does not price",
                self.scheme.name(),
                gpu.name
            )
        })
    }
}

impl ModelSpec {
    /// Elements of one GPU's linear weights at tensor parallelism `tp` by part: attention (linear
    /// attention's projections too), dense
    /// MLP (shared experts and leading dense layers too), router, routed experts. They sum to
    /// `shard(tp).linear_elements`, of which the experts are what a model without them lacks.
    fn linear_parts(&self, tp: u32) -> [u128; 4] {
        let shard = self.shard(tp);
        let attention = self.all_attention_elements(shard.heads, shard.kv_heads, tp.max(1) as u64);
        let no_experts = ModelSpec { moe: self.moe.map(|m| MoeSpec { num_experts: 0, ..m }), ..self.clone() };
        let without_experts = no_experts.shard(tp).linear_elements as u128;
        let router = self.moe.map_or(0, |m| self.expert_layers() as u128 * self.hidden_size as u128 * m.num_experts as u128);
        let experts = (shard.linear_elements as u128).saturating_sub(without_experts + router);
        [attention, without_experts.saturating_sub(attention), router, experts]
    }

    /// Bytes of one GPU's linear weights at tensor parallelism `tp`: every element at the weight
    /// dtype's bytes, or with a [`WeightQuant`], the layers it covers at its bytes (scales
    /// included) and the rest, router included, in the activation dtype.
    pub fn linear_weight_bytes_per_gpu(&self, tp: u32) -> u128 {
        let Some(quant) = self.weight_quant else {
            return self.shard(tp).linear_elements as u128 * self.weight_dtype.bytes() as u128;
        };
        let [attention, dense, router, experts] = self.linear_parts(tp);
        let plain = self.unquantized_bytes() as u128;
        let bytes = |elements: u128, quantized: bool| {
            if quantized { quant.scheme.bytes(elements, self.hidden_size as u64) } else { elements * plain }
        };
        bytes(attention, quant.scope.attention) + bytes(dense, quant.scope.dense_mlp) + bytes(experts, quant.scope.experts) + router * plain
    }
}

/// What a `quantization_config` holds: per-tensor FP8 (the dtype alone) or a scheme.
pub(super) enum HfQuant {
    Fp8PerTensor,
    Scheme(WeightQuant),
}

/// Builds a refusal naming `quantization_config.<key>`, its value and why (the caller decides
/// how a value is shown).
type Refuse<'a> = dyn Fn(&str, &Value, &str) -> HfConfigError + 'a;

/// Reads a Hugging Face `quantization_config`, refusing what is not modelled with its key and
/// value: unknown methods, unknown keys of a method, settings that change the kernels or the
/// layers covered (an LM head quantized, per-layer exclusions), and KV-cache schemes.
pub(super) fn from_hf_config(q: &Value, refuse: &Refuse) -> Result<HfQuant, HfConfigError> {
    let at = |key: &str| format!("quantization_config.{key}");
    let no = |key: &str, value: &Value, why: &str| refuse(&at(key), value, why);
    let Some(obj) = q.as_object() else { return Err(refuse("quantization_config", q, "expected an object")) };
    let method_value = obj.get("quant_method").cloned().unwrap_or(Value::Null);
    let method = method_value.as_str().unwrap_or("").to_ascii_lowercase();
    let known: &[&str] = match method.as_str() {
        "fp8" => &["quant_method", "activation_scheme", "fmt", "weight_block_size", "scale_fmt", "ignored_layers", "modules_to_not_convert"],
        // transformers' `AwqConfig` also writes its own module-fusing options, which vLLM ignores.
        "awq" => &[
            "quant_method", "bits", "w_bit", "group_size", "q_group_size", "zero_point", "version", "modules_to_not_convert",
            "backend", "do_fuse", "fuse_max_seq_len", "modules_to_fuse", "exllama_config",
        ],
        "gptq" => &[
            "quant_method", "bits", "group_size", "sym", "desc_act", "lm_head", "dynamic", "checkpoint_format",
            "modules_in_block_to_quantize", "damp_percent", "damp_auto_increment", "true_sequential", "static_groups",
            "model_name_or_path", "model_file_base_name", "dataset", "tokenizer", "use_exllama", "exllama_config",
            "max_input_length", "batch_size", "pad_token_id", "use_cuda_fp16", "cache_block_outputs",
            "module_name_preceding_first_block", "block_name_to_quantize", "meta", "quantizer", "pack_dtype", "mse",
        ],
        "mxfp4" => &["quant_method", "modules_to_not_convert"],
        "modelopt" => &["quant_method", "quant_algo", "group_size", "exclude_modules", "ignore", "producer", "kv_cache_quant_algo"],
        "compressed-tensors" => &[
            "quant_method", "format", "config_groups", "ignore", "quantization_status", "global_compression_ratio",
            "version", "kv_cache_scheme", "sparsity_config", "transform_config",
        ],
        _ => {
            return Err(no(
                "quant_method",
                &method_value,
                "not a quantization method servesim models; modelled: fp8 (per tensor or block-scaled), awq, gptq, mxfp4, \
                 modelopt (NVFP4, FP8), compressed-tensors (W4A16, NVFP4, FP8)",
            ));
        }
    };
    let fields = obj.iter().filter(|(_, v)| !v.is_null());
    if let Some((key, value)) = fields.clone().find(|(key, _)| !known.contains(&key.as_str())) {
        return Err(no(key, value, &format!("not a key of {method} quantization servesim knows ({})", known.join(", "))));
    }
    let get = |key: &str| obj.get(key).filter(|v| !v.is_null());
    let attention_excluded = exclusions(obj, &["ignored_layers", "modules_to_not_convert", "exclude_modules", "ignore"], refuse)?;
    let scope = QuantScope { attention: !attention_excluded, ..QuantScope::ALL_LINEAR };
    let scheme = |scheme| Ok(HfQuant::Scheme(WeightQuant { scheme, scope }));
    let positive = |key: &str, v: &Value| v.as_u64().filter(|&n| n > 0 && n <= u32::MAX as u64).map(|n| n as u32).ok_or_else(|| no(key, v, "expected a positive integer"));
    match method.as_str() {
        "fp8" => match get("weight_block_size") {
            None => Ok(HfQuant::Fp8PerTensor),
            Some(v) => match v.as_array().map(Vec::as_slice) {
                Some([n, k]) => scheme(QuantScheme::Fp8Block { block_n: positive("weight_block_size", n)?, block_k: positive("weight_block_size", k)? }),
                _ => Err(no("weight_block_size", v, "expected [rows, columns] of a scale block")),
            },
        },
        "awq" => {
            let version = get("version").and_then(Value::as_str).unwrap_or("gemm");
            if !version.eq_ignore_ascii_case("gemm") {
                return Err(no("version", &get("version").cloned().unwrap_or_default(), "only AWQ's GEMM packing is modelled (vLLM's awq_marlin reads it)"));
            }
            let zero_points = get("zero_point").map_or(Ok(true), |v| v.as_bool().ok_or_else(|| no("zero_point", v, "expected true or false")))?;
            let (bits, group_size) = int_layout(obj, ["bits", "w_bit"], ["group_size", "q_group_size"], refuse)?;
            scheme(QuantScheme::IntWeightOnly { method: IntMethod::Awq, bits, group_size, zero_points })
        }
        "gptq" => {
            for (key, harmless) in [("lm_head", Value::Bool(false)), ("dynamic", serde_json::json!({})), ("modules_in_block_to_quantize", Value::Null)] {
                if let Some(v) = get(key).filter(|v| **v != harmless) {
                    return Err(no(key, v, "layers quantized differently from the rest (an LM head, per-module overrides or a subset of a block) are not modelled"));
                }
            }
            if let Some(v) = get("checkpoint_format").filter(|v| !matches!(v.as_str(), Some("gptq" | "gptq_v2"))) {
                return Err(no("checkpoint_format", v, "only GPTQ's own packing is modelled"));
            }
            let sym = get("sym").map_or(Ok(true), |v| v.as_bool().ok_or_else(|| no("sym", v, "expected true or false")))?;
            let (bits, group_size) = int_layout(obj, ["bits", "bits"], ["group_size", "group_size"], refuse)?;
            scheme(QuantScheme::IntWeightOnly { method: IntMethod::Gptq, bits, group_size, zero_points: !sym })
        }
        "mxfp4" => Ok(HfQuant::Scheme(WeightQuant { scheme: QuantScheme::Mxfp4, scope: QuantScope::EXPERTS })),
        "modelopt" => {
            if let Some(v) = get("kv_cache_quant_algo") {
                return Err(no("kv_cache_quant_algo", v, "a KV-cache scheme from the checkpoint is not read; remove it from a copy and set model.kv_cache_dtype"));
            }
            let algo = get("quant_algo").cloned().unwrap_or_default();
            match algo.as_str().unwrap_or("").to_ascii_uppercase().as_str() {
                "FP8" => Ok(HfQuant::Fp8PerTensor),
                "NVFP4" => match get("group_size").filter(|v| v.as_u64() != Some(16)) {
                    Some(v) => Err(no("group_size", v, "NVFP4 blocks are 16 weights")),
                    None => scheme(QuantScheme::Nvfp4),
                },
                _ => Err(no("quant_algo", &algo, "modelled ModelOpt algorithms: NVFP4, FP8")),
            }
        }
        _ => compressed_tensors(obj, scope, refuse),
    }
}

/// AWQ's and GPTQ's bit width (4 or 8, what vLLM's Marlin kernels take) and group size (-1: per
/// channel), under either of two key names each.
fn int_layout(obj: &Map<String, Value>, bits_keys: [&'static str; 2], group_keys: [&'static str; 2], refuse: &Refuse) -> Result<(u32, Option<u32>), HfConfigError> {
    let first = |keys: [&'static str; 2]| keys.into_iter().find_map(|k| obj.get(k).filter(|v| !v.is_null()).map(|v| (k, v)));
    let bits = match first(bits_keys) {
        None => 4,
        Some((_, v)) if matches!(v.as_u64(), Some(4 | 8)) => v.as_u64().unwrap_or(4) as u32,
        Some((key, v)) => return Err(refuse(&format!("quantization_config.{key}"), v, "modelled: 4 or 8 bits")),
    };
    let group_size = match first(group_keys) {
        None => Some(128),
        Some((_, v)) if v.as_i64() == Some(-1) => None,
        Some((_, v)) if v.as_u64().is_some_and(|g| g > 0 && g <= u32::MAX as u64) => v.as_u64().map(|g| g as u32),
        Some((key, v)) => return Err(refuse(&format!("quantization_config.{key}"), v, "expected a positive group size or -1 (per channel)")),
    };
    Ok((bits, group_size))
}

/// compressed-tensors (llm-compressor's format): one config group over every `Linear` layer
/// with integer weights and no activation quantization (W4A16, W8A16), NVFP4 weights and
/// activations, or FP8 weights and activations (per tensor, per channel or in blocks).
fn compressed_tensors(obj: &Map<String, Value>, scope: QuantScope, refuse: &Refuse) -> Result<HfQuant, HfConfigError> {
    let get = |key: &str| obj.get(key).filter(|v| !v.is_null());
    let no = |key: &str, value: &Value, why: &str| refuse(&format!("quantization_config.{key}"), value, why);
    for key in ["kv_cache_scheme", "transform_config"] {
        if let Some(v) = get(key) {
            return Err(no(key, v, "not modelled"));
        }
    }
    if let Some(v) = get("sparsity_config").filter(|v| v.as_object().is_some_and(|o| o.values().any(|x| !x.is_null()))) {
        return Err(no("sparsity_config", v, "sparse weights are not modelled"));
    }
    let groups = get("config_groups").and_then(Value::as_object);
    let Some((name, group)) = groups.filter(|g| g.len() == 1).and_then(|g| g.iter().next()) else {
        return Err(no("config_groups", &get("config_groups").cloned().unwrap_or_default(), "modelled: exactly one config group, over every Linear layer"));
    };
    let field = |key: &str| group.get(key).filter(|v| !v.is_null());
    let path = |key: &str| format!("config_groups.{name}.{key}");
    const GROUP_KEYS: &[&str] = &["targets", "weights", "input_activations", "output_activations", "format"];
    if let Some((key, v)) = group.as_object().into_iter().flatten().find(|(k, v)| !v.is_null() && !GROUP_KEYS.contains(&k.as_str())) {
        return Err(no(&path(key), v, &format!("not a key of a compressed-tensors config group servesim knows ({})", GROUP_KEYS.join(", "))));
    }
    if let Some(v) = field("targets").filter(|v| *v != &serde_json::json!(["Linear"])) {
        return Err(no(&path("targets"), v, "modelled: targets [\"Linear\"] (every linear layer)"));
    }
    if let Some(v) = field("output_activations") {
        return Err(no(&path("output_activations"), v, "output quantization is not modelled"));
    }
    let Some(weights) = field("weights") else { return Err(no(&path("weights"), &Value::Null, "a config group without weights quantizes nothing")) };
    let w = quant_args(weights, &path("weights"), refuse)?;
    let a = field("input_activations").map(|v| quant_args(v, &path("input_activations"), refuse)).transpose()?;
    let scheme = |scheme| Ok(HfQuant::Scheme(WeightQuant { scheme, scope }));
    let wrong = |why: &str| Err(no(&path("weights"), weights, why));
    match (w.kind.as_str(), w.bits, a.as_ref().map(|a| (a.kind.as_str(), a.bits))) {
        ("int", 4 | 8, None) => match (w.strategy.as_str(), w.group_size) {
            ("group", Some(g)) => scheme(QuantScheme::IntWeightOnly { method: IntMethod::CompressedTensors, bits: w.bits, group_size: Some(g), zero_points: !w.symmetric }),
            ("channel", _) => scheme(QuantScheme::IntWeightOnly { method: IntMethod::CompressedTensors, bits: w.bits, group_size: None, zero_points: !w.symmetric }),
            _ => wrong("modelled integer strategies: group (with group_size) and channel"),
        },
        ("float", 4, Some(("float", 4))) if w.strategy == "tensor_group" && w.group_size == Some(16) => scheme(QuantScheme::Nvfp4),
        ("float", 8, Some(("float", 8))) => match (w.strategy.as_str(), &w.block) {
            ("tensor" | "channel", None) => Ok(HfQuant::Fp8PerTensor),
            ("block", Some([n, k])) => scheme(QuantScheme::Fp8Block { block_n: *n, block_k: *k }),
            _ => wrong("modelled FP8 strategies: tensor, channel, block (with block_structure)"),
        },
        _ => wrong("modelled: int 4/8-bit weights without activation quantization (W4A16), NVFP4 (float 4-bit weights and activations in groups of 16), FP8 weights and activations"),
    }
}

/// One compressed-tensors `QuantizationArgs` object, checked key by key.
struct QuantArgs {
    bits: u32,
    kind: String,
    strategy: String,
    group_size: Option<u32>,
    symmetric: bool,
    block: Option<[u32; 2]>,
}

fn quant_args(v: &Value, path: &str, refuse: &Refuse) -> Result<QuantArgs, HfConfigError> {
    const KEYS: &[&str] = &[
        "num_bits", "type", "symmetric", "strategy", "group_size", "block_structure", "dynamic", "actorder",
        "observer", "observer_kwargs", "zp_dtype", "scale_dtype",
    ];
    let no = |key: &str, value: &Value, why: &str| refuse(&format!("quantization_config.{path}.{key}"), value, why);
    let Some(obj) = v.as_object() else { return Err(refuse(&format!("quantization_config.{path}"), v, "expected an object")) };
    if let Some((key, value)) = obj.iter().find(|(k, v)| !v.is_null() && !KEYS.contains(&k.as_str())) {
        return Err(no(key, value, &format!("not a key of compressed-tensors quantization arguments servesim knows ({})", KEYS.join(", "))));
    }
    let text = |key: &str| obj.get(key).and_then(Value::as_str).unwrap_or("").to_ascii_lowercase();
    let number = |key: &str| obj.get(key).and_then(Value::as_u64).filter(|&n| n > 0 && n <= u32::MAX as u64).map(|n| n as u32);
    let block = match obj.get("block_structure").filter(|v| !v.is_null()) {
        None => None,
        Some(b) => match b.as_array().map(|a| a.iter().filter_map(Value::as_u64).filter(|&n| n > 0 && n <= u32::MAX as u64).collect::<Vec<_>>()).as_deref() {
            Some(&[n, k]) => Some([n as u32, k as u32]),
            _ => return Err(no("block_structure", b, "expected [rows, columns]")),
        },
    };
    Ok(QuantArgs {
        bits: number("num_bits").ok_or_else(|| no("num_bits", obj.get("num_bits").unwrap_or(&Value::Null), "expected a positive integer"))?,
        kind: text("type"),
        strategy: text("strategy"),
        group_size: number("group_size"),
        symmetric: obj.get("symmetric").and_then(Value::as_bool).unwrap_or(true),
        block,
    })
}

/// Whether the modules a config leaves unquantized (`keys`, lists of names or patterns) exclude
/// the attention layers. Entries that name a module 16-bit under every scheme anyway (LM head,
/// embeddings, norms, routers) pass; one that names a single layer, or anything else, is refused:
/// per-layer exceptions are not modelled.
fn exclusions(obj: &Map<String, Value>, keys: &[&str], refuse: &Refuse) -> Result<bool, HfConfigError> {
    let mut attention = false;
    for key in keys {
        let Some(list) = obj.get(*key).filter(|v| !v.is_null()) else { continue };
        let no = |v: &Value, why: &str| refuse(&format!("quantization_config.{key}"), v, why);
        let Some(items) = list.as_array() else { return Err(no(list, "expected a list of module names")) };
        for item in items {
            let name = item.as_str().unwrap_or("").to_ascii_lowercase();
            let one_layer = name.split(['.', '/']).collect::<Vec<_>>().windows(2).any(|w| w[0].ends_with("layers") && w[1].parse::<u32>().is_ok());
            let last = name.trim_end_matches(['*', '$', ')', '.']).rsplit(['.', '*']).next().unwrap_or("").to_string();
            if one_layer {
                return Err(no(item, "a module left unquantized in some layers only: per-layer exceptions are not modelled"));
            } else if name.contains("lm_head") || name.contains("embed") || last.ends_with("norm") || last == "gate" || last.ends_with("router") || last == "shared_expert_gate" {
                continue;
            } else if ["self_attn", "attn", "attention"].contains(&last.as_str()) {
                attention = true;
            } else {
                return Err(no(item, "modelled exclusions: the LM head, embeddings, norms, routers, and whole attention layers"));
            }
        }
    }
    Ok(attention)
}

#[cfg(test)]
#[path = "quant_tests.rs"]
mod tests;
