//! Roofline cost model: every op of a step costs `max(compute time, memory time)` from datasheet
//! peaks scaled by named efficiencies.
//!
//! ```text
//!  per layer (× num_layers, all layers identical)          once per step
//!  ┌──────────────────────────────────────────────┐        ┌──────────────────────────┐
//!  │ add+RMSNorm → QKV GEMM → rotary → attention  │        │ final add+RMSNorm (T)    │
//!  │ → O GEMM → [all-reduce] → add+RMSNorm        │        │ LM head GEMM (S rows)    │
//!  │ → gate+up GEMM → SiLU·mul → down GEMM        │        │ [logit gather]           │
//!  │ → [all-reduce]                               │        │ CPU overhead             │
//!  └──────────────────────────────────────────────┘        └──────────────────────────┘
//!  T = tokens computed this step, S = tokens sampled this step, [..] only when TP > 1.
//! ```
//!
//! In a mixture-of-experts model the MLP is the shared experts' (if any) plus a router GEMM and
//! the routed experts, priced through [`ExpertRouting`]: each expert launched is one gate+up
//! and one down GEMM over the rows routed to it, reading its weights once. Under expert
//! parallelism the MLP's all-reduce becomes an all-to-all dispatch and an all-to-all combine.
//!
//! Everything that does not depend on the batch is folded into per-op constants by
//! [`Roofline::new`], so [`CostModel::predict`] is one pass over the batch's sequences (to sum
//! the attention work) plus a fixed handful of floating-point operations: no allocation and no
//! loop over layers.
//!
//! Conventions: all shapes are per GPU under tensor parallelism degree `t` (Megatron split:
//! QKV and gate+up column-parallel, O and down row-parallel, LM head vocab-parallel). Activations
//! are 16-bit, or 32-bit in an f32 model (see [`activation_bytes`]). Times are computed in seconds as `f64` and converted to integer nanoseconds once
//! per [`StepCost`] component, so `total_ns` is exactly the sum of the parts.

use super::dsa::DsaIndexer;
use super::hybrid::{AttentionRates, HybridAttention};
use super::memo::{ByDecodeBatch, ByRows};
use super::mla::{AttentionCounts, MlaAttention};
use super::moe::ExpertRouting;
use super::sampling::SamplingCost;
use super::quant::{WeightPart, gemm_rate};
use super::{overlap_cpu, CostModel, StepCost, to_ns};
use crate::rounding::count_to_f64;
use crate::scenario::{CostParams, GpuSpec, ModelSpec};
use crate::scenario::model::Dtype;
use crate::sched::batch::{Batch, SeqWork};

/// Bytes per activation element for weights of `dtype`: engines run activations in bf16/fp16,
/// even with fp8 weights; an f32 model (servesim's CPU engine) computes in f32 throughout.
fn activation_bytes(dtype: Dtype) -> f64 {
    dtype.bytes().max(2) as f64
}
/// FLOPs per multiply-accumulate.
const FLOPS_PER_MAC: f64 = 2.0;
/// Attention does two matmuls per (query, key) pair and head: QKᵀ and P·V.
const ATTENTION_MATMULS: f64 = 2.0;
/// K and V: the two tensors the KV cache stores per token.
const KV_TENSORS: f64 = 2.0;
/// Attention reads Q and writes O, one head-width vector each per query token and head.
const ATTENTION_QO_TENSORS: f64 = 2.0;
/// vLLM fuses the residual add into the RMSNorm: it reads x and the residual and writes the
/// normalized output and the updated residual, four hidden-size vectors per token.
const FUSED_ADD_NORM_VECTORS: f64 = 4.0;
/// RMSNorms per layer: before attention and before the MLP.
const NORMS_PER_LAYER: f64 = 2.0;
/// Rotary embedding rewrites Q and K in place: one read and one write per element.
const ROTARY_PASSES: f64 = 2.0;
/// SiLU-and-mul reads gate and up (2 × ffn/t per token) and writes one ffn/t vector.
const SILU_MUL_VECTORS: f64 = 3.0;
/// Gated MLP: gate and up projections are fused into one GEMM of twice the width.
const GATE_UP_PROJECTIONS: f64 = 2.0;
/// Megatron-style TP needs one all-reduce after the attention output projection and one after
/// the MLP down projection.
const ALL_REDUCES_PER_LAYER: f64 = 2.0;
/// Expert parallelism: an all-to-all sends tokens to their experts, another brings them back.
pub(crate) const ALL_TO_ALLS_PER_LAYER: f64 = 2.0;

/// Expert parallelism's all-to-all buffer per token of a step, bytes: what each GPU sends in one
/// dispatch (or combine), sized as nccl-tests sizes an all-to-all
/// ([`AllToAllShape`](crate::calibrate::backend::AllToAllShape)). Each of `t` GPUs dispatches its
/// `1/t` share of the step's tokens, each token's `hidden × act_bytes` state to its `k` experts;
/// `(t−1)/t` of the buffer leaves the GPU (the rest is for the experts it holds itself).
pub(crate) fn alltoall_send_bytes_per_token(moe: &crate::scenario::model::MoeSpec, hidden: f64, act_bytes: f64, t: f64) -> f64 {
    moe.experts_per_token as f64 * hidden * act_bytes / t
}

const S_PER_US: f64 = 1e-6;

/// One GEMM `[m × k] · [k × n]` with a batch-dependent `m`, folded into per-row and fixed times.
///
/// Its time for `m` rows is `max(m × flop_s_per_row, weight_s + m × activation_s_per_row)`.
#[derive(Clone, Copy, Debug, PartialEq)]
struct GemmOp {
    /// Compute time per row of `m` (`2·k·n` FLOPs at the effective peak), seconds.
    flop_s_per_row: f64,
    /// Time to read the weight matrix once at the effective bandwidth, seconds.
    weight_s: f64,
    /// Time to read one input row (`k`) and write one output row (`n`) of activations, seconds.
    activation_s_per_row: f64,
}

