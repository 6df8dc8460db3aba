//! Speed target (issue 5): the CPU engine decodes the ~100M model (`100m`) at batch 32 at
//! ≥ 60% of this machine's measured GEMM roofline. The figures measured here are recorded in
//! docs/speed.md ("Engine speed").
//!
//! - `engine/gemm_roofline`: the engine's GEMM (`engine::cpu::Gemm`, the `gemm` crate) on a large
//!   1024×4096×4096 f32 product, on the same threads as the engine. Throughput is in FLOP.
//! - `engine/decode_100m_b32`: one decode step of 32 sequences, each with 128 tokens already in
//!   the paged KV cache. Throughput is the step's matmul FLOPs (below).
//! - `sampling/*`: a decode step of the `small` and `100m` models at batch 32 followed by its
//!   sampling, greedy and at temperature 1 (plain, top-p 0.9, top-k 50), and with the sampler
//!   the engine had before (figures in docs/engine.md, "Sampling").
//! - a summary pass, timed in the same run, prints the achieved GFLOP/s, the roofline, their
//!   ratio, the machine's streaming read bandwidth and the step time that bandwidth allows.
//!
//! FLOPs of a decode step: `2 × P × B`, where `B` = 32 tokens and `P` = the parameters every
//! token multiplies: per layer `h·(q + 2·kv) + q·h + h·2·ffn + ffn·h`, plus the LM head
//! `h·vocab` (the embedding gather is no FLOPs). Attention (`4 × context × q` per token and
//! layer: ~2.4% more at 128 tokens of context) is printed but left out of the figure.

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use rayon::prelude::*;
use servesim::engine::cpu::Gemm;
use servesim::engine::model::{BlockTables, LlamaConfig, LlamaWeights, ModelExecutor, SamplingParams, greedy, uniform};
use servesim::engine::server::sample_rows;
use servesim::sched::batch::{Batch, SeqWork};

/// As in the binary: weights and caches on transparent huge pages.
#[global_allocator]
static ALLOCATOR: servesim::engine::cpu::HugePageAlloc = servesim::engine::cpu::HugePageAlloc;

const BATCH: usize = 32;
const CONTEXT_TOKENS: usize = 128;
const BLOCK_SIZE: usize = 16;
/// The roofline product: large enough that packing and threading overheads vanish.
const ROOFLINE: (usize, usize, usize) = (1024, 4096, 4096);

/// Sequence `i` owns blocks `i·per_seq .. (i + 1)·per_seq`.
struct Tables(Vec<Vec<u32>>);

impl BlockTables for Tables {
    fn block_size(&self) -> u32 {
        BLOCK_SIZE as u32
    }
    fn table(&self, index: usize, _seq: u32) -> &[u32] {
        &self.0[index]
    }
}

/// A decode step of the 100m model, ready to run: executor, batch, tables and token ids.
struct DecodeStep {
    exec: ModelExecutor,
    batch: Batch,
    tables: Tables,
    tokens: Vec<u32>,
}

impl DecodeStep {
    /// The cache holds zeros rather than a real prompt's keys and values: a step's time does
    /// not depend on the values, and a 4096-token prefill would add seconds to every run.
    fn new() -> DecodeStep {
        DecodeStep::with_config(LlamaConfig::m100())
    }

    /// The step on a model of `config`.
    fn with_config(config: LlamaConfig) -> DecodeStep {
        let weights = LlamaWeights::random(&config, 7);
        let per_seq = (CONTEXT_TOKENS + 1).div_ceil(BLOCK_SIZE);
        let exec = ModelExecutor::new(weights, BATCH * per_seq, BLOCK_SIZE).expect("executor");
        let tables = Tables((0..BATCH).map(|i| ((i * per_seq) as u32..((i + 1) * per_seq) as u32).collect()).collect());
        let mut batch = Batch::default();
        for seq in 0..BATCH as u32 {
            batch.push_decode(SeqWork {
                seq,
                new_tokens: 1,
                context_tokens: CONTEXT_TOKENS as u32,
                samples_token: true,
                draft_tokens: 0,
            });
        }
        let tokens = (0..BATCH as u32).map(|i| (i * 997) % config.vocab_size as u32).collect();
        DecodeStep { exec, batch, tables, tokens }
    }

    fn run(&mut self) {
        let logits = self.exec.forward_with_tables(&self.batch, &self.tokens, &self.tables).expect("decode step");
        black_box(logits);
    }

    /// Matmul FLOPs of the step (see the module's doc).
    fn matmul_flops(&self) -> f64 {
        let c = self.exec.config();
        let (h, q, kv, f, v) = (c.hidden_size, c.q_dim(), c.kv_dim(), c.intermediate_size, c.vocab_size);
        let per_layer = h * (q + 2 * kv) + q * h + h * 2 * f + f * h;
        2.0 * (c.num_layers * per_layer + h * v) as f64 * BATCH as f64
    }

