//! The calibration grid: which kernel shapes a calibration run measures.
//!
//! The grid is model-agnostic in the sense that it is keyed by kernel shape, not by model: a
//! profile measured for the preset models serves any model whose per-GPU shapes it contains, and
//! the cost model interpolates between the shapes it does contain.
//!
//! ```text
//!  GEMM       (m, n, k, dtype)   m: token rows, swept 1 … max_m (dense at small m)
//!                                (n, k): every projection of every model at every TP degree:
//!                                  QKV      hidden → (heads + 2·kv_heads)·head_dim / t
//!                                  O        heads·head_dim / t → hidden
//!                                  gate+up  hidden → 2·ffn / t
//!                                  down     ffn / t → hidden
//!                                  LM head  hidden → vocab rows / t
//!  attention  (phase, batch, query_len, context_len, heads, kv_heads, head_dim, uneven, dtype)
//!             phase prefill: batch × query_len, no context
//!             phase decode:  batch × context_len, query_len 1, even and uneven contexts
//!             phase mixed:   batch × query_len × context_len (chunked prefill over a cache)
//!             head counts: per GPU, from every model at every TP degree
//!  all-reduce (bytes, gpus)      only for the GPU counts asked for
//! ```
//!
//! [`GridScale`] trades coverage for time: `Full` is the GPU grid (every preset model at TP
//! 1/2/4/8 in ≤ 30 minutes on one GPU); `Quick` and `Tiny` thin the sweeps and cap the work of
//! each shape so that a CPU, which runs a 16384 × 53248 GEMM in minutes, calibrates a small model
//! in seconds.

use std::collections::{BTreeMap, BTreeSet};

use super::backend::{AllReduceShape, AllToAllShape, AttentionPhase, AttentionShape, GemmShape, Peak, SamplingMethod, SamplingShape, StepGemms};
use crate::scenario::ModelSpec;
use crate::scenario::model::Dtype;

/// The model of [`GridOptions::cpu_default`].
pub const CPU_DEFAULT_MODEL: &str = "Llama-3.2-1B";

/// Most shapes in [`GridOptions::cpu_default`]'s grid: 260, or 311 with the AVX-512 few-row
/// kernel's breakpoints (each with the sampler's 4). At the CPU's timing policy (at most 0.3 s
/// a shape, 0.1–0.2 s typical on two cores) and three passes, 320 shapes is a few minutes.
pub const CPU_DEFAULT_SHAPES_MAX: usize = 320;

/// How dense the grid is and how much work one shape may take.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum GridScale {
    /// Every sweep point; no cap on a shape's work. For GPUs.
    Full,
    /// Sweeps thinned to powers of two (GEMM) or four (attention); shapes capped at
    /// [`GridScale::max_flops_per_shape`]. A CPU calibration of a 7–8B model in minutes.
    Quick,
    /// A handful of points per sweep and a tight work cap: a CPU calibration of a 1B model in
    /// tens of seconds on two cores; tests.
    Tiny,
}

impl GridScale {
    pub fn name(self) -> &'static str {
        match self {
            GridScale::Full => "full",
            GridScale::Quick => "quick",
            GridScale::Tiny => "tiny",
        }
    }

    pub fn parse(name: &str) -> Option<GridScale> {
        match name.trim().to_ascii_lowercase().as_str() {
            "full" => Some(GridScale::Full),
            "quick" => Some(GridScale::Quick),
            "tiny" => Some(GridScale::Tiny),
            _ => None,
        }
    }

    /// Shapes whose FLOPs exceed this are left out, except the smallest shape of each sweep (so
    /// every op keeps at least one measured point). `None`: no cap.
    pub fn max_flops_per_shape(self) -> Option<f64> {
        match self {
            GridScale::Full => None,
            GridScale::Quick => Some(5e10),
            GridScale::Tiny => Some(5e9),
        }
    }

    /// Cap on the KV-cache tokens one attention shape holds (batch × (context + query)): bounds
    /// the memory a shape allocates (2²¹ tokens × 8 KV heads × 128 × 2 × 2 B = 8 GiB on a GPU).
    pub fn max_kv_tokens_per_shape(self) -> u64 {
        match self {
            GridScale::Full => 1 << 21,
            GridScale::Quick => 1 << 18,
            GridScale::Tiny => 1 << 14,
        }
    }

    /// GEMM rows swept (before `max_m` and the work cap).
    pub fn m_sweep(self) -> &'static [u32] {
        match self {
            GridScale::Full => &[
                1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048, 3072,
                4096, 6144, 8192, 12288, 16384,
            ],
            GridScale::Quick => &[1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384],
            GridScale::Tiny => &[1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256],
        }
    }

    fn prefill_batches(self) -> &'static [u32] {
        match self {
            GridScale::Full => &[1, 2, 4, 8, 16, 32],
            GridScale::Quick => &[1, 4, 16],
            GridScale::Tiny => &[1, 2, 4],
        }
    }

    fn prefill_query_lens(self) -> &'static [u32] {
        match self {
            GridScale::Full => &[4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384],
            GridScale::Quick => &[4, 16, 64, 256, 1024, 4096, 16384],
            GridScale::Tiny => &[4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256],
        }
    }

    fn decode_batches(self) -> &'static [u32] {
        match self {
            GridScale::Full => &[1, 2, 4, 8, 16, 32, 64, 128, 256, 512],
            GridScale::Quick => &[1, 4, 16, 64, 256],
            GridScale::Tiny => &[1, 2, 4, 8, 16, 32],
        }
    }

    fn decode_context_lens(self) -> &'static [u32] {
        match self {
            GridScale::Full => &[16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072],
            GridScale::Quick => &[16, 64, 256, 1024, 4096, 16384, 65536],
            GridScale::Tiny => &[16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024],
        }
    }

    fn mixed_batches(self) -> &'static [u32] {
        match self {
            GridScale::Full => &[1, 2, 4, 8],
            GridScale::Quick => &[1, 4],
            GridScale::Tiny => &[1, 2],
        }
    }

    fn mixed_query_lens(self) -> &'static [u32] {
        match self {
            GridScale::Full => &[16, 32, 64, 128, 256, 512, 1024, 2048, 4096],
            GridScale::Quick => &[16, 64, 256, 1024],
            GridScale::Tiny => &[16, 32, 64],
        }
    }

    fn mixed_context_lens(self) -> &'static [u32] {
        match self {
            GridScale::Full => &[256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536],
            GridScale::Quick => &[256, 1024, 4096, 16384],
            GridScale::Tiny => &[128, 256, 512],
        }
    }

    /// All-reduce sizes, bytes: 4 KiB … 256 MiB.
    fn allreduce_bytes(self) -> Vec<u64> {
        let step = match self {
            GridScale::Full => 1,
            GridScale::Quick | GridScale::Tiny => 2,
        };
        (12..=28).step_by(step).map(|p| 1u64 << p).collect()
    }
}

