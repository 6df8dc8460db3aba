//! Transformer dimensions: presets, explicit dimensions, or a Hugging Face `config.json`.
//!
//! Every model here is a decoder-only transformer with grouped-query attention and a gated
//! (SwiGLU) MLP: per layer, a fused QKV projection, an output projection, gate + up + down MLP
//! projections and two RMSNorms; an embedding table, a final norm and an LM head (possibly tied to
//! the embedding table). In a mixture-of-experts model ([`MoeSpec`]) every layer's MLP is a
//! router and `num_experts` gated MLPs, of which each token runs `experts_per_token`, beside an
//! optional shared MLP that every token runs (`ffn_size`, 0 when there is none), after
//! `dense_layers` leading layers with a dense MLP of their own (DeepSeek's
//! `first_k_dense_replace`). With multi-head latent attention ([`MlaSpec`]) the attention's
//! projections and cache are MLA's instead of the fused QKV's, and with DeepSeek sparse attention
//! ([`DsaSpec`]) an indexer picks the keys MLA attends to.

mod dsa;
mod dtype;
mod hf_attention;
mod hf_config;
mod hf_error;
mod hf_keys;
mod kv_layout;
mod layers;
mod mla;
mod presets;
mod quant;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_dsa;
#[cfg(test)]
mod tests_hybrid;

pub use dsa::DsaSpec;
pub use dtype::{Dtype, default_kv_dtype};
pub use hf_error::HfConfigError;
pub use kv_layout::KvLayout;
pub use layers::{AttentionMix, LinearAttention};
pub use mla::MlaSpec;
pub use quant::{IntMethod, QuantScheme, QuantScope, SCENARIO_NAMES as QUANT_SCENARIO_NAMES, WeightQuant};

/// A decoder-only transformer with grouped-query attention and a gated (SwiGLU) MLP.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelSpec {
    pub name: String,
    pub num_layers: u32,
    pub hidden_size: u32,
    pub num_heads: u32,
    pub num_kv_heads: u32,
    pub head_dim: u32,
    /// Intermediate size of the dense MLP; in a mixture-of-experts model, of its shared experts
    /// together (0: none).
    pub ffn_size: u32,
    pub vocab_size: u32,
    pub tied_embeddings: bool,
    pub max_position_embeddings: u32,
    pub weight_dtype: Dtype,
    pub kv_dtype: Dtype,
    /// Routed experts, in a mixture-of-experts model.
    pub moe: Option<MoeSpec>,
    /// Multi-head latent attention's dimensions, where the model has it. `num_heads` are then
    /// its query heads, `head_dim` its query-key width (nope + rope) and `num_kv_heads` equal to
    /// `num_heads`: what an engine without MLA would compute.
    pub mla: Option<MlaSpec>,
    /// DeepSeek sparse attention's indexer, where MLA attends only to the keys it picks
    /// (DeepSeek-V3.2); always beside `mla`.
    pub dsa: Option<DsaSpec>,
    /// Weights stored in groups or blocks that share a scale (AWQ, GPTQ, MXFP4, NVFP4,
    /// block-scaled FP8), and the layers they cover; `None` stores every linear weight in
    /// `weight_dtype`.
    pub weight_quant: Option<WeightQuant>,
    /// Layers whose attention is not full attention (sliding, chunked, linear), where the model
    /// has them; the default is every layer full.
    pub attention: AttentionMix,
}

/// The routed experts of a mixture-of-experts model. Every layer has them (Mixtral, Qwen3-MoE)
/// but `dense_layers` leading ones (DeepSeek-V3: 3); models that interleave dense and sparse
/// layers are refused when read.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MoeSpec {
    /// Routed experts per layer.
    pub num_experts: u32,
    /// Experts each token is routed to (top-k).
    pub experts_per_token: u32,
    /// Intermediate size of one expert's gated MLP.
    pub expert_ffn_size: u32,
    /// How unevenly tokens spread over experts: expert i (from 0) draws a share ∝ (i + 1)^−skew,
    /// a Zipf law; 0 (the default) is balanced routing, what load-balancing losses train for.
    pub routing_skew: f64,
    /// How the deployment places the experts on a replica's GPUs (`engine.expert_parallel`):
    /// whole experts, `num_experts / tp` per GPU, with tokens sent to their experts' GPUs and
    /// back by all-to-all; or (false, vLLM's default) every expert split over all GPUs by its
    /// intermediate size, like a dense MLP.
    pub expert_parallel: bool,
    /// Leading layers whose MLP is dense (`first_k_dense_replace`), before the expert layers.
    pub dense_layers: u32,
    /// Those layers' MLP intermediate size (the config's `intermediate_size`).
    pub dense_ffn_size: u32,
}

