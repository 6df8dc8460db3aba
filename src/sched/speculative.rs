//! Speculative decoding, as vLLM V1 schedules it: a decoding sequence proposes up to k draft
//! tokens, and its next step computes its last token and the drafts in one pass of the target
//! model, samples after each, and keeps the drafts up to the first that disagrees, plus the
//! target's own token after them.
//!
//! ```text
//!   step n:    [last | d1 d2 d3 d4]   k = 4 drafts, verified in one pass (5 query tokens)
//!   accepted:   d1 d2 ✓  d3 ✗         → tokens: d1 d2 t3 (t3: the target's token at d3's place)
//!   KV kept:   last d1 d2             (d3 d4's KV is dropped; t3 is the next step's "last")
//! ```
//!
//! Who proposes and who verifies:
//! - **The simulator** draws how many drafts are accepted ([`Acceptance::Drawn`]): position i
//!   is accepted with probability `rates[i]` given that every earlier one was. The draw is a
//!   hash of the seed, the request and its position, so a request's acceptances do not depend
//!   on whom it is batched with.
//! - **The engine** proposes drafts itself ([`super::Scheduler::propose_drafts`], n-gram prompt
//!   lookup) and reports how many its verification kept ([`super::Scheduler::accept_drafts`]):
//!   [`Acceptance::Verified`].
//!
//! Scheduling follows vLLM V1: a decode asks for 1 + drafts tokens of the step budget and KV for
//! all of them, and when the budget runs short its drafts are cut first. Drafts never reach
//! past the request's last token (vLLM caps them at the model's length only).

/// How many of a step's drafts are accepted.
#[derive(Clone, Debug, PartialEq)]
pub enum Acceptance {
    /// Drawn: draft i (0-based) is accepted with probability `rates[i]` if drafts 0..i were.
    Drawn { rates: Vec<f64>, seed: u64 },
    /// Reported by the caller, who verified the drafts it proposed.
    Verified,
}

/// `[engine.speculative]`, resolved: the scheduler's share of it.
#[derive(Clone, Debug, PartialEq)]
pub struct SpeculativeConfig {
    /// k: the most drafts a sequence proposes for one step (vLLM's `num_speculative_tokens`).
    pub num_speculative_tokens: u32,
    pub acceptance: Acceptance,
}

impl SpeculativeConfig {
    /// The expected tokens per verifying step with all k drafts and acceptance rates `rates`:
    /// 1 + Σᵢ Πⱼ≤ᵢ rates[j]. With one rate α for all, (1 − α^(k+1)) / (1 − α).
    pub fn expected_tokens_per_step(rates: &[f64]) -> f64 {
        let mut all_accepted = 1.0;
        let mut tokens = 1.0;
        for &rate in rates {
            all_accepted *= rate;
            tokens += all_accepted;
        }
        tokens
    }
}

/// Drafts accepted of `drafts` proposed by request `request_id` at output position `position`:
/// each accepted with its position's rate while all before it were.
pub(super) fn draw_accepted(rates: &[f64], seed: u64, request_id: u32, position: u32, drafts: u32) -> u32 {
    let stream = splitmix64(seed ^ (u64::from(request_id) << 32 | u64::from(position)));
    let mut accepted = 0;
    for (i, &rate) in rates.iter().take(drafts as usize).enumerate() {
        let bits = splitmix64(stream.wrapping_add(i as u64));
        // The top 53 bits, uniform in [0, 1).
        let u = (bits >> 11) as f64 / (1u64 << 53) as f64;
        if u >= rate {
            break;
        }
        accepted += 1;
    }
    accepted
}

/// SplitMix64's finalizer: a well-mixed 64-bit hash of `x`.
fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// What speculation did, over a run: vLLM's `spec_decode` counters.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SpecStats {
    /// Sequence-steps that verified at least one draft (vLLM's `num_drafts`).
    pub drafts: u64,
    /// Draft tokens verified.
    pub draft_tokens: u64,
    /// Draft tokens accepted.
    pub accepted_tokens: u64,
    /// Accepted drafts by position: `[i]` counts the steps whose draft i was accepted.
    pub accepted_by_position: Vec<u64>,
}

impl SpecStats {
    pub(super) fn record(&mut self, drafts: u32, accepted: u32) {
        if drafts == 0 {
            return;
        }
        self.drafts += 1;
        self.draft_tokens += u64::from(drafts);
        self.accepted_tokens += u64::from(accepted);
        if self.accepted_by_position.len() < accepted as usize {
            self.accepted_by_position.resize(accepted as usize, 0);
        }
        for count in &mut self.accepted_by_position[..accepted as usize] {
            *count += 1;
        }
    }

    pub fn add(&mut self, other: &SpecStats) {
        self.drafts += other.drafts;
        self.draft_tokens += other.draft_tokens;
        self.accepted_tokens += other.accepted_tokens;
        if self.accepted_by_position.len() < other.accepted_by_position.len() {
            self.accepted_by_position.resize(other.accepted_by_position.len(), 0);
        }
        for (mine, theirs) in self.accepted_by_position.iter_mut().zip(&other.accepted_by_position) {
            *mine += theirs;
        }
    }

    /// Drafts accepted over drafts verified; 0 before any.
    pub fn acceptance_rate(&self) -> f64 {
        if self.draft_tokens == 0 { 0.0 } else { self.accepted_tokens as f64 / self.draft_tokens as f64 }
    }

    /// Tokens per verifying step: the accepted drafts and the target's own token.
    pub fn mean_tokens_per_step(&self) -> f64 {
        if self.drafts == 0 { 0.0 } else { 1.0 + self.accepted_tokens as f64 / self.drafts as f64 }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_expected_tokens_match_the_geometric_formula() {
        let (alpha, k) = (0.7f64, 4);
        let formula = (1.0 - alpha.powi(k + 1)) / (1.0 - alpha);
        let sum = SpeculativeConfig::expected_tokens_per_step(&vec![alpha; k as usize]);
        assert!((sum - formula).abs() < 1e-12, "{sum} vs {formula}");
    }

    #[test]
    fn draws_follow_the_rates_and_never_exceed_the_drafts() {
        let rates = [0.9, 0.5, 0.0, 1.0];
        let mut by_count = [0u32; 5];
        for position in 0..20_000 {
            let a = draw_accepted(&rates, 7, 3, position, 4);
            assert!(a <= 2, "rate 0 at position 2 stops every run");
            by_count[a as usize] += 1;
        }
        // P(0) = 0.1, P(1) = 0.9 × 0.5, P(2) = 0.45.
        let share = |n: u32| f64::from(n) / 20_000.0;
        assert!((share(by_count[0]) - 0.1).abs() < 0.01, "{by_count:?}");
        assert!((share(by_count[1]) - 0.45).abs() < 0.015, "{by_count:?}");
        assert_eq!(draw_accepted(&[1.0; 4], 0, 0, 0, 2), 2, "capped at the drafts proposed");
    }
}
