//! The continuous-batching loop: one dedicated thread that owns the simulator's own
//! [`Scheduler`] and an [`Executor`], and runs steps back to back.
//!
//! ```text
//!   HTTP handlers ──Command::Submit/Cancel──► engine thread
//!                                              loop { apply commands
//!                                                     schedule() → forward() → finish_step()
//!                                                     EOS → finish_early(); stream tokens }
//!   HTTP handlers ◄──Event::Tokens/Error (one channel per request)──┘
//! ```

use std::collections::{HashMap, HashSet};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::mpsc as std_mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, oneshot};

use crate::engine::model::{OpTimes, SamplingParams};
use crate::scenario::Policy;
use crate::sched::prefix::token_block_hashes;
use crate::sched::{Acceptance, Admission, Batch, PrefixStats, Rejection, Scheduler, SchedulerConfig, SpecStats, SpeculativeConfig};
use super::ngram::NgramLookup;
use crate::timeline::{StepCost, StepRow};

/// What the forward pass computes for one [`crate::sched::SeqWork`] of a batch.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SeqInput {
    /// Token ids whose KV this step computes (`new_tokens` of them).
    pub token_ids: Vec<u32>,
    /// Position of each of `token_ids` in its sequence (`context_tokens ..`).
    pub positions: Vec<u32>,
    /// The sequence's KV block table (`KvCacheManager::block_table`), covering all positions.
    pub block_table: Vec<u32>,
    /// How the sequence samples its token (temperature, top-p, top-k, the client's seed).
    pub sampling: SamplingParams,
    /// Log-probabilities the request wants of each token it samples, if any.
    pub logprobs: Option<LogprobsAsk>,
}

/// Inputs of one step, parallel to `Batch::seqs`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StepInputs {
    pub seqs: Vec<SeqInput>,
}

/// The forward pass the engine loop drives. Implemented by the model executor (CPU/CUDA); tests
/// use a deterministic fake.
pub trait Executor: Send + 'static {
    /// Runs one step. Returns a token per sampled row ([`crate::sched::SeqWork::sampled_rows`]: one
    /// per `SeqWork` with `samples_token`, and one more per draft), in batch order.
    fn forward(&mut self, batch: &Batch, inputs: &StepInputs) -> Result<Vec<u32>, String>;
    fn vocab_size(&self) -> u32;
    fn eos_token(&self) -> Option<u32>;
    /// Where the last step's forward pass spent its time, for an executor that times its
    /// kernels (the CPU model); the trace then splits the step like the simulator's.
    fn last_times(&self) -> Option<OpTimes> {
        None
    }
    /// Whether [`Executor::take_logprobs`] answers the rows that ask ([`SeqInput::logprobs`]).
    /// Requests that need log-probabilities are refused by an engine whose executor has none.
    fn computes_logprobs(&self) -> bool {
        false
    }
    /// Log-probabilities of the last step's sampled rows, in row order: one entry a row, `None`
    /// where its sequence asked for none; empty from an executor that computes none.
    fn take_logprobs(&mut self) -> Vec<Option<TokenLogprobs>> {
        Vec::new()
    }
}

/// An executor chosen at run time (`servesim serve --device`).
impl Executor for Box<dyn Executor> {
    fn forward(&mut self, batch: &Batch, inputs: &StepInputs) -> Result<Vec<u32>, String> {
        (**self).forward(batch, inputs)
    }
    fn vocab_size(&self) -> u32 {
        (**self).vocab_size()
    }
    fn eos_token(&self) -> Option<u32> {
        (**self).eos_token()
    }
    fn last_times(&self) -> Option<OpTimes> {
        (**self).last_times()
    }
    fn computes_logprobs(&self) -> bool {
        (**self).computes_logprobs()
    }
    fn take_logprobs(&mut self) -> Vec<Option<TokenLogprobs>> {
        (**self).take_logprobs()
    }
}

/// Why a request stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FinishReason {
    /// It reached `max_tokens`.
    Length,
    /// It sampled the end-of-sequence token.
    Stop,
}

impl FinishReason {
    pub fn as_str(self) -> &'static str {
        match self {
            FinishReason::Length => "length",
            FinishReason::Stop => "stop",
        }
    }
    /// TGI's name for it.
    pub fn tgi_str(self) -> &'static str {
        match self {
            FinishReason::Length => "length",
            FinishReason::Stop => "eos_token",
        }
    }
}

/// What a request's channel receives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// New tokens, delivered together (one per step, or a multi-step window's); `finish` is set
    /// with the request's last token.
    Tokens { ids: Vec<u32>, finish: Option<FinishReason> },
    /// The request failed (executor error); no more events follow.
    Error(String),
}

