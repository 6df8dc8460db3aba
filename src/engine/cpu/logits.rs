//! The two vocabulary-wide passes of temperature sampling: scale the logits by the temperature
//! (finding their maximum on the way), then exponentiate them against that maximum and sum.
//! Vectorised like the other kernels: at a vocabulary of 32,000 the scalar `expf` call per logit
//! was most of a sampled step's extra time (docs/engine.md, "Sampling").

use super::simd::{self, Simd, W, exp_shifted_sum, simd_kernel};

/// `out[i] = logits[i] / temperature`, NaN logits as −∞ (they never win and weigh nothing);
/// returns the largest `out[i]` (−∞ when there is none).
///
/// # Panics
/// If the lengths differ.
pub fn scale_logits(logits: &[f32], temperature: f32, out: &mut [f32]) -> f32 {
    assert_eq!(logits.len(), out.len(), "scale_logits: out must be as long as logits");
    scale_max(simd::isa(), logits, temperature, out)
}

/// Replaces each `x[i]` by `e^(x[i] − shift)` and returns their sum, in a fixed order (the
/// same on every thread count). `shift` should be the maximum, so no term exceeds 1.
pub fn exp_shifted_in_place(x: &mut [f32], shift: f32) -> f32 {
    exp_sum(simd::isa(), x, shift)
}

simd_kernel!(fn scale_max / scale_max_body(logits: &[f32], temperature: f32, out: &mut [f32]) -> f32);
simd_kernel!(fn exp_sum / exp_sum_body(x: &mut [f32], shift: f32) -> f32);

#[inline(always)]
fn scale_max_body<S: Simd>(logits: &[f32], temperature: f32, out: &mut [f32]) -> f32 {
    let (lc, lt) = logits.as_chunks::<W>();
    let (oc, ot) = out.as_chunks_mut::<W>();
    let t = S::splat(temperature);
    let (inf, neg_inf) = (S::splat(f32::INFINITY), S::splat(f32::NEG_INFINITY));
    let mut m = neg_inf;
    for (l, o) in lc.iter().zip(oc) {
        let v = S::div(S::load(l), t);
        // `v < +∞` is false for NaN (and +∞, which a finite temperature cannot make from a
        // finite logit): those become −∞.
        let v = S::select_lt(v, inf, v, neg_inf);
        S::store(v, o);
        m = S::max(v, m);
    }
    let mut max = S::hmax(m);
    for (&l, o) in lt.iter().zip(ot) {
        let v = l / temperature;
        *o = if v < f32::INFINITY { v } else { f32::NEG_INFINITY };
        max = simd::max(*o, max);
    }
    max
}

#[inline(always)]
fn exp_sum_body<S: Simd>(x: &mut [f32], shift: f32) -> f32 {
    exp_shifted_sum::<S>(x, shift)
}
