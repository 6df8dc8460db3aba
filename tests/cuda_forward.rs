//! The CUDA forward pass against the CPU executor, on the tiny and small random-weight models:
//! mixed steps (prompts, chunked prefills, one-token prompts, decodes, a context longer than one
//! 512-token decode partition) over a paged cache with scattered blocks, then greedy decoding.
//!
//! Skips, with the reason printed, when there is no CUDA driver, GPU, NVRTC or cuBLASLt, unless
//! `SERVESIM_REQUIRE_GPU=1`.
//!
//! Tolerance. Both executors use the same weights: the GPU rounds them to bf16 at upload, and the
//! CPU executor is given the same bf16-rounded values (in f32). What remains is the GPU rounding
//! each stored activation to bf16 (relative error up to 2⁻⁹ ≈ 0.2%: GEMM outputs, norms, the
//! residual stream, q/k/v, the cache, attention outputs, the logits) while the CPU keeps f32.
//! Some tens of such roundings per layer, of independent sign, accumulate to about 1% of a
//! logit's scale over 2–4 layers. A layout or indexing bug instead gives errors as large as the
//! logits themselves (relative error ~1). So each sampled row must have a relative L2 error
//! below 5% and no logit off by more than 25% of the row's RMS (the largest of 32 000 errors of
//! ~1% RMS is ~5% RMS). Greedy tokens must agree wherever the CPU's top-two margin exceeds 10% of
//! the row's RMS: a flip needs the two logits' errors to add up to the margin, which errors of
//! ~1% RMS do not; closer calls may legitimately flip and are only reported. The CPU's token is
//! fed to both executors so they stay on one sequence.

mod common;
use common::required;

use servesim::engine::cuda::CudaModelExecutor;
use servesim::engine::cuda::device::{check_cublaslt, check_nvrtc, device_count};
use servesim::engine::cuda::forward::round_weights_to_bf16;
use servesim::engine::model::{BlockTables, LlamaConfig, LlamaWeights, ModelExecutor, greedy};
use servesim::sched::batch::{Batch, SeqWork};

const REL_L2_MAX: f64 = 0.05;
const MAX_ABS_OF_RMS: f64 = 0.25;
const GREEDY_MARGIN_OF_RMS: f64 = 0.1;

/// Why the GPU tests cannot run here, or `None` when they can.
fn unavailable() -> Option<String> {
    let reason = match device_count() {
        Err(e) => Some(e.to_string()),
        Ok(0) => Some("the CUDA driver reports no GPU".to_string()),
        Ok(_) => check_nvrtc().err().or_else(|| check_cublaslt().err()).map(|e| e.to_string()),
    };
    if let Some(r) = &reason {
        assert!(!required("SERVESIM_REQUIRE_GPU"), "SERVESIM_REQUIRE_GPU=1 but the GPU tests cannot run: {r}");
    }
    reason
}

/// Block tables by position in the batch, and the block size.
struct Tables(Vec<Vec<u32>>, u32);

/// One sequence: every token known so far (prompt, then sampled), how many have KV in the
/// cache, and its blocks.
struct Seq {
    tokens: Vec<u32>,
    computed: usize,
    blocks: Vec<u32>,
}

/// Both executors over one cache layout, and the block pool (handed out in a scattered order,
/// as in a cache that has served many requests).
struct Pair {
    cpu: ModelExecutor,
    gpu: CudaModelExecutor,
    block_size: usize,
    free: Vec<u32>,
    seqs: Vec<Seq>,
    vocab: usize,
    greedy_checked: usize,
    /// The worst relative L2 error and worst |logit error| / RMS seen, for the log.
    worst: (f64, f64),
}

impl Pair {
    fn new(config: &LlamaConfig, seed: u64, num_blocks: usize, block_size: usize) -> Pair {
        let weights = round_weights_to_bf16(&LlamaWeights::random(config, seed));
        let mut gpu = CudaModelExecutor::new(&weights, num_blocks, block_size, 0).unwrap_or_else(|e| panic!("{e}"));
        // Events between kernels of different kinds, eagerly and inside the decode graphs.
        gpu.set_time_parts(true);
        println!("running on {} ({})", gpu.device().label(), gpu.device().name());
        let cpu = ModelExecutor::new(weights, num_blocks, block_size).unwrap();
        // Blocks 7, 7 + 11, 7 + 22, … modulo the pool: scattered, and each exactly once.
        let free = (0..num_blocks as u32).map(|i| (7 + 11 * i) % num_blocks as u32).rev().collect();
        Pair { cpu, gpu, block_size, free, seqs: Vec::new(), vocab: config.vocab_size, greedy_checked: 0, worst: (0.0, 0.0) }
    }