impl MoeSpec {
    /// One expert's intermediate size on one GPU: a `1/t` slice, or whole under expert parallelism.
    pub fn expert_ffn_per_gpu(&self, tensor_parallel: u32) -> f64 {
        if self.expert_parallel {
            self.expert_ffn_size as f64
        } else {
            (self.expert_ffn_size as f64 / tensor_parallel.max(1) as f64).ceil()
        }
    }
}

/// vLLM pads the vocabulary of `VocabParallelEmbedding` / `ParallelLMHead` up to a multiple of
/// this (`DEFAULT_VOCAB_PADDING_SIZE`) before splitting it across tensor-parallel ranks.
const VOCAB_PADDING: u64 = 64;

fn div_ceil(a: u64, b: u64) -> u64 {
    a.div_ceil(b)
}

/// A size computed in u128, as a u64: `u64::MAX` (16 EiB, more than any GPU) where it does not
/// fit, so that a size check refuses it instead of seeing a wrapped, small number.
fn saturate(x: u128) -> u64 {
    u64::try_from(x).unwrap_or(u64::MAX)
}

/// What one GPU holds of a model at a tensor-parallel degree, as vLLM shards it (Megatron split:
/// QKV and gate/up column-parallel, output and down row-parallel, vocabulary-parallel embedding
/// and LM head). Sizes that do not divide are rounded up: the slowest rank sets the pace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shard {
    pub heads: u64,
    /// KV heads per GPU: replicated when `tp` exceeds them, so at least one.
    pub kv_heads: u64,
    pub ffn: u64,
    /// The vocabulary padded to vLLM's multiple of 64, before splitting.
    pub vocab_padded: u64,
    /// Rows of the embedding table and LM head per GPU.
    pub vocab_rows: u64,
    /// Elements of every layer's linear weights (QKV, output, gate, up, down; and in a
    /// mixture-of-experts model the router and this GPU's part of the experts) per GPU. With
    /// MLA, its projections and its two latent norms (a few thousand elements, replicated).
    pub linear_elements: u64,
}

impl ModelSpec {
    /// The per-GPU shard at tensor parallelism `tp`. Routed experts are split over the `tp`
    /// GPUs either way vLLM splits them: each expert's intermediate size by `tp` (tensor
    /// parallel), or whole experts, `num_experts / tp` per GPU (expert parallel); both hold the
    /// same elements when the sizes divide, and the larger is taken when they do not.
    pub fn shard(&self, tp: u32) -> Shard {
        let tp = tp.max(1) as u64;
        let h = self.hidden_size as u64;
        let heads = div_ceil(self.num_heads as u64, tp);
        let kv_heads = self.kv_heads_per_gpu(tp as u32) as u64;
        let ffn = div_ceil(self.ffn_size as u64, tp);
        let vocab_padded = div_ceil(self.vocab_size as u64, VOCAB_PADDING) * VOCAB_PADDING;
        let (h, tp128) = (h as u128, tp as u128);
        let dense_ffn = self.moe.map_or(0, |moe| moe.dense_ffn_size as u128).div_ceil(tp128);
        // In u128, saturated: absurd dimensions must read as "too large", not wrap around.
        let expert_layer_mlp = 3 * h * ffn as u128 // gate, up, down
            + self.moe.map_or(0, |moe| {
                let experts = moe.num_experts as u128;
                let f = moe.expert_ffn_size as u128;
                let tensor_parallel = experts * f.div_ceil(tp128);
                let expert_parallel = experts.div_ceil(tp128) * f;
                h * experts + 3 * h * tensor_parallel.max(expert_parallel)
            });
        Shard {
            heads,
            kv_heads,
            ffn,
            vocab_padded,
            vocab_rows: div_ceil(vocab_padded, tp),
            linear_elements: saturate(
                self.all_attention_elements(heads, kv_heads, tp)
                    + self.expert_layers() as u128 * expert_layer_mlp
                    + self.leading_dense_layers() as u128 * 3 * h * dense_ffn,
            ),
        }
    }