/// What a grid covers.
#[derive(Clone, Debug, PartialEq)]
pub struct GridOptions {
    /// GEMM dtypes measured. Attention is measured in each of them except fp8 (the attention
    /// kernels take 16-bit or, on a CPU, 32-bit inputs).
    pub dtypes: Vec<Dtype>,
    /// Tensor-parallel degrees whose per-GPU shapes are covered.
    pub tensor_parallel: Vec<u32>,
    /// Models whose per-GPU shapes are covered.
    pub models: Vec<ModelSpec>,
    /// Largest GEMM row count, and the largest number of new tokens in one attention shape.
    pub max_m: u32,
    /// GEMM row counts measured besides the scale's sweep (up to `max_m`): the backend's
    /// [`Backend::gemm_m_breakpoints`](super::backend::Backend::gemm_m_breakpoints).
    pub extra_m: Vec<u32>,
    pub scale: GridScale,
    /// GPU counts to measure all-reduces over (empty: none; a single device has no collective).
    pub allreduce_gpus: Vec<u32>,
    /// Rows of the host sampler's shapes, one per [`SamplingMethod`] and model vocabulary (0:
    /// none). servesim's engines sample on the host, so their profiles time it; vLLM samples
    /// on the GPU, inside what a GPU profile's kernels leave out.
    pub sampling_rows: u32,
}

/// Rows the sampler is timed over: the engine samples a step's rows in parallel over its
/// threads, and 32 (`validate --engine`'s default `max_num_seqs`) keeps every thread busy. Its
/// cost per logit hardly depends on the rows beyond that.
pub const SAMPLING_ROWS: u32 = 32;

impl GridOptions {
    /// Every preset model at TP 1/2/4/8 in bf16, m up to 16384: the grid a GPU profile covers.
    pub fn all_presets(scale: GridScale) -> GridOptions {
        GridOptions {
            dtypes: vec![Dtype::Bf16],
            tensor_parallel: vec![1, 2, 4, 8],
            // The calibrated model prices MLA, hybrid attention and interleaved dense layers by
            // the roofline (`ModelSpec::unprofiled_layers`), so those presets add nothing.
            models: ModelSpec::preset_names()
                .into_iter()
                .filter_map(ModelSpec::preset)
                .filter(|m| m.unprofiled_layers().is_none())
                .collect(),
            max_m: 16384,
            extra_m: Vec::new(),
            scale,
            allreduce_gpus: Vec::new(),
            sampling_rows: 0,
        }
    }

    /// What `calibrate --device cpu` measures unless told otherwise: the smallest preset model
    /// (Llama-3.2-1B) at TP 1, in f32 (what the CPU engine computes in), on the tiny grid. A CPU
    /// serves one small model on one device; every preset at TP 1/2/4/8 was 5,740 shapes here
    /// (6,576 with the AVX-512 kernel's breakpoints) and a 405B LM head of 8 GiB, hours of work.
    /// At most [`CPU_DEFAULT_SHAPES_MAX`] shapes with any backend's extra rows.
    pub fn cpu_default() -> GridOptions {
        let model = ModelSpec::preset(CPU_DEFAULT_MODEL).expect("a preset model");
        GridOptions { sampling_rows: SAMPLING_ROWS, ..GridOptions::for_model(model, vec![1], vec![Dtype::Fp32], GridScale::Tiny) }
    }

    /// One model at the given TP degrees and dtypes (no sampler: see
    /// [`GridOptions::sampling_rows`]).
    pub fn for_model(model: ModelSpec, tensor_parallel: Vec<u32>, dtypes: Vec<Dtype>, scale: GridScale) -> GridOptions {
        GridOptions {
            dtypes,
            tensor_parallel,
            models: vec![model],
            max_m: 16384,
            extra_m: Vec::new(),
            scale,
            allreduce_gpus: Vec::new(),
            sampling_rows: 0,
        }
    }
}

/// Which projection of a transformer layer a GEMM is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum GemmOp {
    Qkv,
    O,
    GateUp,
    Down,
    LmHead,
}

impl GemmOp {
    pub const ALL: [GemmOp; 5] = [GemmOp::Qkv, GemmOp::O, GemmOp::GateUp, GemmOp::Down, GemmOp::LmHead];

    pub fn name(self) -> &'static str {
        match self {
            GemmOp::Qkv => "QKV",
            GemmOp::O => "O",
            GemmOp::GateUp => "gate+up",
            GemmOp::Down => "down",
            GemmOp::LmHead => "LM head",
        }
    }
}

