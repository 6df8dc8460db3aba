//! What a plan prints and writes: the ranked table, `candidates.csv`, `plan.json`, and for the
//! top configurations a scenario file and the command that deploys them.

use std::fmt::Write as _;

use super::candidate::Candidate;
use super::evaluate::{Evaluated, Evaluation, Outcome};
use super::file::Plan;
use super::objectives::{Binding, Statistic};
use super::search::{Bound, Probe};

/// Rows of the ranked table on stdout; `candidates.csv` has every candidate.
pub const TABLE_ROWS: usize = 10;
/// Top configurations that get a scenario file and a deployment command.
pub const ARTEFACTS: usize = 3;

fn binding_name(plan: &Plan, binding: Binding) -> String {
    match binding {
        Binding::Slo(i) => plan.objectives.slos[i].name(),
        Binding::Attainment => "attainment".into(),
        Binding::Failures => "failed requests".into(),
        Binding::Unsteady => "not steady (queue grows)".into(),
        Binding::Uncertain => "too close to call".into(),
    }
}

fn objectives_text(plan: &Plan) -> String {
    let mut parts: Vec<String> = plan.objectives.slos.iter().map(|s| format!("{} ≤ {} ms", s.name(), s.limit_ms)).collect();
    if let Some(a) = plan.objectives.attainment {
        parts.push(format!("attainment ≥ {a}"));
    }
    parts.join(", ")
}

/// The ranked table, then one line on the rest, then the answer (or the closest miss).
pub fn table(plan: &Plan, evaluations: &[Evaluation], ranked: &[(&Candidate, &Evaluated)]) -> String {
    let mut out = String::new();
    let load = plan.target_rate.map_or("best goodput per GPU".to_string(), |r| format!("{r} req/s"));
    writeln!(out, "plan {}: {} candidates, {load}, {}", plan.name, evaluations.len(), objectives_text(plan)).unwrap();
    writeln!(
        out,
        "{:>4}  {:<36} {:>5} {:>4} {:>9} {:>10} {:>11} {:>12} {:>9} {:>11}  {:<16} {}",
        "rank", "configuration", "repl", "gpus", "$/hour", "rate/repl", "goodput/gpu", "out tok/s/gpu", "tok/s/user", "$/1M out", "binding", "cost"
    )
    .unwrap();
    for (rank, (c, e)) in ranked.iter().take(TABLE_ROWS).enumerate() {
        let op = e.operating_point().expect("a ranked candidate has an operating point");
        let above = if e.per_replica.bound == Bound::AboveRange { "≥" } else { "" };
        writeln!(
            out,
            "{:>4}  {:<36} {:>5} {:>4} {:>9.2} {:>10} {:>11.3} {:>12.1} {:>9.1} {:>11}  {:<16} {}",
            rank + 1,
            c.label(&plan.space),
            e.replicas,
            e.gpus,
            e.price_per_hour,
            format!("{above}{:.2}", e.per_replica.max_rate),
            e.goodput_per_gpu(),
            op.output_throughput / e.gpus as f64,
            if op.mean_tpot_ms > 0.0 { 1000.0 / op.mean_tpot_ms } else { 0.0 },
            e.price_per_million_output().map_or("-".into(), |p| format!("{p:.3}")),
            binding_name(plan, op.verdict.binding),
            e.cost_source
        )
        .unwrap();
    }
    let infeasible = evaluations.iter().filter(|e| matches!(e.outcome, Outcome::Infeasible(_))).count();
    let over_budget = evaluations.iter().filter(|e| matches!(&e.outcome, Outcome::Evaluated(v) if v.meets && v.over_budget.is_some())).count();
    let missed = evaluations.iter().filter(|e| matches!(&e.outcome, Outcome::Evaluated(v) if !v.meets)).count();
    writeln!(
        out,
        "{} ranked, {} more not shown; {infeasible} infeasible, {missed} miss the objectives, {over_budget} over budget (candidates.csv has every one and why)",
        ranked.len(),
        ranked.len().saturating_sub(TABLE_ROWS)
    )
    .unwrap();
    if ranked.iter().any(|(_, e)| e.cost_source == "roofline") {
        writeln!(out, "note: rows priced by the roofline rest on datasheet peaks and guessed efficiencies; a calibrated or fitted profile is closer to a real engine").unwrap();
    }
    let defaults: Vec<String> = plan
        .space
        .gpus
        .iter()
        .filter(|g| g.default_price)
        .map(|g| format!("{} ${:.2}", g.name, g.price_per_gpu_hour))
        .collect();
    if !defaults.is_empty() {
        writeln!(
            out,
            "prices per GPU-hour: {}, servesim's defaults (on-demand list prices; plan.json names each source and date); give your own with --prices FILE or price_per_gpu_hour",
            defaults.join(", ")
        )
        .unwrap();
    }
    out
}

