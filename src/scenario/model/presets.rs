//! Built-in models, with the Hugging Face repository each one's numbers come from.

use super::quant::{QuantScheme, QuantScope, WeightQuant};
use super::{AttentionMix, DsaSpec, Dtype, LinearAttention, MlaSpec, ModelSpec, MoeSpec};

impl ModelSpec {
    /// A preset by name, case-insensitively, with bf16 weights and KV cache.
    pub fn preset(name: &str) -> Option<ModelSpec> {
        find_preset(name).map(Preset::spec)
    }

    /// The Hugging Face repository id of the preset called `name` (case-insensitive), which
    /// deploy commands serve.
    pub fn preset_hf_repo(name: &str) -> Option<&'static str> {
        find_preset(name).map(|p| p.hf_repo)
    }

    /// The names of all model presets, in the order they are listed in errors.
    pub fn preset_names() -> Vec<&'static str> {
        PRESETS.iter().map(|p| p.name).collect()
    }
}

/// The preset called `name`, ignoring case and surrounding space.
fn find_preset(name: &str) -> Option<&'static Preset> {
    let want = name.trim().to_ascii_lowercase();
    PRESETS.iter().find(|p| p.name.to_ascii_lowercase() == want)
}

struct Preset {
    name: &'static str,
    /// The Hugging Face repository a deploy command serves: the instruction-tuned checkpoint,
    /// which chat serving runs (its config.json has the same dimensions as the base model's).
    hf_repo: &'static str,
    num_layers: u32,
    hidden_size: u32,
    num_heads: u32,
    num_kv_heads: u32,
    head_dim: u32,
    ffn_size: u32,
    vocab_size: u32,
    tied_embeddings: bool,
    max_position_embeddings: u32,
    moe: Option<MoeSpec>,
    mla: Option<MlaSpec>,
    dsa: Option<DsaSpec>,
    attention: AttentionMix,
    /// How the published checkpoint stores its weights, where only a quantized one is
    /// published (gpt-oss); `None`: bf16, like the rest.
    weight_quant: Option<WeightQuant>,
}

impl Preset {
    fn spec(&self) -> ModelSpec {
        ModelSpec {
            name: self.name.to_string(),
            num_layers: self.num_layers,
            hidden_size: self.hidden_size,
            num_heads: self.num_heads,
            num_kv_heads: self.num_kv_heads,
            head_dim: self.head_dim,
            ffn_size: self.ffn_size,
            vocab_size: self.vocab_size,
            tied_embeddings: self.tied_embeddings,
            max_position_embeddings: self.max_position_embeddings,
            weight_dtype: Dtype::Bf16,
            kv_dtype: Dtype::Bf16,
            moe: self.moe,
            mla: self.mla,
            dsa: self.dsa,
            weight_quant: self.weight_quant,
            attention: self.attention,
        }
    }
}