/// A request to generate.
#[derive(Clone, Debug, PartialEq)]
pub struct GenerateParams {
    pub prompt: Vec<u32>,
    pub max_tokens: u32,
    pub ignore_eos: bool,
    pub sampling: SamplingParams,
}

/// What a request asks for log-probabilities of the tokens it samples.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LogprobsAsk {
    /// How many of the most likely tokens to report besides the sampled one (0: that one only).
    pub top: u32,
    /// Of the distribution the request samples from (temperature, top-k and top-p applied), as
    /// TGI reports; else the model's own, vLLM V1's default ("raw_logprobs").
    pub sampled: bool,
}

/// A sampled token's log-probability and the most likely tokens', from its row of logits.
#[derive(Clone, Debug, PartialEq)]
pub struct TokenLogprobs {
    pub logprob: f32,
    /// (token, log-probability) of the `top` most likely tokens, most likely first (ties: lower
    /// id first).
    pub top: Vec<(u32, f32)>,
}

/// What a request asks beyond [`GenerateParams`], whose fields other code builds literally.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RequestOptions {
    /// Tokens that end the request when sampled (vLLM's `stop_token_ids`), `ignore_eos` or not.
    pub stop_token_ids: Vec<u32>,
    pub logprobs: Option<LogprobsAsk>,
}

/// Tokens delivered together, with their log-probabilities (parallel to `ids`) when asked.
#[derive(Clone, Debug, PartialEq)]
pub struct Delivery {
    pub ids: Vec<u32>,
    pub logprobs: Vec<TokenLogprobs>,
    pub finish: Option<FinishReason>,
    /// When a step first ran the request (vLLM's scheduled timestamp): its time waiting ends
    /// there, and its time running starts.
    pub scheduled: Option<Instant>,
}

/// What a request submitted with [`EngineHandle::submit_with`] receives.
#[derive(Clone, Debug, PartialEq)]
pub enum Output {
    Tokens(Delivery),
    /// The request failed (executor error); nothing follows.
    Error(String),
}

/// Why a request was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SubmitError {
    /// The waiting queue is full (HTTP 503).
    Overloaded { waiting: u32, max_waiting: u32 },
    /// The request is invalid or can never fit (HTTP 400).
    Invalid(String),
    /// The engine thread is gone (HTTP 503).
    EngineStopped,
}

impl std::fmt::Display for SubmitError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SubmitError::Overloaded { waiting, max_waiting } => {
                write!(f, "server overloaded: {waiting} requests waiting (limit {max_waiting}); retry later")
            }
            SubmitError::Invalid(m) => f.write_str(m),
            SubmitError::EngineStopped => f.write_str("the engine has stopped"),
        }
    }
}

/// The checks [`EngineHandle::submit`] makes before queueing a request, which need no engine:
/// a prompt of at least one token, all within the vocabulary, and at least one token to
/// generate, the whole within `context_len`. Separate so that the fuzzer (`crate::fuzz`) can run
/// them on every body it sends.
pub fn check_request_fits(params: &GenerateParams, vocab_size: u32, context_len: u32) -> Result<(), SubmitError> {
    if params.prompt.is_empty() {
        return Err(SubmitError::Invalid("the prompt is empty".into()));
    }
    if params.max_tokens == 0 {
        return Err(SubmitError::Invalid("max_tokens must be at least 1".into()));
    }
    if let Some(&bad) = params.prompt.iter().find(|&&t| t >= vocab_size) {
        return Err(SubmitError::Invalid(format!("token id {bad} is outside the vocabulary (size {vocab_size})")));
    }
    let total = params.prompt.len() as u64 + params.max_tokens as u64;
    if total > context_len as u64 {
        return Err(SubmitError::Invalid(format!(
            "this model's maximum context length is {context_len} tokens, but the request asks for {total} tokens ({} in the prompt + {} max_tokens)",
            params.prompt.len(),
            params.max_tokens
        )));
    }
    Ok(())
}

/// Upper bounds (seconds) of the step-time histogram buckets; `+Inf` is implicit.
pub const STEP_TIME_BUCKETS_S: [f64; 12] = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0];

/// A snapshot of the engine's state, for `/metrics`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct EngineStats {
    pub running: u32,
    pub waiting: u32,
    pub kv_blocks_used: u32,
    pub kv_blocks_total: u32,
    pub steps_total: u64,
    /// Cumulative counts per bucket of [`STEP_TIME_BUCKETS_S`] (non-cumulative storage).
    pub step_time_bucket_counts: [u64; STEP_TIME_BUCKETS_S.len()],
    pub step_time_sum_s: f64,
    pub requests_finished_total: u64,
    pub requests_cancelled_total: u64,
    pub requests_rejected_total: u64,
    pub prompt_tokens_total: u64,
    pub generation_tokens_total: u64,
    /// Prompt tokens looked up in the prefix cache and found there; `None` with caching off.
    pub prefix_cache: Option<PrefixStats>,
    /// What n-gram speculation proposed and verification kept; `None` without it.
    pub spec_decode: Option<SpecStats>,
}

