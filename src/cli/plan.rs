//! `servesim plan`: the cheapest deployment that meets latency objectives at a load, or the best
//! goodput per GPU without one; `--shard K/N` and `plan merge` split it over machines.

use std::path::{Path, PathBuf};

use clap::{Args, Subcommand};

use super::flags::{self, usage};
use super::progress;
use crate::Error;
use crate::plan::shard::{self, Shard};
use crate::plan::evaluate::evaluate_with_progress;
use crate::plan::{Candidate, Evaluated, Evaluation, Plan, SearchOptions, deploy, output, rank};

#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct PlanArgs {
    #[command(subcommand)]
    pub command: Option<PlanCommand>,
    /// Plan file (TOML): model, workload, target rate, objectives, search space, budget.
    #[arg(required = true)]
    pub plan: Option<PathBuf>,
    /// Directory for candidates.csv, plan.json, index.html with its charts, and a scenario file
    /// and deployment command for each of the top configurations.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Evaluate only shard K of N (candidates whose index is K − 1 modulo N) and write
    /// DIR/shard.json for `servesim plan merge`; needs --out.
    #[arg(long, value_name = "K/N", requires = "out")]
    pub shard: Option<String>,
    /// Continue an interrupted run into the same --out DIR: candidates its log records are not
    /// evaluated again (the log, DIR/.plan-progress.jsonl, is removed once a run completes).
    #[arg(long, requires = "out")]
    pub resume: bool,
    /// A price table (TOML: `[[price]]` with `gpu`, `price_per_gpu_hour`, `source`) for the GPUs
    /// the plan gives no price: your own quotes instead of servesim's default list prices.
    #[arg(long, value_name = "FILE")]
    pub prices: Option<PathBuf>,
    /// Threads evaluating candidates (default: all cores); the output does not depend on it.
    #[arg(long)]
    pub threads: Option<usize>,
}

#[derive(Debug, Subcommand)]
pub enum PlanCommand {
    /// Combine the shard directories of one plan into exactly the unsharded result.
    Merge(MergeArgs),
}

#[derive(Debug, Args)]
pub struct MergeArgs {
    /// Directories written by `servesim plan PLAN --shard K/N --out DIR`, one per shard.
    #[arg(required = true, value_name = "DIR")]
    pub shards: Vec<PathBuf>,
    /// Directory for the merged outputs, as an unsharded `--out` writes them.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
}

pub(super) fn run(args: PlanArgs) -> Result<(), Error> {
    if let Some(dir) = args.out.as_deref().or(match &args.command {
        Some(PlanCommand::Merge(merge)) => merge.out.as_deref(),
        None => None,
    }) {
        super::flags::output_dir("--out", dir)?;
    }
    if let Some(PlanCommand::Merge(merge)) = args.command {
        let (plan, evaluations) = shard::merge(&merge.shards)?;
        answer_and_write(&plan, &evaluations, merge.out.as_deref())?;
        return no_answer_check(&plan, &evaluations, false);
    }
    let path = args.plan.expect("clap requires the plan file without a subcommand");
    let text = std::fs::read_to_string(&path).map_err(|source| crate::scenario::ScenarioError::Io { file: path.clone(), source })?;
    let text = match &args.prices {
        Some(prices) => crate::plan::prices::apply_price_file(&text, prices)?,
        None => text,
    };
    let plan = Plan::from_toml_str(&text, &path)?;
    let shard = args.shard.as_deref().map(|s| Shard::parse(s).map_err(|reason| usage("--shard", s, reason))).transpose()?;
    let threads = flags::threads(args.threads)?;
    let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().map_err(|e| usage("--threads", threads, e.to_string()))?;
    let all = plan.space.candidates();
    crate::plan::evaluate::check_plan_wide(&plan, &all)?;
    let total = all.len();
    let mine = match shard {
        Some(s) => s.select(all.clone()),
        None => all.clone(),
    };
    // Every finished candidate is logged in the output directory, so that --resume can skip it.
    let log_path = args.out.as_ref().map(|dir| dir.join(shard::PROGRESS_FILE));
    let mut evaluations = match (&log_path, args.resume) {
        (Some(path), true) => shard::read_progress(path, &text, &plan, &all)?,
        _ => Vec::new(),
    };
    evaluations.retain(|e| mine.iter().any(|c| c.index == e.candidate.index));
    let candidates: Vec<Candidate> = mine.into_iter().filter(|c| evaluations.iter().all(|e| e.candidate.index != c.index)).collect();
    let log = match &log_path {
        Some(path) => Some(std::sync::Mutex::new(open_log(path, &text, !evaluations.is_empty())?)),
        None => None,
    };
    eprintln!(
        "plan {}: evaluating {} of {total} candidates ({} done before) on {threads} thread(s)",
        plan.name,
        candidates.len(),
        evaluations.len()
    );
    let bar = progress::candidates(candidates.len());
    let on_done = |e: &Evaluation| {
        bar.inc(1);
        if let Some(log) = &log {
            use std::io::Write;
            // A lost line only costs a re-evaluation on --resume.
            let _ = log.lock().expect("no writer panics holding the log").write_all(shard::progress_line(e).as_bytes());
        }
    };
    let fresh = pool.install(|| evaluate_with_progress(&plan, &candidates, &SearchOptions::default(), &on_done));
    bar.finish_and_clear();
    evaluations.extend(fresh?);
    evaluations.sort_by_key(|e| e.candidate.index);
    match (shard, &args.out) {
        (Some(s), Some(dir)) => write(dir, shard::FILE, shard::shard_json(&text, &plan, s, total, &evaluations))?,
        _ => answer_and_write(&plan, &evaluations, args.out.as_deref())?,
    }
    if let (Some(s), Some(dir)) = (shard, &args.out) {
        eprintln!("wrote shard {}/{} to {}; combine the shards with servesim plan merge", s.k, s.n, dir.display());
    }
    if let Some(path) = &log_path {
        let _ = std::fs::remove_file(path);
    }
    no_answer_check(&plan, &evaluations, shard.is_some())
}

