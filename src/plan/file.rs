//! Plan files: what to serve, the objectives, the load, and the deployments to consider.
//!
//! ```toml
//! name = "llama70b-chat"
//! [model]            # a scenario's [model], as is
//! preset = "Llama-3.1-70B"
//! [workload]         # a scenario's [workload]; the planner sets num_prompts and request_rate
//! seed = 1
//! [workload.dataset]
//! kind = "sharegpt"
//! # input = ..., output = ...
//! [engine]           # engine fields every candidate shares (not the searched ones)
//! max_model_len = 8192
//! [target]
//! rate = 20.0        # req/s; without it, the plan ranks by goodput per GPU
//! [slo]
//! ttft_p90_ms = 1000 # <ttft|tpot|itl|e2el>_<mean|median|pNN>_ms
//! tpot_p90_ms = 50
//! attainment = 0.99  # share of requests meeting every per-request objective (goodput)
//! [search]
//! engine = ["vllm", "sglang"]      # or policy = ["vllm-v1"]; not both
//! tensor_parallel = [1, 2, 4, 8]
//! max_num_seqs = [64, 256]
//! dtype = ["bf16", "fp8"]           # weights; kv_cache_dtype = ["auto", "fp8"] likewise
//! [[search.gpu]]
//! name = "H100-SXM"
//! price_per_gpu_hour = 3.0   # left out: `--prices FILE`'s, else the default in plan::prices
//! price_source = "a quote"   # optional, with a price: where it comes from
//! [budget]
//! max_gpus = 64
//! ```
//!
//! Every error names the plan file, the field and the value, as scenario errors do. The
//! candidates' own fields (GPU, engine knobs) are checked by scenario resolution itself, so a
//! deployment that cannot run is a candidate with a reason, not an error.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::objectives::{Objectives, Slo, Statistic};
use super::prices;
use crate::metrics::LatencyMetric;
use crate::scenario::ScenarioError;

