//! Numeric types of weights and KV cache.

use serde::{Deserialize, Serialize};

/// Numeric type of weights or KV cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Dtype {
    Bf16,
    Fp16,
    Fp8,
    Fp32,
}

impl Dtype {
    pub fn bytes(self) -> u64 {
        match self {
            Dtype::Fp8 => 1,
            Dtype::Bf16 | Dtype::Fp16 => 2,
            Dtype::Fp32 => 4,
        }
    }

    /// Canonical lowercase name, as accepted in scenario files.
    pub fn name(self) -> &'static str {
        match self {
            Dtype::Bf16 => "bf16",
            Dtype::Fp16 => "fp16",
            Dtype::Fp8 => "fp8",
            Dtype::Fp32 => "fp32",
        }
    }

    /// Parses a dtype name, case-insensitively. Accepts our short names and the spellings vLLM and
    /// Hugging Face use (`bfloat16`, `float16`, `half`, `fp8_e4m3`, `fp8_e5m2`, `float32`).
    /// (`auto` is handled by the caller, since its meaning depends on context.)
    pub fn parse(name: &str) -> Option<Dtype> {
        match name.trim().to_ascii_lowercase().as_str() {
            "bf16" | "bfloat16" => Some(Dtype::Bf16),
            "fp16" | "float16" | "half" => Some(Dtype::Fp16),
            "fp8" | "fp8_e4m3" | "fp8_e5m2" | "float8" | "float8_e4m3fn" => Some(Dtype::Fp8),
            "fp32" | "float32" | "float" => Some(Dtype::Fp32),
            _ => None,
        }
    }

    /// Names listed in "unknown dtype" errors.
    pub const NAMES: &'static [&'static str] = &["bf16", "fp16", "fp8", "fp32"];
}

/// The KV-cache dtype vLLM uses with `--kv-cache-dtype auto`: the model's activation dtype. FP8
/// weight quantization keeps 16-bit activations, so fp8 weights still get a bf16 KV cache.
pub fn default_kv_dtype(weight_dtype: Dtype) -> Dtype {
    match weight_dtype {
        Dtype::Fp8 => Dtype::Bf16,
        d => d,
    }
}
