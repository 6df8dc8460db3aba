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

/// Kernels compiled and checked (`tests/cuda_kernels.rs`, the GPU harness) but not yet launched
/// by the engine: loading skips them, as NVRTC takes tens of seconds over their variants.
const NOT_LAUNCHED: [&str; 2] = ["attention_prefill_tc", "attention_decode_split"];

impl KernelSource {
    /// Whether the CUDA engine launches this kernel, and so compiles it when it loads.
    pub fn launched_by_engine(&self) -> bool {
        !NOT_LAUNCHED.contains(&self.name)
    }

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
    // Tensor-core kernels (issue 37): checked against the two above on a GPU
    // (scripts/gpu/attn_bench.cu) and in emulation; the engine does not launch them yet
    // (NOT_LAUNCHED).
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
    fn the_kernels_not_launched_are_listed_ones_and_the_engines_own_are_loaded() {
        for name in NOT_LAUNCHED {
            assert!(kernel(name).is_some_and(|k| !k.launched_by_engine()), "{name} is not in KERNELS");
        }
        assert!(kernel("attention_prefill").unwrap().launched_by_engine());
        assert!(kernel("attention_decode").unwrap().launched_by_engine());
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
