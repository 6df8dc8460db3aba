use std::path::Path;

use super::*;

fn scenario(model: &str, gpu: &str, engine: &str, extra: &str) -> Scenario {
    let hardware = if gpu.is_empty() { String::new() } else { format!("[hardware]\ngpu = \"{gpu}\"\n") };
    let text = format!(
        "[model]\n{model}\n{hardware}[engine]\n{engine}\n{extra}\n[workload]\nnum_prompts = 10\nrequest_rate = 1\n[workload.dataset]\nkind = \"fixed\"\ninput_len = 100\noutput_len = 10\n"
    );
    Scenario::from_toml_str(&text, Path::new("case.toml"), &[]).unwrap_or_else(|e| panic!("{e}\n{text}"))
}

/// `flag value` (or a lone switch) as the command carries it.
fn has(d: &Deployment, flag: &str, value: Option<&str>) -> bool {
    d.instances.iter().all(|i| i.args.flags.iter().any(|(f, v)| f == flag && v.as_deref() == value))
}

/// Every setting the simulation ran with, as (flag, value), for a case of each engine family:
/// the command must carry each, and the pinned release must have each flag (its table, read off
/// the release's own argument parser, `calibration/engine/flags/`).
#[test]
fn every_simulated_setting_is_a_flag_of_the_pinned_release() {
    let llama = "preset = \"Llama-3.1-8B\"\ndtype = \"fp8\"\nkv_cache_dtype = \"fp8\"";
    let moe = "preset = \"Qwen3-30B-A3B\"";
    let common = "tensor_parallel = 2\nmax_num_seqs = 96\nmax_model_len = 8192\ngpu_memory_utilization = 0.85\nblock_size = 32";
    let cases: Vec<(&str, &str, String, &str, Vec<(&str, Option<&str>)>)> = vec![
        (
            "0.5.5",
            llama,
            format!("policy = \"vllm-v0\"\nversion = \"0.5.5\"\n{common}\nenable_chunked_prefill = true\nmax_num_batched_tokens = 1024\nenable_prefix_caching = true"),
            "",
            vec![("--enable-chunked-prefill", Some("True")), ("--max-num-batched-tokens", Some("1024")), ("--enable-prefix-caching", None)],
        ),
        (
            "0.6.2",
            llama,
            format!("policy = \"vllm-v0\"\nversion = \"0.6.2\"\n{common}\nnum_scheduler_steps = 8"),
            "",
            vec![("--num-scheduler-steps", Some("8")), ("--enable-chunked-prefill", Some("False"))],
        ),
        (
            "0.6.3",
            llama,
            format!("policy = \"vllm-v0\"\nversion = \"0.6.3\"\n{common}\nnum_scheduler_steps = 4\nenable_prefix_caching = true"),
            "",
            vec![("--num-scheduler-steps", Some("4")), ("--enable-prefix-caching", None)],
        ),
        (
            "0.8.5",
            moe,
            format!("policy = \"vllm-v1\"\nversion = \"0.8.5\"\n{common}\nexpert_parallel = true\nenable_prefix_caching = false"),
            "[engine.speculative]\nmethod = \"ngram\"\nnum_speculative_tokens = 3\nacceptance_rate = 0.5",
            vec![("--enable-expert-parallel", None), ("--no-enable-prefix-caching", None)],
        ),
        (
            "0.15.1",
            llama,
            format!("policy = \"vllm-v1\"\nversion = \"0.15.1\"\n{common}\nmax_num_batched_tokens = 4096"),
            "[engine.speculative]\nmethod = \"draft\"\ndraft_model = \"Llama-3.2-1B\"\nnum_speculative_tokens = 4\nacceptance_rate = 0.7",
            vec![("--max-num-batched-tokens", Some("4096")), ("--enable-prefix-caching", None), ("--no-async-scheduling", None)],
        ),
        (
            "0.19.0",
            moe,
            format!("policy = \"vllm-v1\"\nversion = \"0.19.0\"\n{common}\nexpert_parallel = true"),
            "",
            vec![("--enable-expert-parallel", None), ("--async-scheduling", None)],
        ),
    ];
    for (version, model, engine, extra, expected) in cases {
        let s = scenario(model, "H100-SXM", &engine, extra);
        let d = deployment(&s, 3, None).unwrap();
        assert_eq!(d.engine, format!("vLLM {version}"));
        assert!(d.unknown_flags.is_empty(), "{version}: {:?}\n{}", d.unknown_flags, d.script("case"));
        assert!(d.pip.ends_with(version) && d.image.ends_with(version), "{version}: {} {}", d.pip, d.image);
        let e = &s.engine;
        for (flag, value) in [
            ("--tensor-parallel-size", "2"),
            ("--max-num-seqs", "96"),
            ("--max-model-len", "8192"),
            ("--gpu-memory-utilization", "0.85"),
            ("--block-size", "32"),
        ]
        .into_iter()
        .chain(expected.iter().filter_map(|(f, v)| v.map(|v| (*f, v))))
        {
            assert!(has(&d, flag, Some(value)), "{version}: {flag} {value}\n{}", d.script("case"));
        }
        for (flag, value) in &expected {
            assert!(has(&d, flag, *value), "{version}: {flag}\n{}", d.script("case"));
        }
        assert!(has(&d, "--max-num-batched-tokens", Some(&e.max_num_batched_tokens.to_string())));
        if s.model.weight_dtype == crate::scenario::Dtype::Fp8 {
            assert!(has(&d, "--quantization", Some("fp8")) && has(&d, "--kv-cache-dtype", Some("fp8")), "{version}");
        }
        if let Some(spec) = &e.speculative {
            let k = spec.scheduler.num_speculative_tokens.to_string();
            let words = d.instances[0].args.words().join(" ");
            assert!(words.contains("--speculative-config") && words.contains(&format!("\"num_speculative_tokens\":{k}")), "{words}");
            if spec.method == crate::scenario::speculative::SpecMethod::Draft {
                assert!(words.contains("meta-llama/Llama-3.2-1B-Instruct"), "{words}");
            }
        }
        assert_eq!(d.model, ModelSpec::preset_hf_repo(&s.model.name).unwrap());
        assert_eq!(d.instances[0].count, 3);
    }
}

