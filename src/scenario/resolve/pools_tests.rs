//! `[[cluster.pools]]`: each pool resolved on its own GPU, and errors named by the pool's field.

use crate::scenario::Router;
use crate::scenario::resolve::test_support::{good, invalid_in, load_text};

/// `good_text` with its one H100 replaced by an H100 pool and an A100 pool.
fn two_pools(pool_1: &str) -> String {
    crate::scenario::resolve::test_support::good_text()
        .replace("[hardware]\ngpu = \"H100-SXM\"\n", "")
        .replace("[engine]\n", "[engine]\nrouter = \"weighted-least-outstanding\"\n")
        + "\n[[cluster.pools]]\ngpu = \"H100-SXM\"\nreplicas = 2\n\n[[cluster.pools]]\n"
        + pool_1
        + "\n"
}

#[test]
fn each_pool_is_sized_on_its_own_gpu() {
    let s = load_text(&two_pools("gpu = \"A100\"\ntensor_parallel = 2\nreplicas = 3\ngpu_memory_utilization = 0.8"), &[]).unwrap();
    assert_eq!(s.pools.len(), 2);
    assert_eq!(s.engine.router, Router::WeightedLeastOutstanding);
    // The H100 pool is sized exactly as the one-GPU scenario it would be alone.
    let alone = good(&["engine.replicas=2", "engine.router=weighted-least-outstanding"]);
    assert_eq!(s.pools[0].engine, alone.engine);
    assert_eq!(s.pools[0].gpu, alone.hardware.gpu);
    let a100 = &s.pools[1];
    assert_eq!((a100.gpu.name.as_str(), a100.engine.tensor_parallel, a100.engine.replicas), ("A100-80G-SXM", 2, 3));
    assert_eq!(a100.engine.gpu_memory_utilization, 0.8);
    assert_ne!(a100.engine.num_gpu_blocks, s.pools[0].engine.num_gpu_blocks);
    // Unset, the batch limits are each GPU's default in the modelled vLLM release: 1024
    // sequences and 8192 tokens on the H100, 256 and 2048 on the A100 (vLLM keeps an A100's
    // small whatever its memory). Set in [engine], they are the same in both.
    assert_eq!((a100.engine.max_num_seqs, a100.engine.max_num_batched_tokens), (256, 2048));
    assert_eq!((s.pools[0].engine.max_num_seqs, s.pools[0].engine.max_num_batched_tokens), (1024, 8192));
    let pinned = load_text(&two_pools("gpu = \"A100\"").replace("[engine]\n", "[engine]\nmax_num_seqs = 128\n"), &[]).unwrap();
    assert_eq!((pinned.pools[0].engine.max_num_seqs, pinned.pools[1].engine.max_num_seqs), (128, 128));
    // `hardware` and `engine` describe the first pool; each pool's own scenario its pool.
    assert_eq!((s.hardware.gpu.name.as_str(), s.hardware.count), ("H100-SXM", 2));
    let views = s.pool_scenarios();
    assert_eq!((views[1].hardware.count, views[1].engine.num_gpu_blocks), (6, a100.engine.num_gpu_blocks));
    assert!(views.iter().all(|v| v.pools.is_empty()));
    // Without pools, a scenario is its own one pool.
    assert_eq!(good(&[]).pool_scenarios(), vec![good(&[])]);
}

