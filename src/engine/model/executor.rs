//! The forward pass of a Llama model over one scheduler step, with a paged KV cache.
//!
//! ```text
//!  token ids ─ embed ─► x [T, h]          (T = the step's new tokens: prefill chunks first, then decodes)
//!  per layer:  rms_norm ─ gemm qkv ─ split q|k|v ─ rope ─ write_paged (this layer's cache)
//!              ├─ prefill_attention (chunks, over cached context + themselves)
//!              └─ decode_attention  (one token per sequence, over its paged history)
//!              gemm o (x +=) ─ rms_norm ─ gemm gate_up ─ silu_and_mul ─ gemm down (x +=)
//!  sampled rows of x ─ rms_norm ─ gemm lm_head ─► logits [sampling sequences, vocab]
//! ```
//!
//! Tokens are reordered internally (prefill sequences, then decodes, each in batch order) so each
//! attention kernel reads one contiguous run of queries; every other op is per token and does
//! not care. Logits come back in batch order.

use crate::engine::cpu::{
    AttentionDims, Gemm, PagedCache, PagedKv, Rope, decode_attention, prefill_attention, rms_norm, silu_and_mul,
    write_paged,
};
use crate::sched::batch::Batch;
use crate::sched::kv::KvCacheManager;

use super::plan::{BlockTables, RowOrder, StepPlan};
use super::{LlamaConfig, LlamaWeights, ModelError};

/// Runs a Llama model step by step over the scheduler's batches. Owns the weights, the RoPE
/// table, the paged KV cache of every layer, and reusable buffers: after the first steps of the
/// largest shape, a step allocates nothing but the `gemm` crate's packing buffers.
pub struct ModelExecutor {
    weights: LlamaWeights,
    rope: Rope,
    dims: AttentionDims,
    /// Positions per KV block; must equal the `KvCacheManager`'s.
    block_size: usize,
    num_blocks: usize,
    /// Per layer, `[num_blocks, block_size, num_kv_heads, head_dim]` f32.
    k_cache: Vec<Vec<f32>>,
    /// Per layer, like `k_cache`.
    v_cache: Vec<Vec<f32>>,
    /// Threads each GEMM may use (of the current rayon pool).
    threads: usize,
    /// The executor's own pool, where [`ModelExecutor::use_own_pool`] made one: every kernel
    /// of a step runs on it, whatever pool the caller is in.
    pool: Option<std::sync::Arc<rayon::ThreadPool>>,
    meta: StepPlan,
    buf: Buffers,
    /// Where the last step's time went.
    last_times: OpTimes,
}

/// A step's time by kind of op, in the simulator's `StepCost` breakdown: GEMMs, attention, and
/// the rest of the forward pass (embedding, norms, RoPE, the KV cache write, activation,
/// copies). Timed around each kernel, so the engine's trace can be held against the cost
/// model part by part.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OpTimes {
    pub gemm_ns: u64,
    pub attention_ns: u64,
    pub elementwise_ns: u64,
    /// Logits to tokens (greedy or sampled), for an engine that samples after the forward pass.
    pub sampling_ns: u64,
}

/// Charges the time since the last lap to one kind of op. Every kernel returns when its work
/// is done (rayon joins inside it), so consecutive laps split the step without gaps.
struct Laps {
    last: std::time::Instant,
    times: OpTimes,
}

impl Laps {
    fn start() -> Laps {
        Laps { last: std::time::Instant::now(), times: OpTimes::default() }
    }

    fn elapsed_ns(&mut self) -> u64 {
        let now = std::time::Instant::now();
        let ns = now.duration_since(self.last).as_nanos() as u64;
        self.last = now;
        ns
    }

    fn gemm(&mut self) {
        self.times.gemm_ns += self.elapsed_ns();
    }

    fn attention(&mut self) {
        self.times.attention_ns += self.elapsed_ns();
    }

    fn elementwise(&mut self) {
        self.times.elementwise_ns += self.elapsed_ns();
    }
}

