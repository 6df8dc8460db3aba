//! Log-probabilities of a sampled token, and of the most likely tokens, from its row of logits:
//! what the OpenAI routes' `logprobs` and TGI's token `logprob` report.
//!
//! The distribution is `softmax(logits / temperature)`: at temperature 1 the model's own, as
//! vLLM V1 reports by default (`logprobs_mode = "raw_logprobs"`); TGI reports the distribution
//! it samples from, so its routes pass the request's temperature. Top-k and top-p are not applied
//! (docs/engine.md says where that differs from TGI).

use std::cell::RefCell;

use super::engine::{LogprobsAsk, TokenLogprobs};
use crate::engine::cpu::{exp_shifted_in_place, scale_logits};
use crate::engine::model::GREEDY_TEMPERATURE_MAX;

/// Most alternatives a request may ask for: vLLM's default `max_logprobs`.
pub const TOP_LOGPROBS_MAX: u32 = 20;

thread_local! {
    /// The scaled row, reused from token to token on each sampling thread.
    static SCALED: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// `token`'s log-probability in `row`, and the `ask.top` most likely tokens'. NaN logits count
/// as −∞, as in the sampler. A row without a finite logit gives −∞ everywhere.
pub fn token_logprobs(row: &[f32], token: u32, ask: LogprobsAsk) -> TokenLogprobs {
    // A greedy request's distribution is the model's own: dividing by ~0 would make it one-hot.
    let temperature = if ask.temperature > GREEDY_TEMPERATURE_MAX { ask.temperature } else { 1.0 };
    let log_norm = SCALED.with(|scaled| {
        let mut scaled = scaled.borrow_mut();
        scaled.resize(row.len(), 0.0);
        let max = scale_logits(row, temperature, &mut scaled);
        if max == f32::NEG_INFINITY {
            return f32::INFINITY;
        }
        max + exp_shifted_in_place(&mut scaled, max).ln()
    });
    let logprob = |id: u32| {
        let x = row.get(id as usize).copied().unwrap_or(f32::NAN);
        if x.is_nan() || log_norm == f32::INFINITY { f32::NEG_INFINITY } else { x / temperature - log_norm }
    };
    let top = most_likely(row, ask.top as usize).into_iter().map(|id| (id, logprob(id))).collect();
    TokenLogprobs { logprob: logprob(token), top }
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

    fn reference(row: &[f32], t: f64) -> Vec<f64> {
        let z: Vec<f64> = row.iter().map(|&x| x as f64 / t).collect();
        let max = z.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let lse = max + z.iter().map(|v| (v - max).exp()).sum::<f64>().ln();
        z.iter().map(|v| v - lse).collect()
    }

    #[test]
    fn logprobs_match_an_f64_log_softmax() {
        let row: Vec<f32> = (0..1000).map(|i| ((i * 7919) % 1000) as f32 / 97.0 - 3.0).collect();
        for t in [1.0f32, 0.7, 2.0] {
            let got = token_logprobs(&row, 17, LogprobsAsk { top: 5, temperature: t });
            let want = reference(&row, t as f64);
            assert!((got.logprob as f64 - want[17]).abs() < 1e-4, "{} vs {}", got.logprob, want[17]);
            let mut order: Vec<usize> = (0..row.len()).collect();
            order.sort_by(|&a, &b| row[b].total_cmp(&row[a]).then(a.cmp(&b)));
            assert_eq!(got.top.iter().map(|&(id, _)| id as usize).collect::<Vec<_>>(), order[..5]);
            for &(id, lp) in &got.top {
                assert!((lp as f64 - want[id as usize]).abs() < 1e-4);
            }
        }
    }

    #[test]
    fn greedy_asks_report_the_models_own_distribution_and_nan_is_impossible() {
        let row = [1.0f32, f32::NAN, 3.0, 3.0];
        let greedy = token_logprobs(&row, 2, LogprobsAsk { top: 3, temperature: 0.0 });
        let raw = token_logprobs(&row, 2, LogprobsAsk { top: 3, temperature: 1.0 });
        assert_eq!(greedy, raw);
        assert_eq!(raw.top.iter().map(|&(id, _)| id).collect::<Vec<_>>(), [2, 3, 0], "ties by id, NaN never ranked above a number");
        assert_eq!(token_logprobs(&row, 1, LogprobsAsk { top: 0, temperature: 1.0 }).logprob, f32::NEG_INFINITY);
        let none = token_logprobs(&[f32::NAN, f32::NEG_INFINITY], 0, LogprobsAsk { top: 1, temperature: 1.0 });
        assert_eq!(none.logprob, f32::NEG_INFINITY);
    }
}
