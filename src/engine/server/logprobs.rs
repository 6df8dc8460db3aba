//! Log-probabilities of a sampled token, and of the most likely tokens, from its row of logits:
//! what the OpenAI routes' `logprobs` and TGI's token `logprob` report.
//!
//! Two distributions. The OpenAI routes report the model's own, `log_softmax(logits)`, as vLLM V1
//! does by default (`logprobs_mode = "raw_logprobs"`). TGI reports the one it samples from: its
//! warpers divide the logits by the temperature and set what top-k and top-p drop to −∞, then it
//! takes `log_softmax` (`NextTokenChooser`, `StaticWarper`). Here that is the sampler's own
//! distribution ([`kept_weights`]), whose top-k and top-p keep the same tokens as TGI's warpers
//! (ties at top-k's threshold kept; top-p over the top-k survivors, keeping each token whose more
//! likely tokens hold less than `top_p`): a kept token's log-probability is renormalised over the
//! kept ones, a dropped token's is −∞. A greedy request samples from nothing, and reports the
//! model's own.

use std::cell::RefCell;

use super::engine::{LogprobsAsk, TokenLogprobs};
use crate::engine::cpu::{exp_shifted_in_place, scale_logits};
use crate::engine::model::{SampleScratch, SamplingParams, kept_weights};

/// Most alternatives a request may ask for: vLLM's default `max_logprobs`.
pub const TOP_LOGPROBS_MAX: u32 = 20;

thread_local! {
    /// The scaled row, reused from token to token on each sampling thread.
    static SCALED: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
    /// The sampled distribution's weights, likewise.
    static KEPT: RefCell<SampleScratch> = RefCell::new(SampleScratch::default());
}

/// `token`'s log-probability in `row`, and the `ask.top` most likely tokens', of the
/// distribution `ask` names (`params` are the request's sampling). NaN logits count as −∞, as in
/// the sampler. A row without a finite logit gives −∞ everywhere.
pub fn token_logprobs(row: &[f32], token: u32, ask: LogprobsAsk, params: &SamplingParams) -> TokenLogprobs {
    let logprob = |id: u32, of: &dyn Fn(usize, f32) -> f32| match row.get(id as usize) {
        Some(&x) if !x.is_nan() => of(id as usize, x),
        _ => f32::NEG_INFINITY,
    };
    // Most likely by logit is most likely in either distribution: top-k and top-p keep a prefix
    // of that order, and dividing by a temperature keeps it.
    let top_ids = most_likely(row, ask.top as usize);
    let sampled = ask.sampled.then(|| {
        KEPT.with(|kept| {
            let mut kept = kept.borrow_mut();
            let max = kept_weights(row, params, &mut kept)?;
            let w = kept.weights();
            let log_total = w.iter().map(|&x| f64::from(x)).sum::<f64>().ln() as f32;
            // A weight of 0 is a token the sampler never draws: dropped, or too unlikely for f32.
            let of = |i: usize, x: f32| if w[i] > 0.0 { x / params.temperature - max - log_total } else { f32::NEG_INFINITY };
            Some(TokenLogprobs { logprob: logprob(token, &of), top: top_ids.iter().map(|&id| (id, logprob(id, &of))).collect() })
        })
    });
    if let Some(Some(sampled)) = sampled {
        return sampled;
    }
    let log_norm = SCALED.with(|scaled| {
        let mut scaled = scaled.borrow_mut();
        scaled.resize(row.len(), 0.0);
        let max = scale_logits(row, 1.0, &mut scaled);
        if max == f32::NEG_INFINITY {
            return f32::INFINITY;
        }
        max + exp_shifted_in_place(&mut scaled, max).ln()
    });
    let of = |_: usize, x: f32| if log_norm == f32::INFINITY { f32::NEG_INFINITY } else { x - log_norm };
    TokenLogprobs { logprob: logprob(token, &of), top: top_ids.iter().map(|&id| (id, logprob(id, &of))).collect() }
}

