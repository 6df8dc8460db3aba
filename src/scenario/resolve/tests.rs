//! Loading a whole scenario: defaults end to end, `--set` overrides, and errors from reading and parsing.

use crate::scenario::resolve::test_support::{FILE, good, good_text, invalid, load_text};
use crate::scenario::{Dataset, Dtype, LengthDist, Policy, Router, Scenario, ScenarioError};
use std::path::Path;

#[test]
fn good_scenario_resolves_with_v1_defaults() {
    // vLLM 0.8's defaults, which the figures below (and their comments) are of.
    let s = good(&["engine.version=0.8.5"]);
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
        (w.request_rate.clone(), w.burstiness, w.max_concurrency, w.seed),
        (vec![4.0, 4.0], 1.0, None, 0)
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
fn set_overrides() {
    let s = good(&["engine.max_num_seqs=128"]);
    assert_eq!(s.engine.max_num_seqs, 128);
    let s = good(&["workload.num_prompts=[1,2]"]);
    assert_eq!(s.workload.num_prompts, vec![1, 2]);
    let s = good(&["workload.num_prompts=7"]);
    assert_eq!(s.workload.num_prompts, vec![7]);
    let s = good(&["workload.request_rate=inf"]);
    assert_eq!(s.workload.request_rate, vec![f64::INFINITY; 2]);
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
fn missing_file_is_an_io_error_naming_it() {
    let err = Scenario::load(Path::new("/nonexistent/x.toml"), &[]).unwrap_err();
    assert!(matches!(err, ScenarioError::Io { .. }));
    assert!(err.to_string().contains("/nonexistent/x.toml"), "{err}");
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
    invalid(&["engine.policy=trtllm"], "engine.policy", "\"trtllm\"");
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
fn quickstart_scenario_loads() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/quickstart.toml");
    let s = Scenario::load(&path, &[]).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(s.name, "quickstart");
    assert_eq!(s.workload.num_prompts, vec![1000; 5]);
    assert_eq!(s.workload.request_rate, vec![5.0, 10.0, 20.0, 40.0, 80.0]);
    assert!(s.workload.sweeps_rate());
    assert_eq!(s.engine.num_gpu_blocks, 28_215);
}

#[test]
fn the_release_decides_defaults_and_engine_time() {
    // No version: the newest profiled vLLM V1, whose defaults on an H100 (≥ 70 GiB, not an
    // A100) are 1024 sequences and 8192 tokens a step, and whose engine time prices the steps.
    let s = good(&[]);
    let profile = s.engine.profile.as_ref().expect("a vLLM scenario has an engine profile");
    assert_eq!(profile.name, "vllm-v1-0.19");
    assert_eq!(s.engine.version.map(|v| v.to_string()), Some("0.19.0".into()));
    assert_eq!((s.engine.max_num_batched_tokens, s.engine.max_num_seqs), (8192, 1024));
    let mut expected = crate::scenario::CostParams::default();
    profile.apply(&mut expected);
    assert_eq!(s.cost, expected);
    // A version picks its family, and a V0 release its engine.
    let v0 = good(&["engine.policy=vllm-v0", "engine.version=0.6.3.post1"]);
    assert_eq!(v0.engine.profile.as_ref().map(|p| p.name.as_str()), Some("vllm-0.6.3"));
    assert_eq!(v0.engine.max_num_seqs, 256);
    let implied = load_text(&good_text().replace("policy = \"vllm-v1\"\n", "version = \"0.5.4\"\n"), &[]).unwrap();
    assert_eq!(implied.engine.policy, Policy::VllmV0);
    // Set keys still win over the profile's.
    let set = good(&["cost.seq_overhead_us=77", "engine.max_num_seqs=64"]);
    assert_eq!((set.cost.seq_overhead_us, set.engine.max_num_seqs), (77.0, 64));
    // Errors name the field and value.
    invalid(&["engine.version=0.5.4"], "engine.version", "\"0.5.4\"");
    invalid(&["engine.version=latest"], "engine.version", "\"latest\"");
    invalid(&["engine.policy=servesim", "engine.version=0.9.0"], "engine.version", "\"0.9.0\"");
    // A number is refused: 0.10 would read as 0.1.
    let msg = invalid(&["engine.version=0.10"], "engine.version", "0.1");
    assert!(msg.contains("as a string"), "{msg}");
}

#[test]
fn async_scheduling_starts_at_vllm_0_14_and_stops_for_draft_and_ngram_speculation() {
    let at = |version: &str, spec: Option<&str>| {
        let mut text = good_text().replace("policy = \"vllm-v1\"\n", &format!("policy = \"vllm-v1\"\nversion = \"{version}\"\n"));
        if let Some(method) = spec {
            let proposer = if method == "draft" { "draft_model = \"Llama-3.2-1B\"\n" } else { "" };
            text.push_str(&format!("\n[engine.speculative]\nmethod = \"{method}\"\n{proposer}num_speculative_tokens = 3\nacceptance_rate = 0.6\n"));
        }
        let s = load_text(&text, &[]).unwrap();
        (s.engine.profile.unwrap().name, s.cost.cpu_overlap)
    };
    // 0.13 schedules in series, 0.14 overlaps (vllm/config/scheduler.py's default: False, then None).
    assert_eq!(at("0.13.0", None), ("vllm-v1-0.9".into(), 0.0));
    assert_eq!(at("0.14.0", None), ("vllm-v1-0.14".into(), 0.9));
    assert_eq!(at("0.15.1", Some("mtp")), ("vllm-v1-0.14".into(), 0.9));
    assert_eq!(at("0.15.1", Some("ngram")), ("vllm-v1-0.14".into(), 0.0));
    assert_eq!(at("0.19.0", Some("draft")), ("vllm-v1-0.19".into(), 0.0));
    // The two profiles share the CPU times fitted on the 0.15.1 runs; only the hidden share differs.
    let sync = load_text(&good_text().replace("policy = \"vllm-v1\"\n", "policy = \"vllm-v1\"\nversion = \"0.9.2\"\n"), &[]).unwrap();
    let overlapped = load_text(&good_text().replace("policy = \"vllm-v1\"\n", "policy = \"vllm-v1\"\nversion = \"0.15.1\"\n"), &[]).unwrap();
    assert_eq!(sync.cost.step_overhead_graph_us, overlapped.cost.step_overhead_graph_us);
    assert_eq!(sync.cost.seq_overhead_us, overlapped.cost.seq_overhead_us);
}

#[test]
fn engine_async_scheduling_is_vllms_flag_where_vllm_has_it() {
    let overlap = |sets: &[&str]| good(sets).cost.cpu_overlap;
    // Asked on 0.10-0.13, where it is off by default: the share the newest profile hides.
    assert_eq!(overlap(&["engine.version=0.11.0"]), 0.0);
    assert_eq!(overlap(&["engine.version=0.11.0", "engine.async_scheduling=true"]), 0.9);
    assert_eq!(overlap(&["engine.version=0.15.1", "engine.async_scheduling=false"]), 0.0);
    assert_eq!(overlap(&["engine.async_scheduling=true"]), 0.9);
    let msg = invalid(&["engine.version=0.9.2", "engine.async_scheduling=true"], "engine.async_scheduling", "true");
    assert!(msg.contains("0.10.0"), "{msg}");
    let msg = invalid(&["engine.policy=tgi", "engine.async_scheduling=false"], "engine.async_scheduling", "false");
    assert!(msg.contains("tgi"), "{msg}");
    let ngram = format!("{}\n[engine.speculative]\nmethod = \"ngram\"\nnum_speculative_tokens = 3\nacceptance_rate = 0.6\n", good_text());
    let msg = load_text(&ngram, &["engine.async_scheduling=true"]).unwrap_err().to_string();
    assert!(msg.contains("engine.async_scheduling") && msg.contains("ngram"), "{msg}");
}