/// When nothing answers the plan: what came closest, in words.
pub fn closest_miss(plan: &Plan, evaluations: &[Evaluation]) -> String {
    let closest = evaluations
        .iter()
        .filter_map(|e| match &e.outcome {
            Outcome::Evaluated(v) => Some((&e.candidate, v.as_ref())),
            Outcome::Infeasible(_) => None,
        })
        .map(|(c, v)| (c, v, v.closest_ratio(plan)))
        .min_by(|a, b| a.2.0.total_cmp(&b.2.0).then(a.0.index.cmp(&b.0.index)));
    let head = format!("no configuration meets {}", objectives_text(plan));
    let head = match plan.target_rate {
        Some(rate) => format!("{head} at {rate} req/s within budget"),
        None => format!("{head} within budget"),
    };
    match closest {
        None => format!("{head}: no candidate is feasible (candidates.csv says why)"),
        Some((c, _, (_, Some(p)))) if !p.verdict.met => match p.verdict.binding {
            Binding::Slo(i) => format!(
                "{head}; the closest is {} at {:.3} req/s: {} {:.1} ms against {} ms",
                c.label(&plan.space),
                p.rate,
                plan.objectives.slos[i].name(),
                p.verdict.values_ms[i],
                plan.objectives.slos[i].limit_ms
            ),
            _ => format!("{head}; the closest is {} ({})", c.label(&plan.space), binding_name(plan, p.verdict.binding)),
        },
        Some((c, v, _)) => match &v.over_budget {
            Some(why) => format!("{head}; the closest is {}, which meets the objectives but is over budget: {why}", c.label(&plan.space)),
            None => format!(
                "{head}; the closest is {} with {} replicas, which missed at the target: {}",
                c.label(&plan.space),
                v.replicas,
                v.cluster.as_ref().map_or("-".into(), |p| binding_name(plan, p.verdict.binding))
            ),
        },
    }
}

/// What a probe's binding objective measured against its limit: `ttft_p90 812.3 ms > 500 ms`.
fn binding_text(plan: &Plan, probe: &Probe) -> String {
    match probe.verdict.binding {
        Binding::Slo(i) => {
            let slo = &plan.objectives.slos[i];
            let op = if probe.verdict.values_ms[i] > slo.limit_ms { ">" } else { "≤" };
            format!("{} {:.1} ms {op} {} ms", slo.name(), probe.verdict.values_ms[i], slo.limit_ms)
        }
        Binding::Attainment => format!(
            "attainment {:.3} < {}",
            probe.verdict.attainment,
            plan.objectives.attainment.map_or("-".to_string(), |a| a.to_string())
        ),
        other => binding_name(plan, other),
    }
}

/// Why a candidate misses the objectives, at the point that decided it.
pub fn miss_reason(plan: &Plan, v: &Evaluated) -> String {
    match (v.deciding_point(), &v.cluster) {
        (Some(p), Some(_)) => format!("{} replicas at the target {:.3} req/s: {}", v.replicas, p.rate, binding_text(plan, p)),
        (Some(p), None) if v.per_replica.bound == Bound::BelowRange => {
            format!("one replica at {:.3} req/s, the lowest rate searched: {}", p.rate, binding_text(plan, p))
        }
        (Some(p), None) => format!("one replica at {:.3} req/s: {}", p.rate, binding_text(plan, p)),
        (None, _) => "no probe decided it".to_string(),
    }
}