impl GemmOp {
    /// `k`, `n`: inner and output dimension per GPU. `flops_per_s` and `bytes_per_s` are
    /// effective (already scaled by efficiency).
    fn new(k: f64, n: f64, weight_bytes_per_element: f64, activation_bytes: f64, flops_per_s: f64, bytes_per_s: f64) -> GemmOp {
        if k * n == 0.0 {
            // A projection the model does not have (a mixture of experts without shared ones).
            return GemmOp { flop_s_per_row: 0.0, weight_s: 0.0, activation_s_per_row: 0.0 };
        }
        GemmOp {
            flop_s_per_row: FLOPS_PER_MAC * k * n / flops_per_s,
            weight_s: k * n * weight_bytes_per_element / bytes_per_s,
            activation_s_per_row: (k + n) * activation_bytes / bytes_per_s,
        }
    }

    /// Time for `rows` rows, seconds. Zero rows means the GEMM is not launched at all.
    #[inline]
    fn time_s(&self, rows: f64) -> f64 {
        if rows <= 0.0 {
            return 0.0;
        }
        let compute_s = rows * self.flop_s_per_row;
        let memory_s = self.weight_s + rows * self.activation_s_per_row;
        larger(compute_s, memory_s)
    }
}

/// Roofline step-cost model for one replica (one model instance spread over `tensor_parallel`
/// GPUs). Construct with [`Roofline::new`]; price steps with [`CostModel::predict`].
#[derive(Clone, Debug, PartialEq)]
pub struct Roofline {
    /// Transformer layers; every per-layer time is multiplied by this.
    num_layers: f64,
    /// Tensor-parallel degree `t` (≥ 1).
    tensor_parallel: u32,
    /// Query heads per GPU: `ceil(num_heads / t)`.
    heads_per_gpu: f64,
    /// KV heads per GPU: `max(num_kv_heads / t, 1)`; vLLM replicates KV heads when there are
    /// fewer of them than GPUs, so each GPU still holds (and reads) at least one.
    kv_heads_per_gpu: f64,
    /// Per-layer GEMMs, per GPU: QKV, attention output, MLP gate+up, MLP down.
    layer_gemms: [GemmOp; 4],
    /// LM head `[S × hidden] · [hidden × vocab/t]`.
    lm_head: GemmOp,
    /// The routed experts of a mixture-of-experts model.
    moe: Option<MoeGemms>,
    /// Multi-head latent attention, where the model has it: `layer_gemms`' QKV is then empty
    /// and its output projection MLA's.
    mla: Option<MlaLayer>,
    /// Sliding, chunked and linear layers beside the full ones, where the model has them.
    hybrid: Option<HybridAttention>,
    /// Linear-attention layers' projections (`in_proj_qkvz`, `in_proj_ba`, `out_proj`) and their
    /// share of the layers, which run them instead of the QKV and output GEMMs.
    linear_gemms: Option<(f64, [GemmOp; 3])>,
    /// The leading dense layers of a mixture of experts (DeepSeek's `first_k_dense_replace`).
    leading_dense: Option<LeadingDense>,
    /// Attention compute time per (query token, key) pair per layer, seconds.
    attention_s_per_key: f64,
    /// The same for prefill tokens attending to keys already cached (chunked prefill's prefix
    /// kernel), seconds.
    prefix_attention_s_per_key: f64,
    /// Attention time per KV-cache token read (K and V) per layer, seconds.
    attention_s_per_kv_token: f64,
    /// Attention time per query token to read Q and write O per layer, seconds.
    attention_s_per_query: f64,
    /// Elementwise (norms, rotary, SiLU·mul) time per computed token per layer, seconds.
    elementwise_s_per_token_per_layer: f64,
    /// Final norm time per computed token (once per step, not per layer), seconds.
    final_norm_s_per_token: f64,
    /// All-reduce time per token per layer (both all-reduces, bandwidth part), seconds; 0 at TP 1.
    allreduce_s_per_token_per_layer: f64,
    /// Fixed latency of the all-reduces per layer, seconds; 0 at TP 1.
    allreduce_latency_s_per_layer: f64,
    /// All-reduces per layer at TP > 1: 2, or 1 where expert parallelism replaces the MLP's.
    allreduces_per_layer: f64,
    /// Expert parallelism's all-to-all dispatch and combine per token per layer (bandwidth
    /// part), seconds; 0 otherwise.
    alltoall_s_per_token_per_layer: f64,
    /// Their fixed latency per layer, seconds.
    alltoall_latency_s_per_layer: f64,
    /// Bytes each GPU sends in one of those all-to-alls per token of the step (see
    /// [`alltoall_send_bytes_per_token`]); 0 without expert parallelism.
    alltoall_send_bytes_per_token: f64,
    /// Logit gather time per sampled token (bandwidth part), seconds; 0 at TP 1.
    logit_gather_s_per_sampled: f64,
    /// Fixed latency of the logit gather, seconds; 0 at TP 1.
    logit_gather_latency_s: f64,
    /// CPU overhead of a step launched kernel by kernel, seconds.
    step_overhead_eager_s: f64,
    /// CPU overhead of a step replayed from a captured graph, seconds.
    step_overhead_graph_s: f64,
    /// Extra CPU time of a step with prefill tokens, seconds.
    prefill_step_overhead_s: f64,
    /// Extra CPU time per sequence with prefill tokens in a step, seconds.
    prefill_seq_overhead_s: f64,
    /// CPU overhead per sequence in a step, seconds.
    seq_overhead_s: f64,
    /// Share of the step's CPU overhead hidden behind its GPU work (`CostParams::cpu_overlap`).
    cpu_overlap: f64,
    /// Weight bytes one GPU streams in a step that samples: layer GEMM weights + LM head shard.
    weight_bytes_read_per_step: u64,
    /// Logits each sampled sequence's sampler reads (the whole vocabulary).
    vocab_size: f64,
    /// Per sampled row and logit; zero unless [`Roofline::with_sampling`] set it.
    sampling: SamplingCost,
    /// Decode-only steps' prices but attention (`[gemm, elementwise, communication, overhead]`
    /// ns), by batch size.
    decode_parts: ByDecodeBatch<[u64; 4]>,
    /// One layer's GEMM time (the MoE's included), seconds, by GEMM rows: a mixed step's token
    /// count varies, but over a run it takes a few thousand values (issue 14).
    layer_gemm_s_by_rows: ByRows,
}

