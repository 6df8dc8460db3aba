use super::*;
use std::path::Path;

/// Published totals: Mixtral-8x7B 46.7B parameters, 12.9B active per token (Mistral AI's
/// announcement; 46,702,792,704 in the Hub's safetensors index); Qwen3-30B-A3B 30.5B and
/// 3.3B (its model card). Qwen3's q/k norms (256 per layer) are left out.
#[test]
fn mixture_of_experts_presets_count_their_published_parameters() {
    let mixtral = ModelSpec::preset("Mixtral-8x7B").unwrap();
    assert_eq!(mixtral.param_count(), 46_702_792_704);
    assert!((mixtral.active_param_count() as f64 / 12.9e9 - 1.0).abs() < 0.005, "{}", mixtral.active_param_count());
    let qwen = ModelSpec::preset("Qwen3-30B-A3B").unwrap();
    assert!((qwen.param_count() as f64 / 30.5e9 - 1.0).abs() < 0.005, "{}", qwen.param_count());
    assert!((qwen.active_param_count() as f64 / 3.3e9 - 1.0).abs() < 0.02, "{}", qwen.active_param_count());
    // Every expert's weights are resident: a GPU at TP 2 holds half, either way of splitting.
    assert_eq!(mixtral.weight_bytes_per_gpu(2), {
        let mut ep = mixtral.clone();
        ep.moe.as_mut().unwrap().expert_parallel = true;
        ep.weight_bytes_per_gpu(2)
    });
    let dense_part = ModelSpec { moe: None, ..mixtral.clone() };
    assert!(mixtral.weight_bytes_per_gpu(1) > 10 * dense_part.weight_bytes_per_gpu(1) / 2);
    assert_eq!(dense_part.active_param_count(), dense_part.param_count());
}

#[test]
fn hf_configs_of_mixture_of_experts_models() {
    let mixtral = r#"{"num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32,
        "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 32000,
        "max_position_embeddings": 32768, "num_local_experts": 8, "num_experts_per_tok": 2,
        "torch_dtype": "bfloat16"}"#;
    let m = ModelSpec::from_hf_config_json(mixtral, Path::new("m.json"), "Mixtral-8x7B").unwrap();
    assert_eq!(m, ModelSpec::preset("Mixtral-8x7B").unwrap());
    // Qwen2-MoE: a shared expert beside 60 routed ones of 1408.
    let qwen2 = r#"{"num_hidden_layers": 24, "hidden_size": 2048, "num_attention_heads": 16,
        "num_key_value_heads": 16, "intermediate_size": 5632, "moe_intermediate_size": 1408,
        "shared_expert_intermediate_size": 5632, "num_experts": 60, "num_experts_per_tok": 4,
        "vocab_size": 151936, "max_position_embeddings": 8192, "decoder_sparse_step": 1,
        "mlp_only_layers": []}"#;
    let m = ModelSpec::from_hf_config_json(qwen2, Path::new("q.json"), "q").unwrap();
    assert_eq!((m.ffn_size, m.moe.unwrap().num_experts, m.moe.unwrap().expert_ffn_size), (5632, 60, 1408));
    // What is not modelled is refused, naming the key.
    for (key, value) in [("decoder_sparse_step", "2"), ("mlp_only_layers", "[0, 1]"), ("moe_layer_freq", "2"), ("num_experts_per_tok", "9")] {
        let text = mixtral.replace("\"torch_dtype\"", &format!("\"{key}\": {value}, \"torch_dtype\""));
        let text = if key == "num_experts_per_tok" { mixtral.replace("\"num_experts_per_tok\": 2", "\"num_experts_per_tok\": 9") } else { text };
        let err = ModelSpec::from_hf_config_json(&text, Path::new("m.json"), "m").unwrap_err().to_string();
        assert!(err.contains(&format!("`{key}`")), "{err}");
    }
    let no_k = mixtral.replace("\"num_experts_per_tok\": 2,", "");
    let err = ModelSpec::from_hf_config_json(&no_k, Path::new("m.json"), "m").unwrap_err().to_string();
    assert!(err.contains("num_experts_per_tok"), "{err}");
}