fn csv_field(text: &str) -> String {
    if text.contains([',', '"', '\n']) { format!("\"{}\"", text.replace('"', "\"\"")) } else { text.to_string() }
}

/// Every candidate, one row each, in candidate order.
pub fn candidates_csv(plan: &Plan, evaluations: &[Evaluation], ranked: &[(&Candidate, &Evaluated)]) -> String {
    let mut out = String::new();
    let slo_columns: Vec<String> = plan.objectives.slos.iter().map(|s| format!("{}_ms", s.name())).collect();
    writeln!(
        out,
        "candidate,rank,configuration,gpu,policy,tensor_parallel,max_num_seqs,max_num_batched_tokens,enable_chunked_prefill,dtype,kv_cache_dtype,expert_parallel,data_parallel,\
         status,reason,cost_source,max_rate_per_replica,search_bound,probes,replicas,replicas_added,replicas_saved,gpus,price_per_hour,\
         operating_rate,goodput_rps,attainment,output_tok_s,total_tok_s,tokens_per_user,binding,{},price_per_1m_output,price_per_1m_total",
        slo_columns.join(",")
    )
    .unwrap();
    let opt = |v: Option<String>| v.unwrap_or_default();
    for e in evaluations {
        let c = &e.candidate;
        let rank = ranked.iter().position(|(r, _)| r.index == c.index).map(|r| (r + 1).to_string());
        let mut row = vec![
            c.index.to_string(),
            opt(rank),
            csv_field(&c.label(&plan.space)),
            plan.space.gpus[c.gpu].name.clone(),
            opt(c.policy.clone()),
            c.tensor_parallel.to_string(),
            opt(c.max_num_seqs.map(|v| v.to_string())),
            opt(c.max_num_batched_tokens.map(|v| v.to_string())),
            opt(c.enable_chunked_prefill.map(|v| v.to_string())),
            opt(c.dtype.clone()),
            opt(c.kv_cache_dtype.clone()),
            opt(c.expert_parallel.map(|v| v.to_string())),
            opt(c.data_parallel.map(|v| v.to_string())),
        ];
        match &e.outcome {
            Outcome::Infeasible(reason) => {
                row.extend(["infeasible".into(), csv_field(reason)]);
                row.extend(std::iter::repeat_n(String::new(), 16 + slo_columns.len() + 2));
            }
            Outcome::Evaluated(v) => {
                let status = v.status();
                let reason = if v.meets { v.over_budget.clone().unwrap_or_default() } else { miss_reason(plan, v) };
                // For a miss, the metrics of the probe that decided it (the reason says which).
                let op = v.deciding_point();
                let bound = match v.per_replica.bound {
                    Bound::Found => "found",
                    Bound::BelowRange => "below range",
                    Bound::AboveRange => "above range",
                };
                row.extend([
                    status.into(),
                    csv_field(&reason),
                    v.cost_source.clone(),
                    format!("{:.4}", v.per_replica.max_rate),
                    bound.into(),
                    v.per_replica.probes.len().to_string(),
                    v.replicas.to_string(),
                    v.replicas_added.to_string(),
                    v.replicas_saved.to_string(),
                    v.gpus.to_string(),
                    format!("{:.4}", v.price_per_hour),
                    opt(op.map(|p| format!("{:.4}", p.rate))),
                    opt(op.map(|p| format!("{:.4}", p.verdict.goodput_rps))),
                    opt(op.map(|p| format!("{:.4}", p.verdict.attainment))),
                    opt(op.map(|p| format!("{:.2}", p.output_throughput))),
                    opt(op.map(|p| format!("{:.2}", p.total_token_throughput))),
                    opt(op.filter(|p| p.mean_tpot_ms > 0.0).map(|p| format!("{:.2}", 1000.0 / p.mean_tpot_ms))),
                    opt(op.map(|p| binding_name(plan, p.verdict.binding))),
                ]);
                row.extend((0..slo_columns.len()).map(|i| opt(op.map(|p| format!("{:.3}", p.verdict.values_ms[i])))));
                row.push(opt(v.price_per_million_output().map(|p| format!("{p:.4}"))));
                row.push(opt(v.price_per_million_total().map(|p| format!("{p:.4}"))));
            }
        }
        writeln!(out, "{}", row.join(",")).unwrap();
    }
    out
}

