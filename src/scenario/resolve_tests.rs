//! Unit tests of scenario loading: defaults, overrides, and one test per kind of bad input, each
//! checking that the error names the file, the field and the value.

use crate::scenario::{Dataset, Dtype, LengthDist, Policy, Router, Scenario, ScenarioError};
use std::path::Path;

const FILE: &str = "scenarios/t.toml";

const HEAD: &str = r#"
name = "test"

[model]
preset = "Llama-3.1-8B"

[hardware]
gpu = "H100-SXM"

[engine]
policy = "vllm-v1"

[workload]
num_prompts = [10, 20]
request_rate = 4.0
"#;

const SHAREGPT: &str = r#"
[workload.dataset]
kind = "sharegpt"
input = { dist = "lognormal", mean = 220, std = 250, min = 4, max = 2048 }
output = { dist = "lognormal", mean = 200, std = 200, min = 1, max = 1024 }
"#;

fn with_dataset(dataset: &str) -> String {
    format!("{HEAD}\n[workload.dataset]\n{dataset}\n")
}

fn good_text() -> String {
    format!("{HEAD}{SHAREGPT}")
}

fn load_text(text: &str, sets: &[&str]) -> Result<Scenario, ScenarioError> {
    let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
    Scenario::from_toml_str(text, Path::new(FILE), &sets)
}

fn good(sets: &[&str]) -> Scenario {
    load_text(&good_text(), sets).unwrap_or_else(|e| panic!("{sets:?}: {e}"))
}

/// Asserts loading fails with an `Invalid` error on `field` whose value reads `value`, and that
/// the message names the file, the field and the value. Returns the message.
fn invalid_in(text: &str, sets: &[&str], field: &str, value: &str) -> String {
    let err = match load_text(text, sets) {
        Ok(_) => panic!("{sets:?} should fail on {field}"),
        Err(e) => e,
    };
    let msg = err.to_string();
    match &err {
        ScenarioError::Invalid {
            file,
            field: f,
            value: v,
            ..
        } => {
            assert_eq!(file, Path::new(FILE), "{msg}");
            assert_eq!(f, field, "{msg}");
            assert_eq!(v, value, "{msg}");
        }
        other => panic!("{sets:?}: expected Invalid on {field}, got {other:?}"),
    }
    assert!(
        msg.contains(FILE) && msg.contains(&format!("`{field}`")) && msg.contains(value),
        "{msg}"
    );
    msg
}

fn invalid(sets: &[&str], field: &str, value: &str) -> String {
    invalid_in(&good_text(), sets, field, value)
}

// ---- good scenarios ------------------------------------------------------------------------------

#[test]
fn good_scenario_resolves_with_v1_defaults() {
    let s = good(&[]);
    assert_eq!(s.name, "test");
    assert_eq!(s.path, Path::new(FILE));
    assert_eq!(s.model.name, "Llama-3.1-8B");
    assert_eq!(
        (s.model.weight_dtype, s.model.kv_dtype),
        (Dtype::Bf16, Dtype::Bf16)
    );
    assert_eq!(s.hardware.gpu.name, "H100-SXM");
    assert_eq!(s.hardware.count, 1);
    let e = &s.engine;
    assert_eq!(e.policy, Policy::VllmV1);
    assert_eq!(
        (e.tensor_parallel, e.replicas, e.router),
        (1, 1, Router::RoundRobin)
    );
    assert!(e.enable_chunked_prefill);
    assert_eq!(
        (e.max_num_batched_tokens, e.max_num_seqs, e.block_size),
        (2048, 256, 16)
    );
    assert_eq!((e.gpu_memory_utilization, e.watermark), (0.9, 0.0));
    assert_eq!(e.max_model_len, 131072);
    // 2048 tokens × (4·4096 + 48·128 + 3·14336) × 2 B + 256 × 128256 × 4 B × 3 + 1 GiB.
    assert_eq!(
        e.activation_reserve_bytes,
        268_435_456 + 394_002_432 + (1 << 30)
    );
    // floor((85,520,809,984 × 0.9 − 16,060,522,496 − 1,736,179,712) / (16 × 131,072)) = 28,215:
    // 451,440 tokens (vLLM 0.8 logs ~450k tokens for this model on one H100).
    assert_eq!(e.num_gpu_blocks, 28_215);
    let c = &s.cost;
    assert_eq!(
        (
            c.gemm_efficiency,
            c.attention_efficiency,
            c.memory_bandwidth_efficiency
        ),
        (0.7, 0.5, 0.8)
    );
    let w = &s.workload;
    assert_eq!(w.num_prompts, vec![10, 20]);
    assert_eq!(
        (w.request_rate, w.burstiness, w.max_concurrency, w.seed),
        (4.0, 1.0, None, 0)
    );
    assert_eq!(
        w.dataset,
        Dataset::ShareGpt {
            input: LengthDist::LogNormal {
                mean: 220.0,
                std: 250.0,
                min: 4,
                max: 2048
            },
            output: LengthDist::LogNormal {
                mean: 200.0,
                std: 200.0,
                min: 1,
                max: 1024
            },
        }
    );
}

