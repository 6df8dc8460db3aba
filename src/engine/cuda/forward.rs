//! The Llama forward pass on one GPU: bf16 weights and activations, a bf16 paged KV cache,
//! cuBLASLt for every projection and the kernels in `kernels/` for everything else. It takes the
//! same inputs as the CPU [`ModelExecutor`](crate::engine::model::ModelExecutor) and returns f32
//! logits of the sampled rows, so the engine can run either.
//!
//! ```text
//!  plan (engine::model::StepPlan, decodes first) ─► upload int32 indexing (token ids, positions,
//!      slots, block tables, context lengths, cu_seqlens, sample rows)
//!  gather_rows(embed, token ids) ─► residual [T, h]
//!  per layer:  rmsnorm (layer 0) / fused_add_rmsnorm (later layers: residual += down output)
//!              gemm qkv (one fused GEMM) ─ rotary(q, k) ─ reshape_and_cache(k, v → this layer's cache)
//!              ├─ attention_decode  rows 0..D        (one token per sequence, over the cache;
//!              │                                      split-KV where the shape allows)
//!              └─ attention_prefill rows D..T        (chunks, over cached context + themselves;
//!                                                     tensor cores where the shape allows)
//!              gemm o ─ fused_add_rmsnorm (residual += o) ─ gemm gate_up ─ silu_mul ─ gemm down
//!  fused_add_rmsnorm(final norm) ─ gather_rows(sample rows) ─ gemm lm_head ─► bf16 logits
//!      ─► host, widened to f32
//! ```
//!
//! Device layouts (row-major; bf16 unless noted):
//!
//! | tensor             | shape                                          | notes |
//! |--------------------|------------------------------------------------|-------|
//! | `embed`            | `[vocab, h]`                                   | gather source; if tied, also the LM head |
//! | `w_qkv`            | `[q_dim + 2·kv_dim, h]`: q rows, k rows, v rows | HF's `[out, in]` = gemm.rs's `W` (`Y = X·Wᵀ`), fused at load |
//! | `wo`, `w_down`     | `[h, q_dim]`, `[h, ffn]`                       | likewise |
//! | `w_gate_up`        | `[2·ffn, h]`: gate rows, then up rows          | output `[T, gate ‖ up]`, as `silu_mul` reads |
//! | `lm_head`          | `[vocab, h]`                                   | absent when tied (`embed` is the same) |
//! | k / v cache, layer | `[num_blocks, block_size, kv_heads, head_dim]` | slot = block · block_size + offset |
//! | `cos_sin`          | `[max_positions, head_dim]` f32                | NeoX pairing, as the CPU `Rope` |
//! | activations        | `[T, width]`, rows in the plan's order         | `qkv [T, q_dim + 2·kv_dim]`: q, k, v are its column ranges |
//!
//! Why one QKV GEMM (as vLLM's `QKVParallelLinear`): the cost model prices one, and three cost
//! two extra launches per layer. Rotary, the cache write and attention read q, k and v in place
//! as column ranges of its output ([`At`] views with the fused row as their stride), so nothing
//! is copied. Gate and up are one GEMM likewise (`w_gate_up`).
//!
//! Why decodes come first: the decode kernel reads queries and writes outputs from row 0 of the
//! buffers it is given, while the prefill kernel locates each sequence's rows through
//! `cu_seqlens_q` and can start anywhere. Decodes first lets both run on the same buffers with
//! no copies.
//!
//! Numerics: weights are rounded to bf16 once at upload; every activation is rounded to bf16
//! where it is stored (GEMM outputs, norms, the residual stream, attention outputs, the cache);
//! GEMMs, norms and attention accumulate in f32. The CPU executor computes in f32 throughout, so
//! the two agree to bf16 precision, not bit for bit (`tests/cuda_forward.rs`).
//!
//! This file was written and reviewed without a GPU: it compiles, its host-side packing is unit
//! tested, and its kernels compile under NVRTC, but the GPU comparison against the CPU executor
//! (`tests/cuda_forward.rs`) runs only where a GPU is present.

use std::collections::BTreeMap;
use std::sync::Arc;

use cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};
use cudarc::driver::{CudaSlice, CudaStream};
use half::bf16;

use super::graphs::{DecodeGraph, DecodeGraphs, GraphIndex, PaddedIndex, capture_size};
pub use super::step_index::{HostIndex, IndexLayout, pad_block_tables};
use super::parts::{Part, PartTimer};

use super::device::{CudaDevice, check_cublaslt, check_driver, check_nvrtc, driver_error, no_panic};
use super::gemm::{CublasLt, GemmDtype, GemmPlan};
use super::kernels::{
    At, CudaKernels, DecodeParams, DecodeWorkspace, MAX_HEAD_DIM, PagedKvCache, PrefillParams, RotaryParams,
    rotary_cos_sin_cache,
};
use crate::engine::DeviceError;
use crate::engine::model::{BlockTables, LlamaConfig, LlamaWeights, ModelError, OpTimes, RowOrder, StepPlan};
use crate::sched::batch::Batch;

/// GEMM plans kept at once. A plan is per (m, n, k) and m is a step's token count, so a server
/// sees at most 6 shapes per distinct count; past this many the cache starts over.
const GEMM_PLANS_MAX: usize = 4096;