/// Every candidate and every probe, for auditing any answer.
pub fn plan_json(plan: &Plan, evaluations: &[Evaluation], ranked: &[(&Candidate, &Evaluated)]) -> serde_json::Value {
    use serde_json::json;
    let slos: Vec<_> = plan
        .objectives
        .slos
        .iter()
        .map(|s| {
            let statistic = match s.statistic {
                Statistic::Mean => json!("mean"),
                Statistic::Percentile(p) => json!(p),
            };
            json!({"name": s.name(), "metric": s.metric.key(), "statistic": statistic, "limit_ms": s.limit_ms})
        })
        .collect();
    let candidates: Vec<_> = evaluations
        .iter()
        .map(|e| {
            let c = &e.candidate;
            let mut value = json!({
                "index": c.index,
                "configuration": c.label(&plan.space),
                "gpu": plan.space.gpus[c.gpu].name,
                "tensor_parallel": c.tensor_parallel,
            });
            let obj = value.as_object_mut().expect("an object");
            // Only where searched, so that a plan without it writes what it always wrote.
            if let Some(ranks) = c.data_parallel {
                obj.insert("data_parallel".into(), json!(ranks));
            }
            match &e.outcome {
                Outcome::Infeasible(reason) => {
                    obj.insert("status".into(), json!("infeasible"));
                    obj.insert("reason".into(), json!(reason));
                }
                Outcome::Evaluated(v) => {
                    let probe_json = |p: &super::search::Probe| {
                        json!({
                            "rate": p.rate,
                            "num_prompts": p.num_prompts,
                            "met": p.verdict.met,
                            "values_ms": p.verdict.values_ms,
                            "binding": binding_name(plan, p.verdict.binding),
                            "attainment": p.verdict.attainment,
                            "goodput_rps": p.verdict.goodput_rps,
                            "output_throughput": p.output_throughput,
                            "total_token_throughput": p.total_token_throughput,
                            "mean_tpot_ms": p.mean_tpot_ms,
                            "interval_ms": p.interval_ms,
                            "steady": p.steady,
                        })
                    };
                    obj.insert("status".into(), json!(v.status()));
                    obj.insert("over_budget".into(), json!(v.over_budget));
                    obj.insert("cost_source".into(), json!(v.cost_source));
                    obj.insert("max_rate_per_replica".into(), json!(v.per_replica.max_rate));
                    obj.insert("replicas".into(), json!(v.replicas));
                    obj.insert("replicas_added".into(), json!(v.replicas_added));
                    obj.insert("replicas_saved".into(), json!(v.replicas_saved));
                    obj.insert("gpus".into(), json!(v.gpus));
                    obj.insert("price_per_hour".into(), json!(v.price_per_hour));
                    obj.insert("probes".into(), json!(v.per_replica.probes.iter().map(probe_json).collect::<Vec<_>>()));
                    obj.insert("cluster".into(), json!(v.cluster.as_ref().map(probe_json)));
                }
            }
            value
        })
        .collect();
    json!({
        "plan": plan.name,
        "target_rate": plan.target_rate,
        "gpus": plan.space.gpus.iter().map(|g| json!({
            "name": g.name,
            "price_per_gpu_hour": g.price_per_gpu_hour,
            "price_source": g.price_source,
        })).collect::<Vec<_>>(),
        "objectives": {"slos": slos, "attainment": plan.objectives.attainment},
        "ranked": ranked.iter().map(|(c, _)| c.index).collect::<Vec<_>>(),
        "candidates": candidates,
    })
}
