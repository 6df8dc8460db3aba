//! Replicas and the router in front of them.

use super::{Pool, Role};
use crate::cost::StepCost;
use crate::scenario::{Policy, Router};
use crate::sched::Scheduler;
use crate::sched::prefix::BlockHash;
use super::sgl_router::CacheAwareTrees;

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
    /// Its pool's part: both phases, or one side of a disaggregated deployment.
    pub role: Role,
}

/// The replicas a router chooses among: every replica, or in a disaggregated deployment the
/// prefill replicas ([`FIRST`], where requests arrive) and the decode replicas ([`SECOND`]).
pub const FIRST: usize = 0;
pub const SECOND: usize = 1;

struct Group {
    members: Vec<u32>,
    round_robin_next: usize,
    /// SGLang's cache-aware router's trees, one per member.
    cache_aware: Option<CacheAwareTrees>,
}

/// Replicas plus routing state: one router per group, of the same kind.
pub struct Cluster {
    pub replicas: Vec<Replica>,
    router: Router,
    groups: Vec<Group>,
    /// Data-parallel ranks per deployment (0: none): a request goes to a deployment by the
    /// router, then to one of its ranks by vLLM's balancer.
    data_parallel: u32,
}

impl Cluster {
    /// The pools' replicas, in order. `decode_cohort`: schedulers keep decoding sequences as
    /// totals (see [`Scheduler::with_decode_cohort`]) and KV blocks as counts
    /// ([`Scheduler::without_block_ids`]); false schedules every sequence one by one, with ids.
    pub fn new(pools: &[Pool], policy: Policy, router: Router, decode_cohort: bool) -> Cluster {
        assert!(pools.iter().any(|pool| pool.replicas > 0));
        let replicas: Vec<Replica> = pools
            .iter()
            .flat_map(|pool| (0..pool.replicas).map(move |_| pool))
            .map(|&Pool { scheduler: config, weight, role, cost, .. }| Replica {
                scheduler: {
                    let scheduler = Scheduler::new(config.clone(), policy.build(config));
                    // The fast path keeps no block ids either; the reference keeps both.
                    if decode_cohort && !cost.prices_each_sequence() {
                        scheduler.with_decode_cohort(cost.reads_max_context()).without_block_ids()
                    } else {
                        scheduler
                    }
                },
                busy: false,
                start_queued: false,
                outstanding: 0,
                step_started_ns: 0,
                step_cost: StepCost::default(),
                frontend_free_ns: 0,
                cohort_last_token_ns: 0,
                weight,
                role,
            })
            .collect();
        let members = |keep: &dyn Fn(&Role) -> bool| {
            replicas.iter().enumerate().filter(|(_, r)| keep(&r.role)).map(|(i, _)| i as u32).collect()
        };
        let groups: Vec<Vec<u32>> = if replicas.iter().any(|r| matches!(r.role, Role::Decode { .. })) {
            vec![members(&|r| *r == Role::Prefill), members(&|r| matches!(r, Role::Decode { .. }))]
        } else {
            vec![members(&|_| true)]
        };
        assert!(groups.iter().all(|g| !g.is_empty()), "every router has replicas");
        let groups = groups
            .into_iter()
            .map(|members| {
                let cache_aware = (router == Router::CacheAware).then(|| CacheAwareTrees::new(members.len()));
                Group { members, round_robin_next: 0, cache_aware }
            })
            .collect();
        Cluster { replicas, router, groups, data_parallel: 0 }
    }

    /// The replicas as deployments of `ranks` data-parallel ranks each.
    pub fn with_data_parallel_ranks(mut self, ranks: u32) -> Cluster {
        assert!(ranks >= 1 && self.replicas.len().is_multiple_of(ranks as usize), "whole deployments of ranks");
        self.data_parallel = ranks;
        self
    }