/// Columns `col0..col0 + cols` of a matrix stored `[inp, width]` row-major in f32 (the CPU
/// executor's `[in, out]` layout), as the `[cols, inp]` row-major bf16 matrix that is gemm.rs's
/// `W` (Hugging Face's `[out, in]`). bf16 rounds to nearest even.
pub fn pack_out_in_bf16(w: &[f32], inp: usize, width: usize, col0: usize, cols: usize) -> Vec<bf16> {
    assert!(w.len() == inp * width && col0 + cols <= width, "pack_out_in_bf16: [{inp}, {width}] matrix, columns {col0}..{}", col0 + cols);
    let mut out = Vec::with_capacity(cols * inp);
    for o in col0..col0 + cols {
        out.extend((0..inp).map(|i| bf16::from_f32(w[i * width + o])));
    }
    out
}

/// `v` rounded to bf16 (nearest even).
pub fn to_bf16(v: &[f32]) -> Vec<bf16> {
    v.iter().map(|&x| bf16::from_f32(x)).collect()
}

/// `weights` with every tensor rounded to bf16 and widened back to f32: the weights the GPU
/// computes with, in the CPU executor's type. Comparing the GPU against a CPU executor built from
/// these isolates the activation rounding.
pub fn round_weights_to_bf16(weights: &LlamaWeights) -> LlamaWeights {
    let r = |v: &[f32]| v.iter().map(|&x| bf16::from_f32(x).to_f32()).collect::<Vec<f32>>();
    let mut out = weights.clone();
    out.embed = r(&weights.embed);
    out.norm = r(&weights.norm);
    out.lm_head = r(&weights.lm_head);
    for l in &mut out.layers {
        for t in [&mut l.input_norm, &mut l.qkv, &mut l.o, &mut l.post_norm, &mut l.gate_up, &mut l.down] {
            *t = r(t);
        }
    }
    out
}

/// One decoder layer on the device (layouts in the module table).
struct DeviceLayer {
    input_norm: CudaSlice<bf16>,
    w_qkv: CudaSlice<bf16>,
    wo: CudaSlice<bf16>,
    post_norm: CudaSlice<bf16>,
    w_gate_up: CudaSlice<bf16>,
    w_down: CudaSlice<bf16>,
}

struct DeviceWeights {
    embed: CudaSlice<bf16>,
    layers: Vec<DeviceLayer>,
    norm: CudaSlice<bf16>,
    /// `None` with tied embeddings: `embed` is the LM head.
    lm_head: Option<CudaSlice<bf16>>,
}

/// Activations for up to `tokens` rows and `samples` sampled rows, grown (to powers of two) and
/// never shrunk.
struct Activations {
    tokens: usize,
    samples: usize,
    /// The residual stream `[T, h]`.
    residual: CudaSlice<bf16>,
    /// A sub-layer's normalised input, then its output `[T, h]`.
    x: CudaSlice<bf16>,
    /// The fused QKV projection `[T, q_dim + 2·kv_dim]`.
    qkv: CudaSlice<bf16>,
    /// Attention output `[T, heads, head_dim]`.
    attn: CudaSlice<bf16>,
    /// `[T, 2·ffn]`.
    gate_up: CudaSlice<bf16>,
    /// `[T, ffn]`.
    act: CudaSlice<bf16>,
    /// Sampled rows of the final hidden states `[S, h]`.
    last: CudaSlice<bf16>,
    /// `[S, vocab]`.
    logits: CudaSlice<bf16>,
}

/// A step's int32 indexing on the device; each buffer grows to powers of two and is reused.
struct StepIndex {
    token_ids: CudaSlice<i32>,
    positions: CudaSlice<i32>,
    slots: CudaSlice<i32>,
    sample_rows: CudaSlice<i32>,
    decode_tables: CudaSlice<i32>,
    /// Decode context lengths *including* the token being decoded (attention_decode.cu).
    decode_lens: CudaSlice<i32>,
    prefill_tables: CudaSlice<i32>,
    /// Prefill context lengths: tokens cached *before* this step (attention_prefill.cu).
    prefill_lens: CudaSlice<i32>,
    /// `[prefill seqs + 1]` absolute row offsets of each chunk (they start after the decodes).
    prefill_cu: CudaSlice<i32>,
    /// The same on the host, rebuilt each step into reused vectors.
    host: HostIndex,
}

/// The decode kernel's split-context scratch, for up to `seqs` sequences of up to `context`
/// tokens; grown (to powers of two) when a step needs more, so its size follows the longest
/// contexts actually decoded rather than the model's maximum (a 128k-position model would
/// otherwise reserve gigabytes).
struct DecodeScratch {
    workspace: DecodeWorkspace,
    seqs: usize,
    context: usize,
}

/// Runs a Llama model on `cuda:N` step by step over the scheduler's batches. See the module
/// documentation for the data flow and layouts.
pub struct CudaModelExecutor {
    config: LlamaConfig,
    device: CudaDevice,
    kernels: CudaKernels,
    blas: CublasLt,
    weights: DeviceWeights,
    cos_sin: CudaSlice<f32>,
    k_cache: Vec<CudaSlice<bf16>>,
    v_cache: Vec<CudaSlice<bf16>>,
    block_size: usize,
    num_blocks: usize,
    plan: StepPlan,
    gemms: BTreeMap<(usize, usize, usize), GemmPlan>,
    act: Activations,
    index: StepIndex,
    decode: Option<DecodeScratch>,
    logits_bf16: Vec<bf16>,
    logits: Vec<f32>,
    /// Pure-decode steps replay CUDA graphs (on by default).
    use_graphs: bool,
    graphs: DecodeGraphs,
    /// A graph step's padded index, rebuilt each step.
    padded: PaddedIndex,
    /// Time each step by parts with events (off by default: the events cost launches).
    time_parts: bool,
    timer: PartTimer,
    last_times: Option<OpTimes>,
}

