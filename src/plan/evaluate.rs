//! Evaluating candidates: feasibility, the highest rate one replica sustains, the replicas a
//! target load needs (confirmed by simulating the whole cluster), and what it costs.

use rayon::prelude::*;

use super::candidate::Candidate;
use super::file::Plan;
use super::objectives::Binding;
use super::search::{Bound, Probe, RateSearch, SearchOptions, max_sustainable_rate, probe};
use crate::scenario::{Scenario, ScenarioError};

/// Replicas the cluster check may add beyond ⌈target ÷ per-replica rate⌉ before giving up.
const EXTRA_REPLICAS_MAX: u32 = 4;

/// The largest cluster the planner simulates: each replica holds its own scheduler and KV
/// tables, and a probe sends 2,000 requests per replica, so memory and time grow with it.
pub const REPLICAS_MAX: u32 = 256;

/// What became of one candidate.
#[derive(Clone, Debug)]
pub struct Evaluation {
    pub candidate: Candidate,
    pub outcome: Outcome,
}

#[derive(Clone, Debug)]
pub enum Outcome {
    /// Scenario validation refused the configuration (the model does not fit, TP does not divide
    /// the heads, …): its message.
    Infeasible(String),
    Evaluated(Box<Evaluated>),
}

/// A feasible candidate, searched and costed. Its results read as its own fields (through
/// `Deref`); they are apart from the scenario because they are what shards and the progress
/// log carry, while the scenario is resolved again from the plan.
#[derive(Clone, Debug)]
pub struct Evaluated {
    /// One replica's scenario, as a `servesim simulate` file would give it.
    pub scenario: Scenario,
    pub searched: Searched,
}

impl std::ops::Deref for Evaluated {
    type Target = Searched;
    fn deref(&self) -> &Searched {
        &self.searched
    }
}

/// What the search and the costing found for one feasible candidate.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct Searched {
    /// Which cost model priced the steps: a roofline answer can be far from a real engine's.
    pub cost_source: String,
    pub per_replica: RateSearch,
    pub replicas: u32,
    /// Replicas the whole-cluster check added to ⌈target ÷ per-replica rate⌉ (routing imbalance).
    pub replicas_added: u32,
    /// Replicas fewer than ⌈target ÷ per-replica rate⌉ that the cluster check found enough
    /// (queues pooled behind the router). Absent in logs written before the search.
    #[serde(default)]
    pub replicas_saved: u32,
    /// The whole cluster at the target rate, when there is a target.
    pub cluster: Option<Probe>,
    /// The objectives hold at the operating point (and, with a target, at the target rate).
    pub meets: bool,
    /// Why the deployment is over budget, if it is.
    pub over_budget: Option<String>,
    pub gpus: u32,
    pub price_per_hour: f64,
}

impl Evaluated {
    /// Where the deployment runs: the whole cluster at the target, else one replica at its
    /// highest sustainable rate. `None` for a cluster that was not simulated (over budget).
    pub fn operating_point(&self) -> Option<&Probe> {
        match &self.cluster {
            Some(cluster) => Some(cluster),
            None if self.replicas == 1 => self.per_replica.operating_point(),
            None => None,
        }
    }

    /// The probe that decided the candidate: its operating point when it meets the objectives;
    /// when it misses, the whole cluster at the target if that was simulated, else one replica's
    /// miss at the lowest rate searched.
    pub fn deciding_point(&self) -> Option<&Probe> {
        if self.meets {
            return self.operating_point();
        }
        self.cluster.as_ref().or_else(|| {
            self.per_replica.probes.iter().filter(|p| !p.verdict.met).min_by(|a, b| a.rate.total_cmp(&b.rate))
        })
    }