/// `(n, k)` of each projection of `model` on one GPU at tensor parallelism `tp`, in
/// [`GemmOp::ALL`] order, as vLLM shards it (see [`ModelSpec::shard`]).
pub fn model_gemm_nk(model: &ModelSpec, tp: u32) -> [(GemmOp, u32, u32); 5] {
    let shard = model.shard(tp);
    let h = model.hidden_size;
    let d = model.head_dim as u64;
    let to_u32 = |x: u64| u32::try_from(x).unwrap_or(u32::MAX);
    [
        (GemmOp::Qkv, to_u32((shard.heads + 2 * shard.kv_heads) * d), h),
        (GemmOp::O, h, to_u32(shard.heads * d)),
        (GemmOp::GateUp, to_u32(2 * shard.ffn), h),
        (GemmOp::Down, h, to_u32(shard.ffn)),
        (GemmOp::LmHead, to_u32(shard.vocab_rows), h),
    ]
}

/// `(n, k)` of a mixture-of-experts layer's router, one expert's gate+up and its down on one
/// GPU at tensor parallelism `tp` (a `1/tp` slice of each expert, or whole experts under expert
/// parallelism); `None` for a dense model.
pub fn moe_gemm_nk(model: &ModelSpec, tp: u32) -> Option<[(u32, u32); 3]> {
    let moe = model.moe?;
    let h = model.hidden_size;
    let f = moe.expert_ffn_per_gpu(tp) as u32;
    Some([(moe.num_experts, h), (2 * f, h), (h, f)])
}

/// The dtype a model's GEMM runs in: the weights' dtype, except the LM head, which stays 16-bit
/// in fp8 checkpoints (see `cost::roofline`).
pub fn gemm_dtype(model: &ModelSpec, op: GemmOp) -> Dtype {
    match (op, model.weight_dtype) {
        (GemmOp::LmHead, Dtype::Fp8) => Dtype::Bf16,
        (_, d) => d,
    }
}

/// Attention heads on one GPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct HeadConfig {
    pub num_heads: u32,
    pub num_kv_heads: u32,
    pub head_dim: u32,
}

/// The per-GPU head configuration of `model` at tensor parallelism `tp`.
pub fn model_heads(model: &ModelSpec, tp: u32) -> HeadConfig {
    let shard = model.shard(tp);
    HeadConfig { num_heads: shard.heads as u32, num_kv_heads: shard.kv_heads as u32, head_dim: model.head_dim }
}

/// One shape of the grid.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Shape {
    Gemm(GemmShape),
    Attention(AttentionShape),
    AllReduce(AllReduceShape),
    /// Imported only (see [`AllToAllShape`]): no grid holds one.
    AllToAll(AllToAllShape),
    Sampling(SamplingShape),
}

/// Roofline work of a shape: FLOPs and bytes moved to and from memory.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Work {
    pub flops: f64,
    pub bytes: f64,
}

impl Work {
    /// The roofline time at `peak`: `max(flops / peak FLOP/s, bytes / peak bandwidth)`, seconds.
    #[inline]
    pub fn roofline_s(&self, peak: &Peak) -> f64 {
        (self.flops / peak.flops_per_s).max(self.bytes / peak.memory_bytes_per_s)
    }
}

/// FLOPs per multiply-accumulate.
const FLOPS_PER_MAC: f64 = 2.0;
/// QKᵀ and P·V.
const ATTENTION_MATMULS: f64 = 2.0;
/// K and V.
const KV_TENSORS: f64 = 2.0;
/// Q read and O written per query token.
const QO_TENSORS: f64 = 2.0;

/// Bytes of a GEMM's output element: 16-bit for fp8 (cuBLASLt writes bf16), else the dtype.
fn gemm_output_bytes(dtype: Dtype) -> f64 {
    dtype.bytes().max(2) as f64
}

/// A GEMM `[m × k] · [k × n]`: `2·m·n·k` FLOPs; reads `m·k + k·n` input elements in `dtype` and
/// writes `m·n` outputs (16-bit for fp8, else `dtype`).
pub fn gemm_work(shape: &GemmShape) -> Work {
    let (m, n, k) = (shape.m as f64, shape.n as f64, shape.k as f64);
    let input = shape.dtype.bytes() as f64;
    Work { flops: FLOPS_PER_MAC * m * n * k, bytes: (m * k + k * n) * input + m * n * gemm_output_bytes(shape.dtype) }
}

/// Attention work from totals over a batch: `keys` (Σ over query tokens of the keys each
/// attends to), `kv_tokens` (cached plus new tokens whose K and V are read) and
/// `query_tokens`. FLOPs `4 · heads · head_dim · keys`; bytes: K and V of every KV token for
/// each KV head, plus Q and O of every query token for each head, all in `dtype`.
#[inline]
pub fn attention_work_from_totals(
    heads: HeadConfig,
    dtype: Dtype,
    keys: f64,
    kv_tokens: f64,
    query_tokens: f64,
) -> Work {
    let h = heads.num_heads as f64;
    let kv = heads.num_kv_heads as f64;
    let d = heads.head_dim as f64;
    let bytes = dtype.bytes() as f64;
    Work {
        flops: ATTENTION_MATMULS * FLOPS_PER_MAC * h * d * keys,
        bytes: (KV_TENSORS * kv * kv_tokens + QO_TENSORS * h * query_tokens) * d * bytes,
    }
}

/// The totals `(keys, kv_tokens, query_tokens)` of `batch` sequences of `query_len` new tokens
/// over `context_len` cached ones each: causal, so new token `i` (0-based) sees `c + i + 1` keys.
/// For uneven decode shapes `context_len` is the mean context, which is what the totals need.
#[inline]
pub fn attention_totals(batch: f64, query_len: f64, context_len: f64) -> (f64, f64, f64) {
    let keys = batch * (query_len * context_len + query_len * (query_len + 1.0) / 2.0);
    (keys, batch * (context_len + query_len), batch * query_len)
}