/// The file as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPlan {
    name: Option<String>,
    model: toml::Table,
    workload: toml::Table,
    #[serde(default)]
    engine: Option<toml::Table>,
    #[serde(default)]
    cost: Option<toml::Table>,
    #[serde(default)]
    target: Option<RawTarget>,
    slo: toml::Table,
    search: RawSearch,
    #[serde(default)]
    budget: RawBudget,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTarget {
    rate: Option<f64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSearch {
    gpu: Vec<RawGpu>,
    #[serde(default)]
    policy: Option<Vec<String>>,
    /// Engines (`vllm`, `sglang`, `tgi`): each runs its newest engine profile's policy.
    #[serde(default)]
    engine: Option<Vec<String>>,
    tensor_parallel: Vec<u32>,
    #[serde(default)]
    max_num_seqs: Option<Vec<u32>>,
    #[serde(default)]
    max_num_batched_tokens: Option<Vec<u32>>,
    #[serde(default)]
    enable_chunked_prefill: Option<Vec<bool>>,
    /// Weight dtypes; the KV cache follows vLLM's `auto` unless the [model] pins it.
    #[serde(default)]
    dtype: Option<Vec<String>>,
    /// KV-cache dtypes (`auto`, bf16, fp8, …); left out, the [model]'s (or `auto`).
    #[serde(default)]
    kv_cache_dtype: Option<Vec<String>>,
    /// Mixture-of-experts models: `[false, true]` searches both ways of placing experts.
    #[serde(default)]
    expert_parallel: Option<Vec<bool>>,
    /// Prefill/decode splits: `"pooled"` or `"xPyD"` (x prefill and y decode replicas per unit).
    #[serde(default)]
    disaggregation: Option<Vec<String>>,
    /// Data-parallel ranks per replica (vLLM's `--data-parallel-size`), each of
    /// `tensor_parallel` GPUs; left out, one engine per replica.
    #[serde(default)]
    data_parallel: Option<Vec<u32>>,
    /// The link of disaggregated candidates (a `cluster.link` preset; default "infiniband").
    #[serde(default)]
    link: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawGpu {
    name: String,
    /// Left out: the default of `plan::prices`, for a hardware preset.
    price_per_gpu_hour: Option<f64>,
    /// Where `price_per_gpu_hour` comes from (a quote, a price page and its date); only with it.
    price_source: Option<String>,
    /// A calibration profile (`servesim calibrate --out` or `calibrate import`) that prices
    /// this GPU's steps, or `auto` for the one bundled for this GPU.
    profile: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawBudget {
    max_gpus: Option<u32>,
    max_price_per_hour: Option<f64>,
}

/// A GPU the plan may buy.
#[derive(Clone, Debug, PartialEq)]
pub struct GpuOffer {
    pub name: String,
    pub price_per_gpu_hour: f64,
    /// Where the price comes from: the plan file, or a default's source and date.
    pub price_source: String,
    /// The price is servesim's default (`plan::prices`), not the plan's or a `--prices` file's.
    pub default_price: bool,
    pub profile: Option<PathBuf>,
}

/// The search space: every combination is one candidate replica configuration.
#[derive(Clone, Debug, PartialEq)]
pub struct SearchSpace {
    pub gpus: Vec<GpuOffer>,
    /// `None` in a list leaves the field to the engine's default.
    pub policies: Vec<Option<String>>,
    pub tensor_parallel: Vec<u32>,
    pub max_num_seqs: Vec<Option<u32>>,
    pub max_num_batched_tokens: Vec<Option<u32>>,
    pub enable_chunked_prefill: Vec<Option<bool>>,
    pub dtypes: Vec<Option<String>>,
    pub kv_cache_dtypes: Vec<Option<String>>,
    pub expert_parallel: Vec<Option<bool>>,
    /// `None`: pooled replicas; `Some((x, y))`: units of x prefill and y decode replicas.
    pub disaggregation: Vec<Option<(u32, u32)>>,
    /// Data-parallel ranks per replica; `None` leaves `engine.data_parallel` out.
    pub data_parallel: Vec<Option<u32>>,
    /// The KV link of disaggregated candidates.
    pub link: String,
}

/// The most replicas of one role in a disaggregated unit.
const DISAGGREGATION_SIDE_MAX: u32 = 64;

/// `"pooled"`, or `"xPyD"` (case-insensitive): x prefill and y decode replicas.
fn parse_split(text: &str) -> Option<Option<(u32, u32)>> {
    let t = text.trim().to_ascii_uppercase();
    if t == "POOLED" {
        return Some(None);
    }
    let (x, y) = t.strip_suffix('D')?.split_once('P')?;
    let (x, y) = (x.parse::<u32>().ok()?, y.parse::<u32>().ok()?);
    let side = 1..=DISAGGREGATION_SIDE_MAX;
    (side.contains(&x) && side.contains(&y)).then_some(Some((x, y)))
}

/// A validated plan.
#[derive(Clone, Debug)]
pub struct Plan {
    pub path: PathBuf,
    pub name: String,
    /// The scenario sections every candidate shares, as written.
    pub model: toml::Table,
    pub workload: toml::Table,
    /// Engine fields every candidate shares (`max_model_len`, `gpu_memory_utilization`, …).
    pub engine: toml::Table,
    pub cost: Option<toml::Table>,
    pub target_rate: Option<f64>,
    pub objectives: Objectives,
    pub space: SearchSpace,
    pub max_gpus: Option<u32>,
    pub max_price_per_hour: Option<f64>,
}

/// Engine fields the search sets, so a plan's `[engine]` may not.
const SEARCHED_ENGINE_FIELDS: [&str; 6] =
    ["policy", "tensor_parallel", "replicas", "max_num_seqs", "max_num_batched_tokens", "enable_chunked_prefill"];

/// Most requests one probe simulates: the memory a simulation holds grows with them.
pub const PROBE_REQUESTS_MAX: u32 = 1_000_000;

/// Most candidates one plan may enumerate: each runs a dozen full simulations.
pub const MAX_CANDIDATES: usize = 100_000;

impl Plan {
    /// Parses plan text as if it came from `path`.
    pub fn from_toml_str(text: &str, path: &Path) -> Result<Plan, ScenarioError> {
        let file = path.to_path_buf();
        let invalid = |field: &str, value: &dyn std::fmt::Display, reason: &str| ScenarioError::Invalid {
            file: file.clone(),
            field: field.to_string(),
            value: value.to_string(),
            reason: reason.to_string(),
        };
        let raw: RawPlan =
            toml::from_str(text).map_err(|e| ScenarioError::Parse { file: file.clone(), message: e.to_string().trim_end().to_string() })?;

        for key in ["num_prompts", "request_rate"] {
            if let Some(value) = raw.workload.get(key) {
                return Err(invalid(&format!("workload.{key}"), value, "set by the planner: give [target] rate instead"));
            }
        }
        let engine = raw.engine.unwrap_or_default();
        for key in SEARCHED_ENGINE_FIELDS {
            if let Some(value) = engine.get(key) {
                return Err(invalid(&format!("engine.{key}"), value, "searched: list its values in [search]"));
            }
        }
        // A `[target]` table without its rate would silently rank by goodput instead.
        let target_rate = match raw.target.map(|t| t.rate) {
            Some(None) => return Err(invalid("target.rate", &"(missing)", "a [target] needs its rate (req/s); leave [target] out to rank by goodput per GPU")),
            Some(rate) => rate,
            None => None,
        };
        let target_rate = match target_rate {
            Some(rate) if !(rate.is_finite() && rate > 0.0) => return Err(invalid("target.rate", &rate, "must be a positive number of requests per second")),
            rate => rate,
        };
        if let Some(kind) = raw.workload.get("dataset").and_then(|d| d.get("kind")).filter(|k| k.as_str() == Some("trace")) {
            return Err(invalid("workload.dataset.kind", kind, "a trace brings its own arrival times, so the planner cannot set the rate"));
        }
        let objectives = parse_slo(&raw.slo, &invalid)?;

        let s = raw.search;
        if s.gpu.is_empty() {
            return Err(invalid("search.gpu", &"[]", "name at least one GPU"));
        }
        let mut gpus = Vec::new();
        for (i, gpu) in s.gpu.iter().enumerate() {
            // The same offer twice would only repeat its candidates (1,000 entries made 4,004);
            // one GPU at two prices or with two profiles is two offers.
            let same = |g: &RawGpu| {
                prices::price_key(&g.name) == prices::price_key(&gpu.name) && g.profile == gpu.profile && g.price_per_gpu_hour == gpu.price_per_gpu_hour
            };
            if let Some(first) = s.gpu[..i].iter().position(same) {
                return Err(invalid(&format!("search.gpu[{i}].name"), &gpu.name, &format!("repeats search.gpu[{first}] (same price and profile); list each offer once")));
            }
            if let (Some(source), None) = (&gpu.price_source, gpu.price_per_gpu_hour) {
                return Err(invalid(&format!("search.gpu[{i}].price_source"), source, "names where price_per_gpu_hour comes from: give the price too"));
            }
            let default_price = gpu.price_per_gpu_hour.is_none();
            let (price_per_gpu_hour, price_source) = match gpu.price_per_gpu_hour {
                Some(price) if price.is_finite() && price >= 0.0 => (price, gpu.price_source.clone().unwrap_or_else(|| "plan file".to_string())),
                Some(price) => return Err(invalid(&format!("search.gpu[{i}].price_per_gpu_hour"), &price, "must be a price ≥ 0")),
                None => match prices::default_price(&gpu.name) {
                    Some(p) => (p.price_per_gpu_hour, format!("{}, {}", p.source, p.as_of)),
                    None => {
                        return Err(invalid(
                            &format!("search.gpu[{i}].name"),
                            &gpu.name,
                            "has no default price (docs/planning.md lists them); give price_per_gpu_hour",
                        ));
                    }
                },
            };
            let profile = gpu.profile.as_ref().map(|p| match p.as_str() {
                "auto" => PathBuf::from(p),
                _ => path.parent().map_or_else(|| PathBuf::from(p), |dir| dir.join(p)),
            });
            gpus.push(GpuOffer { name: gpu.name.clone(), price_per_gpu_hour, price_source, default_price, profile });
        }
        let nonempty = |field: &str, len: usize| if len == 0 { Err(invalid(field, &"[]", "give at least one value, or leave the key out")) } else { Ok(()) };
        nonempty("search.tensor_parallel", s.tensor_parallel.len())?;
        if let Some(&tp) = s.tensor_parallel.iter().find(|&&tp| tp == 0) {
            return Err(invalid("search.tensor_parallel", &tp, "must be at least 1"));
        }
        let optional = |list: Option<Vec<u32>>, field: &str| -> Result<Vec<Option<u32>>, ScenarioError> {
            match list {
                None => Ok(vec![None]),
                Some(values) => {
                    nonempty(field, values.len())?;
                    match values.iter().find(|&&v| v == 0) {
                        Some(v) => Err(invalid(field, v, "must be at least 1")),
                        None => Ok(values.into_iter().map(Some).collect()),
                    }
                }
            }
        };
        let max_num_seqs = optional(s.max_num_seqs, "search.max_num_seqs")?;
        let max_num_batched_tokens = optional(s.max_num_batched_tokens, "search.max_num_batched_tokens")?;
        let listed = |list: Option<Vec<String>>, field: &str| -> Result<Vec<Option<String>>, ScenarioError> {
            match list {
                None => Ok(vec![None]),
                Some(values) => nonempty(field, values.len()).map(|()| values.into_iter().map(Some).collect()),
            }
        };
        let policies = match (s.engine, s.policy) {
            (Some(engines), Some(_)) => {
                return Err(invalid("search.engine", &format!("{engines:?}"), "search.policy lists the policies too: give engines or policies, not both"));
            }
            (Some(engines), None) => {
                nonempty("search.engine", engines.len())?;
                let mut policies = Vec::new();
                for (i, name) in engines.iter().enumerate() {
                    let field = format!("search.engine[{i}]");
                    let policy = engine_policy(name).map_err(|reason| invalid(&field, &format!("{name:?}"), &reason))?;
                    if policies.contains(&Some(policy.clone())) {
                        return Err(invalid(&field, &format!("{name:?}"), "is listed twice"));
                    }
                    policies.push(Some(policy));
                }
                policies
            }
            (None, policies) => listed(policies, "search.policy")?,
        };
        let dtypes = listed(s.dtype, "search.dtype")?;
        let kv_cache_dtypes = listed(s.kv_cache_dtype, "search.kv_cache_dtype")?;
        let flags = |list: Option<Vec<bool>>, field: &str| -> Result<Vec<Option<bool>>, ScenarioError> {
            match list {
                None => Ok(vec![None]),
                Some(values) => nonempty(field, values.len()).map(|()| values.into_iter().map(Some).collect()),
            }
        };
        let enable_chunked_prefill = flags(s.enable_chunked_prefill, "search.enable_chunked_prefill")?;
        if let (Some(_), Some(value)) = (&s.expert_parallel, engine.get("expert_parallel")) {
            return Err(invalid("engine.expert_parallel", value, "searched: search.expert_parallel lists its values"));
        }
        let expert_parallel = flags(s.expert_parallel, "search.expert_parallel")?;
        if let (Some(_), Some(value)) = (&s.data_parallel, engine.get("data_parallel")) {
            return Err(invalid("engine.data_parallel", value, "searched: search.data_parallel lists its values"));
        }
        let data_parallel = optional(s.data_parallel, "search.data_parallel")?;
        let disaggregation = match s.disaggregation {
            None => vec![None],
            Some(splits) => {
                nonempty("search.disaggregation", splits.len())?;
                let parse = |(i, text): (usize, &String)| {
                    parse_split(text).ok_or_else(|| {
                        invalid(
                            &format!("search.disaggregation[{i}]"),
                            &format!("{text:?}"),
                            &format!("expected \"pooled\" or \"xPyD\" (e.g. \"1P3D\"), x and y in 1..={DISAGGREGATION_SIDE_MAX}"),
                        )
                    })
                };
                splits.iter().enumerate().map(parse).collect::<Result<Vec<_>, _>>()?
            }
        };
        let link = s.link.unwrap_or_else(|| "infiniband".into());
        if !crate::scenario::LINK_PRESETS.iter().any(|(name, _, _)| name.eq_ignore_ascii_case(&link)) {
            let known: Vec<&str> = crate::scenario::LINK_PRESETS.iter().map(|p| p.0).collect();
            return Err(invalid("search.link", &format!("{link:?}"), &format!("unknown link preset; known: {}", known.join(", "))));
        }
        let space = SearchSpace {
            gpus,
            policies,
            tensor_parallel: s.tensor_parallel,
            max_num_seqs,
            max_num_batched_tokens,
            enable_chunked_prefill,
            dtypes,
            kv_cache_dtypes,
            expert_parallel,
            disaggregation,
            data_parallel,
            link,
        };
        let count = space.len();
        if count > MAX_CANDIDATES {
            return Err(invalid("search", &count, &format!("enumerates more than {MAX_CANDIDATES} candidates; narrow the lists")));
        }

        if raw.budget.max_gpus == Some(0) {
            return Err(invalid("budget.max_gpus", &0, "must be at least 1"));
        }
        if let Some(price) = raw.budget.max_price_per_hour.filter(|p| !(p.is_finite() && *p >= 0.0)) {
            return Err(invalid("budget.max_price_per_hour", &price, "must be a price ≥ 0"));
        }
        let name = raw.name.unwrap_or_else(|| path.file_stem().map_or("plan".into(), |s| s.to_string_lossy().into_owned()));
        Ok(Plan {
            path: file.clone(),
            name,
            model: raw.model,
            workload: raw.workload,
            engine,
            cost: raw.cost,
            target_rate,
            objectives,
            space,
            max_gpus: raw.budget.max_gpus,
            max_price_per_hour: raw.budget.max_price_per_hour,
        })
    }
}

/// The policy an engine's candidates run: that of its newest bundled engine profile (vLLM's V1
/// engine, SGLang's scheduler, TGI's), so each engine is simulated with its own scheduler and
/// priced with its own engine time. `Err` names the engines this build models.
pub fn engine_policy(engine: &str) -> Result<String, String> {
    let profiles = crate::scenario::engine_profile::bundled();
    let newest = profiles.iter().filter(|p| p.engine.eq_ignore_ascii_case(engine.trim())).max_by_key(|p| p.min_version);
    match newest {
        Some(profile) => Ok(profile.policy.name().to_string()),
        None => {
            let mut known: Vec<&str> = profiles.iter().map(|p| p.engine.as_str()).collect();
            known.sort_unstable();
            known.dedup();
            Err(format!("unknown engine; known: {}", known.join(", ")))
        }
    }
}

impl SearchSpace {
    /// The length of each searched list, in enumeration order (the last varies fastest in
    /// [`SearchSpace::candidates`]).
    pub fn list_lens(&self) -> [usize; 11] {
        [
            self.gpus.len(),
            self.policies.len(),
            self.tensor_parallel.len(),
            self.max_num_seqs.len(),
            self.max_num_batched_tokens.len(),
            self.enable_chunked_prefill.len(),
            self.dtypes.len(),
            self.kv_cache_dtypes.len(),
            self.expert_parallel.len(),
            self.disaggregation.len(),
            self.data_parallel.len(),
        ]
    }

    /// The number of candidates.
    pub fn len(&self) -> usize {
        self.list_lens().iter().fold(1usize, |n, &k| n.saturating_mul(k))
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// `[slo]`: `<metric>_<statistic>_ms` keys and `attainment`.
fn parse_slo(
    table: &toml::Table,
    invalid: &dyn Fn(&str, &dyn std::fmt::Display, &str) -> ScenarioError,
) -> Result<Objectives, ScenarioError> {
    const FORM: &str = "expected <ttft|tpot|itl|e2el>_<mean|median|pNN>_ms, or attainment";
    let mut slos = Vec::new();
    let mut attainment = None;
    for (key, value) in table {
        let field = format!("slo.{key}");
        let number = value.as_float().or_else(|| value.as_integer().map(|i| i as f64));
        if key == "attainment" {
            match number {
                Some(a) if a > 0.0 && a <= 1.0 => attainment = Some(a),
                _ => return Err(invalid(&field, value, "must be a fraction in (0, 1]")),
            }
            continue;
        }
        let parsed = key.strip_suffix("_ms").and_then(|rest| rest.split_once('_')).and_then(|(metric, stat)| {
            let metric = LatencyMetric::parse(metric)?;
            let statistic = match stat {
                "mean" => Statistic::Mean,
                "median" => Statistic::Percentile(50.0),
                p => Statistic::Percentile(p.strip_prefix('p')?.parse::<f64>().ok().filter(|p| *p > 0.0 && *p < 100.0)?),
            };
            Some((metric, statistic))
        });
        let Some((metric, statistic)) = parsed else {
            return Err(invalid(&field, value, FORM));
        };
        if let Statistic::Percentile(p) = statistic {
            // A probe runs 100 / (1 − p) requests so that p rests on ~100 beyond it.
            if 100.0 / (1.0 - p / 100.0) > PROBE_REQUESTS_MAX as f64 {
                return Err(invalid(&field, value, &format!("p{p} needs more than {PROBE_REQUESTS_MAX} requests per probe; at most p99.99")));
            }
        }
        match number {
            Some(limit_ms) if limit_ms.is_finite() && limit_ms > 0.0 => slos.push(Slo { metric, statistic, limit_ms }),
            _ => return Err(invalid(&field, value, "must be a positive number of milliseconds")),
        }
    }
    if slos.is_empty() {
        return Err(invalid("slo", &"{}", "name at least one objective, e.g. ttft_p90_ms = 1000"));
    }
    Ok(Objectives { slos, attainment })
}
