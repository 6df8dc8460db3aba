//! Data-parallel attention with expert parallelism (`[engine] data_parallel`, vLLM's
//! `--data-parallel-size` with `--enable-expert-parallel`; docs/moe.md): one rank is what it was
//! before, a lockstep step is the slowest rank plus the shared expert layers as computed by hand,
//! vLLM's balancer, the refusals, the memory each rank has, and the plan example's command.

mod common;

use std::path::Path;

use servesim::cost::roofline::Roofline;
use servesim::cost::{CostModel, StepCost};
use servesim::plan::Plan;
use servesim::plan::deploy::deployment;
use servesim::run::{run_scenario, scenario_cost};
use servesim::scenario::model::MoeSpec;
use servesim::scenario::parallel::All2AllBackend;
use servesim::scenario::{Policy, Scenario, ScenarioError};
use servesim::sched::{Batch, SeqWork};
use servesim::sim::{DataParallelSim, SimConfig, simulate, simulate_per_sequence};
use servesim::workload::RequestSpec;

use common::sim::{one_replica, request, scheduler};

/// DeepSeek-V3 in fp8 on eight H200s, `ENGINE` in [engine], priced by the roofline.
const DEEPSEEK: &str = r#"
    [model]
    preset = "DeepSeek-V3"
    dtype = "fp8"
    [hardware]
    gpu = "H200"
    [engine]
    policy = "vllm-v1"
    max_model_len = 8192
    ENGINE
    [cost]
    profile = "roofline"
    [workload]
    num_prompts = 40
    request_rate = 8.0
    seed = 3
    [workload.dataset]
    kind = "sharegpt"
    input = { dist = "lognormal", mean = 300, std = 200, min = 4, max = 2048 }
    output = { dist = "lognormal", mean = 100, std = 80, min = 2, max = 512 }
"#;

fn deepseek(engine: &str) -> Result<Scenario, ScenarioError> {
    Scenario::from_toml_str(&DEEPSEEK.replace("ENGINE", engine), Path::new("dp.toml"), &[])
}

fn decodes(n: u32, context_tokens: u32) -> Batch {
    let mut batch = Batch::default();
    for seq in 0..n {
        batch.push_decode(SeqWork { seq, new_tokens: 1, context_tokens, samples_token: true, draft_tokens: 0 });
    }
    batch
}

fn to_ns(seconds: f64) -> u64 {
    (seconds * 1e9).round() as u64
}

#[test]
fn one_rank_is_the_deployment_it_was() {
    let plain = deepseek("tensor_parallel = 8").unwrap();
    let one = deepseek("tensor_parallel = 8\ndata_parallel = 1").unwrap();
    assert_eq!(one.engine.data_parallel, None);
    assert_eq!(plain, one);
    let (a, b) = (run_scenario(&plain, &[99.0]), run_scenario(&one, &[99.0]));
    assert_eq!(format!("{:?}", a[0].summary), format!("{:?}", b[0].summary));
}

/// Eight ranks of one H200 each with DeepEP's low-latency kernels: the slowest rank's own step,
/// then the routed experts on all ranks' tokens (64 + 10, and one dummy token from each of six
/// idle ranks: eager batches are not padded) on one GPU of the eight that hold them, and DeepEP's
/// dispatch and combine as measured for DeepSeek-V3's shape at the largest rank's 64 tokens
/// (calibration/deepep/deepep.csv: 22.994 and 38.757 µs on the H200) in each of the 58 expert
/// layers. Replaying decode graphs, every rank is padded to the largest: 8 × 64 rows.
#[test]
fn a_lockstep_step_is_the_slowest_rank_plus_the_expert_layers() {
    let s = deepseek("tensor_parallel = 1\ndata_parallel = 8\nexpert_parallel = true\nall2all_backend = \"deepep_low_latency\"").unwrap();
    let cost = scenario_cost(&s, false).unwrap();
    assert!(cost.notes.iter().any(|n| n.contains("DeepEP's measured H200 table")), "{:?}", cost.notes);
    let (busy, light, idle) = (decodes(64, 1000), decodes(10, 3000), Batch::default());
    let ranks = [&busy, &light, &idle, &idle, &idle, &idle, &idle, &idle];
    let step = cost.model.predict_ranks(&ranks);

    let moe = s.model.moe.unwrap();
    let mut rank_model = s.model.clone();
    rank_model.moe = Some(MoeSpec { experts_per_token: 0, expert_parallel: false, ..moe });
    let rank = Roofline::new(&rank_model, &s.hardware.gpu, 1, &s.cost);
    let slowest = [rank.predict(&busy), rank.predict(&light)].into_iter().max_by_key(|c| c.total_ns).unwrap();
    let experts = Roofline::new(&s.model, &s.hardware.gpu, 8, &s.cost);
    let experts_ns = to_ns(experts.routed_experts_s(64.0 + 10.0 + 6.0));
    let exchange_ns = to_ns(58.0 * (22.994 + 38.757) * 1e-6);
    let expected = slowest.total_ns + experts_ns + exchange_ns;
    assert!(step.total_ns.abs_diff(expected) <= 2, "{} against {expected} by hand", step.total_ns);
    assert!(step.communication_ns.abs_diff(slowest.communication_ns + exchange_ns) <= 2);
    // A rank alone runs none of the routed experts.
    assert!(experts_ns > 0 && rank.routed_experts_s(64.0) == 0.0);
    let (mut busy, mut light) = (busy, light);
    (busy.graph_size, light.graph_size) = (Some(64), Some(16));
    let padded = cost.model.predict_ranks(&[&busy, &light, &idle, &idle, &idle, &idle, &idle, &idle]);
    let slowest = [rank.predict(&busy), rank.predict(&light)].into_iter().max_by_key(|c| c.total_ns).unwrap();
    let expected = slowest.total_ns + to_ns(experts.routed_experts_s(8.0 * 64.0)) + exchange_ns;
    assert!(padded.total_ns.abs_diff(expected) <= 2, "{} against {expected} by hand", padded.total_ns);
}