#[test]
fn name_defaults_to_file_stem_and_engine_section_is_optional() {
    let text = good_text()
        .replace("name = \"test\"", "")
        .replace("[engine]\npolicy = \"vllm-v1\"", "");
    let s = load_text(&text, &[]).unwrap();
    assert_eq!(s.name, "t");
    assert_eq!(s.engine.policy, Policy::VllmV1);
}

#[test]
fn vllm_v0_defaults_for_the_recorded_405b_run() {
    let s = good(&[
        "model.preset=Llama-3.1-405B",
        "hardware.gpu=MI300X",
        "engine.policy=vllm-v0",
        "engine.tensor_parallel=8",
    ]);
    let e = &s.engine;
    assert_eq!(s.hardware.count, 8);
    assert!(
        e.enable_chunked_prefill,
        "max_model_len 131072 > 32768 turns chunked prefill on"
    );
    assert_eq!(
        (e.max_num_batched_tokens, e.max_num_seqs, e.watermark),
        (512, 256, 0.01)
    );
    assert_eq!(s.model.kv_bytes_per_token_per_gpu(8), 64_512);
    let kv_tokens = e.num_gpu_blocks as u64 * 16;
    assert!((1_000_000..1_400_000).contains(&kv_tokens), "{kv_tokens}");
}

#[test]
fn vllm_v0_short_context_turns_chunked_prefill_off() {
    let s = good(&["engine.policy=vllm-v0", "engine.max_model_len=8192"]);
    assert!(!s.engine.enable_chunked_prefill);
    assert_eq!(s.engine.max_num_batched_tokens, 8192);
    let s = good(&[
        "engine.policy=vllm-v0",
        "engine.max_model_len=1024",
        "workload.dataset.input.max=500",
        "workload.dataset.output.max=500",
    ]);
    assert_eq!(
        s.engine.max_num_batched_tokens, 2048,
        "max(max_model_len, 2048)"
    );
    let s = good(&["engine.policy=vllm-v0", "model.preset=Qwen2.5-7B"]);
    assert_eq!(
        (s.engine.max_model_len, s.engine.enable_chunked_prefill),
        (32768, false)
    );
    assert_eq!(s.engine.max_num_batched_tokens, 32768);
    let s = good(&[
        "engine.policy=vllm-v0",
        "engine.enable_chunked_prefill=true",
        "engine.max_model_len=8192",
    ]);
    assert_eq!(
        (
            s.engine.enable_chunked_prefill,
            s.engine.max_num_batched_tokens
        ),
        (true, 512)
    );
}

#[test]
fn set_overrides() {
    let s = good(&["engine.max_num_seqs=128"]);
    assert_eq!(s.engine.max_num_seqs, 128);
    let s = good(&["workload.num_prompts=[1,2]"]);
    assert_eq!(s.workload.num_prompts, vec![1, 2]);
    let s = good(&["workload.num_prompts=7"]);
    assert_eq!(s.workload.num_prompts, vec![7]);
    let s = good(&["workload.request_rate=inf"]);
    assert_eq!(s.workload.request_rate, f64::INFINITY);
    // Not TOML, so taken as a string.
    let s = good(&["model.preset=Llama-3.2-1B"]);
    assert_eq!(s.model.name, "Llama-3.2-1B");
    // Creates missing tables.
    let s = good(&[
        "cost.gemm_efficiency=0.5",
        "workload.seed=42",
        " engine.router = least-outstanding ",
    ]);
    assert_eq!((s.cost.gemm_efficiency, s.workload.seed), (0.5, 42));
    assert_eq!(s.engine.router, Router::LeastOutstanding);
    let s = good(&["workload.dataset.output={ dist = \"fixed\", value = 5 }"]);
    assert!(matches!(
        s.workload.dataset,
        Dataset::ShareGpt {
            output: LengthDist::Fixed { value: 5 },
            ..
        }
    ));
}

