//! A step of data-parallel ranks that share a mixture of experts' expert layers, as vLLM runs
//! `--data-parallel-size d` on a MoE model (see [`crate::scenario::parallel`]).
//!
//! ```text
//!  rank 0: attention, dense layers, shared experts, router on its batch ─┐ slowest rank
//!  rank 1: … on its batch                                                ├──────────────┐
//!  rank d−1: … (a dummy batch when it has nothing to do)                 ─┘              │
//!                                    dispatch ─► routed experts on all ranks' tokens ─► combine
//! ```
//!
//! The ranks meet at every expert layer, so a step lasts as long as the slowest rank's own work
//! plus the expert layers, which run on every rank's tokens at once: the routed experts on one
//! GPU of the `d × t` that hold them, and the token exchange ([`TokenExchange`]), which ends
//! with the largest rank's share. When every rank replays a decode graph, vLLM pads each to the
//! largest one's token count so that their graphs and collectives agree
//! (`coordinate_batch_across_dp` in `vllm/v1/worker/dp_utils.py`), and the experts see `d ×`
//! that many rows; otherwise each rank sends its own tokens, and a rank with nothing to do a
//! dummy batch of one.
//!
//! The rank's own part is priced by `rank`, the model with its routed experts left out; the
//! experts by `experts`, the model on all `d × t` GPUs, of which only
//! [`CostModel::routed_experts_s`] is read.

use super::token_exchange::TokenExchange;
use super::{CostModel, StepCost, to_ns};
use crate::sched::Batch;

pub struct DataParallelCost {
    rank: Box<dyn CostModel + Sync>,
    experts: Box<dyn CostModel + Sync>,
    exchange: TokenExchange,
    ranks: u32,
}

impl DataParallelCost {
    /// `rank`: one rank's model without its routed experts; `experts`: the model on every
    /// rank's GPUs; `ranks`: the data-parallel size.
    pub fn new(rank: Box<dyn CostModel + Sync>, experts: Box<dyn CostModel + Sync>, exchange: TokenExchange, ranks: u32) -> DataParallelCost {
        assert!(ranks >= 1, "at least one rank");
        DataParallelCost { rank, experts, exchange, ranks }
    }

    /// The expert layers of a step whose experts receive `rows` token rows from all ranks, and
    /// whose largest rank sends `rows_largest`: `(experts_ns, exchange_ns)`.
    pub fn expert_layers_ns(&self, rows: f64, rows_largest: u32) -> (u64, u64) {
        (to_ns(self.experts.routed_experts_s(rows)), to_ns(self.exchange.time_s(f64::from(rows_largest))))
    }
}

/// `(rows, rows_largest)`: the token rows the experts receive from the `ranks` ranks, whose
/// batches are `batches` (an empty batch, or one not listed, is an idle rank's dummy batch of one
/// token), and the largest rank's rows, which the exchange waits for.
fn expert_rows(batches: &[&Batch], ranks: u32) -> (f64, u32) {
    let busy = || batches.iter().filter(|b| !b.is_empty());
    let largest = busy().map(|b| b.graph_size.unwrap_or_else(|| b.tokens())).max().unwrap_or(0).max(1);
    let idle = ranks.saturating_sub(busy().count() as u32);
    let rows = if busy().all(|b| b.graph_size.is_some()) {
        f64::from(ranks) * f64::from(largest)
    } else {
        busy().map(|b| f64::from(b.tokens())).sum::<f64>() + f64::from(idle)
    };
    (rows, largest)
}

impl CostModel for DataParallelCost {
    /// `batch` on one rank while the others run dummy batches.
    fn predict(&self, batch: &Batch) -> StepCost {
        self.predict_ranks(&[batch])
    }

    fn predict_ranks(&self, ranks: &[&Batch]) -> StepCost {
        let slowest = ranks.iter().filter(|b| !b.is_empty()).map(|b| self.rank.predict(b)).max_by_key(|c| c.total_ns);
        let Some(slowest) = slowest else { return StepCost::default() };
        let (rows, rows_largest) = expert_rows(ranks, self.ranks);
        let (experts_ns, exchange_ns) = self.expert_layers_ns(rows, rows_largest);
        StepCost {
            total_ns: slowest.total_ns + experts_ns + exchange_ns,
            gemm_ns: slowest.gemm_ns + experts_ns,
            communication_ns: slowest.communication_ns + exchange_ns,
            ..slowest
        }
    }

    fn source(&self) -> &'static str {
        self.rank.source()
    }

    fn reads_max_context(&self) -> bool {
        self.rank.reads_max_context()
    }

    fn prices_each_sequence(&self) -> bool {
        self.rank.prices_each_sequence()
    }

    fn routed_experts_s(&self, rows: f64) -> f64 {
        self.experts.routed_experts_s(rows)
    }
}