pub fn attention_work(shape: &AttentionShape) -> Work {
    let (keys, kv_tokens, query_tokens) =
        attention_totals(shape.batch as f64, shape.query_len as f64, shape.context_len as f64);
    let heads = HeadConfig { num_heads: shape.num_heads, num_kv_heads: shape.num_kv_heads, head_dim: shape.head_dim };
    attention_work_from_totals(heads, shape.dtype, keys, kv_tokens, query_tokens)
}

/// A ring all-reduce of `bytes` over `gpus` moves `2·(gpus − 1)/gpus · bytes` per GPU; no FLOPs
/// worth counting.
pub fn allreduce_work(shape: &AllReduceShape) -> Work {
    let g = shape.gpus.max(1) as f64;
    Work { flops: 0.0, bytes: 2.0 * (g - 1.0) / g * shape.bytes as f64 }
}

/// An all-to-all of `bytes` per GPU over `gpus` moves `(gpus − 1)/gpus · bytes` off each GPU
/// (its own slice stays); no FLOPs.
pub fn alltoall_work(shape: &AllToAllShape) -> Work {
    let g = shape.gpus.max(1) as f64;
    Work { flops: 0.0, bytes: (g - 1.0) / g * shape.bytes as f64 }
}

/// The sampler reads each row's f32 logits at least once; its arithmetic is not worth counting.
pub fn sampling_work(shape: &SamplingShape) -> Work {
    Work { flops: 0.0, bytes: 4.0 * shape.rows as f64 * shape.vocab as f64 }
}

impl Shape {
    pub fn work(&self) -> Work {
        match self {
            Shape::Gemm(s) => gemm_work(s),
            Shape::Attention(s) => attention_work(s),
            Shape::AllReduce(s) => allreduce_work(s),
            Shape::AllToAll(s) => alltoall_work(s),
            Shape::Sampling(s) => sampling_work(s),
        }
    }

    /// The dtype of a GEMM or attention shape.
    pub fn dtype(&self) -> Option<Dtype> {
        match self {
            Shape::Gemm(s) => Some(s.dtype),
            Shape::Attention(s) => Some(s.dtype),
            Shape::AllReduce(_) | Shape::AllToAll(_) | Shape::Sampling(_) => None,
        }
    }

    pub fn kind(&self) -> OpKind {
        match self {
            Shape::Gemm(_) => OpKind::Gemm,
            Shape::Attention(a) => match a.phase {
                AttentionPhase::Prefill => OpKind::Prefill,
                AttentionPhase::Decode => OpKind::Decode,
                AttentionPhase::Mixed => OpKind::Mixed,
            },
            Shape::AllReduce(_) => OpKind::AllReduce,
            Shape::AllToAll(_) => OpKind::AllToAll,
            Shape::Sampling(_) => OpKind::Sampling,
        }
    }
}

/// The kinds of op the cost model prices from separate curves or surfaces: a profile lacking one
/// prices it with the roofline, so a run cut short by its budget must still have each
/// ([`Grid::shapes_in_run_order`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum OpKind {
    Gemm,
    Prefill,
    Decode,
    Mixed,
    AllReduce,
    /// Imported measurements only: no calibration grid holds one, so it is not in [`OpKind::ALL`].
    AllToAll,
    /// The host sampler (see [`GridOptions::sampling_rows`]).
    Sampling,
}

impl OpKind {
    /// The kinds a calibration grid measures.
    pub const ALL: [OpKind; 6] = [OpKind::Gemm, OpKind::Prefill, OpKind::Decode, OpKind::Mixed, OpKind::AllReduce, OpKind::Sampling];

    pub fn name(self) -> &'static str {
        match self {
            OpKind::Gemm => "GEMM",
            OpKind::Prefill => "prefill attention",
            OpKind::Decode => "decode attention",
            OpKind::Mixed => "mixed attention",
            OpKind::AllReduce => "all-reduce",
            OpKind::AllToAll => "all-to-all",
            OpKind::Sampling => "sampling",
        }
    }
}

/// The shapes a calibration run measures, deduplicated and sorted, with the options that made
/// them.
#[derive(Clone, Debug, PartialEq)]
pub struct Grid {
    pub options: GridOptions,
    pub gemms: Vec<GemmShape>,
    pub attention: Vec<AttentionShape>,
    pub allreduce: Vec<AllReduceShape>,
    pub sampling: Vec<SamplingShape>,
}