/// A mixture-of-experts layer's GEMMs on one GPU: the router, and one expert's gate+up and
/// down as this GPU holds it (a `1/t` slice, or whole under expert parallelism).
#[derive(Clone, Debug, PartialEq)]
struct MoeGemms {
    routing: ExpertRouting,
    router: GemmOp,
    gate_up: GemmOp,
    down: GemmOp,
}

/// MLA's projections on one GPU beside its output projection, and its attention (see
/// [`super::mla`]), with the rates that price that attention's work.
#[derive(Clone, Debug, PartialEq)]
struct MlaLayer {
    /// The replicated down-projection (q_a and kv_a fused) and the query up-projection: one
    /// row per token.
    down: GemmOp,
    q_up: GemmOp,
    /// kv_b: one row per decode token (absorbed into queries and outputs) and per key prefill
    /// decompresses.
    kv_up: GemmOp,
    /// Whether kv_b's decode rows (the absorbed multiplies) are priced by another source, so
    /// that only prefill's decompression is this model's.
    absorbed_elsewhere: bool,
    /// DeepSeek sparse attention's indexer, and its replicated projections (wq_b; wk fused
    /// with weights_proj), where the model has one.
    indexer: Option<(DsaIndexer, [GemmOp; 2])>,
    attention: MlaAttention,
    attention_s_per_flop: f64,
    prefix_attention_s_per_flop: f64,
    s_per_byte: f64,
}

/// Leading dense layers' MLP on one GPU, and their share of the layers: the rest run the
/// shared and routed experts.
#[derive(Clone, Debug, PartialEq)]
struct LeadingDense {
    share: f64,
    gate_up: GemmOp,
    down: GemmOp,
}

impl MoeGemms {
    /// One layer's router and routed experts for `rows` token rows, seconds.
    fn time_s(&self, rows: f64) -> f64 {
        self.router.time_s(rows) + self.experts_s(rows)
    }

    /// One layer's routed experts alone for `rows` token rows, seconds.
    fn experts_s(&self, rows: f64) -> f64 {
        self.routing.experts_s(rows, |launched, r| launched * (self.gate_up.time_s(r) + self.down.time_s(r)))
    }
}

impl Roofline {
    /// The layers' tensor-parallel all-reduces of a step of `tokens` token rows, seconds (ring
    /// formula; 0 on one GPU), with expert parallelism's all-to-alls.
    pub(crate) fn allreduce_s(&self, tokens: f64) -> f64 {
        if tokens > 0.0 { self.layer_allreduces_s(tokens) + self.alltoall_s(tokens) } else { 0.0 }
    }

    /// The layers' tensor-parallel all-reduces alone (ring formula), seconds, for `tokens` > 0.
    pub(crate) fn layer_allreduces_s(&self, tokens: f64) -> f64 {
        self.num_layers * (tokens * self.allreduce_s_per_token_per_layer + self.allreduce_latency_s_per_layer)
    }

    /// Bytes each GPU sends in one of expert parallelism's all-to-alls for a step of `tokens`
    /// token rows, as nccl-tests sizes an all-to-all; 0 without expert parallelism.
    pub(crate) fn alltoall_send_bytes(&self, tokens: f64) -> f64 {
        tokens * self.alltoall_send_bytes_per_token
    }

    /// Whether the model runs expert parallelism's all-to-alls (EP on more than one GPU).
    pub(crate) fn has_alltoalls(&self) -> bool {
        self.alltoall_send_bytes_per_token > 0.0
    }

    /// Expert parallelism's all-to-all dispatch and combine over the layers, seconds (0
    /// without it).
    pub(crate) fn alltoall_s(&self, tokens: f64) -> f64 {
        if tokens > 0.0 && self.alltoall_latency_s_per_layer > 0.0 {
            self.num_layers * (tokens * self.alltoall_s_per_token_per_layer + self.alltoall_latency_s_per_layer)
        } else {
            0.0
        }
    }

    /// All-reduces each layer runs at TP > 1 (2; 1 where expert parallelism replaces the MLP's).
    pub(crate) fn allreduces_per_layer(&self) -> f64 {
        self.allreduces_per_layer
    }

    /// Gathering the vocab-parallel logits of `sampled` sequences, seconds (0 on one GPU).
    pub(crate) fn logit_gather_s(&self, sampled: f64) -> f64 {
        if sampled > 0.0 { sampled * self.logit_gather_s_per_sampled + self.logit_gather_latency_s } else { 0.0 }
    }