#[test]
fn tgi_settings_are_launcher_flags_of_2_3() {
    let s = scenario("preset = \"Llama-3.1-8B\"\ndtype = \"fp8\"", "H100-SXM", "policy = \"tgi\"\ntensor_parallel = 2", "");
    let d = deployment(&s, 1, None).unwrap();
    assert_eq!(d.engine, "TGI 2.3.1");
    assert!(d.unknown_flags.is_empty(), "{:?}", d.unknown_flags);
    let tgi = s.engine.tgi.unwrap();
    for (flag, value) in [
        ("--num-shard", "2".to_string()),
        ("--max-input-tokens", tgi.max_input_tokens.to_string()),
        ("--max-total-tokens", tgi.max_total_tokens.to_string()),
        ("--max-batch-prefill-tokens", tgi.max_batch_prefill_tokens.to_string()),
        ("--max-concurrent-requests", tgi.max_concurrent_requests.to_string()),
        ("--quantize", "fp8".to_string()),
    ] {
        assert!(has(&d, flag, Some(&value)), "{flag} {value}\n{}", d.script("tgi"));
    }
    assert_eq!(d.instances[0].program, ["text-generation-launcher", "--model-id", "meta-llama/Llama-3.1-8B-Instruct"]);
}

/// A release that dropped a simulated setting says so, naming the flag, instead of printing a
/// command that fails or silently runs something else.
#[test]
fn a_dropped_setting_is_said_so() {
    let s = scenario("preset = \"Llama-3.1-8B\"", "H100-SXM", "policy = \"vllm-v0\"\nversion = \"0.10.1\"\nmax_model_len = 8192\nnum_scheduler_steps = 8", "");
    let d = deployment(&s, 1, None).unwrap();
    assert!(d.notes.iter().any(|n| n.contains("0.10.1")), "{:?}", d.notes);
    assert!(has(&d, "--num-scheduler-steps", Some("8")));
    assert!(d.instances[0].args.env.contains(&("VLLM_USE_V1".into(), "0".into())));
}