    /// Elements of one layer's attention projections with `heads` query heads and `kv_heads`
    /// KV heads (on one GPU, or all of them). With an output gate the query projection is twice
    /// as wide.
    fn attention_elements(&self, heads: u64, kv_heads: u64) -> u128 {
        let h = self.hidden_size as u128;
        let d = self.head_dim as u128;
        let q_width = if self.attention.output_gate { 2 } else { 1 } * heads as u128;
        match &self.mla {
            // The indexer is replicated: whole on every GPU whatever `heads` it holds.
            Some(mla) => {
                let hidden = self.hidden_size as u64;
                mla.weight_elements(hidden, heads) + self.dsa.map_or(0, |dsa| dsa.weight_elements(hidden, mla))
            }
            None => h * (q_width + 2 * kv_heads as u128) * d + heads as u128 * d * h, // QKV, output
        }
    }

    /// Elements of every layer's attention weights at tensor parallelism `tp` (1: all of them):
    /// the KV layers' projections and the linear-attention layers'.
    fn all_attention_elements(&self, heads: u64, kv_heads: u64, tp: u64) -> u128 {
        let kv_layers = self.attention.kv_layers(self.num_layers) as u128;
        let linear = self.attention.linear.map_or(0, |l| l.layers as u128 * l.weight_elements_per_gpu(self.hidden_size as u64, tp));
        kv_layers * self.attention_elements(heads, kv_heads) + linear
    }

