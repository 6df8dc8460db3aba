//! The discrete-event simulation of a client and a cluster of engine replicas.
//!
//! ```text
//!  Arrivals ──► client gate (max_concurrency, FIFO) ──send──► router ──► Replica.scheduler
//!                     ▲                                                     │
//!                     └──────────── request finished ◄── StepEnd ◄── StepStart (cost model)
//! ```
//!
//! Time is virtual: `u64` nanoseconds, advanced only by popping events. A replica's step starts
//! as an event at the current instant (so every request that reached the scheduler at that
//! instant is visible to it), lasts what the cost model predicts, and the next step starts as
//! soon as the previous ends, as in real engines' busy loops.
//!
//! Data-parallel ranks (`SimConfig::data_parallel`) are replicas of their own, chosen by vLLM's
//! balancer; ranks that share a mixture of experts' expert layers step in lockstep (`lockstep`).
//!
//! A sent request reaches its replica's scheduler after the front end's overhead
//! (`frontend_overhead_ns`, plus `frontend_per_token_ns` per prompt token), one request at a
//! time per replica. With none, every request sent at
//! an instant is in that instant's step (all-at-once clients); with some, a burst trickles in and
//! the first step runs on the first request alone.

pub mod cluster;
pub mod link;
mod lockstep;
pub mod queue;
pub mod sgl_router;

use crate::cost::CostModel;
use crate::metrics::{RequestRecord, RunChunks, RunRecords, TokenBuckets, WeightedSamples};
use crate::scenario::{Policy, Router};
use crate::sched::prefix::{BlockHash, stream_block_hashes};
use crate::sched::{Admission, Finished, PrefixStats, SchedulerConfig, SpecStats};
use crate::timeline::StepRow;
use crate::workload::RequestSpec;
use cluster::Cluster;
use link::{LinkSpec, SharedLink};
use queue::EventQueue;

/// How the simulated deployment and client are set up.
#[derive(Clone, Debug)]
pub struct SimConfig {
    pub scheduler: SchedulerConfig,
    pub policy: Policy,
    pub replicas: u32,
    pub router: Router,
    pub max_concurrency: Option<u32>,
    /// The front end's time per request, before the scheduler sees it (see the module doc).
    pub frontend_overhead_ns: u64,
    /// The front end's time per prompt token (tokenizing it), on top of `frontend_overhead_ns`.
    pub frontend_per_token_ns: u64,
    /// Keep a row per engine step in [`SimOutput::timeline`] (for `timeline.csv` and the
    /// engine comparison). Off, only the step count is kept, and memory does not grow with the
    /// number of steps.
    pub timeline: bool,
    /// The replicas are one deployment's data-parallel ranks (vLLM's `--data-parallel-size`):
    /// vLLM's balancer picks a rank per request, and ranks that share expert layers step in
    /// lockstep. `None` for independent replicas behind `router`.
    pub data_parallel: Option<DataParallelSim>,
}

/// Data-parallel ranks, as the simulator runs them: replicas `g·ranks … (g+1)·ranks − 1` are
/// deployment `g`'s ranks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DataParallelSim {
    /// Ranks per deployment.
    pub ranks: u32,
    /// Every rank steps when any has work, the idle ones on dummy batches, and a step lasts as
    /// long as the cost model prices all the ranks' batches together
    /// ([`CostModel::predict_ranks`]).
    pub lockstep: bool,
}

/// Replicas that share a scheduler configuration (their KV capacity included) and a cost model:
/// one pool of a heterogeneous cluster, or every replica of a uniform one.
#[derive(Clone, Copy)]
pub struct Pool<'a> {
    pub scheduler: &'a SchedulerConfig,
    pub replicas: u32,
    pub cost: &'a dyn CostModel,
    /// Relative speed, for [`Router::WeightedLeastOutstanding`]: only ratios between pools count.
    pub weight: f64,
    /// What its replicas do: everything, or one side of a disaggregated deployment.
    pub role: Role,
}