#[test]
fn a_disaggregated_deployment_has_both_sides_and_the_proxy() {
    // 0.9.2's own NIXL scripts give both sides kv_role "kv_both".
    let old = scenario(
        "preset = \"Llama-3.1-8B\"",
        "",
        "policy = \"vllm-v1\"\nversion = \"0.9.2\"",
        "[cluster]\nmode = \"disaggregated\"\nlink = \"nvlink\"\n[[cluster.pools]]\nrole = \"prefill\"\ngpu = \"H100-SXM\"\ntensor_parallel = 1\nreplicas = 1\n[[cluster.pools]]\nrole = \"decode\"\ngpu = \"H100-SXM\"\ntensor_parallel = 1\nreplicas = 1\n",
    );
    let d = deployment(&old, 1, None).unwrap();
    assert!(d.unknown_flags.is_empty() && d.image.ends_with("0.9.2"), "{:?} {}", d.unknown_flags, d.image);
    assert!(d.instances.iter().all(|i| i.args.words().iter().any(|w| w.contains("\"kv_both\""))), "{}", d.script("pd"));
    let s = scenario(
        "preset = \"Llama-3.1-8B\"",
        "",
        "policy = \"vllm-v1\"",
        "[cluster]\nmode = \"disaggregated\"\nlink = \"nvlink\"\n[[cluster.pools]]\nrole = \"prefill\"\ngpu = \"H100-SXM\"\ntensor_parallel = 1\nreplicas = 2\n[[cluster.pools]]\nrole = \"decode\"\ngpu = \"H100-SXM\"\ntensor_parallel = 2\nreplicas = 6\n",
    );
    let d = deployment(&s, 2, None).unwrap();
    assert!(d.unknown_flags.is_empty(), "{:?}", d.unknown_flags);
    let roles: Vec<(&str, u32, u32)> = d.instances.iter().map(|i| (i.role, i.count, i.gpus_each)).collect();
    // The scenario is one unit of 2 prefill and 6 decode replicas; the deployment two units.
    assert_eq!(roles, [("prefill", 4, 1), ("decode", 12, 2)]);
    assert!(d.instances.iter().all(|i| i.args.words().iter().any(|w| w.contains("kv_connector"))));
    let proxy = d.proxy.as_ref().unwrap().join(" ");
    assert!(proxy.contains("--prefiller-hosts PREFILL_HOSTS --prefiller-ports 8001") && proxy.contains("--decoder-hosts DECODE_HOSTS"), "{proxy}");
    let script = d.script("pd");
    assert!(script.contains("# prefill: 4 instance(s), 1 GPU(s) each") && script.contains("# proxy"), "{script}");
}

#[test]
fn servesim_s_own_engine_has_no_production_command() {
    let s = scenario("preset = \"Llama-3.1-8B\"", "H100-SXM", "policy = \"servesim\"", "");
    assert!(deployment(&s, 1, None).unwrap_err().0.contains("servesim serve"));
}

#[test]
fn shell_words_round_trip_through_sh() {
    for word in ["plain", "{\"a\":1}", "it's", "", "a b"] {
        let out = std::process::Command::new("sh").arg("-c").arg(format!("printf %s {}", shell_word(word))).output().unwrap();
        assert_eq!(String::from_utf8(out.stdout).unwrap(), word);
    }
}

#[test]
fn manifests_name_the_image_gpus_replicas_and_health_probes() {
    let s = scenario("preset = \"Llama-3.1-70B\"", "H100-SXM", "policy = \"vllm-v1\"\ntensor_parallel = 4", "");
    let d = deployment(&s, 3, None).unwrap();
    let yaml = kubernetes::manifest(&d, "Plan: H100 tp4", "H100-SXM");
    for needle in ["kind: Deployment", "kind: Service", "replicas: 3", "nvidia.com/gpu: 4", "path: /health", "name: plan-h100-tp4", &d.image] {
        assert!(yaml.contains(needle), "{needle}\n{yaml}");
    }
    assert_eq!(kubernetes::dns_label("--A_b  c--"), "a-b-c");
    assert!(kubernetes::manifest(&d, "x", "MI300X").contains("amd.com/gpu: 4"));
}

/// A linear-attention model's block size is vLLM's to raise (servesim simulated 272-token
/// blocks, which `--block-size` would refuse), and its prefix caching is off, as vLLM's is.
#[test]
fn a_linear_attention_model_leaves_the_block_size_to_vllm() {
    let s = scenario("preset = \"Qwen3-Next-80B-A3B\"", "H200", "policy = \"vllm-v1\"\ntensor_parallel = 4\nmax_model_len = 32768", "");
    assert_eq!(s.engine.block_size, 272);
    let d = deployment(&s, 1, None).unwrap();
    assert!(d.unknown_flags.is_empty(), "{:?}", d.unknown_flags);
    assert!(d.instances[0].args.flags.iter().all(|(f, _)| f != "--block-size"), "{}", d.script("vllm"));
    assert!(has(&d, "--no-enable-prefix-caching", None), "{}", d.script("vllm"));
    assert!(d.instances[0].program.iter().any(|p| p == "Qwen/Qwen3-Next-80B-A3B-Instruct"), "{:?}", d.instances[0].program);
    // gpt-oss keeps its blocks of 16.
    let s = scenario("preset = \"gpt-oss-20b\"", "H100-SXM", "policy = \"vllm-v1\"\nmax_model_len = 32768", "");
    assert!(has(&deployment(&s, 1, None).unwrap(), "--block-size", Some("16")));
}

