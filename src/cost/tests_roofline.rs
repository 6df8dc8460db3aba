//! The roofline's hand-computed tests: tiny models priced by hand, op by op.

use super::*;
use crate::cost::NS_PER_S;

/// 2 layers, hidden 64, 4 heads, 2 KV heads, head_dim 16, ffn 128, vocab 256, bf16.
/// Per layer (TP 1), GEMM k×n: QKV 64×128, O 64×64, gate+up 64×256, down 128×64;
/// Σ k·n = 36,864 weights per layer. LM head 64×256 = 16,384.
pub(crate) fn tiny_model() -> ModelSpec {
    ModelSpec {
        name: "tiny".into(),
        num_layers: 2,
        hidden_size: 64,
        num_heads: 4,
        num_kv_heads: 2,
        head_dim: 16,
        ffn_size: 128,
        vocab_size: 256,
        tied_embeddings: false,
        max_position_embeddings: 4096,
        weight_dtype: Dtype::Bf16,
        kv_dtype: Dtype::Bf16,
        moe: None,
        mla: None,
        dsa: None,
        attention: Default::default(),
        weight_quant: None,
    }
}

/// 1e11 FLOP/s, 1e10 B/s memory, 1e9 B/s link: round numbers, ridge point 10 FLOP/byte.
pub(crate) fn tiny_gpu() -> GpuSpec {
    GpuSpec {
        name: "tiny-gpu".into(),
        peak_flops_16bit: 1e11,
        peak_flops_fp8: Some(2e11),
        peak_flops_fp4: None,
        memory_bytes: 1 << 30,
        memory_bandwidth_bytes_per_s: 1e10,
        interconnect_bandwidth_bytes_per_s: 1e9,
        scale_out_bandwidth_bytes_per_s: None,
    }
}

/// Effective: GEMM 5e10 FLOP/s, attention 4e10 FLOP/s, memory 8e9 B/s, link 5e8 B/s.
pub(crate) fn tiny_params() -> CostParams {
    CostParams {
        gemm_efficiency: 0.5,
        attention_efficiency: 0.4,
        memory_bandwidth_efficiency: 0.8,
        collective_latency_us: 10.0,
        collective_bandwidth_efficiency: 0.5,
        prefix_attention_efficiency: 0.5,
        step_overhead_eager_us: 100.0,
        step_overhead_graph_us: 100.0,
        prefill_step_overhead_us: 0.0,
        prefill_seq_overhead_us: 0.0,
        seq_overhead_us: 5.0,
        frontend_overhead_us: 0.0,
        frontend_per_token_us: 0.0,
        cpu_overlap: 0.0,
        transfer_utilisation: 1.0,
    }
}

fn h100_like() -> GpuSpec {
    GpuSpec {
        name: "h100-like".into(),
        peak_flops_16bit: 989e12,
        peak_flops_fp8: Some(1979e12),
        peak_flops_fp4: None,
        memory_bytes: 80 << 30,
        memory_bandwidth_bytes_per_s: 3.35e12,
        interconnect_bandwidth_bytes_per_s: 450e9,
        scale_out_bandwidth_bytes_per_s: None,
    }
}

fn llama_8b_like() -> ModelSpec {
    ModelSpec::preset("Llama-3.1-8B").expect("preset")
}

fn realistic_params() -> CostParams {
    CostParams {
        gemm_efficiency: 0.7,
        attention_efficiency: 0.5,
        memory_bandwidth_efficiency: 0.8,
        collective_latency_us: 8.0,
        collective_bandwidth_efficiency: 0.7,
        prefix_attention_efficiency: 0.5,
        step_overhead_eager_us: 0.0,
        step_overhead_graph_us: 0.0,
        prefill_step_overhead_us: 0.0,
        prefill_seq_overhead_us: 0.0,
        seq_overhead_us: 0.0,
        frontend_overhead_us: 0.0,
        frontend_per_token_us: 0.0,
        cpu_overlap: 0.0,
        transfer_utilisation: 1.0,
    }
}

fn assert_sum(cost: &StepCost) {
    assert_eq!(
        cost.total_ns,
        cost.gemm_ns + cost.attention_ns + cost.elementwise_ns + cost.communication_ns + cost.overhead_ns,
        "{cost:?}"
    );
}

