//! Datasets.
use crate::scenario::Dataset;
pub fn sample_lengths(_dataset: &Dataset, _num_prompts: u32, _seed: u64) -> Vec<(u32, u32)> { todo!() }
