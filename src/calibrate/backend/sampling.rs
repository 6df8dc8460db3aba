//! Timing the engine's sampler: the per-step cost of turning each sampled row's logits into a
//! token, which the cost models price as rows × vocabulary × ns per logit (`cost::sampling`).
//!
//! Sampling a row costs a few passes over its logits whatever the model, so the logits need not
//! be a model's: they are shaped like a language model's (a few large, a long tail), which is
//! what top-k and top-p selection work through.

use std::time::Instant;

use super::{DeviceError, PreparedOp, SamplingShape};
use crate::engine::model::{SamplingParams, lm_like_logits};
use crate::engine::server::sample_rows;

/// Most logits one shape may hold (rows × vocab): 64 Mi floats, 256 MiB.
const LOGITS_MAX: u64 = 1 << 26;

/// Prepared logits, parameters and seeds of one [`SamplingShape`].
pub struct SamplingOp<'a> {
    logits: Vec<f32>,
    vocab: usize,
    params: Vec<SamplingParams>,
    seeds: Vec<u64>,
    /// The pool the engine samples on; `None`: the calling thread's.
    pool: Option<&'a rayon::ThreadPool>,
}

impl<'a> SamplingOp<'a> {
    pub fn new(shape: &SamplingShape, pool: Option<&'a rayon::ThreadPool>) -> Result<SamplingOp<'a>, DeviceError> {
        let (rows, vocab) = (shape.rows as u64, shape.vocab as u64);
        if rows == 0 || vocab == 0 || rows * vocab > LOGITS_MAX {
            return Err(DeviceError::Unsupported(format!("sampling {rows} rows of {vocab} logits (at most {LOGITS_MAX} logits)")));
        }
        Ok(SamplingOp {
            logits: lm_like_logits((rows * vocab) as usize, 0),
            vocab: vocab as usize,
            params: vec![shape.method.params(); rows as usize],
            seeds: (0..rows).collect(),
            pool,
        })
    }
}

impl PreparedOp for SamplingOp<'_> {
    fn run_once(&mut self) -> Result<f64, DeviceError> {
        let SamplingOp { logits, vocab, params, seeds, pool } = self;
        let run = || {
            let started = Instant::now();
            std::hint::black_box(sample_rows(logits, *vocab, params, seeds));
            started.elapsed().as_nanos() as f64
        };
        Ok(match pool {
            Some(pool) => pool.install(run),
            None => run(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::calibrate::backend::SamplingMethod;

    #[test]
    fn every_method_samples_and_takes_time() {
        for method in SamplingMethod::ALL {
            let mut op = SamplingOp::new(&SamplingShape { method, rows: 4, vocab: 1000 }, None).expect("fits");
            let ns = op.run_once().expect("samples");
            assert!(ns > 0.0 && ns.is_finite(), "{method:?}: {ns} ns");
        }
    }

    #[test]
    fn methods_name_their_parameters() {
        let labels: Vec<String> = SamplingMethod::ALL.iter().map(|m| m.label()).collect();
        assert_eq!(labels, ["greedy", "temperature 1", "top-p 0.9", "top-k 50"]);
        for method in SamplingMethod::ALL {
            assert_eq!(SamplingMethod::parse(method.name()), Some(method));
        }
    }

    #[test]
    fn absurd_sizes_are_refused_before_allocating() {
        for (rows, vocab) in [(0, 1000), (4, 0), (1 << 16, 1 << 16), (u32::MAX, u32::MAX)] {
            let shape = SamplingShape { method: SamplingMethod::Greedy, rows, vocab };
            assert!(SamplingOp::new(&shape, None).is_err(), "{rows} × {vocab}");
        }
    }
}
