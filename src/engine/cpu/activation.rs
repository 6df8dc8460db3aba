//! SiLU-and-multiply, the gated MLP's activation: `silu(gate) ⊙ up`, `silu(x) = x / (1 + e^−x)`.

use rayon::prelude::*;

use super::simd::{self, Simd, W, exp, exp_scalar, simd_kernel};

/// Elements below which the work stays on the calling thread (see `norm.rs`).
const PARALLEL_MIN_ELEMS: usize = 1 << 16;

/// `out[t][i] = silu(x[t][i]) · x[t][inter + i]`.
///
/// `x`: `[tokens, 2·inter]`, each row the gate then the up projection (what one merged
/// `gate_up` GEMM produces, as in vLLM); `out`: `[tokens, inter]`. Runs on the current rayon pool.
///
/// # Panics
/// If lengths disagree.
pub fn silu_and_mul(x: &[f32], out: &mut [f32], inter: usize) {
    assert!(inter > 0 && x.len().is_multiple_of(2 * inter), "silu_and_mul: x must be [tokens, 2 × {inter}]");
    assert_eq!(out.len(), x.len() / 2, "silu_and_mul: out must be [tokens, {inter}]");
    let isa = simd::isa();
    let rows = |x: &[f32], out: &mut [f32]| silu_mul_rows(isa, x, out, inter);
    if out.len() < PARALLEL_MIN_ELEMS {
        rows(x, out);
    } else {
        let per_task = (PARALLEL_MIN_ELEMS / 4 / inter).max(1);
        x.par_chunks(per_task * 2 * inter).zip(out.par_chunks_mut(per_task * inter)).for_each(|(x, y)| rows(x, y));
    }
}

simd_kernel!(fn silu_mul_rows / silu_mul_rows_body(x: &[f32], out: &mut [f32], inter: usize));

#[inline(always)]
fn silu_mul_rows_body<S: Simd>(x: &[f32], out: &mut [f32], inter: usize) {
    for (xr, yr) in x.chunks_exact(2 * inter).zip(out.chunks_exact_mut(inter)) {
        let (gate, up) = xr.split_at(inter);
        let (gc, gt) = gate.as_chunks::<W>();
        let (uc, ut) = up.as_chunks::<W>();
        let (yc, yt) = yr.as_chunks_mut::<W>();
        let one = S::splat(1.0);
        for ((y, g), u) in yc.iter_mut().zip(gc).zip(uc) {
            let g = S::load(g);
            let e = exp::<S>(S::sub(S::splat(0.0), g));
            S::store(S::mul(S::div(g, S::add(one, e)), S::load(u)), y);
        }
        for ((y, &g), &u) in yt.iter_mut().zip(gt).zip(ut) {
            *y = g / (1.0 + exp_scalar::<S>(-g)) * u;
        }
    }
}