/// A pool's part in serving a request.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Role {
    /// Prefill and decode (every pool of a deployment that is not disaggregated).
    Serve,
    /// Disaggregated: prefills each request and samples its first token, which the client gets
    /// at once; the KV then moves to a decode replica.
    Prefill,
    /// Disaggregated: decodes requests whose KV arrived over `ingress`, the link into each of its
    /// replicas, `kv_bytes_per_token` a prompt token.
    Decode { ingress: LinkSpec, kv_bytes_per_token: u64 },
}

impl<'a> Pool<'a> {
    /// All of `config`'s replicas, priced by `cost`.
    pub fn uniform(config: &'a SimConfig, cost: &'a dyn CostModel) -> Pool<'a> {
        Pool { scheduler: &config.scheduler, replicas: config.replicas, cost, weight: 1.0, role: Role::Serve }
    }
}

/// Per-request facts beyond what the metrics need, for `requests.csv`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RequestExtra {
    pub replica: u32,
    pub preemptions: u32,
}

/// Everything one simulated benchmark produced.
#[derive(Clone, Debug, Default)]
pub struct SimOutput {
    pub records: RunRecords,
    /// Parallel to `records.requests`.
    pub extras: Vec<RequestExtra>,
    /// One row per engine step, when [`SimConfig::timeline`] asks for them.
    pub timeline: Vec<StepRow>,
    /// Engine steps, over all replicas.
    pub steps: u64,
    /// Events the simulation processed (arrivals, steps' starts and ends, admissions, …): its
    /// unit of work, for docs/speed.md.
    pub events: u64,
    /// Requests that could never fit in the KV cache and were failed at once.
    pub rejected: u32,
    /// Prompt tokens found in the replicas' prefix caches, over all replicas (zero with caching
    /// off).
    pub prefix: PrefixStats,
    /// What speculative decoding proposed and accepted, over all replicas (zero without it).
    pub spec: SpecStats,
}

#[derive(Clone, Copy, Debug)]
enum Event {
    /// Every request whose arrival time is now.
    Arrivals,
    /// A request is through its replica's front end and reaches the scheduler.
    Admit { request: u32, replica: u32 },
    /// A chat session's next turn: its think time after the turn before it ended is over.
    NextTurn { request: u32 },
    StepStart { replica: u32 },
    StepEnd { replica: u32 },
    /// The next transfer on the link into a decode replica may be done; stale unless
    /// `generation` is the link's current one.
    LinkDone { replica: u32, generation: u64 },
    /// A prefilled request's KV reached its decode replica.
    KvArrived { request: u32, replica: u32 },
    /// A request's end reaches its client after the step that ended it: its first token was
    /// held back by the front end (`deliver_step`).
    Released { request: u32 },
}

/// The state of one simulated benchmark.
struct Simulation<'a> {
    requests: &'a [RequestSpec],
    /// Each replica's cost model (its pool's), by replica index.
    costs: Vec<&'a dyn CostModel>,
    events: EventQueue<Event>,
    now_ns: u64,
    arrivals_next: usize,
    /// Requests that arrived but wait for the client's concurrency gate, FIFO.
    gate_queue: std::collections::VecDeque<u32>,
    in_flight: u32,
    max_concurrency: u32,
    frontend_overhead_ns: u64,
    frontend_per_token_ns: u64,
    keep_timeline: bool,
    cluster: Cluster,
    last_token_ns: Vec<u64>,
    /// Inter-token gaps as they are delivered, moved into `out.records.itl_ns` at the end
    /// ([`RunChunks`]: no capacity guess, no copy while the run grows).
    itl_ns: RunChunks,
    /// Requests completed: all of them, at the end, or one was lost.
    completed: usize,
    /// By request, whether it completed, to catch a second completion: debug builds only (a
    /// byte a request spared).
    done: Vec<bool>,
    /// The chat turn each request's end sends (a think time later), or [`NO_TURN`] (see
    /// [`next_turns`]).
    next_turn: Vec<u32>,
    /// Reused copy of a step's finished list (the scheduler's own is borrowed while we route).
    finished_buffer: Vec<Finished>,
    /// By replica: the link into a decode replica.
    links: Vec<Option<SharedLink<u32>>>,
    /// By replica: bumped whenever its link's next completion moves, so older events are stale.
    link_generation: Vec<u64>,
    /// Data-parallel ranks per deployment that step together (see `lockstep`), 0 when replicas
    /// step alone: a deployment's first rank's step events and flags stand for them all.
    lockstep: u32,
    /// By replica, in lockstep: whether it runs a batch of its own in the current step.
    stepped: Vec<bool>,
    out: SimOutput,
}