    /// `meets`, `misses` or `over budget`, as candidates.csv and plan.json say it.
    pub fn status(&self) -> &'static str {
        match (self.meets, &self.over_budget) {
            (false, _) => "misses",
            (true, Some(_)) => "over budget",
            (true, None) => "meets",
        }
    }

    /// Price per million output tokens at the operating point.
    pub fn price_per_million_output(&self) -> Option<f64> {
        self.operating_point().filter(|p| p.output_throughput > 0.0).map(|p| self.price_per_hour / (p.output_throughput * 3600.0) * 1e6)
    }

    /// Price per million tokens, input and output, at the operating point.
    pub fn price_per_million_total(&self) -> Option<f64> {
        self.operating_point()
            .filter(|p| p.total_token_throughput > 0.0)
            .map(|p| self.price_per_hour / (p.total_token_throughput * 3600.0) * 1e6)
    }

    /// Goodput per GPU at the operating point, requests per second.
    pub fn goodput_per_gpu(&self) -> f64 {
        self.operating_point().map_or(0.0, |p| p.verdict.goodput_rps / self.gpus as f64)
    }

    /// How close the candidate came to the objectives: the smallest value ÷ limit of the
    /// binding objective over its probes (≤ 1 where one passed).
    pub fn closest_ratio(&self, plan: &Plan) -> (f64, Option<&Probe>) {
        self.per_replica.probes.iter().fold((f64::INFINITY, None), |best, p| {
            let ratio = match p.verdict.binding {
                Binding::Slo(i) => p.verdict.values_ms[i] / plan.objectives.slos[i].limit_ms,
                Binding::Attainment | Binding::Failures | Binding::Unsteady | Binding::Uncertain => f64::INFINITY,
            };
            if ratio < best.0 { (ratio, Some(p)) } else { best }
        })
    }
}

/// The fields a candidate writes into its scenario: an error on any other field has the plan's
/// own value.
const CANDIDATE_FIELDS: [&str; 15] = [
    "model.dtype",
    "model.kv_cache_dtype",
    "engine.policy",
    "engine.tensor_parallel",
    "engine.replicas",
    "engine.max_num_seqs",
    "engine.max_num_batched_tokens",
    "engine.enable_chunked_prefill",
    "engine.expert_parallel",
    "engine.data_parallel",
    // SGLang candidates' searched knobs, under its own names.
    "engine.sglang.max_running_requests",
    "engine.sglang.chunked_prefill_size",
    "hardware",
    "cluster",
    "cost.profile",
];

/// Refuses a plan whose own value makes every candidate fail: the same field, value and reason
/// for all, on a field no candidate writes. Such a value is the plan's mistake, not an answer
/// that no configuration is feasible, so it is named as the plan's field (exit 2), before any
/// simulation. Checked over the whole space, never a shard's part of it, so that every shard
/// agrees.
pub fn check_plan_wide(plan: &Plan, all: &[Candidate]) -> Result<(), ScenarioError> {
    let mut shared: Option<(String, String, String)> = None;
    for candidate in all {
        let Err(ScenarioError::Invalid { field, value, reason, .. }) = candidate.scenario(plan, 1) else { return Ok(()) };
        let written = CANDIDATE_FIELDS.iter().any(|f| field == *f || field.starts_with(&format!("{f}.")) || field.starts_with(&format!("{f}[")));
        if written || shared.as_ref().is_some_and(|s| *s != (field.clone(), value.clone(), reason.clone())) {
            return Ok(());
        }
        shared = Some((field, value, reason));
    }
    match shared {
        Some((field, value, reason)) => Err(ScenarioError::Invalid { file: plan.path.clone(), field, value, reason }),
        None => Ok(()),
    }
}

/// Evaluates every candidate of the plan, in parallel on the current rayon pool; the result is
/// in candidate order and the same at any thread count. Fails only on the plan itself (an
/// unreadable profile, a shared section that no candidate could load).
pub fn evaluate(plan: &Plan, candidates: &[Candidate], options: &SearchOptions) -> Result<Vec<Evaluation>, ScenarioError> {
    evaluate_with_progress(plan, candidates, options, &|_| {})
}

/// [`evaluate`], calling `on_done` with each candidate's evaluation as it finishes (to advance a
/// progress bar, or log it for `--resume`), from any thread; the results do not depend on it.
pub fn evaluate_with_progress(
    plan: &Plan,
    candidates: &[Candidate],
    options: &SearchOptions,
    on_done: &(dyn Fn(&Evaluation) + Sync),
) -> Result<Vec<Evaluation>, ScenarioError> {
    // A GPU's profile that cannot price its candidates fails the plan before any simulation,
    // named as the plan's field: checked on the GPU's first candidate that loads.
    // A profile the scenario refuses while loading (a missing file, one that is not a profile)
    // is the GPU's field too, never the `cost.profile` the candidate's scenario calls it.
    for (i, gpu) in plan.space.gpus.iter().enumerate() {
        let Some(path) = &gpu.profile else { continue };
        let as_gpu_field = |e: ScenarioError| {
            let reason = match e {
                ScenarioError::Invalid { reason, .. } => reason,
                other => other.to_string(),
            };
            ScenarioError::Invalid {
                file: plan.path.clone(),
                field: format!("search.gpu[{i}].profile"),
                value: format!("{:?}", path.display().to_string()),
                reason,
            }
        };
        let mut loaded = None;
        for c in candidates.iter().filter(|c| c.gpu == i) {
            match c.scenario(plan, 1) {
                Ok(scenario) => {
                    loaded = Some(scenario);
                    break;
                }
                Err(e) if is_profile_error(&e, path) => return Err(as_gpu_field(e)),
                Err(_) => {}
            }
        }
        let Some(scenario) = loaded else { continue };
        crate::run::scenario_cost(&scenario, false).map_err(as_gpu_field)?;
    }
    candidates
        .par_iter()
        .map(|c| {
            let evaluation = evaluate_one(plan, c, options);
            if let Ok(done) = &evaluation {
                on_done(done);
            }
            evaluation
        })
        .collect()
}