fn within(actual: f64, expected: f64, rel: f64) -> bool {
    (actual - expected).abs() <= rel * expected.abs()
}

#[test]
fn tiny_prefill_is_compute_bound_and_matches_hand_computation() {
    let roofline = Roofline::new(&tiny_model(), &tiny_gpu(), 1, &tiny_params());
    let cost = roofline.prefill_cost(1000);
    assert_sum(&cost);
    // Layer GEMMs, T = 1000, all compute-bound (e.g. QKV: 16.4 MFLOP / 5e10 = 328 µs vs
    // (16,384 + 1000·192·2) B / 8e9 = 50 µs): 2 layers × 2·1000·36,864 FLOP / 5e10 FLOP/s
    // = 2,949,120 ns.
    // LM head, S = 1, memory-bound: (16,384·2 + (64 + 256)·2) B / 8e9 B/s = 4,176 ns.
    assert_eq!(cost.gemm_ns, 2_949_120 + 4_176);
    // Attention, q = 1000, c = 0: keys = 1000·1001/2 = 500,500; FLOPs = 4·4·16·500,500 =
    // 128.128 M per layer / 4e10 = 3,203,200 ns, × 2 layers (memory: 384 kB / 8e9 = 48 µs).
    assert_eq!(cost.attention_ns, 6_406_400);
    // Elementwise per token per layer: 2 norms × 4·64·2 B + rotary 2·(4+2)·16·2 B +
    // SiLU 3·128·2 B = 1024 + 384 + 768 = 2176 B; plus final norm 512 B per token:
    // 1000 × (2·2176 + 512) B / 8e9 = 608,000 ns.
    assert_eq!(cost.elementwise_ns, 608_000);
    assert_eq!(cost.communication_ns, 0);
    // 100 µs per step + 5 µs per sequence.
    assert_eq!(cost.overhead_ns, 105_000);
}

#[test]
fn sampling_is_priced_per_sampled_row_and_logit_as_elementwise_time() {
    let plain = Roofline::new(&tiny_model(), &tiny_gpu(), 1, &tiny_params());
    let sampling = plain.clone().with_sampling(SamplingCost::per_logit_ns(2.5).unwrap());
    // 8 decodes (8 sampled rows) of vocab 256 at 2.5 ns: 5,120 ns more, all elementwise.
    let (a, b) = (plain.decode_cost(8, 100), sampling.decode_cost(8, 100));
    assert_sum(&b);
    assert_eq!(b.elementwise_ns - a.elementwise_ns, 5_120);
    assert_eq!(b.total_ns - a.total_ns, 5_120);
    assert_eq!((b.gemm_ns, b.attention_ns, b.overhead_ns), (a.gemm_ns, a.attention_ns, a.overhead_ns));
    // A prefill chunk that does not end its prompt samples nothing and pays nothing.
    let mut chunk = Batch::default();
    chunk.push(SeqWork { seq: 0, new_tokens: 64, context_tokens: 0, samples_token: false, draft_tokens: 0 });
    assert_eq!(sampling.predict(&chunk), plain.predict(&chunk));
    // One that ends it samples one row: 640 ns.
    let (a, b) = (plain.prefill_cost(64), sampling.prefill_cost(64));
    assert_eq!(b.elementwise_ns - a.elementwise_ns, 640);
}

#[test]
fn tiny_decode_is_memory_bound_and_matches_hand_computation() {
    let roofline = Roofline::new(&tiny_model(), &tiny_gpu(), 1, &tiny_params());
    let cost = roofline.decode_cost(1, 100);
    assert_sum(&cost);
    // Layer GEMMs, T = 1, all memory-bound (e.g. QKV: 16,384 FLOP / 5e10 = 328 ns vs
    // 16,768 B / 8e9 = 2,096 ns): per layer weights 36,864·2 B + activations
    // (192 + 128 + 320 + 192)·2 B = 75,392 B; × 2 layers / 8e9 = 18,848 ns. LM head 4,176 ns.
    assert_eq!(cost.gemm_ns, 18_848 + 4_176);
    // Attention, q = 1, c = 100: reads 101 tokens × 2·2·16·2 B + Q/O 2·4·16·2 B = 13,184 B
    // per layer / 8e9 = 1,648 ns (compute: 4·4·16·101 / 4e10 = 646 ns), × 2 layers.
    assert_eq!(cost.attention_ns, 3_296);
    // 1 token × (2·2176 + 512) B / 8e9.
    assert_eq!(cost.elementwise_ns, 608);
    assert_eq!(cost.overhead_ns, 105_000);
}

