//! The RTX PRO 6000 runs of LLMServingSim's collection (vLLM 0.19.0) as their scenarios write
//! them (scripts/public_runs.py; docs/accuracy.md): the deployment each run recorded.

use std::path::{Path, PathBuf};

use servesim::cost::CostModel;
use servesim::run::scenario_cost;
use servesim::scenario::Scenario;
use servesim::sched::{Batch, SeqWork};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn scenario(run: &str) -> Scenario {
    let path = repo().join(format!("scenarios/public-runs/{run}.toml"));
    Scenario::load(Path::new(&path), &[]).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Qwen3-30B-A3B ran as vLLM's own data-parallel engine (meta.json: `data_parallel_size: 2`,
/// `enable_expert_parallel: true`, `tensor_parallel_size: 1`): two ranks that meet in every
/// expert layer, each holding half the experts; not two independent replicas holding all 128.
#[test]
fn qwen3_30b_a3b_runs_as_two_data_parallel_ranks_with_expert_parallelism() {
    let s = scenario("lss-rtxpro6000-qwen3-30b-a3b-dp2ep2");
    let dp = s.engine.data_parallel.expect("data-parallel ranks");
    assert_eq!((dp.ranks, s.engine.replicas, s.engine.tensor_parallel, s.hardware.count), (2, 1, 1, 2));
    let moe = s.model.moe.expect("a mixture of experts");
    assert!(moe.expert_parallel, "the experts are split over the ranks' GPUs");
    // The ranks exchange tokens by vLLM's default all-gather and reduce-scatter, priced from
    // NCCL's timings on two of these GPUs, not from the PCIe link's datasheet rate.
    let cost = scenario_cost(&s, false).unwrap();
    assert!(
        cost.notes.iter().any(|n| n.contains("NCCL's measured all-gather and reduce-scatter on 2 RTX-PRO-6000")),
        "{:#?}",
        cost.notes
    );
    // The experts' model on both GPUs would run an all-to-all; the ranks do not.
    assert!(!cost.notes.iter().any(|n| n.contains("all-to-all")), "{:#?}", cost.notes);
    // A decode step of 128 sequences a rank: 48 expert layers, each a 512 KiB all-gather
    // (31.2 µs) and reduce-scatter (31.2 µs), on top of the ranks' own work.
    let mut batch = Batch::default();
    for seq in 0..128 {
        batch.push_decode(SeqWork { seq, new_tokens: 1, context_tokens: 1024, samples_token: true, draft_tokens: 0 });
    }
    let step = cost.model.predict_ranks(&[&batch, &batch]);
    let exchange_ms = 48.0 * 2.0 * 31.2e-3;
    assert!(step.communication_ns as f64 >= exchange_ms * 1e6 * 0.99, "{step:?}");
}
