//! Shards: a deterministic share of a plan's candidates, evaluated anywhere, and the merge that
//! turns every shard back into exactly the unsharded result.
//!
//! ```text
//!   servesim plan P.toml --shard 1/3 --out s1   ─┐
//!   servesim plan P.toml --shard 2/3 --out s2   ─┼─► servesim plan merge s1 s2 s3 --out all
//!   servesim plan P.toml --shard 3/3 --out s3   ─┘    (= servesim plan P.toml --out all)
//! ```
//!
//! Shard K of N takes the candidates whose index is K − 1 modulo N, so every shard gets a mix of
//! GPUs and sizes. A shard writes `shard.json`: the plan's text (the merge re-reads the plan
//! from it, so no file needs to travel beside the shards), and each of its candidates' results.
//! Floats travel as JSON numbers, whose shortest round-trip form gives back the same bits.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::candidate::Candidate;
use super::evaluate::{Evaluated, Evaluation, Outcome, Searched};
use super::file::Plan;
use crate::Error;

/// `K/N`: shard K (1-based) of N.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Shard {
    pub k: u32,
    pub n: u32,
}

impl Shard {
    /// Parses `K/N` with 1 ≤ K ≤ N; the reason on error.
    pub fn parse(text: &str) -> Result<Shard, String> {
        let (k, n) = text.split_once('/').ok_or("expected K/N, e.g. 2/8")?;
        let (k, n) = (k.trim().parse::<u32>().map_err(|_| "K is not a whole number")?, n.trim().parse::<u32>().map_err(|_| "N is not a whole number")?);
        if n == 0 || k == 0 || k > n {
            return Err(format!("need 1 ≤ K ≤ N, got {k}/{n}"));
        }
        Ok(Shard { k, n })
    }

    /// This shard's candidates.
    pub fn select(&self, candidates: Vec<Candidate>) -> Vec<Candidate> {
        candidates.into_iter().filter(|c| c.index as u64 % self.n as u64 == (self.k - 1) as u64).collect()
    }
}

/// One candidate's result as a shard records it; the merge rebuilds the rest from the plan.
#[derive(Debug, Serialize, Deserialize)]
struct Entry {
    index: usize,
    infeasible: Option<String>,
    evaluated: Option<Searched>,
}

/// `shard.json`.
#[derive(Debug, Serialize, Deserialize)]
struct ShardFile {
    plan_path: PathBuf,
    plan_text: String,
    shard: Shard,
    candidates_total: usize,
    entries: Vec<Entry>,
}

/// The file a shard writes into its output directory.
pub const FILE: &str = "shard.json";

fn entry(e: &Evaluation) -> Entry {
    match &e.outcome {
        Outcome::Infeasible(reason) => Entry { index: e.candidate.index, infeasible: Some(reason.clone()), evaluated: None },
        Outcome::Evaluated(v) => Entry { index: e.candidate.index, infeasible: None, evaluated: Some(v.searched.clone()) },
    }
}

/// The evaluation an entry records, its scenario resolved again from the plan; `Ok(Err(why))`
/// for an entry a damaged file could hold but no run writes: neither infeasible nor evaluated,
/// or meeting the objectives with no operating point to report (the outputs read one).
fn rebuild(plan: &Plan, candidate: &Candidate, entry: &Entry) -> Result<Result<Evaluation, String>, Error> {
    let outcome = match (&entry.infeasible, &entry.evaluated) {
        (Some(reason), None) => Outcome::Infeasible(reason.clone()),
        (None, Some(searched)) => {
            let evaluated = Evaluated { scenario: candidate.scenario(plan, 1)?, searched: searched.clone() };
            if evaluated.meets && evaluated.operating_point().is_none() {
                return Ok(Err(format!("candidate {} meets the objectives but records no operating point", entry.index)));
            }
            Outcome::Evaluated(Box::new(evaluated))
        }
        _ => return Ok(Err(format!("candidate {} is neither infeasible nor evaluated", entry.index))),
    };
    Ok(Ok(Evaluation { candidate: candidate.clone(), outcome }))
}

/// `shard.json`'s text for a shard's evaluations.
pub fn shard_json(plan_text: &str, plan: &Plan, shard: Shard, candidates_total: usize, evaluations: &[Evaluation]) -> String {
    let entries = evaluations.iter().map(entry).collect();
    let file = ShardFile { plan_path: plan.path.clone(), plan_text: plan_text.to_string(), shard, candidates_total, entries };
    serde_json::to_string_pretty(&file).expect("plain JSON") + "\n"
}

/// The log a run keeps in its output directory while it runs, one line per finished candidate,
/// and removes once its outputs are written; `--resume` reads what an interrupted run left.
pub const PROGRESS_FILE: &str = ".plan-progress.jsonl";

/// The log's first line: which plan the entries belong to.
pub fn progress_header(plan_text: &str) -> String {
    serde_json::json!({ "plan_text": plan_text }).to_string() + "\n"
}

/// One finished candidate's log line.
pub fn progress_line(evaluation: &Evaluation) -> String {
    serde_json::to_string(&entry(evaluation)).expect("plain JSON") + "\n"
}

