//! The CPU engine's kernels, in f32: everything one Llama-style transformer step runs.
//!
//! ```text
//!  x ─ rms_norm ─ gemm (qkv) ─ Rope::apply ─ write_paged ─┬─ prefill_attention (new prompts, chunks)
//!                                                         └─ decode_attention  (one token per sequence)
//!    ─ gemm (o, += residual) ─ add_rms_norm ─ gemm (gate_up) ─ silu_and_mul ─ gemm (down) ─ …
//! ```
//!
//! - Every kernel runs on the current rayon pool; callers pick it with `ThreadPool::install`.
//! - Results do not depend on the thread count: work is split by output element (sequence, head,
//!   token), never by a reduction that threads would combine in a racing order.
//! - Kernels allocate nothing once each thread's scratch has grown to the largest shape (the
//!   `gemm` crate may allocate its packing buffers, which it sizes itself).
//! - Hand-written loops are dispatched at run time to AVX2+FMA where the CPU has it (`simd.rs`);
//!   `SERVESIM_CPU_ISA=baseline` forces the portable path.
//! - Weights belong in `[in, out]` layout ([`BLayout::RowMajor`]): the `gemm` crate is up to 3.5×
//!   faster with it at decode-sized m than with `[out, in]`, the few-row kernel
//!   (`gemm_skinny.rs`, AVX-512, 7–64 rows) reads only that layout, and calibration times it.
//!
//! Measured on one core of the development machine (AMD EPYC, AVX2 path; the gemm crate reaches
//! ~125 GFLOP/s there with its AVX2 kernels, ~190–240 with its AVX-512 ones): prefill and
//! chunked-prefill attention 70–88 GFLOP/s; decode attention over a cold paged cache 8–12 GB/s
//! per core, about 23 GB/s on two. A whole decode step: `cargo bench --bench engine`.
//!
//! [`KERNEL_SOURCES`] lists the source of every file here, so that a calibration profile records
//! a hash of exactly the code it timed.

mod activation;
mod attention;
mod decode;
mod gemm;
pub mod gemm_skinny;
mod huge_pages;
mod kv;
mod logits;
mod norm;
mod prefill;
mod rope;
mod scratch;
mod simd;

#[cfg(test)]
mod reference;
#[cfg(test)]
mod tests;

pub use activation::silu_and_mul;
pub use huge_pages::{HUGE_PAGE_BYTES, HugePageAlloc};
pub use attention::AttentionDims;
pub use decode::decode_attention;
pub use gemm::{BLayout, Gemm, matmul};
pub use kv::{KvSource, PackedKv, PagedCache, PagedKv, write_paged};
pub use logits::{exp_shifted_in_place, scale_logits};
pub use norm::{add_rms_norm, rms_norm};
pub use prefill::prefill_attention;
pub use rope::Rope;
pub use simd::{Isa, isa};

/// (file name, source) of every file whose code the kernels run; tests and references excluded.
pub const KERNEL_SOURCES: &[(&str, &str)] = &[
    ("activation.rs", include_str!("activation.rs")),
    ("attention.rs", include_str!("attention.rs")),
    ("decode.rs", include_str!("decode.rs")),
    ("gemm.rs", include_str!("gemm.rs")),
    ("gemm_skinny.rs", include_str!("gemm_skinny.rs")),
    ("huge_pages.rs", include_str!("huge_pages.rs")),
    ("kv.rs", include_str!("kv.rs")),
    ("logits.rs", include_str!("logits.rs")),
    ("mod.rs", include_str!("mod.rs")),
    ("norm.rs", include_str!("norm.rs")),
    ("prefill.rs", include_str!("prefill.rs")),
    ("rope.rs", include_str!("rope.rs")),
    ("scratch.rs", include_str!("scratch.rs")),
    ("simd.rs", include_str!("simd.rs")),
];