/// Activations, grown to the largest step seen and never shrunk.
#[derive(Default)]
struct Buffers {
    /// Residual stream `[T, hidden]`.
    x: Vec<f32>,
    /// Normalised input of a sub-layer `[T, hidden]`.
    normed: Vec<f32>,
    /// `[T, q_dim + 2·kv_dim]`.
    qkv: Vec<f32>,
    /// `[T, heads, head_dim]`.
    q: Vec<f32>,
    /// `[T, kv_heads, head_dim]`.
    k: Vec<f32>,
    v: Vec<f32>,
    /// Attention output `[T, heads, head_dim]`.
    attn: Vec<f32>,
    /// `[T, 2·ffn]`.
    gate_up: Vec<f32>,
    /// `[T, ffn]`.
    act: Vec<f32>,
    /// Sampled rows before and after the final norm, `[S, hidden]`.
    last: Vec<f32>,
    last_normed: Vec<f32>,
    /// `[S, vocab]`.
    logits: Vec<f32>,
}

/// `v[..len]`, growing `v` first if it is shorter.
fn grow(v: &mut Vec<f32>, len: usize) -> &mut [f32] {
    if v.len() < len {
        v.resize(len, 0.0);
    }
    &mut v[..len]
}

impl ModelExecutor {
    /// An executor with a KV cache of `num_blocks` blocks of `block_size` positions per layer
    /// (`config.kv_bytes_per_block(block_size) · num_blocks` bytes, allocated now). GEMMs use
    /// every thread of the current rayon pool; see [`ModelExecutor::set_threads`].
    pub fn new(weights: LlamaWeights, num_blocks: usize, block_size: usize) -> Result<ModelExecutor, ModelError> {
        let c = &weights.config;
        weights.validate().map_err(ModelError::Step)?;
        if !block_size.is_power_of_two() {
            return Err(ModelError::Step(format!("block_size {block_size} must be a power of two")));
        }
        if num_blocks > u32::MAX as usize {
            return Err(ModelError::Step(format!("{num_blocks} KV blocks do not fit 32-bit block ids")));
        }
        // No position past the KV cache's capacity is ever computed: the table stops there, not at
        // a config's max_position_embeddings (a config may claim billions of positions).
        let positions = c.max_position_embeddings.min(num_blocks.saturating_mul(block_size)).max(1);
        let rope = Rope::new(c.head_dim, c.rope_theta, positions);
        let dims = AttentionDims { num_heads: c.num_heads, num_kv_heads: c.num_kv_heads, head_dim: c.head_dim };
        let cache_len = num_blocks * block_size * c.kv_dim();
        let k_cache = (0..c.num_layers).map(|_| vec![0.0; cache_len]).collect();
        let v_cache = (0..c.num_layers).map(|_| vec![0.0; cache_len]).collect();
        Ok(ModelExecutor {
            weights,
            rope,
            dims,
            block_size,
            num_blocks,
            k_cache,
            v_cache,
            threads: rayon::current_num_threads(),
            pool: None,
            meta: StepPlan::default(),
            buf: Buffers::default(),
            last_times: OpTimes::default(),
        })
    }

    pub fn config(&self) -> &LlamaConfig {
        &self.weights.config
    }

    pub fn weights(&self) -> &LlamaWeights {
        &self.weights
    }

    pub fn block_size(&self) -> usize {
        self.block_size
    }

    pub fn num_blocks(&self) -> usize {
        self.num_blocks
    }

    /// Threads each GEMM may use (the other kernels use the whole current rayon pool).
    pub fn set_threads(&mut self, threads: usize) {
        self.threads = threads.max(1);
    }