/// Under DeepEP's low-latency kernels vLLM loops a rank's expert layers over chunks of 256
/// tokens (`VLLM_MOE_DP_CHUNK_SIZE`), as many as the largest rank needs: a 600-token prompt
/// beside a 10-token decode batch runs three rounds of 256 + 10, 256 + 1 (the small rank runs
/// its last token again) and 88 + 1 rows, each with a dummy token from each of six idle ranks, with
/// DeepEP's dispatch and combine at 256, 256 and 88 tokens. The default backend runs one round.
#[test]
fn deepep_low_latency_runs_the_expert_layers_in_chunks_of_256_tokens() {
    let s = deepseek("tensor_parallel = 1\ndata_parallel = 8\nexpert_parallel = true\nall2all_backend = \"deepep_low_latency\"").unwrap();
    let cost = scenario_cost(&s, false).unwrap();
    assert!(cost.notes.iter().any(|n| n.contains("rounds of at most 256 token rows a rank")), "{:?}", cost.notes);
    let mut prompt = Batch::default();
    prompt.push(SeqWork { seq: 0, new_tokens: 600, context_tokens: 0, samples_token: true, draft_tokens: 0 });
    let (light, idle) = (decodes(10, 3000), Batch::default());
    let step = cost.model.predict_ranks(&[&prompt, &light, &idle, &idle, &idle, &idle, &idle, &idle]);

    let moe = s.model.moe.unwrap();
    let mut rank_model = s.model.clone();
    rank_model.moe = Some(MoeSpec { experts_per_token: 0, expert_parallel: false, ..moe });
    let rank = Roofline::new(&rank_model, &s.hardware.gpu, 1, &s.cost);
    let experts = Roofline::new(&s.model, &s.hardware.gpu, 8, &s.cost);
    let experts_ns = to_ns([272.0, 263.0, 95.0].iter().map(|&rows| experts.routed_experts_s(rows)).sum::<f64>());
    // DeepEP's H200 rows for DeepSeek-V3: 60.522 + 124.475 µs at 256 tokens; 88 between 64 and
    // 128, log-log.
    let between = |a: f64, b: f64| (a.ln() + (b / a).ln() * (88.0f64 / 64.0).ln() / 2.0f64.ln()).exp();
    let at_88 = between(22.994, 35.119) + between(38.757, 67.745);
    let exchange_ns = to_ns(58.0 * (2.0 * (60.522 + 124.475) + at_88) * 1e-6);
    let expected = rank.predict(&prompt).total_ns + experts_ns + exchange_ns;
    assert!(step.total_ns.abs_diff(expected) <= 3, "{} against {expected} by hand", step.total_ns);
    // One round would price the experts once, on 616 rows.
    let one_round = rank.predict(&prompt).total_ns + to_ns(experts.routed_experts_s(616.0));
    assert!(step.total_ns > one_round + exchange_ns / 2, "chunks re-read the experts' weights");

    let default = deepseek("tensor_parallel = 1\ndata_parallel = 8\nexpert_parallel = true").unwrap();
    let cost = scenario_cost(&default, false).unwrap();
    assert!(!cost.notes.iter().any(|n| n.contains("rounds of at most")), "{:?}", cost.notes);
}