    /// Precomputes every batch-independent quantity of `model` on `tensor_parallel` GPUs of kind
    /// `gpu` with efficiencies and overheads from `params`.
    ///
    /// Panics if `tensor_parallel` is 0, or if a peak, bandwidth or efficiency that the model
    /// divides by is not positive and finite: scenario validation guarantees both, and a
    /// roofline built on zeros would silently price every step at `u64::MAX`.
    pub fn new(model: &ModelSpec, gpu: &GpuSpec, tensor_parallel: u32, params: &CostParams) -> Roofline {
        assert!(tensor_parallel >= 1, "tensor_parallel must be at least 1");
        let t = tensor_parallel as f64;
        let positive = |name: &str, value: f64| {
            assert!(value.is_finite() && value > 0.0, "roofline: {name} must be positive and finite, got {value}");
            value
        };

        // Per-GPU shard sizes as vLLM shards them (see `ModelSpec::shard`).
        let shard = model.shard(tensor_parallel);
        let hidden_elems = model.hidden_size as u64;
        let head_dim = model.head_dim as f64;
        let ffn_per_gpu = shard.ffn as f64;
        let vocab_per_gpu = shard.vocab_rows as f64;
        let vocab_padded = shard.vocab_padded;
        let heads_per_gpu = shard.heads as f64;
        let kv_heads_per_gpu = shard.kv_heads as f64;

        let hidden = hidden_elems as f64;

        let act_bytes = activation_bytes(model.weight_dtype);
        // The LM head stays 16-bit even in fp8 checkpoints and under vLLM's online fp8
        // quantization (only linear layers are quantized; the vocab-parallel head is an
        // embedding), so it reads activation-width weights at the 16-bit peak.
        let lm_head_weight_bytes = act_bytes;
        let kv_bytes = model.kv_dtype.bytes() as f64;
        let peak_16bit = positive("gpu peak_flops_16bit", gpu.peak_flops_16bit);
        let gemm_eff = positive("gemm_efficiency", params.gemm_efficiency);
        let attention_eff = positive("attention_efficiency", params.attention_efficiency);
        let lm_head_flops_per_s = peak_16bit * gemm_eff;
        let attention_flops_per_s = peak_16bit * attention_eff;
        let bytes_per_s = positive("gpu memory_bandwidth_bytes_per_s", gpu.memory_bandwidth_bytes_per_s)
            * positive("memory_bandwidth_efficiency", params.memory_bandwidth_efficiency);

        // An output gate (Qwen3-Next) comes out of the query projection beside the queries.
        let gate_heads = if model.attention.output_gate { heads_per_gpu } else { 0.0 };
        let qkv_width = (heads_per_gpu + gate_heads + KV_TENSORS * kv_heads_per_gpu) * head_dim;
        let attn_out_width = heads_per_gpu * head_dim;
        // Each part's weights as stored (quantized or not) and the peak they multiply at: weight-only
        // schemes read fewer bytes but multiply at the 16-bit peak or slower (`quant`).
        let gemm_of = |part| {
            let (weight_bytes, peak) = gemm_rate(model, gpu, part);
            move |k: f64, n: f64| GemmOp::new(k, n, weight_bytes, act_bytes, positive("GEMM peak", peak) * gemm_eff, bytes_per_s)
        };
        let (gemm, mlp_gemm, expert_gemm) = (gemm_of(WeightPart::Attention), gemm_of(WeightPart::DenseMlp), gemm_of(WeightPart::Experts));
        let mla_projections = model.mla.map(|mla| mla.projections(hidden_elems, shard.heads).map(|(k, n)| gemm(k as f64, n as f64)));
        let (qkv, out) = match &mla_projections {
            Some([.., out]) => (gemm(0.0, 0.0), out.clone()),
            None => (gemm(hidden, qkv_width), gemm(attn_out_width, hidden)),
        };
        let layer_gemms = [qkv, out, mlp_gemm(hidden, GATE_UP_PROJECTIONS * ffn_per_gpu), mlp_gemm(ffn_per_gpu, hidden)];
        // The indexer's fp8 scores run at the FP8 peak where the GPU has one; vLLM keeps its
        // fused wk and weights_proj unquantized, so that GEMM runs at the 16-bit rate.
        let indexer = model.mla.zip(model.dsa).map(|(spec, dsa)| {
            let fp8_peak = gpu.peak_flops_fp8.unwrap_or(peak_16bit);
            let [(q_k, q_n), (k_k, k_n)] = dsa.projections(hidden_elems, &spec);
            let wk = GemmOp::new(k_k as f64, k_n as f64, act_bytes, act_bytes, lm_head_flops_per_s, bytes_per_s);
            (DsaIndexer::new(&dsa, fp8_peak * attention_eff, bytes_per_s), [gemm(q_k as f64, q_n as f64), wk])
        });
        let mla = model.mla.zip(mla_projections).map(|(spec, [down, q_up, kv_up, _])| MlaLayer {
            down,
            q_up,
            kv_up,
            absorbed_elsewhere: false,
            indexer,
            attention: MlaAttention::new(&spec, heads_per_gpu, model.kv_dtype.bytes() as f64, act_bytes),
            attention_s_per_flop: 1.0 / (peak_16bit * attention_eff),
            prefix_attention_s_per_flop: 1.0 / (peak_16bit * params.prefix_attention_efficiency),
            s_per_byte: 1.0 / bytes_per_s,
        });
        let leading_dense = model.moe.filter(|_| model.leading_dense_layers() > 0).map(|moe| {
            let ffn = (moe.dense_ffn_size as f64 / t).ceil();
            LeadingDense {
                share: model.leading_dense_layers() as f64 / model.num_layers as f64,
                gate_up: mlp_gemm(hidden, GATE_UP_PROJECTIONS * ffn),
                down: mlp_gemm(ffn, hidden),
            }
        });
        let lm_head = GemmOp::new(hidden, vocab_per_gpu, lm_head_weight_bytes, act_bytes, lm_head_flops_per_s, bytes_per_s);
        // The router stays 16-bit, as the LM head does (vLLM's gate is an unquantized
        // replicated linear layer).
        let moe = model.moe.map(|moe| {
            let expert_ffn = moe.expert_ffn_per_gpu(tensor_parallel);
            MoeGemms {
                routing: ExpertRouting::new(&moe, tensor_parallel),
                router: GemmOp::new(hidden, moe.num_experts as f64, act_bytes, act_bytes, lm_head_flops_per_s, bytes_per_s),
                gate_up: expert_gemm(hidden, GATE_UP_PROJECTIONS * expert_ffn),
                down: expert_gemm(expert_ffn, hidden),
            }
        });

        let weight_bytes_read_per_step = u64::try_from(model.linear_weight_bytes_per_gpu(tensor_parallel)).unwrap_or(u64::MAX)
            + hidden_elems * shard.vocab_rows * lm_head_weight_bytes as u64;

        // Attention: FLOPs per (query, key) pair, bytes per cached token and per query token.
        let flops_per_key = ATTENTION_MATMULS * FLOPS_PER_MAC * heads_per_gpu * head_dim;
        let attention_s_per_key = flops_per_key / attention_flops_per_s;
        let prefix_attention_s_per_key = flops_per_key
            / (peak_16bit * positive("prefix_attention_efficiency", params.prefix_attention_efficiency));
        let attention_s_per_kv_token = KV_TENSORS * kv_heads_per_gpu * head_dim * kv_bytes / bytes_per_s;
        let attention_s_per_query = ATTENTION_QO_TENSORS * heads_per_gpu * head_dim * act_bytes / bytes_per_s;
        let rates = AttentionRates { s_per_key: attention_s_per_key, s_per_kv_token: attention_s_per_kv_token, s_per_query: attention_s_per_query };
        let hybrid =
            HybridAttention::new(&model.attention, model.num_layers, tensor_parallel, rates, attention_flops_per_s, bytes_per_s, act_bytes as u64);
        let linear_gemms = model.attention.linear.map(|l| {
            let ops = l.projections(hidden_elems, tensor_parallel as u64).map(|(k, n)| gemm(k as f64, n as f64));
            (l.layers as f64 / model.num_layers as f64, ops)
        });

        // Elementwise work is memory-bound; norm weights (hidden elements, read once) are
        // negligible next to activations and left out.
        let norm_bytes_per_token = FUSED_ADD_NORM_VECTORS * hidden * act_bytes;
        // MLA rotates only each query head's rope part and the one shared rotary key.
        let rotated_width = match &model.mla {
            Some(mla) => (heads_per_gpu + 1.0) * mla.qk_rope_head_dim as f64,
            None => (heads_per_gpu + kv_heads_per_gpu) * head_dim,
        };
        let rotary_bytes_per_token = ROTARY_PASSES * rotated_width * act_bytes;
        // A routed token's experts run SiLU·mul on their intermediates too (on whichever GPUs
        // hold them: the same bytes per GPU when routing is balanced).
        let routed_ffn_per_gpu = model.moe.map_or(0.0, |moe| {
            moe.experts_per_token as f64 * moe.expert_ffn_per_gpu(tensor_parallel)
                / if moe.expert_parallel { t } else { 1.0 }
        });
        let silu_bytes_per_token = SILU_MUL_VECTORS * (ffn_per_gpu + routed_ffn_per_gpu) * act_bytes;
        let elementwise_s_per_token_per_layer =
            (NORMS_PER_LAYER * norm_bytes_per_token + rotary_bytes_per_token + silu_bytes_per_token) / bytes_per_s;
        let final_norm_s_per_token = norm_bytes_per_token / bytes_per_s;

        // Tensor-parallel collectives. Ring all-reduce of B bytes moves 2(t−1)/t × B per GPU.
        // The logits are gathered once per step when anything is sampled (vLLM gathers the
        // vocab-parallel logits to build the full distribution): modelled as an all-gather that
        // moves (t−1)/t × S × vocab × 2 bytes per GPU, plus one collective latency.
        // Expert parallelism sends each token's hidden state to its k experts' GPUs and back:
        // each GPU dispatches its 1/t share of the tokens, (t−1)/t of them leaving the GPU.
        let expert_parallel = model.moe.filter(|moe| moe.expert_parallel && tensor_parallel > 1);
        let allreduces_per_layer = if expert_parallel.is_some() { ALL_REDUCES_PER_LAYER - 1.0 } else { ALL_REDUCES_PER_LAYER };
        let alltoall_send_bytes_per_token =
            expert_parallel.map_or(0.0, |moe| alltoall_send_bytes_per_token(&moe, hidden, act_bytes, t));
        let (alltoall_s_per_token_per_layer, alltoall_latency_s_per_layer) = match expert_parallel {
            Some(_) => {
                let link_bytes_per_s = positive("gpu interconnect_bandwidth_bytes_per_s", gpu.all_to_all_bandwidth_bytes_per_s(tensor_parallel))
                    * positive("collective_bandwidth_efficiency", params.collective_bandwidth_efficiency);
                let bytes_per_token = alltoall_send_bytes_per_token * (t - 1.0) / t;
                // Only the expert layers dispatch: the leading dense ones have no experts.
            let expert_share = 1.0 - leading_dense.as_ref().map_or(0.0, |d| d.share);
            (
                expert_share * ALL_TO_ALLS_PER_LAYER * bytes_per_token / link_bytes_per_s,
                expert_share * ALL_TO_ALLS_PER_LAYER * params.collective_latency_us * S_PER_US,
            )
            }
            None => (0.0, 0.0),
        };
        let (allreduce_s_per_token_per_layer, allreduce_latency_s_per_layer, logit_gather_s_per_sampled, logit_gather_latency_s) =
            if tensor_parallel > 1 {
                let link_bytes_per_s = positive("gpu interconnect_bandwidth_bytes_per_s", gpu.ring_bandwidth_bytes_per_s(tensor_parallel))
                    * positive("collective_bandwidth_efficiency", params.collective_bandwidth_efficiency);
                let latency_s = params.collective_latency_us * S_PER_US;
                let ring_factor = 2.0 * (t - 1.0) / t;
                let gather_factor = (t - 1.0) / t;
                (
                    allreduces_per_layer * ring_factor * hidden * act_bytes / link_bytes_per_s,
                    allreduces_per_layer * latency_s,
                    gather_factor * vocab_padded as f64 * act_bytes / link_bytes_per_s,
                    latency_s,
                )
            } else {
                (0.0, 0.0, 0.0, 0.0)
            };

        Roofline {
            num_layers: model.num_layers as f64,
            tensor_parallel,
            heads_per_gpu,
            kv_heads_per_gpu,
            layer_gemms,
            lm_head,
            moe,
            mla,
            hybrid,
            linear_gemms,
            leading_dense,
            attention_s_per_key,
            prefix_attention_s_per_key,
            attention_s_per_kv_token,
            attention_s_per_query,
            elementwise_s_per_token_per_layer,
            final_norm_s_per_token,
            allreduce_s_per_token_per_layer,
            allreduce_latency_s_per_layer,
            allreduces_per_layer,
            alltoall_s_per_token_per_layer,
            alltoall_latency_s_per_layer,
            alltoall_send_bytes_per_token,
            logit_gather_s_per_sampled,
            logit_gather_latency_s,
            step_overhead_eager_s: params.step_overhead_eager_us * S_PER_US,
            step_overhead_graph_s: params.step_overhead_graph_us * S_PER_US,
            prefill_step_overhead_s: params.prefill_step_overhead_us * S_PER_US,
            prefill_seq_overhead_s: params.prefill_seq_overhead_us * S_PER_US,
            seq_overhead_s: params.seq_overhead_us * S_PER_US,
            cpu_overlap: params.cpu_overlap,
            weight_bytes_read_per_step,
            vocab_size: model.vocab_size as f64,
            sampling: SamplingCost::default(),
            decode_parts: ByDecodeBatch::new(),
            layer_gemm_s_by_rows: ByRows::new(),
        }
    }

