//! Times the three phases of a simulated benchmark separately (workload generation, the
//! simulation, the summary), best of 12, on the 100k-request bench scenario or the number of
//! requests given: where the criterion bench's time goes (docs/speed.md). It installs the
//! binary's allocator, so memory behaves as in `servesim simulate`.
//!
//!     cargo run --release --example simulate_phases [-- NUM_PROMPTS]

use std::time::{Duration, Instant};

use servesim::metrics::Summary;
use servesim::run::{cost_model, sim_config};
use servesim::scenario::Scenario;

#[global_allocator]
static ALLOCATOR: servesim::engine::cpu::HugePageAlloc = servesim::engine::cpu::HugePageAlloc;

const RUNS: usize = 12;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/bench-sharegpt-100k.toml");
    let num_prompts: u32 = match std::env::args().nth(1) {
        Some(n) => n.parse()?,
        None => 100_000,
    };
    let scenario = Scenario::load(&path, &[format!("workload.num_prompts={num_prompts}")])?;
    let cost = cost_model(&scenario);
    let config = sim_config(&scenario);
    let point = &scenario.workload.points()[0];
    let mut best = [Duration::MAX; 3];
    let mut counts = (0, 0);
    for _ in 0..RUNS {
        let start = Instant::now();
        let requests = servesim::workload::generate_point(&scenario.workload, point);
        let generated = Instant::now();
        let output = servesim::sim::simulate(&requests, &config, &*cost);
        let simulated = Instant::now();
        counts = (output.steps, output.events);
        std::hint::black_box(Summary::from_records(&output.records, &[99.0]));
        let summarised = Instant::now();
        for (b, phase) in best.iter_mut().zip([generated - start, simulated - generated, summarised - simulated]) {
            *b = (*b).min(phase);
        }
    }
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let (steps, events) = counts;
    let per_request = |count: u64| count as f64 / f64::from(num_prompts);
    let total = best[0] + best[1] + best[2];
    println!(
        "{steps} engine steps ({:.2} per request), {events} events ({:.2} per request), {:.0} ns per request",
        per_request(steps),
        per_request(events),
        total.as_secs_f64() * 1e9 / f64::from(num_prompts)
    );
    println!(
        "{num_prompts} requests, best of {RUNS}: generation {:.2} ms, simulation {:.2} ms, summary {:.2} ms, together {:.2} ms",
        ms(best[0]),
        ms(best[1]),
        ms(best[2]),
        ms(total)
    );
    Ok(())
}
