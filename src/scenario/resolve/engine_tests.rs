//! `[engine]`: each policy's defaults and limits.

use crate::scenario::Policy;
use crate::scenario::resolve::test_support::{good, invalid};

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