    /// Adds a prompt of `len` pseudo-random tokens; returns its index.
    fn add(&mut self, len: usize, salt: u32) -> usize {
        let mix = |i: u32| i.wrapping_mul(2_654_435_761).wrapping_add(salt.wrapping_mul(40_503));
        let tokens = (0..len as u32).map(|i| mix(i) % self.vocab as u32).collect();
        self.seqs.push(Seq { tokens, computed: 0, blocks: Vec::new() });
        self.seqs.len() - 1
    }

    /// Runs one step on both executors: `(sequence, new tokens)` from each sequence's first
    /// uncomputed token; a sequence samples when the step reaches its last known token. Compares
    /// the logits, and appends the CPU's greedy token to each sampling sequence.
    fn step(&mut self, work: &[(usize, usize)], label: &str) {
        let mut seqs = Vec::new();
        let mut ids = Vec::new();
        let mut tables = Vec::new();
        for &(i, new) in work {
            let s = &mut self.seqs[i];
            assert!(s.computed + new <= s.tokens.len(), "{label}: sequence {i} has no {new} tokens to compute");
            while s.blocks.len() * self.block_size < s.computed + new {
                s.blocks.push(self.free.pop().expect("KV pool exhausted"));
            }
            let samples = s.computed + new == s.tokens.len();
            seqs.push(SeqWork { seq: i as u32, new_tokens: new as u32, context_tokens: s.computed as u32, samples_token: samples, draft_tokens: 0 });
            ids.extend_from_slice(&s.tokens[s.computed..s.computed + new]);
            tables.push(s.blocks.clone());
        }
        let batch = Batch { seqs, ..Default::default() };
        let tables = Tables(tables, self.block_size as u32);
        let cpu = self.cpu.forward_with_tables(&batch, &ids, &tables).unwrap().to_vec();
        let gpu = self.gpu.forward_with_tables(&batch, &ids, &tables).unwrap_or_else(|e| panic!("{label}: {e}")).to_vec();
        assert_eq!(cpu.len(), gpu.len(), "{label}: logits length");
        let sampling: Vec<usize> = batch.seqs.iter().filter(|w| w.samples_token).map(|w| w.seq as usize).collect();
        assert_eq!(cpu.len(), sampling.len() * self.vocab);
        for ((c, g), &i) in cpu.chunks_exact(self.vocab).zip(gpu.chunks_exact(self.vocab)).zip(&sampling) {
            let (rms, rel_l2, max_abs) = compare_row(c, g, &format!("{label}, sequence {i}"));
            self.worst = (self.worst.0.max(rel_l2), self.worst.1.max(max_abs / rms));
            let (cpu_token, margin) = top_two_margin(c);
            let gpu_token = greedy(g);
            let decisive = GREEDY_MARGIN_OF_RMS * rms;
            if margin > decisive {
                assert_eq!(gpu_token, cpu_token, "{label}, sequence {i}: greedy tokens differ (CPU margin {margin:.4})");
                self.greedy_checked += 1;
            } else if gpu_token != cpu_token {
                println!("{label}, sequence {i}: near tie (margin {margin:.4} <= {decisive:.4}): CPU {cpu_token}, GPU {gpu_token}");
            }
            self.seqs[i].tokens.push(cpu_token);
        }
        for &(i, new) in work {
            self.seqs[i].computed += new;
        }
    }
}

impl BlockTables for Tables {
    fn block_size(&self) -> u32 {
        self.1
    }
    fn table(&self, index: usize, _seq: u32) -> &[u32] {
        &self.0[index]
    }
}

/// Checks one row of logits; returns the CPU row's RMS, the relative L2 error and the largest
/// absolute error.
fn compare_row(cpu: &[f32], gpu: &[f32], what: &str) -> (f64, f64, f64) {
    let n = cpu.len() as f64;
    let rms = (cpu.iter().map(|&x| (x as f64).powi(2)).sum::<f64>() / n).sqrt();
    let diff2: f64 = cpu.iter().zip(gpu).map(|(&c, &g)| (c as f64 - g as f64).powi(2)).sum();
    let rel_l2 = (diff2 / n).sqrt() / rms.max(1e-12);
    let (worst, max_abs) = cpu
        .iter()
        .zip(gpu)
        .map(|(&c, &g)| (c as f64 - g as f64).abs())
        .enumerate()
        .fold((0, 0.0), |best, (j, d)| if d > best.1 { (j, d) } else { best });
    assert!(gpu.iter().all(|x| x.is_finite()), "{what}: non-finite GPU logits");
    assert!(
        rel_l2 <= REL_L2_MAX && max_abs <= MAX_ABS_OF_RMS * rms,
        "{what}: relative L2 error {rel_l2:.4} (max {REL_L2_MAX}), worst logit {worst}: CPU {} GPU {} (|diff| {max_abs:.4}, max {:.4})",
        cpu[worst],
        gpu[worst],
        MAX_ABS_OF_RMS * rms
    );
    (rms, rel_l2, max_abs)
}

