//! The real transformer behind the HTTP engine: the CPU [`ModelExecutor`] or the CUDA
//! [`CudaModelExecutor`] as an [`Executor`], with one sampling path for both.

use super::engine::{Executor, StepInputs};
use crate::engine::cuda::CudaModelExecutor;
use crate::engine::model::{BlockTables, ModelError, ModelExecutor, OpTimes, Sampler, greedy};
use crate::sched::Batch;

/// A forward pass that turns a step into the logits of its sampling sequences: what
/// [`ModelEngine`] needs of a model executor. The CPU and CUDA executors share this contract
/// (see [`ModelExecutor::forward_with_tables`]).
pub trait LogitsModel: Send + 'static {
    fn vocab_size(&self) -> usize;
    /// Tokens per KV block.
    fn block_size(&self) -> usize;
    /// Logits `[S, vocab]` of the `S` sequences with `samples_token`, in batch order.
    fn forward_with_tables(&mut self, batch: &Batch, token_ids: &[u32], tables: &dyn BlockTables) -> Result<&[f32], ModelError>;
    /// Where the last step's time went, for a model that times its kernels.
    fn last_times(&self) -> Option<OpTimes> {
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
/// samples: greedy at temperature 0, else from a sampler seeded by the request's seed (or, when
/// it gave none, its place in the batch) and the token's position, so runs stay reproducible.
pub struct ModelEngine<M: LogitsModel = ModelExecutor> {
    model: M,
    token_ids: Vec<u32>,
}

/// The engine on a GPU: the CUDA forward pass with the same sampling as the CPU engine.
pub type CudaModelEngine = ModelEngine<CudaModelExecutor>;

impl<M: LogitsModel> ModelEngine<M> {
    pub fn new(model: M) -> ModelEngine<M> {
        ModelEngine { model, token_ids: Vec::new() }
    }
}

impl<M: LogitsModel> Executor for ModelEngine<M> {
    fn forward(&mut self, batch: &Batch, inputs: &StepInputs) -> Result<Vec<u32>, String> {
        self.token_ids.clear();
        for seq in &inputs.seqs {
            self.token_ids.extend_from_slice(&seq.token_ids);
        }
        let vocab = self.model.vocab_size();
        let tables = InputTables { inputs, block_size: self.model.block_size() as u32 };
        let logits = self.model.forward_with_tables(batch, &self.token_ids, &tables).map_err(|e| e.to_string())?;
        let sampling = batch.seqs.iter().zip(&inputs.seqs).enumerate().filter(|(_, (w, _))| w.samples_token);
        Ok(sampling
            .zip(logits.chunks_exact(vocab))
            .map(|((i, (_, input)), row)| {
                if input.temperature > 0.0 {
                    // A fresh stream per (seed, position): reproducible, and a different draw at
                    // every step of the sequence.
                    let position = input.positions.last().copied().unwrap_or(0) as u64;
                    let seed = input.seed.unwrap_or(i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ position;
                    Sampler::new(seed, input.temperature).sample(row)
                } else {
                    greedy(row)
                }
            })
            .collect())
    }

    fn vocab_size(&self) -> u32 {
        self.model.vocab_size() as u32
    }

    fn last_times(&self) -> Option<OpTimes> {
        self.model.last_times()
    }

    /// Random-weight models have no end-of-sequence token: they run to `max_tokens`.
    fn eos_token(&self) -> Option<u32> {
        None
    }
}
