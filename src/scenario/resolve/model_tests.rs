//! `[model]`: presets, explicit dimensions, dtypes and Hugging Face configs.

use crate::scenario::{Dtype, Scenario};
use crate::scenario::resolve::test_support::{good, good_text};

#[test]
fn explicit_fields_override_a_preset() {
    let s = good(&[
        "model.num_layers=16",
        "model.name=half-llama",
        "hardware.memory_gib=40",
    ]);
    assert_eq!(
        (
            s.model.num_layers,
            s.model.hidden_size,
            s.model.name.as_str()
        ),
        (16, 4096, "half-llama")
    );
    assert_eq!(s.hardware.gpu.memory_bytes, 40 << 30);
    assert_eq!(s.hardware.gpu.memory_bandwidth_bytes_per_s, 3.35e12);
}

#[test]
fn fp8_on_a_gpu_without_fp8_is_fine() {
    let s = good(&["model.dtype=fp8", "hardware.gpu=A100-80G-SXM"]);
    assert_eq!(
        (s.model.weight_dtype, s.model.kv_dtype),
        (Dtype::Fp8, Dtype::Bf16)
    );
    let s = good(&["model.kv_cache_dtype=fp8_e4m3"]);
    assert_eq!(s.model.kv_dtype, Dtype::Fp8);
}

#[test]
fn hf_config_file_loads_relative_to_the_scenario() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("my-model")).unwrap();
    std::fs::write(
        dir.path().join("my-model/config.json"),
        r#"{"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 32, "hidden_size": 4096,
            "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336,
            "vocab_size": 128256, "max_position_embeddings": 131072, "tie_word_embeddings": false,
            "torch_dtype": "bfloat16", "rope_theta": 500000.0}"#,
    )
    .unwrap();
    let scenario = dir.path().join("s.toml");
    std::fs::write(
        &scenario,
        good_text().replace(
            "preset = \"Llama-3.1-8B\"",
            "hf_config = \"my-model/config.json\"",
        ),
    )
    .unwrap();
    let s = Scenario::load(&scenario, &[]).unwrap();
    let preset = crate::scenario::ModelSpec::preset("Llama-3.1-8B").unwrap();
    assert_eq!(s.model.name, "my-model");
    assert_eq!(s.model.param_count(), preset.param_count());
    assert_eq!(s.model.head_dim, 128);

    // A missing key names the config file and the key.
    std::fs::write(
        dir.path().join("my-model/config.json"),
        r#"{"num_hidden_layers": 32}"#,
    )
    .unwrap();
    let err = Scenario::load(&scenario, &[]).unwrap_err().to_string();
    assert!(
        err.contains("s.toml") && err.contains("`model.hf_config`") && err.contains("config.json"),
        "{err}"
    );
    assert!(err.contains("missing key `hidden_size`"), "{err}");
}

#[test]
fn mixture_of_experts_from_a_preset_or_explicit_fields() {
    let mixtral = ["model.preset=Mixtral-8x7B", "engine.tensor_parallel=2"];
    let s = good(&mixtral);
    let moe = s.model.moe.expect("experts");
    assert_eq!((moe.num_experts, moe.experts_per_token, moe.expert_ffn_size, moe.expert_parallel), (8, 2, 14336, false));
    assert_eq!(s.model.ffn_size, 0);
    let s = good(&[mixtral[0], mixtral[1], "engine.expert_parallel=true", "model.expert_routing_skew=0.5"]);
    let moe = s.model.moe.expect("experts");
    assert!(moe.expert_parallel && moe.routing_skew == 0.5);
    // Explicit fields make a dense preset a mixture of experts, its ffn_size the shared experts.
    let s = good(&["model.num_experts=16", "model.experts_per_token=2", "model.expert_ffn_size=1024", "model.ffn_size=2048"]);
    assert_eq!((s.model.moe.map(|m| m.num_experts), s.model.ffn_size), (Some(16), 2048));
    // And num_experts = 0 makes it dense again (needing a dense MLP).
    let s = good(&["model.preset=Qwen3-30B-A3B", "model.num_experts=0", "model.ffn_size=6144"]);
    assert!(s.model.moe.is_none());
}

#[test]
fn mixture_of_experts_errors_name_the_field() {
    use crate::scenario::resolve::test_support::invalid;
    let mixtral = "model.preset=Mixtral-8x7B";
    invalid(&[mixtral, "engine.tensor_parallel=2", "model.experts_per_token=9"], "model.experts_per_token", "9");
    invalid(&[mixtral, "engine.tensor_parallel=2", "model.expert_routing_skew=-1"], "model.expert_routing_skew", "-1");
    invalid(&["model.num_experts=16", "model.experts_per_token=2"], "model.expert_ffn_size", "(missing)");
    invalid(&["model.expert_routing_skew=1"], "model.expert_routing_skew", "1");
    invalid(&["engine.expert_parallel=true"], "engine.expert_parallel", "true");
    let msg = invalid(
        &["model.preset=Qwen3-30B-A3B", "engine.tensor_parallel=4", "hardware.count=4", "engine.expert_parallel=true", "model.num_experts=126"],
        "engine.expert_parallel",
        "true",
    );
    assert!(msg.contains("126 experts"), "{msg}");
    let msg = invalid(&[mixtral, "engine.tensor_parallel=2", "engine.policy=tgi", "engine.expert_parallel=true"], "engine.expert_parallel", "true");
    assert!(msg.contains("TGI"), "{msg}");
    // Made dense with no dense MLP: the field written is blamed, not the ffn_size left out.
    let msg = invalid(&[mixtral, "engine.tensor_parallel=2", "model.num_experts=0"], "model.num_experts", "0");
    assert!(msg.contains("set model.ffn_size too"), "{msg}");
}
