//! Step cost models: how long one engine step takes, in nanoseconds, with a breakdown.
//!
//! Implementations, in order of trust: [`roofline::Roofline`] from datasheet numbers, then
//! [`calibrated::Calibrated`] interpolating measured kernel profiles; either takes parameters
//! fitted to recorded runs (`[cost]`, `servesim fit`). A prediction is a [`StepCost`].

// The bundled profiles are calibration's data, and calibrate's importer compares against them;
// here too, as `cost::bundled`, for `--profile auto`.
pub use crate::calibrate::bundled;
pub mod calibrated;
pub mod data_parallel;
mod dsa;
pub mod engine_time;
pub mod family;
mod hybrid;
mod memo;
pub mod mla;
pub mod moe;
pub mod profile_match;
pub mod quant;
pub mod roofline;
pub mod sampling;
pub mod speculative;
pub mod token_exchange;
pub mod weight_only;

#[cfg(test)]
mod tests_dsa;
#[cfg(test)]
mod tests_family;
#[cfg(test)]
mod tests_fused_moe;
#[cfg(test)]
mod tests_mla;
#[cfg(test)]
mod tests_hybrid;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_quant;

use crate::sched::batch::Batch;
pub use crate::timeline::StepCost;

/// Seconds (non-negative, finite) to integer nanoseconds, rounded to nearest: how both cost
/// models turn a part of a step into its price.
#[inline]
pub(crate) fn to_ns(seconds: f64) -> u64 {
    debug_assert!(seconds.is_finite() && seconds >= 0.0, "bad duration {seconds}");
    crate::rounding::round_to_i64_range(seconds * NS_PER_S)
}

pub(crate) const NS_PER_S: f64 = 1e9;

/// `cost` with `overlap` of its CPU overhead run while the GPU works, as an engine that prepares
/// the next step during this one does (vLLM V1's async scheduling, SGLang's overlap scheduler):
/// the hidden part is at most the step's GPU time, so a step is never shorter than either side.
/// With no overlap the cost is returned as it is.
#[inline]
pub(crate) fn overlap_cpu(cost: StepCost, overlap: f64) -> StepCost {
    if overlap <= 0.0 || cost.overhead_ns == 0 {
        return cost;
    }
    let gpu_ns = cost.total_ns - cost.overhead_ns;
    let hidden_ns = crate::rounding::round_to_i64_range(cost.overhead_ns.min(gpu_ns) as f64 * overlap.min(1.0));
    StepCost { total_ns: cost.total_ns - hidden_ns, overhead_ns: cost.overhead_ns - hidden_ns, ..cost }
}

/// Prices a batch. Must be deterministic and pure: the same batch always costs the same.
pub trait CostModel {
    fn predict(&self, batch: &Batch) -> StepCost;
    /// Where the prediction comes from (e.g. "roofline"), for reports.
    fn source(&self) -> &'static str;
    /// Whether `predict` reads [`Batch::max_context_tokens`]: only then does the simulator's
    /// decode cohort keep its longest context (see [`crate::sched::MAX_CONTEXT_UNTRACKED`]).
    fn reads_max_context(&self) -> bool {
        false
    }
    /// Whether `predict` prices each decoding sequence by its own context (a hybrid model's
    /// sliding and chunked layers): the simulator then keeps no decode cohort of totals.
    fn prices_each_sequence(&self) -> bool {
        false
    }
    /// The routed experts' GEMMs on one GPU, seconds, over every expert layer of a step whose
    /// experts receive `rows` token rows (summed over whoever sends them): the part of a
    /// mixture of experts that data-parallel ranks run together ([`data_parallel`]). 0 for a
    /// model without experts.
    fn routed_experts_s(&self, _rows: f64) -> f64 {
        0.0
    }
    /// One step of data-parallel ranks in lockstep, each rank's batch in `ranks` (empty for a
    /// rank with nothing to do, which runs a dummy batch): only a model of ranks that share
    /// layers ([`data_parallel::DataParallelCost`]) prices them together; any other prices the
    /// slowest rank.
    fn predict_ranks(&self, ranks: &[&Batch]) -> StepCost {
        ranks.iter().map(|b| self.predict(b)).max_by_key(|c| c.total_ns).unwrap_or_default()
    }
}

/// A boxed cost model is one: scenarios choose theirs at run time.
impl<T: CostModel + ?Sized> CostModel for Box<T> {
    fn predict(&self, batch: &Batch) -> StepCost {
        (**self).predict(batch)
    }
    fn source(&self) -> &'static str {
        (**self).source()
    }
    fn reads_max_context(&self) -> bool {
        (**self).reads_max_context()
    }
    fn prices_each_sequence(&self) -> bool {
        (**self).prices_each_sequence()
    }
    fn routed_experts_s(&self, rows: f64) -> f64 {
        (**self).routed_experts_s(rows)
    }
    fn predict_ranks(&self, ranks: &[&Batch]) -> StepCost {
        (**self).predict_ranks(ranks)
    }
}
