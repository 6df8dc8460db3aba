//! The per-step cost of turning logits into tokens: a few passes over the vocabulary for each
//! sequence that samples, so `sampled sequences × vocab × ns per logit`. Greedy decoding is one
//! argmax pass; temperature > 0 adds the scaling, the exponentials and, with top-k or top-p, a
//! selection (src/engine/model/sampling.rs). The cost models add it to the step's elementwise
//! time, where the CPU engine's trace puts its sampling time too.
//!
//! The figure is the engine's, not a datasheet's: calibration times servesim's host sampler on
//! the machine (a profile's `sampling` rows, `calibrate::sampling`), and the calibrated cost
//! model prices steps with the greedy figure because benchmark clients ask for greedy tokens.
//! Zero (the default, and any profile without those rows) leaves sampling unpriced: vLLM
//! samples on the GPU, in microseconds beside the forward pass.

/// Nanoseconds per logit of each sampled row.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct SamplingCost {
    ns_per_logit: f64,
}

impl SamplingCost {
    /// `ns_per_logit` must be finite and ≥ 0.
    pub fn per_logit_ns(ns_per_logit: f64) -> Result<SamplingCost, String> {
        if ns_per_logit.is_finite() && ns_per_logit >= 0.0 {
            Ok(SamplingCost { ns_per_logit })
        } else {
            Err(format!("sampling cost must be a finite number of ns per logit ≥ 0, got {ns_per_logit}"))
        }
    }

    pub fn ns_per_logit(&self) -> f64 {
        self.ns_per_logit
    }

    /// Seconds a step spends sampling `sampled_seqs` rows of `vocab` logits.
    pub fn step_s(&self, sampled_seqs: f64, vocab: f64) -> f64 {
        sampled_seqs * vocab * self.ns_per_logit * 1e-9
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_step_pays_per_sampled_row_and_logit() {
        let cost = SamplingCost::per_logit_ns(0.25).unwrap();
        // 32 rows of 32,000 logits at 0.25 ns: 256 µs.
        assert!((cost.step_s(32.0, 32_000.0) - 256e-6).abs() < 1e-12);
        assert_eq!(cost.step_s(0.0, 32_000.0), 0.0);
        assert_eq!(SamplingCost::default().step_s(32.0, 32_000.0), 0.0);
        for bad in [-1.0, f64::NAN, f64::INFINITY] {
            assert!(SamplingCost::per_logit_ns(bad).is_err(), "{bad}");
        }
    }
}