    /// Attention FLOPs of the step: QKᵀ and PV over `CONTEXT_TOKENS + 1` positions.
    fn attention_flops(&self) -> f64 {
        let c = self.exec.config();
        4.0 * ((CONTEXT_TOKENS + 1) * c.q_dim() * c.num_layers * BATCH) as f64
    }

    /// Bytes of weights a step streams (f32), the embedding gather aside.
    fn weight_bytes(&self) -> f64 {
        self.matmul_flops() / (2.0 * BATCH as f64) * 4.0
    }
}

/// Operands of the roofline GEMM.
struct RooflineGemm {
    gemm: Gemm,
    a: Vec<f32>,
    b: Vec<f32>,
    c: Vec<f32>,
}

impl RooflineGemm {
    fn new() -> RooflineGemm {
        let (m, n, k) = ROOFLINE;
        let fill = |len: usize, salt: usize| (0..len).map(|i| ((i * 31 + salt) % 97) as f32 / 97.0 - 0.5).collect();
        RooflineGemm { gemm: Gemm::new(m, n, k), a: fill(m * k, 1), b: fill(k * n, 2), c: vec![0.0; m * n] }
    }

    fn run(&mut self) {
        self.gemm.run(&self.a, &self.b, &mut self.c, rayon::current_num_threads());
        black_box(&self.c);
    }
}

/// Streaming read bandwidth in bytes/s: the best of a few parallel sums over 1 GiB, on every
/// thread of the pool (a decode step at batch 32 reads each weight once, so this bounds it).
fn read_bandwidth_bytes_per_s() -> f64 {
    const LANES: usize = 16;
    let buf = vec![1.0f32; (1 << 30) / 4];
    let chunk = buf.len().div_ceil(rayon::current_num_threads() * 8);
    let mut best = Duration::MAX;
    for _ in 0..4 {
        let t = Instant::now();
        // Independent lanes so the sum vectorises and is bound by memory, not by one add chain.
        let sum: f32 = buf
            .par_chunks(chunk)
            .map(|c| {
                let mut acc = [0.0f32; LANES];
                for block in c.chunks_exact(LANES) {
                    for (a, x) in acc.iter_mut().zip(block) {
                        *a += x;
                    }
                }
                acc.iter().sum::<f32>()
            })
            .sum();
        best = best.min(t.elapsed());
        black_box(sum);
    }
    (buf.len() * 4) as f64 / best.as_secs_f64()
}

/// Median wall time of `runs` calls after one warm-up.
fn median_time(runs: usize, mut f: impl FnMut()) -> Duration {
    f();
    let mut times: Vec<Duration> = (0..runs)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed()
        })
        .collect();
    times.sort();
    times[runs / 2]
}

fn bench_engine(c: &mut Criterion) {
    let mut group = c.benchmark_group("engine");
    group.sample_size(10).warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(5));

    let mut roofline = RooflineGemm::new();
    group.throughput(Throughput::Elements(roofline.gemm.flops() as u64));
    group.bench_function("gemm_roofline_1024x4096x4096", |b| b.iter(|| roofline.run()));

    let mut step = DecodeStep::new();
    group.throughput(Throughput::Elements(step.matmul_flops() as u64));
    group.bench_function("decode_100m_b32_ctx128", |b| b.iter(|| step.run()));
    group.finish();

    // The ratio from timings taken back to back in one run, so that load from other processes
    // affects both sides alike.
    let threads = rayon::current_num_threads();
    let roofline_ns = median_time(5, || roofline.run()).as_nanos() as f64;
    let step_ns = median_time(11, || step.run()).as_nanos() as f64;
    let roofline_gflops = roofline.gemm.flops() / roofline_ns;
    let step_gflops = step.matmul_flops() / step_ns;
    let bandwidth = read_bandwidth_bytes_per_s();
    let step_ns_bandwidth_bound = step.weight_bytes() / bandwidth * 1e9;
    println!("engine summary ({threads} threads):");
    println!("  GEMM roofline {}×{}×{}: {roofline_gflops:.1} GFLOP/s", ROOFLINE.0, ROOFLINE.1, ROOFLINE.2);
    println!(
        "  decode 100m, batch {BATCH}, context {CONTEXT_TOKENS}: {:.1} ms/step, {step_gflops:.1} GFLOP/s \
         (matmul FLOPs {:.2} G/step; attention adds {:.2} G), {:.0}% of the roofline",
        step_ns / 1e6,
        step.matmul_flops() / 1e9,
        step.attention_flops() / 1e9,
        100.0 * step_gflops / roofline_gflops
    );
    println!(
        "  read bandwidth {:.1} GB/s: streaming the {:.0} MB of f32 weights alone takes {:.1} ms \
         ({:.1} GFLOP/s at most)",
        bandwidth / 1e9,
        step.weight_bytes() / 1e6,
        step_ns_bandwidth_bound / 1e6,
        step.matmul_flops() / step_ns_bandwidth_bound
    );
}