#[test]
fn request_rate_inf_as_toml_float_and_string() {
    let text = good_text().replace("request_rate = 4.0", "request_rate = inf");
    assert_eq!(
        load_text(&text, &[]).unwrap().workload.request_rate,
        f64::INFINITY
    );
    let text = good_text().replace("request_rate = 4.0", "request_rate = \"inf\"");
    assert_eq!(
        load_text(&text, &[]).unwrap().workload.request_rate,
        f64::INFINITY
    );
    let text = good_text().replace("request_rate = 4.0", "request_rate = 3");
    assert_eq!(load_text(&text, &[]).unwrap().workload.request_rate, 3.0);
    let text = good_text().replace("request_rate = 4.0\n", "");
    assert_eq!(
        load_text(&text, &[]).unwrap().workload.request_rate,
        f64::INFINITY
    );
}

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
fn fully_explicit_model_and_gpu() {
    let text = good_text()
        .replace(
            "preset = \"Llama-3.1-8B\"",
            "num_layers = 2\nhidden_size = 256\nnum_heads = 4\nnum_kv_heads = 2\nffn_size = 512\n\
             vocab_size = 1000\nmax_position_embeddings = 4096\ndtype = \"fp16\"",
        )
        .replace(
            "gpu = \"H100-SXM\"",
            "name = \"toy\"\npeak_tflops_16bit = 10\nmemory_gib = 4\nmemory_bandwidth_gbps = 100\n\
             interconnect_gbps = 10",
        );
    let s = load_text(&text, &[]).unwrap();
    assert_eq!(
        (
            s.model.name.as_str(),
            s.model.head_dim,
            s.model.tied_embeddings
        ),
        ("custom", 64, false)
    );
    assert_eq!(
        (s.model.weight_dtype, s.model.kv_dtype),
        (Dtype::Fp16, Dtype::Fp16)
    );
    assert_eq!(
        (s.hardware.gpu.name.as_str(), s.hardware.gpu.peak_flops_fp8),
        ("toy", None)
    );
    assert_eq!(s.hardware.gpu.peak_flops_16bit, 10e12);
    // A field left out of an explicit GPU is an error naming it.
    let text = text.replace("memory_bandwidth_gbps = 100\n", "");
    invalid_in(&text, &[], "hardware.memory_bandwidth_gbps", "(missing)");
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
fn other_dataset_kinds() {
    let s = load_text(
        &with_dataset("kind = \"fixed\"\ninput_len = 100\noutput_len = 10"),
        &[],
    )
    .unwrap();
    assert_eq!(
        s.workload.dataset,
        Dataset::Fixed {
            input_len: 100,
            output_len: 10
        }
    );
    let s = load_text(&with_dataset("kind = \"random\"\nrange_ratio = 0.5"), &[]).unwrap();
    assert_eq!(
        s.workload.dataset,
        Dataset::Random {
            input_len: 1024,
            output_len: 128,
            range_ratio: 0.5,
            prefix_len: 0
        }
    );
    let s = load_text(
        &with_dataset("kind = \"sonnet\"\ninput_len = 80\nprefix_len = 50\noutput_len = 150"),
        &[],
    )
    .unwrap();
    assert_eq!(
        s.workload.dataset,
        Dataset::Sonnet {
            input_len: 80,
            prefix_len: 50,
            output: LengthDist::Fixed { value: 150 }
        }
    );
    let s = load_text(
        &with_dataset("kind = \"sonnet\"\ninput_len = 80\nprefix_len = 50\noutput = { dist = \"uniform\", min = 1, max = 150 }"),
        &[],
    )
    .unwrap();
    assert!(matches!(
        s.workload.dataset,
        Dataset::Sonnet {
            output: LengthDist::Uniform { min: 1, max: 150 },
            ..
        }
    ));
}

#[test]
fn trace_dataset_loads_relative_to_the_scenario() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("traces")).unwrap();
    std::fs::write(
        dir.path().join("traces/t.csv"),
        "arrival_s,input_tokens,output_tokens\n0.0,100,10\n0.5,200,20\n1.0,300,30\n",
    )
    .unwrap();
    let scenario = dir.path().join("s.toml");
    std::fs::write(
        &scenario,
        with_dataset("kind = \"trace\"\npath = \"traces/t.csv\"")
            .replace("num_prompts = [10, 20]\n", ""),
    )
    .unwrap();
    let s = Scenario::load(&scenario, &[]).unwrap();
    let Dataset::Trace { path, rows } = &s.workload.dataset else {
        panic!()
    };
    assert_eq!(path, &dir.path().join("traces/t.csv"));
    assert_eq!(rows.len(), 3);
    assert_eq!(
        s.workload.num_prompts,
        vec![3],
        "defaults to the whole trace"
    );

    // More prompts than rows.
    let err = Scenario::load(&scenario, &["workload.num_prompts=4".into()]).unwrap_err();
    assert!(
        err.to_string().contains("`workload.num_prompts` = 4"),
        "{err}"
    );

    // The first row longer than max_model_len is named.
    let err = Scenario::load(&scenario, &["engine.max_model_len=200".into()])
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("s.toml")
            && err.contains("`workload.dataset.path`")
            && err.contains("\"traces/t.csv\""),
        "{err}"
    );
    assert!(
        err.contains("request 2") && err.contains("220 tokens") && err.contains("(200)"),
        "{err}"
    );

    // A broken trace: the trace reader's error, against the field.
    std::fs::write(dir.path().join("traces/t.csv"), "time,a,b\n").unwrap();
    let err = Scenario::load(&scenario, &[]).unwrap_err().to_string();
    assert!(
        err.contains("`workload.dataset.path`") && err.contains("header"),
        "{err}"
    );
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
fn missing_file_is_an_io_error_naming_it() {
    let err = Scenario::load(Path::new("/nonexistent/x.toml"), &[]).unwrap_err();
    assert!(matches!(err, ScenarioError::Io { .. }));
    assert!(err.to_string().contains("/nonexistent/x.toml"), "{err}");
}