/// The progress log, continued after `entries_kept` (on --resume) or started afresh.
fn open_log(path: &Path, plan_text: &str, entries_kept: bool) -> Result<std::fs::File, Error> {
    use std::io::Write;
    let io = |source| Error::Output { path: path.to_path_buf(), source };
    if let Some(dir) = path.parent() {
        create_dir(dir)?;
    }
    if entries_kept {
        let mut file = std::fs::OpenOptions::new().append(true).open(path).map_err(io)?;
        // A line the interruption cut short ends here, so the next entry starts a line of its own.
        file.write_all(b"\n").map_err(io)?;
        return Ok(file);
    }
    let mut file = std::fs::File::create(path).map_err(io)?;
    file.write_all(shard::progress_header(plan_text).as_bytes()).map_err(io)?;
    Ok(file)
}

/// Prints the ranked table and writes the outputs.
fn answer_and_write(plan: &Plan, evaluations: &[Evaluation], out: Option<&Path>) -> Result<(), Error> {
    let ranked = rank(plan, evaluations);
    print!("{}", output::table(plan, evaluations, &ranked));
    if let Some(dir) = out {
        write_outputs(dir, plan, evaluations, &ranked)?;
        eprintln!("wrote {}", dir.display());
    }
    Ok(())
}

/// Fails with the closest miss when nothing answers the plan (a shard answers nothing alone).
fn no_answer_check(plan: &Plan, evaluations: &[Evaluation], is_shard: bool) -> Result<(), Error> {
    if !is_shard && rank(plan, evaluations).is_empty() {
        return Err(Error::NoAnswer(output::closest_miss(plan, evaluations)));
    }
    Ok(())
}

fn create_dir(dir: &Path) -> Result<(), Error> {
    std::fs::create_dir_all(dir).map_err(|source| Error::Output { path: dir.to_path_buf(), source })
}

fn write(dir: &Path, name: &str, text: String) -> Result<(), Error> {
    let path = dir.join(name);
    std::fs::write(&path, text).map_err(|source| Error::Output { path, source })
}

/// What a plan's engine loads: a `model.hf_config`'s folder, as the plan names it (relative to
/// the plan's folder, as a relative path stays); `None` for a preset, whose repository id the
/// deployment takes.
fn deploy_model(plan: &Plan) -> Option<String> {
    let config = plan.model.get("hf_config")?.as_str()?;
    let folder = Path::new(config).parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    Some(folder.display().to_string())
}

fn write_outputs(dir: &Path, plan: &Plan, evaluations: &[Evaluation], ranked: &[(&Candidate, &Evaluated)]) -> Result<(), Error> {
    create_dir(dir)?;
    write(dir, "candidates.csv", output::candidates_csv(plan, evaluations, ranked))?;
    let json = output::plan_json(plan, evaluations, ranked);
    write(dir, "plan.json", serde_json::to_string_pretty(&json).expect("plain JSON") + "\n")?;
    let charts = crate::plan::charts::charts(plan, evaluations);
    let (_, rendered) = crate::report::write_charts(dir, &charts)?;
    write(dir, "index.html", crate::plan::charts::index_html(plan, ranked, &rendered))?;
    for (k, (c, e)) in ranked.iter().take(output::ARTEFACTS).enumerate() {
        // The whole deployment at the target (or one replica at its highest rate), with as many
        // requests as the planner's probes: `servesim simulate` reruns it.
        let requests = SearchOptions::default().requests_for_cluster(&plan.objectives, e.replicas);
        let header = format!("# {}: written by servesim plan from {}\n", c.label(&plan.space), plan.path.display());
        let rate = plan.target_rate.unwrap_or(e.per_replica.max_rate);
        write(dir, &format!("top-{}.toml", k + 1), header + &c.scenario_text(plan, e.replicas, requests, rate))?;
        let label = c.label(&plan.space);
        match deploy::deployment(&e.scenario, e.replicas, deploy_model(plan)) {
            Ok(d) => {
                write(dir, &format!("top-{}.sh", k + 1), d.script(&label))?;
                let name = format!("{} top-{}", plan.name, k + 1);
                write(dir, &format!("top-{}.k8s.yaml", k + 1), deploy::kubernetes::manifest(&d, &name, &plan.space.gpus[c.gpu].name))?;
            }
            Err(why) => write(dir, &format!("top-{}.sh", k + 1), format!("#!/bin/sh
# {label}
# no deploy command: {}
", why.0))?,
        }
    }
    Ok(())
}