/// A CUDA-layer error as a model error naming the device (once: some messages already do).
fn step_error(device: &str, e: DeviceError) -> ModelError {
    let message = e.to_string();
    if message.starts_with(device) { ModelError::Device(message) } else { ModelError::Device(format!("{device}: {message}")) }
}

impl CudaModelExecutor {
    /// Opens `cuda:ordinal`, compiles the kernels, uploads `weights` as bf16 and allocates a bf16
    /// paged KV cache of `num_blocks` blocks of `block_size` positions per layer. Without a driver,
    /// a GPU, NVRTC or cuBLASLt this is a [`ModelError::Device`] naming what is missing; it never
    /// panics.
    pub fn new(weights: &LlamaWeights, num_blocks: usize, block_size: usize, ordinal: usize) -> Result<Self, ModelError> {
        let c = &weights.config;
        weights.validate().map_err(ModelError::Step)?;
        let label = format!("cuda:{ordinal}");
        let limit = |what: &str, value: usize| {
            if value <= i32::MAX as usize {
                Ok(())
            } else {
                Err(ModelError::Step(format!("{what} = {value} exceeds the CUDA kernels' 32-bit indices")))
            }
        };
        if !block_size.is_power_of_two() {
            return Err(ModelError::Step(format!("block_size {block_size} must be a power of two")));
        }
        if num_blocks == 0 {
            return Err(ModelError::Step("the KV cache needs at least one block".into()));
        }
        // Slots, token ids and positions travel as int32; a layer's cache is indexed in int32.
        limit("KV cache elements per layer", num_blocks.saturating_mul(block_size).saturating_mul(c.kv_dim()))?;
        limit("vocab_size", c.vocab_size)?;
        limit("max_position_embeddings", c.max_position_embeddings)?;
        if c.head_dim > MAX_HEAD_DIM {
            return Err(ModelError::Step(format!(
                "head_dim {} is larger than the CUDA attention kernels' {MAX_HEAD_DIM}",
                c.head_dim
            )));
        }
        // Check every library before touching any, so one message names all that is missing.
        let missing: Vec<String> =
            [check_driver(), check_nvrtc(), check_cublaslt()].into_iter().filter_map(|r| r.err().map(|e| e.to_string())).collect();
        if !missing.is_empty() {
            return Err(ModelError::Device(format!("{label} is unavailable: {}", missing.join("; "))));
        }
        no_panic("setting up the CUDA executor", || Self::open(weights, num_blocks, block_size, ordinal))
            .map_err(|e| step_error(&label, e))
    }

    fn open(weights: &LlamaWeights, num_blocks: usize, block_size: usize, ordinal: usize) -> Result<Self, DeviceError> {
        let c = &weights.config;
        let device = CudaDevice::new(ordinal)?;
        if !GemmDtype::Bf16.supported_on(device.compute_capability()) {
            let (major, minor) = device.compute_capability();
            return Err(DeviceError::Unsupported(format!(
                "{} has compute capability {major}.{minor}; bf16 GEMMs need 8.0 or newer",
                device.name()
            )));
        }
        let kernels = CudaKernels::load(&device)?;
        let blas = CublasLt::new(&device)?;
        let stream = device.stream().clone();
        let up = |what: &str, host: &[bf16]| stream.clone_htod(host).map_err(|e| driver_error(&format!("uploading {what}"), e));
        let (h, qd, kvd, f, vocab) = (c.hidden_size, c.q_dim(), c.kv_dim(), c.intermediate_size, c.vocab_size);
        let qkv_cols = qd + 2 * kvd;
        let mut layers = Vec::with_capacity(c.num_layers);
        for (n, l) in weights.layers.iter().enumerate() {
            let name = |t: &str| format!("layer {n} {t}");
            layers.push(DeviceLayer {
                input_norm: up(&name("input_norm"), &to_bf16(&l.input_norm))?,
                w_qkv: up(&name("qkv_proj"), &pack_out_in_bf16(&l.qkv, h, qkv_cols, 0, qkv_cols))?,
                wo: up(&name("o_proj"), &pack_out_in_bf16(&l.o, qd, h, 0, h))?,
                post_norm: up(&name("post_norm"), &to_bf16(&l.post_norm))?,
                w_gate_up: up(&name("gate_up_proj"), &pack_out_in_bf16(&l.gate_up, h, 2 * f, 0, 2 * f))?,
                w_down: up(&name("down_proj"), &pack_out_in_bf16(&l.down, f, h, 0, h))?,
            });
        }
        // With tied embeddings `lm_head` is the transposed embedding, so packing it back to
        // [vocab, h] would reproduce `embed` exactly: share the buffer instead.
        let lm_head = match c.tie_word_embeddings {
            true => None,
            false => Some(up("lm_head", &pack_out_in_bf16(&weights.lm_head, h, vocab, 0, vocab))?),
        };
        let embed = up("embed_tokens", &to_bf16(&weights.embed))?;
        let norm = up("norm", &to_bf16(&weights.norm))?;
        let device_weights = DeviceWeights { embed, layers, norm, lm_head };
        let table = rotary_cos_sin_cache(c.max_position_embeddings, c.head_dim, c.rope_theta);
        let cos_sin = stream.clone_htod(&table).map_err(|e| driver_error("uploading the rotary table", e))?;
        let cache_len = num_blocks * block_size * kvd;
        let mut k_cache = Vec::with_capacity(c.num_layers);
        let mut v_cache = Vec::with_capacity(c.num_layers);
        for n in 0..c.num_layers {
            let alloc = || {
                stream.alloc_zeros::<bf16>(cache_len).map_err(|e| {
                    driver_error(&format!("allocating layer {n}'s KV cache ({num_blocks} blocks of {block_size})"), e)
                })
            };
            k_cache.push(alloc()?);
            v_cache.push(alloc()?);
        }
        let act = Activations::new(&stream, c, 1, 1)?;
        let index = StepIndex::new(&stream)?;
        device.synchronize()?;
        Ok(Self {
            config: c.clone(),
            device,
            kernels,
            blas,
            weights: device_weights,
            cos_sin,
            k_cache,
            v_cache,
            block_size,
            num_blocks,
            plan: StepPlan::default(),
            gemms: BTreeMap::new(),
            act,
            index,
            decode: None,
            logits_bf16: Vec::new(),
            logits: Vec::new(),
            use_graphs: true,
            graphs: DecodeGraphs::default(),
            padded: PaddedIndex::default(),
            time_parts: false,
            timer: PartTimer::default(),
            last_times: None,
        })
    }

