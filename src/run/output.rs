//! The files `simulate --out DIR` writes: `summary.json`, `requests.csv`, `timeline.csv` and
//! `itl.csv`.
//!
//! `itl.csv` (`point,num_prompts,itl_ms,count`) holds each sweep point's inter-token latencies, the
//! samples vLLM pools into its ITL statistics, as sorted `(value, count)` runs: one row per
//! distinct gap, ascending, with how many gaps had exactly that value. It is what `servesim
//! report` draws ITL distributions from without one row per generated token.
//!
//! A sweep writes one file of each kind; every row carries its sweep point: `point`, its 1-based
//! position in the sweep (and in `summary.json`'s `results`), then its `num_prompts`. The
//! position is the key, since a load sweep runs the same `num_prompts` at several rates.
//! Times are written from integer nanoseconds with exact decimal digits, so files are
//! byte-identical across runs and machines.

use std::fs;
use std::io::{self, BufWriter, Write};
use std::path::Path;

use serde_json::{Value, json};

use super::csv_line::{CsvLine, push_fixed};
use super::{PointResult, PoolRun};
use crate::Error;
use crate::metrics::format::{ReportOptions, insert_request_arrays, to_json};
use crate::scenario::Scenario;
use crate::metrics::RequestRecord;
use crate::timeline::StepRow;

/// `ns` as seconds with all nine decimals.
pub fn seconds(ns: u64) -> String {
    fixed_text(ns, SECOND_DECIMALS)
}

/// Decimals of a time in seconds, and of one in milliseconds, written from nanoseconds.
const SECOND_DECIMALS: u32 = 9;
const MILLI_DECIMALS: u32 = 6;

fn fixed_text(value: u64, decimals: u32) -> String {
    let mut buf = Vec::new();
    push_fixed(&mut buf, value, decimals);
    String::from_utf8(buf).expect("digits are ASCII")
}

/// `ns` as milliseconds with all six decimals.
pub fn millis(ns: u64) -> String {
    fixed_text(ns, MILLI_DECIMALS)
}

/// Writes all four files into `dir`, creating it. `pools` are the runs of a scenario with
/// `[[cluster.pools]]` (see [`super::pool_runs`]); they are described too, and give each
/// replica's KV capacity.
pub fn write_all(
    dir: &Path,
    scenario: &Scenario,
    points: &[PointResult],
    opts: &ReportOptions,
    cost_source: &str,
    pools: &[PoolRun],
) -> Result<(), Error> {
    let io_err = |path: &Path| {
        let path = path.to_path_buf();
        move |source| Error::Output { path, source }
    };
    fs::create_dir_all(dir).map_err(io_err(dir))?;
    let path = dir.join("summary.json");
    let mut summary = summary_json(scenario, points, opts, cost_source);
    if !scenario.pools.is_empty() {
        describe_pools(&mut summary, points, pools);
    }
    let text = serde_json::to_string_pretty(&summary).expect("JSON of plain values");
    fs::write(&path, text + "\n").map_err(io_err(&path))?;
    let path = dir.join("requests.csv");
    write_file(&path, |w| write_requests_csv(w, points)).map_err(io_err(&path))?;
    let path = dir.join("timeline.csv");
    let kv_blocks_per_replica: Vec<u32> = if scenario.pools.is_empty() {
        vec![scenario.engine.num_gpu_blocks; scenario.engine.engines() as usize]
    } else {
        replica_pools(pools).map(|pool| pools[pool].scenario.engine.num_gpu_blocks).collect()
    };
    write_file(&path, |w| write_timeline_csv(w, points, &kv_blocks_per_replica)).map_err(io_err(&path))?;
    let path = dir.join("itl.csv");
    write_file(&path, |w| write_itl_csv(w, points)).map_err(io_err(&path))?;
    Ok(())
}

fn write_file(path: &Path, body: impl FnOnce(&mut BufWriter<fs::File>) -> io::Result<()>) -> io::Result<()> {
    let mut w = BufWriter::new(fs::File::create(path)?);
    body(&mut w)?;
    w.flush()
}

