//! `[hardware]`: explicit GPUs, tensor parallelism, GPU counts, and KV-cache sizing.

use crate::scenario::Dtype;
use crate::scenario::resolve::test_support::{good, good_text, invalid, invalid_in, load_text};

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
fn the_network_between_nodes_comes_with_the_preset_or_its_key() {
    // An explicit GPU has none unless given; a preset carries its reference server's.
    assert_eq!(good(&[]).hardware.gpu.scale_out_bandwidth_bytes_per_s, Some(50e9));
    assert_eq!(good(&["hardware.scale_out_gbps=100"]).hardware.gpu.scale_out_bandwidth_bytes_per_s, Some(100e9));
    invalid(&["hardware.scale_out_gbps=-1"], "hardware.scale_out_gbps", "-1");
    invalid(&["hardware.scale_out_gbps=0"], "hardware.scale_out_gbps", "0");
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
    // A draft model's weights shard by the same degree: the hint counts them.
    let draft = [
        "engine.speculative.method=\"draft\"",
        "engine.speculative.draft_model=\"Llama-3.1-405B\"",
        "engine.speculative.num_speculative_tokens=4",
        "engine.speculative.acceptance_rate=0.7",
    ];
    let msg = invalid(&draft, "engine.tensor_parallel", "1");
    assert!(msg.contains("model and proposer weights need") && msg.contains("tensor_parallel = 16 would fit"), "{msg}");
    let msg = invalid(&["hardware.memory_gib=0.1"], "hardware", "\"H100-SXM\"");
    assert!(
        msg.contains("short by") && msg.contains("no tensor_parallel fits"),
        "{msg}"
    );
}

#[test]
fn kv_cache_smaller_than_one_sequence() {
    // vLLM 0.8's batch defaults, whose activation reserve leaves a little room at 0.215.
    let msg = invalid(
        &["engine.gpu_memory_utilization=0.215", "engine.version=0.8.5"],
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