    /// Prices each step's sampling at `sampling` (elementwise time; see [`SamplingCost`]).
    pub fn with_sampling(mut self, sampling: SamplingCost) -> Roofline {
        self.sampling = sampling;
        // Prices remembered under the old sampling cost are stale.
        self.decode_parts = ByDecodeBatch::new();
        self
    }

    /// Cost of one step that prefills a lone prompt of `prompt_tokens` tokens from an empty
    /// cache and samples its first token (what a lone request's TTFT is, less queueing).
    pub fn prefill_cost(&self, prompt_tokens: u32) -> StepCost {
        let mut batch = Batch::default();
        batch.push(SeqWork { seq: 0, new_tokens: prompt_tokens, context_tokens: 0, samples_token: true, draft_tokens: 0 });
        self.predict(&batch)
    }

    /// Cost of one decode step of `batch_size` sequences, each with `context_tokens` tokens
    /// already cached (a lone request's TPOT at that context, when `batch_size` is 1).
    pub fn decode_cost(&self, batch_size: u32, context_tokens: u32) -> StepCost {
        let mut batch = Batch::default();
        for seq in 0..batch_size {
            batch.push(SeqWork { seq, new_tokens: 1, context_tokens, samples_token: true, draft_tokens: 0 });
        }
        self.predict(&batch)
    }