/// The sampler the engine had before (kept here as the baseline the figures compare with):
/// per row, three scalar passes over the vocabulary (max, Σ exp, then exp again along the
/// cumulative sum), one row after another on the calling thread.
fn baseline_sample(row: &[f32], temperature: f32, u: f32) -> u32 {
    let max = row[greedy(row) as usize];
    let weight = |l: f32| if l.is_nan() { 0.0 } else { ((l - max) / temperature).exp() };
    let total: f32 = row.iter().map(|&l| weight(l)).sum();
    let target = u * total;
    let mut acc = 0.0;
    for (i, &l) in row.iter().enumerate() {
        acc += weight(l);
        if acc > target {
            return i as u32;
        }
    }
    row.len() as u32 - 1
}

/// A step of `model` at batch 32 followed by its sampling: the forward pass, then one token per
/// sequence on the executor's pool.
struct SampledStep {
    step: DecodeStep,
    seeds: Vec<u64>,
}

impl SampledStep {
    fn new(config: LlamaConfig) -> SampledStep {
        SampledStep { step: DecodeStep::with_config(config), seeds: (0..BATCH as u64).collect() }
    }

    fn run(&mut self, params: &SamplingParams) {
        let vocab = self.step.exec.config().vocab_size;
        let pool = self.step.exec.pool();
        let logits = self.step.exec.forward_with_tables(&self.step.batch, &self.step.tokens, &self.step.tables).expect("step");
        let all = vec![*params; BATCH];
        let sample = || sample_rows(logits, vocab, &all, &self.seeds);
        black_box(match &pool {
            Some(pool) => pool.install(sample),
            None => sample(),
        });
    }

    fn run_baseline(&mut self, temperature: f32) {
        let vocab = self.step.exec.config().vocab_size;
        let logits = self.step.exec.forward_with_tables(&self.step.batch, &self.step.tokens, &self.step.tables).expect("step");
        let tokens: Vec<u32> =
            logits.chunks_exact(vocab).enumerate().map(|(i, row)| baseline_sample(row, temperature, uniform(i as u64))).collect();
        black_box(tokens);
    }
}

/// Sampling's share of a decode step: greedy against temperature 1 (every token, top-p 0.9,
/// top-k 50) and the earlier sampler, on the `small` model (where sampling weighs most) and
/// `100m`, batch 32, vocabulary 32,000, on the pool the step runs on (rayon's global one here).
fn bench_sampling(c: &mut Criterion) {
    let mut group = c.benchmark_group("sampling");
    group.sample_size(10).warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(3));
    let t1 = |top_p, top_k| SamplingParams { temperature: 1.0, top_p, top_k, seed: None };
    let cases = [("greedy", SamplingParams::GREEDY), ("t1", t1(1.0, 0)), ("t1_top_p_0.9", t1(0.9, 0)), ("t1_top_k_50", t1(1.0, 50))];
    for (name, config) in [("small", LlamaConfig::small()), ("100m", LlamaConfig::m100())] {
        let mut step = SampledStep::new(config);
        for (case, params) in &cases {
            group.bench_function(format!("step_{name}_b32_{case}"), |b| b.iter(|| step.run(params)));
        }
        group.bench_function(format!("step_{name}_b32_t1_baseline"), |b| b.iter(|| step.run_baseline(1.0)));
        // Back to back in one run, so that load from other processes affects all alike.
        let greedy_ns = median_time(11, || step.run(&SamplingParams::GREEDY)).as_nanos() as f64;
        println!("sampling summary, {name} model, batch {BATCH} ({} threads):", step.step.exec.threads());
        println!("  greedy step {:.2} ms", greedy_ns / 1e6);
        for (case, params) in &cases[1..] {
            let ns = median_time(11, || step.run(params)).as_nanos() as f64;
            println!("  {case} step {:.2} ms ({:+.1}% over greedy)", ns / 1e6, 100.0 * (ns / greedy_ns - 1.0));
        }
        let ns = median_time(11, || step.run_baseline(1.0)).as_nanos() as f64;
        println!("  t1 with the earlier sampler {:.2} ms ({:+.1}% over greedy)", ns / 1e6, 100.0 * (ns / greedy_ns - 1.0));
    }
    group.finish();
}

criterion_group!(benches, bench_engine, bench_sampling);
criterion_main!(benches);