    pub fn config(&self) -> &LlamaConfig {
        &self.config
    }

    pub fn block_size(&self) -> usize {
        self.block_size
    }

    pub fn num_blocks(&self) -> usize {
        self.num_blocks
    }

    pub fn device(&self) -> &CudaDevice {
        &self.device
    }

    /// Whether pure-decode steps replay CUDA graphs (the default) or launch eagerly.
    pub fn set_cuda_graphs(&mut self, on: bool) {
        self.use_graphs = on;
        if !on {
            self.graphs.clear();
        }
    }

    /// Whether each step is timed by parts with CUDA events ([`CudaModelExecutor::last_times`]).
    pub fn set_time_parts(&mut self, on: bool) {
        self.time_parts = on;
    }

    /// The last step's time by part (GEMM, attention, elementwise), when parts are timed.
    pub fn last_times(&self) -> Option<OpTimes> {
        self.last_times
    }

    /// Decode steps replayed from graphs, and graphs captured, so far.
    pub fn graph_counts(&self) -> (u64, u64) {
        (self.graphs.replays, self.graphs.captures)
    }

    /// The attention kernels the launchers pick (see [`CudaKernels::set_attention`]).
    pub fn set_attention(&mut self, attention: super::attention_fast::AttentionKernels) {
        self.kernels.set_attention(attention);
        self.graphs.clear();
    }

    /// Runs one step; the contract is the CPU executor's
    /// [`forward_with_tables`](crate::engine::model::ModelExecutor::forward_with_tables): `token_ids`
    /// are the batch's new tokens in batch order, the tables cover every sequence's context and
    /// new tokens, and the result is the logits `[S, vocab]` of the sampling sequences in batch
    /// order. Inconsistent inputs are a [`ModelError::Step`] before anything runs; a GPU failure
    /// is a [`ModelError::Device`].
    pub fn forward_with_tables(&mut self, batch: &Batch, token_ids: &[u32], kv: &dyn BlockTables) -> Result<&[f32], ModelError> {
        self.plan.build(&self.config, self.block_size, self.num_blocks, batch, token_ids, kv, RowOrder::DecodeFirst)?;
        let label = self.device.label();
        let n = self.plan.sample_rows.len() * self.config.vocab_size;
        if self.plan.tokens.is_empty() {
            return Ok(&self.logits[..0]);
        }
        no_panic("the CUDA forward pass", || self.run_step()).map_err(|e| step_error(&label, e))?;
        Ok(&self.logits[..n])
    }

    /// Runs the planned step (`self.plan`) and leaves the logits in `self.logits`: a pure-decode
    /// step of at most [`MAX_CAPTURE_SIZE`](super::graphs::MAX_CAPTURE_SIZE) sequences through a
    /// CUDA graph (when graphs are on), anything else eagerly.
    fn run_step(&mut self) -> Result<(), DeviceError> {
        self.device.context().bind_to_thread().map_err(|e| driver_error("cuCtxSetCurrent", e))?;
        if self.plan.decode_row0() != 0 {
            return Err(DeviceError::Failed("the CUDA executor needs decode rows first".into()));
        }
        let (nd, np) = (self.plan.decode.num_seqs(), self.plan.prefill.num_seqs());
        let size = if self.use_graphs && np == 0 { capture_size(nd) } else { None };
        let stream = self.device.stream().clone();
        self.index.host.build(&self.plan);
        let layout = self.index.host.layout;
        let s = self.plan.sample_rows.len();
        match size {
            Some(size) => self.run_graph(&stream, size, layout)?,
            None => self.run_eager(&stream, layout)?,
        }
        self.logits.clear();
        if s == 0 {
            // Nothing to sample (mid-prompt chunks only); the step's work was filling the cache.
            self.device.synchronize()?;
        } else {
            let vocab = self.config.vocab_size;
            self.logits_bf16.resize(s * vocab, bf16::ZERO);
            stream
                .memcpy_dtoh(&self.act.logits.slice(..s * vocab), self.logits_bf16.as_mut_slice())
                .map_err(|e| driver_error("copying the logits to the host", e))?;
            self.device.synchronize()?;
            self.logits.extend(self.logits_bf16.iter().map(|x| x.to_f32()));
        }
        self.last_times = match (self.time_parts, size) {
            (false, _) => None,
            (true, None) => Some(self.timer.read()?),
            (true, Some(size)) => self.graphs.by_size.get(&size).map(|g| g.timer.read()).transpose()?,
        };
        Ok(())
    }