/// Runs one benchmark: `requests` (sorted by arrival) against the configured cluster.
pub fn simulate(requests: &[RequestSpec], config: &SimConfig, cost: &dyn CostModel) -> SimOutput {
    simulate_with(requests, config, &[Pool::uniform(config, cost)], true)
}

/// [`simulate`] on a heterogeneous cluster: the pools' replicas, in order, behind one router.
/// `config.scheduler` and `config.replicas` give way to the pools' own.
pub fn simulate_pools(requests: &[RequestSpec], config: &SimConfig, pools: &[Pool]) -> SimOutput {
    simulate_with(requests, config, pools, true)
}

/// [`simulate`] with every sequence scheduled one by one, no decode cohort: the plain
/// per-sequence reference that tests compare the fast path with. Same output, slower.
#[doc(hidden)]
pub fn simulate_per_sequence(requests: &[RequestSpec], config: &SimConfig, cost: &dyn CostModel) -> SimOutput {
    simulate_with(requests, config, &[Pool::uniform(config, cost)], false)
}

fn simulate_with<'a>(requests: &'a [RequestSpec], config: &SimConfig, pools: &[Pool<'a>], decode_cohort: bool) -> SimOutput {
    let facts = RequestFacts::of(requests);
    assert!(facts.sorted, "requests must be sorted by arrival");
    assert!(requests.len() < u32::MAX as usize);
    // Where no prompt shares text, caching stays on with blocks kept as counts: what a request
    // can then find cached is its own blocks after a preemption (vLLM V1), which the scheduler
    // follows without ids (`sched::runs`).
    let cluster = Cluster::new(pools, config.policy, config.router, decode_cohort && !cohort_breaks_caching(&facts, pools));
    let cluster = match config.data_parallel {
        Some(dp) => cluster.with_data_parallel_ranks(dp.ranks),
        None => cluster,
    };
    // Ranks per lockstep group; 0 when replicas step alone.
    let lockstep = config.data_parallel.filter(|dp| dp.lockstep).map_or(0, |dp| dp.ranks);
    let links: Vec<Option<SharedLink<u32>>> = cluster
        .replicas
        .iter()
        .map(|r| match r.role {
            Role::Decode { ingress, .. } => Some(SharedLink::new(ingress)),
            _ => None,
        })
        .collect();
    let mut sim = Simulation {
        requests,
        costs: pools.iter().flat_map(|pool| (0..pool.replicas).map(|_| pool.cost)).collect(),
        events: EventQueue::default(),
        now_ns: 0,
        arrivals_next: 0,
        gate_queue: Default::default(),
        in_flight: 0,
        max_concurrency: config.max_concurrency.unwrap_or(u32::MAX),
        frontend_overhead_ns: config.frontend_overhead_ns,
        frontend_per_token_ns: config.frontend_per_token_ns,
        keep_timeline: config.timeline,
        link_generation: vec![0; links.len()],
        lockstep,
        stepped: if lockstep > 0 { vec![false; links.len()] } else { Vec::new() },
        links,
        cluster,
        last_token_ns: vec![0; requests.len()],
        itl_ns: RunChunks::default(),
        completed: 0,
        done: if cfg!(debug_assertions) { vec![false; requests.len()] } else { Vec::new() },
        next_turn: if facts.any_follow_up { next_turns(requests) } else { Vec::new() },
        finished_buffer: Vec::new(),
        out: SimOutput {
            records: RunRecords {
                requests: requests
                    .iter()
                    .map(|r| RequestRecord {
                        send_ns: 0,
                        first_token_ns: None,
                        end_ns: 0,
                        input_tokens: r.input_tokens,
                        output_tokens: 0,
                        success: false,
                    })
                    .collect(),
                itl_ns: WeightedSamples::new(),
                tokens_per_second: TokenBuckets::default(),
                duration_ns: 0,
            },
            extras: vec![RequestExtra::default(); requests.len()],
            timeline: Vec::new(),
            steps: 0,
            events: 0,
            rejected: 0,
            prefix: PrefixStats::default(),
            spec: SpecStats::default(),
        },
    };
    if let Some(first) = requests.first() {
        sim.events.push_single(first.arrival_ns, Event::Arrivals);
    }
    while let Some((time_ns, event)) = sim.events.pop() {
        debug_assert!(time_ns >= sim.now_ns, "time went backwards");
        sim.now_ns = time_ns;
        sim.out.events += 1;
        match event {
            Event::Arrivals => sim.on_arrivals(),
            Event::Admit { request, replica } => {
                sim.admit(request, replica);
                // A request refused on admission frees its client permit.
                sim.open_gate();
            }
            Event::NextTurn { request } => sim.on_next_turn(request),
            Event::StepStart { replica } => sim.on_step_start(replica),
            Event::StepEnd { replica } => sim.on_step_end(replica),
            Event::LinkDone { replica, generation } => sim.on_link_done(replica, generation),
            Event::KvArrived { request, replica } => sim.on_kv_arrived(request, replica),
            Event::Released { request } => {
                sim.release(request);
                sim.open_gate();
            }
        }
    }
    sim.finish()
}