#[test]
fn tiny_tensor_parallel_communication_matches_hand_computation() {
    let roofline = Roofline::new(&tiny_model(), &tiny_gpu(), 2, &tiny_params());
    let cost = roofline.prefill_cost(1000);
    assert_sum(&cost);
    // Per layer: 2 all-reduces of 1000·64·2 B = 128 kB, ring factor 2·1/2 = 1, link 5e8 B/s:
    // 2 × (256 µs + 10 µs) = 532 µs; × 2 layers = 1,064 µs.
    // Logit gather for 1 sampled token: 1/2 · 256·2 B / 5e8 = 512 ns + 10 µs latency.
    assert_eq!(cost.communication_ns, 1_064_000 + 10_512);
    // Compute-bound GEMMs halve exactly: 2,949,120 / 2. LM head (memory-bound) reads half
    // the weights: (8,192·2 + (64 + 128)·2) B / 8e9 = 2,096 ns.
    assert_eq!(cost.gemm_ns, 1_474_560 + 2_096);

    // TP 4, ring factor 2·3/4 = 1.5: per layer 2 × (1.5 × 128 kB / 5e8 + 10 µs) = 788 µs,
    // × 2 layers = 1,576 µs; gather 3/4 · 512 B / 5e8 = 768 ns + 10 µs.
    let tp4 = Roofline::new(&tiny_model(), &tiny_gpu(), 4, &tiny_params());
    assert_eq!(tp4.prefill_cost(1000).communication_ns, 1_576_000 + 10_768);
}

#[test]
fn kv_heads_are_replicated_when_fewer_than_gpus() {
    let roofline = Roofline::new(&tiny_model(), &tiny_gpu(), 4, &tiny_params());
    assert_eq!(roofline.heads_per_gpu(), 1);
    assert_eq!(roofline.kv_heads_per_gpu(), 1);
    // QKV width per GPU = (1 + 2·1)·16 = 48: weights 64·48 = 3072, not (1 + 2·0.5)·16·64.
    let qkv = roofline.layer_gemms[0];
    let bytes_per_s = 1e10 * 0.8;
    assert!(within(qkv.weight_s, 64.0 * 48.0 * 2.0 / bytes_per_s, 1e-12));
    let tp2 = Roofline::new(&tiny_model(), &tiny_gpu(), 2, &tiny_params());
    assert_eq!(tp2.kv_heads_per_gpu(), 1);
    assert_eq!(tp2.heads_per_gpu(), 2);
}

#[test]
fn fp8_weights_use_fp8_peak_and_half_the_bytes() {
    let mut model = tiny_model();
    model.weight_dtype = Dtype::Fp8;
    let roofline = Roofline::new(&model, &tiny_gpu(), 1, &tiny_params());
    let cost = roofline.prefill_cost(1000);
    // Compute-bound layer GEMMs at 2e11 × 0.5: half of 2,949,120. LM head stays 16-bit.
    assert_eq!(cost.gemm_ns, 1_474_560 + 4_176);
    // Without an fp8 peak the weights run weight-only: the 16-bit peak, slowed 1.2× by the
    // conversion (`weight_only::MARLIN_FP8_COMPUTE_SLOWDOWN`): 2,949,120 × 1.2.
    let mut gpu = tiny_gpu();
    gpu.peak_flops_fp8 = None;
    let roofline = Roofline::new(&model, &gpu, 1, &tiny_params());
    assert_eq!(roofline.prefill_cost(1000).gemm_ns, 3_538_944 + 4_176);
    // Memory-bound decode reads 1-byte weights and 2-byte activations:
    // (36,864 + 832·2) B × 2 layers / 8e9 = 9,632 ns.
    assert_eq!(roofline.decode_cost(1, 100).gemm_ns, 9_632 + 4_176);
}

