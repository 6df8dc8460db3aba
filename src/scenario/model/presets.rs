//! Built-in models, with the Hugging Face repository each one's numbers come from.

use super::{Dtype, MlaSpec, ModelSpec, MoeSpec};

impl ModelSpec {
    /// A preset by name, case-insensitively, with bf16 weights and KV cache.
    pub fn preset(name: &str) -> Option<ModelSpec> {
        let want = name.trim().to_ascii_lowercase();
        PRESETS
            .iter()
            .find(|p| p.name.to_ascii_lowercase() == want)
            .map(Preset::spec)
    }

    /// The Hugging Face repository id of the preset called `name` (case-insensitive), which
    /// deploy commands serve.
    pub fn preset_hf_repo(name: &str) -> Option<&'static str> {
        let want = name.trim().to_ascii_lowercase();
        PRESETS.iter().find(|p| p.name.to_ascii_lowercase() == want).map(|p| p.hf_repo)
    }

    /// The names of all model presets, in the order they are listed in errors.
    pub fn preset_names() -> Vec<&'static str> {
        PRESETS.iter().map(|p| p.name).collect()
    }
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
            weight_quant: None,
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
    },
    // deepseek-ai/DeepSeek-V3 (and -R1, same dimensions): config.json. MLA with q_lora_rank 1536,
    // kv_lora_rank 512, qk_nope/rope 128/64, v 128; 3 dense layers (intermediate_size 18432),
    // then 58 with 256 routed experts (top-8) and 1 shared, of 2048. The checkpoint is fp8
    // (block-scaled); the preset is bf16 like every preset, `dtype = "fp8"` serves it as shipped.
    Preset {
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
    },
];

/// DeepSeek-V3's latent attention, which Kimi-K2 shares.
const DEEPSEEK_V3_MLA: MlaSpec = MlaSpec { q_lora_rank: 1536, kv_lora_rank: 512, qk_nope_head_dim: 128, qk_rope_head_dim: 64, v_head_dim: 128 };