// ---- bad input -----------------------------------------------------------------------------------

#[test]
fn unknown_cost_parameter_names_the_field_and_the_known_ones() {
    let text = format!("{}\n[cost]\nbogus_knob = 1\n", good_text());
    let msg = load_text(&text, &[]).unwrap_err().to_string();
    assert!(msg.contains(FILE) && msg.contains("cost.bogus_knob") && msg.contains("gemm_efficiency"), "{msg}");
    let text = format!("{}\n[cost]\ngemm_efficiency = 1.5\n", good_text());
    let msg = load_text(&text, &[]).unwrap_err().to_string();
    assert!(msg.contains("cost.gemm_efficiency") && msg.contains("1.5"), "{msg}");
}

#[test]
fn unknown_key_is_a_parse_error_naming_key_and_line() {
    let text = good_text().replacen("[workload]", "[workload]\nbogus_knob = 1", 1);
    let err = load_text(&text, &[]).unwrap_err();
    assert!(matches!(err, ScenarioError::Parse { .. }), "{err:?}");
    let msg = err.to_string();
    assert!(
        msg.contains(FILE) && msg.contains("bogus_knob") && msg.contains("line"),
        "{msg}"
    );

    // Through --set: the error names the dotted table instead of a line.
    let msg = load_text(&good_text(), &["engine.bogus=1"])
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains(FILE) && msg.contains("bogus") && msg.contains("engine"),
        "{msg}"
    );
}

#[test]
fn wrong_type_is_a_parse_error_naming_key_and_value() {
    let text = good_text().replace(
        "policy = \"vllm-v1\"",
        "policy = \"vllm-v1\"\nmax_num_seqs = \"many\"",
    );
    let msg = load_text(&text, &[]).unwrap_err().to_string();
    assert!(
        msg.contains(FILE) && msg.contains("max_num_seqs") && msg.contains("many"),
        "{msg}"
    );
    let msg = load_text(&good_text(), &["engine.max_num_seqs=-4"])
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("engine.max_num_seqs") && msg.contains("-4"),
        "{msg}"
    );
}

