//! Candidates: one replica configuration each, and the scenario that describes it.

use super::file::{Plan, SearchSpace};
use crate::scenario::{Scenario, ScenarioError};

/// The policy whose engine knobs are SGLang's flags (`[engine.sglang]`).
const SGLANG: &str = "sglang";

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
    /// Weight dtype.
    pub dtype: Option<String>,
    pub kv_cache_dtype: Option<String>,
    /// Mixture-of-experts models: whole experts per GPU (`engine.expert_parallel`).
    pub expert_parallel: Option<bool>,
    /// `Some((x, y))`: a unit is x prefill and y decode replicas (xPyD), and the cluster is
    /// made of such units; `None`: pooled replicas.
    pub disaggregation: Option<(u32, u32)>,
    /// Data-parallel ranks per replica (`engine.data_parallel`), each of `tensor_parallel` GPUs.
    pub data_parallel: Option<u32>,
}

impl SearchSpace {
    /// Every combination, in a fixed order: GPU, policy, TP, `max_num_seqs`,
    /// `max_num_batched_tokens`, chunked prefill, weight dtype, KV-cache dtype, expert
    /// parallelism, disaggregation, data parallelism (the last varies fastest).
    pub fn candidates(&self) -> Vec<Candidate> {
        let lens = self.list_lens();
        (0..self.len())
            .map(|index| {
                // The candidate's position in each list: `index` in mixed radix, last list fastest.
                let mut at = [0; 11];
                let mut rest = index;
                for (i, &len) in lens.iter().enumerate().rev() {
                    at[i] = rest % len;
                    rest /= len;
                }
                Candidate {
                    index,
                    gpu: at[0],
                    policy: self.policies[at[1]].clone(),
                    tensor_parallel: self.tensor_parallel[at[2]],
                    max_num_seqs: self.max_num_seqs[at[3]],
                    max_num_batched_tokens: self.max_num_batched_tokens[at[4]],
                    enable_chunked_prefill: self.enable_chunked_prefill[at[5]],
                    dtype: self.dtypes[at[6]].clone(),
                    kv_cache_dtype: self.kv_cache_dtypes[at[7]].clone(),
                    expert_parallel: self.expert_parallel[at[8]],
                    disaggregation: self.disaggregation[at[9]],
                    data_parallel: self.data_parallel[at[10]],
                }
            })
            .collect()
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
        if let Some(dtype) = &self.kv_cache_dtype {
            label += &format!(" kv={dtype}");
        }
        match self.expert_parallel {
            Some(true) => label += " ep",
            Some(false) => label += " no-ep",
            None => {}
        }
        if let Some((x, y)) = self.disaggregation {
            label += &format!(" {x}P{y}D");
        }
        if let Some(ranks) = self.data_parallel {
            label += &format!(" dp{ranks}");
        }
        label
    }

    /// GPUs in one replica (all its data-parallel ranks'), or with disaggregation in one xPyD
    /// unit.
    pub fn gpus_per_replica(&self) -> u32 {
        let replicas = self.disaggregation.map_or(1, |(x, y)| x + y);
        self.tensor_parallel.saturating_mul(replicas).saturating_mul(self.data_parallel.unwrap_or(1))
    }

