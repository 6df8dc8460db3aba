//! servesim: a deterministic discrete-event simulator of LLM serving deployments.
//!
//! ```text
//!  scenario.toml ──► Scenario (validated) ──► Workload (requests + arrival times)
//!                                               │
//!                    sim: virtual clock, event queue, Cluster { Router, Replica { Scheduler, KvCacheManager } }
//!                    step time = CostModel::predict(batch)
//!                                               │
//!                                  per-request records ──► metrics (vLLM definitions) ──► report
//! ```
//!
//! Dependencies point downward: `sched` knows nothing of `sim` or time sources, `cost` knows only
//! the shape of a batch, `metrics` knows nothing of where records came from.

pub mod bench;
pub mod calibrate;
pub mod cli;
pub mod error;
pub mod fit;
pub mod fuzz;
pub mod cost;
pub mod engine;
pub mod metrics;
pub mod plan;
pub mod report;
pub mod rounding;
pub mod run;
pub mod scenario;
pub mod sched;
pub mod sim;
pub mod timeline;
pub mod validate;
pub mod workload;

pub use error::Error;