/// Whether a scenario's error is about the kernel profile at `path`: its field, or its file.
fn is_profile_error(e: &ScenarioError, path: &std::path::Path) -> bool {
    let about = |file: &std::path::Path| file.ends_with(path) || path.ends_with(file);
    match e {
        ScenarioError::Invalid { field, file, .. } => field == "cost.profile" || about(file),
        ScenarioError::Io { file, .. } | ScenarioError::Parse { file, .. } => about(file),
    }
}

fn evaluate_one(plan: &Plan, candidate: &Candidate, options: &SearchOptions) -> Result<Evaluation, ScenarioError> {
    let scenario = match candidate.scenario(plan, 1) {
        Ok(s) => s,
        // The candidate's own fields: this configuration cannot run.
        Err(ScenarioError::Invalid { field, value, reason, .. }) if field.starts_with("engine.") || field.starts_with("hardware.") => {
            return Ok(Evaluation { candidate: candidate.clone(), outcome: Outcome::Infeasible(format!("{field} = {value}: {reason}")) });
        }
        // Anything else is the plan's shared sections, wrong for every candidate.
        Err(e) => return Err(e),
    };
    let gpu = &plan.space.gpus[candidate.gpu];
    let named = crate::run::scenario_cost(&scenario, false)?;
    let (cost, cost_source) = (named.model, named.kind.name().to_string());
    let per_replica = max_sustainable_rate(&scenario, cost.as_ref(), &plan.objectives, options);
    let gpus_per_replica = candidate.gpus_per_replica();
    let mut replicas = 1;
    let mut replicas_added = 0;
    let mut replicas_saved = 0;
    let mut cluster = None;
    let mut meets = per_replica.max_rate > 0.0;
    // Why a candidate whose cluster was not simulated in full is over budget, where the count
    // it needs is known only as a bound.
    let mut over_budget_reason = None;
    // Over budget, or past the clusters the planner simulates: no need to simulate it.
    let over_budget_with = |replicas: u32| -> Option<String> {
        let gpus = gpus_per_replica.saturating_mul(replicas);
        let price_per_hour = gpus as f64 * gpu.price_per_gpu_hour;
        match (plan.max_gpus, plan.max_price_per_hour) {
            _ if replicas > REPLICAS_MAX => Some(format!("{replicas} replicas: the planner simulates at most {REPLICAS_MAX}")),
            (Some(max), _) if gpus > max => Some(format!("{gpus} GPUs > budget.max_gpus {max}")),
            (_, Some(max)) if price_per_hour > max => Some(format!("${price_per_hour:.2}/h > budget.max_price_per_hour ${max:.2}")),
            _ => None,
        }
    };
    if let (Some(target), true) = (plan.target_rate, meets) {
        let guess = if per_replica.bound == Bound::AboveRange && per_replica.max_rate >= target {
            1
        } else {
            (target / per_replica.max_rate).ceil().max(1.0).min(u32::MAX as f64) as u32
        };
        let at_target = |replicas: u32| -> Result<Probe, ScenarioError> {
            let scenario = candidate.scenario(plan, replicas)?;
            let requests = options.requests_for_cluster(&plan.objectives, replicas);
            Ok(probe(&scenario, cost.as_ref(), &plan.objectives, target, requests))
        };
        // The most replicas within the budget: no count past it is simulated, since none of
        // them could be chosen.
        let within_budget = (1..=REPLICAS_MAX).rev().find(|&r| over_budget_with(r).is_none()).unwrap_or(0);
        let lowest = (target / replica_capacity(&per_replica)).ceil().clamp(1.0, guess as f64) as u32;
        replicas = guess;
        if guess > within_budget {
            // Only a pooled count within the budget could still be chosen: whether the largest
            // meets decides the candidate, and the fewest that meets is found below it. A miss
            // there leaves the candidate over budget at the guess, as one that was not simulated.
            if lowest > within_budget {
                if lowest > 1 {
                    over_budget_reason = over_budget_with(lowest).map(|r| format!("at least {lowest} replicas (the target over one replica's capacity): {r}"));
                }
            } else {
                let p = at_target(within_budget)?;
                if p.verdict.met {
                    let (fewest, probe) = fewest_meeting(lowest, within_budget, p, &at_target)?;
                    (replicas, replicas_saved, cluster) = (fewest, guess - fewest, Some(probe));
                } else {
                    over_budget_reason = over_budget_with(within_budget + 1)
                        .map(|r| format!("{within_budget} replicas, the most within budget, miss the objectives at the target; one more: {r}"));
                }
            }
        } else {
            // ⌈target ÷ one replica's rate⌉ first, and more while routing imbalance makes it miss.
            while over_budget_with(replicas).is_none() {
                let p = at_target(replicas)?;
                meets = p.verdict.met;
                cluster = Some(p);
                if meets || replicas_added == EXTRA_REPLICAS_MAX || over_budget_with(replicas + 1).is_some() {
                    break;
                }
                replicas += 1;
                replicas_added += 1;
            }
            if meets && replicas == guess && guess > 1 {
                if let Some(p) = cluster.take() {
                    let (fewest, probe) = fewest_meeting(lowest, guess, p, &at_target)?;
                    (replicas, replicas_saved, cluster) = (fewest, guess - fewest, Some(probe));
                }
            }
        }
    }
    let gpus = gpus_per_replica.saturating_mul(replicas);
    let price_per_hour = gpus as f64 * gpu.price_per_gpu_hour;
    let over_budget = over_budget_reason.or_else(|| over_budget_with(replicas));
    let evaluated = Evaluated {
        scenario,
        searched: Searched { cost_source, per_replica, replicas, replicas_added, replicas_saved, cluster, meets, over_budget, gpus, price_per_hour },
    };
    Ok(Evaluation { candidate: candidate.clone(), outcome: Outcome::Evaluated(Box::new(evaluated)) })
}