/// SGLang's command: `python3 -m sglang.launch_server` with every simulated setting as a flag of
/// 0.4.9.post2, the pin named, and a node's replicas as data-parallel workers of one server.
#[test]
fn sglang_settings_are_launch_server_flags_of_0_4_9() {
    let s = scenario(
        "preset = \"Llama-3.1-70B\"\ndtype = \"fp8\"",
        "H200",
        "policy = \"sglang\"\ntensor_parallel = 2",
        "[engine.sglang]\nmem_fraction_static = 0.85\nmax_running_requests = 96\nchunked_prefill_size = 4096\nschedule_policy = \"lpm\"\nschedule_conservativeness = 0.5\npage_size = 16\ndisable_overlap_schedule = true",
    );
    let d = deployment(&s, 3, None).unwrap();
    assert_eq!(d.engine, "SGLang 0.4.9");
    assert!(d.unknown_flags.is_empty(), "{:?}\n{}", d.unknown_flags, d.script("sglang"));
    assert_eq!((d.pip.as_str(), d.image.as_str()), ("sglang[all]==0.4.9.post2", "lmsysorg/sglang:v0.4.9.post2-cu126"));
    let script = d.script("sglang");
    assert!(script.contains("pip install 'sglang[all]==0.4.9.post2'") && script.contains("lmsysorg/sglang:v0.4.9.post2-cu126"), "{script}");
    let e = &s.engine;
    let sg = e.sglang.as_ref().unwrap();
    for (flag, value) in [
        ("--tp-size", "2".to_string()),
        ("--dp-size", "3".to_string()),
        ("--load-balance-method", "round_robin".to_string()),
        ("--mem-fraction-static", "0.85".to_string()),
        ("--max-running-requests", "96".to_string()),
        ("--chunked-prefill-size", "4096".to_string()),
        ("--max-prefill-tokens", sg.max_prefill_tokens.to_string()),
        ("--schedule-policy", "lpm".to_string()),
        ("--schedule-conservativeness", "0.5".to_string()),
        ("--page-size", "16".to_string()),
        ("--context-length", e.max_model_len.to_string()),
        ("--cuda-graph-max-bs", sg.cuda_graph_bs.iter().max().unwrap().to_string()),
        ("--quantization", "fp8".to_string()),
        ("--host", "0.0.0.0".to_string()),
    ] {
        assert!(has(&d, flag, Some(&value)), "{flag} {value}\n{script}");
    }
    assert!(has(&d, "--disable-overlap-schedule", None), "{script}");
    assert!(!has(&d, "--disable-radix-cache", None), "{script}");
    // The three replicas of TP 2 are one server's workers on one node: 6 GPUs.
    assert_eq!((d.instances.len(), d.instances[0].count, d.instances[0].gpus_each), (1, 1, 6));
    assert_eq!(d.instances[0].program, ["python3", "-m", "sglang.launch_server", "--model-path", "meta-llama/Llama-3.1-70B-Instruct"]);
    // More replicas than a node holds are separate servers behind a load balancer.
    let d = deployment(&s, 8, None).unwrap();
    assert_eq!((d.instances[0].count, d.instances[0].gpus_each), (8, 2));
    assert!(has(&d, "--dp-size", Some("1")) && d.notes.iter().any(|n| n.contains("load balancer")), "{:?}", d.notes);
    let yaml = kubernetes::manifest(&d, "sglang", "H200");
    assert!(yaml.contains("sglang.launch_server") && yaml.contains("--model-path"), "{yaml}");
    // A per-tensor FP8 checkpoint is served as it is: SGLang reads its quantization config.
    let s = scenario("preset = \"Llama-3.1-70B\"\ndtype = \"fp8\"", "H200", "policy = \"sglang\"", "[engine.sglang]\nfp8_weight_scale = \"tensor\"");
    let d = deployment(&s, 1, None).unwrap();
    assert!(!has(&d, "--quantization", None) && !has(&d, "--quantization", Some("fp8")), "{}", d.script("sglang"));
    assert!(d.notes.iter().any(|n| n.contains("per-tensor FP8")), "{:?}", d.notes);
}

/// Before 0.12.0 vLLM had no `--all2all-backend`: the backend goes in `VLLM_ALL2ALL_BACKEND`,
/// whose default then was "naive" (0.10.x).
#[test]
fn the_all2all_backend_is_an_environment_variable_before_0_12() {
    let moe = "preset = \"Qwen3-30B-A3B\"";
    let engine = |version: &str| format!("policy = \"vllm-v1\"\nversion = \"{version}\"\ntensor_parallel = 1\ndata_parallel = 2\nexpert_parallel = true");
    let old = deployment(&scenario(moe, "H100-SXM", &engine("0.10.2"), ""), 1, None).unwrap();
    assert!(old.instances[0].args.env.contains(&("VLLM_ALL2ALL_BACKEND".into(), "naive".into())), "{:?}", old.instances[0].args);
    assert!(!old.instances[0].args.flags.iter().any(|(f, _)| f == "--all2all-backend"));
    let new = deployment(&scenario(moe, "H100-SXM", &engine("0.15.1"), ""), 1, None).unwrap();
    assert!(has(&new, "--all2all-backend", Some("allgather_reducescatter")));
    assert!(!new.instances[0].args.env.iter().any(|(k, _)| k == "VLLM_ALL2ALL_BACKEND"));
}