/// vLLM's default backend gathers every rank's tokens and scatters them back: by hand from the
/// link, (d − 1) × T tokens of hidden × 2 bytes each way, plus a collective's latency, per
/// expert layer.
#[test]
fn the_default_backend_is_priced_by_the_link_and_says_so() {
    let s = deepseek("tensor_parallel = 2\ndata_parallel = 4\nexpert_parallel = true").unwrap();
    let cost = scenario_cost(&s, false).unwrap();
    assert!(cost.notes.iter().any(|n| n.contains("allgather_reducescatter") && n.contains("link-bandwidth formula")), "{:?}", cost.notes);
    let (batch, idle) = (decodes(32, 500), Batch::default());
    let step = cost.model.predict_ranks(&[&batch, &idle, &idle, &idle]);
    let alone = cost.model.predict_ranks(&[&batch]);
    assert_eq!(step, alone, "an idle rank's dummy batch costs nothing beyond the collectives it joins");
    let link = s.hardware.gpu.interconnect_bandwidth_bytes_per_s * s.cost.collective_bandwidth_efficiency;
    let per_layer = 2.0 * (3.0 * 32.0 * 7168.0 * 2.0 / link + s.cost.collective_latency_us * 1e-6);
    let mut rank_model = s.model.clone();
    rank_model.moe = Some(MoeSpec { experts_per_token: 0, expert_parallel: false, ..s.model.moe.unwrap() });
    let rank = Roofline::new(&rank_model, &s.hardware.gpu, 2, &s.cost).predict(&batch);
    let experts_ns = to_ns(Roofline::new(&s.model, &s.hardware.gpu, 8, &s.cost).routed_experts_s(32.0 + 3.0));
    let expected = rank.total_ns + experts_ns + to_ns(58.0 * per_layer);
    assert!(step.total_ns.abs_diff(expected) <= 2, "{} against {expected} by hand", step.total_ns);
}

/// Each rank's KV cache is sized from its own GPU's memory: attention and dense weights whole on
/// every rank, the experts split over all eight GPUs. MLA's latent cache is the same on every
/// GPU of a tensor-parallel engine, so eight ranks hold eight times the tokens TP 8 holds, less
/// what the replicated attention weights take.
#[test]
fn each_rank_has_its_own_kv_cache() {
    let tp8 = deepseek("tensor_parallel = 8").unwrap();
    let dp8 = deepseek("tensor_parallel = 1\ndata_parallel = 8\nexpert_parallel = true").unwrap();
    assert_eq!((dp8.hardware.count, dp8.engine.engines()), (8, 8));
    let m = &dp8.model;
    assert_eq!(m.weight_bytes_per_gpu_experts_over(8, 8), m.weight_bytes_per_gpu(8));
    let dp_weights = m.weight_bytes_per_gpu_experts_over(1, 8);
    assert!(dp_weights > m.weight_bytes_per_gpu(8) && dp_weights < m.weight_bytes_per_gpu(1) / 4, "{dp_weights}");
    let (tp_tokens, dp_tokens) = (tp8.engine.num_gpu_blocks as u64, 8 * dp8.engine.num_gpu_blocks as u64);
    assert!(dp_tokens > 3 * tp_tokens && dp_tokens < 8 * tp_tokens, "TP 8: {tp_tokens} blocks; 8 ranks: {dp_tokens}");
}

/// 10 ms a step, whatever it runs.
struct TenMs;

impl CostModel for TenMs {
    fn predict(&self, _: &Batch) -> StepCost {
        StepCost { total_ns: 10_000_000, gemm_ns: 10_000_000, ..StepCost::default() }
    }
    fn source(&self) -> &'static str {
        "10 ms a step"
    }
}

fn ranks(n: u32, lockstep: bool, frontend_per_token_ns: u64) -> SimConfig {
    SimConfig {
        replicas: n,
        frontend_per_token_ns,
        data_parallel: Some(DataParallelSim { ranks: n, lockstep }),
        ..one_replica(scheduler(16384, 64, 20_000), Policy::VllmV1)
    }
}