/// The fewest replicas in `lowest..=highest` that meet the objectives at the target, and their
/// probe, given that `highest` meets (`met_at_highest`). Behind one router, c replicas pool their
/// queues, and at the same load per replica a pool of c waits less than one replica does (M/D/c
/// against M/D/1), so fewer than ⌈target ÷ one replica's rate⌉ can meet the objectives; no count
/// below ⌈target ÷ capacity⌉ can (it would be past saturation).
fn fewest_meeting(
    lowest: u32,
    highest: u32,
    met_at_highest: Probe,
    at_target: &dyn Fn(u32) -> Result<Probe, ScenarioError>,
) -> Result<(u32, Probe), ScenarioError> {
    let (mut lo, mut hi, mut best) = (lowest.min(highest), highest, met_at_highest);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        let p = at_target(mid)?;
        if p.verdict.met {
            (hi, best) = (mid, p);
        } else {
            lo = mid + 1;
        }
    }
    Ok((hi, best))
}

/// What one replica completes per second at most: the highest rate a probe sent, times the share
/// of its arrivals it kept up with (past saturation, completions run at the service rate).
fn replica_capacity(search: &RateSearch) -> f64 {
    search
        .probes
        .iter()
        .map(|p| p.rate * p.steady.map_or(1.0, |s| s.completion_ratio.min(1.0)))
        .fold(search.max_rate, f64::max)
}

/// The candidates that answer the plan, best first: with a target, those that meet it within
/// budget, cheapest first (then fewer GPUs); without one, those that sustain any load within
/// budget, by goodput per GPU. Ties keep candidate order.
pub fn rank<'a>(plan: &Plan, evaluations: &'a [Evaluation]) -> Vec<(&'a Candidate, &'a Evaluated)> {
    let mut ranked: Vec<(&Candidate, &Evaluated)> = evaluations
        .iter()
        .filter_map(|e| match &e.outcome {
            Outcome::Evaluated(v) if v.meets && v.over_budget.is_none() => Some((&e.candidate, v.as_ref())),
            _ => None,
        })
        .collect();
    if plan.target_rate.is_some() {
        ranked.sort_by(|a, b| a.1.price_per_hour.total_cmp(&b.1.price_per_hour).then(a.1.gpus.cmp(&b.1.gpus)).then(a.0.index.cmp(&b.0.index)));
    } else {
        ranked.sort_by(|a, b| b.1.goodput_per_gpu().total_cmp(&a.1.goodput_per_gpu()).then(a.0.index.cmp(&b.0.index)));
    }
    ranked
}
