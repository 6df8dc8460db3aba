//! Logits → one token per sequence, with vLLM's sampling semantics (temperature, top-k, top-p,
//! a seed per request) at the cost of a few vectorised passes over the vocabulary.
//!
//! ```text
//!  logits ─ ÷ temperature, max ─┬─ top-k: k-th largest by partial selection; below it → −∞
//!  (one vector pass)            └──────────────────────────────────────────────┐
//!  exp(x − max), Σ (one vector pass) ─┬─ top-p: the cut by quickselect on mass; the rest → 0
//!                                     └──────────────────────────────────────────┐
//!  inverse CDF in vocabulary order (f64 block sums, then one block): first token past u·Σ ◄┘
//! ```
//!
//! Semantics, as vLLM's V1 sampler (`vllm/v1/sample/`): temperature below 1e-5 is greedy;
//! logits are divided by the temperature before top-k and top-p; top-k keeps every logit at least
//! the k-th largest (ties at the threshold included); top-p keeps, in order of falling
//! probability, each token whose higher-ranked tokens hold less than `p` of the (top-k
//! renormalised) mass, so at least one token always stays. Ties in probability rank by token id.
//! The draw itself is the inverse CDF over the kept tokens in vocabulary order with one uniform
//! number, so a seed gives the same token on every thread count.
//!
//! Nothing here sorts the vocabulary: top-k is one `select_nth_unstable`, and top-p narrows the
//! cut with repeated selections whose lengths halve (linear expected time), sorting only the last
//! few dozen candidates.

use std::cmp::Ordering;

use rand::RngExt;
use rand_chacha::ChaCha8Rng;
use rand_chacha::rand_core::SeedableRng;

use crate::engine::cpu::{exp_shifted_in_place, scale_logits};

/// Temperatures below this are greedy (vLLM's `_SAMPLING_EPS`).
pub const GREEDY_TEMPERATURE_MAX: f32 = 1e-5;

/// How one request samples, as the OpenAI completions API (plus vLLM's `top_k`) and TGI take it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SamplingParams {
    /// Logits are divided by it; below [`GREEDY_TEMPERATURE_MAX`] the token is the argmax.
    pub temperature: f32,
    /// Nucleus mass in (0, 1]; 1 keeps every token.
    pub top_p: f32,
    /// Keep the `top_k` largest logits; 0 keeps every token.
    pub top_k: u32,
    /// The client's seed, if it gave one.
    pub seed: Option<u64>,
}

impl SamplingParams {
    /// The argmax: what `temperature: 0` asks for.
    pub const GREEDY: SamplingParams = SamplingParams { temperature: 0.0, top_p: 1.0, top_k: 0, seed: None };

    /// A request's sampling fields with the API's defaults (temperature 1, top_p 1, top_k off;
    /// `top_k` −1 or 0 is off, as in vLLM). The error names the field and the value.
    pub fn from_request(temperature: Option<f32>, top_p: Option<f32>, top_k: Option<i64>, seed: Option<u64>) -> Result<SamplingParams, String> {
        let temperature = temperature.unwrap_or(1.0);
        if !(temperature >= 0.0 && temperature.is_finite()) {
            return Err(format!("temperature must be a finite number ≥ 0, got {temperature}"));
        }
        let top_p = top_p.unwrap_or(1.0);
        if !(top_p > 0.0 && top_p <= 1.0) {
            return Err(format!("top_p must be in (0, 1], got {top_p}"));
        }
        let top_k = match top_k.unwrap_or(0) {
            -1 | 0 => 0,
            k if k > 0 => u32::try_from(k).unwrap_or(u32::MAX),
            k => return Err(format!("top_k must be -1, 0 (all tokens) or positive, got {k}")),
        };
        Ok(SamplingParams { temperature, top_p, top_k, seed })
    }

    /// Greedy unless [`SamplingParams::temperature`] says otherwise.
    pub fn is_greedy(&self) -> bool {
        // NaN is greedy too (`from_request` refuses it; a caller building params by hand may not).
        self.temperature.is_nan() || self.temperature < GREEDY_TEMPERATURE_MAX
    }
}

impl Default for SamplingParams {
    fn default() -> SamplingParams {
        SamplingParams::GREEDY
    }
}

