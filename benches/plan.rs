//! Speed target (issue 12): a plan of at least 200 candidates in under 60 s on a 2-core machine.
//! `plans/bench-240.toml` (Llama-3.1-70B) and the same plan for Llama-3.1-8B: five GPUs, TP
//! 1/2/4/8, three `max_num_seqs`, bf16 and fp8, 240 candidates with a 20 req/s target. The
//! figure is recorded in docs/speed.md ("Planner speed").

use std::hint::black_box;
use std::path::Path;

use criterion::{Criterion, criterion_group, criterion_main};
use servesim::plan::{Plan, SearchOptions, evaluate, rank};

fn plan_240_candidates(c: &mut Criterion) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("plans/bench-240.toml");
    let text = std::fs::read_to_string(&path).expect("bench plan");
    let plans: Vec<Plan> = ["Llama-3.1-70B", "Llama-3.1-8B"]
        .iter()
        .map(|model| Plan::from_toml_str(&text.replace("Llama-3.1-70B", model), &path).expect("valid plan"))
        .collect();
    let candidates: Vec<_> = plans.iter().map(|p| p.space.candidates()).collect();
    assert_eq!(candidates.iter().map(Vec::len).sum::<usize>(), 240);
    let options = SearchOptions::default();
    let mut group = c.benchmark_group("plan");
    group.sample_size(10);
    group.bench_function("240_candidates_70b_and_8b", |b| {
        b.iter(|| {
            for (plan, candidates) in plans.iter().zip(&candidates) {
                let evaluations = evaluate(plan, candidates, &options).expect("plan runs");
                black_box(rank(plan, &evaluations).len());
            }
        })
    });
    group.finish();
}

criterion_group!(benches, plan_240_candidates);
criterion_main!(benches);