#[test]
fn an_f32_model_moves_f32_activations_and_weights() {
    let mut model = tiny_model();
    model.weight_dtype = Dtype::Fp32;
    let roofline = Roofline::new(&model, &tiny_gpu(), 1, &tiny_params());
    let cost = roofline.decode_cost(1, 100);
    // Twice the bf16 figures of `tiny_decode_is_memory_bound_and_matches_hand_computation`:
    // elementwise 1 × (2·2176 + 512) B × 2 / 8e9; the layer GEMMs' weights and activations
    // (2 × 75,392 B per layer) and the LM head's ((16,384 + 320) × 4 B) all double.
    assert_eq!(cost.elementwise_ns, 2 * 608);
    assert_eq!(cost.gemm_ns, 2 * (18_848 + 4_176));
    // Attention reads Q and O in f32; the cache stays in its own dtype (2-byte here):
    // 101 · 2·2·16·2 B + 2·4·16·4 B = 13,440 B per layer / 8e9 × 2 layers.
    assert_eq!(cost.attention_ns, 3_360);
}

#[test]
fn llama_8b_decode_is_dominated_by_weight_reads() {
    let params = realistic_params();
    let roofline = Roofline::new(&llama_8b_like(), &h100_like(), 1, &params);
    // Weights read per step, counted independently: per layer QKV 4096·6144 + O 4096·4096
    // + gate/up 4096·28672 + down 14336·4096 = 218,103,808; × 32 = 6,979,321,856; LM head
    // 4096·128256 = 525,336,576; total 7,504,658,432 parameters × 2 B ≈ 15.0 GB. (The 8B
    // count, ~16 GB, includes the embedding table, which a step only gathers rows of.)
    let weight_bytes = 7_504_658_432.0 * 2.0;
    assert_eq!(roofline.weight_bytes_read_per_step() as f64, weight_bytes);
    let expected_s = weight_bytes / (3.35e12 * params.memory_bandwidth_efficiency);
    let cost = roofline.decode_cost(1, 1024);
    assert_sum(&cost);
    let device_s = (cost.total_ns - cost.overhead_ns) as f64 / NS_PER_S;
    assert!(within(device_s, expected_s, 0.03), "device {device_s} s vs weights {expected_s} s");
    assert!(within(cost.gemm_ns as f64 / NS_PER_S, expected_s, 0.01));
    // ~5.6 ms per token at 80% of 3.35 TB/s.
    assert!(cost.total_ns > 5_000_000 && cost.total_ns < 6_000_000, "{cost:?}");
}

/// Mixtral-8x7B on one H100: a decode step reads the weights of the experts it runs. By
/// hand, per layer: attention projections 4096·6144 + 4096·4096 = 41,943,040 parameters,
/// one expert 3 · 4096 · 14336 = 176,160,768, the router 4096 · 8 = 32,768; the LM head
/// 4096 · 32000 = 131,072,000. One sequence runs 2 experts; 256 sequences reach all 8
/// (1 − (6/8)^256 ≈ 1).
#[test]
fn a_mixture_of_experts_decode_reads_the_experts_it_runs() {
    let params = realistic_params();
    let model = ModelSpec::preset("Mixtral-8x7B").expect("preset");
    let roofline = Roofline::new(&model, &h100_like(), 1, &params);
    let bytes_per_s = 3.35e12 * params.memory_bandwidth_efficiency;
    let weights_s = |experts: f64| {
        let per_layer = 41_943_040.0 + 32_768.0 + experts * 176_160_768.0;
        (32.0 * per_layer + 131_072_000.0) * 2.0 / bytes_per_s
    };
    let one = roofline.decode_cost(1, 1024);
    assert_sum(&one);
    let gemm_s = one.gemm_ns as f64 / NS_PER_S;
    assert!(within(gemm_s, weights_s(2.0), 0.005), "{gemm_s} s against {} s", weights_s(2.0));
    // About the active parameters: 12.9B of Mixtral's 46.7B, less the embedding table.
    let active = model.active_param_count() as f64 - 32000.0 * 4096.0;
    assert!(within(gemm_s, active * 2.0 / bytes_per_s, 0.01));

    let many = roofline.decode_cost(256, 1024);
    let gemm_s = many.gemm_ns as f64 / NS_PER_S;
    // All 8 experts' weights, plus the 256 rows' activations (2.2%).
    assert!(gemm_s >= weights_s(8.0) * 0.999 && within(gemm_s, weights_s(8.0), 0.03), "{gemm_s} against {}", weights_s(8.0));
    // A dense model of the same weights would price one sequence like 256.
    assert!(many.gemm_ns as f64 > 3.0 * one.gemm_ns as f64);
}