/// The most likely token: the index of the largest logit (the first on ties; NaNs never win).
pub fn greedy(logits: &[f32]) -> u32 {
    let mut best = 0;
    let mut best_value = f32::NEG_INFINITY;
    for (i, &l) in logits.iter().enumerate() {
        if l > best_value {
            best = i;
            best_value = l;
        }
    }
    best as u32
}

/// A uniform number in [0, 1) from `seed`: ChaCha8, the same on every machine.
pub fn uniform(seed: u64) -> f32 {
    ChaCha8Rng::seed_from_u64(seed).random::<f32>()
}

/// Buffers one thread reuses from token to token: after the first, sampling allocates nothing.
#[derive(Clone, Debug, Default)]
pub struct SampleScratch {
    /// Scaled logits, then their weights `e^(x − max)`.
    weights: Vec<f32>,
    /// A copy of the scaled logits for top-k's selection.
    select: Vec<f32>,
    /// (weight, token) of the tokens top-p ranks.
    ranked: Vec<(f32, u32)>,
    /// Block sums of the weights, for the draw.
    blocks: Vec<f64>,
}

/// The token `params` draw from `logits` given the uniform number `u` in [0, 1). Greedy
/// parameters ignore `u`.
pub fn sample(logits: &[f32], params: &SamplingParams, u: f32, scratch: &mut SampleScratch) -> u32 {
    match kept_weights(logits, params, scratch) {
        Some(_) => inverse_cdf(&scratch.weights, u, &mut scratch.blocks),
        None => greedy(logits),
    }
}

/// The distribution `params` draw from, unnormalised: `scratch`'s weights become
/// `e^(x / temperature − max)` for the tokens top-k and top-p keep and 0 for the rest, and the
/// scaled maximum `max` comes back. `None` where nothing is drawn: greedy parameters, or a row
/// without a finite logit (both take the argmax).
pub fn kept_weights(logits: &[f32], params: &SamplingParams, scratch: &mut SampleScratch) -> Option<f32> {
    if params.is_greedy() || logits.is_empty() {
        return None;
    }
    let vocab = logits.len();
    let w = &mut scratch.weights;
    w.resize(vocab, 0.0);
    let max = scale_logits(logits, params.temperature, w);
    if max == f32::NEG_INFINITY {
        return None; // No finite logit: nothing to weigh.
    }
    let k = params.top_k as usize;
    if k > 0 && k < vocab {
        let select = &mut scratch.select;
        select.clear();
        select.extend_from_slice(w);
        let (_, &mut threshold, _) = select.select_nth_unstable_by(k - 1, |a, b| b.total_cmp(a));
        for x in w.iter_mut() {
            if *x < threshold {
                *x = f32::NEG_INFINITY;
            }
        }
    }
    let total = exp_shifted_in_place(w, max);
    if params.top_p < 1.0
        && let Some(cut) = top_p_cut(w, params.top_p * total, &mut scratch.ranked)
    {
        for (i, x) in w.iter_mut().enumerate() {
            if rank_order((*x, i as u32), cut) != Ordering::Less {
                *x = 0.0;
            }
        }
    }
    Some(max)
}

impl SampleScratch {
    /// The weights [`kept_weights`] left.
    pub fn weights(&self) -> &[f32] {
        &self.weights
    }
}

/// The order top-p ranks tokens in: weight falling, then token id rising.
fn rank_order(a: (f32, u32), b: (f32, u32)) -> Ordering {
    b.0.total_cmp(&a.0).then(a.1.cmp(&b.1))
}

/// Sorting takes over from selection below this many candidates.
const SORT_BELOW: usize = 32;

