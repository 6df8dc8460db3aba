//! Scheduling policies and the paged KV-cache manager: pure logic, no time source.
//!
//! ```text
//!   add_request ──► waiting (FCFS deque) ──schedule()──► running ──finish_step()──► finished
//!                        ▲                                  │
//!                        └──────── preempted (recompute) ───┘
//! ```
//!
//! Policies: [`VllmV1`], [`VllmV0`], [`Tgi`], [`Sglang`] (SGLang 0.4.9, with its radix cache in
//! `radix.rs`), and [`Servesim`] (servesim's own engine).
//!
//! ```text
//!   scheduler.rs ──► policy.rs, tgi.rs ──► state.rs ──► kv.rs, batch.rs, config.rs
//!   (owns a state       (decide who runs:     (sequences, queues,
//!    and a policy)       fill the batch)        KV blocks; knows no policy)
//! ```
//!
//! A policy operates on a [`SchedulerState`]; the state never names a policy, so adding a policy
//! touches only its own file and the place that picks it by name ([`Policy::build`]).
//!
//! The simulator drives a [`Scheduler`] with a virtual clock and a cost model; the engine drives
//! the very same code with real kernels. The simulator also asks for a decode cohort
//! ([`Scheduler::with_decode_cohort`], `cohort.rs`): sequences that decode every step are kept
//! as totals, so a step costs the same whatever its batch size. The policies and the
//! per-sequence path are the same code either way; the cohort only takes the steps in which
//! nothing runs short, and a property test holds its output equal to the per-sequence path's. A step is `schedule()` (which fills a [`Batch`]), then
//! the forward pass (simulated or real), then `finish_step()` (which advances every scheduled
//! sequence and reports tokens and completions).

pub mod batch;
mod cohort;
mod config;
pub mod kv;
mod outcome;
mod policy;
pub mod prefix;
pub mod radix;
mod radix_state;
mod runs;
mod scheduler;
mod select;
mod seq;
pub mod speculative;
mod state;
mod sglang;
mod tgi;
mod window;

pub use batch::{Batch, CohortWork, MAX_CONTEXT_UNTRACKED, SeqWork};
pub use kv::{BlockPool, KvCacheManager};
pub use config::{SchedulePolicy, SchedulerConfig, SglangConfig, TgiConfig};
pub use outcome::{Admission, Chunk, Finished, PrefixStats, Rejection, StepOutcome};
pub use policy::{SchedulingPolicy, Servesim, VllmV0, VllmV1};
pub use scheduler::Scheduler;
pub use select::Policy;
pub use speculative::{Acceptance, SpecStats, SpeculativeConfig};
pub use state::SchedulerState;
pub use sglang::Sglang;
pub use tgi::Tgi;
