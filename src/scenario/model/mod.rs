//! Transformer dimensions: presets, explicit dimensions, or a Hugging Face `config.json`.
//!
//! Every model here is a decoder-only transformer with grouped-query attention and a gated
//! (SwiGLU) MLP: per layer, a fused QKV projection, an output projection, gate + up + down MLP
//! projections and two RMSNorms; an embedding table, a final norm and an LM head (possibly tied to
//! the embedding table). In a mixture-of-experts model ([`MoeSpec`]) every layer's MLP is a
//! router and `num_experts` gated MLPs, of which each token runs `experts_per_token`, beside an
//! optional shared MLP that every token runs (`ffn_size`, 0 when there is none).

mod dtype;
mod hf_config;
mod hf_keys;
mod presets;
#[cfg(test)]
mod tests;

pub use dtype::{Dtype, default_kv_dtype};
pub use hf_config::HfConfigError;

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
}

/// The routed experts of a mixture-of-experts model. Every layer has them (Mixtral, Qwen3-MoE);
/// models that interleave dense and sparse layers are refused when read.
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
    /// Elements of one layer's linear weights (QKV, output, gate, up, down; and in a
    /// mixture-of-experts model the router and this GPU's part of the experts) per GPU.
    pub linear_elements_per_layer: u64,
}

impl ModelSpec {
    /// The per-GPU shard at tensor parallelism `tp`. Routed experts are split over the `tp`
    /// GPUs either way vLLM splits them: each expert's intermediate size by `tp` (tensor
    /// parallel), or whole experts, `num_experts / tp` per GPU (expert parallel); both hold the
    /// same elements when the sizes divide, and the larger is taken when they do not.
    pub fn shard(&self, tp: u32) -> Shard {
        let tp = tp.max(1) as u64;
        let h = self.hidden_size as u64;
        let d = self.head_dim as u64;
        let heads = div_ceil(self.num_heads as u64, tp);
        let kv_heads = self.kv_heads_per_gpu(tp as u32) as u64;
        let ffn = div_ceil(self.ffn_size as u64, tp);
        let vocab_padded = div_ceil(self.vocab_size as u64, VOCAB_PADDING) * VOCAB_PADDING;
        Shard {
            heads,
            kv_heads,
            ffn,
            vocab_padded,
            vocab_rows: div_ceil(vocab_padded, tp),
            // In u128, saturated: absurd dimensions must read as "too large", not wrap around.
            linear_elements_per_layer: saturate({
                let (h, heads, kv_heads, d, ffn) = (h as u128, heads as u128, kv_heads as u128, d as u128, ffn as u128);
                h * (heads + 2 * kv_heads) * d // QKV
                    + heads * d * h // output projection
                    + 3 * h * ffn // gate, up, down
                    + self.moe.map_or(0, |moe| {
                        let experts = moe.num_experts as u128;
                        let f = moe.expert_ffn_size as u128;
                        let tensor_parallel = experts * f.div_ceil(tp as u128);
                        let expert_parallel = experts.div_ceil(tp as u128) * f;
                        h * experts + 3 * h * tensor_parallel.max(expert_parallel)
                    })
            }),
        }
    }

    /// Parameters of the unsharded model (true vocabulary, no padding). A tied LM head is the
    /// embedding table and is counted once.
    pub fn param_count(&self) -> u64 {
        saturate(self.param_count_wide())
    }

    /// [`Self::param_count`] in u128, which no dimensions a `u32` holds can overflow.
    fn param_count_wide(&self) -> u128 {
        let h = self.hidden_size as u128;
        let q = self.num_heads as u128 * self.head_dim as u128;
        let kv = self.num_kv_heads as u128 * self.head_dim as u128;
        let f = self.ffn_size as u128;
        let v = self.vocab_size as u128;
        let experts = self.moe.map_or(0, |moe| h * moe.num_experts as u128 * (1 + 3 * moe.expert_ffn_size as u128));
        let per_layer = h * (q + 2 * kv) // fused QKV
            + q * h // output projection
            + 3 * h * f // gate, up, down (shared experts, in a mixture-of-experts model)
            + experts
            + 2 * h; // input and post-attention RMSNorm
        let embedding = v * h;
        let lm_head = if self.tied_embeddings { 0 } else { v * h };
        self.num_layers as u128 * per_layer + embedding + lm_head + h // + final norm
    }

    /// Parameters one token runs through: [`Self::param_count`] less the routed experts it is
    /// not sent to (all of them, in a dense model).
    pub fn active_param_count(&self) -> u64 {
        let idle = self.moe.map_or(0, |moe| {
            let per_expert = 3 * self.hidden_size as u128 * moe.expert_ffn_size as u128;
            (moe.num_experts - moe.experts_per_token.min(moe.num_experts)) as u128 * per_expert
        });
        saturate(self.param_count_wide() - self.num_layers as u128 * idle)
    }

    /// KV heads each GPU holds at tensor parallelism `tp`. When `tp` exceeds the number of KV
    /// heads, vLLM replicates KV heads so each rank holds one.
    pub fn kv_heads_per_gpu(&self, tp: u32) -> u32 {
        (self.num_kv_heads / tp.max(1)).max(1)
    }

    /// KV-cache bytes one token occupies on one GPU: layers × KV heads per GPU × head dim × 2 (K
    /// and V) × KV dtype bytes. Llama-3.1-405B at TP 8 in bf16: 126 × 1 × 128 × 2 × 2 = 64,512.
    pub fn kv_bytes_per_token_per_gpu(&self, tp: u32) -> u64 {
        (self.num_layers as u64)
            .saturating_mul(self.kv_heads_per_gpu(tp) as u64)
            .saturating_mul(self.head_dim as u64)
            .saturating_mul(2 * self.kv_dtype.bytes())
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
            self.num_layers as u128 * shard.linear_elements_per_layer as u128 * self.weight_dtype.bytes() as u128
                + (vocab_tables * shard.vocab_rows as u128 * h + norm_elements) * self.unquantized_bytes() as u128,
        )
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
        let act_bytes = if self.weight_dtype == Dtype::Fp32 {
            4
        } else {
            2
        };
        let h = self.hidden_size as u64;
        let qkv = (div_ceil(self.num_heads as u64, tp)
            + 2 * self.kv_heads_per_gpu(tp as u32) as u64)
            * self.head_dim as u64;
        // A routed token's experts' intermediates live beside the shared MLP's.
        let routed = self.moe.map_or(0, |moe| moe.experts_per_token as u64 * div_ceil(moe.expert_ffn_size as u64, tp));
        let f = div_ceil(self.ffn_size as u64, tp) + routed;
        let tokens = max_num_batched_tokens as u64;
        let per_token = (4 * h + qkv + 3 * f) * act_bytes;
        let sampled = (max_num_seqs as u64).min(tokens);
        let logits = sampled * self.vocab_size as u64 * 4 * 3;
        tokens * per_token + logits
    }
}