/// vLLM's balancer weighs a waiting request four times a running one. Rank 1 holds one request
/// still in its front end (a 10,000-token prompt at 1 ms a token); rank 0 takes the next four,
/// each arriving once the one before runs, until it runs four (4 = 4 × 1, the lower index wins).
/// Least-outstanding routing would have sent the second of them to rank 1.
#[test]
fn the_balancer_weighs_waiting_requests_four_times() {
    let s = 1_000_000_000;
    let mut requests = vec![request(0, 10, 1000), request(0, 10_000, 10)];
    requests.extend((1..=5).map(|i| request(i * s, 10, 1000)));
    let out = simulate(&requests, &ranks(2, false, 1_000_000), &TenMs);
    let replicas: Vec<u32> = out.extras.iter().map(|e| e.replica).collect();
    assert_eq!(replicas, [0, 1, 0, 0, 0, 0, 1]);
    // Requests that arrive together spread one per rank, in order.
    let burst: Vec<RequestSpec> = (0..8).map(|_| request(0, 100, 20)).collect();
    let out = simulate(&burst, &ranks(4, true, 0), &TenMs);
    assert_eq!(out.extras.iter().map(|e| e.replica).collect::<Vec<_>>(), [0, 1, 2, 3, 0, 1, 2, 3]);
}

/// Steps of every rank that runs begin together and cost the same; the next begins when they
/// end. Independent ranks (a model without experts) do not wait for each other.
#[test]
fn ranks_in_lockstep_step_together() {
    let requests: Vec<RequestSpec> = (0..6).map(|i| request(i * 3_000_000, 50 + 40 * i as u32, 30 + 7 * i as u32)).collect();
    let together = |lockstep: bool| {
        let out = simulate(&requests, &ranks(2, lockstep, 0), &TenMs);
        let mut starts: Vec<u64> = out.timeline.iter().map(|r| r.start_ns).collect();
        starts.sort();
        starts.dedup();
        starts.windows(2).all(|w| w[1] - w[0] >= 10_000_000)
    };
    assert!(together(true));
    assert!(!together(false), "independent ranks overlap: the check can fail");
    // Deterministic: the same run twice, and the decode cohort's fast path is the per-sequence
    // reference's, with a step's price depending on every rank's batch.
    let a = simulate(&requests, &ranks(2, true, 0), &TenMs);
    let b = simulate(&requests, &ranks(2, true, 0), &TenMs);
    assert_eq!(format!("{:?}", a.records), format!("{:?}", b.records));
    let many: Vec<RequestSpec> = (0..60).map(|i| request(i * 7_000_000, 30 + (i as u32 * 37) % 400, 5 + (i as u32 * 13) % 90)).collect();
    for n in [2, 3, 4] {
        let fast = simulate(&many, &ranks(n, true, 0), &TokensAcrossRanks);
        let reference = simulate_per_sequence(&many, &ranks(n, true, 0), &TokensAcrossRanks);
        assert_eq!(format!("{:?}", fast.records), format!("{:?}", reference.records), "{n} ranks");
        assert_eq!(fast.timeline, reference.timeline, "{n} ranks");
    }
}

/// 1 ms a step, plus 100 µs per token of every rank's batch: ranks that share a layer.
struct TokensAcrossRanks;

impl CostModel for TokensAcrossRanks {
    fn predict(&self, batch: &Batch) -> StepCost {
        self.predict_ranks(&[batch])
    }
    fn predict_ranks(&self, ranks: &[&Batch]) -> StepCost {
        let tokens: u64 = ranks.iter().map(|b| u64::from(b.tokens())).sum();
        StepCost { total_ns: 1_000_000 + 100_000 * tokens, gemm_ns: 100_000 * tokens, overhead_ns: 1_000_000, ..StepCost::default() }
    }
    fn source(&self) -> &'static str {
        "tokens across ranks"
    }
}