#[test]
fn llama_8b_params_and_weight_bytes() {
    let m = ModelSpec::preset("llama-3.1-8b").unwrap();
    assert_eq!(m.name, "Llama-3.1-8B");
    assert_eq!(m.param_count(), 8_030_261_248);
    assert_eq!(m.weight_bytes_per_gpu(1), 16_060_522_496);
    assert!((m.weight_bytes_per_gpu(1) as f64 - 16.06e9).abs() < 0.01e9);
}

#[test]
fn kv_bytes_405b_tp8() {
    let m = ModelSpec::preset("Llama-3.1-405B").unwrap();
    assert_eq!(m.kv_heads_per_gpu(8), 1);
    assert_eq!(m.kv_bytes_per_token_per_gpu(8), 64_512);
    // ENGINES.md: about 101 GB of bf16 weights per GPU at TP 8.
    let gb = m.weight_bytes_per_gpu(8) as f64 / 1e9;
    assert!((100.0..103.0).contains(&gb), "{gb}");
}

#[test]
fn kv_heads_replicate_beyond_tp() {
    let m = ModelSpec::preset("Qwen2.5-7B").unwrap();
    assert_eq!(m.kv_heads_per_gpu(1), 4);
    assert_eq!(m.kv_heads_per_gpu(2), 2);
    assert_eq!(m.kv_heads_per_gpu(4), 1);
    assert_eq!(m.kv_heads_per_gpu(7), 1);
}

#[test]
fn tied_embeddings_counted_once() {
    let m = ModelSpec::preset("Llama-3.2-1B").unwrap();
    // meta-llama/Llama-3.2-1B: 1,235,814,400 parameters.
    assert_eq!(m.param_count(), 1_235_814_400);
    assert_eq!(m.weight_bytes_per_gpu(1), 2 * 1_235_814_400);
}

#[test]
fn fp8_weights_keep_16bit_embeddings() {
    let mut m = ModelSpec::preset("Llama-3.1-8B").unwrap();
    m.weight_dtype = Dtype::Fp8;
    let embed = 2 * 128256u64 * 4096;
    let norms = 65u64 * 4096;
    assert_eq!(
        m.weight_bytes_per_gpu(1),
        (m.param_count() - embed - norms) + 2 * (embed + norms)
    );
}

#[test]
fn unknown_preset_is_none() {
    assert!(ModelSpec::preset("gpt-5").is_none());
    assert_eq!(ModelSpec::preset_names().len(), 18);
}

#[test]
fn hf_config_parses_and_defaults() {
    let text = r#"{"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
        "intermediate_size": 128, "vocab_size": 1000, "max_position_embeddings": 512,
        "torch_dtype": "float16", "head_dim": null}"#;
    let m = ModelSpec::from_hf_config_json(text, Path::new("x/config.json"), "x").unwrap();
    assert_eq!(
        (m.num_kv_heads, m.head_dim, m.tied_embeddings),
        (4, 16, false)
    );
    assert_eq!((m.weight_dtype, m.kv_dtype), (Dtype::Fp16, Dtype::Fp16));
}

#[test]
fn hf_config_missing_key_names_file_and_key() {
    let text = r#"{"num_hidden_layers": 2}"#;
    let e = ModelSpec::from_hf_config_json(text, Path::new("m/config.json"), "m").unwrap_err();
    let s = e.to_string();
    assert!(
        s.contains("m/config.json") && s.contains("hidden_size"),
        "{s}"
    );
}

/// What each real config in `tests/data/hf-configs/` (sources in its README) must give: parsed
/// (`None`), or refused naming the key. Every file there must be listed, so a config added
/// without an expectation fails here rather than going untested.
const REAL_CONFIGS: &[(&str, Option<&str>)] = &[
    ("Llama-3.1-8B", None),
    ("Qwen2.5-7B", None),
    ("Mixtral-8x7B", None),
    ("Qwen3-30B-A3B", None),
    ("DeepSeek-V3", None),
    ("DeepSeek-R1", None),
    ("Kimi-K2", None),
    ("DeepSeek-V3.2", None),
    ("gpt-oss-20b", None),
    ("gpt-oss-120b", None),
    ("Qwen3-Next-80B-A3B", None),
    ("Qwen3.5-35B-A3B", Some("text_config")),
    ("Llama-4-Scout", None),
    ("GLM-4.5-Air", None),
];