#[test]
fn malformed_override() {
    invalid(&["engine.max_num_seqs"], "--set", "\"engine.max_num_seqs\"");
    invalid(&["engine..x=1"], "--set", "\"engine..x=1\"");
    let msg = invalid(&["name.x=1"], "--set", "\"name.x=1\"");
    assert!(msg.contains("`name` is not a table"), "{msg}");
}

#[test]
fn unknown_names() {
    let msg = invalid(&["model.preset=GPT-5"], "model.preset", "\"GPT-5\"");
    assert!(
        msg.contains("Llama-3.1-8B") && msg.contains("Mistral-7B"),
        "{msg}"
    );
    let msg = invalid(&["hardware.gpu=TPU-v5"], "hardware.gpu", "\"TPU-v5\"");
    assert!(msg.contains("H100-SXM") && msg.contains("B200"), "{msg}");
    invalid(&["engine.policy=sglang"], "engine.policy", "\"sglang\"");
    invalid(&["engine.router=random"], "engine.router", "\"random\"");
    invalid(&["model.dtype=int4"], "model.dtype", "\"int4\"");
    invalid(
        &["model.kv_cache_dtype=int2"],
        "model.kv_cache_dtype",
        "\"int2\"",
    );
    invalid(
        &["workload.dataset.kind=alpaca"],
        "workload.dataset.kind",
        "\"alpaca\"",
    );
    invalid(
        &["workload.dataset.output={ dist = \"zipf\", max = 5 }"],
        "workload.dataset.output.dist",
        "\"zipf\"",
    );
    invalid(
        &["model.hf_config=x/config.json"],
        "model.hf_config",
        "\"x/config.json\"",
    );
}

#[test]
fn bad_num_prompts() {
    invalid(&["workload.num_prompts=[]"], "workload.num_prompts", "[]");
    invalid(&["workload.num_prompts=0"], "workload.num_prompts", "0");
    invalid(
        &["workload.num_prompts=[5, -1]"],
        "workload.num_prompts",
        "[5, -1]",
    );
}

#[test]
fn bad_request_rate_and_burstiness() {
    invalid(&["workload.request_rate=-1"], "workload.request_rate", "-1");
    invalid(&["workload.request_rate=0"], "workload.request_rate", "0");
    invalid(
        &["workload.request_rate=nan"],
        "workload.request_rate",
        "NaN",
    );
    invalid(
        &["workload.request_rate=fast"],
        "workload.request_rate",
        "\"fast\"",
    );
    invalid(&["workload.burstiness=0"], "workload.burstiness", "0");
    invalid(&["workload.burstiness=-2.5"], "workload.burstiness", "-2.5");
    invalid(
        &["workload.max_concurrency=0"],
        "workload.max_concurrency",
        "0",
    );
}

#[test]
fn bad_parallelism_and_gpu_count() {
    invalid(&["engine.tensor_parallel=0"], "engine.tensor_parallel", "0");
    let msg = invalid(&["engine.tensor_parallel=3"], "engine.tensor_parallel", "3");
    assert!(msg.contains("num_heads (32)"), "{msg}");
    // Llama-3.2-3B: 24 heads (3 divides them), 8 KV heads (3 neither divides nor is divisible).
    let msg = invalid(
        &["model.preset=Llama-3.2-3B", "engine.tensor_parallel=3"],
        "engine.tensor_parallel",
        "3",
    );
    assert!(msg.contains("num_kv_heads (8)"), "{msg}");
    invalid(&["engine.replicas=0"], "engine.replicas", "0");
    let msg = invalid(
        &[
            "engine.tensor_parallel=2",
            "engine.replicas=2",
            "hardware.count=3",
        ],
        "hardware.count",
        "3",
    );
    assert!(msg.contains("2 × 2 = 4"), "{msg}");
}