/// The evaluations an interrupted run of the same plan logged in `path`. A last line cut short
/// by the interruption is dropped (that candidate runs again); a log of another plan is refused.
pub fn read_progress(path: &Path, plan_text: &str, plan: &Plan, candidates: &[Candidate]) -> Result<Vec<Evaluation>, Error> {
    let bad = |reason: String| Error::Usage { flag: "--resume", value: path.display().to_string(), reason };
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(bad(format!("cannot read: {e}"))),
    };
    let mut lines = text.lines();
    let header: serde_json::Value = lines.next().and_then(|l| serde_json::from_str(l).ok()).unwrap_or_default();
    if header["plan_text"].as_str() != Some(plan_text) {
        return Err(bad("was written for another plan (or another version of this one); remove it to start again".into()));
    }
    let complete = text.ends_with('\n');
    let lines: Vec<&str> = lines.collect();
    let mut done = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        // Each resume starts its lines after a newline of its own, which may leave a blank one.
        if line.trim().is_empty() {
            continue;
        }
        let last_cut_short = i + 1 == lines.len() && !complete;
        match serde_json::from_str::<Entry>(line) {
            Ok(entry) => {
                let candidate = candidates.get(entry.index).ok_or_else(|| bad(format!("candidate {} is not in the plan", entry.index)))?;
                done.push(rebuild(plan, candidate, &entry)?.map_err(|why| bad(format!("line {}: {why}", i + 2)))?);
            }
            Err(_) if last_cut_short => {}
            Err(e) => return Err(bad(format!("line {}: {e}", i + 2))),
        }
    }
    done.sort_by_key(|e| e.candidate.index);
    done.dedup_by_key(|e| e.candidate.index);
    Ok(done)
}

/// Reads every shard directory and rebuilds the plan and all its evaluations, in candidate
/// order. Refuses shards of different plans or shard counts, a missing or repeated shard, and a
/// candidate missing or twice.
pub fn merge(dirs: &[PathBuf]) -> Result<(Plan, Vec<Evaluation>), Error> {
    let bad = |path: &Path, reason: String| Error::Usage { flag: "plan merge", value: path.display().to_string(), reason };
    let mut files = Vec::new();
    for dir in dirs {
        let path = dir.join(FILE);
        let text = std::fs::read_to_string(&path).map_err(|e| bad(&path, format!("cannot read: {e}")))?;
        let file: ShardFile = serde_json::from_str(&text).map_err(|e| bad(&path, format!("not a shard file: {e}")))?;
        files.push((path, file));
    }
    let Some((first_path, first)) = files.first() else {
        return Err(Error::Usage { flag: "plan merge", value: String::new(), reason: "give the shard directories".into() });
    };
    // Every shard must be given, one per directory, so N beyond the directories' count means one
    // is missing: found before anything is sized by N (N = 2³² − 1 once allocated 4 GB).
    for (path, file) in &files {
        let Shard { k, n } = file.shard;
        if k == 0 || k > n {
            return Err(bad(path, format!("records shard {k}/{n}: need 1 ≤ K ≤ N")));
        }
    }
    if first.shard.n as usize > files.len() {
        let given: std::collections::BTreeSet<u32> = files.iter().map(|(_, f)| f.shard.k).collect();
        let k = (1..).find(|k| !given.contains(k)).expect("fewer shards given than 1..=N");
        return Err(bad(first_path, format!("shard {k}/{} is missing", first.shard.n)));
    }
    let plan = Plan::from_toml_str(&first.plan_text, &first.plan_path)?;
    let candidates = plan.space.candidates();
    if candidates.len() != first.candidates_total {
        return Err(bad(first_path, format!("records {} candidates, its plan has {}", first.candidates_total, candidates.len())));
    }
    let mut seen_shards = vec![false; first.shard.n as usize];
    let mut slots: Vec<Option<Evaluation>> = vec![None; candidates.len()];
    for (path, file) in &files {
        if file.plan_text != first.plan_text || file.plan_path != first.plan_path || file.shard.n != first.shard.n {
            return Err(bad(path, format!("is a shard of another plan or shard count than {}", first_path.display())));
        }
        let seen = &mut seen_shards[(file.shard.k - 1) as usize];
        if std::mem::replace(seen, true) {
            return Err(bad(path, format!("shard {}/{} is given twice", file.shard.k, file.shard.n)));
        }
        for entry in &file.entries {
            let candidate = candidates.get(entry.index).ok_or_else(|| bad(path, format!("candidate {} is not in the plan", entry.index)))?;
            let evaluation = rebuild(&plan, candidate, entry)?.map_err(|why| bad(path, why))?;
            if slots[entry.index].replace(evaluation).is_some() {
                return Err(bad(path, format!("candidate {} appears twice", entry.index)));
            }
        }
    }
    if let Some(k) = seen_shards.iter().position(|seen| !seen) {
        return Err(bad(first_path, format!("shard {}/{} is missing", k + 1, first.shard.n)));
    }
    let evaluations = slots
        .into_iter()
        .enumerate()
        .map(|(i, e)| e.ok_or_else(|| bad(first_path, format!("candidate {i} is in no shard"))))
        .collect::<Result<Vec<_>, _>>()?;
    Ok((plan, evaluations))
}

#[cfg(test)]
mod tests {
    use super::Shard;

    #[test]
    fn shard_specs_parse_and_refuse_what_cannot_be() {
        assert_eq!(Shard::parse("2/8"), Ok(Shard { k: 2, n: 8 }));
        for bad in ["0/8", "9/8", "1/0", "2", "a/b"] {
            assert!(Shard::parse(bad).is_err(), "{bad}");
        }
    }
}