fn hf_configs_dir() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/hf-configs")
}

pub(super) fn real_config(stem: &str) -> String {
    std::fs::read_to_string(hf_configs_dir().join(format!("{stem}.json"))).unwrap()
}

pub(super) fn refused_key(text: &str) -> String {
    match ModelSpec::from_hf_config_json(text, Path::new("c.json"), "c") {
        Err(HfConfigError::BadValue { key, .. }) => key,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[test]
fn every_real_config_parses_or_is_refused_naming_its_key() {
    let mut files: Vec<String> = std::fs::read_dir(hf_configs_dir())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter_map(|name| name.strip_suffix(".json").map(str::to_string))
        .collect();
    files.sort();
    let mut listed: Vec<String> = REAL_CONFIGS.iter().map(|(stem, _)| stem.to_string()).collect();
    listed.sort();
    assert_eq!(files, listed, "every config in tests/data/hf-configs has an expectation here");
    for (stem, expected) in REAL_CONFIGS {
        let path = hf_configs_dir().join(format!("{stem}.json"));
        match (ModelSpec::from_hf_config_file(&path), expected) {
            (Ok(_), None) => {}
            (Err(HfConfigError::BadValue { key, file, .. }), Some(want)) => {
                assert_eq!((key.as_str(), file.as_path()), (*want, path.as_path()), "{stem}");
            }
            (got, want) => panic!("{stem}: expected refusal at {want:?}, got {got:?}"),
        }
    }
}

#[test]
fn real_configs_of_modelled_families_match_the_presets() {
    let read = |stem: &str| ModelSpec::from_hf_config_json(&real_config(stem), Path::new("c.json"), stem).unwrap();
    for stem in ["Llama-3.1-8B", "Mixtral-8x7B", "Qwen3-30B-A3B", "DeepSeek-V3", "Kimi-K2"] {
        let preset = ModelSpec::preset(stem).unwrap();
        let config = read(stem);
        assert_eq!(config.param_count(), preset.param_count(), "{stem}");
        assert_eq!(config.kv_bytes_per_token_per_gpu(1), preset.kv_bytes_per_token_per_gpu(1), "{stem}");
    }
    // The base model's config, with a 131,072-token context where the instruct preset has 32,768.
    let qwen = read("Qwen2.5-7B");
    assert_eq!(ModelSpec { max_position_embeddings: 32768, ..qwen }, ModelSpec::preset("Qwen2.5-7B").unwrap());
}

/// The configs the issue found accepted silently, and each kind of refusal by itself.
#[test]
fn architecture_that_is_not_modelled_is_refused_naming_the_key() {
    let edit = |stem: &str, f: &dyn Fn(&mut serde_json::Map<String, serde_json::Value>)| {
        let mut json: serde_json::Value = serde_json::from_str(&real_config(stem)).unwrap();
        f(json.as_object_mut().unwrap());
        json.to_string()
    };
    // gpt-oss without its quantization block reads its sliding layers; without `layer_types`,
    // its window would apply to every layer.
    let no_quant = |o: &mut serde_json::Map<_, _>| drop(o.remove("quantization_config"));
    let gpt_oss = ModelSpec::from_hf_config_json(&edit("gpt-oss-20b", &no_quant), Path::new("c.json"), "c").unwrap();
    assert_eq!((gpt_oss.attention.sliding_layers, gpt_oss.attention.sliding_window, gpt_oss.attention.sinks), (12, 128, true));
    let no_layer_types = |o: &mut serde_json::Map<_, _>| {
        no_quant(o);
        o.remove("layer_types");
    };
    assert_eq!(refused_key(&edit("gpt-oss-20b", &no_layer_types)), "sliding_window");
    // Qwen2's window is fine switched off, refused switched on.
    let on = |o: &mut serde_json::Map<_, _>| drop(o.insert("use_sliding_window".into(), true.into()));
    assert_eq!(refused_key(&edit("Qwen2.5-7B", &on)), "use_sliding_window");
    // Mistral-7B-v0.1's 4,096-token window, with no switch.
    let window = |o: &mut serde_json::Map<_, _>| drop(o.insert("sliding_window".into(), 4096.into()));
    assert_eq!(refused_key(&edit("Mixtral-8x7B", &window)), "sliding_window");
    let all_full = |o: &mut serde_json::Map<_, _>| drop(o.insert("layer_types".into(), serde_json::json!(vec!["full_attention"; 32])));
    assert!(ModelSpec::from_hf_config_json(&edit("Llama-3.1-8B", &all_full), Path::new("c.json"), "c").is_ok());
    // Methods that are modelled, and their refusals: `quant_tests`.
    for method in ["mxfp4", "bitsandbytes", "gguf"] {
        let quant = |o: &mut serde_json::Map<_, _>| drop(o.insert("quantization_config".into(), serde_json::json!({"quant_method": method})));
        assert_eq!(refused_key(&edit("Llama-3.1-8B", &quant)), "quantization_config.quant_method", "{method}");
    }
    let fp8_kv = |o: &mut serde_json::Map<_, _>| {
        o.insert("quantization_config".into(), serde_json::json!({"quant_method": "fp8", "kv_cache_scheme": {}}));
    };
    assert_eq!(refused_key(&edit("Llama-3.1-8B", &fp8_kv)), "quantization_config.kv_cache_scheme");
    let mrope = |o: &mut serde_json::Map<_, _>| drop(o.insert("rope_scaling".into(), serde_json::json!({"type": "mrope"})));
    assert_eq!(refused_key(&edit("Qwen2.5-7B", &mrope)), "rope_scaling.rope_type");
    for (key, value) in [
        ("attention_chunk_size", serde_json::json!(8192)),
        ("no_rope_layers", serde_json::json!([1, 1, 1, 0])),
        ("interleave_moe_layer_step", serde_json::json!(2)),
        ("linear_num_value_heads", serde_json::json!(32)),
        ("linear_new_thing", serde_json::json!(1)),
        ("index_topk", serde_json::json!(2048)),
        ("index_new_thing", serde_json::json!(1)),
        ("sinks", serde_json::json!(true)),
        ("moe_layer_freq", serde_json::json!(2)),
        ("some_future_layer_kind", serde_json::json!("x")),
    ] {
        let add = |o: &mut serde_json::Map<_, _>| drop(o.insert(key.into(), value.clone()));
        assert_eq!(refused_key(&edit("Mixtral-8x7B", &add)), key);
    }
    let gemma = |o: &mut serde_json::Map<_, _>| drop(o.insert("model_type".into(), "gemma2".into()));
    let err = ModelSpec::from_hf_config_json(&edit("Llama-3.1-8B", &gemma), Path::new("g/config.json"), "g").unwrap_err().to_string();
    assert!(err.contains("g/config.json") && err.contains("`model_type` = \"gemma2\"") && err.contains("llama"), "{err}");
    // Metadata by its name passes, as do the keys known harmless.
    let metadata = |o: &mut serde_json::Map<_, _>| {
        for key in ["sep_token_id", "hidden_dropout", "_commit_hash", "z_loss_aux_loss_coef", "num_nextn_predict_layers"] {
            o.insert(key.into(), 1.into());
        }
    };
    assert!(ModelSpec::from_hf_config_json(&edit("Qwen3-30B-A3B", &metadata), Path::new("c.json"), "c").is_ok());
}

/// DeepSeek-V3: "671B of the Main Model weights and 14B of the Multi-Token Prediction (MTP)
/// Module weights", 685B on the Hub (deepseek-ai/DeepSeek-V3's README_WEIGHTS.md), 37B
/// activated per token (its model card). vLLM does not load the MTP module with the model
/// (`DeepseekV2ForCausalLM.load_weights` skips its layers: vllm/model_executor/models/
/// deepseek_v2.py), so the 671B, without MTP, is what the preset counts. Kimi-K2: 1 trillion
/// parameters, 32B activated (its model card, figures rounded there).
#[test]
fn latent_attention_presets_count_their_published_parameters() {
    let deepseek = ModelSpec::preset("DeepSeek-V3").unwrap();
    // The routers' score-correction biases (256 per expert layer) are left out, as Qwen3's q/k
    // norms are above.
    assert_eq!(deepseek.param_count(), 671_026_404_352);
    assert!((deepseek.param_count() as f64 / 671e9 - 1.0).abs() < 0.001, "{}", deepseek.param_count());
    assert!((deepseek.active_param_count() as f64 / 37e9 - 1.0).abs() < 0.02, "{}", deepseek.active_param_count());
    let kimi = ModelSpec::preset("Kimi-K2").unwrap();
    assert!((kimi.param_count() as f64 / 1e12 - 1.0).abs() < 0.03, "{}", kimi.param_count());
    assert!((kimi.active_param_count() as f64 / 32e9 - 1.0).abs() < 0.03, "{}", kimi.active_param_count());
    // One layer's attention: q_a 7168 × 1536, kv_a 7168 × 576, q_b 1536 × 128 × 192,
    // kv_b 512 × 128 × 256, o 128 × 128 × 7168, and the latents' norms 1536 + 512.
    let mla = deepseek.mla.unwrap();
    assert_eq!(mla.weight_elements(7168, 128), 187_107_328);
    // A GPU holds 1/8 of q_b, kv_b and o at TP 8, all of q_a and kv_a.
    let per_gpu = 7168 * 2112 + 1536 * 16 * 192 + 512 * 16 * 256 + 16 * 128 * 7168 + 2048;
    assert_eq!(mla.weight_elements(7168, 16), per_gpu);
}

/// vLLM caches one latent of kv_lora_rank + qk_rope_head_dim per token and layer, whole on
/// every tensor-parallel rank (`get_num_kv_heads` is 1 for MLA, vllm/config/model.py;
/// `MLAAttentionSpec.real_page_size_bytes`, vllm/v1/kv_cache_interface.py): 61 × 576 × 2.
#[test]
fn latent_attention_caches_one_latent_per_token_on_every_gpu() {
    let mut deepseek = ModelSpec::preset("DeepSeek-V3").unwrap();
    for tp in [1, 8, 16] {
        assert_eq!(deepseek.kv_bytes_per_token_per_gpu(tp), 70_272);
    }
    deepseek.kv_dtype = Dtype::Fp8;
    assert_eq!(deepseek.kv_bytes_per_token_per_gpu(8), 35_136);
    // Grouped-query attention of the same heads would cache 61 × 128 × 192 × 2 × 2 per token.
    let as_gqa = ModelSpec { mla: None, kv_dtype: Dtype::Bf16, ..deepseek.clone() };
    assert_eq!(as_gqa.kv_bytes_per_token_per_gpu(1), 5_996_544);
}

/// DeepSeek-V3 served as shipped (fp8) on 8 GPUs: its weights per GPU, by hand. Every GPU holds
/// the replicated MLA down-projections; the rest of the linear weights split 8 ways.
#[test]
fn deepseek_v3_fp8_weights_per_gpu() {
    let mut deepseek = ModelSpec::preset("DeepSeek-V3").unwrap();
    deepseek.weight_dtype = Dtype::Fp8;
    let h: u64 = 7168;
    let attention = 61 * (7168 * 2112 + 1536 * 16 * 192 + 512 * 16 * 256 + 16 * 128 * h + 2048);
    let dense = 3 * 3 * h * (18432 / 8);
    let experts = 58 * (h * 256 + 3 * h * 256 * (2048 / 8) + 3 * h * (2048 / 8));
    let vocab_rows = 129_280 / 8;
    let norms = (2 * 61 + 1) * h;
    let bytes = attention + dense + experts + 2 * (2 * vocab_rows * h + norms);
    assert_eq!(deepseek.weight_bytes_per_gpu(8), bytes);
    let gb = bytes as f64 / 1e9;
    assert!((83.0..86.0).contains(&gb), "{gb}");
}