    /// Weight bytes one GPU streams from memory in a step that samples a token: every layer's
    /// GEMM weights plus the LM head shard. Not the resident weight size: the embedding table
    /// (a step gathers only `T` of its rows) and the norm weights are left out.
    pub fn weight_bytes_read_per_step(&self) -> u64 {
        self.weight_bytes_read_per_step
    }

    /// KV heads each GPU holds: `max(num_kv_heads / t, 1)` (replicated when fewer than GPUs).
    pub fn kv_heads_per_gpu(&self) -> u32 {
        self.kv_heads_per_gpu as u32
    }

    /// Query heads each GPU computes: `ceil(num_heads / t)`.
    pub fn heads_per_gpu(&self) -> u32 {
        self.heads_per_gpu as u32
    }

    /// Tensor-parallel degree this model was built for.
    pub fn tensor_parallel(&self) -> u32 {
        self.tensor_parallel
    }
}

impl Roofline {
    /// The step's CPU time (before any of it is hidden behind the GPU), seconds: the step's
    /// overhead, graph-replayed or eager, the prefill sequences' extra and every sequence's own.
    #[inline(always)]
    fn cpu_overhead_s(&self, batch: &Batch, prefill_seqs: u64) -> f64 {
        // A multi-step window's later steps only advance the batch on the GPU: the scheduling
        // and input preparation these overheads stand for ran once, in its first step.
        if batch.window_step > 0 {
            return 0.0;
        }
        let step_overhead_s = if batch.graph_size.is_some() { self.step_overhead_graph_s } else { self.step_overhead_eager_s };
        let prefill_s = if prefill_seqs > 0 {
            self.prefill_step_overhead_s + self.prefill_seq_overhead_s * count_to_f64(prefill_seqs)
        } else {
            0.0
        };
        step_overhead_s + prefill_s + self.seq_overhead_s * batch.num_seqs() as f64
    }

    /// [`Self::cpu_overhead_s`] of `batch` in nanoseconds, counting its prefill sequences.
    pub(crate) fn cpu_overhead_ns(&self, batch: &Batch) -> u64 {
        let prefill_seqs = batch.seqs.iter().filter(|w| !w.is_decode()).count() as u64;
        to_ns(self.cpu_overhead_s(batch, prefill_seqs))
    }

    /// Share of a step's CPU overhead hidden behind its GPU work.
    pub(crate) fn cpu_overlap(&self) -> f64 {
        self.cpu_overlap
    }

