//! Step cost models: how long one engine step takes, in nanoseconds, with a breakdown.
//!
//! Implementations, in order of trust: [`roofline::Roofline`] from datasheet numbers, then
//! [`calibrated::Calibrated`] interpolating measured kernel profiles; either takes parameters
//! fitted to recorded runs (`[cost]`, `servesim fit`). A prediction is a [`StepCost`].

pub mod bundled;
pub mod calibrated;
mod memo;
pub mod moe;
pub mod profile_match;
pub mod roofline;
pub mod sampling;
pub mod speculative;

use crate::sched::batch::Batch;
pub use crate::timeline::StepCost;

/// Prices a batch. Must be deterministic and pure: the same batch always costs the same.
pub trait CostModel {
    fn predict(&self, batch: &Batch) -> StepCost;
    /// Where the prediction comes from (e.g. "roofline"), for reports.
    fn source(&self) -> &'static str;
}

/// A boxed cost model is one: scenarios choose theirs at run time.
impl<T: CostModel + ?Sized> CostModel for Box<T> {
    fn predict(&self, batch: &Batch) -> StepCost {
        (**self).predict(batch)
    }
    fn source(&self) -> &'static str {
        (**self).source()
    }
}
