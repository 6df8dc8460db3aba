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
    /// Token rows a rank sends through the expert layers at once, where the engine splits a
    /// larger step into rounds of dispatch, experts and combine (vLLM's
    /// `VLLM_MOE_DP_CHUNK_SIZE` under DeepEP's low-latency kernels); `None`: one round.
    chunk_rows: Option<u32>,
}

impl DataParallelCost {
    /// `rank`: one rank's model without its routed experts; `experts`: the model on every
    /// rank's GPUs; `ranks`: the data-parallel size; `chunk_rows`: see the field.
    pub fn new(
        rank: Box<dyn CostModel + Sync>,
        experts: Box<dyn CostModel + Sync>,
        exchange: TokenExchange,
        ranks: u32,
        chunk_rows: Option<u32>,
    ) -> DataParallelCost {
        assert!(ranks >= 1, "at least one rank");
        assert!(chunk_rows != Some(0), "a chunk holds a row at least");
        DataParallelCost { rank, experts, exchange, ranks, chunk_rows }
    }

    /// The expert layers of a step whose ranks send `rows` token rows each: `(experts_ns,
    /// exchange_ns)`, over every round. The experts see all ranks' rows of a round at once; the
    /// exchange waits for the largest rank's.
    pub fn expert_layers_ns(&self, rows: &[u32]) -> (u64, u64) {
        let largest = rows.iter().copied().max().unwrap_or(1).max(1);
        let chunk = self.chunk_rows.unwrap_or(largest).min(largest);
        let (mut experts_s, mut exchange_s) = (0.0, 0.0);
        for start in (0..largest).step_by(chunk as usize) {
            // vLLM clamps a rank that has run out of rows to its last one, which it runs again.
            let round: f64 = rows.iter().map(|&r| f64::from(r.saturating_sub(start).clamp(1, chunk))).sum();
            experts_s += self.experts.routed_experts_s(round);
            exchange_s += self.exchange.time_s(f64::from((largest - start).min(chunk)));
        }
        (to_ns(experts_s), to_ns(exchange_s))
    }
}

/// The token rows each of the `ranks` ranks sends through the expert layers, whose batches are
/// `batches` (an empty batch, or one not listed, is an idle rank's dummy batch of one token).
/// When every busy rank replays a graph, all are padded to the largest one's size.
fn rank_rows(batches: &[&Batch], ranks: u32) -> Vec<u32> {
    let busy = || batches.iter().filter(|b| !b.is_empty());
    let mut rows: Vec<u32> = if busy().all(|b| b.graph_size.is_some()) {
        let largest = busy().filter_map(|b| b.graph_size).max().unwrap_or(1).max(1);
        vec![largest; ranks as usize]
    } else {
        busy().map(|b| b.tokens().max(1)).collect()
    };
    rows.resize(rows.len().max(ranks as usize), 1);
    rows
}

impl CostModel for DataParallelCost {
    /// `batch` on one rank while the others run dummy batches.
    fn predict(&self, batch: &Batch) -> StepCost {
        self.predict_ranks(&[batch])
    }

    fn predict_ranks(&self, ranks: &[&Batch]) -> StepCost {
        let slowest = ranks.iter().filter(|b| !b.is_empty()).map(|b| self.rank.predict(b)).max_by_key(|c| c.total_ns);
        let Some(slowest) = slowest else { return StepCost::default() };
        let (experts_ns, exchange_ns) = self.expert_layers_ns(&rank_rows(ranks, self.ranks));
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