impl Grid {
    pub fn new(options: GridOptions) -> Grid {
        let scale = options.scale;
        let max_flops = scale.max_flops_per_shape().unwrap_or(f64::INFINITY);
        let tps: Vec<u32> = if options.tensor_parallel.is_empty() { vec![1] } else { options.tensor_parallel.clone() };

        // GEMM (n, k) pairs over every model and TP degree.
        let mut nk: BTreeSet<(u32, u32)> = BTreeSet::new();
        let mut heads: BTreeSet<HeadConfig> = BTreeSet::new();
        let mut max_positions = 0u32;
        for model in &options.models {
            max_positions = max_positions.max(model.max_position_embeddings);
            for &tp in &tps {
                // A mixture of experts without shared ones has no dense MLP (n or k of 0).
                for (_, n, k) in model_gemm_nk(model, tp) {
                    if n > 0 && k > 0 {
                        nk.insert((n, k));
                    }
                }
                nk.extend(moe_gemm_nk(model, tp).into_iter().flatten());
                heads.insert(model_heads(model, tp));
            }
        }
        let max_positions = if max_positions == 0 { u32::MAX } else { max_positions };

        let m_values: Vec<u32> = sorted_unique(scale.m_sweep().iter().chain(&options.extra_m).copied())
            .into_iter()
            .filter(|&m| (1..=options.max_m.max(1)).contains(&m))
            .collect();
        let m_values = if m_values.is_empty() { vec![1] } else { m_values };
        let mut gemms = BTreeSet::new();
        for &dtype in &options.dtypes {
            for &(n, k) in &nk {
                for (i, &m) in m_values.iter().enumerate() {
                    let shape = GemmShape { m, n, k, dtype };
                    if i == 0 || gemm_work(&shape).flops <= max_flops {
                        gemms.insert(shape);
                    }
                }
            }
        }

        let mut attention = BTreeSet::new();
        let max_kv_tokens = scale.max_kv_tokens_per_shape();
        let max_new_tokens = options.max_m.max(1) as u64;
        for &dtype in options.dtypes.iter().filter(|&&d| d != Dtype::Fp8) {
            for &h in &heads {
                let mut add = |phase, batch: u32, query_len: u32, context_len: u32, uneven: bool, first: bool| {
                    let shape = AttentionShape {
                        phase,
                        batch,
                        query_len,
                        context_len,
                        num_heads: h.num_heads,
                        num_kv_heads: h.num_kv_heads,
                        head_dim: h.head_dim,
                        uneven,
                        dtype,
                    };
                    let b = batch as u64;
                    let fits = b * (context_len as u64 + query_len as u64) <= max_kv_tokens
                        && b * query_len as u64 <= max_new_tokens.max(b)
                        && (context_len as u64 + query_len as u64) <= max_positions as u64
                        && attention_work(&shape).flops <= max_flops;
                    if first || fits {
                        attention.insert(shape);
                    }
                };
                for (bi, &batch) in scale.prefill_batches().iter().enumerate() {
                    for (qi, &q) in scale.prefill_query_lens().iter().enumerate() {
                        add(AttentionPhase::Prefill, batch, q, 0, false, bi == 0 && qi == 0);
                    }
                }
                for (bi, &batch) in scale.decode_batches().iter().enumerate() {
                    for (ci, &c) in scale.decode_context_lens().iter().enumerate() {
                        add(AttentionPhase::Decode, batch, 1, c, false, bi == 0 && ci == 0);
                        // Uneven contexts need at least two sequences to differ.
                        if batch >= 2 {
                            add(AttentionPhase::Decode, batch, 1, c, true, bi == 1 && ci == 0);
                        }
                    }
                }
                for (bi, &batch) in scale.mixed_batches().iter().enumerate() {
                    for (qi, &q) in scale.mixed_query_lens().iter().enumerate() {
                        for (ci, &c) in scale.mixed_context_lens().iter().enumerate() {
                            add(AttentionPhase::Mixed, batch, q, c, false, bi == 0 && qi == 0 && ci == 0);
                        }
                    }
                }
            }
        }

        let mut allreduce = BTreeSet::new();
        for &gpus in options.allreduce_gpus.iter().filter(|&&g| g >= 2) {
            for bytes in scale.allreduce_bytes() {
                allreduce.insert(AllReduceShape { bytes, gpus });
            }
        }

        let mut sampling = BTreeSet::new();
        if options.sampling_rows > 0 {
            for model in &options.models {
                for method in SamplingMethod::ALL {
                    sampling.insert(SamplingShape { method, rows: options.sampling_rows, vocab: model.vocab_size });
                }
            }
        }

        Grid {
            options,
            gemms: gemms.into_iter().collect(),
            attention: attention.into_iter().collect(),
            allreduce: allreduce.into_iter().collect(),
            sampling: sampling.into_iter().collect(),
        }
    }

    /// The step around a GEMM shape of this grid: the layer of the first model and TP degree
    /// (in the options' order) that has a projection of its `(n, k)`. `None` for a shape no
    /// model of the grid runs.
    pub fn step_gemms(&self, shape: &GemmShape) -> Option<StepGemms> {
        let tps: &[u32] = if self.options.tensor_parallel.is_empty() { &[1] } else { &self.options.tensor_parallel };
        for model in &self.options.models {
            for &tp in tps {
                let ops = model_gemm_nk(model, tp);
                let Some(op) = ops.iter().position(|&(_, n, k)| (n, k) == (shape.n, shape.k)) else { continue };
                let layer_len = if ops[op].0 == GemmOp::LmHead { ops.len() } else { ops.len() - 1 };
                return Some(StepGemms { sequence: ops[..layer_len].iter().map(|&(_, n, k)| (n, k)).collect(), timed: op });
            }
        }
        None
    }

