//! A hybrid model's KV cache sized as vLLM sizes it: blocks of the full-attention groups from
//! the memory left, the block size raised for a linear state, and each sequence's windows and
//! states held beside its tokens' (`scenario::model::KvLayout`).

use crate::scenario::resolve::test_support::{good, invalid};

const GIB: f64 = 1024.0 * 1024.0 * 1024.0;

/// vLLM's formula: ⌊(memory × utilization − weights − activation peak) / block bytes⌋, with a
/// hybrid model's block the page of every layer of one group per full-attention group
/// (`get_kv_cache_config_from_groups`: `available_memory // page_size // group_size`).
fn vllm_blocks(s: &crate::scenario::Scenario, block_bytes: u64) -> u32 {
    let gpu = &s.hardware.gpu;
    let usable = gpu.memory_bytes as f64 * s.engine.gpu_memory_utilization;
    let left = usable - s.model.weight_bytes_per_gpu(s.engine.tensor_parallel) as f64 - s.engine.activation_reserve_bytes as f64;
    (left / block_bytes as f64).floor() as u32
}

#[test]
fn gpt_oss_blocks_hold_its_full_layers_and_each_sequence_its_window() {
    let s = good(&["model.preset=gpt-oss-20b", "engine.activation_reserve_gib=2"]);
    let e = &s.engine;
    assert_eq!((e.block_size, e.kv_blocks_per_seq), (16, 9));
    // 12 full layers × 16 tokens × 8 KV heads × 64 × 2 (K, V) × 2 bytes.
    assert_eq!(e.num_gpu_blocks, vllm_blocks(&s, 12 * 16 * 8 * 64 * 2 * 2));
    assert!(e.activation_reserve_bytes as f64 == 2.0 * GIB);
}

#[test]
fn qwen3_next_blocks_grow_to_hold_a_linear_state() {
    let s = good(&[
        "model.preset=Qwen3-Next-80B-A3B",
        "hardware.gpu=H200",
        "engine.tensor_parallel=4",
        "engine.max_model_len=32768",
        "engine.activation_reserve_gib=4",
    ]);
    let e = &s.engine;
    assert_eq!((e.block_size, e.kv_blocks_per_seq), (272, 3));
    assert_eq!(e.num_gpu_blocks, vllm_blocks(&s, 12 * 272 * 1024));
    // vLLM turns prefix caching off for it; asking for it is refused.
    assert!(!e.enable_prefix_caching);
    invalid(
        &["model.preset=Qwen3-Next-80B-A3B", "hardware.gpu=H200", "engine.tensor_parallel=4", "engine.enable_prefix_caching=true"],
        "engine.enable_prefix_caching",
        "true",
    );
    // Its 16 key heads do not split over 32 GPUs.
    invalid(&["model.preset=Qwen3-Next-80B-A3B", "engine.tensor_parallel=32"], "engine.tensor_parallel", "32");
}

#[test]
fn mixed_attention_refuses_what_it_cannot_be() {
    invalid(&["model.preset=gpt-oss-20b", "model.num_layers=12"], "model.num_layers", "12");
    invalid(&["model.preset=gpt-oss-20b", "engine.policy=tgi"], "engine.policy", "\"tgi\"");
}