/// The first token top-p drops, as (weight, token): the highest-ranked one whose
/// higher-ranked tokens weigh at least `mass`. `None` when every weighted token stays.
fn top_p_cut(w: &[f32], mass: f32, ranked: &mut Vec<(f32, u32)>) -> Option<(f32, u32)> {
    ranked.clear();
    ranked.extend(w.iter().enumerate().filter(|&(_, &x)| x > 0.0).map(|(i, &x)| (x, i as u32)));
    // Invariant: the cut's rank is in (lo, hi]; `above` is the weight of ranks below lo.
    let (mut lo, mut hi, mut above) = (0, ranked.len(), 0.0f32);
    while hi - lo > SORT_BELOW {
        let mid = lo + (hi - lo) / 2;
        ranked[lo..hi].select_nth_unstable_by(mid - lo, |a, b| rank_order(*a, *b));
        let half: f32 = ranked[lo..mid].iter().map(|p| p.0).sum();
        if above + half < mass {
            above += half;
            lo = mid;
        } else {
            hi = mid;
        }
    }
    ranked[lo..hi].sort_unstable_by(|a, b| rank_order(*a, *b));
    for &(x, i) in &ranked[lo..hi] {
        if above >= mass {
            return Some((x, i));
        }
        above += x;
    }
    // The selection left rank `hi` in place: the cut, if anything is left.
    ranked.get(hi).copied()
}

/// Weights per block of the running sum.
const CDF_BLOCK: usize = 256;

/// The first token whose running weight exceeds `u` × the total. Sums are f64 (an f32 running
/// sum over 32,000 weights drifts by more than a tail token's weight, which moved draws to a
/// neighbouring token), in blocks: the walk finds its block among the block sums (one pass
/// that vectorises), then its token inside that block.
fn inverse_cdf(w: &[f32], u: f32, blocks: &mut Vec<f64>) -> u32 {
    blocks.clear();
    blocks.extend(w.chunks(CDF_BLOCK).map(sum_f64));
    let target = f64::from(u) * blocks.iter().sum::<f64>();
    let mut before = 0.0;
    for (b, &block) in blocks.iter().enumerate() {
        if before + block > target {
            let start = b * CDF_BLOCK;
            let mut acc = before;
            let mut last_positive = None;
            for (i, &x) in w[start..].iter().take(CDF_BLOCK).enumerate() {
                if x > 0.0 {
                    acc += f64::from(x);
                    last_positive = Some(start + i);
                    if acc > target {
                        return (start + i) as u32;
                    }
                }
            }
            // The block's sum, in another order, said the target is inside: its last token.
            if let Some(i) = last_positive {
                return i as u32;
            }
        }
        before += block;
    }
    // Rounding put the target at the very end: the last token with any weight.
    w.iter().rposition(|&x| x > 0.0).unwrap_or(0) as u32
}

/// `Σ x` in f64, four accumulators in a fixed order.
fn sum_f64(x: &[f32]) -> f64 {
    let (chunks, tail) = x.as_chunks::<4>();
    let mut acc = [0.0f64; 4];
    for c in chunks {
        for (a, &v) in acc.iter_mut().zip(c) {
            *a += f64::from(v);
        }
    }
    (acc[0] + acc[1]) + (acc[2] + acc[3]) + tail.iter().map(|&v| f64::from(v)).sum::<f64>()
}

/// A request's sampler over one stream of draws (ChaCha8 from `seed`): the same seed, parameters
/// and logits give the same tokens on every machine. The engine draws one uniform per token
/// from a seed of its own ([`uniform`]) instead, so that a step's rows sample independently.
#[derive(Clone, Debug)]
pub struct Sampler {
    rng: ChaCha8Rng,
    params: SamplingParams,
    scratch: SampleScratch,
}

impl Sampler {
    pub fn new(seed: u64, params: SamplingParams) -> Sampler {
        Sampler { rng: ChaCha8Rng::seed_from_u64(seed), params, scratch: SampleScratch::default() }
    }

    /// The next token (greedy parameters draw no random numbers).
    pub fn sample(&mut self, logits: &[f32]) -> u32 {
        let u = if self.params.is_greedy() { 0.0 } else { self.rng.random::<f32>() };
        sample(logits, &self.params, u, &mut self.scratch)
    }
}

/// `len` logits shaped like a trained language model's: most near 0, a few up to ~14, a long
/// tail, which is what top-k and top-p selection work through. Deterministic in `salt`. For
/// timing the sampler (calibration, benches) and for tests: a row's cost depends on its logits'
/// shape, not on which model made them.
pub fn lm_like_logits(len: usize, salt: u64) -> Vec<f32> {
    let mut x = salt.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    (0..len)
        .map(|_| {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let r = (x >> 40) as f32 / (1u64 << 24) as f32; // [0, 1)
            12.0 * r.powi(8) + 2.0 * r
        })
        .collect()
}

#[cfg(test)]
mod tests;
