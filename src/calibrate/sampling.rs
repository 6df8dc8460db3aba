//! Timing the engine's sampler: the per-step cost of turning each sampled row's logits into a
//! token, which the cost models price as rows × vocabulary × ns per logit (`cost::sampling`).
//!
//! Sampling a row costs a few passes over its logits whatever the model, so the logits need not
//! be a model's: they are shaped like a language model's (a few large, a long tail), which is
//! what top-k and top-p selection work through.

use std::time::Instant;

use super::backend::{DeviceError, PreparedOp, SamplingShape};
use crate::engine::model::SamplingParams;
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
            logits: model_like_logits((rows * vocab) as usize),
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

/// `len` logits in [0, 14): most small, a few large, as a trained model's are.
fn model_like_logits(len: usize) -> Vec<f32> {
    let mut state = 0x2545_F491_4F6C_DD1Du64;
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let r = (state >> 40) as f32 / (1u64 << 24) as f32;
            12.0 * r.powi(8) + 2.0 * r
        })
        .collect()
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

    #[test]
    fn logits_have_a_long_tail() {
        let logits = model_like_logits(100_000);
        let large = logits.iter().filter(|&&x| x > 7.0).count();
        assert!(logits.iter().all(|&x| (0.0..14.0).contains(&x)));
        assert!(large > 0 && large < 10_000, "{large} of 100,000 above 7");
    }
}
