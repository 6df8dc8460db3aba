//! Replicas and the router in front of them.

use super::Pool;
use crate::cost::StepCost;
use crate::scenario::{Policy, Router};
use crate::sched::Scheduler;
use crate::sched::prefix::BlockHash;

/// The prefix-aware router sends a request to the replica with the longest cached prefix unless
/// that replica has more than this many requests outstanding beyond the least loaded one; then
/// it sends it to the least loaded. SGLang's cache-aware router balances on the same kind of
/// absolute gap (its `balance_abs_threshold`, default 32); llm-d's scorer weighs load against
/// prefix hits instead. 32 is SGLang's default.
pub const PREFIX_ROUTER_LOAD_GAP_MAX: u32 = 32;

/// One engine instance (a tensor-parallel group of GPUs) with its own scheduler and KV cache.
pub struct Replica {
    pub scheduler: Scheduler,
    /// A step is running (its end event is queued).
    pub busy: bool,
    /// A step start is queued but has not run yet.
    pub start_queued: bool,
    /// Requests routed here and not finished: the least-outstanding router's measure.
    pub outstanding: u32,
    pub step_started_ns: u64,
    pub step_cost: StepCost,
    /// When the front end finishes the requests handed to it so far.
    pub frontend_free_ns: u64,
    /// When the scheduler's decode cohort last got its tokens: every member's previous token.
    pub cohort_last_token_ns: u64,
    /// Its pool's relative speed: the weighted router's measure of how much it can take.
    pub weight: f64,
}

/// Replicas plus routing state.
pub struct Cluster {
    pub replicas: Vec<Replica>,
    router: Router,
    round_robin_next: u32,
}

impl Cluster {
    /// The pools' replicas, in order. `decode_cohort`: schedulers keep decoding sequences as
    /// totals (see [`Scheduler::with_decode_cohort`]); false schedules every sequence one by one.
    pub fn new(pools: &[Pool], policy: Policy, router: Router, decode_cohort: bool) -> Cluster {
        assert!(pools.iter().any(|pool| pool.replicas > 0));
        let replicas = pools
            .iter()
            .flat_map(|pool| (0..pool.replicas).map(move |_| pool))
            .map(|&Pool { scheduler: config, weight, .. }| Replica {
                scheduler: {
                    let scheduler = Scheduler::new(config.clone(), policy.build(config));
                    if decode_cohort { scheduler.with_decode_cohort() } else { scheduler }
                },
                busy: false,
                start_queued: false,
                outstanding: 0,
                step_started_ns: 0,
                step_cost: StepCost::default(),
                frontend_free_ns: 0,
                cohort_last_token_ns: 0,
                weight,
            })
            .collect();
        Cluster { replicas, router, round_robin_next: 0 }
    }

    /// Picks the replica for the next request. Deterministic: ties go to the lowest index.
    /// `hashes` gives the request's prompt block hashes for a block size (the prefix-aware
    /// router's only input beyond the loads).
    pub fn route(&mut self, hashes: impl Fn(u32) -> Vec<BlockHash>) -> u32 {
        match self.router {
            Router::RoundRobin => {
                let chosen = self.round_robin_next;
                self.round_robin_next = (chosen + 1) % self.replicas.len() as u32;
                chosen
            }
            Router::LeastOutstanding => self.least_outstanding(),
            Router::PrefixAware => {
                let least = self.least_outstanding();
                let mut best = (0u32, least);
                let mut cached = (0u32, Vec::new());
                for (i, r) in self.replicas.iter().enumerate() {
                    let block_size = r.scheduler.config().block_size;
                    if cached.1.is_empty() || cached.0 != block_size {
                        cached = (block_size, hashes(block_size));
                    }
                    let tokens = r.scheduler.kv().cached_prefix_tokens(&cached.1);
                    let better = tokens > best.0
                        || (tokens == best.0 && tokens > 0 && r.outstanding < self.replicas[best.1 as usize].outstanding);
                    if better {
                        best = (tokens, i as u32);
                    }
                }
                let load_gap = self.replicas[best.1 as usize].outstanding - self.replicas[least as usize].outstanding;
                if best.0 == 0 || load_gap > PREFIX_ROUTER_LOAD_GAP_MAX { least } else { best.1 }
            }
            Router::WeightedLeastOutstanding => {
                // The load a replica would carry with this request, in units of its speed.
                let load = |r: &Replica| (r.outstanding as f64 + 1.0) / r.weight;
                let mut best = 0;
                for (i, r) in self.replicas.iter().enumerate() {
                    if load(r) < load(&self.replicas[best]) {
                        best = i;
                    }
                }
                best as u32
            }
        }
    }

    /// The replica with the fewest requests outstanding, the lowest index among equals.
    fn least_outstanding(&self) -> u32 {
        let mut best = 0;
        for (i, r) in self.replicas.iter().enumerate() {
            if r.outstanding < self.replicas[best].outstanding {
                best = i;
            }
        }
        best as u32
    }
}