/// vLLM `--save-result` keys per sweep point, plus servesim's own.
pub fn summary_json(scenario: &Scenario, points: &[PointResult], opts: &ReportOptions, cost_source: &str) -> Value {
    let results: Vec<Value> = points
        .iter()
        .map(|p| {
            let mut v = to_json(&p.summary, opts);
            let records = &p.output.records.requests;
            let obj = v.as_object_mut().expect("to_json returns an object");
            obj.insert("backend".into(), json!(scenario.engine.policy.name()));
            obj.insert("model_id".into(), json!(scenario.model.name));
            obj.insert("num_prompts".into(), json!(p.num_prompts));
            obj.insert("request_rate".into(), rate_json(p.request_rate));
            obj.insert("burstiness".into(), json!(scenario.workload.burstiness));
            obj.insert("max_concurrency".into(), json!(scenario.workload.max_concurrency));
            insert_request_arrays(obj, records);
            obj.insert("preemptions".into(), json!(p.output.extras.iter().map(|e| e.preemptions as u64).sum::<u64>()));
            obj.insert("rejected_requests".into(), json!(p.output.rejected));
            obj.insert("engine_steps".into(), json!(p.output.steps));
            if scenario.engine.enable_prefix_caching {
                let prefix = p.output.prefix;
                obj.insert("prefix_cache_hit_rate".into(), json!(prefix.hit_rate()));
                obj.insert("prefix_cache_hit_tokens".into(), json!(prefix.hit_tokens));
                obj.insert("prefix_cache_prompt_tokens".into(), json!(prefix.prompt_tokens));
            }
            if scenario.engine.speculative.is_some() {
                // vLLM's spec_decode counter names.
                let spec = &p.output.spec;
                obj.insert("spec_decode_num_drafts".into(), json!(spec.drafts));
                obj.insert("spec_decode_num_draft_tokens".into(), json!(spec.draft_tokens));
                obj.insert("spec_decode_num_accepted_tokens".into(), json!(spec.accepted_tokens));
                obj.insert("spec_decode_num_accepted_tokens_per_pos".into(), json!(spec.accepted_by_position));
                obj.insert("spec_decode_mean_tokens_per_step".into(), json!(spec.mean_tokens_per_step()));
            }
            v
        })
        .collect();
    let e = &scenario.engine;
    let mut summary = json!({
        "servesim": {
            "version": env!("CARGO_PKG_VERSION"),
            "scenario": scenario.name,
            "seed": scenario.workload.seed,
            "model": scenario.model.name,
            "gpu": scenario.hardware.gpu.name,
            "gpus": scenario.hardware.count,
            "policy": e.policy.name(),
            "tensor_parallel": e.tensor_parallel,
            "replicas": e.replicas,
            "max_num_seqs": e.max_num_seqs,
            "max_num_batched_tokens": e.max_num_batched_tokens,
            "enable_chunked_prefill": e.enable_chunked_prefill,
            "block_size": e.block_size,
            "num_gpu_blocks": e.num_gpu_blocks,
            "cost_model": cost_source,
        },
        "results": results,
    });
    // Only when on, so that a run without caching writes what it always wrote.
    if e.enable_prefix_caching {
        summary["servesim"]["enable_prefix_caching"] = json!(true);
    }
    if let Some(spec) = &e.speculative {
        let rates = match &spec.scheduler.acceptance {
            crate::sched::Acceptance::Drawn { rates, .. } => json!(rates),
            crate::sched::Acceptance::Verified => json!(null),
        };
        summary["servesim"]["speculative"] = json!({
            "method": spec.method.name(),
            "num_speculative_tokens": spec.scheduler.num_speculative_tokens,
            "draft_model": spec.draft.as_ref().map(|d| d.name.clone()),
            "acceptance_rates": rates,
        });
    }
    if e.num_scheduler_steps > 1 {
        summary["servesim"]["num_scheduler_steps"] = json!(e.num_scheduler_steps);
    }
    if let Some(dp) = e.data_parallel {
        summary["servesim"]["data_parallel"] = json!({ "ranks": dp.ranks, "all2all_backend": dp.all2all.name(), "lockstep": dp.lockstep });
    }
    // The release modelled and the engine profile its engine time and defaults came from.
    if let (Some(profile), Some(version)) = (&e.profile, e.version) {
        summary["servesim"]["engine_version"] = json!(version.to_string());
        summary["servesim"]["engine_profile"] = json!(profile.name);
    }
    summary
}

/// Each replica's pool index, in replica order.
fn replica_pools(pools: &[PoolRun]) -> impl Iterator<Item = usize> + '_ {
    pools.iter().enumerate().flat_map(|(i, run)| std::iter::repeat_n(i, run.scenario.engine.replicas as usize))
}

