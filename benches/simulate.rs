//! Speed target (issue 2): 100,000 ShareGPT-like requests, Llama-3.1-8B on 1×H100, Poisson
//! arrivals near saturation, simulated in under 0.5 s on one core. The figure measured here is
//! recorded in docs/speed.md ("Simulator speed").

use std::hint::black_box;
use std::path::Path;

use criterion::{Criterion, criterion_group, criterion_main};
use servesim::run::run_scenario;
use servesim::scenario::Scenario;

fn bench_sharegpt_100k(c: &mut Criterion) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/bench-sharegpt-100k.toml");
    let scenario = Scenario::load(&path, &[]).expect("bench scenario");
    let mut group = c.benchmark_group("simulate");
    group.sample_size(10);
    group.bench_function("sharegpt_100k_llama8b_h100", |b| b.iter(|| black_box(run_scenario(&scenario, &[99.0]))));
    group.finish();
}

criterion_group!(benches, bench_sharegpt_100k);
criterion_main!(benches);
