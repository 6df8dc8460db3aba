//! Rotary position embedding, Llama style ("rotate half"): within each head, dimension `i` and
//! `i + head_dim/2` form a pair rotated by the angle `pos · θ^(−2i/head_dim)`.
//!
//! ```text
//! y[i]        = x[i]·cos − x[i + half]·sin
//! y[i + half] = x[i + half]·cos + x[i]·sin        for i < half = head_dim / 2
//! ```
//!
//! The cos/sin table is computed once for all positions (as vLLM does): the trigonometry costs
//! far more than the rotation, and the table turns each step into multiply-adds.

use rayon::prelude::*;

use super::simd::{self, Simd, W, simd_kernel};

/// Tokens below which the rotation stays on the calling thread (a decode step's batch).
const PARALLEL_MIN_TOKENS: usize = 64;

/// A cos/sin table for one head dimension and base, for positions `0..max_positions`.
#[derive(Clone, Debug)]
pub struct Rope {
    head_dim: usize,
    max_positions: usize,
    /// `[max_positions, head_dim / 2]`.
    cos: Vec<f32>,
    /// `[max_positions, head_dim / 2]`.
    sin: Vec<f32>,
}

impl Rope {
    /// `theta` is the base (`rope_theta` in a Hugging Face config: 10 000 for Llama 2, 500 000
    /// for Llama 3). Angles are computed in f64, then rounded, so the table is accurate at
    /// large positions (Hugging Face's f32 `pos · inv_freq` drifts by ~1e-3 rad there).
    ///
    /// # Panics
    /// If `head_dim` is odd or zero.
    pub fn new(head_dim: usize, theta: f64, max_positions: usize) -> Rope {
        assert!(head_dim > 0 && head_dim.is_multiple_of(2), "Rope: head_dim {head_dim} must be even and positive");
        let half = head_dim / 2;
        let inv_freq: Vec<f64> = (0..half).map(|i| theta.powf(-((2 * i) as f64) / head_dim as f64)).collect();
        let mut cos = Vec::with_capacity(max_positions * half);
        let mut sin = Vec::with_capacity(max_positions * half);
        for pos in 0..max_positions {
            for &f in &inv_freq {
                let (s, c) = (pos as f64 * f).sin_cos();
                cos.push(c as f32);
                sin.push(s as f32);
            }
        }
        Rope { head_dim, max_positions, cos, sin }
    }

    pub fn head_dim(&self) -> usize {
        self.head_dim
    }

    pub fn max_positions(&self) -> usize {
        self.max_positions
    }

    /// Rotates, in place, every head of `q` (`[tokens, num_heads, head_dim]`) and `k`
    /// (`[tokens, num_kv_heads, head_dim]`); token `t` is at position `positions[t]`.
    /// Runs on the current rayon pool.
    ///
    /// # Panics
    /// If lengths disagree or a position is `>= max_positions`.
    pub fn apply(&self, q: &mut [f32], k: &mut [f32], positions: &[usize], num_heads: usize, num_kv_heads: usize) {
        self.apply_one(q, positions, num_heads);
        self.apply_one(k, positions, num_kv_heads);
    }

    /// Rotates every head of `x` (`[tokens, heads, head_dim]`) in place, token `t` at
    /// `positions[t]`.
    ///
    /// # Panics
    /// If lengths disagree or a position is `>= max_positions`.
    pub fn apply_one(&self, x: &mut [f32], positions: &[usize], heads: usize) {
        let row = heads * self.head_dim;
        assert_eq!(x.len(), positions.len() * row, "Rope: x must be [{} tokens, {heads}, {}]", positions.len(), self.head_dim);
        if let Some(&p) = positions.iter().find(|&&p| p >= self.max_positions) {
            panic!("Rope: position {p} is beyond the table's {} positions", self.max_positions);
        }
        if row == 0 {
            return;
        }
        let isa = simd::isa();
        let half = self.head_dim / 2;
        let rows = |x: &mut [f32], positions: &[usize]| rotate_rows(isa, x, positions, &self.cos, &self.sin, half);
        if positions.len() < PARALLEL_MIN_TOKENS {
            rows(x, positions);
        } else {
            let per_task = PARALLEL_MIN_TOKENS / 4;
            x.par_chunks_mut(per_task * row).zip(positions.par_chunks(per_task)).for_each(|(x, p)| rows(x, p));
        }
    }

}

simd_kernel!(fn rotate_rows / rotate_rows_body(
    x: &mut [f32], positions: &[usize], cos: &[f32], sin: &[f32], half: usize
));

/// Rotates `x` (`[positions.len(), heads, 2·half]`) with the table rows of `positions`.
#[inline(always)]
fn rotate_rows_body<S: Simd>(x: &mut [f32], positions: &[usize], cos: &[f32], sin: &[f32], half: usize) {
    let row = x.len() / positions.len().max(1);
    for (xr, &pos) in x.chunks_exact_mut(row).zip(positions) {
        let cos = &cos[pos * half..(pos + 1) * half];
        let sin = &sin[pos * half..(pos + 1) * half];
        let (cc, ct) = cos.as_chunks::<W>();
        let (sc, st) = sin.as_chunks::<W>();
        for head in xr.chunks_exact_mut(2 * half) {
            let (x1, x2) = head.split_at_mut(half);
            let (x1c, x1t) = x1.as_chunks_mut::<W>();
            let (x2c, x2t) = x2.as_chunks_mut::<W>();
            for (((a, b), c), s) in x1c.iter_mut().zip(x2c.iter_mut()).zip(cc).zip(sc) {
                let (av, bv, cv, sv) = (S::load(a), S::load(b), S::load(c), S::load(s));
                S::store(S::fma(av, cv, S::mul(S::sub(S::splat(0.0), bv), sv)), a);
                S::store(S::fma(bv, cv, S::mul(av, sv)), b);
            }
            for (((a, b), &c), &s) in x1t.iter_mut().zip(x2t.iter_mut()).zip(ct).zip(st) {
                let (av, bv) = (*a, *b);
                *a = S::fmadd(av, c, -bv * s);
                *b = S::fmadd(bv, c, av * s);
            }
        }
    }
}