/// A heterogeneous cluster's `summary.json`: `servesim.pools` says each pool (GPU × TP ×
/// replicas, KV blocks, routing weight, cost model), and each result's `pool_requests` how many
/// requests each pool was sent.
fn describe_pools(summary: &mut Value, points: &[PointResult], pools: &[PoolRun]) {
    let described: Vec<Value> = pools
        .iter()
        .map(|run| {
            let e = &run.scenario.engine;
            json!({
                "gpu": run.scenario.hardware.gpu.name,
                "tensor_parallel": e.tensor_parallel,
                "replicas": e.replicas,
                "num_gpu_blocks": e.num_gpu_blocks,
                "weight": run.weight,
                "cost_model": run.cost.label,
            })
        })
        .collect();
    let servesim = summary["servesim"].as_object_mut().expect("servesim is an object");
    // The one-pool keys would describe the first pool only: the whole cluster instead.
    servesim.insert("gpu".into(), json!(super::pools_text(pools)));
    servesim.insert("gpus".into(), json!(pools.iter().map(|run| run.scenario.hardware.count).sum::<u32>()));
    servesim.insert("replicas".into(), json!(pools.iter().map(|run| run.scenario.engine.replicas).sum::<u32>()));
    servesim.remove("tensor_parallel");
    servesim.remove("num_gpu_blocks");
    servesim.insert("router".into(), json!(pools[0].scenario.engine.router.name()));
    servesim.insert("pools".into(), json!(described));
    let pool_of: Vec<usize> = replica_pools(pools).collect();
    for (result, point) in summary["results"].as_array_mut().expect("results is a list").iter_mut().zip(points) {
        let mut sent = vec![0u64; pools.len()];
        for extra in &point.output.extras {
            sent[pool_of[extra.replica as usize]] += 1;
        }
        result["pool_requests"] = json!(sent);
    }
}

/// vLLM writes `inf` for an unbounded rate; JSON has no infinity, so it is a string here.
fn rate_json(rate: f64) -> Value {
    if rate.is_finite() { json!(rate) } else { json!("inf") }
}

/// Which sweep point a row belongs to: the first two columns of every CSV.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PointKey {
    /// 1-based position in the sweep.
    pub point: u32,
    pub num_prompts: u32,
}

impl PointKey {
    /// The keys of a sweep's points, in order.
    pub fn all(points: &[PointResult]) -> impl Iterator<Item = PointKey> + '_ {
        points.iter().zip(1..).map(|(p, point)| PointKey { point, num_prompts: p.num_prompts })
    }
}

fn write_requests_csv(w: &mut impl Write, points: &[PointResult]) -> io::Result<()> {
    let rows = points.iter().zip(PointKey::all(points)).flat_map(|(p, key)| {
        p.output.records.requests.iter().zip(&p.output.extras).enumerate().map(move |(request_id, (record, extra))| RequestRow {
            key,
            request_id,
            record,
            replica: Some(extra.replica),
            preemptions: Some(extra.preemptions),
            error: None,
        })
    });
    write_requests_rows(w, rows)
}

/// One row of `requests.csv`: a simulated request, or one a client measured (`servesim bench`),
/// which knows neither the replica nor the preemptions (those cells are empty) but may know why
/// a request failed.
#[derive(Clone, Copy, Debug)]
pub struct RequestRow<'a> {
    pub key: PointKey,
    pub request_id: usize,
    pub record: &'a RequestRecord,
    pub replica: Option<u32>,
    pub preemptions: Option<u32>,
    pub error: Option<&'a str>,
}

/// `requests.csv` from its rows; the header is the same for simulated and measured runs.
pub fn write_requests_rows<'a>(w: &mut impl Write, rows: impl IntoIterator<Item = RequestRow<'a>>) -> io::Result<()> {
    writeln!(
        w,
        "point,num_prompts,request_id,replica,send_s,first_token_s,end_s,input_tokens,output_tokens,preemptions,success,error"
    )?;
    let mut line = CsvLine::default();
    for row in rows {
        let r = row.record;
        line.uint(row.key.point.into()).uint(row.key.num_prompts.into()).uint(row.request_id as u64);
        line.uint_or_empty(row.replica.map(u64::from)).fixed(r.send_ns, SECOND_DECIMALS);
        match r.first_token_ns {
            Some(ns) => line.fixed(ns, SECOND_DECIMALS),
            None => line.text(""),
        };
        line.fixed(r.end_ns, SECOND_DECIMALS).uint(r.input_tokens.into()).uint(r.output_tokens.into());
        line.uint_or_empty(row.preemptions.map(u64::from)).text(if r.success { "true" } else { "false" });
        line.text(&csv_text(row.error.unwrap_or_default())).finish(w)?;
    }
    line.flush(w)
}

/// A CSV cell holding free text: quoted, with quotes doubled, when it has a comma, quote or
/// line break (RFC 4180).
fn csv_text(text: &str) -> String {
    if text.contains([',', '"', '\n', '\r']) { format!("\"{}\"", text.replace('"', "\"\"")) } else { text.to_string() }
}