    /// Number of shapes.
    pub fn len(&self) -> usize {
        self.gemms.len() + self.attention.len() + self.allreduce.len() + self.sampling.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every shape, coarse to fine, the op kinds interleaved: the first shapes measured span each
    /// sweep's whole range (smallest, largest, then midpoints, …), so a run stopped by its budget
    /// still covers every op end to end and only lacks resolution. Within a level the kinds
    /// ([`OpKind`]) take turns in proportion to their shapes in the level (each shape is keyed by
    /// its position within its kind's share of the level), so a budget is spent on every kind
    /// in proportion to the grid, not on GEMMs first; each kind's shapes keep sorted order. The
    /// host sampler's shapes, if any, come before all.
    pub fn shapes_in_run_order(&self) -> Vec<Shape> {
        let mut leveled = self.leveled();
        // Stable sort by (level, kind) keeps each kind's sorted order within a level.
        leveled.sort_by_key(|(level, shape)| (*level, shape.kind()));
        let mut in_group: BTreeMap<(u32, OpKind), u64> = BTreeMap::new();
        for (level, shape) in &leveled {
            *in_group.entry((*level, shape.kind())).or_default() += 1;
        }
        // Shape i of n in its (level, kind) sits at (2i + 1) / 2n of the level; compared exactly
        // as fractions, ties broken by kind.
        let mut seen: BTreeMap<(u32, OpKind), u64> = BTreeMap::new();
        let mut keyed: Vec<(u32, u64, u64, OpKind, Shape)> = leveled
            .into_iter()
            .map(|(level, shape)| {
                let group = (level, shape.kind());
                let i = seen.entry(group).or_default();
                let key = (level, 2 * *i + 1, 2 * in_group[&group], shape.kind(), shape);
                *i += 1;
                key
            })
            .collect();
        keyed.sort_by(|a, b| {
            a.0.cmp(&b.0)
                .then_with(|| (a.1 as u128 * b.2 as u128).cmp(&(b.1 as u128 * a.2 as u128)))
                .then_with(|| a.3.cmp(&b.3))
        });
        // The host sampler's few shapes first: the engine's twin needs them, and a run never
        // cuts them (`calibrate::run`).
        let (mut order, rest): (Vec<Shape>, Vec<Shape>) =
            keyed.into_iter().map(|k| k.4).partition(|s| s.kind() == OpKind::Sampling);
        order.extend(rest);
        order
    }

    /// Every shape with its subdivision level ([`level_of`]): GEMMs on the m axis, attention
    /// the finest of its phase's batch, query and context axes, all-reduces on the bytes axis.
    fn leveled(&self) -> Vec<(u32, Shape)> {
        let m_axis: Vec<u32> = sorted_unique(self.gemms.iter().map(|s| s.m));
        // Each phase's own axes: mixed shapes' batches and lengths lie inside prefill's and
        // decode's, and on shared axes they would never reach the first levels.
        let phase_axis = |phase: AttentionPhase, value: fn(&AttentionShape) -> u32| {
            sorted_unique(self.attention.iter().filter(|s| s.phase == phase).map(value))
        };
        let axes: BTreeMap<AttentionPhase, [Vec<u32>; 3]> = [AttentionPhase::Prefill, AttentionPhase::Decode, AttentionPhase::Mixed]
            .into_iter()
            .map(|p| (p, [phase_axis(p, |s| s.batch), phase_axis(p, |s| s.query_len), phase_axis(p, |s| s.context_len)]))
            .collect();
        let bytes_axis: Vec<u64> = sorted_unique(self.allreduce.iter().map(|s| s.bytes));
        let mut leveled: Vec<(u32, Shape)> = Vec::with_capacity(self.len());
        for s in &self.gemms {
            leveled.push((level_of(&m_axis, s.m), Shape::Gemm(*s)));
        }
        for s in &self.attention {
            let [batch_axis, query_axis, context_axis] = &axes[&s.phase];
            let level = level_of(batch_axis, s.batch)
                .max(level_of(query_axis, s.query_len))
                .max(level_of(context_axis, s.context_len));
            leveled.push((level, Shape::Attention(*s)));
        }
        for s in &self.allreduce {
            leveled.push((level_of(&bytes_axis, s.bytes), Shape::AllReduce(*s)));
        }
        // A handful of shapes, each a few milliseconds: all in the first level.
        leveled.extend(self.sampling.iter().map(|s| (0, Shape::Sampling(*s))));
        leveled
    }
}

fn sorted_unique<T: Ord + Copy>(values: impl Iterator<Item = T>) -> Vec<T> {
    let set: BTreeSet<T> = values.collect();
    set.into_iter().collect()
}

/// The subdivision level of `value` on a sorted axis: 0 for the two ends, 1 for the middle, 2
/// for the quarter points, … (the level at which binary subdivision of the index range first
/// reaches its index).
fn level_of<T: Ord>(axis: &[T], value: T) -> u32 {
    let Ok(i) = axis.binary_search(&value) else { return 0 };
    let last = axis.len().saturating_sub(1);
    if i == 0 || i == last {
        return 0;
    }
    let mut level = 1;
    let mut step = last.next_power_of_two() / 2;
    while step > 1 && i % step != 0 {
        step /= 2;
        level += 1;
    }
    level
}

#[cfg(test)]
mod tests {
    use super::*;

    fn llama_1b() -> ModelSpec {
        ModelSpec::preset("Llama-3.2-1B").unwrap()
    }

    #[test]
    fn model_gemm_shapes_follow_the_shard() {
        let m = ModelSpec::preset("Llama-3.1-8B").unwrap();
        let tp1 = model_gemm_nk(&m, 1);
        assert_eq!(tp1[0], (GemmOp::Qkv, (32 + 16) * 128, 4096));
        assert_eq!(tp1[1], (GemmOp::O, 4096, 4096));
        assert_eq!(tp1[2], (GemmOp::GateUp, 2 * 14336, 4096));
        assert_eq!(tp1[3], (GemmOp::Down, 4096, 14336));
        assert_eq!(tp1[4], (GemmOp::LmHead, 128256, 4096));
        let tp8 = model_gemm_nk(&m, 8);
        // 4 query heads and 1 KV head per GPU.
        assert_eq!(tp8[0], (GemmOp::Qkv, (4 + 2) * 128, 4096));
        assert_eq!(tp8[4], (GemmOp::LmHead, 128256 / 8, 4096));
        assert_eq!(model_heads(&m, 8), HeadConfig { num_heads: 4, num_kv_heads: 1, head_dim: 128 });
    }