/// Numbers from each model's `config.json` on the Hugging Face Hub (the repository is named per
/// entry). Where `head_dim` is absent from the config, it is hidden / heads.
const PRESETS: &[Preset] = &[
    // meta-llama/Llama-3.1-8B (and -Instruct): config.json
    Preset {
        name: "Llama-3.1-8B",
        hf_repo: "meta-llama/Llama-3.1-8B-Instruct",
        num_layers: 32,
        hidden_size: 4096,
        num_heads: 32,
        num_kv_heads: 8,
        head_dim: 128,
        ffn_size: 14336,
        vocab_size: 128256,
        tied_embeddings: false,
        max_position_embeddings: 131072,
        moe: None,
        mla: None,
        dsa: None,
        attention: FULL,
        weight_quant: None,
    },
    // meta-llama/Llama-3.1-70B (and -Instruct): config.json
    Preset {
        name: "Llama-3.1-70B",
        hf_repo: "meta-llama/Llama-3.1-70B-Instruct",
        num_layers: 80,
        hidden_size: 8192,
        num_heads: 64,
        num_kv_heads: 8,
        head_dim: 128,
        ffn_size: 28672,
        vocab_size: 128256,
        tied_embeddings: false,
        max_position_embeddings: 131072,
        moe: None,
        mla: None,
        dsa: None,
        attention: FULL,
        weight_quant: None,
    },
    // meta-llama/Llama-3.1-405B (and -Instruct): config.json
    Preset {
        name: "Llama-3.1-405B",
        hf_repo: "meta-llama/Llama-3.1-405B-Instruct",
        num_layers: 126,
        hidden_size: 16384,
        num_heads: 128,
        num_kv_heads: 8,
        head_dim: 128,
        ffn_size: 53248,
        vocab_size: 128256,
        tied_embeddings: false,
        max_position_embeddings: 131072,
        moe: None,
        mla: None,
        dsa: None,
        attention: FULL,
        weight_quant: None,
    },
    // meta-llama/Llama-3.2-1B (and -Instruct): config.json (tie_word_embeddings: true, head_dim 64)
    Preset {
        name: "Llama-3.2-1B",
        hf_repo: "meta-llama/Llama-3.2-1B-Instruct",
        num_layers: 16,
        hidden_size: 2048,
        num_heads: 32,
        num_kv_heads: 8,
        head_dim: 64,
        ffn_size: 8192,
        vocab_size: 128256,
        tied_embeddings: true,
        max_position_embeddings: 131072,
        moe: None,
        mla: None,
        dsa: None,
        attention: FULL,
        weight_quant: None,
    },
    // meta-llama/Llama-3.2-3B (and -Instruct): config.json (tie_word_embeddings: true)
    Preset {
        name: "Llama-3.2-3B",
        hf_repo: "meta-llama/Llama-3.2-3B-Instruct",
        num_layers: 28,
        hidden_size: 3072,
        num_heads: 24,
        num_kv_heads: 8,
        head_dim: 128,
        ffn_size: 8192,
        vocab_size: 128256,
        tied_embeddings: true,
        max_position_embeddings: 131072,
        moe: None,
        mla: None,
        dsa: None,
        attention: FULL,
        weight_quant: None,
    },
    // Qwen/Qwen2.5-7B-Instruct: config.json (head_dim = 3584 / 28 = 128)
    Preset {
        name: "Qwen2.5-7B",
        hf_repo: "Qwen/Qwen2.5-7B-Instruct",
        num_layers: 28,
        hidden_size: 3584,
        num_heads: 28,
        num_kv_heads: 4,
        head_dim: 128,
        ffn_size: 18944,
        vocab_size: 152064,
        tied_embeddings: false,
        max_position_embeddings: 32768,
        moe: None,
        mla: None,
        dsa: None,
        attention: FULL,
        weight_quant: None,
    },
    // Qwen/Qwen2.5-72B-Instruct: config.json
    Preset {
        name: "Qwen2.5-72B",
        hf_repo: "Qwen/Qwen2.5-72B-Instruct",
        num_layers: 80,
        hidden_size: 8192,
        num_heads: 64,
        num_kv_heads: 8,
        head_dim: 128,
        ffn_size: 29568,
        vocab_size: 152064,
        tied_embeddings: false,
        max_position_embeddings: 32768,
        moe: None,
        mla: None,
        dsa: None,
        attention: FULL,
        weight_quant: None,
    },
    // mistralai/Mistral-7B-Instruct-v0.3: config.json (v0.3: vocab 32768, no sliding window)
    Preset {
        name: "Mistral-7B",
        hf_repo: "mistralai/Mistral-7B-Instruct-v0.3",
        num_layers: 32,
        hidden_size: 4096,
        num_heads: 32,
        num_kv_heads: 8,
        head_dim: 128,
        ffn_size: 14336,
        vocab_size: 32768,
        tied_embeddings: false,
        max_position_embeddings: 32768,
        moe: None,
        mla: None,
        dsa: None,
        attention: FULL,
        weight_quant: None,
    },
    // mistralai/Mixtral-8x7B-v0.1 (and -Instruct-v0.1): config.json (num_local_experts 8,
    // num_experts_per_tok 2, intermediate_size 14336 per expert, no shared expert)
    Preset {
        name: "Mixtral-8x7B",
        hf_repo: "mistralai/Mixtral-8x7B-Instruct-v0.1",
        num_layers: 32,
        hidden_size: 4096,
        num_heads: 32,
        num_kv_heads: 8,
        head_dim: 128,
        ffn_size: 0,
        vocab_size: 32000,
        tied_embeddings: false,
        max_position_embeddings: 32768,
        moe: Some(MoeSpec { num_experts: 8, experts_per_token: 2, expert_ffn_size: 14336, routing_skew: 0.0, expert_parallel: false, dense_layers: 0, dense_ffn_size: 0 }),
        mla: None,
        dsa: None,
        attention: FULL,
        weight_quant: None,
    },
    // Qwen/Qwen3-30B-A3B: config.json (num_experts 128, num_experts_per_tok 8,
    // moe_intermediate_size 768, head_dim 128, decoder_sparse_step 1, mlp_only_layers [])
    Preset {
        name: "Qwen3-30B-A3B",
        hf_repo: "Qwen/Qwen3-30B-A3B",
        num_layers: 48,
        hidden_size: 2048,
        num_heads: 32,
        num_kv_heads: 4,
        head_dim: 128,
        ffn_size: 0,
        vocab_size: 151936,
        tied_embeddings: false,
        max_position_embeddings: 40960,
        moe: Some(MoeSpec { num_experts: 128, experts_per_token: 8, expert_ffn_size: 768, routing_skew: 0.0, expert_parallel: false, dense_layers: 0, dense_ffn_size: 0 }),
        mla: None,
        dsa: None,
        attention: FULL,
        weight_quant: None,
    },
    // deepseek-ai/DeepSeek-V3 (and -R1, same dimensions): config.json. MLA with q_lora_rank 1536,
    // kv_lora_rank 512, qk_nope/rope 128/64, v 128; 3 dense layers (intermediate_size 18432),
    // then 58 with 256 routed experts (top-8) and 1 shared, of 2048. The checkpoint is fp8
    // (block-scaled); the preset is bf16 like every preset, `dtype = "fp8"` serves it as shipped.
    DEEPSEEK_V3,
    // deepseek-ai/DeepSeek-V3.2: config.json (tests/data/hf-configs/DeepSeek-V3.2.json).
    // DeepSeek-V3's dimensions, and in every layer the lightning indexer of DeepSeek sparse
    // attention: index_topk 2048, index_n_heads 64, index_head_dim 128.
    Preset {
        name: "DeepSeek-V3.2",
        hf_repo: "deepseek-ai/DeepSeek-V3.2",
        dsa: Some(DsaSpec { index_topk: 2048, index_n_heads: 64, index_head_dim: 128 }),
        ..DEEPSEEK_V3
    },
    // moonshotai/Kimi-K2-Instruct: config.json. DeepSeek-V3's architecture with 64 heads, 384
    // routed experts and 1 dense layer; vocabulary 163,840.
    Preset {
        name: "Kimi-K2",
        hf_repo: "moonshotai/Kimi-K2-Instruct",
        num_layers: 61,
        hidden_size: 7168,
        num_heads: 64,
        num_kv_heads: 64,
        head_dim: 192,
        ffn_size: 2048,
        vocab_size: 163840,
        tied_embeddings: false,
        max_position_embeddings: 131072,
        moe: Some(MoeSpec { num_experts: 384, experts_per_token: 8, expert_ffn_size: 2048, routing_skew: 0.0, expert_parallel: false, dense_layers: 1, dense_ffn_size: 18432 }),
        mla: Some(DEEPSEEK_V3_MLA),
        dsa: None,
        attention: FULL,
        weight_quant: None,
    },
    // zai-org/GLM-4.5-Air: config.json (tests/data/hf-configs/README.md says where it comes
    // from). 1 dense layer (intermediate_size 10944), then 45 with 128 routed experts (top-8)
    // and 1 shared, of 1408; 96 query and 8 KV heads of 128 over a hidden size of 4096.
    Preset {
        name: "GLM-4.5-Air",
        hf_repo: "zai-org/GLM-4.5-Air",
        num_layers: 46,
        hidden_size: 4096,
        num_heads: 96,
        num_kv_heads: 8,
        head_dim: 128,
        ffn_size: 1408,
        vocab_size: 151552,
        tied_embeddings: false,
        max_position_embeddings: 131072,
        moe: Some(MoeSpec { num_experts: 128, experts_per_token: 8, expert_ffn_size: 1408, routing_skew: 0.0, expert_parallel: false, dense_layers: 1, dense_ffn_size: 10944 }),
        mla: None,
        dsa: None,
        attention: FULL,
        weight_quant: None,
    },
    // openai/gpt-oss-20b: config.json. 24 layers alternating sliding-window (128 tokens) and
    // full attention, with attention sinks; 32 experts (top-4) of 2880; 64 query and 8 KV heads
    // of 64. Its experts are MXFP4, as the only published checkpoint stores them.
    Preset {
        name: "gpt-oss-20b",
        hf_repo: "openai/gpt-oss-20b",
        num_layers: 24,
        hidden_size: 2880,
        num_heads: 64,
        num_kv_heads: 8,
        head_dim: 64,
        ffn_size: 0,
        vocab_size: 201088,
        tied_embeddings: false,
        max_position_embeddings: 131072,
        moe: Some(MoeSpec { num_experts: 32, experts_per_token: 4, expert_ffn_size: 2880, routing_skew: 0.0, expert_parallel: false, dense_layers: 0, dense_ffn_size: 0 }),
        mla: None,
        dsa: None,
        attention: gpt_oss_attention(12),
        weight_quant: MXFP4_EXPERTS,
    },
    // openai/gpt-oss-120b: config.json. gpt-oss-20b's layer with 128 experts, 36 layers.
    Preset {
        name: "gpt-oss-120b",
        hf_repo: "openai/gpt-oss-120b",
        num_layers: 36,
        hidden_size: 2880,
        num_heads: 64,
        num_kv_heads: 8,
        head_dim: 64,
        ffn_size: 0,
        vocab_size: 201088,
        tied_embeddings: false,
        max_position_embeddings: 131072,
        moe: Some(MoeSpec { num_experts: 128, experts_per_token: 4, expert_ffn_size: 2880, routing_skew: 0.0, expert_parallel: false, dense_layers: 0, dense_ffn_size: 0 }),
        mla: None,
        dsa: None,
        attention: gpt_oss_attention(18),
        weight_quant: MXFP4_EXPERTS,
    },
    // Qwen/Qwen3-Next-80B-A3B-Instruct: config.json. 48 layers, every 4th full attention (16
    // query and 2 KV heads of 256, with an output gate), the others Gated DeltaNet (16 key and
    // 32 value heads of 128, convolution of 4); 512 routed experts (top-10) and a shared one, of 512.
    Preset {
        name: "Qwen3-Next-80B-A3B",
        hf_repo: "Qwen/Qwen3-Next-80B-A3B-Instruct",
        num_layers: 48,
        hidden_size: 2048,
        num_heads: 16,
        num_kv_heads: 2,
        head_dim: 256,
        ffn_size: 512,
        vocab_size: 151936,
        tied_embeddings: false,
        max_position_embeddings: 262144,
        moe: Some(MoeSpec { num_experts: 512, experts_per_token: 10, expert_ffn_size: 512, routing_skew: 0.0, expert_parallel: false, dense_layers: 0, dense_ffn_size: 0 }),
        mla: None,
        dsa: None,
        attention: AttentionMix {
            linear: Some(LinearAttention { layers: 36, num_k_heads: 16, num_v_heads: 32, head_k_dim: 128, head_v_dim: 128, conv_kernel: 4 }),
            output_gate: true,
            ..FULL
        },
        weight_quant: None,
    },
    // meta-llama/Llama-4-Scout-17B-16E-Instruct: config.json's text_config. 48 layers, three in
    // four chunked local attention (chunks of 8192) and every fourth full (NoPE); 16 routed
    // experts (top-1) and a shared one, of 8192, in every layer; 40 query and 8 KV heads of 128.
    Preset {
        name: "Llama-4-Scout",
        hf_repo: "meta-llama/Llama-4-Scout-17B-16E-Instruct",
        num_layers: 48,
        hidden_size: 5120,
        num_heads: 40,
        num_kv_heads: 8,
        head_dim: 128,
        ffn_size: 8192,
        vocab_size: 202048,
        tied_embeddings: false,
        max_position_embeddings: 10485760,
        moe: Some(MoeSpec { num_experts: 16, experts_per_token: 1, expert_ffn_size: 8192, routing_skew: 0.0, expert_parallel: false, dense_layers: 0, dense_ffn_size: 0 }),
        mla: None,
        dsa: None,
        attention: AttentionMix { chunked_layers: 36, attention_chunk: 8192, ..FULL },
        weight_quant: None,
    },
];