/// Most trace rows kept; older rows are dropped first (a limit on everything).
pub const TRACE_ROWS_MAX: usize = 1 << 20;

enum Command {
    Submit { id: u32, params: GenerateParams, options: RequestOptions, sink: Sink, reply: oneshot::Sender<Result<(), SubmitError>> },
    Cancel { id: u32 },
}

/// Where a request's tokens go: the plain [`Event`] channel of [`EngineHandle::submit`], or the
/// [`Output`] channel (log-probabilities included) of [`EngineHandle::submit_with`].
enum Sink {
    Events(mpsc::UnboundedSender<Event>),
    Outputs(mpsc::UnboundedSender<Output>),
}

impl Sink {
    /// Sends a delivery; false when the receiver is gone.
    fn tokens(&self, ids: Vec<u32>, logprobs: Vec<TokenLogprobs>, finish: Option<FinishReason>, scheduled: Option<Instant>) -> bool {
        match self {
            Sink::Events(tx) => tx.send(Event::Tokens { ids, finish }).is_ok(),
            Sink::Outputs(tx) => tx.send(Output::Tokens(Delivery { ids, logprobs, finish, scheduled })).is_ok(),
        }
    }

    fn error(&self, message: String) {
        let _ = match self {
            Sink::Events(tx) => tx.send(Event::Error(message)).is_ok(),
            Sink::Outputs(tx) => tx.send(Output::Error(message)).is_ok(),
        };
    }
}

struct Shared {
    stats: Mutex<EngineStats>,
    trace: Mutex<Vec<StepRow>>,
    /// Whether steps are appended to `trace`: a server that writes no timeline keeps none, so
    /// its memory does not grow with the steps it runs (up to [`TRACE_ROWS_MAX`] rows, ~90 MB).
    tracing: std::sync::atomic::AtomicBool,
    next_id: std::sync::atomic::AtomicU32,
}

/// A cloneable handle to the engine thread. The thread stops when every handle is dropped.
#[derive(Clone)]
pub struct EngineHandle {
    commands: std_mpsc::Sender<Command>,
    shared: Arc<Shared>,
    context_len: u32,
    vocab_size: u32,
    model_name: String,
    /// Every request runs to its `max_tokens`, whatever it asks (`serve --ignore-eos`).
    ignore_eos: bool,
    /// Whether the executor computes log-probabilities ([`Executor::computes_logprobs`]).
    computes_logprobs: bool,
    /// Text <-> ids for the HTTP routes (text prompts, generated text); the engine loop itself
    /// sees only ids.
    tokenizer: Arc<super::Tokenizer>,
}

/// A submitted request: its events, and a guard that cancels it when dropped.
pub struct RequestStream {
    pub events: mpsc::UnboundedReceiver<Event>,
    pub guard: CancelOnDrop,
}

/// Cancels its request (freeing its KV blocks) when dropped, e.g. when a client disconnects.
/// Cancelling a finished request does nothing.
pub struct CancelOnDrop {
    id: u32,
    commands: std_mpsc::Sender<Command>,
}

impl RequestStream {
    /// The engine's id for the request.
    pub fn id(&self) -> u32 {
        self.guard.id
    }
}

/// A request submitted with [`EngineHandle::submit_with`]: its outputs, and a guard that cancels
/// it when dropped.
pub struct OutputStream {
    pub outputs: mpsc::UnboundedReceiver<Output>,
    pub guard: CancelOnDrop,
}

impl OutputStream {
    /// The engine's id for the request.
    pub fn id(&self) -> u32 {
        self.guard.id
    }
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        let _ = self.commands.send(Command::Cancel { id: self.id });
    }
}

impl EngineHandle {
    /// Starts the engine thread. `max_waiting` bounds the scheduler's waiting queue (requests
    /// beyond it get [`SubmitError::Overloaded`]); `context_len` bounds prompt + `max_tokens`.
    pub fn start<E: Executor>(executor: E, config: SchedulerConfig, policy: Policy, max_waiting: u32, context_len: u32) -> EngineHandle {
        Self::start_with(executor, config, policy, max_waiting, context_len, None)
    }

    /// [`EngineHandle::start`] with n-gram speculative decoding: each decoding sequence proposes
    /// drafts by prompt lookup, and every step verifies them exactly (a draft is kept when it
    /// equals the token the model samples in its place, so outputs are the same as without).
    pub fn start_speculative<E: Executor>(
        executor: E,
        config: SchedulerConfig,
        policy: Policy,
        max_waiting: u32,
        context_len: u32,
        lookup: NgramLookup,
    ) -> EngineHandle {
        Self::start_with(executor, config, policy, max_waiting, context_len, Some(lookup))
    }

