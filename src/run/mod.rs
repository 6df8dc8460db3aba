//! Running a validated scenario: one simulation per sweep point, then the summary of each.

pub mod output;

use crate::cost::CostModel;
use crate::cost::roofline::Roofline;
use crate::metrics::Summary;
use crate::scenario::{Scenario, SweepPoint};
use crate::sched::SchedulerConfig;
use crate::sim::{self, SimConfig, SimOutput};
use crate::workload;

/// One sweep point's simulation and its summary.
#[derive(Clone, Debug)]
pub struct PointResult {
    pub num_prompts: u32,
    pub request_rate: f64,
    pub output: SimOutput,
    pub summary: Summary,
}

/// The scheduler knobs of a scenario's engine, per replica.
pub fn scheduler_config(scenario: &Scenario) -> SchedulerConfig {
    let e = &scenario.engine;
    SchedulerConfig {
        max_num_batched_tokens: e.max_num_batched_tokens,
        max_num_seqs: e.max_num_seqs,
        enable_chunked_prefill: e.enable_chunked_prefill,
        block_size: e.block_size,
        num_gpu_blocks: e.num_gpu_blocks,
        watermark: e.watermark,
        // TGI's limits; its budget fields above were resolved to its prefill budget, no cap
        // on sequences, no chunking and no watermark.
        tgi: e.tgi,
    }
}

/// The simulated deployment and client of a scenario.
pub fn sim_config(scenario: &Scenario) -> SimConfig {
    SimConfig {
        scheduler: scheduler_config(scenario),
        policy: scenario.engine.policy,
        replicas: scenario.engine.replicas,
        router: scenario.engine.router,
        max_concurrency: scenario.workload.max_concurrency,
        frontend_overhead_ns: (scenario.cost.frontend_overhead_us * 1e3).round() as u64,
    }
}

/// The cost model a scenario uses.
pub fn cost_model(scenario: &Scenario) -> Roofline {
    Roofline::new(&scenario.model, &scenario.hardware.gpu, scenario.engine.tensor_parallel, &scenario.cost)
}

/// Simulates every point of the scenario's sweep. `percentiles` are those the summaries compute
/// (vLLM's `--metric-percentiles`).
pub fn run_scenario(scenario: &Scenario, percentiles: &[f64]) -> Vec<PointResult> {
    run_scenario_with_progress(scenario, &cost_model(scenario), percentiles, &mut |_| {})
}

/// [`run_scenario`] with a given cost model (e.g. a calibrated profile), calling `on_point` after each sweep point finishes (e.g. to advance a
/// progress bar); the results do not depend on it.
pub fn run_scenario_with_progress(
    scenario: &Scenario,
    cost: &dyn CostModel,
    percentiles: &[f64],
    on_point: &mut dyn FnMut(&PointResult),
) -> Vec<PointResult> {
    let config = sim_config(scenario);
    scenario
        .workload
        .points()
        .iter()
        .map(|point| {
            let result = run_point(scenario, &config, cost, point, percentiles);
            on_point(&result);
            result
        })
        .collect()
}

/// Simulates one sweep point.
pub fn run_point(
    scenario: &Scenario,
    config: &SimConfig,
    cost: &dyn CostModel,
    point: &SweepPoint,
    percentiles: &[f64],
) -> PointResult {
    let requests = workload::generate_point(&scenario.workload, point);
    let output = sim::simulate(&requests, config, cost);
    let summary = Summary::from_records(&output.records, percentiles);
    PointResult { num_prompts: point.num_prompts, request_rate: point.request_rate, output, summary }
}