/// Expert parallelism on 2 GPUs: each holds 4 whole experts and the MLP's all-reduce
/// becomes two all-to-alls, each moving (T/2 tokens × 2 experts × 4096 × 2 B) × 1/2 per GPU.
#[test]
fn expert_parallelism_trades_the_mlp_all_reduce_for_all_to_alls() {
    let params = realistic_params();
    let mut model = ModelSpec::preset("Mixtral-8x7B").expect("preset");
    let tp = Roofline::new(&model, &h100_like(), 2, &params);
    model.moe.as_mut().expect("experts").expert_parallel = true;
    let ep = Roofline::new(&model, &h100_like(), 2, &params);
    let link = h100_like().interconnect_bandwidth_bytes_per_s * params.collective_bandwidth_efficiency;
    let latency_s = params.collective_latency_us * 1e-6;
    let tokens = 512.0;
    let allreduce_one_s = tokens * 4096.0 * 2.0 / link + latency_s; // ring factor 2·1/2 = 1
    let alltoall_one_s = (tokens / 2.0) * 2.0 * 4096.0 * 2.0 / 2.0 / link + latency_s;
    assert!(within(tp.allreduce_s(tokens), 32.0 * 2.0 * allreduce_one_s, 1e-9));
    assert!(within(ep.allreduce_s(tokens), 32.0 * (allreduce_one_s + 2.0 * alltoall_one_s), 1e-9));
    // nccl-tests' size of each all-to-all: the GPU's 256 tokens × 2 experts × 8 KiB, half
    // of which stays on the GPU.
    assert_eq!(ep.alltoall_send_bytes(tokens), 256.0 * 2.0 * 4096.0 * 2.0);
    assert_eq!(tp.alltoall_send_bytes(tokens), 0.0);
    assert!(ep.has_alltoalls() && !tp.has_alltoalls());
    // Balanced routing: the same expert rows per GPU either way, so prefill's compute-bound
    // expert GEMMs cost the same.
    let (a, b) = (tp.prefill_cost(4096), ep.prefill_cost(4096));
    assert!(within(a.gemm_ns as f64, b.gemm_ns as f64, 0.01), "{} against {}", a.gemm_ns, b.gemm_ns);
}

#[test]
fn tensor_parallel_2_halves_gemms_and_adds_communication() {
    let params = realistic_params();
    let tp1 = Roofline::new(&llama_8b_like(), &h100_like(), 1, &params);
    let tp2 = Roofline::new(&llama_8b_like(), &h100_like(), 2, &params);
    let cases: [fn(&Roofline) -> StepCost; 2] = [|r| r.decode_cost(1, 1024), |r| r.prefill_cost(4096)];
    for cost_of in cases {
        let one = cost_of(&tp1);
        let two = cost_of(&tp2);
        assert_sum(&two);
        assert_eq!(one.communication_ns, 0);
        assert!(two.communication_ns > 0);
        assert!(
            within(two.gemm_ns as f64, one.gemm_ns as f64 / 2.0, 0.01),
            "tp1 {} ns, tp2 {} ns",
            one.gemm_ns,
            two.gemm_ns
        );
        assert!(two.attention_ns < one.attention_ns);
    }
    // Decode all-reduces are latency-dominated: 32 layers × 2 × 8 µs plus the logit gather.
    let comm = tp2.decode_cost(1, 1024).communication_ns;
    assert!((32 * 2 * 8_000 + 8_000..32 * 2 * 9_000 + 9_000).contains(&comm), "{comm}");
}

#[test]
fn cost_is_monotone_in_batch_size_and_context() {
    for t in [1, 2, 4, 8] {
        let roofline = Roofline::new(&llama_8b_like(), &h100_like(), t, &tiny_params());
        let mut previous = StepCost::default();
        for batch_size in 1..=256 {
            let cost = roofline.decode_cost(batch_size, 2048);
            assert_sum(&cost);
            assert!(cost.total_ns >= previous.total_ns, "tp {t} batch {batch_size}");
            assert!(cost.gemm_ns >= previous.gemm_ns && cost.attention_ns >= previous.attention_ns);
            previous = cost;
        }
        let mut previous = StepCost::default();
        for context in (0..=131_072).step_by(512) {
            let cost = roofline.decode_cost(16, context);
            assert!(cost.total_ns >= previous.total_ns, "tp {t} context {context}");
            previous = cost;
        }
        let mut previous = StepCost::default();
        for prompt in (1..=16_384).step_by(97) {
            let cost = roofline.prefill_cost(prompt);
            assert!(cost.total_ns >= previous.total_ns, "tp {t} prompt {prompt}");
            assert!(cost.total_ns > cost.overhead_ns);
            previous = cost;
        }
    }
}