/// gpt-oss's experts as OpenAI publishes them, the only checkpoint there is: MXFP4, the rest bf16.
const MXFP4_EXPERTS: Option<WeightQuant> = Some(WeightQuant { scheme: QuantScheme::Mxfp4, scope: QuantScope::EXPERTS });

/// Every layer full attention.
const FULL: AttentionMix = AttentionMix {
    sliding_layers: 0,
    sliding_window: 0,
    chunked_layers: 0,
    attention_chunk: 0,
    linear: None,
    sinks: false,
    output_gate: false,
};

/// gpt-oss's attention: `sliding` layers with a window of 128 (the others full), with sinks.
const fn gpt_oss_attention(sliding: u32) -> AttentionMix {
    AttentionMix { sliding_layers: sliding, sliding_window: 128, sinks: true, ..FULL }
}

/// DeepSeek-V3, which DeepSeek-V3.2 extends (its source is named where the list holds it).
const DEEPSEEK_V3: Preset = Preset {
    name: "DeepSeek-V3",
    hf_repo: "deepseek-ai/DeepSeek-V3",
    num_layers: 61,
    hidden_size: 7168,
    num_heads: 128,
    num_kv_heads: 128,
    head_dim: 192,
    ffn_size: 2048,
    vocab_size: 129280,
    tied_embeddings: false,
    max_position_embeddings: 163840,
    moe: Some(MoeSpec { num_experts: 256, experts_per_token: 8, expert_ffn_size: 2048, routing_skew: 0.0, expert_parallel: false, dense_layers: 3, dense_ffn_size: 18432 }),
    mla: Some(DEEPSEEK_V3_MLA),
    dsa: None,
    attention: FULL,
    weight_quant: None,
};

/// DeepSeek-V3's latent attention, which Kimi-K2 shares.
const DEEPSEEK_V3_MLA: MlaSpec = MlaSpec { q_lora_rank: 1536, kv_lora_rank: 512, qk_nope_head_dim: 128, qk_rope_head_dim: 64, v_head_dim: 128 };