#[test]
fn what_vllm_refuses_is_refused_by_name() {
    let refused = |engine: &str, field: &str, words: &str| {
        let e = deepseek(engine).expect_err(engine).to_string();
        assert!(e.contains(&format!("field `{field}`")) && e.contains(words), "{engine}: {e}");
    };
    refused("tensor_parallel = 1\ndata_parallel = 0", "engine.data_parallel", "at least 1");
    refused("tensor_parallel = 1\ndata_parallel = 8\nall2all_backend = \"deepep\"", "engine.all2all_backend", "unknown backend; known: naive");
    refused("tensor_parallel = 8\nall2all_backend = \"naive\"", "engine.all2all_backend", "engine.data_parallel is 1");
    refused("tensor_parallel = 1\ndata_parallel = 8\nall2all_backend = \"pplx\"", "engine.all2all_backend", "only with expert parallelism");
    // What each release has (the wheels' vllm/envs.py and vllm/config/parallel.py).
    let ep = "tensor_parallel = 1\ndata_parallel = 8\nexpert_parallel = true";
    refused(&format!("{ep}\nversion = \"0.19.0\"\nall2all_backend = \"naive\""), "engine.all2all_backend", "removed in 0.19.0");
    refused(&format!("{ep}\nversion = \"0.17.0\"\nall2all_backend = \"pplx\""), "engine.all2all_backend", "removed in 0.17.0");
    refused(&format!("{ep}\nversion = \"0.10.2\"\nall2all_backend = \"allgather_reducescatter\""), "engine.all2all_backend", "added in 0.11.0");
    let at = |version: &str| deepseek(&format!("{ep}\nversion = \"{version}\"")).unwrap().engine.data_parallel.unwrap().all2all;
    assert_eq!((at("0.10.2"), at("0.11.0"), at("0.19.0")), (All2AllBackend::Naive, All2AllBackend::AllgatherReducescatter, All2AllBackend::AllgatherReducescatter));
    assert!(deepseek(&format!("{ep}\nversion = \"0.15.1\"\nall2all_backend = \"naive\"")).is_ok());
    let short = Scenario::from_toml_str(&DEEPSEEK.replace("ENGINE", "tensor_parallel = 8\ndata_parallel = 2"), Path::new("dp.toml"), &["hardware.count=8".into()]);
    let e = short.unwrap_err().to_string();
    assert!(e.contains("field `hardware.count` = 8") && e.contains("tensor_parallel × data_parallel = 8 × 2 = 16 GPUs"), "{e}");
    let v0 = Scenario::from_toml_str(&DEEPSEEK.replace("ENGINE", "tensor_parallel = 1\ndata_parallel = 8"), Path::new("dp.toml"), &["engine.policy=vllm-v0".into()]);
    let e = v0.unwrap_err().to_string();
    assert!(e.contains("field `engine.data_parallel` = 8") && e.contains("policy \"vllm-v0\" has none"), "{e}");
    refused("tensor_parallel = 1\ndata_parallel = 8\nrouter = \"prefix-aware\"", "engine.router", "data-parallel");
    refused("tensor_parallel = 1\ndata_parallel = 3\nexpert_parallel = true", "engine.data_parallel", "do not divide over");
    refused("tensor_parallel = 1\ndata_parallel = 2000", "engine.data_parallel", "more than 1024 ranks");
    // A dense model runs independent ranks, and no backend moves anything between them.
    let dense = |engine: &str| {
        let text = DEEPSEEK.replace("preset = \"DeepSeek-V3\"", "preset = \"Llama-3.1-8B\"").replace("ENGINE", engine);
        Scenario::from_toml_str(&text, Path::new("dense.toml"), &[])
    };
    let independent = dense("tensor_parallel = 1\ndata_parallel = 4").unwrap();
    assert!(independent.engine.data_parallel.is_some_and(|dp| !dp.lockstep));
    let e = dense("tensor_parallel = 1\ndata_parallel = 4\nall2all_backend = \"naive\"").unwrap_err().to_string();
    assert!(e.contains("engine.all2all_backend") && e.contains("no experts"), "{e}");
}

/// The plan example's commands: its winner (docs/planning.md), two ranks of TP 2 per instance
/// on eight GPUs, and vLLM's DeepSeek recipe, eight ranks of one GPU, both with the experts
/// split over all eight.
#[test]
fn the_plan_example_writes_vllms_data_parallel_commands() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("plans/deepseek-v3-h200.toml");
    let plan = Plan::from_toml_str(&std::fs::read_to_string(&path).unwrap(), &path).unwrap();
    let all = plan.space.candidates();
    for (tp, dp, words) in [
        (2, 4, "vllm serve deepseek-ai/DeepSeek-V3 --tensor-parallel-size 2 --max-num-seqs 256 --max-num-batched-tokens 8192 --max-model-len 8192 --gpu-memory-utilization 0.9 --block-size 16 --enable-prefix-caching --quantization fp8 --enable-expert-parallel --data-parallel-size 4 --all2all-backend allgather_reducescatter --async-scheduling --port 8000"),
        (1, 8, "--tensor-parallel-size 1 "),
    ] {
        let candidate = all.iter().find(|c| c.tensor_parallel == tp && c.data_parallel == Some(dp) && c.expert_parallel == Some(true)).unwrap();
        assert_eq!(candidate.gpus_per_replica(), 8);
        let d = deployment(&candidate.scenario(&plan, 5).unwrap(), 5, None).unwrap();
        let script = d.script("example");
        let line = script.lines().find(|l| l.starts_with("vllm serve")).unwrap();
        assert!(line.contains(words) && line.contains(&format!("--enable-expert-parallel --data-parallel-size {dp} ")), "{line}");
        assert!(script.contains("on each of 5 replica(s), 8 GPU(s) each"), "{script}");
        assert!(d.unknown_flags.is_empty(), "{:?}", d.unknown_flags);
    }
}