#[test]
fn bad_engine_limits() {
    invalid(
        &["engine.gpu_memory_utilization=0"],
        "engine.gpu_memory_utilization",
        "0",
    );
    invalid(
        &["engine.gpu_memory_utilization=1.5"],
        "engine.gpu_memory_utilization",
        "1.5",
    );
    invalid(&["engine.block_size=0"], "engine.block_size", "0");
    invalid(&["engine.max_num_seqs=0"], "engine.max_num_seqs", "0");
    invalid(
        &["engine.max_num_batched_tokens=0"],
        "engine.max_num_batched_tokens",
        "0",
    );
    invalid(&["engine.watermark=1"], "engine.watermark", "1");
    invalid(&["engine.num_gpu_blocks=0"], "engine.num_gpu_blocks", "0");
    let msg = invalid(
        &[
            "engine.policy=vllm-v0",
            "engine.max_model_len=8192",
            "engine.max_num_batched_tokens=4096",
        ],
        "engine.max_num_batched_tokens",
        "4096",
    );
    assert!(msg.contains("max_model_len (8192)"), "{msg}");
    invalid(
        &["engine.max_num_batched_tokens=128"],
        "engine.max_num_batched_tokens",
        "128",
    );
    let msg = invalid(
        &["engine.max_model_len=200000"],
        "engine.max_model_len",
        "200000",
    );
    assert!(msg.contains("131072"), "{msg}");
    invalid(
        &["engine.enable_chunked_prefill=false"],
        "engine.enable_chunked_prefill",
        "false",
    );
}

#[test]
fn model_that_does_not_fit() {
    let msg = invalid(
        &["model.preset=Llama-3.1-70B"],
        "engine.tensor_parallel",
        "1",
    );
    assert!(
        msg.contains("model weights need 131.") && msg.contains("short by"),
        "{msg}"
    );
    assert!(msg.contains("tensor_parallel = 2 would fit"), "{msg}");
    let msg = invalid(&["hardware.memory_gib=0.1"], "hardware", "\"H100-SXM\"");
    assert!(
        msg.contains("short by") && msg.contains("no tensor_parallel fits"),
        "{msg}"
    );
}

#[test]
fn kv_cache_smaller_than_one_sequence() {
    let msg = invalid(
        &["engine.gpu_memory_utilization=0.215"],
        "engine.max_model_len",
        "131072",
    );
    assert!(msg.contains("tokens per replica"), "{msg}");
    let msg = invalid(
        &["engine.num_gpu_blocks=100"],
        "engine.max_model_len",
        "131072",
    );
    assert!(msg.contains("only 1600 tokens"), "{msg}");
    // Nothing left at all after weights and activations.
    let msg = invalid(
        &["engine.gpu_memory_utilization=0.2"],
        "engine.gpu_memory_utilization",
        "0.2",
    );
    assert!(msg.contains("no memory left for the KV cache"), "{msg}");
}

#[test]
fn bad_length_distributions() {
    invalid(
        &["workload.dataset.input={ dist = \"uniform\", min = 10, max = 5 }"],
        "workload.dataset.input.min",
        "10",
    );
    invalid(
        &["workload.dataset.output={ dist = \"lognormal\", mean = 5, std = 1, min = 0, max = 10 }"],
        "workload.dataset.output.min",
        "0",
    );
    invalid(
        &["workload.dataset.output={ dist = \"normal\", mean = 5, std = 1 }"],
        "workload.dataset.output.max",
        "(missing)",
    );
    invalid(
        &["workload.dataset.output=0"],
        "workload.dataset.output",
        "0",
    );
    invalid(
        &["workload.dataset.input_len=5"],
        "workload.dataset.input_len",
        "5",
    );
    let random = with_dataset("kind = \"random\"\ninput_len = 100\noutput_len = 10");
    invalid_in(
        &random,
        &["workload.dataset.range_ratio=1.0"],
        "workload.dataset.range_ratio",
        "1",
    );
    invalid_in(
        &random,
        &["workload.dataset.range_ratio=-0.1"],
        "workload.dataset.range_ratio",
        "-0.1",
    );
}

#[test]
fn request_longer_than_max_model_len() {
    let fixed = with_dataset("kind = \"fixed\"\ninput_len = 4000\noutput_len = 200");
    let msg = invalid_in(
        &fixed,
        &["engine.max_model_len=4096"],
        "workload.dataset.input_len",
        "4000",
    );
    assert!(
        msg.contains("4000 + output 200 = 4200") && msg.contains("(4096)"),
        "{msg}"
    );
    let msg = invalid(
        &["engine.max_model_len=2048"],
        "workload.dataset.input.max",
        "2048",
    );
    assert!(msg.contains("2048 + output 1024 = 3072"), "{msg}");
    let random = with_dataset(
        "kind = \"random\"\ninput_len = 1000\noutput_len = 100\nrange_ratio = 0.5\nprefix_len = 10",
    );
    let msg = invalid_in(
        &random,
        &["engine.max_model_len=1600"],
        "workload.dataset.input_len",
        "1510",
    );
    assert!(msg.contains("1510 + output 150 = 1660"), "{msg}");
    let sonnet = with_dataset(
        "kind = \"sonnet\"\ninput_len = 1000\noutput = { dist = \"uniform\", min = 1, max = 200 }",
    );
    invalid_in(
        &sonnet,
        &["engine.max_model_len=1100"],
        "workload.dataset.input_len",
        "1000",
    );
}