/// Whether prefix caching could see the decode cohort: the cohort's members grow into blocks
/// without ids, so which freed blocks are evicted first, and so which cached prefixes survive,
/// would differ from the per-sequence path. Only when some prompt shares text is anything cached
/// at all; then the cohort is bypassed, exact but slower (docs/prefix-caching.md).
fn cohort_breaks_caching(facts: &RequestFacts, pools: &[Pool]) -> bool {
    pools.iter().any(|p| p.scheduler.enable_prefix_caching) && facts.any_shared
}

/// What the simulation needs to know of the requests as a whole, from one pass over them: a
/// million specs are 64 MB, and each pass of its own cost a few milliseconds (issue 14).
struct RequestFacts {
    /// The requests the arrival process sends (not chat follow-ups) are in arrival order.
    sorted: bool,
    /// Some prompt shares text with others ([`RequestSpec::prefix`]).
    any_shared: bool,
    /// Some request is a chat session's later turn.
    any_follow_up: bool,
}

impl RequestFacts {
    fn of(requests: &[RequestSpec]) -> RequestFacts {
        let mut facts = RequestFacts { sorted: true, any_shared: false, any_follow_up: false };
        let mut last_ns = 0;
        for r in requests {
            facts.any_shared |= r.prefix.tokens > 0;
            if r.follows.is_some() {
                facts.any_follow_up = true;
            } else {
                facts.sorted &= last_ns <= r.arrival_ns;
                last_ns = r.arrival_ns;
            }
        }
        facts
    }
}

/// The hashes of the prompt blocks `spec` shares with other prompts (only those: its own
/// blocks can never be hit by another request).
fn prompt_hashes(spec: &RequestSpec, block_size: u32) -> Vec<BlockHash> {
    stream_block_hashes(spec.prefix.stream, spec.prefix.tokens, block_size)
}

