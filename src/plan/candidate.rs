//! Candidates: one replica configuration each, and the scenario that describes it.

use super::file::{Plan, SearchSpace};
use crate::scenario::{Scenario, ScenarioError};

/// One point of the search space. `None` fields are left to the engine's defaults.
#[derive(Clone, Debug, PartialEq)]
pub struct Candidate {
    /// Position in [`SearchSpace::candidates`]' order: the tie-break of every ranking.
    pub index: usize,
    /// Index into [`SearchSpace::gpus`].
    pub gpu: usize,
    pub policy: Option<String>,
    pub tensor_parallel: u32,
    pub max_num_seqs: Option<u32>,
    pub max_num_batched_tokens: Option<u32>,
    pub enable_chunked_prefill: Option<bool>,
    pub dtype: Option<String>,
}

impl SearchSpace {
    /// Every combination, in a fixed order: GPU, policy, TP, `max_num_seqs`,
    /// `max_num_batched_tokens`, chunked prefill, dtype (the last varies fastest).
    pub fn candidates(&self) -> Vec<Candidate> {
        let mut out = Vec::with_capacity(self.len());
        for gpu in 0..self.gpus.len() {
            for policy in &self.policies {
                for &tensor_parallel in &self.tensor_parallel {
                    for &max_num_seqs in &self.max_num_seqs {
                        for &max_num_batched_tokens in &self.max_num_batched_tokens {
                            for &enable_chunked_prefill in &self.enable_chunked_prefill {
                                for dtype in &self.dtypes {
                                    out.push(Candidate {
                                        index: out.len(),
                                        gpu,
                                        policy: policy.clone(),
                                        tensor_parallel,
                                        max_num_seqs,
                                        max_num_batched_tokens,
                                        enable_chunked_prefill,
                                        dtype: dtype.clone(),
                                    });
                                }
                            }
                        }
                    }
                }
            }
        }
        out
    }
}

impl Candidate {
    /// A short name for tables: `H100-SXM tp2 seqs=128 chunked`.
    pub fn label(&self, space: &SearchSpace) -> String {
        let mut label = format!("{} tp{}", space.gpus[self.gpu].name, self.tensor_parallel);
        if let Some(policy) = &self.policy {
            label += &format!(" {policy}");
        }
        if let Some(seqs) = self.max_num_seqs {
            label += &format!(" seqs={seqs}");
        }
        if let Some(tokens) = self.max_num_batched_tokens {
            label += &format!(" tokens={tokens}");
        }
        match self.enable_chunked_prefill {
            Some(true) => label += " chunked",
            Some(false) => label += " unchunked",
            None => {}
        }
        if let Some(dtype) = &self.dtype {
            label += &format!(" {dtype}");
        }
        label
    }

    /// The scenario file this candidate is, with `replicas` replicas: the plan's shared sections
    /// plus the candidate's GPU and engine fields. It is resolved by scenario validation itself,
    /// so a candidate is feasible exactly when such a scenario would load.
    pub fn scenario_text(&self, plan: &Plan, replicas: u32, num_prompts: u32, request_rate: f64) -> String {
        let mut table = toml::Table::new();
        table.insert("name".into(), format!("{} {}", plan.name, self.label(&plan.space)).into());
        let mut model = plan.model.clone();
        if let Some(dtype) = &self.dtype {
            model.insert("dtype".into(), dtype.clone().into());
        }
        table.insert("model".into(), model.into());
        let mut hardware = toml::Table::new();
        hardware.insert("gpu".into(), plan.space.gpus[self.gpu].name.clone().into());
        table.insert("hardware".into(), hardware.into());
        let mut engine = plan.engine.clone();
        if let Some(policy) = &self.policy {
            engine.insert("policy".into(), policy.clone().into());
        }
        engine.insert("tensor_parallel".into(), i64::from(self.tensor_parallel).into());
        engine.insert("replicas".into(), i64::from(replicas).into());
        if let Some(seqs) = self.max_num_seqs {
            engine.insert("max_num_seqs".into(), i64::from(seqs).into());
        }
        if let Some(tokens) = self.max_num_batched_tokens {
            engine.insert("max_num_batched_tokens".into(), i64::from(tokens).into());
        }
        if let Some(chunked) = self.enable_chunked_prefill {
            engine.insert("enable_chunked_prefill".into(), chunked.into());
        }
        table.insert("engine".into(), engine.into());
        if let Some(cost) = &plan.cost {
            table.insert("cost".into(), cost.clone().into());
        }
        let mut workload = plan.workload.clone();
        workload.insert("num_prompts".into(), i64::from(num_prompts).into());
        workload.insert("request_rate".into(), request_rate.into());
        table.insert("workload".into(), workload.into());
        toml::to_string(&table).expect("a table of plain values serializes")
    }

    /// The candidate's scenario, resolved as if it were written beside the plan (relative paths
    /// in the plan, such as an HF config or a trace, resolve the same).
    pub fn scenario(&self, plan: &Plan, replicas: u32) -> Result<Scenario, ScenarioError> {
        Scenario::from_toml_str(&self.scenario_text(plan, replicas, 1, plan.target_rate.unwrap_or(1.0)), &plan.path, &[])
    }
}
