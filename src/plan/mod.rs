//! Capacity planning: how much load a deployment sustains under latency objectives.
//!
//! ```text
//!   Scenario + Objectives ──► search::max_sustainable_rate
//!                               probe(rate) = one full simulation (run::run_point) at a fixed seed
//!                               ──► objectives::Objectives::judge ──► Verdict (met? which binds?)
//!                             bracket (×2 / ÷2), then bisect to a relative width ──► RateSearch
//! ```
//!
//! The planner is a client of the simulator: it builds scenarios, runs them and searches over the
//! results; it never prices a step or computes a metric itself.

pub mod candidate;
pub mod charts;
pub mod deploy;
pub mod evaluate;
pub mod file;
pub mod objectives;
pub mod output;
pub mod prices;
pub mod search;
pub mod shard;
pub mod steady;

pub use candidate::Candidate;
pub use evaluate::{Evaluated, Evaluation, Outcome, evaluate, rank};
pub use file::{GpuOffer, Plan, SearchSpace};
pub use objectives::{Binding, Objectives, Slo, Statistic, Verdict};
pub use search::{Bound, Probe, RateSearch, SearchOptions, max_sustainable_rate};
