//! Running a validated scenario: one simulation per sweep point, then the summary of each.

mod csv_line;
mod data_parallel;
mod fp8_gemms;
pub mod output;
mod rows;

use crate::cost::speculative::SpeculativeCost;
use crate::cost::CostModel;
use crate::cost::roofline::Roofline;
use crate::metrics::Summary;
use crate::calibrate::profile::{Profile, ProfileFacts, ProfileIndex, Provenance};
use crate::cost::calibrated::Calibrated;
use crate::cost::bundled;
use crate::cost::profile_match::{fitted_profile_mismatches, kernel_mismatches, kernel_profile_mismatches};
use crate::scenario::{KernelProfile, Policy, PoolRole, Scenario, ScenarioError, SweepPoint, transfer};
use crate::sim::link::LinkSpec;
use crate::sched::{Batch, SchedulerConfig, SeqWork};
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
        kv_blocks_per_seq: e.kv_blocks_per_seq,
        watermark: e.watermark,
        enable_prefix_caching: e.enable_prefix_caching,
        num_scheduler_steps: e.num_scheduler_steps,
        stream_window_steps: e
            .profile
            .as_ref()
            .is_some_and(|p| p.defaults.multi_step_streaming == crate::scenario::engine_profile::MultiStepStreaming::EveryStep),
        schedule_ahead: schedules_ahead(scenario),
        speculative: e.speculative.as_ref().map(|s| s.scheduler.clone()),
        // TGI's limits; its budget fields above were resolved to its prefill budget, no cap
        // on sequences, no chunking and no watermark.
        tgi: e.tgi,
        // SGLang's knobs; its max_running_requests, page size and token pool are above.
        sglang: e.sglang.clone(),
    }
}

/// Whether the engine forms each batch while the step before it runs: vLLM V1 with async
/// scheduling and SGLang with its overlap scheduler, both of which hide CPU time behind the GPU
/// that way (`cpu_overlap` above 0); vLLM V0's async output processing hides some too, but
/// schedules in series.
fn schedules_ahead(scenario: &Scenario) -> bool {
    matches!(scenario.engine.policy, Policy::VllmV1 | Policy::Sglang) && scenario.cost.cpu_overlap > 0.0
}

/// The simulated deployment and client of a scenario.
pub fn sim_config(scenario: &Scenario) -> SimConfig {
    SimConfig {
        scheduler: scheduler_config(scenario),
        policy: scenario.engine.policy,
        replicas: scenario.engine.engines(),
        router: scenario.engine.router,
        data_parallel: scenario.engine.data_parallel.map(|dp| sim::DataParallelSim { ranks: dp.ranks, lockstep: dp.lockstep }),
        max_concurrency: scenario.workload.max_concurrency,
        frontend_overhead_ns: (scenario.cost.frontend_overhead_us * 1e3).round() as u64,
        frontend_per_token_ns: (scenario.cost.frontend_per_token_us * 1e3).round() as u64,
        timeline: false,
    }
}

/// The cost model a scenario uses: the roofline with its `[cost]` parameters, and with
/// speculative decoding the proposer's passes on top ([`SpeculativeCost`]).
pub fn cost_model(scenario: &Scenario) -> Box<dyn CostModel + Sync> {
    if let Some(Ok(ranks)) = data_parallel::lockstep_cost(scenario, &|s| Ok(roofline_cost(s))) {
        return ranks.model;
    }
    let target = Box::new(roofline_model(scenario));
    match proposer_scenario(scenario) {
        Some((proposer, k)) => Box::new(SpeculativeCost::new(target, Box::new(roofline_model(&proposer)), k)),
        None => target,
    }
}

/// The roofline of the scenario's model, with its `[cost]` parameters.
fn roofline_model(scenario: &Scenario) -> Roofline {
    Roofline::new(&scenario.model, &scenario.hardware.gpu, scenario.engine.tensor_parallel, &scenario.cost)
}

