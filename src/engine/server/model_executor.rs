//! The real transformer behind the HTTP engine: the CPU [`ModelExecutor`] or the CUDA
//! [`CudaModelExecutor`] as an [`Executor`], with one sampling path for both.

use super::engine::{Executor, LogprobsAsk, StepInputs, TokenLogprobs};
use super::logprobs::token_logprobs;
use crate::engine::cuda::CudaModelExecutor;
use std::cell::RefCell;
use std::sync::Arc;
use std::time::Instant;

use rayon::prelude::*;

use crate::engine::model::{BlockTables, ModelError, ModelExecutor, OpTimes, SampleScratch, SamplingParams, sample, uniform};
use crate::sched::Batch;

/// A forward pass that turns a step into the logits of its sampling sequences: what
/// [`ModelEngine`] needs of a model executor. The CPU and CUDA executors share this contract
/// (see [`ModelExecutor::forward_with_tables`]).
pub trait LogitsModel: Send + 'static {
    fn vocab_size(&self) -> usize;
    /// Tokens per KV block.
    fn block_size(&self) -> usize;
    /// Logits `[S, vocab]` of the `S` rows sampled ([`crate::sched::SeqWork::sampled_rows`]), in
    /// batch order.
    fn forward_with_tables(&mut self, batch: &Batch, token_ids: &[u32], tables: &dyn BlockTables) -> Result<&[f32], ModelError>;
    /// Where the last step's time went, for a model that times its kernels.
    fn last_times(&self) -> Option<OpTimes> {
        None
    }
    /// The thread pool the model computes on, where it has one of its own: sampling runs
    /// there too, a sequence per task.
    fn pool(&self) -> Option<Arc<rayon::ThreadPool>> {
        None
    }
}

impl LogitsModel for ModelExecutor {
    fn vocab_size(&self) -> usize {
        self.config().vocab_size
    }
    fn block_size(&self) -> usize {
        ModelExecutor::block_size(self)
    }
    fn forward_with_tables(&mut self, batch: &Batch, token_ids: &[u32], tables: &dyn BlockTables) -> Result<&[f32], ModelError> {
        ModelExecutor::forward_with_tables(self, batch, token_ids, tables)
    }
    fn last_times(&self) -> Option<OpTimes> {
        Some(ModelExecutor::last_times(self))
    }
    fn pool(&self) -> Option<Arc<rayon::ThreadPool>> {
        ModelExecutor::pool(self)
    }
}

impl LogitsModel for CudaModelExecutor {
    fn vocab_size(&self) -> usize {
        self.config().vocab_size
    }
    fn block_size(&self) -> usize {
        CudaModelExecutor::block_size(self)
    }
    fn forward_with_tables(&mut self, batch: &Batch, token_ids: &[u32], tables: &dyn BlockTables) -> Result<&[f32], ModelError> {
        CudaModelExecutor::forward_with_tables(self, batch, token_ids, tables)
    }
    /// Parts timed with CUDA events, when the executor was asked to (`set_time_parts`).
    fn last_times(&self) -> Option<OpTimes> {
        CudaModelExecutor::last_times(self)
    }
}

/// Block tables as the engine loop hands them over, one per sequence of the batch.
struct InputTables<'a> {
    inputs: &'a StepInputs,
    block_size: u32,
}

impl BlockTables for InputTables<'_> {
    fn block_size(&self) -> u32 {
        self.block_size
    }
    fn table(&self, index: usize, _seq: u32) -> &[u32] {
        &self.inputs.seqs[index].block_table
    }
}

/// Runs a model (the CPU one by default) on each step and samples one token per sequence that
/// samples, with the request's [`SamplingParams`]. A sampled token's uniform number comes from
/// the request's seed (or, when it gave none, its place in the batch) and the token's position,
/// so runs stay reproducible and rows can be sampled in any order, in parallel.
pub struct ModelEngine<M: LogitsModel = ModelExecutor> {
    model: M,
    token_ids: Vec<u32>,
    /// Time the last step spent sampling.
    sampling_ns: u64,
    /// The last step's log-probabilities, a row each (empty when no row asked).
    logprobs: Vec<Option<TokenLogprobs>>,
}

/// The engine on a GPU: the CUDA forward pass with the same sampling as the CPU engine.
pub type CudaModelEngine = ModelEngine<CudaModelExecutor>;

impl<M: LogitsModel> ModelEngine<M> {
    pub fn new(model: M) -> ModelEngine<M> {
        ModelEngine { model, token_ids: Vec::new(), sampling_ns: 0, logprobs: Vec::new() }
    }
}