    /// Room for `tokens` rows, `samples` sampled rows and a decode of `seqs` sequences up to
    /// `context` tokens; every graph is dropped when a buffer it captured moves.
    fn ensure_buffers(&mut self, stream: &Arc<CudaStream>, tokens: usize, samples: usize, seqs: usize, context: usize) -> Result<(), DeviceError> {
        let c = &self.config;
        if self.act.ensure(stream, c, tokens, samples)? {
            self.graphs.clear();
        }
        if seqs > 0 && self.decode.as_ref().is_none_or(|d| d.seqs < seqs || d.context < context) {
            self.graphs.clear();
            let (old_seqs, old_context) = self.decode.as_ref().map_or((0, 0), |d| (d.seqs, d.context));
            let seqs = old_seqs.max(seqs.next_power_of_two());
            let context = old_context.max(context.next_power_of_two()).min(c.max_position_embeddings.max(context));
            self.decode = None; // free the old scratch before allocating the new
            let workspace = self.kernels.decode_workspace(seqs, c.num_heads, c.num_kv_heads, c.head_dim, context)?;
            self.decode = Some(DecodeScratch { workspace, seqs, context });
        }
        Ok(())
    }

    /// The step launched kernel by kernel from the host.
    fn run_eager(&mut self, stream: &Arc<CudaStream>, layout: IndexLayout) -> Result<(), DeviceError> {
        let (t, s) = (self.plan.tokens.len(), self.plan.sample_rows.len());
        let (nd, np) = (self.plan.decode.num_seqs(), self.plan.prefill.num_seqs());
        self.ensure_buffers(stream, t, s, nd, layout.decode_max_len)?;
        self.index.upload(stream)?;
        let i = &self.index;
        let inputs = StepInputs {
            token_ids: &i.token_ids,
            positions: &i.positions,
            slots: &i.slots,
            sample_rows: &i.sample_rows,
            decode_tables: &i.decode_tables,
            decode_lens: &i.decode_lens,
            prefill_tables: &i.prefill_tables,
            prefill_lens: &i.prefill_lens,
            prefill_cu: &i.prefill_cu,
            rows: t,
            samples: s,
            decodes: nd,
            prefills: np,
            layout,
        };
        let timer = self.time_parts.then_some(&mut self.timer);
        let forward = Forward {
            c: &self.config,
            kernels: &self.kernels,
            blas: &self.blas,
            w: &self.weights,
            cos_sin: &self.cos_sin,
            block_size: self.block_size,
        };
        let workspace = self.decode.as_mut().map(|d| &mut d.workspace);
        forward.enqueue(stream, &mut self.gemms, &mut self.k_cache, &mut self.v_cache, &mut self.act, workspace, &inputs, timer)
    }

    /// A pure-decode step padded to `size` sequences, replayed from its graph (captured first
    /// when there is none of this size, or its context bound is too short).
    fn run_graph(&mut self, stream: &Arc<CudaStream>, size: usize, layout: IndexLayout) -> Result<(), DeviceError> {
        let c = &self.config;
        let need = layout.decode_max_len.max(1);
        let context = need.next_power_of_two().min(c.max_position_embeddings.max(need));
        self.ensure_buffers(stream, size, size, size, context)?;
        if self.graphs.by_size.get(&size).is_some_and(|g| g.context < need || g.timed != self.time_parts) {
            self.graphs.by_size.remove(&size);
        }
        let width = context.div_ceil(self.block_size);
        self.padded.build(&self.index.host, size, width);
        if !self.graphs.by_size.contains_key(&size) {
            let mut index = GraphIndex::new(stream, size, width)?;
            index.upload(stream, &self.padded)?;
            let mut timer = PartTimer::default();
            let inputs = StepInputs {
                token_ids: &index.token_ids,
                positions: &index.positions,
                slots: &index.slots,
                sample_rows: &index.sample_rows,
                decode_tables: &index.tables,
                decode_lens: &index.lens,
                // No prefill rows: never read.
                prefill_tables: &index.lens,
                prefill_lens: &index.lens,
                prefill_cu: &index.lens,
                rows: size,
                samples: size,
                decodes: size,
                prefills: 0,
                layout: IndexLayout { decode_max_blocks: width, decode_max_len: context, prefill_max_blocks: 0, prefill_max_new: 0 },
            };
            let forward = Forward {
                c: &self.config,
                kernels: &self.kernels,
                blas: &self.blas,
                w: &self.weights,
                cos_sin: &self.cos_sin,
                block_size: self.block_size,
            };
            // GEMM plans are made outside the capture (host work only, but kept out of it).
            forward.plan_gemms(&mut self.gemms, size)?;
            let workspace = self.decode.as_mut().map(|d| &mut d.workspace);
            let timed = self.time_parts;
            stream
                .begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
                .map_err(|e| driver_error("cuStreamBeginCapture", e))?;
            let enqueued = forward.enqueue(
                stream,
                &mut self.gemms,
                &mut self.k_cache,
                &mut self.v_cache,
                &mut self.act,
                workspace,
                &inputs,
                timed.then_some(&mut timer),
            );
            let graph = stream.end_capture(CUgraphInstantiate_flags(0));
            enqueued?;
            let graph = graph
                .map_err(|e| driver_error("cuStreamEndCapture / cuGraphInstantiate", e))?
                .ok_or_else(|| DeviceError::Failed("the captured decode step is empty".into()))?;
            graph.upload().map_err(|e| driver_error("cuGraphUpload", e))?;
            self.graphs.captures += 1;
            self.graphs.by_size.insert(size, DecodeGraph { graph, index, context, width, timer, timed });
        }
        let g = self.graphs.by_size.get_mut(&size).expect("captured above");
        g.index.upload(stream, &self.padded)?;
        g.graph.launch().map_err(|e| driver_error("cuGraphLaunch", e))?;
        self.graphs.replays += 1;
        Ok(())
    }
}

