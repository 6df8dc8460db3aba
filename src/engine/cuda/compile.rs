//! Compiling the CUDA kernels in `kernels/` to PTX with NVRTC, at run time.
//!
//! Every `.cu` file is compiled as `common.cuh` (the prelude: 16-bit float conversions, warp
//! reductions) followed by the file itself, so no header search path is needed: the NVRTC that
//! `pip install nvidia-cuda-nvrtc-cu12` provides finds no CUDA headers. NVRTC needs no GPU, so CI
//! proves every kernel compiles for sm_80 and sm_90 on a machine without one.

use cudarc::nvrtc::{CompileError, CompileOptions, Ptx};

use super::device::{check_nvrtc, no_panic};
use crate::engine::DeviceError;

/// The prelude prepended to every kernel source.
pub const PRELUDE: &str = include_str!("../../../kernels/common.cuh");

/// One kernel source file and the `extern "C"` entry points it defines.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KernelSource {
    /// Short name, e.g. "attention_decode"; also the module name in provenance.
    pub name: &'static str,
    /// File name under `kernels/`.
    pub file: &'static str,
    pub source: &'static str,
    pub entry_points: &'static [&'static str],
}

impl KernelSource {
    /// The exact text NVRTC compiles: prelude, then the file.
    pub fn full_source(&self) -> String {
        format!("{PRELUDE}\n#line 1 \"{}\"\n{}", self.file, self.source)
    }

    /// Stable hash of the compiled text (FNV-1a, 64-bit, hex), for a profile's provenance: a
    /// profile belongs to a kernel set, and any edit to a kernel or the prelude changes it.
    pub fn hash(&self) -> String {
        format!("{:016x}", fnv1a_64(self.full_source().as_bytes()))
    }
}

/// Every kernel servesim runs on a GPU (GEMMs are cuBLASLt's, not listed here).
pub const KERNELS: &[KernelSource] = &[
    KernelSource {
        name: "attention_prefill",
        file: "attention_prefill.cu",
        source: include_str!("../../../kernels/attention_prefill.cu"),
        entry_points: &[
            "attention_prefill_bf16_d64",
            "attention_prefill_bf16_d128",
            "attention_prefill_bf16_d256",
            "attention_prefill_f16_d64",
            "attention_prefill_f16_d128",
            "attention_prefill_f16_d256",
        ],
    },
    KernelSource {
        name: "attention_decode",
        file: "attention_decode.cu",
        source: include_str!("../../../kernels/attention_decode.cu"),
        entry_points: &[
            "attention_decode_bf16",
            "attention_decode_reduce_bf16",
            "attention_decode_f16",
            "attention_decode_reduce_f16",
        ],
    },
    // Tensor-core prefill and split-KV decode (issue 37): what the launchers run where the device
    // and shape allow (engine/cuda/attention_fast.rs), checked against the two above in emulation
    // (kernels/emulation), by tests/cuda_kernels.rs and scripts/gpu/attn_bench.cu on a GPU.
    KernelSource {
        name: "attention_prefill_tc",
        file: "attention_prefill_tc.cu",
        source: include_str!("../../../kernels/attention_prefill_tc.cu"),
        entry_points: &[
            "attention_prefill_tc_bf16_d64",
            "attention_prefill_tc_bf16_d128",
            "attention_prefill_tc_f16_d64",
            "attention_prefill_tc_f16_d128",
        ],
    },
    KernelSource {
        name: "attention_decode_split",
        file: "attention_decode_split.cu",
        source: include_str!("../../../kernels/attention_decode_split.cu"),
        entry_points: &[
            "attention_decode_split_bf16",
            "attention_decode_split_reduce_bf16",
            "attention_decode_split_bf16_d64_g1",
            "attention_decode_split_bf16_d64_g2",
            "attention_decode_split_bf16_d64_g4",
            "attention_decode_split_bf16_d64_g8",
            "attention_decode_split_bf16_d128_g1",
            "attention_decode_split_bf16_d128_g2",
            "attention_decode_split_bf16_d128_g4",
            "attention_decode_split_bf16_d128_g8",
            "attention_decode_split_bf16_d256_g1",
            "attention_decode_split_bf16_d256_g2",
            "attention_decode_split_bf16_d256_g4",
            "attention_decode_split_bf16_d256_g8",
            "attention_decode_split_f16",
            "attention_decode_split_reduce_f16",
            "attention_decode_split_f16_d64_g1",
            "attention_decode_split_f16_d64_g2",
            "attention_decode_split_f16_d64_g4",
            "attention_decode_split_f16_d64_g8",
            "attention_decode_split_f16_d128_g1",
            "attention_decode_split_f16_d128_g2",
            "attention_decode_split_f16_d128_g4",
            "attention_decode_split_f16_d128_g8",
            "attention_decode_split_f16_d256_g1",
            "attention_decode_split_f16_d256_g2",
            "attention_decode_split_f16_d256_g4",
            "attention_decode_split_f16_d256_g8",
        ],
    },
    KernelSource {
        name: "kv_cache",
        file: "kv_cache.cu",
        source: include_str!("../../../kernels/kv_cache.cu"),
        entry_points: &["reshape_and_cache_u16"],
    },
    KernelSource {
        name: "rmsnorm",
        file: "rmsnorm.cu",
        source: include_str!("../../../kernels/rmsnorm.cu"),
        entry_points: &["rmsnorm_bf16", "rmsnorm_f16", "fused_add_rmsnorm_bf16", "fused_add_rmsnorm_f16"],
    },
    KernelSource {
        name: "rotary",
        file: "rotary.cu",
        source: include_str!("../../../kernels/rotary.cu"),
        entry_points: &["rotary_bf16", "rotary_f16"],
    },
    KernelSource {
        name: "silu_mul",
        file: "silu_mul.cu",
        source: include_str!("../../../kernels/silu_mul.cu"),
        entry_points: &["silu_mul_bf16", "silu_mul_f16"],
    },
    KernelSource {
        name: "gather",
        file: "gather.cu",
        source: include_str!("../../../kernels/gather.cu"),
        entry_points: &["gather_rows_u16"],
    },
    KernelSource {
        name: "fill",
        file: "fill.cu",
        source: include_str!("../../../kernels/fill.cu"),
        entry_points: &["fill_uniform_bf16", "fill_uniform_f16", "fill_e4m3"],
    },
];

