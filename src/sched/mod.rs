//! Scheduling policies and the paged KV-cache manager: pure logic, no time source.
//!
//! ```text
//!   add_request ──► waiting (FCFS deque) ──schedule()──► running ──finish_step()──► finished
//!                        ▲                                  │
//!                        └──────── preempted (recompute) ───┘
//! ```
//!
//! Policies: [`VllmV1`], [`VllmV0`], [`Tgi`], and [`Servesim`] (servesim's own engine).
//!
//! The simulator drives a [`Scheduler`] with a virtual clock and a cost model; the engine drives
//! the very same code with real kernels. A step is `schedule()` (which fills a [`Batch`]), then
//! the forward pass (simulated or real), then `finish_step()` (which advances every scheduled
//! sequence and reports tokens and completions).

pub mod batch;
pub mod kv;
mod policy;
mod scheduler;
mod tgi;

pub use batch::{Batch, SeqWork};
pub use kv::{BlockPool, KvCacheManager};
pub use policy::{SchedulingPolicy, Servesim, VllmV0, VllmV1};
pub use scheduler::{Admission, Finished, Rejection, Scheduler, SchedulerConfig, StepOutcome};
pub use tgi::{Tgi, TgiConfig};