    /// Picks the replica of `group` for the next request, of `prompt_tokens` tokens.
    /// Deterministic: ties go to the lowest index. `hashes` gives the request's prompt block
    /// hashes for a block size (the cache routers' only input beyond the loads).
    #[inline(always)]
    pub fn route(&mut self, group: usize, prompt_tokens: u32, hashes: impl Fn(u32) -> Vec<BlockHash>) -> u32 {
        let g = &mut self.groups[group];
        let members = &g.members;
        if self.data_parallel > 0 {
            let ranks = self.data_parallel as usize;
            let deployments: Vec<&[u32]> = members.chunks(ranks).collect();
            let chosen = match self.router {
                Router::LeastOutstanding => {
                    let load = |d: &&[u32]| d.iter().map(|&i| u64::from(self.replicas[i as usize].outstanding)).sum::<u64>();
                    let mut best = 0;
                    for (i, d) in deployments.iter().enumerate() {
                        if load(d) < load(&deployments[best]) {
                            best = i;
                        }
                    }
                    best
                }
                // Scenario resolution allows no other router with data-parallel ranks.
                _ => {
                    let next = g.round_robin_next % deployments.len();
                    g.round_robin_next = (next + 1) % deployments.len();
                    next
                }
            };
            return data_parallel_rank(&self.replicas, deployments[chosen]);
        }
        match self.router {
            Router::RoundRobin => {
                let chosen = members[g.round_robin_next];
                g.round_robin_next = (g.round_robin_next + 1) % members.len();
                chosen
            }
            Router::LeastOutstanding => least_outstanding(&self.replicas, members),
            Router::PrefixAware => {
                let least = least_outstanding(&self.replicas, members);
                let mut best = (0u32, least);
                let mut cached = (0u32, Vec::new());
                for (i, r) in members.iter().map(|&i| (i, &self.replicas[i as usize])) {
                    let block_size = r.scheduler.config().block_size;
                    if cached.1.is_empty() || cached.0 != block_size {
                        cached = (block_size, hashes(block_size));
                    }
                    let tokens = r.scheduler.cached_prefix_tokens(&cached.1);
                    let better = tokens > best.0
                        || (tokens == best.0 && tokens > 0 && r.outstanding < self.replicas[best.1 as usize].outstanding);
                    if better {
                        best = (tokens, i);
                    }
                }
                let load_gap = self.replicas[best.1 as usize].outstanding - self.replicas[least as usize].outstanding;
                if best.0 == 0 || load_gap > PREFIX_ROUTER_LOAD_GAP_MAX { least } else { best.1 }
            }
            Router::CacheAware => {
                let loads: Vec<u32> = members.iter().map(|&i| self.replicas[i as usize].outstanding).collect();
                let trees = g.cache_aware.as_mut().expect("made for the cache-aware router");
                members[trees.pick(&loads, &hashes(1), prompt_tokens)]
            }
            Router::WeightedLeastOutstanding => {
                // The load a replica would carry with this request, in units of its speed.
                let load = |r: &Replica| (r.outstanding as f64 + 1.0) / r.weight;
                let mut best = members[0];
                for &i in members {
                    if load(&self.replicas[i as usize]) < load(&self.replicas[best as usize]) {
                        best = i;
                    }
                }
                best
            }
        }
    }
}

/// Of `members`, the replica with the fewest requests outstanding, the lowest index among equals.
fn least_outstanding(replicas: &[Replica], members: &[u32]) -> u32 {
    let mut best = members[0];
    for &i in members {
        if replicas[i as usize].outstanding < replicas[best as usize].outstanding {
            best = i;
        }
    }
    best
}

/// vLLM's data-parallel balancer (`DPLBAsyncMPClient.get_core_engine_for_request` in
/// `vllm/v1/engine/core_client.py`, the rule of the releases that weigh waiting requests four
/// times): the rank with the lowest `4 × waiting + running`, the lowest index among equals.
/// vLLM reads the counts from its coordinator's snapshots (every 100 ms) plus what it sent since;
/// here they are exact, and a request sent but not yet running counts as waiting.
fn data_parallel_rank(replicas: &[Replica], members: &[u32]) -> u32 {
    let score = |r: &Replica| {
        let running = u64::from(r.scheduler.num_running());
        let waiting = u64::from(r.outstanding).saturating_sub(running);
        DP_WAITING_WEIGHT * waiting + running
    };
    let mut best = members[0];
    for &i in members {
        if score(&replicas[i as usize]) < score(&replicas[best as usize]) {
            best = i;
        }
    }
    best
}

/// How much more a waiting request weighs than a running one in vLLM's data-parallel balancer.
const DP_WAITING_WEIGHT: u64 = 4;