/// The ids of the `n` largest logits, largest first, lower id first among equals; NaN last.
fn most_likely(row: &[f32], n: usize) -> Vec<u32> {
    let n = n.min(row.len());
    if n == 0 {
        return Vec::new();
    }
    // Few insertions after the first `n` on real logits: one pass, a short sorted buffer.
    let mut best: Vec<(f32, u32)> = Vec::with_capacity(n + 1);
    // What a logit must beat once `best` is full: the one comparison most logits get.
    let mut bar = f32::NEG_INFINITY;
    for (id, &x) in row.iter().enumerate() {
        let x = if x.is_nan() { f32::NEG_INFINITY } else { x };
        if best.len() == n && x <= bar {
            continue;
        }
        let at = best.partition_point(|&(y, _)| y >= x);
        best.insert(at, (x, id as u32));
        best.truncate(n);
        if best.len() == n {
            bar = best[n - 1].0;
        }
    }
    best.into_iter().map(|(_, id)| id).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `log_softmax(row / t)` over the tokens `kept` says, −∞ elsewhere, in f64.
    fn reference(row: &[f32], t: f64, kept: &dyn Fn(usize) -> bool) -> Vec<f64> {
        let z: Vec<f64> = row.iter().enumerate().map(|(i, &x)| if kept(i) { x as f64 / t } else { f64::NEG_INFINITY }).collect();
        let max = z.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let lse = max + z.iter().map(|v| (v - max).exp()).sum::<f64>().ln();
        z.iter().map(|v| v - lse).collect()
    }

    fn row() -> Vec<f32> {
        (0..1000).map(|i| ((i * 7919) % 1000) as f32 / 97.0 - 3.0).collect()
    }

    fn params(temperature: f32, top_p: f32, top_k: u32) -> SamplingParams {
        SamplingParams { temperature, top_p, top_k, seed: None }
    }

    /// Ids by falling logit, lower id first among equals.
    fn ranked(row: &[f32]) -> Vec<usize> {
        let mut order: Vec<usize> = (0..row.len()).collect();
        order.sort_by(|&a, &b| row[b].total_cmp(&row[a]).then(a.cmp(&b)));
        order
    }

    fn assert_close(got: &TokenLogprobs, token: usize, want: &[f64]) {
        assert!((got.logprob as f64 - want[token]).abs() < 1e-4 || (got.logprob == f32::NEG_INFINITY && want[token] == f64::NEG_INFINITY), "{} vs {}", got.logprob, want[token]);
        for &(id, lp) in &got.top {
            let w = want[id as usize];
            assert!((lp as f64 - w).abs() < 1e-4 || (lp == f32::NEG_INFINITY && w == f64::NEG_INFINITY), "{id}: {lp} vs {w}");
        }
    }

    #[test]
    fn the_models_own_logprobs_match_an_f64_log_softmax_whatever_the_sampling() {
        let row = row();
        let order = ranked(&row);
        let want = reference(&row, 1.0, &|_| true);
        for p in [params(1.0, 1.0, 0), params(0.7, 0.9, 50), params(0.0, 1.0, 0)] {
            let got = token_logprobs(&row, 17, LogprobsAsk { top: 5, sampled: false }, &p);
            assert_close(&got, 17, &want);
            assert_eq!(got.top.iter().map(|&(id, _)| id as usize).collect::<Vec<_>>(), order[..5]);
        }
    }

    #[test]
    fn the_sampled_distribution_is_log_softmax_after_temperature_top_k_and_top_p() {
        let row = row();
        let order = ranked(&row);
        let rank = |i: usize| order.iter().position(|&j| j == i).unwrap();
        let best = order[0];
        // Temperature alone: every token kept, the logits divided.
        let got = token_logprobs(&row, 17, LogprobsAsk { top: 5, sampled: true }, &params(0.7, 1.0, 0));
        assert_close(&got, 17, &reference(&row, 0.7, &|_| true));
        // Top-k 50: the 50 largest kept and renormalised, the rest −∞.
        let top_k = params(2.0, 1.0, 50);
        let want = reference(&row, 2.0, &|i| rank(i) < 50);
        assert_close(&token_logprobs(&row, best as u32, LogprobsAsk { top: 3, sampled: true }, &top_k), best, &want);
        let dropped = order[60] as u32;
        assert_eq!(token_logprobs(&row, dropped, LogprobsAsk { top: 0, sampled: true }, &top_k).logprob, f32::NEG_INFINITY);
        // Top-p 0.5 at temperature 0.5: each token whose more likely tokens hold less than half
        // the mass, renormalised over those.
        let t = 0.5f32;
        let full = reference(&row, t as f64, &|_| true);
        let mut above = 0.0;
        let kept: Vec<bool> = {
            let mut kept = vec![false; row.len()];
            for &i in &order {
                if above < 0.5 {
                    kept[i] = true;
                }
                above += full[i].exp();
            }
            kept
        };
        let n_kept = kept.iter().filter(|&&k| k).count();
        assert!(n_kept > 1 && n_kept < row.len(), "{n_kept}");
        let want = reference(&row, t as f64, &|i| kept[i]);
        let top_p = params(t, 0.5, 0);
        for token in [order[0], order[n_kept - 1], order[n_kept]] {
            let got = token_logprobs(&row, token as u32, LogprobsAsk { top: n_kept as u32 + 1, sampled: true }, &top_p);
            assert_close(&got, token, &want);
            // The most likely alternatives still come in logit order; the first dropped is −∞.
            assert_eq!(got.top.last().unwrap(), &(order[n_kept] as u32, f32::NEG_INFINITY));
        }
        // The kept tokens' probabilities sum to 1: it is the distribution drawn from.
        let sum: f64 = (0..row.len()).map(|i| f64::from(token_logprobs(&row, i as u32, LogprobsAsk { top: 0, sampled: true }, &top_p).logprob).exp()).sum();
        assert!((sum - 1.0).abs() < 1e-4, "{sum}");
    }

    #[test]
    fn greedy_asks_report_the_models_own_distribution_and_nan_is_impossible() {
        let row = [1.0f32, f32::NAN, 3.0, 3.0];
        let greedy = token_logprobs(&row, 2, LogprobsAsk { top: 3, sampled: true }, &SamplingParams::GREEDY);
        let raw = token_logprobs(&row, 2, LogprobsAsk { top: 3, sampled: false }, &params(1.0, 1.0, 0));
        assert_eq!(greedy, raw);
        assert_eq!(raw.top.iter().map(|&(id, _)| id).collect::<Vec<_>>(), [2, 3, 0], "ties by id, NaN never ranked above a number");
        assert_eq!(token_logprobs(&row, 1, LogprobsAsk { top: 0, sampled: false }, &SamplingParams::GREEDY).logprob, f32::NEG_INFINITY);
        assert_eq!(token_logprobs(&row, 1, LogprobsAsk { top: 0, sampled: true }, &params(1.0, 1.0, 0)).logprob, f32::NEG_INFINITY);
        let none = token_logprobs(&[f32::NAN, f32::NEG_INFINITY], 0, LogprobsAsk { top: 1, sampled: true }, &params(1.0, 1.0, 0));
        assert_eq!(none.logprob, f32::NEG_INFINITY);
    }
}