    #[test]
    fn a_gemm_steps_among_its_layer_and_the_lm_head_after_it() {
        let m = ModelSpec::preset("Llama-3.1-8B").unwrap();
        let grid = Grid::new(GridOptions::for_model(m.clone(), vec![8, 1], vec![Dtype::Bf16], GridScale::Tiny));
        let shape = |(_, n, k): (GemmOp, u32, u32)| GemmShape { m: 4, n, k, dtype: Dtype::Bf16 };
        let tp8 = model_gemm_nk(&m, 8);
        let layer: Vec<(u32, u32)> = tp8[..4].iter().map(|&(_, n, k)| (n, k)).collect();
        // Each projection at its place in the layer, at the first TP degree that has it.
        for (i, &op) in tp8[..4].iter().enumerate() {
            assert_eq!(grid.step_gemms(&shape(op)), Some(StepGemms { sequence: layer.clone(), timed: i }));
        }
        // The LM head follows a whole layer.
        let mut with_head = layer.clone();
        with_head.push((tp8[4].1, tp8[4].2));
        assert_eq!(grid.step_gemms(&shape(tp8[4])), Some(StepGemms { sequence: with_head, timed: 4 }));
        // TP 1's down projection is in TP 1's layer.
        let tp1 = model_gemm_nk(&m, 1);
        let step = grid.step_gemms(&shape(tp1[3])).unwrap();
        assert_eq!((step.sequence[0], step.timed), ((tp1[0].1, tp1[0].2), 3));
        // A shape no model runs has no step.
        assert_eq!(grid.step_gemms(&GemmShape { m: 4, n: 3, k: 5, dtype: Dtype::Bf16 }), None);
    }

    #[test]
    fn full_grid_covers_every_preset_at_every_tp() {
        let grid = Grid::new(GridOptions::all_presets(GridScale::Full));
        for name in ModelSpec::preset_names() {
            let model = ModelSpec::preset(name).unwrap();
            if model.unprofiled_layers().is_some() {
                continue;
            }
            for tp in [1, 2, 4, 8] {
                let dense = model_gemm_nk(&model, tp).map(|(op, n, k)| (op.name(), n, k));
                let experts = moe_gemm_nk(&model, tp).map(|[r, g, d]| [("router", r.0, r.1), ("expert gate+up", g.0, g.1), ("expert down", d.0, d.1)]);
                // A mixture of experts without shared ones has no dense MLP to measure.
                for (op, n, k) in dense.into_iter().chain(experts.into_iter().flatten()).filter(|&(_, n, k)| n > 0 && k > 0) {
                    for m in [1, 16384] {
                        let shape = GemmShape { m, n, k, dtype: Dtype::Bf16 };
                        assert!(grid.gemms.binary_search(&shape).is_ok(), "{name} tp {tp} {op} m {m}");
                    }
                }
                let h = model_heads(&model, tp);
                for phase in [AttentionPhase::Prefill, AttentionPhase::Decode, AttentionPhase::Mixed] {
                    assert!(
                        grid.attention.iter().any(|s| s.phase == phase
                            && (s.num_heads, s.num_kv_heads, s.head_dim) == (h.num_heads, h.num_kv_heads, h.head_dim)),
                        "{name} tp {tp} {phase:?}"
                    );
                }
                assert!(grid.attention.iter().any(|s| s.uneven && s.num_heads == h.num_heads));
            }
        }
        // Sorted and deduplicated.
        assert!(grid.gemms.windows(2).all(|w| w[0] < w[1]));
        assert!(grid.attention.windows(2).all(|w| w[0] < w[1]));
        // Bounded memory per attention shape; nothing longer than a model's context window.
        for s in &grid.attention {
            assert!(s.batch as u64 * (s.context_len + s.query_len) as u64 <= 1 << 21, "{s:?}");
            assert!(s.context_len + s.query_len <= 131072, "{s:?}");
        }
        println!("full grid: {} GEMMs, {} attention shapes", grid.gemms.len(), grid.attention.len());
    }

    #[test]
    fn tiny_grid_caps_work_but_keeps_every_op() {
        let options = GridOptions::for_model(llama_1b(), vec![1], vec![Dtype::Fp32], GridScale::Tiny);
        let grid = Grid::new(options);
        for (op, n, k) in model_gemm_nk(&llama_1b(), 1) {
            let ms: Vec<u32> = grid.gemms.iter().filter(|s| (s.n, s.k) == (n, k)).map(|s| s.m).collect();
            assert_eq!(ms.first(), Some(&1), "{}", op.name());
            assert!(ms.len() >= 3, "{} {ms:?}", op.name());
        }
        for s in &grid.gemms {
            assert!(s.m == 1 || gemm_work(s).flops <= 5e9, "{s:?}");
        }
        let total_flops: f64 = grid.gemms.iter().map(|s| gemm_work(s).flops).sum::<f64>()
            + grid.attention.iter().map(|s| attention_work(s).flops).sum::<f64>();
        // A few seconds per pass at ~100 GFLOP/s.
        assert!(total_flops < 2e11, "{total_flops:e}");
        assert!(grid.len() < 400, "{}", grid.len());
        println!("tiny grid for Llama-3.2-1B: {} shapes, {total_flops:.2e} FLOP", grid.len());
    }

    #[test]
    fn extra_rows_join_the_sweep_up_to_max_m() {
        let mut options = GridOptions::for_model(llama_1b(), vec![1], vec![Dtype::Fp32], GridScale::Tiny);
        options.max_m = 40;
        let plain: BTreeSet<u32> = Grid::new(options.clone()).gemms.iter().map(|s| s.m).collect();
        options.extra_m = vec![0, 8, 9, 17, 41];
        let grid = Grid::new(options);
        let with_extra: BTreeSet<u32> = grid.gemms.iter().map(|s| s.m).collect();
        // 9 and 17 are new, 8 was already swept; 0 is no row count and 41 exceeds max_m.
        let added: Vec<u32> = with_extra.difference(&plain).copied().collect();
        assert_eq!(added, vec![9, 17]);
        assert!(plain.is_subset(&with_extra));
        for (_, n, k) in model_gemm_nk(&llama_1b(), 1) {
            assert!(grid.gemms.iter().any(|s| (s.m, s.n, s.k) == (9, n, k)), "m = 9 for every projection");
        }
    }