/// No chat turn follows the request.
const NO_TURN: u32 = u32::MAX;

/// For each request, the chat turn that follows it ([`RequestSpec::follows`]), or [`NO_TURN`].
/// Without chat sessions the simulation keeps none (4 bytes a request spared): [`NO_TURN`] for all.
fn next_turns(requests: &[RequestSpec]) -> Vec<u32> {
    let mut next = vec![NO_TURN; requests.len()];
    for (i, r) in requests.iter().enumerate() {
        if let Some(previous) = r.follows.and_then(|f| next.get_mut(f.request as usize)) {
            *previous = i as u32;
        }
    }
    next
}

impl Simulation<'_> {
    fn on_arrivals(&mut self) {
        let due = self.arrivals_next;
        while let Some(r) = self.requests.get(self.arrivals_next) {
            // A chat session's later turn is sent when the turn before it ends, not by the
            // arrival process.
            if r.follows.is_none() && r.arrival_ns > self.now_ns {
                self.events.push_single(r.arrival_ns, Event::Arrivals);
                break;
            }
            self.arrivals_next += 1;
        }
        for id in due..self.arrivals_next {
            if self.requests[id].follows.is_none() {
                self.wait_at_gate(id as u32);
            }
        }
        self.open_gate();
    }

    /// Request `id` joins the gate's waiters, behind any already there. With nobody ahead and a
    /// permit free it goes out at once, as the queue would send it, without passing through it.
    fn wait_at_gate(&mut self, id: u32) {
        if self.gate_queue.is_empty() && self.in_flight < self.max_concurrency {
            self.send(id);
        } else {
            self.gate_queue.push_back(id);
        }
    }

    /// vLLM's client gates sends with a semaphore of `max_concurrency` permits: waiting requests
    /// go out in arrival order as soon as permits are free.
    #[inline]
    fn open_gate(&mut self) {
        // Asked after every step: mostly nobody waits.
        if !self.gate_queue.is_empty() {
            self.send_waiting();
        }
    }

    fn send_waiting(&mut self) {
        while self.in_flight < self.max_concurrency {
            let Some(id) = self.gate_queue.pop_front() else { break };
            self.send(id);
        }
    }

    /// The client issues request `id` now: it is timed from here, routed, and passes through
    /// the replica's front end to its scheduler.
    #[inline(always)]
    fn send(&mut self, id: u32) {
        self.in_flight += 1;
        self.out.records.requests[id as usize].send_ns = self.now_ns;
        let prompt_tokens = self.requests[id as usize].input_tokens;
        let replica_index = self.cluster.route(cluster::FIRST, prompt_tokens, |block_size| prompt_hashes(&self.requests[id as usize], block_size));
        self.out.extras[id as usize].replica = replica_index;
        let replica = &mut self.cluster.replicas[replica_index as usize];
        replica.outstanding += 1;
        let frontend_ns = self.frontend_overhead_ns
            + self.frontend_per_token_ns.saturating_mul(u64::from(self.requests[id as usize].input_tokens));
        if frontend_ns == 0 {
            self.admit(id, replica_index);
        } else {
            // One request at a time: this one starts when the front end is free.
            let through_ns = replica.frontend_free_ns.max(self.now_ns) + frontend_ns;
            replica.frontend_free_ns = through_ns;
            self.events.push(through_ns, Event::Admit { request: id, replica: replica_index });
        }
    }

    /// Request `id` reaches replica `replica_index`'s scheduler now.
    #[inline(always)]
    fn admit(&mut self, id: u32, replica_index: u32) {
        let spec = self.requests[id as usize];
        let replica = &mut self.cluster.replicas[replica_index as usize];
        let hashes = if replica.scheduler.caches_prefixes() {
            prompt_hashes(&spec, replica.scheduler.config().block_size)
        } else {
            Vec::new()
        };
        // A prefill replica computes the prompt and samples the first token, nothing more.
        let (output_tokens, max_tokens) =
            if replica.role == Role::Prefill { (1, 1) } else { (spec.output_tokens, spec.max_tokens) };
        let admission = replica.scheduler.add_request_with_prefix(id, spec.input_tokens, output_tokens, max_tokens, &hashes);
        self.after_admission(admission, id, replica_index);
    }

    fn on_step_start(&mut self, replica_index: u32) {
        let replica = &mut self.cluster.replicas[replica_index as usize];
        replica.start_queued = false;
        self.start_step(replica_index);
    }

    #[inline(always)]
    fn start_step(&mut self, replica_index: u32) {
        if self.lockstep > 0 {
            return self.start_lockstep_step(replica_index);
        }
        if !self.schedule(replica_index) {
            return;
        }
        let replica = &self.cluster.replicas[replica_index as usize];
        let cost = self.costs[replica_index as usize].predict(replica.scheduler.batch());
        assert!(cost.total_ns > 0, "a step must take time");
        self.begin_step(replica_index, cost);
        self.events.push(self.now_ns + cost.total_ns, Event::StepEnd { replica: replica_index });
    }

    /// Schedules replica `replica_index`'s next step: whether it has a batch to run.
    #[inline(always)]
    fn schedule(&mut self, replica_index: u32) -> bool {
        let replica = &mut self.cluster.replicas[replica_index as usize];
        debug_assert!(!replica.busy);
        if replica.scheduler.schedule().is_empty() {
            if !replica.scheduler.has_work() {
                return false;
            }
            // A step that preempted every running sequence admits nobody (vLLM skips admission
            // in a step that preempts); the engine just schedules again.
            assert!(!replica.scheduler.schedule().is_empty(), "scheduler stalled with work queued");
        }
        true
    }

    /// Replica `replica_index` runs its scheduled batch from now, priced `cost`: counted, and
    /// kept as a timeline row when asked.
    #[inline(always)]
    fn begin_step(&mut self, replica_index: u32, cost: crate::cost::StepCost) {
        let replica = &mut self.cluster.replicas[replica_index as usize];
        self.out.steps += 1;
        if self.keep_timeline {
            let batch = replica.scheduler.batch();
            self.out.timeline.push(StepRow {
                start_ns: self.now_ns,
                replica: replica_index,
                running: replica.scheduler.num_running(),
                waiting: replica.scheduler.num_waiting(),
                kv_blocks_used: replica.scheduler.kv().pool().blocks_used(),
                batch_seqs: batch.num_seqs(),
                prefill_tokens: batch.prefill_tokens,
                decode_tokens: batch.decode_tokens,
                cost,
            });
        }
        replica.busy = true;
        replica.step_started_ns = self.now_ns;
        replica.step_cost = cost;
    }

    fn on_step_end(&mut self, replica_index: u32) {
        if self.lockstep > 0 {
            return self.on_lockstep_end(replica_index);
        }
        self.deliver_step(replica_index);
        self.open_gate();
        // The engine loop goes straight on to the next step.
        let replica = &mut self.cluster.replicas[replica_index as usize];
        if replica.scheduler.has_work() && !replica.start_queued {
            self.start_step(replica_index);
        }
    }

    /// Replica `replica_index`'s step is over: its tokens reach their requests, and the requests
    /// it finished complete (or, from a prefill pool, leave for a decode replica).
    #[inline(always)]
    fn deliver_step(&mut self, replica_index: u32) {
        let now_ns = self.now_ns;
        let replica = &mut self.cluster.replicas[replica_index as usize];
        replica.busy = false;
        // The API server streams a request's first token when its event loop gets to it: after
        // the requests it was already taking in. In a burst, first tokens wait for the burst to
        // be taken in, as recorded TTFTs cluster late in one (docs/engine-profiles.md).
        let frontend_free_ns = replica.frontend_free_ns;
        let outcome = replica.scheduler.finish_step();
        let records = &mut self.out.records;
        for &id in &outcome.left_cohort {
            self.last_token_ns[id as usize] = replica.cohort_last_token_ns;
        }
        // One token, or a chunk of several (a multi-step window's, a speculative step's): one
        // gap per delivery, as vLLM's benchmark client times the chunks it receives.
        for id in outcome.tokens.iter().copied().chain(outcome.chunks.iter().map(|c| c.request_id)) {
            let record = &mut records.requests[id as usize];
            // Inter-token gaps stay the engine's, as the decode cohort counts them for its members
            // (a gap after a first token held back is not shortened).
            match record.first_token_ns {
                None => record.first_token_ns = Some(now_ns.max(frontend_free_ns)),
                Some(_) => self.itl_ns.push(now_ns - self.last_token_ns[id as usize]),
            }
            self.last_token_ns[id as usize] = now_ns;
        }
        // The cohort's members all had their previous token at its previous step's end.
        self.itl_ns.push_n(now_ns - replica.cohort_last_token_ns, u64::from(outcome.cohort_tokens));
        if outcome.cohort_synced {
            replica.cohort_last_token_ns = now_ns;
        }
        // vLLM buckets tokens by whole seconds since the earliest send, which is the first arrival.
        records.tokens_per_second.add(now_ns - self.requests[0].arrival_ns, outcome.num_tokens());
        // About half the steps finish nobody: they skip the copy.
        if !outcome.finished.is_empty() {
            replica.outstanding -= outcome.finished.len() as u32;
            let mut finished = std::mem::take(&mut self.finished_buffer);
            finished.clear();
            finished.extend_from_slice(&outcome.finished);
            let prefill = self.cluster.replicas[replica_index as usize].role == Role::Prefill;
            for f in &finished {
                self.out.extras[f.request_id as usize].preemptions += f.preemptions;
                self.out.records.requests[f.request_id as usize].output_tokens = f.output_tokens;
                if prefill && self.requests[f.request_id as usize].output_tokens > f.output_tokens {
                    self.send_kv(f.request_id);
                } else {
                    self.complete(f.request_id, true);
                }
            }
            self.finished_buffer = finished;
        }
    }

    /// The request ended (successfully or not), which frees a permit of the client's gate, and
    /// starts the think time before its session's next turn (sent whether or not this one
    /// succeeded: the client's script goes on).
    #[inline(always)]
    fn complete(&mut self, id: u32, success: bool) {
        if let Some(done) = self.done.get_mut(id as usize) {
            assert!(!*done, "request {id} completed twice");
            *done = true;
        }
        self.completed += 1;
        let record = &mut self.out.records.requests[id as usize];
        record.success = success;
        // Not before its first token, which the front end may have held back.
        record.end_ns = self.now_ns.max(record.first_token_ns.unwrap_or(0));
        let end_ns = record.end_ns;
        let duration_ns = &mut self.out.records.duration_ns;
        *duration_ns = (*duration_ns).max(end_ns);
        if end_ns > self.now_ns {
            // The client sees the end with the held-back first token, not before: its permit
            // and its session's think time wait for that too.
            self.events.push(end_ns, Event::Released { request: id });
        } else {
            self.release(id);
        }
    }

    /// The client has the whole answer of request `id`: a permit of its gate is free, and its
    /// session's next turn starts thinking.
    fn release(&mut self, id: u32) {
        self.in_flight -= 1;
        let next = self.next_turn.get(id as usize).copied().unwrap_or(NO_TURN);
        if let Some(follows) = self.requests.get(next as usize).and_then(|r| r.follows) {
            self.events.push(self.now_ns.saturating_add(follows.think_ns), Event::NextTurn { request: next });
        }
    }

    /// A prefilled request's KV leaves for the decode replica the decode router picks, over the
    /// link into it, which transfers in flight share.
    fn send_kv(&mut self, id: u32) {
        let replica = self.cluster.route(cluster::SECOND, 0, |_| Vec::new());
        self.out.extras[id as usize].replica = replica;
        self.cluster.replicas[replica as usize].outstanding += 1;
        let Role::Decode { kv_bytes_per_token, .. } = self.cluster.replicas[replica as usize].role else {
            unreachable!("the second router group is the decode pools")
        };
        let bytes = kv_bytes_per_token.saturating_mul(u64::from(self.requests[id as usize].input_tokens));
        let link = self.links[replica as usize].as_mut().expect("a decode replica has a link");
        link.start(self.now_ns, bytes, id);
        self.schedule_link(replica);
    }

    /// Queues the next completion on the link into `replica`, superseding any queued before.
    fn schedule_link(&mut self, replica: u32) {
        let Some(done_ns) = self.links[replica as usize].as_ref().and_then(SharedLink::next_done_ns) else { return };
        self.link_generation[replica as usize] += 1;
        let generation = self.link_generation[replica as usize];
        self.events.push(done_ns, Event::LinkDone { replica, generation });
    }

    fn on_link_done(&mut self, replica: u32, generation: u64) {
        if generation != self.link_generation[replica as usize] {
            return;
        }
        let link = self.links[replica as usize].as_mut().expect("a decode replica has a link");
        for (arrives_ns, request) in link.finish_until(self.now_ns) {
            self.events.push(arrives_ns, Event::KvArrived { request, replica });
        }
        self.schedule_link(replica);
    }

    /// The KV is in: the request joins the decode replica's queue, its first token sampled.
    fn on_kv_arrived(&mut self, id: u32, replica_index: u32) {
        let spec = self.requests[id as usize];
        let replica = &mut self.cluster.replicas[replica_index as usize];
        let admission = replica.scheduler.add_prefilled_request(id, spec.input_tokens, 1, spec.output_tokens, spec.max_tokens);
        self.after_admission(admission, id, replica_index);
    }

    /// `id` was offered to a replica's scheduler: queued, it wakes the replica if idle; refused
    /// (it can never fit there), it fails, and a first token it had from a prefill pool counts
    /// for nothing, as for any failed request.
    #[inline(always)]
    fn after_admission(&mut self, admission: Admission, id: u32, replica_index: u32) {
        match admission {
            Admission::Queued { .. } => {
                // Ranks in lockstep start their steps together, by the first one's events.
                let stepper = if self.lockstep > 0 { replica_index - replica_index % self.lockstep } else { replica_index };
                let replica = &mut self.cluster.replicas[stepper as usize];
                if !replica.busy && !replica.start_queued {
                    replica.start_queued = true;
                    self.events.push(self.now_ns, Event::StepStart { replica: stepper });
                }
            }
            Admission::Rejected { .. } => {
                self.cluster.replicas[replica_index as usize].outstanding -= 1;
                self.out.rejected += 1;
                self.out.records.requests[id as usize].output_tokens = 0;
                self.complete(id, false);
            }
        }
    }

    /// A session's next turn is due: it joins the client's queue like an arrival.
    fn on_next_turn(&mut self, request: u32) {
        self.wait_at_gate(request);
        self.open_gate();
    }

    fn finish(mut self) -> SimOutput {
        assert_eq!(self.completed, self.requests.len(), "a request never completed");
        for replica in &self.cluster.replicas {
            self.out.prefix.add(replica.scheduler.prefix_stats());
            self.out.spec.add(replica.scheduler.spec_stats());
        }
        // Every reader of the ITL samples sorts them: sorted here once, in place, after the
        // per-request state is gone, they need no copy of their own (issue 14's memory target).
        drop((self.last_token_ns, self.done, self.next_turn));
        self.out.records.itl_ns = self.itl_ns.into_samples();
        self.out.records.itl_ns.sort();
        self.out
    }
}