/// What one step's kernels read: its index buffers (on the device) and its shape.
struct StepInputs<'a> {
    token_ids: &'a CudaSlice<i32>,
    positions: &'a CudaSlice<i32>,
    slots: &'a CudaSlice<i32>,
    sample_rows: &'a CudaSlice<i32>,
    decode_tables: &'a CudaSlice<i32>,
    decode_lens: &'a CudaSlice<i32>,
    prefill_tables: &'a CudaSlice<i32>,
    prefill_lens: &'a CudaSlice<i32>,
    prefill_cu: &'a CudaSlice<i32>,
    rows: usize,
    samples: usize,
    decodes: usize,
    prefills: usize,
    layout: IndexLayout,
}

/// The model's read-only half: what every step's kernels take besides their buffers.
#[derive(Clone, Copy)]
struct Forward<'a> {
    c: &'a LlamaConfig,
    kernels: &'a CudaKernels,
    blas: &'a CublasLt,
    w: &'a DeviceWeights,
    cos_sin: &'a CudaSlice<f32>,
    block_size: usize,
}

impl Forward<'_> {
    /// The GEMM plans of a step of `rows` rows (all sampled).
    fn plan_gemms(&self, plans: &mut BTreeMap<(usize, usize, usize), GemmPlan>, rows: usize) -> Result<(), DeviceError> {
        let c = self.c;
        let (h, qd, kvd, f) = (c.hidden_size, c.q_dim(), c.kv_dim(), c.intermediate_size);
        for (n, k) in [(qd + 2 * kvd, h), (h, qd), (2 * f, h), (h, f), (c.vocab_size, h)] {
            gemm_plan(self.blas, plans, rows, n, k)?;
        }
        Ok(())
    }

    /// Enqueues the step's kernels on `stream`, from the embedding to the LM head (when rows are
    /// sampled), marking their parts on `timer`.
    #[allow(clippy::too_many_arguments)]
    fn enqueue(
        &self,
        stream: &Arc<CudaStream>,
        gemms: &mut BTreeMap<(usize, usize, usize), GemmPlan>,
        k_cache: &mut [CudaSlice<bf16>],
        v_cache: &mut [CudaSlice<bf16>],
        act: &mut Activations,
        mut decode: Option<&mut DecodeWorkspace>,
        step: &StepInputs,
        mut timer: Option<&mut PartTimer>,
    ) -> Result<(), DeviceError> {
        let Forward { c, kernels, blas, w, cos_sin, block_size } = *self;
        let (h, qd, kvd, f, vocab) = (c.hidden_size, c.q_dim(), c.kv_dim(), c.intermediate_size, c.vocab_size);
        let (heads, kv_heads, head_dim) = (c.num_heads, c.num_kv_heads, c.head_dim);
        let qkv_cols = qd + 2 * kvd;
        let (t, s, nd, np, layout) = (step.rows, step.samples, step.decodes, step.prefills, step.layout);
        let eps = c.rms_norm_eps;
        let scale = 1.0 / (head_dim as f32).sqrt();
        if let Some(timer) = timer.as_deref_mut() {
            timer.start(stream)?;
        }
        let mut part = |p: Part| timer.as_deref_mut().map_or(Ok(()), |timer| timer.enter(stream, p));

        part(Part::Elementwise)?;
        kernels.gather_rows(&mut act.residual, &w.embed, step.token_ids, t, h)?;
        for (l, layer) in w.layers.iter().enumerate() {
            part(Part::Elementwise)?;
            if l == 0 {
                kernels.rmsnorm(&mut act.x, &act.residual, &layer.input_norm, t, h, eps)?;
            } else {
                // residual += the previous layer's MLP output; x = norm(residual).
                kernels.fused_add_rmsnorm(&mut act.x, &mut act.residual, &layer.input_norm, t, h, eps)?;
            }
            part(Part::Gemm)?;
            gemm(blas, gemms, &act.x, &layer.w_qkv, &mut act.qkv, t, qkv_cols, h)?;
            let (q, k, v) = (At::new(&act.qkv, 0), At::new(&act.qkv, qd), At::new(&act.qkv, qd + kvd));
            let rotary = RotaryParams {
                num_tokens: t,
                num_heads: heads,
                num_kv_heads: kv_heads,
                head_dim,
                rot_dim: head_dim,
                is_neox: true,
                q_stride: qkv_cols,
                k_stride: qkv_cols,
                max_position: c.max_position_embeddings,
            };
            part(Part::Elementwise)?;
            kernels.rotary(q, k, step.positions, cos_sin, &rotary)?;
            // The new keys and values go into the cache first: decode attention reads the token
            // being decoded from there (prefill reads its new tokens from k and v directly).
            kernels.reshape_and_cache(k, v, &mut k_cache[l], &mut v_cache[l], step.slots, t, kv_heads, head_dim, qkv_cols)?;
            // This layer's cache, seen through one group's block tables (decodes or prefills).
            let (k_layer, v_layer) = (&k_cache[l], &v_cache[l]);
            let paged = |block_tables, context_lens, max_blocks_per_seq| PagedKvCache {
                k: k_layer,
                v: v_layer,
                block_tables,
                context_lens,
                block_size,
                num_kv_heads: kv_heads,
                head_dim,
                max_blocks_per_seq,
            };
            part(Part::Attention)?;
            if nd > 0 {
                let cache = paged(step.decode_tables, step.decode_lens, layout.decode_max_blocks);
                let params = DecodeParams {
                    num_seqs: nd,
                    num_heads: heads,
                    scale,
                    q_stride: qkv_cols,
                    max_context_len: layout.decode_max_len,
                };
                let workspace = decode.as_deref_mut().ok_or_else(|| DeviceError::Failed("decode scratch missing".into()))?;
                kernels.attention_decode(&mut act.attn, q, &cache, workspace, &params)?;
            }
            if np > 0 {
                let cache = paged(step.prefill_tables, step.prefill_lens, layout.prefill_max_blocks);
                // `total_new_tokens` bounds the rows the kernel may touch: cu_seqlens_q runs from
                // the first prefill row to T, so the whole buffers' T rows.
                let params = PrefillParams {
                    num_seqs: np,
                    total_new_tokens: t,
                    max_new_tokens: layout.prefill_max_new,
                    num_heads: heads,
                    scale,
                    q_stride: qkv_cols,
                    kv_stride: qkv_cols,
                };
                kernels.attention_prefill(&mut act.attn, q, k, v, &cache, step.prefill_cu, &params)?;
            }
            part(Part::Gemm)?;
            gemm(blas, gemms, &act.attn, &layer.wo, &mut act.x, t, h, qd)?;
            part(Part::Elementwise)?;
            kernels.fused_add_rmsnorm(&mut act.x, &mut act.residual, &layer.post_norm, t, h, eps)?;
            part(Part::Gemm)?;
            gemm(blas, gemms, &act.x, &layer.w_gate_up, &mut act.gate_up, t, 2 * f, h)?;
            part(Part::Elementwise)?;
            kernels.silu_mul(&mut act.act, &act.gate_up, t, f)?;
            part(Part::Gemm)?;
            gemm(blas, gemms, &act.act, &layer.w_down, &mut act.x, t, h, f)?;
        }
        if s > 0 {
            // The last MLP output joins the residual and the final norm applies to every row
            // (cheap); only the sampled rows go through the LM head, the step's largest GEMM.
            part(Part::Elementwise)?;
            kernels.fused_add_rmsnorm(&mut act.x, &mut act.residual, &w.norm, t, h, eps)?;
            kernels.gather_rows(&mut act.last, &act.x, step.sample_rows, s, h)?;
            part(Part::Gemm)?;
            let lm_head = w.lm_head.as_ref().unwrap_or(&w.embed);
            gemm(blas, gemms, &act.last, lm_head, &mut act.logits, s, vocab, h)?;
        }
        if let Some(timer) = timer {
            timer.finish(stream)?;
        }
        Ok(())
    }
}

