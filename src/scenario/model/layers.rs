//! Layers whose attention is not full attention over the whole context: sliding windows
//! (gpt-oss), chunked local attention (Llama 4) and linear attention with a per-sequence state
//! (Qwen3-Next's Gated DeltaNet).
//!
//! Only the counts matter to what a step costs and what the KV cache holds, not where in the
//! stack each kind sits, so a model keeps how many layers of each kind it has. The rest of its
//! `num_layers` are full attention.
//!
//! ```text
//!  full        token t attends to 0..=t                           KV grows with the context
//!  sliding     token t attends to t−W+1..=t         (gpt-oss W=128) KV capped at the window
//!  chunked     token t attends to ⌊t/C⌋·C..=t    (Llama 4 C=8192) KV of the current chunk
//!  linear      token t updates a state of H_v × d_k × d_v          one state per sequence
//! ```

/// How many layers of each attention kind a model has beside full attention, and the dimensions
/// those kinds need. The default is a model whose every layer is full attention.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AttentionMix {
    /// Layers that attend to the last `sliding_window` tokens only (`layer_types` entries
    /// `sliding_attention`).
    pub sliding_layers: u32,
    /// Tokens a sliding-window layer's query sees, itself included (gpt-oss: 128).
    pub sliding_window: u32,
    /// Layers that attend within fixed chunks of the sequence (Llama 4's layers with rotary
    /// embedding; its NoPE layers, every fourth, are full attention).
    pub chunked_layers: u32,
    /// Tokens per chunk of chunked local attention (`attention_chunk_size`, 8192 in Llama 4).
    pub attention_chunk: u32,
    /// Linear-attention layers, where the model has them.
    pub linear: Option<LinearAttention>,
    /// gpt-oss's learned attention sinks: one logit per head joins each softmax's denominator.
    /// A per-head scalar, so it changes no kernel's work measurably; kept so a config with sinks
    /// is read as what it is.
    pub sinks: bool,
    /// Qwen3-Next's gated attention (`attn_output_gate`): the query projection also produces a
    /// sigmoid gate for each head's output, doubling its width.
    pub output_gate: bool,
}

/// Gated DeltaNet layers (Qwen3-Next, Qwen3.5): per head a `head_k_dim × head_v_dim` state that
/// every token updates and reads, a short causal convolution before it, and no KV cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LinearAttention {
    /// Layers of this kind (`layer_types` entries `linear_attention`, or all but every
    /// `full_attention_interval`-th layer).
    pub layers: u32,
    pub num_k_heads: u32,
    pub num_v_heads: u32,
    pub head_k_dim: u32,
    pub head_v_dim: u32,
    /// Width of the causal convolution over q, k and v (`linear_conv_kernel_dim`, 4).
    pub conv_kernel: u32,
}

impl AttentionMix {
    /// Whether some layer is not full attention, so that sizing and pricing must look at kinds.
    pub fn is_mixed(&self) -> bool {
        self.sliding_layers > 0 || self.chunked_layers > 0 || self.linear.is_some()
    }

    /// Layers with a KV cache of their own (full, sliding and chunked): all but the linear ones.
    pub fn kv_layers(&self, num_layers: u32) -> u32 {
        num_layers.saturating_sub(self.linear.map_or(0, |l| l.layers))
    }

    /// Layers of full attention over the whole context.
    pub fn full_layers(&self, num_layers: u32) -> u32 {
        self.kv_layers(num_layers).saturating_sub(self.sliding_layers + self.chunked_layers)
    }
}

impl LinearAttention {
    fn key_width(&self) -> u64 {
        self.num_k_heads as u64 * self.head_k_dim as u64
    }

    fn value_width(&self) -> u64 {
        self.num_v_heads as u64 * self.head_v_dim as u64
    }

    /// Channels of the causal convolution: queries, keys and values (`conv_dim` in vLLM).
    pub fn conv_channels(&self) -> u64 {
        2 * self.key_width() + self.value_width()
    }

    /// `(k, n)` of a layer's projections on one GPU at tensor parallelism `tp`, in the order they
    /// run: q, k, v and the output gate z in one (`in_proj_qkvz`), the decay and beta gates
    /// (`in_proj_ba`), and the output projection. Heads split over GPUs as vLLM splits them.
    pub fn projections(&self, hidden: u64, tp: u64) -> [(u64, u64); 3] {
        let tp = tp.max(1);
        [
            (hidden, (2 * self.key_width() + 2 * self.value_width()).div_ceil(tp)),
            (hidden, (2 * self.num_v_heads as u64).div_ceil(tp)),
            (self.value_width().div_ceil(tp), hidden),
        ]
    }

    /// Elements of one layer's weights on one GPU at tensor parallelism `tp` (1: all of them):
    /// the projections, the convolution's filters (split with their channels), the per-head
    /// decay parameters (`A_log`, `dt_bias`) and the gated norm.
    pub fn weight_elements_per_gpu(&self, hidden: u64, tp: u64) -> u128 {
        let tp = tp.max(1);
        let projections: u128 = self.projections(hidden, tp).iter().map(|&(k, n)| k as u128 * n as u128).sum();
        let conv = self.conv_channels().div_ceil(tp) as u128 * self.conv_kernel as u128;
        projections + conv + 2 * (self.num_v_heads as u64).div_ceil(tp) as u128 + self.head_v_dim as u128
    }

    /// Bytes of one sequence's state in one layer on one GPU: the convolution's last
    /// `conv_kernel − 1` inputs and the recurrent state, in `dtype_bytes` (vLLM's
    /// `gated_delta_net_state_shape`: conv `(conv_dim/tp, kernel − 1)`, temporal
    /// `(num_v_heads/tp, head_k_dim, head_v_dim)`; both in the model's dtype by default).
    /// Qwen3-Next-80B-A3B in bf16 at TP 1: 8192 × 3 × 2 + 32 × 128 × 128 × 2 = 1,097,728.
    pub fn state_bytes_per_gpu(&self, tp: u32, dtype_bytes: u64) -> u64 {
        let tp = tp.max(1) as u64;
        let conv = self.conv_channels().div_ceil(tp) * (self.conv_kernel as u64).saturating_sub(1);
        let recurrent = (self.num_v_heads as u64).div_ceil(tp) * self.head_k_dim as u64 * self.head_v_dim as u64;
        (conv + recurrent).saturating_mul(dtype_bytes)
    }

    /// Multiply-accumulates per token per layer on one GPU: the state's decay, the rank-one
    /// update (k ⊗ v, after the delta rule's readout k·S) and the query's readout q·S, four
    /// passes over the `head_k_dim × head_v_dim` state per value head.
    pub fn state_macs_per_token(&self, tp: u32) -> f64 {
        const STATE_PASSES: f64 = 4.0;
        (self.num_v_heads as f64 / tp.max(1) as f64).ceil() * self.head_k_dim as f64 * self.head_v_dim as f64 * STATE_PASSES
    }
}