    /// The scenario file this candidate is, with `replicas` replicas (xPyD units, when
    /// disaggregated): the plan's shared sections plus the candidate's GPU and engine fields. It is resolved by scenario validation itself,
    /// so a candidate is feasible exactly when such a scenario would load.
    pub fn scenario_text(&self, plan: &Plan, replicas: u32, num_prompts: u32, request_rate: f64) -> String {
        let mut table = toml::Table::new();
        table.insert("name".into(), format!("{} {}", plan.name, self.label(&plan.space)).into());
        let mut model = plan.model.clone();
        if let Some(dtype) = &self.dtype {
            model.insert("dtype".into(), dtype.clone().into());
        }
        if let Some(dtype) = &self.kv_cache_dtype {
            model.insert("kv_cache_dtype".into(), dtype.clone().into());
        }
        table.insert("model".into(), model.into());
        let gpu = plan.space.gpus[self.gpu].name.clone();
        let mut engine = plan.engine.clone();
        if let Some(policy) = &self.policy {
            engine.insert("policy".into(), policy.clone().into());
        }
        match self.disaggregation {
            None => {
                let mut hardware = toml::Table::new();
                hardware.insert("gpu".into(), gpu.into());
                table.insert("hardware".into(), hardware.into());
                engine.insert("tensor_parallel".into(), i64::from(self.tensor_parallel).into());
                engine.insert("replicas".into(), i64::from(replicas).into());
            }
            Some((x, y)) => {
                let pool = |role: &str, n: u32| {
                    let mut pool = toml::Table::new();
                    pool.insert("role".into(), role.into());
                    pool.insert("gpu".into(), gpu.clone().into());
                    pool.insert("tensor_parallel".into(), i64::from(self.tensor_parallel).into());
                    pool.insert("replicas".into(), i64::from(n.saturating_mul(replicas)).into());
                    toml::Value::Table(pool)
                };
                let mut cluster = toml::Table::new();
                cluster.insert("mode".into(), "disaggregated".into());
                cluster.insert("link".into(), plan.space.link.clone().into());
                cluster.insert("pools".into(), toml::Value::Array(vec![pool("prefill", x), pool("decode", y)]));
                table.insert("cluster".into(), cluster.into());
            }
        }
        if self.policy.as_deref() == Some(SGLANG) {
            // SGLang takes its own flags under [engine.sglang] and refuses vLLM's names: the
            // searched knobs are written as the flags that mean the same.
            let mut knobs = match engine.remove("sglang") {
                Some(toml::Value::Table(t)) => t,
                _ => toml::Table::new(),
            };
            if let Some(seqs) = self.max_num_seqs {
                knobs.insert("max_running_requests".into(), i64::from(seqs).into());
            }
            if let Some(tokens) = self.max_num_batched_tokens {
                knobs.insert("chunked_prefill_size".into(), i64::from(tokens).into());
            }
            if self.enable_chunked_prefill == Some(false) {
                // SGLang's "-1 means disable".
                knobs.insert("chunked_prefill_size".into(), (-1i64).into());
            }
            if !knobs.is_empty() {
                engine.insert("sglang".into(), knobs.into());
            }
        } else {
            // The plan's SGLang flags are its SGLang candidates' (with none, the resolver
            // refuses them by name).
            if plan.space.policies.iter().any(|p| p.as_deref() == Some(SGLANG)) {
                engine.remove("sglang");
            }
            if let Some(seqs) = self.max_num_seqs {
                engine.insert("max_num_seqs".into(), i64::from(seqs).into());
            }
            if let Some(tokens) = self.max_num_batched_tokens {
                engine.insert("max_num_batched_tokens".into(), i64::from(tokens).into());
            }
            if let Some(chunked) = self.enable_chunked_prefill {
                engine.insert("enable_chunked_prefill".into(), chunked.into());
            }
        }
        if let Some(expert_parallel) = self.expert_parallel {
            engine.insert("expert_parallel".into(), expert_parallel.into());
        }
        if let Some(ranks) = self.data_parallel {
            engine.insert("data_parallel".into(), i64::from(ranks).into());
        }
        table.insert("engine".into(), engine.into());
        let mut cost = plan.cost.clone().unwrap_or_default();
        // A GPU's own profile prices its candidates, whatever the plan's `[cost]` names.
        if let Some(profile) = &plan.space.gpus[self.gpu].profile {
            cost.insert("profile".into(), profile.display().to_string().into());
        }
        if !cost.is_empty() {
            table.insert("cost".into(), cost.into());
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

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::plan::deploy::deployment;
    use crate::scenario::Dtype;

    const PLAN: &str = r#"
        [model]
        preset = "Llama-3.1-8B"
        [workload]
        [workload.dataset]
        kind = "fixed"
        input_len = 100
        output_len = 10
        [slo]
        ttft_p90_ms = 500
        [search]
        tensor_parallel = [1, 2]
        max_num_seqs = [64, 256]
        dtype = ["bf16", "fp8"]
        kv_cache_dtype = ["auto", "fp8"]
        [[search.gpu]]
        name = "H100-SXM"
        [[search.gpu]]
        name = "H200"
    "#;

    #[test]
    fn candidates_run_through_every_combination_last_list_fastest() {
        let plan = Plan::from_toml_str(PLAN, Path::new("plan.toml")).unwrap();
        let all = plan.space.candidates();
        assert_eq!(all.len(), 2 * 2 * 2 * 2 * 2);
        assert!(all.iter().enumerate().all(|(i, c)| c.index == i));
        let key = |c: &Candidate| (c.gpu, c.tensor_parallel, c.max_num_seqs, c.dtype.clone(), c.kv_cache_dtype.clone());
        let mut sorted = all.clone();
        sorted.sort_by_key(key);
        assert_eq!(sorted, all, "enumeration is in lexicographic order of the lists");
        sorted.dedup_by_key(|c| key(c));
        assert_eq!(sorted.len(), all.len(), "no combination twice");
        assert_eq!(all[1].label(&plan.space), "H100-SXM tp1 seqs=64 bf16 kv=fp8");
    }

    #[test]
    fn dtypes_reach_the_scenario_and_the_deploy_command() {
        let plan = Plan::from_toml_str(PLAN, Path::new("plan.toml")).unwrap();
        let all = plan.space.candidates();
        let find = |dtype: &str, kv: &str| {
            all.iter().find(|c| c.dtype.as_deref() == Some(dtype) && c.kv_cache_dtype.as_deref() == Some(kv)).unwrap()
        };
        let plain = find("bf16", "auto");
        let s = plain.scenario(&plan, 1).unwrap();
        assert_eq!((s.model.weight_dtype, s.model.kv_dtype), (Dtype::Bf16, Dtype::Bf16));
        let command = deployment(&s, 1, None).unwrap().script("");
        assert!(!command.contains("--quantization") && !command.contains("--kv-cache-dtype"), "{command}");
        let both = find("fp8", "fp8");
        let s = both.scenario(&plan, 1).unwrap();
        assert_eq!((s.model.weight_dtype, s.model.kv_dtype), (Dtype::Fp8, Dtype::Fp8));
        let command = deployment(&s, 1, None).unwrap().script("");
        assert!(command.contains(" --quantization fp8") && command.contains(" --kv-cache-dtype fp8"), "{command}");
        // FP8 weights alone keep vLLM's 16-bit KV cache.
        let s = find("fp8", "auto").scenario(&plan, 1).unwrap();
        assert_eq!(s.model.kv_dtype, Dtype::Bf16);
    }

    /// A mixture-of-experts plan searches both placements of the experts; each reaches the
    /// scenario and the deploy command.
    #[test]
    fn expert_parallelism_is_searched_for_a_mixture_of_experts() {
        let text = PLAN
            .replace("preset = \"Llama-3.1-8B\"", "preset = \"Qwen3-30B-A3B\"")
            .replace("kv_cache_dtype = [\"auto\", \"fp8\"]", "expert_parallel = [false, true]");
        let plan = Plan::from_toml_str(&text, Path::new("plan.toml")).unwrap();
        let all = plan.space.candidates();
        assert_eq!(all.len(), 2 * 2 * 2 * 2 * 2);
        let ep = all.iter().find(|c| c.tensor_parallel == 2 && c.expert_parallel == Some(true)).unwrap();
        assert!(ep.label(&plan.space).ends_with(" ep"), "{}", ep.label(&plan.space));
        let s = ep.scenario(&plan, 1).unwrap();
        assert!(s.model.moe.is_some_and(|moe| moe.expert_parallel));
        let command = deployment(&s, 1, None).unwrap().script("");
        assert!(command.contains(" --enable-expert-parallel"), "{command}");
        let tp = all.iter().find(|c| c.tensor_parallel == 2 && c.expert_parallel == Some(false)).unwrap();
        let s = tp.scenario(&plan, 1).unwrap();
        assert!(s.model.moe.is_some_and(|moe| !moe.expert_parallel));
        assert!(!deployment(&s, 1, None).unwrap().script("").contains("expert"));
    }

    /// `search.engine` runs each engine's own policy (its newest engine profile's), and the
    /// values it cannot run are refused by name.
    #[test]
    fn engines_are_searched_each_with_its_own_policy() {
        // TGI has no max_num_seqs (its candidates would be infeasible).
        let text = PLAN.replace("dtype = [\"bf16\", \"fp8\"]", "engine = [\"vllm\", \"tgi\"]").replace("max_num_seqs = [64, 256]", "");
        let plan = Plan::from_toml_str(&text, Path::new("plan.toml")).unwrap();
        let policies: Vec<Option<String>> = plan.space.policies.clone();
        assert_eq!(policies, [Some("vllm-v1".to_string()), Some("tgi".to_string())]);
        let all = plan.space.candidates();
        let tgi = all.iter().find(|c| c.policy.as_deref() == Some("tgi") && c.tensor_parallel == 1).unwrap();
        let s = tgi.scenario(&plan, 1).unwrap();
        assert_eq!(s.engine.profile.as_ref().map(|p| p.engine.as_str()), Some("tgi"));
        assert!(deployment(&s, 1, None).unwrap().script("").contains("text-generation-launcher"));
        let refused = |engines: &str, extra: &str| {
            let bad = PLAN.replace("dtype = [\"bf16\", \"fp8\"]", &format!("engine = {engines}{extra}"));
            Plan::from_toml_str(&bad, Path::new("plan.toml")).unwrap_err().to_string()
        };
        let err = refused("[\"vllm\", \"trtllm\"]", "");
        assert!(err.contains("search.engine[1]") && err.contains("trtllm") && err.contains("known:") && err.contains("vllm"), "{err}");
        let err = refused("[\"vllm\", \"VLLM\"]", "");
        assert!(err.contains("search.engine[1]") && err.contains("twice"), "{err}");
        let err = refused("[]", "");
        assert!(err.contains("search.engine"), "{err}");
        let err = refused("[\"vllm\"]", "\npolicy = [\"vllm-v1\"]");
        assert!(err.contains("search.engine") && err.contains("not both"), "{err}");
    }

    /// An SGLang candidate's searched knobs are written under SGLang's own names, which its
    /// resolver takes (it refuses vLLM's); a vLLM candidate's keep vLLM's.
    #[test]
    fn sglang_candidates_write_its_own_flags() {
        let text = PLAN
            .replace("dtype = [\"bf16\", \"fp8\"]", "policy = [\"vllm-v1\", \"sglang\"]\nmax_num_batched_tokens = [4096]\nenable_chunked_prefill = [true, false]")
            .replace("[search]", "[engine.sglang]\nschedule_policy = \"lpm\"\n[search]");
        let plan = Plan::from_toml_str(&text, Path::new("plan.toml")).unwrap();
        let all = plan.space.candidates();
        let find = |policy: &str, chunked: bool| {
            let c = all.iter().find(|c| c.policy.as_deref() == Some(policy) && c.max_num_seqs == Some(64) && c.enable_chunked_prefill == Some(chunked)).unwrap();
            let text = c.scenario_text(&plan, 1, 10, 1.0);
            let table: toml::Table = toml::from_str(&text).unwrap();
            table["engine"].as_table().unwrap().clone()
        };
        let sglang = find("sglang", true);
        let knobs = sglang["sglang"].as_table().unwrap();
        assert_eq!(knobs.get("max_running_requests").and_then(|v| v.as_integer()), Some(64));
        assert_eq!(knobs.get("chunked_prefill_size").and_then(|v| v.as_integer()), Some(4096));
        assert_eq!(knobs.get("schedule_policy").and_then(|v| v.as_str()), Some("lpm"), "the plan's own SGLang flags are kept");
        assert!(!sglang.contains_key("max_num_seqs") && !sglang.contains_key("enable_chunked_prefill"), "{sglang:?}");
        let unchunked = find("sglang", false);
        assert_eq!(unchunked["sglang"].get("chunked_prefill_size").and_then(|v| v.as_integer()), Some(-1));
        let vllm = find("vllm-v1", false);
        assert!(!vllm.contains_key("sglang"), "{vllm:?}");
        assert_eq!(vllm.get("max_num_seqs").and_then(|v| v.as_integer()), Some(64));
        assert_eq!(vllm.get("enable_chunked_prefill").and_then(|v| v.as_bool()), Some(false));
    }

    /// A disaggregated candidate is units of x prefill and y decode replicas on its GPU: its
    /// scenario has the two pools, scaled by the units, its GPUs count both, and the deploy
    /// command names the KV connector.
    #[test]
    fn disaggregated_splits_are_searched_as_units() {
        let text = PLAN.replace("kv_cache_dtype = [\"auto\", \"fp8\"]", "disaggregation = [\"pooled\", \"1P3D\"]\nlink = \"nvlink\"");
        let plan = Plan::from_toml_str(&text, Path::new("plan.toml")).unwrap();
        let all = plan.space.candidates();
        assert_eq!(all.len(), 2 * 2 * 2 * 2 * 2);
        let split = all.iter().find(|c| c.tensor_parallel == 2 && c.disaggregation == Some((1, 3))).unwrap();
        assert!(split.label(&plan.space).ends_with(" 1P3D"), "{}", split.label(&plan.space));
        assert_eq!(split.gpus_per_replica(), 8);
        let s = split.scenario(&plan, 2).unwrap();
        let roles: Vec<(crate::scenario::PoolRole, u32, u32)> = s.pools.iter().map(|p| (p.role, p.engine.replicas, p.engine.tensor_parallel)).collect();
        assert_eq!(roles, [(crate::scenario::PoolRole::Prefill, 2, 2), (crate::scenario::PoolRole::Decode, 6, 2)]);
        assert_eq!(s.kv_link.as_ref().map(|l| l.name.as_str()), Some("nvlink"));
        let command = deployment(&s, 2, None).unwrap().script("");
        assert!(command.contains("kv_connector") && command.contains("# proxy"), "{command}");
        let pooled = all.iter().find(|c| c.tensor_parallel == 2 && c.disaggregation.is_none()).unwrap();
        assert_eq!(pooled.gpus_per_replica(), 2);
        assert!(pooled.scenario(&plan, 2).unwrap().pools.is_empty());
        let bad = PLAN.replace("kv_cache_dtype = [\"auto\", \"fp8\"]", "disaggregation = [\"1P0D\"]");
        let err = Plan::from_toml_str(&bad, Path::new("plan.toml")).unwrap_err().to_string();
        assert!(err.contains("search.disaggregation[0]") && err.contains("1P0D"), "{err}");
    }
}