#[test]
fn bad_pool_fields_name_the_pool() {
    let msg = invalid_in(&two_pools("gpu = \"A1000\""), &[], "cluster.pools[1].gpu", "\"A1000\"");
    assert!(msg.contains("unknown GPU preset"), "{msg}");
    invalid_in(&two_pools("replicas = 2"), &[], "cluster.pools[1].gpu", "(missing)");
    invalid_in(&two_pools("gpu = \"A100\"\nreplicas = 0"), &[], "cluster.pools[1].replicas", "0");
    let msg = invalid_in(&two_pools("gpu = \"A100\"\ntensor_parallel = 3"), &[], "cluster.pools[1].tensor_parallel", "3");
    assert!(msg.contains("num_heads (32)"), "{msg}");
    invalid_in(&two_pools("gpu = \"A100\"\ngpu_memory_utilization = 1.5"), &[], "cluster.pools[1].gpu_memory_utilization", "1.5");
    invalid_in(&two_pools("gpu = \"A100\"\nnum_gpu_blocks = 0"), &[], "cluster.pools[1].num_gpu_blocks", "0");
    let unknown = load_text(&two_pools("gpu = \"A100\"\nhost = \"x\""), &[]).unwrap_err().to_string();
    assert!(unknown.contains("unknown field `host`"), "{unknown}");
    // 65,536 one-replica pools ran minutes before the first event: refused at once, by count.
    let many = two_pools("gpu = \"A100\"") + &"\n[[cluster.pools]]\ngpu = \"A100\"\n".repeat(300);
    let msg = invalid_in(&many, &[], "cluster.pools[256]", "(pool 257 of 302)");
    assert!(msg.contains("at most 256 pools"), "{msg}");
}

#[test]
fn a_shared_field_wrong_on_one_pool_says_which() {
    // 70B weights fit two H100s but not one L40S: the pool's tensor_parallel is named.
    let text = two_pools("gpu = \"L40S\"").replace("Llama-3.1-8B", "Llama-3.1-70B").replace("replicas = 2\n", "replicas = 2\ntensor_parallel = 2\n");
    let msg = invalid_in(&text, &["engine.max_model_len=8192"], "cluster.pools[1].tensor_parallel", "1");
    assert!(msg.contains("would fit"), "{msg}");
    // A max_model_len the L40S's KV cache cannot hold is the shared field's error, in that pool.
    let text = two_pools("gpu = \"L40S\"\ntensor_parallel = 1\nreplicas = 1\nnum_gpu_blocks = 100").replace("policy = \"vllm-v1\"", "policy = \"vllm-v1\"\nmax_model_len = 4096");
    let msg = invalid_in(&text, &[], "engine.max_model_len", "4096");
    assert!(msg.contains("in cluster.pools[1] (L40S)"), "{msg}");
}

#[test]
fn one_pool_fields_and_weights_are_checked() {
    let text = two_pools("gpu = \"A100\"");
    invalid_in(&format!("[hardware]\ngpu = \"H100-SXM\"\n{text}"), &[], "hardware.gpu", "\"H100-SXM\"");
    invalid_in(&text, &["engine.replicas=2"], "engine.replicas", "2");
    // Without pools or [hardware], the missing GPU is named.
    let no_gpu = text[..text.find("[[cluster.pools]]").unwrap()].to_string();
    let msg = invalid_in(&no_gpu, &[], "hardware.gpu", "(missing)");
    assert!(msg.contains("[[cluster.pools]]"), "{msg}");
    invalid_in(&text, &["engine.tensor_parallel=1"], "engine.tensor_parallel", "1");
    let empty = text[..text.find("[[cluster.pools]]").unwrap()].to_string() + "[cluster]\n";
    invalid_in(&empty, &[], "cluster.pools", "[]");
    invalid_in(&two_pools("gpu = \"A100\"\nweight = 2"), &[], "cluster.pools[0].weight", "(missing)");
    invalid_in(&two_pools("gpu = \"A100\"\nweight = 2"), &["engine.router=round-robin"], "cluster.pools[1].weight", "2");
    let weighted = text.replace("replicas = 2\n", "replicas = 2\nweight = 1.5\n");
    invalid_in(&(weighted.clone() + "weight = -1\n"), &[], "cluster.pools[1].weight", "-1");
    let s = load_text(&(weighted + "weight = 0.5\n"), &[]).unwrap();
    assert_eq!((s.pools[0].weight, s.pools[1].weight), (Some(1.5), Some(0.5)));
    invalid_in(&text, &["engine.router=fastest"], "engine.router", "\"fastest\"");
}