/// The plan of a bf16 GEMM shape, made once and kept.
fn gemm_plan<'p>(
    blas: &CublasLt,
    plans: &'p mut BTreeMap<(usize, usize, usize), GemmPlan>,
    m: usize,
    n: usize,
    k: usize,
) -> Result<&'p GemmPlan, DeviceError> {
    if !plans.contains_key(&(m, n, k)) {
        if plans.len() >= GEMM_PLANS_MAX {
            plans.clear();
        }
        plans.insert((m, n, k), blas.plan(m, n, k, GemmDtype::Bf16)?);
    }
    Ok(&plans[&(m, n, k)])
}

/// `y [m, n] = x [m, k] · w [n, k]ᵀ` in bf16, with the plan for this shape made once and kept.
#[allow(clippy::too_many_arguments)]
fn gemm(
    blas: &CublasLt,
    plans: &mut BTreeMap<(usize, usize, usize), GemmPlan>,
    x: &CudaSlice<bf16>,
    w: &CudaSlice<bf16>,
    y: &mut CudaSlice<bf16>,
    m: usize,
    n: usize,
    k: usize,
) -> Result<(), DeviceError> {
    let plan = gemm_plan(blas, plans, m, n, k)?;
    blas.matmul(plan, x, w, y)
}

impl Activations {
    fn new(stream: &std::sync::Arc<CudaStream>, c: &LlamaConfig, tokens: usize, samples: usize) -> Result<Self, DeviceError> {
        let (h, qd, kvd, f, vocab) = (c.hidden_size, c.q_dim(), c.kv_dim(), c.intermediate_size, c.vocab_size);
        let alloc = |what: &str, len: usize| {
            stream.alloc_zeros::<bf16>(len.max(1)).map_err(|e| driver_error(&format!("allocating activations ({what})"), e))
        };
        Ok(Self {
            tokens,
            samples,
            residual: alloc("residual", tokens * h)?,
            x: alloc("hidden", tokens * h)?,
            qkv: alloc("qkv", tokens * (qd + 2 * kvd))?,
            attn: alloc("attention output", tokens * qd)?,
            gate_up: alloc("gate_up", tokens * 2 * f)?,
            act: alloc("mlp activation", tokens * f)?,
            last: alloc("sampled rows", samples * h)?,
            logits: alloc("logits", samples * vocab)?,
        })
    }

    /// Room for `tokens` rows and `samples` sampled rows; `true` when the buffers moved.
    fn ensure(
        &mut self,
        stream: &std::sync::Arc<CudaStream>,
        c: &LlamaConfig,
        tokens: usize,
        samples: usize,
    ) -> Result<bool, DeviceError> {
        if tokens > self.tokens || samples > self.samples {
            let tokens = self.tokens.max(tokens.next_power_of_two());
            let samples = self.samples.max(samples.next_power_of_two());
            // Free the old buffers first so that the peak is not both sets at once.
            *self = Self::new(stream, c, 1, 1)?;
            *self = Self::new(stream, c, tokens, samples)?;
            return Ok(true);
        }
        Ok(false)
    }
}