#[test]
fn quickstart_scenario_loads() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/quickstart.toml");
    let s = Scenario::load(&path, &[]).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(s.name, "quickstart");
    assert_eq!(s.workload.num_prompts, vec![200, 1000]);
    assert_eq!(s.engine.num_gpu_blocks, 28_215);
}

// ---- policy "tgi" --------------------------------------------------------------------------------

#[test]
fn tgi_defaults() {
    let s = good(&["engine.policy=tgi"]);
    let e = &s.engine;
    assert_eq!(e.policy, Policy::Tgi);
    let tgi = e.tgi.expect("tgi limits");
    // Llama-3.1-8B's max_position_embeddings 131072 is capped at 4096 by TGI 2.3's launcher.
    assert_eq!((tgi.max_input_tokens, tgi.max_total_tokens), (4095, 4096));
    assert_eq!(tgi.max_batch_prefill_tokens, 4095 + 50);
    assert_eq!(
        (
            tgi.waiting_served_ratio,
            tgi.max_waiting_tokens,
            tgi.max_concurrent_requests
        ),
        (0.3, 20, 128)
    );
    // The scheduler's generic knobs say what TGI does: the prefill budget padded to whole blocks,
    // no cap on the batch, no chunking, no watermark, sequences up to max_total_tokens.
    assert_eq!((e.max_num_batched_tokens, e.max_num_seqs), (4160, u32::MAX));
    assert!(!e.enable_chunked_prefill);
    assert_eq!(
        (e.watermark, e.max_model_len, e.block_size),
        (0.0, 4096, 16)
    );
    // CUDA_MEMORY_FRACTION 1.0.
    assert_eq!(e.gpu_memory_utilization, 1.0);
    // Warm-up: 4145 tokens × 131,072 B of activations + 2 × 4145 × 128,256 × 2 B of prefill logits
    // and their log-softmax + 1 GiB.
    assert_eq!(
        e.activation_reserve_bytes,
        543_293_440 + 2_126_484_480 + (1 << 30)
    );
    // Two warm-up requests hold ⌈4095 / 16⌉ = 256 blocks each. KV blocks =
    // ⌊0.95 × (85,520,809,984 − 16,060,522,496 − 3,743,519,744 − 512 × 2,097,152) / 2,097,152⌋ + 512.
    assert_eq!(e.num_gpu_blocks, 29_282 + 512);
    assert_eq!(tgi.max_batch_total_tokens, 29_794 * 16);
}

#[test]
fn tgi_as_the_recorded_405b_run_was_launched() {
    // `--num-shard 8 --max-concurrent-requests 8192 --max-total-tokens 130000 --max-input-tokens 125000`
    let s = good(&[
        "model.preset=Llama-3.1-405B",
        "hardware.gpu=MI300X",
        "engine.policy=tgi",
        "engine.tensor_parallel=8",
        "engine.max_concurrent_requests=8192",
        "engine.max_total_tokens=130000",
        "engine.max_input_tokens=125000",
    ]);
    let e = &s.engine;
    let tgi = e.tgi.unwrap();
    assert_eq!(
        (tgi.max_batch_prefill_tokens, e.max_num_batched_tokens),
        (125_050, 125_056)
    );
    assert_eq!(tgi.max_concurrent_requests, 8192);
    // The warm-up's 125,050-token prefill with log-probs leaves far less KV than vLLM gets: its
    // logits alone take 2 × 125,050 × 128,256 × 2 B = 64 GB per GPU. Two warm-up requests hold
    // ⌈129,999 / 16⌉ = 8,125 blocks each, which count in full.
    assert!(e.num_gpu_blocks > 2 * 8_125, "{}", e.num_gpu_blocks);
    let kv_tokens = tgi.max_batch_total_tokens;
    assert_eq!(kv_tokens, e.num_gpu_blocks * 16);
    assert!((130_000..400_000).contains(&kv_tokens), "{kv_tokens}");
}