thread_local! {
    /// Each pool thread's sampling buffers, kept from step to step.
    static SCRATCH: RefCell<SampleScratch> = RefCell::new(SampleScratch::default());
}

/// The seed of the uniform number a request's token at `position` is drawn with: a fresh
/// stream per (seed, position), so every step of a sequence draws anew.
fn draw_seed(seed: u64, position: u32) -> u64 {
    seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ u64::from(position)
}

/// One token per row of `logits` (`[rows, vocab]`), row `i` with `params[i]` and the uniform
/// number of `seeds[i]`, on the current rayon pool. The tokens do not depend on the pool.
pub fn sample_rows(logits: &[f32], vocab: usize, params: &[SamplingParams], seeds: &[u64]) -> Vec<u32> {
    logits.par_chunks_exact(vocab).zip(params.par_iter().zip(seeds)).map(|(row, (p, &seed))| sample_row(row, p, seed)).collect()
}

fn sample_row(row: &[f32], params: &SamplingParams, seed: u64) -> u32 {
    let u = if params.is_greedy() { 0.0 } else { uniform(seed) };
    SCRATCH.with(|s| sample(row, params, u, &mut s.borrow_mut()))
}

/// [`sample_rows`], plus each row's log-probabilities where `asks` wants them, computed in the
/// same task as the row's token while its logits are in cache.
fn sample_rows_with_logprobs(
    logits: &[f32],
    vocab: usize,
    params: &[SamplingParams],
    seeds: &[u64],
    asks: &[Option<LogprobsAsk>],
) -> (Vec<u32>, Vec<Option<TokenLogprobs>>) {
    logits
        .par_chunks_exact(vocab)
        .zip(params.par_iter().zip(seeds).zip(asks))
        .map(|(row, ((p, &seed), ask))| {
            let token = sample_row(row, p, seed);
            (token, ask.map(|ask| token_logprobs(row, token, ask, p)))
        })
        .unzip()
}

impl<M: LogitsModel> Executor for ModelEngine<M> {
    fn forward(&mut self, batch: &Batch, inputs: &StepInputs) -> Result<Vec<u32>, String> {
        self.token_ids.clear();
        for seq in &inputs.seqs {
            self.token_ids.extend_from_slice(&seq.token_ids);
        }
        let vocab = self.model.vocab_size();
        let pool = self.model.pool();
        // A row's uniform number follows its position, so a token verified among drafts is
        // drawn as it would be in a decode of its own.
        let mut asks = Vec::new();
        let (params, seeds): (Vec<SamplingParams>, Vec<u64>) = batch
            .seqs
            .iter()
            .zip(&inputs.seqs)
            .enumerate()
            .flat_map(|(i, (w, input))| {
                let rows = w.sampled_rows() as usize;
                asks.extend(std::iter::repeat_n(input.logprobs, rows));
                let positions = &input.positions[input.positions.len().saturating_sub(rows)..];
                positions.iter().map(move |&position| (input.sampling, draw_seed(input.sampling.seed.unwrap_or(i as u64), position)))
            })
            .unzip();
        let tables = InputTables { inputs, block_size: self.model.block_size() as u32 };
        let logits = self.model.forward_with_tables(batch, &self.token_ids, &tables).map_err(|e| e.to_string())?;
        let started = Instant::now();
        // Rows that ask nothing take the plain path: its cost is what calibration times.
        let with_logprobs = asks.iter().any(Option::is_some);
        let sample_all = || {
            if with_logprobs {
                sample_rows_with_logprobs(logits, vocab, &params, &seeds, &asks)
            } else {
                (sample_rows(logits, vocab, &params, &seeds), Vec::new())
            }
        };
        let (tokens, logprobs) = match pool {
            Some(pool) => pool.install(sample_all),
            None => sample_all(),
        };
        self.logprobs = logprobs;
        self.sampling_ns = started.elapsed().as_nanos() as u64;
        Ok(tokens)
    }

    fn computes_logprobs(&self) -> bool {
        true
    }

    fn take_logprobs(&mut self) -> Vec<Option<TokenLogprobs>> {
        std::mem::take(&mut self.logprobs)
    }

    fn vocab_size(&self) -> u32 {
        self.model.vocab_size() as u32
    }

    fn last_times(&self) -> Option<OpTimes> {
        self.model.last_times().map(|t| OpTimes { sampling_ns: self.sampling_ns, ..t })
    }

    /// Random-weight models have no end-of-sequence token: they run to `max_tokens`.
    fn eos_token(&self) -> Option<u32> {
        None
    }
}