    /// Runs every step on a pool of `threads` threads of the executor's own, for callers
    /// outside any pool (the engine's loop thread). Without one, the attention, norm and RoPE
    /// kernels of such a caller run on rayon's global pool, a thread per core: `serve
    /// --threads 1` then computed on every core, beside the HTTP server. On this 2-core
    /// machine that made a decode step of 16 sequences 25% slower than on one pinned pool.
    pub fn use_own_pool(&mut self, threads: usize) -> Result<(), ModelError> {
        let threads = threads.max(1);
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .thread_name(|i| format!("servesim-engine-{i}"))
            .build()
            .map_err(|e| ModelError::Step(format!("building a pool of {threads} threads: {e}")))?;
        self.threads = threads;
        self.pool = Some(std::sync::Arc::new(pool));
        Ok(())
    }

    /// The executor's own pool, if [`ModelExecutor::use_own_pool`] made one.
    pub fn pool(&self) -> Option<std::sync::Arc<rayon::ThreadPool>> {
        self.pool.clone()
    }

    pub fn threads(&self) -> usize {
        self.threads
    }

    /// Where the last step's time went (zero before the first step).
    pub fn last_times(&self) -> OpTimes {
        self.last_times
    }

    /// Runs one step and returns the logits `[S, vocab]` of the `S` sequences whose
    /// `samples_token` is set, in batch order (the logits of each one's last new token).
    ///
    /// - `token_ids`: the new tokens of every `SeqWork` in batch order, concatenated
    ///   (`batch.seqs[i].new_tokens` ids each; `batch.tokens()` in all). Sequence `i`'s new
    ///   tokens sit at positions `context_tokens..context_tokens + new_tokens`.
    /// - `kv`: the scheduler's KV manager, already grown for this step: each sequence's block
    ///   table covers `context_tokens + new_tokens` positions. Its block size must be this
    ///   executor's, and its block ids below [`ModelExecutor::num_blocks`].
    ///
    /// The context's keys and values must have been computed by earlier steps with the same
    /// block table (the scheduler's contract). Call inside `ThreadPool::install` to choose the
    /// pool. Inconsistent inputs return [`ModelError::Step`] before anything is computed.
    pub fn forward(&mut self, batch: &Batch, token_ids: &[u32], kv: &KvCacheManager) -> Result<&[f32], ModelError> {
        self.forward_with_tables(batch, token_ids, kv)
    }

    /// [`forward`](Self::forward) with block tables from any source (the engine's HTTP loop
    /// hands them over per step rather than sharing its `KvCacheManager`).
    pub fn forward_with_tables(
        &mut self,
        batch: &Batch,
        token_ids: &[u32],
        kv: &dyn BlockTables,
    ) -> Result<&[f32], ModelError> {
        self.last_times = OpTimes::default();
        self.plan(batch, token_ids, kv)?;
        match self.pool.clone() {
            Some(pool) => pool.install(|| self.compute_planned()),
            None => self.compute_planned(),
        }
    }