/// Looks a kernel source up by its short name.
pub fn kernel(name: &str) -> Option<&'static KernelSource> {
    KERNELS.iter().find(|k| k.name == name)
}

/// The virtual architectures CI compiles for.
pub const CI_ARCHES: &[&str] = &["compute_80", "compute_90"];

/// The PTX virtual architecture to compile for on a device of compute capability `cc`. PTX is
/// forward compatible (the driver JIT-compiles it for newer GPUs), so the newest of these that the
/// device has is used.
pub fn arch_for(cc: (i32, i32)) -> Result<&'static str, DeviceError> {
    match cc {
        (m, _) if m >= 9 => Ok("compute_90"),
        (8, n) if n >= 9 => Ok("compute_89"),
        (8, _) => Ok("compute_80"),
        (7, n) if n >= 5 => Ok("compute_75"),
        (7, _) => Ok("compute_70"),
        (m, n) => Err(DeviceError::Unsupported(format!(
            "compute capability {m}.{n}: servesim's kernels need 7.0 or newer"
        ))),
    }
}

/// NVRTC's version (major, minor); `None` when NVRTC cannot be loaded.
pub fn nvrtc_version() -> Option<(i32, i32)> {
    check_nvrtc().ok()?;
    no_panic("nvrtcVersion", || {
        let (mut major, mut minor) = (0, 0);
        // SAFETY: writes two ints.
        unsafe { cudarc::nvrtc::sys::nvrtcVersion(&mut major, &mut minor) }
            .result()
            .map_err(|e| DeviceError::Failed(format!("nvrtcVersion: {e:?}")))?;
        Ok((major, minor))
    })
    .ok()
}