    fn start_with<E: Executor>(
        executor: E,
        mut config: SchedulerConfig,
        policy: Policy,
        max_waiting: u32,
        context_len: u32,
        lookup: Option<NgramLookup>,
    ) -> EngineHandle {
        config.speculative = lookup.map(|l| SpeculativeConfig { num_speculative_tokens: l.num_speculative_tokens, acceptance: Acceptance::Verified });
        let vocab_size = executor.vocab_size();
        let computes_logprobs = executor.computes_logprobs();
        assert_eq!(policy == Policy::Tgi, config.tgi.is_some(), "SchedulerConfig.tgi is set exactly for policy tgi");
        let shared = Arc::new(Shared {
            stats: Mutex::new(EngineStats { kv_blocks_total: config.num_gpu_blocks, ..EngineStats::default() }),
            trace: Mutex::new(Vec::new()),
            tracing: std::sync::atomic::AtomicBool::new(true),
            next_id: std::sync::atomic::AtomicU32::new(0),
        });
        let (tx, rx) = std_mpsc::channel();
        let thread_shared = shared.clone();
        std::thread::Builder::new()
            .name("servesim-engine".into())
            .spawn(move || {
                // Built here: the policy is not `Send`.
                let scheduler = Scheduler::new(config.clone(), policy.build(&config));
                EngineLoop::new(executor, scheduler, max_waiting, thread_shared, lookup).run(rx)
            })
            .expect("spawn the engine thread");
        let tokenizer = Arc::new(super::Tokenizer::bytes());
        EngineHandle {
            commands: tx,
            shared,
            context_len,
            vocab_size,
            model_name: "servesim".to_string(),
            tokenizer,
            ignore_eos: false,
            computes_logprobs,
        }
    }

    /// Sets the tokenizer of text prompts and generated text (default: one token per UTF-8 byte).
    /// The caller checks that it fits the executor's vocabulary ([`super::Tokenizer::check_fits`]);
    /// ids it produces that do not fit are refused per request by [`EngineHandle::submit`] anyway.
    pub fn with_tokenizer(mut self, tokenizer: Arc<super::Tokenizer>) -> EngineHandle {
        self.tokenizer = tokenizer;
        self
    }

    pub fn tokenizer(&self) -> &Arc<super::Tokenizer> {
        &self.tokenizer
    }

    /// Sets the name `/v1/models` reports.
    pub fn with_model_name(mut self, name: impl Into<String>) -> EngineHandle {
        self.model_name = name.into();
        self
    }

    pub fn model_name(&self) -> &str {
        &self.model_name
    }

    pub fn context_len(&self) -> u32 {
        self.context_len
    }

    pub fn vocab_size(&self) -> u32 {
        self.vocab_size
    }

    /// Makes every request ignore EOS (`serve --ignore-eos`): some clients send `ignore_eos`
    /// only with their warm-up request, and a benchmark needs every request at full length.
    pub fn with_ignore_eos(mut self, ignore_eos: bool) -> EngineHandle {
        self.ignore_eos = ignore_eos;
        self
    }

    /// Whether every request runs to its `max_tokens` (`serve --ignore-eos`).
    pub fn ignores_eos(&self) -> bool {
        self.ignore_eos
    }

    /// Whether requests may ask for log-probabilities ([`RequestOptions::logprobs`]).
    pub fn computes_logprobs(&self) -> bool {
        self.computes_logprobs
    }

    /// Queues a request. Fails at once when the queue is full or the request cannot fit.
    pub async fn submit(&self, params: GenerateParams) -> Result<RequestStream, SubmitError> {
        let (tx, rx) = mpsc::unbounded_channel();
        let guard = self.queue(params, RequestOptions::default(), Sink::Events(tx)).await?;
        Ok(RequestStream { events: rx, guard })
    }

    /// [`EngineHandle::submit`] with stop tokens and log-probabilities; the tokens come as
    /// [`Output`]s. Refuses stop tokens outside the vocabulary, and log-probabilities from an
    /// executor that computes none.
    pub async fn submit_with(&self, params: GenerateParams, options: RequestOptions) -> Result<OutputStream, SubmitError> {
        if let Some(&bad) = options.stop_token_ids.iter().find(|&&t| t >= self.vocab_size) {
            return Err(SubmitError::Invalid(format!("stop_token_ids: token id {bad} is outside the vocabulary (size {})", self.vocab_size)));
        }
        if options.logprobs.is_some() && !self.computes_logprobs {
            return Err(SubmitError::Invalid("logprobs are not available: this server's executor does not compute log-probabilities".into()));
        }
        let (tx, rx) = mpsc::unbounded_channel();
        let guard = self.queue(params, options, Sink::Outputs(tx)).await?;
        Ok(OutputStream { outputs: rx, guard })
    }

