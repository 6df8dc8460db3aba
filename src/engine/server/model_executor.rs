//! The real transformer behind the HTTP engine: [`ModelExecutor`] as an [`Executor`].

use super::engine::{Executor, StepInputs};
use crate::engine::model::{BlockTables, ModelExecutor, Sampler, greedy};
use crate::sched::Batch;

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

/// Runs the CPU model on each step and samples one token per sequence that samples: greedy at
/// temperature 0, else from a sampler seeded by the request's seed (or, when it gave none, its
/// place in the batch) and the token's position, so runs stay reproducible.
pub struct ModelEngine {
    model: ModelExecutor,
    token_ids: Vec<u32>,
}

impl ModelEngine {
    pub fn new(model: ModelExecutor) -> ModelEngine {
        ModelEngine { model, token_ids: Vec::new() }
    }
}

impl Executor for ModelEngine {
    fn forward(&mut self, batch: &Batch, inputs: &StepInputs) -> Result<Vec<u32>, String> {
        self.token_ids.clear();
        for seq in &inputs.seqs {
            self.token_ids.extend_from_slice(&seq.token_ids);
        }
        let vocab = self.model.config().vocab_size;
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
        self.model.config().vocab_size as u32
    }

    /// Random-weight models have no end-of-sequence token: they run to `max_tokens`.
    fn eos_token(&self) -> Option<u32> {
        None
    }
}