#[test]
fn mixed_batch_sums_attention_over_sequences_and_prices_lm_head_by_sampled_tokens() {
    let roofline = Roofline::new(&tiny_model(), &tiny_gpu(), 1, &tiny_params());
    let mut batch = Batch::default();
    // A non-final prefill chunk samples nothing; two decodes sample one token each.
    batch.push(SeqWork { seq: 0, new_tokens: 2, context_tokens: 20, samples_token: false, draft_tokens: 0 });
    batch.push(SeqWork { seq: 1, new_tokens: 1, context_tokens: 50, samples_token: true, draft_tokens: 0 });
    batch.push(SeqWork { seq: 2, new_tokens: 1, context_tokens: 70, samples_token: true, draft_tokens: 0 });
    let cost = roofline.predict(&batch);
    assert_sum(&cost);
    // Attention per layer: keys = (2·20 + 3) + 51 + 71 = 165 → 4·4·16·165 / 4e10 = 1,056 ns;
    // bytes = (22 + 51 + 71)·128 + 4·256 = 19,456 → 2,432 ns (memory-bound). × 2 layers.
    assert_eq!(cost.attention_ns, 4_864);
    // LM head for 2 sampled rows: (32,768 + 2·640) B / 8e9 = 4,256 ns; layer GEMMs at T = 4
    // are memory-bound (intensity < 4 FLOP/B, ridge 6.25): 2 × (73,728 + 4·1664) B / 8e9
    // = 20,096 ns.
    assert_eq!(cost.gemm_ns, 20_096 + 4_256);
    assert_eq!(cost.overhead_ns, 100_000 + 3 * 5_000);

    // Nothing sampled: no LM head at all.
    let mut chunk = Batch::default();
    chunk.push(SeqWork { seq: 0, new_tokens: 4, context_tokens: 0, samples_token: false, draft_tokens: 0 });
    assert_eq!(roofline.predict(&chunk).gemm_ns, 20_096);
}

#[test]
fn empty_batch_costs_nothing() {
    let roofline = Roofline::new(&tiny_model(), &tiny_gpu(), 2, &tiny_params());
    assert_eq!(roofline.predict(&Batch::default()), StepCost::default());
    assert_eq!(roofline.source(), "roofline");
}

#[test]
fn prediction_is_deterministic() {
    let roofline = Roofline::new(&llama_8b_like(), &h100_like(), 2, &realistic_params());
    assert_eq!(roofline.decode_cost(37, 1234), roofline.decode_cost(37, 1234));
    assert_eq!(roofline.prefill_cost(777), roofline.clone().prefill_cost(777));
}

/// Past one node a tensor-parallel all-reduce runs at the network's speed, its ring's slowest
/// link: Llama-3.1-405B at TP 16 on H100s pays 450/50 = 9 times the per-token link time of a
/// ring that stayed on NVLink (the latency per collective is the same).
#[test]
fn a_tensor_parallel_ring_past_one_node_runs_at_the_network() {
    let params = realistic_params();
    let model = ModelSpec::preset("Llama-3.1-405B").expect("preset");
    let h100 = GpuSpec::preset("H100-SXM").expect("preset");
    let nvlink_only = GpuSpec { scale_out_bandwidth_bytes_per_s: None, ..h100.clone() };
    let across = Roofline::new(&model, &h100, 16, &params);
    let within_node = Roofline::new(&model, &nvlink_only, 16, &params);
    let per_token = |r: &Roofline| r.layer_allreduces_s(2.0) - r.layer_allreduces_s(1.0);
    assert!(within(per_token(&across), 9.0 * per_token(&within_node), 1e-9));
    // At TP 8 the ring stays in the node either way.
    let (a, b) = (Roofline::new(&model, &h100, 8, &params), Roofline::new(&model, &nvlink_only, 8, &params));
    assert_eq!(a.layer_allreduces_s(64.0), b.layer_allreduces_s(64.0));
}