    async fn queue(&self, mut params: GenerateParams, options: RequestOptions, sink: Sink) -> Result<CancelOnDrop, SubmitError> {
        params.ignore_eos |= self.ignore_eos;
        check_request_fits(&params, self.vocab_size, self.context_len)?;
        let id = self.shared.next_id.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let (reply_tx, reply_rx) = oneshot::channel();
        self.commands.send(Command::Submit { id, params, options, sink, reply: reply_tx }).map_err(|_| SubmitError::EngineStopped)?;
        let guard = CancelOnDrop { id, commands: self.commands.clone() };
        match reply_rx.await {
            Ok(Ok(())) => Ok(guard),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(SubmitError::EngineStopped),
        }
    }

    /// The engine's state now.
    pub fn stats(&self) -> EngineStats {
        self.shared.stats.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Keeps the per-step trace ([`EngineHandle::trace`]) or not (default: kept).
    pub fn with_trace(self, keep: bool) -> EngineHandle {
        self.shared.tracing.store(keep, std::sync::atomic::Ordering::Relaxed);
        self
    }

    /// The per-step trace so far, in the simulator's timeline format (`cost.total_ns` is the
    /// measured step time; `start_ns` counts from the engine's start).
    pub fn trace(&self) -> Vec<StepRow> {
        self.shared.trace.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

struct Live {
    seq: u32,
    /// Prompt plus generated tokens: what a (re-)prefill computes.
    tokens: Vec<u32>,
    ignore_eos: bool,
    stop_token_ids: Vec<u32>,
    sampling: SamplingParams,
    logprobs: Option<LogprobsAsk>,
    sink: Sink,
    /// Tokens sampled and not yet sent: the scheduler says when a request's tokens go out (at
    /// once, or at the end of a multi-step window).
    unsent: Vec<u32>,
    /// Their log-probabilities, when the request asked.
    unsent_logprobs: Vec<TokenLogprobs>,
    /// It sampled its end of sequence inside a multi-step window, and finishes when the window
    /// ends.
    stopping: bool,
    /// Draft tokens proposed for its next decode (n-gram speculation).
    drafts: Vec<u32>,
    /// When a step first ran it.
    scheduled: Option<Instant>,
}

impl Live {
    /// Whether sampling `token` ends the request: its end of sequence (unless it ignores EOS) or
    /// one of its stop tokens.
    fn ends_at(&self, token: u32, eos: Option<u32>) -> bool {
        (!self.ignore_eos && Some(token) == eos) || self.stop_token_ids.contains(&token)
    }
}

struct EngineLoop<E: Executor> {
    executor: E,
    scheduler: Scheduler,
    max_waiting: u32,
    shared: Arc<Shared>,
    live: HashMap<u32, Live>,
    started: Instant,
    inputs: StepInputs,
    lookup: Option<NgramLookup>,
}

impl<E: Executor> EngineLoop<E> {
    fn new(executor: E, scheduler: Scheduler, max_waiting: u32, shared: Arc<Shared>, lookup: Option<NgramLookup>) -> Self {
        EngineLoop { executor, scheduler, max_waiting, shared, live: HashMap::new(), started: Instant::now(), inputs: StepInputs::default(), lookup }
    }

    fn run(mut self, rx: std_mpsc::Receiver<Command>) {
        loop {
            // Block while idle; otherwise take whatever arrived and step.
            if !self.scheduler.has_work() {
                match rx.recv() {
                    Ok(cmd) => self.apply(cmd),
                    Err(_) => return,
                }
            }
            loop {
                match rx.try_recv() {
                    Ok(cmd) => self.apply(cmd),
                    Err(std_mpsc::TryRecvError::Empty) => break,
                    Err(std_mpsc::TryRecvError::Disconnected) => {
                        if !self.scheduler.has_work() {
                            return;
                        }
                        break;
                    }
                }
            }
            if self.scheduler.has_work() {
                self.step();
            }
            self.publish_stats();
        }
    }

    fn apply(&mut self, cmd: Command) {
        match cmd {
            Command::Submit { id, params, options, sink, reply } => {
                let waiting = self.scheduler.num_waiting();
                if waiting >= self.max_waiting {
                    self.stats().requests_rejected_total += 1;
                    let _ = reply.send(Err(SubmitError::Overloaded { waiting, max_waiting: self.max_waiting }));
                    return;
                }
                let prompt_len = params.prompt.len() as u32;
                let hashes = if self.scheduler.caches_prefixes() {
                    token_block_hashes(&params.prompt, self.scheduler.config().block_size)
                } else {
                    Vec::new()
                };
                match self.scheduler.add_request_with_prefix(id, prompt_len, params.max_tokens, params.max_tokens, &hashes) {
                    Admission::Queued { seq } => {
                        if reply.send(Ok(())).is_err() {
                            self.scheduler.finish_early(seq);
                            return;
                        }
                        self.stats().prompt_tokens_total += prompt_len as u64;
                        self.live.insert(
                            id,
                            Live {
                                seq,
                                tokens: params.prompt,
                                ignore_eos: params.ignore_eos,
                                stop_token_ids: options.stop_token_ids,
                                sampling: params.sampling,
                                logprobs: options.logprobs,
                                sink,
                                unsent: Vec::new(),
                                unsent_logprobs: Vec::new(),
                                stopping: false,
                                drafts: Vec::new(),
                                scheduled: None,
                            },
                        );
                    }
                    Admission::Rejected(r) => {
                        self.stats().requests_rejected_total += 1;
                        let e = match r {
                            Rejection::Overloaded { in_flight, max_concurrent_requests } => {
                                SubmitError::Overloaded { waiting: in_flight, max_waiting: max_concurrent_requests }
                            }
                            other => SubmitError::Invalid(rejection_message(other)),
                        };
                        let _ = reply.send(Err(e));
                    }
                }
            }
            Command::Cancel { id } => {
                if let Some(live) = self.live.remove(&id) {
                    self.scheduler.finish_early(live.seq);
                    self.stats().requests_cancelled_total += 1;
                }
            }
        }
    }

    fn stats(&self) -> std::sync::MutexGuard<'_, EngineStats> {
        self.shared.stats.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn publish_stats(&self) {
        let mut s = self.stats();
        s.running = self.scheduler.num_running();
        s.waiting = self.scheduler.num_waiting();
        s.kv_blocks_used = self.scheduler.kv().pool().blocks_used();
        if self.scheduler.caches_prefixes() {
            s.prefix_cache = Some(self.scheduler.prefix_stats());
        }
        if self.lookup.is_some() {
            s.spec_decode = Some(self.scheduler.spec_stats().clone());
        }
    }

    fn step(&mut self) {
        let start = Instant::now();
        let batch = self.scheduler.schedule().clone();
        if !self.scheduler.step_in_flight() {
            // Nothing fits now (cannot happen with live work and a free cache); avoid spinning.
            std::thread::sleep(Duration::from_millis(1));
            return;
        }
        let (running, waiting) = (self.scheduler.num_running(), self.scheduler.num_waiting());
        let kv_blocks_used = self.scheduler.kv().pool().blocks_used();
        let by_seq: HashMap<u32, u32> = self.live.iter().map(|(&id, l)| (l.seq, id)).collect();
        // Its first step ends its wait, as vLLM's first SCHEDULED event does (a preempted request
        // keeps its first).
        for work in &batch.seqs {
            if let Some(live) = by_seq.get(&work.seq).and_then(|id| self.live.get_mut(id)) {
                live.scheduled.get_or_insert(start);
            }
        }
        self.inputs.seqs.clear();
        for work in &batch.seqs {
            let live = by_seq.get(&work.seq).and_then(|id| self.live.get(id));
            let input = match live {
                Some(l) => {
                    // The known tokens the step computes, then the drafts it verifies.
                    let from = work.context_tokens as usize;
                    let to = from + (work.new_tokens - work.draft_tokens) as usize;
                    let mut token_ids = l.tokens[from..to].to_vec();
                    token_ids.extend(l.drafts.iter().take(work.draft_tokens as usize));
                    SeqInput {
                        token_ids,
                        positions: (work.context_tokens..work.context_tokens + work.new_tokens).collect(),
                        block_table: self.scheduler.kv().block_table(work.seq).to_vec(),
                        sampling: l.sampling,
                        logprobs: l.logprobs,
                    }
                }
                None => SeqInput::default(),
            };
            self.inputs.seqs.push(input);
        }
        let forward_start = Instant::now();
        // A step that only delivers what a multi-step window held has nothing to compute.
        let result = if batch.is_empty() {
            Ok(Vec::new())
        } else {
            catch_unwind(AssertUnwindSafe(|| self.executor.forward(&batch, &self.inputs)))
                .unwrap_or_else(|_| Err("the executor panicked".to_string()))
        };
        let forward_ns = forward_start.elapsed().as_nanos() as u64;
        let sampled_count = batch.sampled_tokens() as usize;
        let result = match result {
            Ok(t) if t.len() == sampled_count => {
                let logprobs = self.executor.take_logprobs();
                Ok(self.verify(&batch, &by_seq, t, logprobs))
            }
            Ok(t) => Err(format!("the executor returned {} tokens for {} sampled rows", t.len(), sampled_count)),
            Err(e) => Err(e),
        };
        let outcome = self.scheduler.finish_step();
        let finished: HashSet<u32> = outcome.finished.iter().map(|f| f.request_id).collect();
        let mut deliver: HashSet<u32> = outcome.tokens.iter().copied().collect();
        deliver.extend(outcome.chunks.iter().map(|c| c.request_id));
        deliver.extend(&finished);
        let elapsed_ns = start.elapsed().as_nanos() as u64;
        let eos = self.executor.eos_token();
        let mut stopped_now = HashSet::new();
        let mut gone = Vec::new();
        let mut failed = Vec::new();
        match result {
            Ok(new_tokens) => {
                let generated: usize = new_tokens.iter().map(|(t, _)| t.len()).sum();
                let sampled = batch.seqs.iter().filter(|w| w.samples_token);
                for (work, (tokens, logprobs)) in sampled.zip(new_tokens) {
                    let Some(&id) = by_seq.get(&work.seq) else { continue };
                    let Some(live) = self.live.get_mut(&id) else { continue };
                    let Some(&token) = tokens.last() else { continue };
                    live.tokens.extend_from_slice(&tokens);
                    live.unsent.extend_from_slice(&tokens);
                    live.unsent_logprobs.extend(logprobs);
                    if finished.contains(&id) || !live.ends_at(token, eos) {
                        continue;
                    }
                    // End of sequence: finished now, or when its multi-step window ends.
                    match self.scheduler.stop(work.seq) {
                        Some(_) => {
                            stopped_now.insert(id);
                        }
                        None => live.stopping = true,
                    }
                }
                // The counts and gauges are published before any client hears of its tokens: a
                // client that reads /metrics after its last response must find its request
                // counted and no longer running.
                {
                    let mut s = self.stats();
                    s.generation_tokens_total += generated as u64;
                    s.requests_finished_total += (finished.len() + stopped_now.len()) as u64;
                }
                self.publish_stats();
                for (&id, live) in self.live.iter_mut().filter(|(id, _)| deliver.contains(id) || stopped_now.contains(id)) {
                    let finish = if stopped_now.contains(&id) || (finished.contains(&id) && live.stopping) {
                        Some(FinishReason::Stop)
                    } else if finished.contains(&id) {
                        Some(FinishReason::Length)
                    } else {
                        None
                    };
                    let ids = std::mem::take(&mut live.unsent);
                    let logprobs = std::mem::take(&mut live.unsent_logprobs);
                    if !live.sink.tokens(ids, logprobs, finish, live.scheduled) && finish.is_none() {
                        gone.push(id); // The client is gone.
                    }
                }
                self.propose_drafts(&batch, &by_seq);
                self.stats().requests_cancelled_total += gone.len() as u64;
            }
            Err(message) => {
                for work in &batch.seqs {
                    if let Some(&id) = by_seq.get(&work.seq) {
                        if let Some(live) = self.live.get(&id) {
                            live.sink.error(message.clone());
                        }
                        if !finished.contains(&id) {
                            failed.push(id);
                        }
                    }
                }
            }
        }
        for id in finished.iter().chain(&stopped_now) {
            self.live.remove(id);
        }
        for id in gone.into_iter().chain(failed) {
            if let Some(live) = self.live.remove(&id) {
                self.scheduler.finish_early(live.seq);
            }
        }
        self.record(start, elapsed_ns, forward_ns, &batch, running, waiting, kv_blocks_used);
    }

    /// Each sampling sequence's new tokens, from the executor's sampled rows (`rows`, one per
    /// [`crate::sched::SeqWork::sampled_rows`]): with drafts, the token sampled after each draft
    /// that matched it and the one after the first that did not (or after the last draft);
    /// without, its one token. An end-of-sequence or stop token ends them. Each token comes with
    /// its log-probabilities where the executor gave them (`logprobs`, parallel to `rows`, or
    /// empty). Tells the scheduler how many drafts each kept.
    fn verify(&mut self, batch: &Batch, by_seq: &HashMap<u32, u32>, rows: Vec<u32>, logprobs: Vec<Option<TokenLogprobs>>) -> Vec<(Vec<u32>, Vec<TokenLogprobs>)> {
        let eos = self.executor.eos_token();
        // An executor that answers fewer rows than it sampled gives none: a request's tokens and
        // their log-probabilities must stay aligned.
        let mut logprobs = if logprobs.len() == rows.len() { logprobs } else { Vec::new() }.into_iter();
        let mut rows = rows.into_iter();
        let mut tokens = Vec::new();
        for work in batch.seqs.iter().filter(|w| w.samples_token) {
            let n = work.sampled_rows() as usize;
            let samples: Vec<u32> = rows.by_ref().take(n).collect();
            let sample_logprobs: Vec<Option<TokenLogprobs>> = logprobs.by_ref().take(n).collect();
            let live = by_seq.get(&work.seq).and_then(|id| self.live.get(id));
            let drafts = live.map_or(&[][..], |l| &l.drafts[..]);
            let mut accepted = drafts.iter().zip(&samples).take(work.draft_tokens as usize).take_while(|(d, t)| d == t).count();
            if let Some(at) = live.and_then(|l| samples.iter().take(accepted + 1).position(|&t| l.ends_at(t, eos))) {
                accepted = at;
            }
            if work.draft_tokens > 0 {
                self.scheduler.accept_drafts(work.seq, accepted as u32);
            }
            let kept = accepted + 1;
            tokens.push((samples.into_iter().take(kept).collect(), sample_logprobs.into_iter().take(kept).flatten().collect()));
        }
        tokens
    }

    /// After a step, n-gram drafts for each sequence that sampled and goes on decoding.
    fn propose_drafts(&mut self, batch: &Batch, by_seq: &HashMap<u32, u32>) {
        let Some(lookup) = self.lookup else { return };
        for work in batch.seqs.iter().filter(|w| w.samples_token) {
            let Some(live) = by_seq.get(&work.seq).and_then(|id| self.live.get_mut(id)) else { continue };
            lookup.propose(&live.tokens, u32::MAX, &mut live.drafts);
            self.scheduler.propose_drafts(work.seq, live.drafts.len() as u32);
        }
    }

    /// Appends the step to the trace: the whole, the host time outside the executor's forward
    /// pass (scheduling, input building, streaming the tokens out) as `overhead`, and the
    /// forward pass split into GEMMs, attention and elementwise work where the executor times
    /// its kernels (else those parts stay zero).
    #[allow(clippy::too_many_arguments)]
    fn record(&self, start: Instant, elapsed_ns: u64, forward_ns: u64, batch: &Batch, running: u32, waiting: u32, kv_blocks_used: u32) {
        let ops = self.executor.last_times().unwrap_or_default();
        let row = StepRow {
            start_ns: start.duration_since(self.started).as_nanos() as u64,
            replica: 0,
            running,
            waiting,
            kv_blocks_used,
            batch_seqs: batch.seqs.len() as u32,
            prefill_tokens: batch.prefill_tokens,
            decode_tokens: batch.decode_tokens,
            cost: StepCost {
                total_ns: elapsed_ns,
                gemm_ns: ops.gemm_ns,
                attention_ns: ops.attention_ns,
                // Sampling is a pass or a few over each sampled row's logits: elementwise work,
                // and where the cost model's sampling term goes too.
                elementwise_ns: ops.elementwise_ns + ops.sampling_ns,
                communication_ns: 0,
                overhead_ns: elapsed_ns.saturating_sub(forward_ns),
            },
        };
        if self.shared.tracing.load(std::sync::atomic::Ordering::Relaxed) {
            let mut trace = self.shared.trace.lock().unwrap_or_else(|e| e.into_inner());
            if trace.len() >= TRACE_ROWS_MAX {
                trace.drain(..TRACE_ROWS_MAX / 2);
            }
            trace.push(row);
        }
        let mut s = self.stats();
        s.steps_total += 1;
        let secs = elapsed_ns as f64 * 1e-9;
        s.step_time_sum_s += secs;
        if let Some(i) = STEP_TIME_BUCKETS_S.iter().position(|&b| secs <= b) {
            s.step_time_bucket_counts[i] += 1;
        }
    }
}

fn rejection_message(r: Rejection) -> String {
    match r {
        Rejection::KvCapacity { blocks_needed, blocks_usable } => format!(
            "the request needs {blocks_needed} KV-cache blocks but the cache has only {blocks_usable} usable blocks"
        ),
        Rejection::InputTooLong { prompt_tokens, max_input_tokens } => {
            format!("the prompt has {prompt_tokens} tokens, more than max_input_tokens ({max_input_tokens})")
        }
        Rejection::TotalTooLong { total_tokens, max_total_tokens } => {
            format!("prompt + max_new_tokens is {total_tokens} tokens, more than max_total_tokens ({max_total_tokens})")
        }
        Rejection::StepBudget { total_tokens, max_num_batched_tokens } => format!(
            "prompt + max_tokens − 1 is {total_tokens} tokens, more than --max-num-batched-tokens ({max_num_batched_tokens}): \
             with --num-scheduler-steps a prompt is computed in one step, and a preempted request recomputes up to that"
        ),
        Rejection::Overloaded { in_flight, max_concurrent_requests } => {
            format!("{in_flight} requests in flight, the limit is {max_concurrent_requests}")
        }
    }
}