    /// The step [`ModelExecutor::plan`] laid out in `self.meta`, on the current pool.
    fn compute_planned(&mut self) -> Result<&[f32], ModelError> {
        let ModelExecutor { weights, rope, dims, block_size, k_cache, v_cache, threads, meta, buf, last_times, .. } = self;
        let mut laps = Laps::start();
        let (threads, dims, block_size) = (*threads, *dims, *block_size);
        let c = &weights.config;
        let (h, qd, kvd, f, vocab) = (c.hidden_size, c.q_dim(), c.kv_dim(), c.intermediate_size, c.vocab_size);
        let qkv_cols = qd + 2 * kvd;
        let eps = c.rms_norm_eps;
        let t = meta.tokens.len();
        let s = meta.sample_rows.len();
        if t == 0 {
            *last_times = OpTimes::default();
            return Ok(&buf.logits[..0]);
        }
        let tp = meta.prefill.tokens();
        let scale = dims.default_scale();

        let x = grow(&mut buf.x, t * h);
        for (row, &tok) in x.chunks_exact_mut(h).zip(&meta.tokens) {
            row.copy_from_slice(&weights.embed[tok as usize * h..(tok as usize + 1) * h]);
        }
        let normed = grow(&mut buf.normed, t * h);
        let qkv = grow(&mut buf.qkv, t * qkv_cols);
        let q = grow(&mut buf.q, t * qd);
        let k = grow(&mut buf.k, t * kvd);
        let v = grow(&mut buf.v, t * kvd);
        let attn = grow(&mut buf.attn, t * qd);
        let gate_up = grow(&mut buf.gate_up, t * 2 * f);
        let act = grow(&mut buf.act, t * f);

        for (layer, (kc, vc)) in weights.layers.iter().zip(k_cache.iter_mut().zip(v_cache.iter_mut())) {
            rms_norm(x, &layer.input_norm, eps, normed);
            laps.elementwise();
            Gemm::new(t, qkv_cols, h).run(normed, &layer.qkv, qkv, threads);
            laps.gemm();
            // Split the merged projection: RoPE and the cache want each of q, k, v contiguous.
            for r in 0..t {
                let row = &qkv[r * qkv_cols..(r + 1) * qkv_cols];
                q[r * qd..(r + 1) * qd].copy_from_slice(&row[..qd]);
                k[r * kvd..(r + 1) * kvd].copy_from_slice(&row[qd..qd + kvd]);
                v[r * kvd..(r + 1) * kvd].copy_from_slice(&row[qd + kvd..]);
            }
            rope.apply(q, k, &meta.positions, dims.num_heads, dims.num_kv_heads);
            // New keys go into the cache first: attention then reads context and new tokens
            // from one place, exactly as later steps will.
            write_paged(kc, vc, k, v, &meta.slots, dims.num_kv_heads, dims.head_dim);
            laps.elementwise();
            let cache = PagedCache { k: kc, v: vc, block_size, num_kv_heads: dims.num_kv_heads, head_dim: dims.head_dim };
            let (q_pre, q_dec) = q.split_at(tp * qd);
            let (out_pre, out_dec) = attn.split_at_mut(tp * qd);
            if tp > 0 {
                let g = &meta.prefill;
                let paged = PagedKv::new(cache, &g.blocks, &g.cu_blocks, &g.seq_lens);
                prefill_attention(q_pre, &g.cu_q, &paged, out_pre, dims, scale);
            }
            if t > tp {
                let g = &meta.decode;
                let paged = PagedKv::new(cache, &g.blocks, &g.cu_blocks, &g.seq_lens);
                decode_attention(q_dec, &paged, out_dec, dims, scale);
            }
            laps.attention();
            Gemm::new(t, h, qd).accumulating().run(attn, &layer.o, x, threads);
            laps.gemm();
            rms_norm(x, &layer.post_norm, eps, normed);
            laps.elementwise();
            Gemm::new(t, 2 * f, h).run(normed, &layer.gate_up, gate_up, threads);
            laps.gemm();
            silu_and_mul(gate_up, act, f);
            laps.elementwise();
            Gemm::new(t, h, f).accumulating().run(act, &layer.down, x, threads);
            laps.gemm();
        }

        // Only sampled rows need the final norm and the (largest) output GEMM.
        let last = grow(&mut buf.last, s * h);
        for (dst, &r) in last.chunks_exact_mut(h).zip(&meta.sample_rows) {
            dst.copy_from_slice(&x[r * h..(r + 1) * h]);
        }
        let last_normed = grow(&mut buf.last_normed, s * h);
        rms_norm(last, &weights.norm, eps, last_normed);
        let logits = grow(&mut buf.logits, s * vocab);
        laps.elementwise();
        Gemm::new(s, vocab, h).run(last_normed, &weights.lm_head, logits, threads);
        laps.gemm();
        *last_times = laps.times;
        Ok(&buf.logits[..s * vocab])
    }

    /// Checks the step's inputs and builds its indexing into `self.meta` (chunks first: see
    /// [`StepPlan`]).
    fn plan(&mut self, batch: &Batch, token_ids: &[u32], kv: &dyn BlockTables) -> Result<(), ModelError> {
        let (bs, nb) = (self.block_size, self.num_blocks);
        self.meta.build(&self.weights.config, bs, nb, batch, token_ids, kv, RowOrder::PrefillFirst)
    }
}