/// Writes `requests.csv` rows to `path` (see [`write_requests_rows`]).
pub fn write_requests_file<'a>(path: &Path, rows: impl IntoIterator<Item = RequestRow<'a>>) -> Result<(), Error> {
    write_file(path, |w| write_requests_rows(w, rows)).map_err(|source| Error::Output { path: path.to_path_buf(), source })
}

fn write_timeline_csv(w: &mut impl Write, points: &[PointResult], kv_blocks_per_replica: &[u32]) -> io::Result<()> {
    let rows = points.iter().zip(PointKey::all(points)).flat_map(|(p, key)| p.output.timeline.iter().map(move |s| (key, s)));
    write_timeline_rows_with(w, rows, |replica| kv_blocks_per_replica[replica as usize])
}

/// `timeline.csv` from step rows tagged with their sweep point: the simulator's, or a real
/// engine's step trace (`servesim serve`, `validate --engine`), whose cost columns other than
/// `step_ms` are 0 because a real step is timed only as a whole.
pub fn write_timeline_rows<'a>(
    w: &mut impl Write,
    rows: impl IntoIterator<Item = (PointKey, &'a StepRow)>,
    kv_blocks_total: u32,
) -> io::Result<()> {
    write_timeline_rows_with(w, rows, |_| kv_blocks_total)
}

/// [`write_timeline_rows`] with each replica's KV capacity (pools differ).
fn write_timeline_rows_with<'a>(
    w: &mut impl Write,
    rows: impl IntoIterator<Item = (PointKey, &'a StepRow)>,
    kv_blocks_total: impl Fn(u32) -> u32,
) -> io::Result<()> {
    writeln!(
        w,
        "point,num_prompts,replica,start_s,running,waiting,kv_blocks_used,kv_blocks_total,batch_seqs,prefill_tokens,decode_tokens,\
         step_ms,gemm_ms,attention_ms,elementwise_ms,communication_ms,overhead_ms"
    )?;
    let mut line = CsvLine::default();
    for (key, s) in rows {
        let c = &s.cost;
        line.uint(key.point.into()).uint(key.num_prompts.into()).uint(s.replica.into());
        line.fixed(s.start_ns, SECOND_DECIMALS).uint(s.running.into()).uint(s.waiting.into());
        line.uint(s.kv_blocks_used.into()).uint(kv_blocks_total(s.replica).into()).uint(s.batch_seqs.into());
        line.uint(s.prefill_tokens.into()).uint(s.decode_tokens.into());
        for ns in [c.total_ns, c.gemm_ns, c.attention_ns, c.elementwise_ns, c.communication_ns, c.overhead_ns] {
            line.fixed(ns, MILLI_DECIMALS);
        }
        line.finish(w)?;
    }
    line.flush(w)
}

/// Writes `timeline.csv` rows to `path` (see [`write_timeline_rows`]).
pub fn write_timeline_file<'a>(
    path: &Path,
    rows: impl IntoIterator<Item = (PointKey, &'a StepRow)>,
    kv_blocks_total: u32,
) -> Result<(), Error> {
    write_file(path, |w| write_timeline_rows(w, rows, kv_blocks_total))
        .map_err(|source| Error::Output { path: path.to_path_buf(), source })
}

/// `itl.csv`: per sweep point, the ITL samples as sorted runs of equal values (see the module doc).
fn write_itl_csv(w: &mut impl Write, points: &[PointResult]) -> io::Result<()> {
    writeln!(w, "point,num_prompts,itl_ms,count")?;
    let mut line = CsvLine::default();
    for (p, key) in points.iter().zip(PointKey::all(points)) {
        for (value_ns, count) in p.output.records.itl_ns.sorted().runs() {
            line.uint(key.point.into()).uint(key.num_prompts.into()).fixed(value_ns, MILLI_DECIMALS).uint(count);
            line.finish(w)?;
        }
    }
    line.flush(w)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn free_text_cells_are_quoted_only_when_needed() {
        assert_eq!(csv_text("timeout"), "timeout");
        assert_eq!(csv_text("HTTP 400: bad, \"x\""), "\"HTTP 400: bad, \"\"x\"\"\"");
        assert_eq!(csv_text(""), "");
    }

    #[test]
    fn times_keep_every_digit() {
        assert_eq!(seconds(1_500_000_001), "1.500000001");
        assert_eq!(seconds(0), "0.000000000");
        assert_eq!(millis(7_280_001), "7.280001");
    }
}