    #[test]
    fn run_order_is_coarse_to_fine_and_complete() {
        let options = GridOptions::for_model(llama_1b(), vec![1, 2], vec![Dtype::Bf16], GridScale::Quick);
        let grid = Grid::new(options);
        let order = grid.shapes_in_run_order();
        assert_eq!(order.len(), grid.len());
        let mut sorted = order.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted.len(), grid.len());
        // Levels never decrease along the order.
        let level: BTreeMap<Shape, u32> = grid.leveled().into_iter().map(|(l, s)| (s, l)).collect();
        assert!(order.windows(2).all(|w| level[&w[0]] <= level[&w[1]]));
        // The first level holds both ends of the m sweep for every (n, k): a run stopped early
        // still spans every GEMM's range.
        let m_axis = sorted_unique(grid.gemms.iter().map(|s| s.m));
        let level0 = order.iter().take_while(|s| level[*s] == 0).count();
        for g in &grid.gemms {
            if g.m == m_axis[0] || g.m == *m_axis.last().unwrap() {
                assert!(order[..level0].contains(&Shape::Gemm(*g)), "{g:?}");
            }
        }
        assert!(order.iter().position(|s| matches!(s, Shape::Gemm(g) if g.m == 2)).unwrap() > level0);
    }

    #[test]
    fn kinds_take_turns_in_proportion_within_a_level() {
        let mut options = GridOptions::cpu_default();
        options.allreduce_gpus = vec![2];
        let grid = Grid::new(options);
        let order = grid.shapes_in_run_order();
        let level: BTreeMap<Shape, u32> = grid.leveled().into_iter().map(|(l, s)| (s, l)).collect();
        // Every kind is in the grid and in its first level.
        let level0 = order.iter().take_while(|s| level[*s] == 0).count();
        for kind in OpKind::ALL {
            assert!(order[..level0].iter().any(|s| s.kind() == kind), "{kind:?} in level 0");
        }
        // The sampler's shapes lead; then along each level, a kind's shapes done stay within 3
        // (half a shape, plus half a shape per kind of the others) of its share of the shapes
        // done.
        let mut start = grid.sampling.len();
        assert!(order[..start].iter().all(|s| s.kind() == OpKind::Sampling) && start > 0);
        while start < order.len() {
            let l = level[&order[start]];
            let end = start + order[start..].iter().take_while(|s| level[*s] == l).count();
            let total = |kind: OpKind| order[start..end].iter().filter(|s| s.kind() == kind).count() as f64;
            for p in 1..=end - start {
                for kind in OpKind::ALL.into_iter().filter(|&k| k != OpKind::Sampling) {
                    let done = order[start..start + p].iter().filter(|s| s.kind() == kind).count() as f64;
                    let share = p as f64 * total(kind) / (end - start) as f64;
                    assert!((done - share).abs() <= 3.0, "level {l}, {p} done: {kind:?} {done} vs {share:.1}");
                }
            }
            start = end;
        }
    }

    #[test]
    fn the_host_sampler_is_timed_for_servesims_engine_only() {
        // A CPU profile prices servesim's CPU engine, which samples on the host: one shape per
        // method, over the model's whole vocabulary, measured first.
        let grid = Grid::new(GridOptions::cpu_default());
        let vocab = llama_1b().vocab_size;
        let methods: Vec<SamplingMethod> = grid.sampling.iter().map(|s| s.method).collect();
        assert_eq!(methods, SamplingMethod::ALL);
        assert!(grid.sampling.iter().all(|s| s.vocab == vocab && s.rows == SAMPLING_ROWS), "{:?}", grid.sampling);
        let first: Vec<Shape> = grid.shapes_in_run_order().into_iter().take(grid.sampling.len()).collect();
        assert!(grid.sampling.iter().all(|s| first.contains(&Shape::Sampling(*s))), "sampling first: {first:?}");
        // A GPU profile prices vLLM too, which samples on the GPU inside what it leaves out.
        assert!(Grid::new(GridOptions::all_presets(GridScale::Tiny)).sampling.is_empty());
        assert!(Grid::new(GridOptions::for_model(llama_1b(), vec![1], vec![Dtype::Bf16], GridScale::Tiny)).sampling.is_empty());
    }

    #[test]
    fn subdivision_levels() {
        let axis = [1, 2, 3, 4, 5, 6, 7, 8, 9];
        let levels: Vec<u32> = axis.iter().map(|&v| level_of(&axis, v)).collect();
        assert_eq!(levels, [0, 3, 2, 3, 1, 3, 2, 3, 0]);
    }

    #[test]
    fn work_formulas() {
        let g = GemmShape { m: 2, n: 3, k: 4, dtype: Dtype::Bf16 };
        assert_eq!(gemm_work(&g), Work { flops: 48.0, bytes: (8.0 + 12.0) * 2.0 + 6.0 * 2.0 });
        let a = AttentionShape {
            phase: AttentionPhase::Decode,
            batch: 2,
            query_len: 1,
            context_len: 10,
            num_heads: 4,
            num_kv_heads: 2,
            head_dim: 8,
            uneven: false,
            dtype: Dtype::Bf16,
        };
        // keys = 2 · 11; flops = 4 · 4 · 8 · 22; bytes = (2·2·22 + 2·4·2) · 8 · 2.
        assert_eq!(attention_work(&a), Work { flops: 4.0 * 4.0 * 8.0 * 22.0, bytes: (88.0 + 16.0) * 16.0 });
    }
}