/// The scenario as its speculative proposer alone: the draft model (or MTP head) on the same
/// GPUs and engine, to price the proposer's passes as the target's are priced.
fn proposer_scenario(scenario: &Scenario) -> Option<(Scenario, u32)> {
    let spec = scenario.engine.speculative.as_ref()?;
    let draft = spec.draft.clone()?;
    let mut alone = scenario.clone();
    alone.model = draft;
    alone.engine.speculative = None;
    Some((alone, spec.scheduler.num_speculative_tokens))
}

/// Where a scenario's step prices come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CostKind {
    /// Datasheet peaks and `[cost]` efficiencies (the defaults' guesses, or the scenario's).
    Roofline,
    /// The roofline with a fitted profile's values (`servesim fit`).
    Fitted,
    /// Kernel timings measured on the scenario's GPU.
    Calibrated,
    /// Kernel utilisations measured on the nearest bundled GPU, applied to this GPU's peaks.
    Transferred,
}

impl CostKind {
    pub fn name(self) -> &'static str {
        match self {
            CostKind::Roofline => "roofline",
            CostKind::Fitted => "fitted",
            CostKind::Calibrated => "calibrated",
            CostKind::Transferred => "transferred",
        }
    }
}

/// The cost model a scenario names, with a label for reports and the lines to print once.
pub struct ScenarioCost {
    pub model: Box<dyn CostModel + Sync>,
    pub kind: CostKind,
    /// `roofline`, or `calibrated profile (NAME, measured on GPU)`.
    pub label: String,
    /// What the model could not price from measurements, and how it did instead.
    pub notes: Vec<String>,
    /// Mismatches the user allowed (`--allow-profile-mismatch`): to print loudly.
    pub warnings: Vec<String>,
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
/// where it names one, else the roofline with its `[cost]` parameters (fitted ones, if it names
/// a fitted profile).
///
/// A profile that does not describe the scenario (another GPU, engine or weight dtype; see
/// [`profile_match`](crate::cost::profile_match)) is an error naming `cost.profile`, or with
/// `allow_mismatch` a warning. `auto` picks the profile bundled for the GPU, and says in a note
/// where it differs from the scenario; for a GPU with none, the nearest bundled GPU's
/// utilisations at this GPU's peaks ([`Calibrated::transferred`]).
///
/// With speculative decoding, the proposer is priced the same way, and its passes are added
/// ([`SpeculativeCost`]).
pub fn scenario_cost(scenario: &Scenario, allow_mismatch: bool) -> Result<ScenarioCost, ScenarioError> {
    if let Some(ranks) = data_parallel::lockstep_cost(scenario, &|s| scenario_cost(s, allow_mismatch)) {
        return ranks;
    }
    let target = target_cost(scenario, allow_mismatch)?;
    let Some((proposer, k)) = proposer_scenario(scenario) else { return Ok(target) };
    let draft = target_cost(&proposer, allow_mismatch)?;
    let ScenarioCost { model, kind, label, mut notes, mut warnings } = target;
    notes.extend(draft.notes);
    warnings.extend(draft.warnings);
    let label = format!("{label}; proposer {}: {}", proposer.model.name, draft.label);
    Ok(ScenarioCost { model: Box::new(SpeculativeCost::new(model, draft.model, k)), kind, label, notes, warnings })
}

/// [`scenario_cost`] of the target model alone.
fn target_cost(scenario: &Scenario, allow_mismatch: bool) -> Result<ScenarioCost, ScenarioError> {
    let cost = target_cost_of_profile(scenario, allow_mismatch)?;
    let share = scenario.cost.transfer_utilisation;
    if cost.kind != CostKind::Transferred && share != 1.0 {
        return Err(ScenarioError::Invalid {
            file: scenario.path.clone(),
            field: "cost.transfer_utilisation".into(),
            value: share.to_string(),
            reason: format!(
                "applies only to a kernel profile carried over from another GPU (cost.profile = \"auto\" on a GPU without a bundled profile); {} is priced by {}",
                scenario.hardware.gpu.name, cost.label
            ),
        });
    }
    Ok(cost)
}

/// [`target_cost`] before its check that a transfer-only parameter is not set in vain.
fn target_cost_of_profile(scenario: &Scenario, allow_mismatch: bool) -> Result<ScenarioCost, ScenarioError> {
    let invalid = |value: String, reason: String| ScenarioError::Invalid {
        file: scenario.path.clone(),
        field: "cost.profile".into(),
        value,
        reason,
    };
    let mut warnings = Vec::new();
    let mut check = |name: &str, mismatches: Vec<String>| -> Result<(), ScenarioError> {
        if mismatches.is_empty() {
            return Ok(());
        }
        let all = mismatches.join("; ");
        if !allow_mismatch {
            return Err(invalid(
                format!("{name:?}"),
                format!("{all}: its numbers would be wrong here (--allow-profile-mismatch uses it anyway)"),
            ));
        }
        warnings.push(format!("{all}: {name} prices this scenario's steps anyway (--allow-profile-mismatch)"));
        Ok(())
    };
    let gpu = &scenario.hardware.gpu;
    let tp = scenario.engine.tensor_parallel;
    let roofline = |kind: CostKind, notes: Vec<String>, warnings: Vec<String>| {
        let model = roofline_model(scenario);
        let label = match (kind, &scenario.fitted_profile) {
            (CostKind::Fitted, Some(fitted)) => format!("{} (fitted profile {})", model.source(), fitted.path.display()),
            _ => model.source().to_string(),
        };
        ScenarioCost { model: Box::new(model), kind, label, notes, warnings }
    };
    let unprofiled_layers = scenario.model.unprofiled_layers_within(scenario.engine.max_model_len);
    let unprofiled_weights = crate::cost::quant::unprofiled(&scenario.model);
    // The profile's whole-module rows price what its GEMM and attention rows cannot, where
    // it has them; what they leave is said with the note below.
    let row_notes = if scenario.kernel_profile.is_some() && (unprofiled_layers.is_some() || unprofiled_weights.is_some()) {
        match rows::row_priced(scenario, allow_mismatch)? {
            rows::Rows::Priced(cost) => return Ok(cost),
            rows::Rows::Unpriced(notes) => notes,
        }
    } else {
        Vec::new()
    };
    if let (Some(_), Some(layers)) = (&scenario.kernel_profile, unprofiled_layers) {
        let note = format!(
            "cost.profile: kernel profiles have no rows for {layers}, so {} is priced by the roofline, not as a decoder whose every layer is alike",
            scenario.model.name
        );
        return Ok(roofline(CostKind::Roofline, [vec![note], row_notes].concat(), warnings));
    }
    if let (Some(_), Some(weights)) = (&scenario.kernel_profile, unprofiled_weights) {
        let note = format!("cost.profile: kernel profiles have no rows for {weights}, so {} is flagged as roofline: priced by the roofline, not as 16-bit GEMMs", scenario.model.name);
        return Ok(roofline(CostKind::Roofline, [vec![note], row_notes].concat(), warnings));
    }
    let (index, provenance, name, mut notes): (ProfileIndex, &Provenance, String, Vec<String>);
    let from_file;
    match &scenario.kernel_profile {
        None => {
            let Some(fitted) = &scenario.fitted_profile else { return Ok(roofline(CostKind::Roofline, Vec::new(), warnings)) };
            check(&fitted.path.display().to_string(), fitted_profile_mismatches(fitted, scenario))?;
            return Ok(roofline(CostKind::Fitted, Vec::new(), warnings));
        }
        Some(KernelProfile::Auto) => match bundled::for_policy(gpu, scenario.engine.policy.name()) {
            Some(b) => {
                // `auto` is the best there is for this GPU; what it lacks is said, not refused.
                (index, provenance, name) = (b.index.clone(), &b.provenance, format!("bundled {}", b.name));
                notes = auto_notes(b.name, kernel_profile_mismatches(provenance, &b.facts, scenario));
            }
            None => match bundled::nearest(gpu) {
                Some(b) => {
                    let measured_on = b.provenance.measured_on();
                    let model = Calibrated::transferred_index(b.index.clone(), &measured_on, &scenario.model, gpu, tp, &scenario.cost);
                    let label = format!("{} (bundled {}, measured on {measured_on}, transferred to {})", model.source(), b.name, gpu.name);
                    let mut notes = auto_notes(b.name, kernel_mismatches(&b.provenance, &b.facts, scenario));
                    notes.extend_from_slice(model.notices());
                    notes.extend(crate::cost::quant::note(&scenario.model));
                    match (scenario.transfer_correction, transfer::for_gpu(&gpu.name)) {
                        (Some(applied), _) => notes.push(applied.describe()),
                        (None, Some(unused)) if !unused.fitted_on(scenario.engine.policy.name()) => notes.push(format!(
                            "{} is not applied: it was fitted on {} runs, and engine time on {} under {} was never recorded; kernels are assumed as well tuned as {measured_on}'s",
                            unused.file,
                            unused.policies.join(" and "),
                            gpu.name,
                            scenario.engine.policy.name(),
                        )),
                        (None, Some(unused)) => notes.push(format!(
                            "{} is not applied here: [cost] is shared by pools of different GPUs",
                            unused.describe()
                        )),
                        (None, None) => notes.push(format!(
                            "no correction is bundled for {}: its kernels are assumed as well tuned as {measured_on}'s",
                            gpu.name,
                        )),
                    }
                    return Ok(ScenarioCost { model: Box::new(model), kind: CostKind::Transferred, label, notes, warnings });
                }
                None => {
                    let note = format!(
                        "cost.profile = \"auto\": no profile is bundled for {} and its datasheet has no peaks to transfer one to; priced by the roofline",
                        gpu.name
                    );
                    return Ok(roofline(CostKind::Roofline, vec![note], warnings));
                }
            },
        },
        Some(KernelProfile::File(path)) => {
            let shown = format!("{:?}", path.display().to_string());
            from_file = read_profile(path).map_err(|e| invalid(shown, e))?;
            let facts = ProfileFacts::of(&from_file.rows);
            check(&path.display().to_string(), kernel_profile_mismatches(&from_file.provenance, &facts, scenario))?;
            (index, provenance, name, notes) =
                (ProfileIndex::new(&from_file), &from_file.provenance, path.display().to_string(), Vec::new());
        }
    };
    let (index, name) = match scenario.kernel_profile {
        Some(KernelProfile::Auto) => fp8_gemms::for_scenario(scenario, index, name, &mut notes),
        _ => (index, name),
    };
    let calibrated = Calibrated::from_index(index, &scenario.model, gpu, tp, &scenario.cost);
    let (calibrated, moe_notes) = rows::with_fused_moe(scenario, calibrated, &provenance.measured_on())?;
    let label = format!("{} ({name}, measured on {})", calibrated.source(), provenance.measured_on());
    notes.extend_from_slice(calibrated.notices());
    notes.extend(moe_notes);
    let mix = &scenario.model.attention;
    if mix.sliding_layers > 0 || mix.chunked_layers > 0 {
        notes.push(format!(
            "cost.profile: {}'s sliding-window or chunked layers span max_model_len = {}, so they attend as full attention and are priced from the profile's attention rows",
            scenario.model.name, scenario.engine.max_model_len
        ));
    }
    notes.extend(crate::cost::quant::note(&scenario.model));
    Ok(ScenarioCost { model: Box::new(calibrated), kind: CostKind::Calibrated, label, notes, warnings })
}

/// `auto` picks the best profile there is for the GPU; where it still differs from the scenario,
/// that is said, not refused.
fn auto_notes(name: &str, mismatches: Vec<String>) -> Vec<String> {
    mismatches.into_iter().map(|m| format!("cost.profile = \"auto\": {m}; the bundled {name} is the nearest there is")).collect()
}

/// One pool of a scenario, ready to simulate: the scenario as the pool alone would be (see
/// [`Scenario::pool_scenarios`]), its cost model and its weight for the weighted router.
pub struct PoolRun {
    pub scenario: Scenario,
    pub cost: ScenarioCost,
    pub weight: f64,
    /// Its part in a disaggregated deployment, or [`sim::Role::Serve`].
    pub role: sim::Role,
}

/// The simulator's role for a scenario's pool: with disaggregation, a decode pool's link is the
/// scenario's, as wide as its tensor-parallel group, and moves the whole model's KV per token.
fn sim_role(scenario: &Scenario, pool: &crate::scenario::Pool) -> sim::Role {
    match (pool.role, &scenario.kv_link) {
        (PoolRole::Prefill, _) => sim::Role::Prefill,
        (PoolRole::Decode, Some(link)) => sim::Role::Decode {
            ingress: LinkSpec {
                bandwidth_bytes_per_s: link.bandwidth_bytes_per_s_per_gpu * f64::from(pool.engine.tensor_parallel),
                latency_ns: link.latency_ns,
            },
            kv_bytes_per_token: scenario.model.kv_bytes_per_token_per_gpu(1),
        },
        _ => sim::Role::Serve,
    }
}

/// The decode step whose price stands for a pool's speed when the weighted router derives
/// weights: 32 sequences each decoding one token after 1,024 tokens of context, launched
/// eagerly. Decode steps are most of a serving run's steps; only the ratio between pools counts.
const REFERENCE_DECODE_SEQS: u32 = 32;
const REFERENCE_CONTEXT_TOKENS: u32 = 1024;

/// A pool's speed by its cost model: reference decode steps per second.
pub fn speed_weight(cost: &dyn CostModel) -> f64 {
    let mut batch = Batch::default();
    for seq in 0..REFERENCE_DECODE_SEQS {
        batch.push_decode(SeqWork { seq, new_tokens: 1, context_tokens: REFERENCE_CONTEXT_TOKENS, samples_token: true, draft_tokens: 0 });
    }
    1e9 / cost.predict(&batch).total_ns as f64
}

/// Each pool's cost model, resolved on the pool's GPU as [`scenario_cost`] resolves a
/// scenario's, and its routing weight (the scenario's `weight`, else [`speed_weight`]). A
/// scenario without pools is one pool of weight 1, and its notes and errors read as before;
/// with pools, they say which pool.
pub fn pool_runs(scenario: &Scenario, allow_mismatch: bool) -> Result<Vec<PoolRun>, ScenarioError> {
    pool_runs_with(scenario, &|s| scenario_cost(s, allow_mismatch))
}

/// [`pool_runs`] with each pool's cost model from `cost_of` (given the pool's own scenario).
fn pool_runs_with(
    scenario: &Scenario,
    cost_of: &dyn Fn(&Scenario) -> Result<ScenarioCost, ScenarioError>,
) -> Result<Vec<PoolRun>, ScenarioError> {
    if scenario.pools.is_empty() {
        return Ok(vec![PoolRun { scenario: scenario.clone(), cost: cost_of(scenario)?, weight: 1.0, role: sim::Role::Serve }]);
    }
    scenario
        .pool_scenarios()
        .into_iter()
        .zip(&scenario.pools)
        .enumerate()
        .map(|(i, (pool_scenario, pool))| {
            let which = format!("cluster.pools[{i}] ({})", pool.gpu.name);
            let mut cost = cost_of(&pool_scenario).map_err(|e| match e {
                ScenarioError::Invalid { file, field, value, reason } => {
                    ScenarioError::Invalid { file, field, value, reason: format!("in {which}: {reason}") }
                }
                other => other,
            })?;
            for line in cost.notes.iter_mut().chain(cost.warnings.iter_mut()) {
                *line = format!("{which}: {line}");
            }
            let weight = pool.weight.unwrap_or_else(|| speed_weight(cost.model.as_ref()));
            Ok(PoolRun { scenario: pool_scenario, cost, weight, role: sim_role(scenario, pool) })
        })
        .collect()
}

/// A scenario's roofline (see [`cost_model`]) as a [`ScenarioCost`].
fn roofline_cost(scenario: &Scenario) -> ScenarioCost {
    let model = cost_model(scenario);
    let label = model.source().to_string();
    ScenarioCost { model, kind: CostKind::Roofline, label, notes: Vec::new(), warnings: Vec::new() }
}

/// The pools as GPU × TP × replicas, e.g. `2 × H100-SXM (TP 1) + 2 × A100-80G-SXM (TP 1)`.
pub fn pools_text(runs: &[PoolRun]) -> String {
    let pool = |run: &PoolRun| {
        let e = &run.scenario.engine;
        let role = match run.role {
            sim::Role::Serve => "",
            sim::Role::Prefill => "prefill: ",
            sim::Role::Decode { .. } => "decode: ",
        };
        format!("{role}{} × {} (TP {})", e.replicas, run.scenario.hardware.gpu.name, e.tensor_parallel)
    };
    runs.iter().map(pool).collect::<Vec<_>>().join(" + ")
}

/// Simulates every point of the scenario's sweep, priced by the roofline (each pool's own, with
/// pools). `percentiles` are those the summaries compute (vLLM's `--metric-percentiles`).
pub fn run_scenario(scenario: &Scenario, percentiles: &[f64]) -> Vec<PointResult> {
    if scenario.pools.is_empty() {
        return run_scenario_with_progress(scenario, &*cost_model(scenario), percentiles, false, &mut |_| {});
    }
    let runs = pool_runs_with(scenario, &|s| Ok(roofline_cost(s))).expect("the roofline prices any resolved scenario");
    run_pools_with_progress(scenario, &runs, percentiles, false, &mut |_| {})
}

/// [`run_scenario`] with a given cost model (e.g. a calibrated profile), keeping each step's
/// row if `timeline` (for `--out`), and calling `on_point` after each sweep point finishes (e.g.
/// to advance a progress bar); the results do not depend on it.
pub fn run_scenario_with_progress(
    scenario: &Scenario,
    cost: &dyn CostModel,
    percentiles: &[f64],
    timeline: bool,
    on_point: &mut dyn FnMut(&PointResult),
) -> Vec<PointResult> {
    let config = SimConfig { timeline, ..sim_config(scenario) };
    run_sweep(scenario, &config, &[sim::Pool::uniform(&config, cost)], percentiles, on_point)
}

/// [`run_scenario_with_progress`] with each pool's own replicas, KV capacity and cost model
/// (see [`pool_runs`]).
pub fn run_pools_with_progress(
    scenario: &Scenario,
    runs: &[PoolRun],
    percentiles: &[f64],
    timeline: bool,
    on_point: &mut dyn FnMut(&PointResult),
) -> Vec<PointResult> {
    let config = SimConfig { timeline, ..sim_config(scenario) };
    let schedulers: Vec<SchedulerConfig> = runs.iter().map(|run| scheduler_config(&run.scenario)).collect();
    let pools: Vec<sim::Pool> = runs
        .iter()
        .zip(&schedulers)
        .map(|(run, scheduler)| sim::Pool {
            scheduler,
            replicas: run.scenario.engine.engines(),
            cost: run.cost.model.as_ref(),
            weight: run.weight,
            role: run.role,
        })
        .collect();
    run_sweep(scenario, &config, &pools, percentiles, on_point)
}

fn run_sweep(
    scenario: &Scenario,
    config: &SimConfig,
    pools: &[sim::Pool],
    percentiles: &[f64],
    on_point: &mut dyn FnMut(&PointResult),
) -> Vec<PointResult> {
    scenario
        .workload
        .points()
        .iter()
        .map(|point| {
            let result = run_point_in(scenario, config, pools, point, percentiles);
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
    run_point_in(scenario, config, &[sim::Pool::uniform(config, cost)], point, percentiles)
}

/// [`run_point`] where the scenario may have pools that all run on one GPU type and TP degree
/// (a planner's disaggregated candidate): each pool keeps its own scheduler, replicas and role,
/// and `cost` prices them all.
pub fn run_point_shared_cost(
    scenario: &Scenario,
    config: &SimConfig,
    cost: &dyn CostModel,
    point: &SweepPoint,
    percentiles: &[f64],
) -> PointResult {
    if scenario.pools.is_empty() {
        return run_point(scenario, config, cost, point, percentiles);
    }
    let schedulers: Vec<SchedulerConfig> = scenario.pool_scenarios().iter().map(scheduler_config).collect();
    let pools: Vec<sim::Pool> = scenario
        .pools
        .iter()
        .zip(&schedulers)
        .map(|(pool, scheduler)| sim::Pool { scheduler, replicas: pool.engine.replicas, cost, weight: 1.0, role: sim_role(scenario, pool) })
        .collect();
    run_point_in(scenario, config, &pools, point, percentiles)
}

fn run_point_in(scenario: &Scenario, config: &SimConfig, pools: &[sim::Pool], point: &SweepPoint, percentiles: &[f64]) -> PointResult {
    let requests = workload::generate_point(&scenario.workload, point);
    let output = sim::simulate_pools(&requests, config, pools);
    let summary = Summary::from_records(&output.records, percentiles);
    PointResult { num_prompts: point.num_prompts, request_rate: point.request_rate, output, summary }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn on_h200(preset: &str) -> Scenario {
        Scenario::from_toml_str(&toml_of(preset), std::path::Path::new("s.toml"), &[]).unwrap()
    }

    fn toml_of(preset: &str) -> String {
        format!(
            "[model]\npreset = \"{preset}\"\ndtype = \"fp8\"\n[hardware]\ngpu = \"H200\"\ncount = 8\n[engine]\ntensor_parallel = 8\n\
             [cost]\nprofile = \"auto\"\n[workload]\nnum_prompts = 1\n[workload.dataset]\nkind = \"fixed\"\ninput_len = 8\noutput_len = 8\n"
        )
    }

    /// DeepSeek-V3's MTP head is one expert layer: its weights per GPU at TP 8 in fp8 are that
    /// layer's MLA (replicated down-projection, 1/8 of the rest), router, 1/8 of its experts and
    /// its two norms (16-bit), not the mean of the dense and expert layers.
    #[test]
    fn a_deepseek_mtp_head_is_one_expert_layer() {
        let text = format!("{}[engine.speculative]\nmethod = \"mtp\"\nnum_speculative_tokens = 1\nacceptance_rate = 0.8\n", toml_of("DeepSeek-V3"));
        let scenario = Scenario::from_toml_str(&text, std::path::Path::new("s.toml"), &[]).unwrap();
        let spec = scenario.engine.speculative.as_ref().expect("mtp");
        let head = spec.draft.as_ref().unwrap();
        assert_eq!((head.num_layers, head.leading_dense_layers()), (1, 0));
        let h: u64 = 7168;
        let attention = 7168 * 2112 + 1536 * 16 * 192 + 512 * 16 * 256 + 16 * 128 * h + 2048;
        let experts = h * 256 + 3 * h * 256 * 256 + 3 * h * 256;
        assert_eq!(spec.weight_bytes_per_gpu(8), attention + experts + 2 * 2 * h);
    }

    /// The bundled H200 profile prices Llama's kernels from its GEMM and attention rows, and
    /// DeepSeek-V3's latent attention and routed experts from its whole-module rows: a decode
    /// step of 32 sequences 1,024 tokens long (1,023 cached) takes 61 layers of the measured MLA
    /// module at 16 heads per GPU, block-FP8 projections (standing in for per-tensor FP8) and a
    /// bf16 cache: 0.123 ms in aiconfigurator's H200 vLLM 0.24.0 table
    /// (`mla_generation_module_perf.parquet`, batch 32, step 1024). GLM-4.5-Air's experts have no
    /// rows (its shape was not timed): the roofline, and a note saying why.
    #[test]
    fn latent_attention_is_priced_from_the_module_rows() {
        let llama = scenario_cost(&on_h200("Llama-3.1-70B"), false).unwrap();
        assert_eq!(llama.kind, CostKind::Calibrated);
        let deepseek = scenario_cost(&on_h200("DeepSeek-V3"), false).unwrap();
        assert_eq!((deepseek.kind, deepseek.model.source()), (CostKind::Calibrated, "calibrated profile rows"));
        assert!(deepseek.notes.iter().any(|n| n.contains("gemm=fp8_block kv=bfloat16 heads=16")), "{:?}", deepseek.notes);
        let mut batch = Batch::default();
        for seq in 0..32 {
            batch.push(SeqWork { seq, new_tokens: 1, context_tokens: 1023, samples_token: true, draft_tokens: 0 });
        }
        assert_eq!(deepseek.model.predict(&batch).attention_ns, crate::cost::to_ns(61.0 * 0.123e-3));
        let glm = scenario_cost(&on_h200("GLM-4.5-Air"), false).unwrap();
        assert_eq!((glm.kind, glm.model.source()), (CostKind::Roofline, "roofline"));
        assert!(glm.notes.iter().any(|n| n.contains("no rows for dense layers among expert layers")), "{:?}", glm.notes);
        assert!(glm.notes.iter().any(|n| n.contains("no fused-MoE rows")), "{:?}", glm.notes);
    }

    fn on_h100(preset: &str, dtype: &str, max_model_len: u32) -> Scenario {
        let text = format!(
            "[model]\npreset = \"{preset}\"\ndtype = \"{dtype}\"\n[hardware]\ngpu = \"H100-SXM\"\ncount = 2\n[engine]\ntensor_parallel = 2\n\
             max_model_len = {max_model_len}\n[cost]\nprofile = \"auto\"\n[workload]\nnum_prompts = 1\n[workload.dataset]\nkind = \"fixed\"\ninput_len = 8\noutput_len = 8\n"
        );
        Scenario::from_toml_str(&text, std::path::Path::new("s.toml"), &[]).unwrap()
    }

    /// On the bundled H100 profile, Mixtral's routed experts take aiconfigurator's fused-MoE
    /// rows (its GEMMs and attention their own rows), and Llama 4 Scout's chunked layers, whose
    /// 8,192-token chunks hold any sequence of a 4,096-token `max_model_len`, are full attention
    /// priced from the attention rows; at 16,384 they are not, and the roofline prices them.
    #[test]
    fn a_mixture_of_experts_on_a_dense_profile_takes_the_fused_moe_rows() {
        let mixtral = scenario_cost(&on_h100("Mixtral-8x7B", "fp16", 4096), false).unwrap();
        assert_eq!((mixtral.kind, mixtral.model.source()), (CostKind::Calibrated, "calibrated profile"));
        assert!(mixtral.notes.iter().any(|n| n.contains("fused-MoE rows") && n.contains("dtype=bfloat16 hidden=4096 inter=14336 topk=2 experts=8 tp=2 ep=1")), "{:?}", mixtral.notes);
        assert!(!mixtral.notes.iter().any(|n| n.contains("grouped expert GEMMs")), "the grouped GEMMs price nothing: {:?}", mixtral.notes);
        let scout = scenario_cost(&on_h100("Llama-4-Scout", "fp8", 4096), false).unwrap();
        assert_eq!((scout.kind, scout.model.source()), (CostKind::Calibrated, "calibrated profile"));
        assert!(scout.notes.iter().any(|n| n.contains("span max_model_len = 4096")), "{:?}", scout.notes);
        let long = scenario_cost(&on_h100("Llama-4-Scout", "fp8", 16384), false).unwrap();
        assert_eq!(long.model.source(), "calibrated profile rows");
    }
}
