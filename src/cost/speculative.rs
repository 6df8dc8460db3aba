//! The price of a step with speculative decoding: the target model's pass over the batch as
//! the scheduler formed it (decodes verify their drafts as extra query rows, which the target's
//! cost model prices), plus the proposer's passes.
//!
//! A draft model (or an MTP / EAGLE head) runs in the same step, after the target, as vLLM V1's
//! drafter does:
//! - first over the step's tokens, as the target did (prompt chunks included, so its KV keeps
//!   up), taken as the batch itself: verifying decodes count their drafts, where vLLM's drafter
//!   sees only the accepted ones (an upper bound, by at most k rows per sequence);
//! - then k − 1 more passes of one token per sampling sequence, each on a context one longer.
//!
//! Only the proposer's GPU time is added: its CPU work is part of the step the target's
//! overheads already price. N-gram proposals cost nothing here (a CPU lookup of microseconds).

use super::{CostModel, StepCost};
use crate::sched::{Batch, SeqWork};

pub struct SpeculativeCost {
    target: Box<dyn CostModel + Sync>,
    draft: Box<dyn CostModel + Sync>,
    num_speculative_tokens: u32,
}

impl SpeculativeCost {
    pub fn new(target: Box<dyn CostModel + Sync>, draft: Box<dyn CostModel + Sync>, num_speculative_tokens: u32) -> SpeculativeCost {
        SpeculativeCost { target, draft, num_speculative_tokens }
    }
}

/// A cost's GPU time: everything but the CPU overhead.
fn gpu(cost: StepCost) -> StepCost {
    StepCost { total_ns: cost.total_ns - cost.overhead_ns, overhead_ns: 0, ..cost }
}

fn add(a: &mut StepCost, b: StepCost) {
    a.total_ns += b.total_ns;
    a.gemm_ns += b.gemm_ns;
    a.attention_ns += b.attention_ns;
    a.elementwise_ns += b.elementwise_ns;
    a.communication_ns += b.communication_ns;
    a.overhead_ns += b.overhead_ns;
}

impl CostModel for SpeculativeCost {
    fn predict(&self, batch: &Batch) -> StepCost {
        let mut cost = self.target.predict(batch);
        if batch.is_empty() {
            return cost;
        }
        add(&mut cost, gpu(self.draft.predict(batch)));
        let mut next = Batch::default();
        for pass in 1..self.num_speculative_tokens {
            next.clear();
            for work in batch.seqs.iter().filter(|w| w.samples_token) {
                let context_tokens = work.context_tokens + work.new_tokens + pass - 1;
                next.push_decode(SeqWork { seq: work.seq, new_tokens: 1, context_tokens, samples_token: true, draft_tokens: 0 });
            }
            if next.is_empty() {
                break;
            }
            add(&mut cost, gpu(self.draft.predict(&next)));
        }
        cost
    }

    fn source(&self) -> &'static str {
        self.target.source()
    }

    fn reads_max_context(&self) -> bool {
        self.target.reads_max_context() || self.draft.reads_max_context()
    }

    fn prices_each_sequence(&self) -> bool {
        self.target.prices_each_sequence() || self.draft.prices_each_sequence()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 1 µs per token, 10 µs of overhead a step.
    struct PerToken;
    impl CostModel for PerToken {
        fn predict(&self, batch: &Batch) -> StepCost {
            let gemm_ns = 1_000 * u64::from(batch.tokens());
            StepCost { total_ns: gemm_ns + 10_000, gemm_ns, overhead_ns: 10_000, ..StepCost::default() }
        }
        fn source(&self) -> &'static str {
            "per token"
        }
    }

    #[test]
    fn the_draft_runs_over_the_batch_then_k_minus_1_single_token_passes_without_overhead() {
        let mut batch = Batch::default();
        // Two decodes verifying 3 drafts each (4 rows), and a prompt chunk that does not sample.
        for seq in 0..2 {
            batch.push_decode(SeqWork { seq, new_tokens: 4, context_tokens: 100, samples_token: true, draft_tokens: 3 });
        }
        batch.push_prefill(SeqWork { seq: 2, new_tokens: 50, context_tokens: 0, samples_token: false, draft_tokens: 0 });
        let cost = SpeculativeCost::new(Box::new(PerToken), Box::new(PerToken), 3).predict(&batch);
        // Target: 58 tokens + overhead; draft: 58 tokens, then 2 passes of 2 tokens.
        assert_eq!(cost.total_ns, 58_000 + 10_000 + 58_000 + 2 * 2_000);
        assert_eq!(cost.overhead_ns, 10_000);
    }
}