impl StepIndex {
    fn new(stream: &std::sync::Arc<CudaStream>) -> Result<Self, DeviceError> {
        let one = || stream.alloc_zeros::<i32>(1).map_err(|e| driver_error("allocating step indices", e));
        Ok(Self {
            token_ids: one()?,
            positions: one()?,
            slots: one()?,
            sample_rows: one()?,
            decode_tables: one()?,
            decode_lens: one()?,
            prefill_tables: one()?,
            prefill_lens: one()?,
            prefill_cu: one()?,
            host: HostIndex::default(),
        })
    }

    /// Uploads the host indexing (built from the step's plan, see [`HostIndex`]) as int32.
    fn upload(&mut self, stream: &std::sync::Arc<CudaStream>) -> Result<(), DeviceError> {
        let h = &self.host;
        let put = |dst: &mut CudaSlice<i32>, host: &[i32], what: &str| -> Result<(), DeviceError> {
            if host.is_empty() {
                return Ok(());
            }
            if dst.len() < host.len() {
                let len = host.len().next_power_of_two();
                *dst = stream.alloc_zeros::<i32>(len).map_err(|e| driver_error(&format!("allocating {what}"), e))?;
            }
            stream.memcpy_htod(host, dst).map_err(|e| driver_error(&format!("uploading {what}"), e))
        };
        put(&mut self.token_ids, &h.token_ids, "token ids")?;
        put(&mut self.positions, &h.positions, "positions")?;
        put(&mut self.slots, &h.slots, "slot mapping")?;
        put(&mut self.sample_rows, &h.sample_rows, "sample rows")?;
        put(&mut self.decode_tables, &h.decode_tables, "decode block tables")?;
        put(&mut self.decode_lens, &h.decode_lens, "decode context lengths")?;
        put(&mut self.prefill_tables, &h.prefill_tables, "prefill block tables")?;
        put(&mut self.prefill_lens, &h.prefill_lens, "prefill context lengths")?;
        put(&mut self.prefill_cu, &h.prefill_cu, "prefill offsets")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packing_transposes_the_selected_columns() {
        // [in = 2, width = 3]: rows (1, 2, 3) and (4, 5, 6).
        let w = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0];
        let all: Vec<f32> = pack_out_in_bf16(&w, 2, 3, 0, 3).iter().map(|x| x.to_f32()).collect();
        assert_eq!(all, [1.0, 4.0, 2.0, 5.0, 3.0, 6.0]);
        let tail: Vec<f32> = pack_out_in_bf16(&w, 2, 3, 1, 2).iter().map(|x| x.to_f32()).collect();
        assert_eq!(tail, [2.0, 5.0, 3.0, 6.0]);
        // Round to nearest even: 1 + 2⁻⁸ is halfway between two bf16 values and goes down.
        assert_eq!(to_bf16(&[1.0 + 1.0 / 256.0])[0].to_f32(), 1.0);
    }

    #[test]
    fn packed_projections_compute_what_the_cpu_layout_does() {
        // y = x · W_cpu (W_cpu [in, out]) must equal y = x · W_gpuᵀ (W_gpu [out, in]) for every
        // projection the executor packs, including the q | k | v split of the merged matrix.
        let c = LlamaConfig::tiny();
        let w = LlamaWeights::random(&c, 3);
        let l = &w.layers[0];
        let (h, qd, kvd) = (c.hidden_size, c.q_dim(), c.kv_dim());
        let cols = qd + 2 * kvd;
        let x: Vec<f32> = (0..h).map(|i| ((i * 7 % 11) as f32 - 5.0) / 8.0).collect();
        for (col0, n) in [(0, qd), (qd, kvd), (qd + kvd, kvd)] {
            let packed = pack_out_in_bf16(&l.qkv, h, cols, col0, n);
            for o in 0..n {
                let gpu: f32 = (0..h).map(|i| x[i] * packed[o * h + i].to_f32()).sum();
                let cpu: f32 = (0..h).map(|i| x[i] * bf16::from_f32(l.qkv[i * cols + col0 + o]).to_f32()).sum();
                assert!((gpu - cpu).abs() < 1e-5, "column {}: {gpu} vs {cpu}", col0 + o);
            }
        }
        // Tied embeddings: packing the LM head gives back the embedding, which the executor
        // therefore shares.
        let tied = LlamaWeights::random(&LlamaConfig { tie_word_embeddings: true, ..c.clone() }, 3);
        assert_eq!(pack_out_in_bf16(&tied.lm_head, h, c.vocab_size, 0, c.vocab_size), to_bf16(&tied.embed));
    }

    #[test]
    fn rounded_weights_are_bf16_values() {
        let w = round_weights_to_bf16(&LlamaWeights::random(&LlamaConfig::tiny(), 1));
        for v in w.layers[1].gate_up.iter().chain(&w.embed) {
            assert_eq!(bf16::from_f32(*v).to_f32(), *v);
        }
    }

    #[test]
    fn without_a_driver_construction_is_a_clear_error() {
        if check_driver().is_ok() {
            println!("SKIPPED without_a_driver_construction_is_a_clear_error: a CUDA driver is present");
            return;
        }
        let w = LlamaWeights::random(&LlamaConfig::tiny(), 1);
        let e = CudaModelExecutor::new(&w, 8, 4, 0).err().expect("no driver, no executor").to_string();
        assert!(e.starts_with("cuda:0 is unavailable") && e.contains("no CUDA driver"), "{e}");
    }
}
