//! The CPU model executor for Llama-architecture models: configuration, weights (seeded random
//! or loaded from `.safetensors`), and a forward pass over the scheduler's [`Batch`] with a paged
//! KV cache, built from the kernels in [`crate::engine::cpu`].
//!
//! ```text
//!  config.json ──► LlamaConfig ──┐
//!  *.safetensors ─► LlamaWeights ┼──► ModelExecutor::forward(&Batch, token ids, &KvCacheManager)
//!  --random-weights tiny|small|100m ┘        │  one paged KV cache per layer, indexed by the
//!                                            │  KvCacheManager's block tables
//!                                            ▼
//!                    logits [sampling sequences, vocab] ──► sampling.rs (greedy; temperature, top-k, top-p)
//! ```
//!
//! [`Batch`]: crate::sched::batch::Batch

mod config;
mod executor;
mod plan;
mod sampling;
mod weights;

#[cfg(test)]
mod tests;

use std::path::PathBuf;

pub use config::LlamaConfig;
pub use executor::{ModelExecutor, OpTimes};
pub use sampling::{GREEDY_TEMPERATURE_MAX, SampleScratch, Sampler, SamplingParams, greedy, kept_weights, lm_like_logits, sample, uniform};
pub use plan::{BlockTables, RowOrder, SeqGroup, StepPlan};
pub use weights::{LayerWeights, LlamaWeights, WeightDtype};

/// Why a model could not be built or a step could not run. Messages name the file and tensor.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    /// `config.json` is malformed or describes a model this executor does not run.
    #[error("{path}: {message}")]
    Config { path: PathBuf, message: String },
    /// A weight file is malformed, or a tensor is missing or has the wrong shape or dtype.
    #[error("{path}: tensor {tensor:?}: {message}")]
    Weights { path: PathBuf, tensor: String, message: String },
    /// A step's inputs disagree with its batch, the cache or the model (a caller's bug or a bad
    /// request; reported instead of panicking so that a server survives it).
    #[error("model step: {0}")]
    Step(String),
    /// The accelerator failed: a driver or library is missing, or an allocation, copy or kernel
    /// launch failed. The message names the device and the operation.
    #[error("{0}")]
    Device(String),
}
