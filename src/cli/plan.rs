//! `servesim plan`: the cheapest deployment that meets latency objectives at a load, or the best
//! goodput per GPU without one.

use std::path::{Path, PathBuf};

use clap::Args;

use super::flags::{self, usage};
use crate::Error;
use crate::plan::{Plan, SearchOptions, evaluate, output, rank};

#[derive(Debug, Args)]
pub struct PlanArgs {
    /// Plan file (TOML): model, workload, target rate, objectives, search space, budget.
    pub plan: PathBuf,
    /// Directory for candidates.csv, plan.json, index.html with its charts, and a scenario file
    /// and deployment command for each of the top configurations.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Threads evaluating candidates (default: all cores); the output does not depend on it.
    #[arg(long)]
    pub threads: Option<usize>,
}

pub(super) fn run(args: PlanArgs) -> Result<(), Error> {
    let plan = Plan::load(&args.plan)?;
    let threads = args.threads.unwrap_or_else(flags::all_cores);
    if threads == 0 {
        return Err(usage("--threads", 0, "must be at least 1"));
    }
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .map_err(|e| usage("--threads", threads, e.to_string()))?;
    let candidates = plan.space.candidates();
    eprintln!("plan {}: evaluating {} candidates on {threads} thread(s)", plan.name, candidates.len());
    let options = SearchOptions::default();
    let evaluations = pool.install(|| evaluate(&plan, &candidates, &options))?;
    let ranked = rank(&plan, &evaluations);
    print!("{}", output::table(&plan, &evaluations, &ranked));
    if let Some(dir) = &args.out {
        write_outputs(dir, &plan, &evaluations, &ranked)?;
        eprintln!("wrote {}", dir.display());
    }
    if ranked.is_empty() {
        return Err(Error::NoAnswer(output::closest_miss(&plan, &evaluations)));
    }
    Ok(())
}

fn write_outputs(
    dir: &Path,
    plan: &Plan,
    evaluations: &[crate::plan::Evaluation],
    ranked: &[(&crate::plan::Candidate, &crate::plan::Evaluated)],
) -> Result<(), Error> {
    let write = |name: String, text: String| {
        let path = dir.join(name);
        std::fs::write(&path, text).map_err(|source| Error::Output { path, source })
    };
    std::fs::create_dir_all(dir).map_err(|source| Error::Output { path: dir.to_path_buf(), source })?;
    write("candidates.csv".into(), output::candidates_csv(plan, evaluations, ranked))?;
    let json = output::plan_json(plan, evaluations, ranked);
    write("plan.json".into(), serde_json::to_string_pretty(&json).expect("plain JSON") + "\n")?;
    let charts = crate::plan::charts::charts(plan, evaluations);
    let (_, rendered) = crate::report::write_charts(dir, &charts)?;
    write("index.html".into(), crate::plan::charts::index_html(plan, ranked, &rendered))?;
    for (k, (c, e)) in ranked.iter().take(output::ARTEFACTS).enumerate() {
        // The whole deployment at the target (or one replica at its highest rate), with as many
        // requests as the planner's probes: `servesim simulate` reruns it.
        let requests = SearchOptions::default().requests_for(&plan.objectives).saturating_mul(e.replicas);
        let header = format!("# {}: written by servesim plan from {}\n", c.label(&plan.space), plan.path.display());
        let rate = plan.target_rate.unwrap_or(e.per_replica.max_rate);
        write(format!("top-{}.toml", k + 1), header + &c.scenario_text(plan, e.replicas, requests, rate))?;
        let command = output::deploy_command(c, e);
        let replicas = if e.replicas > 1 { format!("# on each of {} replicas, behind a load balancer\n", e.replicas) } else { String::new() };
        write(format!("top-{}.sh", k + 1), format!("#!/bin/sh\n# {}\n{replicas}{command}\n", c.label(&plan.space)))?;
    }
    Ok(())
}