#[test]
fn tgi_pinned_kv_capacity() {
    let s = good(&["engine.policy=tgi", "engine.max_batch_total_tokens=160000"]);
    assert_eq!(
        (
            s.engine.num_gpu_blocks,
            s.engine.tgi.unwrap().max_batch_total_tokens
        ),
        (10_000, 160_000)
    );
    let s = good(&["engine.policy=tgi", "engine.num_gpu_blocks=1000"]);
    assert_eq!(s.engine.tgi.unwrap().max_batch_total_tokens, 16_000);
}

#[test]
fn bad_tgi_limits() {
    fn tgi(set: &str) -> [&str; 2] {
        ["engine.policy=tgi", set]
    }
    let msg = invalid(
        &tgi("engine.waiting_served_ratio=-1"),
        "engine.waiting_served_ratio",
        "-1",
    );
    assert!(msg.contains("≥ 0"), "{msg}");
    invalid(
        &tgi("engine.waiting_served_ratio=nan"),
        "engine.waiting_served_ratio",
        "NaN",
    );
    invalid(
        &tgi("engine.max_concurrent_requests=0"),
        "engine.max_concurrent_requests",
        "0",
    );
    invalid(
        &tgi("engine.max_input_tokens=0"),
        "engine.max_input_tokens",
        "0",
    );
    // max_total_tokens defaults to 4096, so a larger max_input_tokens alone is TGI's launcher error.
    let msg = invalid(
        &tgi("engine.max_input_tokens=5000"),
        "engine.max_input_tokens",
        "5000",
    );
    assert!(msg.contains("must be < max_total_tokens (4096)"), "{msg}");
    invalid(
        &tgi("engine.max_total_tokens=4095"),
        "engine.max_total_tokens",
        "4095",
    );
    let msg = invalid(
        &tgi("engine.max_batch_prefill_tokens=4000"),
        "engine.max_batch_prefill_tokens",
        "4000",
    );
    assert!(msg.contains(">= max_input_tokens (4095)"), "{msg}");
    invalid(
        &tgi("engine.max_batch_total_tokens=100001"),
        "engine.max_batch_total_tokens",
        "100001",
    );
    invalid(
        &tgi("engine.max_batch_total_tokens=4096"),
        "engine.max_batch_total_tokens",
        "4096",
    );
    let msg = invalid(
        &[
            "engine.policy=tgi",
            "engine.max_batch_total_tokens=16000",
            "engine.num_gpu_blocks=1000",
        ],
        "engine.max_batch_total_tokens",
        "16000",
    );
    assert!(msg.contains("num_gpu_blocks"), "{msg}");
    // A cache smaller than one max_total_tokens sequence: TGI's router refuses to start.
    let msg = invalid(
        &tgi("engine.num_gpu_blocks=100"),
        "engine.max_total_tokens",
        "4096",
    );
    assert!(
        msg.contains("1600 tokens") && msg.contains("Not enough memory"),
        "{msg}"
    );
    // No room for the warm-up prefill.
    let msg = invalid(
        &tgi("engine.gpu_memory_utilization=0.22"),
        "engine.max_batch_prefill_tokens",
        "4145",
    );
    assert!(msg.contains("warm-up"), "{msg}");
    // Each engine's own keys only.
    let msg = invalid(&tgi("engine.max_num_seqs=16"), "engine.max_num_seqs", "16");
    assert!(
        msg.contains("not used by policy \"tgi\"") && msg.contains("max_concurrent_requests"),
        "{msg}"
    );
    invalid(
        &tgi("engine.enable_chunked_prefill=false"),
        "engine.enable_chunked_prefill",
        "false",
    );
    let msg = invalid(
        &["engine.max_input_tokens=1000"],
        "engine.max_input_tokens",
        "1000",
    );
    assert!(msg.contains("not used by policy \"vllm-v1\""), "{msg}");
    invalid(
        &["engine.policy=vllm-v0", "engine.waiting_served_ratio=0.5"],
        "engine.waiting_served_ratio",
        "0.5",
    );
}
