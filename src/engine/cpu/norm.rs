//! RMSNorm (Llama's): `y = x / √(mean(x²) + ε) ⊙ w`, per token, plus vLLM's fused variant that
//! first adds a residual.

use rayon::prelude::*;

use super::simd::{self, Simd, dot, simd_kernel};

/// Elements below which the work stays on the calling thread (a decode step's few tokens):
/// handing out rayon tasks costs more than the pass itself.
const PARALLEL_MIN_ELEMS: usize = 1 << 16;

/// `out[t] = x[t] / √(mean(x[t]²) + eps) ⊙ weight` for each token `t`.
///
/// `x`, `out`: `[tokens, hidden]`; `weight`: `[hidden]`. Runs on the current rayon pool.
///
/// # Panics
/// If lengths disagree.
pub fn rms_norm(x: &[f32], weight: &[f32], eps: f32, out: &mut [f32]) {
    let hidden = weight.len();
    assert!(hidden > 0 && x.len().is_multiple_of(hidden), "rms_norm: x must be [tokens, {hidden}]");
    assert_eq!(out.len(), x.len(), "rms_norm: out must be as long as x");
    let isa = simd::isa();
    let rows = |x: &[f32], out: &mut [f32]| norm_rows(isa, x, weight, eps, out);
    if x.len() < PARALLEL_MIN_ELEMS {
        rows(x, out);
    } else {
        let per_task = rows_per_task(hidden);
        x.par_chunks(per_task * hidden).zip(out.par_chunks_mut(per_task * hidden)).for_each(|(x, y)| rows(x, y));
    }
}

/// vLLM's `fused_add_rms_norm`: `residual += x`, then `out = rms_norm(residual)`; one pass
/// over memory instead of two.
///
/// `residual`, `x`, `out`: `[tokens, hidden]`; `weight`: `[hidden]`. Runs on the current rayon pool.
///
/// # Panics
/// If lengths disagree.
pub fn add_rms_norm(residual: &mut [f32], x: &[f32], weight: &[f32], eps: f32, out: &mut [f32]) {
    let hidden = weight.len();
    assert!(hidden > 0 && x.len().is_multiple_of(hidden), "add_rms_norm: x must be [tokens, {hidden}]");
    assert!(residual.len() == x.len() && out.len() == x.len(), "add_rms_norm: residual, x and out must have equal lengths");
    let isa = simd::isa();
    let rows = |res: &mut [f32], x: &[f32], out: &mut [f32]| add_norm_rows(isa, res, x, weight, eps, out);
    if x.len() < PARALLEL_MIN_ELEMS {
        rows(residual, x, out);
    } else {
        let chunk = rows_per_task(hidden) * hidden;
        residual
            .par_chunks_mut(chunk)
            .zip(x.par_chunks(chunk))
            .zip(out.par_chunks_mut(chunk))
            .for_each(|((r, x), y)| rows(r, x, y));
    }
}

/// Rows per rayon task: about 16k elements, enough to amortise the task.
fn rows_per_task(hidden: usize) -> usize {
    (PARALLEL_MIN_ELEMS / 4 / hidden).max(1)
}

simd_kernel!(fn norm_rows / norm_rows_body(x: &[f32], w: &[f32], eps: f32, out: &mut [f32]));
simd_kernel!(fn add_norm_rows / add_norm_rows_body(res: &mut [f32], x: &[f32], w: &[f32], eps: f32, out: &mut [f32]));

#[inline(always)]
fn norm_rows_body<S: Simd>(x: &[f32], w: &[f32], eps: f32, out: &mut [f32]) {
    let hidden = w.len();
    for (xr, yr) in x.chunks_exact(hidden).zip(out.chunks_exact_mut(hidden)) {
        norm_row::<S>(xr, w, eps, yr);
    }
}

#[inline(always)]
fn add_norm_rows_body<S: Simd>(res: &mut [f32], x: &[f32], w: &[f32], eps: f32, out: &mut [f32]) {
    let hidden = w.len();
    for ((rr, xr), yr) in res.chunks_exact_mut(hidden).zip(x.chunks_exact(hidden)).zip(out.chunks_exact_mut(hidden)) {
        for (r, &v) in rr.iter_mut().zip(xr) {
            *r += v;
        }
        norm_row::<S>(rr, w, eps, yr);
    }
}

#[inline(always)]
fn norm_row<S: Simd>(x: &[f32], w: &[f32], eps: f32, y: &mut [f32]) {
    let inv_rms = 1.0 / (dot::<S>(x, x) / x.len() as f32 + eps).sqrt();
    for ((y, &x), &w) in y.iter_mut().zip(x).zip(w) {
        *y = x * inv_rms * w;
    }
}