/// The argmax and its lead over the runner-up.
fn top_two_margin(logits: &[f32]) -> (u32, f64) {
    let best = greedy(logits);
    let second = logits.iter().enumerate().filter(|&(j, _)| j != best as usize).map(|(_, &x)| x).fold(f32::NEG_INFINITY, f32::max);
    (best, logits[best as usize] as f64 - second as f64)
}

/// Mixed prefill and decode steps, then greedy decoding, for one model.
fn mixed_batches_then_greedy(config: LlamaConfig, block_size: usize, test: &str) {
    if let Some(reason) = unavailable() {
        println!("SKIPPED {test}: {reason}");
        return;
    }
    let mut p = Pair::new(&config, 42, 512, block_size);
    let a = p.add(13, 1);
    let b = p.add(7, 2);
    let c = p.add(1, 3);
    let long = p.add(600, 4);
    // Step 1: a whole prompt, the first chunk of another (no sample), a one-token prompt (the
    // decode kernel's path with an empty cache), and a prompt of 600 tokens (19 prefill tiles).
    p.step(&[(a, 13), (b, 5), (c, 1), (long, 600)], "step 1");
    // Step 2: decodes (one over 601 tokens: two decode partitions), the rest of the chunked
    // prompt (its context from the cache), and a new prompt.
    let d = p.add(40, 5);
    p.step(&[(a, 1), (b, 2), (c, 1), (long, 1), (d, 40)], "step 2");
    let parts = p.gpu.last_times().expect("parts timed");
    assert!(parts.gemm_ns > 0 && parts.attention_ns > 0 && parts.elementwise_ns > 0, "eager step parts: {parts:?}");
    // Greedy decoding of every sequence: pure-decode steps of 5 sequences, replayed from the
    // CUDA graph of size 8 (padded), captured at the first of them.
    for n in 0..4 {
        let all: Vec<(usize, usize)> = [a, b, c, long, d].iter().map(|&i| (i, 1)).collect();
        p.step(&all, &format!("decode step {}", n + 1));
    }
    let (replays, captures) = p.gpu.graph_counts();
    assert_eq!((replays, captures), (4, 1), "{test}: decode steps replayed from graphs, graphs captured");
    let parts = p.gpu.last_times().expect("parts timed in the graph");
    assert!(parts.gemm_ns > 0 && parts.attention_ns > 0 && parts.elementwise_ns > 0, "graph step parts: {parts:?}");
    // The same steps launched eagerly agree too.
    p.gpu.set_cuda_graphs(false);
    let all: Vec<(usize, usize)> = [a, b, c, long, d].iter().map(|&i| (i, 1)).collect();
    p.step(&all, "eager decode step");
    assert_eq!(p.gpu.graph_counts().0, 4);
    println!(
        "{test}: worst relative L2 error {:.4} (max {REL_L2_MAX}), worst |error| / RMS {:.4} (max {MAX_ABS_OF_RMS}); \
         greedy tokens checked equal on {} rows",
        p.worst.0, p.worst.1, p.greedy_checked
    );
    assert!(p.greedy_checked > 0, "{test}: every greedy comparison was a near tie");
}

#[test]
fn cuda_forward_matches_cpu_tiny() {
    mixed_batches_then_greedy(LlamaConfig::tiny(), 4, "cuda_forward_matches_cpu_tiny");
}

#[test]
fn cuda_forward_matches_cpu_small() {
    mixed_batches_then_greedy(LlamaConfig::small(), 16, "cuda_forward_matches_cpu_small");
}

/// Inconsistent inputs are a step error from the shared planning, before the GPU is touched.
#[test]
fn cuda_forward_rejects_inconsistent_inputs() {
    let test = "cuda_forward_rejects_inconsistent_inputs";
    if let Some(reason) = unavailable() {
        println!("SKIPPED {test}: {reason}");
        return;
    }
    let weights = LlamaWeights::random(&LlamaConfig::tiny(), 1);
    let mut gpu = CudaModelExecutor::new(&weights, 8, 4, 0).unwrap_or_else(|e| panic!("{e}"));
    let batch = Batch { seqs: vec![SeqWork { seq: 0, new_tokens: 6, context_tokens: 0, samples_token: true, draft_tokens: 0 }], ..Default::default() };
    let short = Tables(vec![vec![1]], 4);
    let e = gpu.forward_with_tables(&batch, &[1, 2, 3, 4, 5, 6], &short).unwrap_err().to_string();
    assert!(e.contains("needs 2 KV blocks"), "{e}");
}
