//! A kernel cost model with another engine's time on top: how `servesim fit --kernels` tries
//! engine-time parameters without rebuilding the kernel model (an index over 10^5 measured rows)
//! for every trial.
//!
//! ```text
//!  kernels (built once, no engine time) ──► the step's GPU time ─┐
//!  Roofline with the trial's parameters ──► the step's CPU time ──┴─► overlap_cpu ──► StepCost
//! ```
//!
//! The result equals what the kernel model built with the trial's parameters predicts: both
//! take the CPU time from the roofline's rule and hide `cpu_overlap` of it behind the GPU time.

use super::roofline::Roofline;
use super::{CostModel, StepCost, overlap_cpu};
use crate::scenario::CostParams;
use crate::sched::batch::Batch;

/// `gpu`'s prices with `cpu`'s engine time.
pub struct EngineTimeOverlay<'a> {
    gpu: &'a dyn CostModel,
    cpu: Roofline,
}

impl<'a> EngineTimeOverlay<'a> {
    /// `gpu` must price no engine time ([`without_engine_time`] of its parameters); `cpu` is a
    /// roofline with the engine time to add.
    pub fn new(gpu: &'a dyn CostModel, cpu: Roofline) -> EngineTimeOverlay<'a> {
        EngineTimeOverlay { gpu, cpu }
    }
}

/// `params` with no CPU overhead and no overlap: the parameters a kernel model for
/// [`EngineTimeOverlay`] is built with.
pub fn without_engine_time(params: &CostParams) -> CostParams {
    CostParams {
        step_overhead_eager_us: 0.0,
        step_overhead_graph_us: 0.0,
        prefill_step_overhead_us: 0.0,
        prefill_seq_overhead_us: 0.0,
        seq_overhead_us: 0.0,
        cpu_overlap: 0.0,
        ..params.clone()
    }
}

impl EngineTimeOverlay<'_> {
    /// `gpu`'s price with `cpu_ns` of engine time laid over it.
    fn with_cpu(&self, gpu: StepCost, cpu_ns: u64) -> StepCost {
        debug_assert_eq!(gpu.overhead_ns, 0, "the kernel model must price no engine time");
        overlap_cpu(StepCost { total_ns: gpu.total_ns + cpu_ns, overhead_ns: cpu_ns, ..gpu }, self.cpu.cpu_overlap())
    }
}

impl CostModel for EngineTimeOverlay<'_> {
    fn predict(&self, batch: &Batch) -> StepCost {
        self.with_cpu(self.gpu.predict(batch), self.cpu.cpu_overhead_ns(batch))
    }

    /// Data-parallel ranks step together: the slowest rank's CPU time over the ranks' GPU time.
    fn predict_ranks(&self, ranks: &[&Batch]) -> StepCost {
        let cpu_ns = ranks.iter().filter(|b| !b.is_empty()).map(|b| self.cpu.cpu_overhead_ns(b)).max().unwrap_or(0);
        self.with_cpu(self.gpu.predict_ranks(ranks), cpu_ns)
    }

    fn routed_experts_s(&self, rows: f64) -> f64 {
        self.gpu.routed_experts_s(rows)
    }

    fn source(&self) -> &'static str {
        self.gpu.source()
    }

    fn reads_max_context(&self) -> bool {
        self.gpu.reads_max_context()
    }

    fn prices_each_sequence(&self) -> bool {
        self.gpu.prices_each_sequence()
    }
}