/// Compiles one kernel source to PTX for `arch` (e.g. "compute_80"). Errors carry NVRTC's log.
pub fn compile(kernel: &KernelSource, arch: &'static str) -> Result<Ptx, DeviceError> {
    check_nvrtc()?;
    let source = kernel.full_source();
    let opts = CompileOptions {
        arch: Some(arch),
        name: Some(kernel.file.to_string()),
        // Keep IEEE division/sqrt and no flush-to-zero: references are computed in plain f32/f64.
        options: vec!["--std=c++17".to_string()],
        ..Default::default()
    };
    no_panic("NVRTC", || {
        cudarc::nvrtc::compile_ptx_with_opts(source, opts).map_err(|e| match e {
            CompileError::CompileError { nvrtc, log, .. } => DeviceError::Failed(format!(
                "NVRTC failed to compile kernels/{} for {arch} ({nvrtc:?}):\n{}",
                kernel.file,
                log.to_string_lossy()
            )),
            other => DeviceError::Failed(format!("NVRTC error on kernels/{} for {arch}: {other:?}", kernel.file)),
        })
    })
}

/// [`compile`], once per kernel and architecture in a process: NVRTC takes seconds over the
/// split-KV decode's specialised entries, and a process (a test binary, `validate --engine`,
/// which loads the kernels for calibration and again for the engine) loads them more than once.
pub fn compile_cached(kernel: &'static KernelSource, arch: &'static str) -> Result<Ptx, DeviceError> {
    use std::collections::BTreeMap;
    use std::sync::{Mutex, OnceLock};
    static CACHE: OnceLock<Mutex<BTreeMap<(&'static str, &'static str), Ptx>>> = OnceLock::new();
    let cache = CACHE.get_or_init(|| Mutex::new(BTreeMap::new()));
    if let Some(ptx) = cache.lock().unwrap_or_else(|e| e.into_inner()).get(&(kernel.name, arch)) {
        return Ok(ptx.clone());
    }
    let ptx = compile(kernel, arch)?;
    cache.lock().unwrap_or_else(|e| e.into_inner()).insert((kernel.name, arch), ptx.clone());
    Ok(ptx)
}

/// Compiles every kernel for `arch`, in [`KERNELS`] order.
pub fn compile_all(arch: &'static str) -> Result<Vec<(&'static KernelSource, Ptx)>, DeviceError> {
    KERNELS.iter().map(|k| compile(k, arch).map(|ptx| (k, ptx))).collect()
}

/// (kernel name, source hash) for every kernel, for provenance.
pub fn kernel_hashes() -> Vec<(String, String)> {
    KERNELS.iter().map(|k| (k.name.to_string(), k.hash())).collect()
}

fn fnv1a_64(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kernel_has_entry_points_that_appear_in_its_source() {
        for k in KERNELS {
            assert!(!k.entry_points.is_empty(), "{}", k.name);
            for e in k.entry_points {
                // Entry points are either written out or produced by a *_ENTRY(name, ...) macro.
                assert!(k.source.contains(e), "{} does not mention {e}", k.file);
            }
        }
    }

    #[test]
    fn the_fast_attention_kernels_are_listed() {
        for name in ["attention_prefill_tc", "attention_decode_split", "attention_prefill", "attention_decode"] {
            assert!(kernel(name).is_some(), "{name} is not in KERNELS");
        }
    }

    #[test]
    fn hashes_are_stable_and_distinct() {
        let hashes = kernel_hashes();
        assert_eq!(hashes.len(), KERNELS.len());
        let mut values: Vec<_> = hashes.iter().map(|(_, h)| h.clone()).collect();
        values.sort();
        values.dedup();
        assert_eq!(values.len(), KERNELS.len());
        assert_eq!(fnv1a_64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a_64(b"a"), 0xaf63_dc4c_8601_ec8c);
    }

    #[test]
    fn arches() {
        assert_eq!(arch_for((9, 0)).unwrap(), "compute_90");
        assert_eq!(arch_for((10, 0)).unwrap(), "compute_90");
        assert_eq!(arch_for((8, 9)).unwrap(), "compute_89");
        assert_eq!(arch_for((8, 0)).unwrap(), "compute_80");
        assert!(arch_for((6, 1)).is_err());
    }
}
