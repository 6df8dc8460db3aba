//! Running a validated scenario: one simulation per sweep point, then the summary of each.

pub mod output;

use crate::cost::CostModel;
use crate::cost::roofline::Roofline;
use crate::metrics::Summary;
use crate::calibrate::profile::Profile;
use crate::cost::calibrated::Calibrated;
use crate::scenario::{KernelProfile, Scenario, ScenarioError, SweepPoint};
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

/// The cost model a scenario names, with a label for reports and the notes to print once.
pub struct ScenarioCost {
    pub model: Box<dyn CostModel + Sync>,
    /// `roofline`, or `calibrated profile (NAME, measured on GPU)`.
    pub label: String,
    pub notes: Vec<String>,
}

/// Kernel profiles read from files, once per process: a plan prices many candidates with one.
fn read_profile(path: &std::path::Path) -> Result<std::sync::Arc<Profile>, String> {
    static CACHE: std::sync::OnceLock<std::sync::Mutex<std::collections::HashMap<std::path::PathBuf, std::sync::Arc<Profile>>>> =
        std::sync::OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    if let Some(profile) = cache.lock().map_err(|_| "profile cache poisoned".to_string())?.get(path) {
        return Ok(profile.clone());
    }
    let profile = std::sync::Arc::new(Profile::read(path).map_err(|e| e.to_string())?);
    cache.lock().map_err(|_| "profile cache poisoned".to_string())?.insert(path.to_path_buf(), profile.clone());
    Ok(profile)
}

/// The scenario's cost model: its kernel profile (`[cost] profile = "auto"` or a profile CSV)
/// where it names one, else the roofline with its `[cost]` parameters. A profile of other
/// hardware than the scenario's is an error naming `cost.profile`; `auto` on a GPU with no
/// bundled profile is the roofline, with a note.
pub fn scenario_cost(scenario: &Scenario) -> Result<ScenarioCost, ScenarioError> {
    let invalid = |value: String, reason: String| ScenarioError::Invalid {
        file: scenario.path.clone(),
        field: "cost.profile".into(),
        value,
        reason,
    };
    let gpu = &scenario.hardware.gpu;
    let from_file;
    let (profile, name): (&Profile, String) = match &scenario.kernel_profile {
        None => {
            let roofline = cost_model(scenario);
            let label = roofline.source().to_string();
            return Ok(ScenarioCost { model: Box::new(roofline), label, notes: Vec::new() });
        }
        Some(KernelProfile::Auto) => match crate::cost::bundled::for_gpu(gpu) {
            Some((name, profile)) => (profile, format!("bundled {name}")),
            None => {
                let roofline = cost_model(scenario);
                let label = roofline.source().to_string();
                let note = format!(
                    "cost.profile = \"auto\": no profile is bundled for {} (bundled: {}); priced by the roofline",
                    gpu.name,
                    crate::cost::bundled::gpus().join(", ")
                );
                return Ok(ScenarioCost { model: Box::new(roofline), label, notes: vec![note] });
            }
        },
        Some(KernelProfile::File(path)) => {
            let shown = format!("{:?}", path.display().to_string());
            from_file = read_profile(path).map_err(|e| invalid(shown, e))?;
            (&*from_file, path.display().to_string())
        }
    };
    if let Some(mismatch) = profile.provenance.mismatch(gpu) {
        return Err(invalid(name, format!("{mismatch}; its timings would be wrong here")));
    }
    let calibrated = Calibrated::new(profile, &scenario.model, gpu, scenario.engine.tensor_parallel, &scenario.cost);
    let label = format!("{} ({name}, measured on {})", calibrated.source(), profile.provenance.measured_on());
    let notes = calibrated.notices().to_vec();
    Ok(ScenarioCost { model: Box::new(calibrated), label, notes })
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