    /// What of this model a kernel profile's GEMM and attention rows do not describe, if
    /// anything: a calibrated model would price it as the fused-QKV decoder whose every layer
    /// is alike, so it is priced by the roofline instead (and the calibration grid leaves it out).
    pub fn unprofiled_layers(&self) -> Option<&'static str> {
        self.unprofiled_layers_within(u32::MAX)
    }

    /// [`Self::unprofiled_layers`] for sequences of at most `max_len` tokens: a sliding-window
    /// or chunked layer whose window or chunk holds the whole sequence attends to every earlier
    /// token, as a full-attention layer does (Llama 4's 8,192-token chunks at a `max_model_len`
    /// of 8,192 or less), so the profile's attention rows describe it.
    pub fn unprofiled_layers_within(&self, max_len: u32) -> Option<&'static str> {
        let mix = &self.attention;
        let local_is_full =
            (mix.sliding_layers == 0 || mix.sliding_window >= max_len) && (mix.chunked_layers == 0 || mix.attention_chunk >= max_len);
        if mix.linear.is_some() || mix.output_gate || !local_is_full {
            return Some("sliding-window, chunked or linear attention layers");
        }
        match (self.mla.is_some(), self.leading_dense_layers() > 0) {
            (true, _) if self.dsa.is_some() => Some("DeepSeek sparse attention"),
            (true, _) => Some("multi-head latent attention"),
            (false, true) => Some("dense layers among expert layers"),
            (false, false) => None,
        }
    }

    /// Layers whose MLP is dense before the expert layers (`first_k_dense_replace`); 0 in a
    /// model without experts, whose every layer is counted by [`Self::expert_layers`].
    pub fn leading_dense_layers(&self) -> u32 {
        self.moe.map_or(0, |moe| moe.dense_layers.min(self.num_layers))
    }

    /// Layers with the model's main MLP: the routed and shared experts in a mixture of experts
    /// (all layers but the leading dense ones), the dense MLP of `ffn_size` otherwise.
    pub fn expert_layers(&self) -> u32 {
        self.num_layers - self.leading_dense_layers()
    }

    /// Parameters of the unsharded model (true vocabulary, no padding). A tied LM head is the
    /// embedding table and is counted once.
    pub fn param_count(&self) -> u64 {
        saturate(self.param_count_wide())
    }

    /// [`Self::param_count`] in u128, which no dimensions a `u32` holds can overflow.
    fn param_count_wide(&self) -> u128 {
        let h = self.hidden_size as u128;
        let f = self.ffn_size as u128;
        let v = self.vocab_size as u128;
        let experts = self.moe.map_or(0, |moe| h * moe.num_experts as u128 * (1 + 3 * moe.expert_ffn_size as u128));
        let dense_mlp = self.moe.map_or(0, |moe| 3 * h * moe.dense_ffn_size as u128);
        let per_layer = 2 * h; // input and post-attention RMSNorm
        // Gate, up, down (shared experts, in a mixture-of-experts model), and the routed experts.
        let expert_layer_mlp = 3 * h * f + experts;
        let embedding = v * h;
        let lm_head = if self.tied_embeddings { 0 } else { v * h };
        self.num_layers as u128 * per_layer
            + self.all_attention_elements(self.num_heads as u64, self.num_kv_heads as u64, 1)
            + self.expert_layers() as u128 * expert_layer_mlp
            + self.leading_dense_layers() as u128 * dense_mlp
            + embedding
            + lm_head
            + h // final norm
    }

    /// Parameters one token runs through: [`Self::param_count`] less the routed experts it is
    /// not sent to (all of them, in a dense model).
    pub fn active_param_count(&self) -> u64 {
        let idle = self.moe.map_or(0, |moe| {
            let per_expert = 3 * self.hidden_size as u128 * moe.expert_ffn_size as u128;
            (moe.num_experts - moe.experts_per_token.min(moe.num_experts)) as u128 * per_expert
        });
        saturate(self.param_count_wide() - self.expert_layers() as u128 * idle)
    }

    /// KV heads each GPU holds at tensor parallelism `tp`. When `tp` exceeds the number of KV
    /// heads, vLLM replicates KV heads so each rank holds one.
    pub fn kv_heads_per_gpu(&self, tp: u32) -> u32 {
        (self.num_kv_heads / tp.max(1)).max(1)
    }

    /// KV-cache bytes one token occupies on one GPU: layers × KV heads per GPU × head dim × 2 (K
    /// and V) × KV dtype bytes. Llama-3.1-405B at TP 8 in bf16: 126 × 1 × 128 × 2 × 2 = 64,512.
    /// With MLA, layers × (kv_lora_rank + qk_rope_head_dim) × KV dtype bytes on every GPU, as
    /// vLLM caches it (see [`MlaSpec`]): DeepSeek-V3 in bf16, 61 × 576 × 2 = 70,272 at any TP.
    /// Linear-attention layers keep a state per sequence instead, and are not counted; how a
    /// hybrid model's layers share blocks is [`Self::kv_layout`]'s.
    pub fn kv_bytes_per_token_per_gpu(&self, tp: u32) -> u64 {
        (self.attention.kv_layers(self.num_layers) as u64).saturating_mul(self.kv_bytes_per_token_per_layer_per_gpu(tp))
    }

    /// Bytes of the dtype that embeddings, LM head and norms are stored in. vLLM's FP8 weight
    /// quantization quantizes only the linear layers of the decoder; the embedding table, LM
    /// head and norms stay in the 16-bit activation dtype.
    fn unquantized_bytes(&self) -> u64 {
        match self.weight_dtype {
            Dtype::Fp8 => 2,
            d => d.bytes(),
        }
    }

    /// Bytes of weights one GPU holds at tensor parallelism `tp`, as vLLM shards them:
    ///
    /// - QKV and gate/up projections are column-parallel (`heads/tp` query heads, KV heads per
    ///   GPU as [`Self::kv_heads_per_gpu`] — replicated when `tp` exceeds them — and `ffn/tp`
    ///   columns); output and down projections are row-parallel. Sizes that do not divide are
    ///   rounded up.
    /// - The embedding table (`VocabParallelEmbedding`) and the LM head (`ParallelLMHead`) are
    ///   sharded along the vocabulary: the vocabulary is padded to a multiple of 64 and each rank
    ///   holds `ceil(padded / tp)` rows. A tied LM head shares the embedding's storage and is not
    ///   counted twice.
    /// - RMSNorm weights are replicated on every rank.
    ///
    /// Llama-3.1-8B in bf16 at TP 1: 8,030,261,248 parameters → 16,060,522,496 bytes.
    pub fn weight_bytes_per_gpu(&self, tp: u32) -> u64 {
        let shard = self.shard(tp);
        let h = self.hidden_size as u128;
        let norm_elements = (2 * self.num_layers as u128 + 1) * h;
        let vocab_tables = if self.tied_embeddings { 1 } else { 2 };
        saturate(
            self.linear_weight_bytes_per_gpu(tp)
                + (vocab_tables * shard.vocab_rows as u128 * h + norm_elements) * self.unquantized_bytes() as u128,
        )
    }

    /// [`Self::weight_bytes_per_gpu`] with the routed experts (and the router) spread over
    /// `expert_gpus` GPUs rather than the `tp` of one engine: data-parallel attention, where each
    /// rank's `tp` GPUs hold their own attention and dense layers and the experts are split over
    /// every rank's GPUs (vLLM shards a mixture of experts by tensor × data parallel size).
    pub fn weight_bytes_per_gpu_experts_over(&self, tp: u32, expert_gpus: u32) -> u64 {
        let Some(moe) = self.moe.filter(|_| expert_gpus != tp) else { return self.weight_bytes_per_gpu(tp) };
        let no_experts = ModelSpec { moe: Some(MoeSpec { num_experts: 0, ..moe }), ..self.clone() };
        // What a model without routed experts lacks: the experts and the router.
        let experts_at = |gpus| self.weight_bytes_per_gpu(gpus).saturating_sub(no_experts.weight_bytes_per_gpu(gpus));
        no_experts.weight_bytes_per_gpu(tp).saturating_add(experts_at(expert_gpus))
    }

    /// Estimated peak activation bytes on one GPU during the engine's start-up profiling forward
    /// pass, which vLLM runs with `max_num_batched_tokens` tokens spread over `max_num_seqs`
    /// sequences, then samples one token per sequence. The peak memory it measures there (weights
    /// excluded) is held back from the KV cache. This is an *estimate* of PyTorch's allocator
    /// peak, not a measurement:
    ///
    /// - per token, in the activation dtype (2 bytes; 4 for fp32 models): about four hidden-sized
    ///   tensors alive at once (residual, normed input, attention output, MLP output), this
    ///   GPU's QKV output, and the MLP's gate/up output (2 × ffn/tp) plus its activated output
    ///   (ffn/tp);
    /// - per sampled sequence (min(max_num_seqs, tokens)): logits over the full vocabulary in
    ///   fp32, gathered onto the first rank, with about three live copies (logits, probabilities,
    ///   log-probabilities) in the sampler.
    pub fn profile_activation_bytes_per_gpu(
        &self,
        tp: u32,
        max_num_batched_tokens: u32,
        max_num_seqs: u32,
    ) -> u64 {
        let tp = tp.max(1) as u64;
        let act_bytes = self.activation_bytes();
        let h = self.hidden_size as u64;
        let heads = div_ceil(self.num_heads as u64, tp);
        // MLA's latents beside its per-head queries; else the fused QKV output.
        let qkv = match &self.mla {
            Some(mla) => mla.down_width() + heads * mla.qk_head_dim(),
            None => (heads + 2 * self.kv_heads_per_gpu(tp as u32) as u64) * self.head_dim as u64,
        };
        // A routed token's experts' intermediates live beside the shared MLP's; a leading dense
        // layer's MLP may be wider than both.
        let routed = self.moe.map_or(0, |moe| moe.experts_per_token as u64 * div_ceil(moe.expert_ffn_size as u64, tp));
        let dense = self.moe.map_or(0, |moe| div_ceil(moe.dense_ffn_size as u64, tp));
        let f = (div_ceil(self.ffn_size as u64, tp) + routed).max(dense);
        let tokens = max_num_batched_tokens as u64;
        let per_token = (4 * h + qkv + 3 * f) * act_bytes;
        let sampled = (max_num_seqs as u64).min(tokens);
        let logits = sampled * self.vocab_size as u64 * 4 * 3;
        tokens * per_token + logits
    }
}