    /// The step's price with its whole CPU overhead in series with the GPU work: what
    /// [`CostModel::predict`] gives before [`overlap_cpu`] hides part of it.
    pub(crate) fn predict_serial(&self, batch: &Batch) -> StepCost {
        if batch.is_empty() {
            return StepCost::default();
        }

        // One pass over sequences: token counts and the attention work.
        // keys: Σ over new tokens of the keys each attends to; causal, so new token i (0-based)
        // of a sequence with c cached tokens sees c + i + 1 keys: Σ = q·c + q(q+1)/2.
        // T is summed here rather than read from `batch.tokens()` so the two can never disagree.
        let mut tokens: u64 = 0;
        let mut sampled: u64 = 0;
        let mut keys: u64 = 0;
        // Keys that prefill chunks read from the cache: priced at the prefix kernel's efficiency.
        let mut prefix_keys: u64 = 0;
        let mut prefill_seqs: u64 = 0;
        let mut kv_tokens_read: u64 = 0;
        // The decodes' share of the above, which MLA prices apart from prefill.
        let (mut decode_keys, mut decode_kv_tokens, mut decode_tokens) = (0u64, 0u64, 0u64);
        for work in &batch.seqs {
            let q = work.new_tokens as u64;
            let c = work.context_tokens as u64;
            tokens += q;
            sampled += u64::from(work.sampled_rows());
            if work.is_decode() {
                // One token, or (verifying drafts) a few causal ones, on the cached context.
                let seq_keys = q * c + q * (q + 1) / 2;
                keys += seq_keys;
                decode_keys += seq_keys;
                decode_kv_tokens += c + q;
                decode_tokens += q;
            } else {
                prefill_seqs += 1;
                prefix_keys += q * c;
                keys += q * (q + 1) / 2;
            }
            kv_tokens_read += c + q;
        }
        // The cohort's decodes: each is q = 1 on its context c, as above.
        let cohort = &batch.cohort;
        let cohort_seqs = u64::from(cohort.seqs);
        tokens += cohort_seqs;
        sampled += cohort_seqs;
        keys += cohort.context_tokens + cohort_seqs;
        kv_tokens_read += cohort.context_tokens + cohort_seqs;
        decode_keys += cohort.context_tokens + cohort_seqs;
        decode_kv_tokens += cohort.context_tokens + cohort_seqs;
        decode_tokens += cohort_seqs;
        // Every sequence decodes one token, in a step that prepares its own inputs: everything
        // but attention depends on the batch's size and graph alone.
        let decode_only = prefill_seqs == 0 && batch.window_step == 0 && tokens == sampled && tokens == u64::from(batch.num_seqs());
        let tokens_count = tokens;
        let tokens = count_to_f64(tokens);
        let sampled = count_to_f64(sampled);

        // DeepSeek sparse attention's indexer, a kernel of its own before MLA's, per layer.
        let mut indexer_s = 0.0;
        let (attention_compute_s, attention_memory_s) = match &self.mla {
            None => (
                count_to_f64(keys) * self.attention_s_per_key + count_to_f64(prefix_keys) * self.prefix_attention_s_per_key,
                count_to_f64(kv_tokens_read) * self.attention_s_per_kv_token + tokens * self.attention_s_per_query,
            ),
            Some(MlaLayer { indexer: Some((indexer, _)), attention, attention_s_per_flop, s_per_byte, .. }) => {
                // Every query attends to its chosen keys in the absorbed form, after the indexer.
                let counts = indexer.counts(batch);
                let work = attention.work(&counts.mla);
                indexer_s = indexer.time_s(&counts);
                (work.flops * attention_s_per_flop, work.bytes * s_per_byte)
            }
            Some(mla) => {
                let work = mla.attention.work(&AttentionCounts {
                    decode_keys: count_to_f64(decode_keys),
                    decode_kv_tokens: count_to_f64(decode_kv_tokens),
                    decode_queries: count_to_f64(decode_tokens),
                    prefill_keys: count_to_f64(keys - decode_keys),
                    prefix_keys: count_to_f64(prefix_keys),
                    prefill_kv_tokens: count_to_f64(kv_tokens_read - decode_kv_tokens),
                    prefill_queries: tokens - count_to_f64(decode_tokens),
                });
                (
                    work.flops * mla.attention_s_per_flop + work.prefix_flops * mla.prefix_attention_s_per_flop,
                    work.bytes * mla.s_per_byte,
                )
            }
        };
        let attention_s = match &self.hybrid {
            _ if tokens <= 0.0 => 0.0,
            None => self.num_layers * (larger(attention_compute_s, attention_memory_s) + indexer_s),
            Some(hybrid) => hybrid.time_s(batch, larger(attention_compute_s, attention_memory_s)),
        };
        // kv_b's rows beyond one per token: the cached keys prefill decompresses (none under
        // sparse attention, whose prefill runs absorbed too).
        let sparse = self.mla.as_ref().is_some_and(|mla| mla.indexer.is_some());
        let prefill_prefix_tokens = if sparse { 0 } else { kv_tokens_read - decode_kv_tokens - (tokens_count - decode_tokens) };

        let parts_but_attention = || {
            // A graph replays kernels shaped for its padded size.
            let gemm_rows = batch.graph_size.map_or(tokens_count, u64::from);
            let layer_gemm_s = self.layer_gemm_s_by_rows.get_whole(gemm_rows, || self.layer_gemm_s(count_to_f64(gemm_rows)));
            let kv_up_s = self.mla.as_ref().map_or(0.0, |mla| {
                let rows = if mla.absorbed_elsewhere { tokens_count - decode_tokens } else { gemm_rows };
                self.num_layers * mla.kv_up.time_s(count_to_f64(rows + prefill_prefix_tokens))
            });
            let gemm_s = self.num_layers * layer_gemm_s + self.lm_head.time_s(sampled) + kv_up_s;
            let [elementwise_ns, communication_ns, overhead_ns] = self.predict_non_kernel(batch, tokens, sampled, prefill_seqs);
            [to_ns(gemm_s), elementwise_ns, communication_ns, overhead_ns]
        };
        let [gemm_ns, elementwise_ns, communication_ns, overhead_ns] =
            if decode_only { self.decode_parts.get(tokens_count, batch.graph_size, parts_but_attention) } else { parts_but_attention() };
        let attention_ns = to_ns(attention_s);
        StepCost {
            total_ns: gemm_ns + attention_ns + elementwise_ns + communication_ns + overhead_ns,
            gemm_ns,
            attention_ns,
            elementwise_ns,
            communication_ns,
            overhead_ns,
        }
    }
}

