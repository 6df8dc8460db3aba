//! Arrival processes.
use crate::scenario::WorkloadConfig;
pub fn arrival_times_ns(_cfg: &WorkloadConfig, _num_prompts: u32) -> Vec<u64> { todo!() }