/// Parts of a step that another source prices (measured whole-module rows, [`super::family`]):
/// the roofline prices them at zero, so that the other source's times can be added in their
/// place. Set once, when the model is built; pricing is unchanged.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct PricedElsewhere {
    /// MLA's whole attention module: its projections (q_a and kv_a, q_b, kv_b, o_proj), the
    /// attention, and DeepSeek sparse attention's indexer with its projections.
    pub latent_attention: bool,
    /// MLA's attention kernel and, in decodes, the absorbed multiplies around it (kv_b's rows
    /// for decode tokens); its projections stay.
    pub latent_attention_kernel: bool,
    /// A mixture of experts' routed experts (the router stays).
    pub routed_experts: bool,
    /// Linear-attention layers' kernels (their projections stay).
    pub linear_attention_core: bool,
}

impl Roofline {
    /// This roofline with `parts` priced at zero (see [`PricedElsewhere`]).
    pub(crate) fn without(mut self, parts: PricedElsewhere) -> Roofline {
        let free = GemmOp { flop_s_per_row: 0.0, weight_s: 0.0, activation_s_per_row: 0.0 };
        if (parts.latent_attention || parts.latent_attention_kernel)
            && let Some(mla) = &mut self.mla
        {
            (mla.attention_s_per_flop, mla.prefix_attention_s_per_flop, mla.s_per_byte) = (0.0, 0.0, 0.0);
            if parts.latent_attention {
                (mla.down, mla.q_up, mla.kv_up) = (free, free, free);
                if let Some((indexer, projections)) = &mut mla.indexer {
                    *indexer = indexer.free();
                    *projections = [free, free];
                }
                // An MLA model's output projection is MLA's o_proj.
                self.layer_gemms[1] = free;
            } else {
                mla.absorbed_elsewhere = true;
            }
        }
        if parts.routed_experts
            && let Some(moe) = &mut self.moe
        {
            (moe.gate_up, moe.down) = (free, free);
        }
        if parts.linear_attention_core
            && let Some(hybrid) = &mut self.hybrid
        {
            hybrid.without_linear_core();
        }
        self
    }
}

impl Roofline {
    /// `[elementwise_ns, communication_ns, overhead_ns]`: what [`Roofline::predict_serial`]
    /// prices besides the GEMMs and attention, from the step's `tokens`, `sampled` rows and
    /// prefill sequences (whole numbers, as the caller counted them). The calibrated model calls
    /// it directly, since it prices GEMMs and attention itself: pricing the roofline's as well
    /// was about a tenth of a default-path run (issue 33).
    #[inline]
    pub(crate) fn predict_non_kernel(&self, batch: &Batch, tokens: f64, sampled: f64, prefill_seqs: u64) -> [u64; 3] {
        let elementwise_s = tokens
            * (self.num_layers * self.elementwise_s_per_token_per_layer + self.final_norm_s_per_token)
            + self.sampling.step_s(sampled, self.vocab_size);
        let communication_s = self.allreduce_s(tokens) + self.logit_gather_s(sampled);
        let overhead_s = self.cpu_overhead_s(batch, prefill_seqs);
        [to_ns(elementwise_s), to_ns(communication_s), to_ns(overhead_s)]
    }

    /// One layer's GEMMs (the MoE's included) for `rows` token rows, seconds: with leading
    /// dense layers, the mean over the layers.
    fn layer_gemm_s(&self, rows: f64) -> f64 {
        let [qkv, out, gate_up, down] = &self.layer_gemms;
        let experts_s = self.moe.as_ref().map_or(0.0, |moe| moe.time_s(rows));
        let mut layer_s = match (&self.leading_dense, &self.linear_gemms) {
            (None, None) => self.layer_gemms.iter().map(|op| op.time_s(rows)).sum::<f64>() + experts_s,
            (dense, linear) => {
                let mut attention_s = qkv.time_s(rows) + out.time_s(rows);
                if let Some((share, ops)) = linear {
                    attention_s = (1.0 - share) * attention_s + share * ops.iter().map(|op| op.time_s(rows)).sum::<f64>();
                }
                let expert_layer_s = gate_up.time_s(rows) + down.time_s(rows) + experts_s;
                let dense_s = dense.as_ref().map_or((0.0, 0.0), |d| (d.share, d.gate_up.time_s(rows) + d.down.time_s(rows)));
                attention_s + (1.0 - dense_s.0) * expert_layer_s + dense_s.0 * dense_s.1
            }
        };
        if let Some(mla) = &self.mla {
            layer_s += mla.down.time_s(rows) + mla.q_up.time_s(rows);
            if let Some((_, projections)) = &mla.indexer {
                layer_s += projections.iter().map(|op| op.time_s(rows)).sum::<f64>();
            }
        }
        layer_s
    }
}

impl CostModel for Roofline {
    fn predict(&self, batch: &Batch) -> StepCost {
        overlap_cpu(self.predict_serial(batch), self.cpu_overlap)
    }

    fn source(&self) -> &'static str {
        "roofline"
    }

    fn prices_each_sequence(&self) -> bool {
        // DeepSeek sparse attention caps each sequence's keys by its own context.
        self.hybrid.is_some() || self.mla.as_ref().is_some_and(|mla| mla.indexer.is_some())
    }

    fn routed_experts_s(&self, rows: f64) -> f64 {
        let Some(moe) = &self.moe else { return 0.0 };
        let dense_share = self.leading_dense.as_ref().map_or(0.0, |d| d.share);
        self.num_layers * (1.0 - dense_share) * moe.experts_s(rows)
    }
}

/// `a.max(b)` for the finite times a step is priced from (every parameter is validated finite
/// and non-negative): a compare, without `f64::max`'s handling of NaN, six instructions a call.
#[inline]
fn larger(a: f64, b: f64) -> f64 {
    if a >= b { a } else { b }
}

#[cfg(test)]
#[path = "tests_roofline.rs"]
pub(crate) mod tests;
