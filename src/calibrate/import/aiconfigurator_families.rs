//! aiconfigurator's tables of whole modules ([`crate::calibrate::families`]): MLA, DeepSeek
//! sparse attention, the fused MoE layer and Gated DeltaNet, from the same GPU folder and engine
//! version as the profile's GEMMs (one source per profile).
//!
//! What the rows mean (the collection's README, section 1b, read from the collector):
//!
//! - `mla/vllm/<v>/mla_{context,generation}_module_perf`: vLLM's whole `DeepseekV2MLAAttention`
//!   forward on DeepSeek-V3's dimensions, `num_heads` per GPU, projections in `gemm_type`, the
//!   latent cache in `kv_cache_dtype`; generation `step` is the sequence's length with the new
//!   token. CUDA graphs. → `mla_context` (x batch, y prompt tokens), `mla_generation` (x batch,
//!   y = step). Rows with fp8 prefill queries (`mla_dtype`, B200's TRTLLM_RAGGED) are left out.
//! - `mla/sglang/<v>/{context,generation}_mla_perf`: SGLang's attention kernel alone; its
//!   generation `step` counts cached tokens, so y = step + 1. → `mla_kernel_*`.
//! - `mla_bmm/<fw>/<v>/mla_bmm_perf`: the absorbed BMMs, x = tokens. → `mla_bmm_pre|post`.
//! - `sparse_attention/<fw>/<v>/dsa_{context,generation}_module_perf`: the whole DSA module
//!   (MLA's and the lightning indexer's). Context rows over a cached prefix (`step` > 0) and
//!   SGLang's `_skip_indexer` rows (GLM-5.2's layers that reuse a top-k) are left out; SGLang's
//!   generation `step` counts cached tokens (y = step + 1), vLLM's the length (y = step).
//! - `moe/<fw>/<v>/moe_perf`: one layer's routed experts (no router GEMM, no shared expert, no
//!   communication), model-global sizes sharded by `moe_tp_size` / `moe_ep_size` by the
//!   collector; `balanced` routing only (the power-law rows are counted and left out: at EP > 1
//!   they are not even an upper bound, README 1b.16). → `moe`, x = tokens.
//! - `linear_attention/<fw>/<v>/gdn_perf`: one row per kernel; a point's time is the sum of its
//!   phase's kernels (convolution and delta rule), each the median of the models that share the
//!   heads. Decode does not depend on the context. → `gdn_context` (x batch, y tokens per
//!   sequence), `gdn_generation` (x batch).
//!
//! Every `latency` is milliseconds, a mean over CUDA-graph replays (DSA's vLLM context rows ran
//! eagerly; the collector puts the bias under 0.5%).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use super::ImportError;
use super::build::{DIM_MAX, median};
use super::source::{collection_path, origin};
use super::table::Table;
use crate::calibrate::families::{Families, FamiliesProvenance, FamilyOp, FamilyRow};

/// One point's timings by kernel (GDN sums its kernels; the others have one per point).
type Points = BTreeMap<(FamilyOp, String, u64, u64), BTreeMap<String, Vec<f64>>>;

#[derive(Default)]
struct Gathered {
    points: Points,
    skipped: BTreeMap<String, u64>,
    kernels: BTreeSet<String>,
    files: Vec<PathBuf>,
}

impl Gathered {
    fn add(&mut self, op: FamilyOp, key: String, x: u64, y: u64, kernel: &str, ms: f64) {
        self.points.entry((op, key, x, y)).or_default().entry(kernel.to_string()).or_default().push(ms);
        self.kernels.insert(kernel.to_string());
    }

    fn skip(&mut self, why: String) {
        *self.skipped.entry(why).or_default() += 1;
    }
}

/// The model's name without its organisation (`deepseek-ai/DeepSeek-V3` → `DeepSeek-V3`).
fn short_model(name: &str) -> &str {
    name.rsplit('/').next().unwrap_or(name)
}

/// The families tables of `engine` at `version` under `gpu_dir`; `None` where it has none.
pub fn import(gpu_dir: &Path, engine: &str, version: &str, gpu_name: &str) -> Result<Option<Families>, ImportError> {
    let at = |kind: &str, file: &str| gpu_dir.join(kind).join(engine).join(version).join(file);
    let mut g = Gathered::default();
    let sglang = engine == "sglang";
    let module_tables: [(&str, &str, FamilyOp, bool); 4] = if sglang {
        [
            ("mla", "context_mla_perf.parquet", FamilyOp::MlaKernelContext, false),
            ("mla", "generation_mla_perf.parquet", FamilyOp::MlaKernelGeneration, true),
            ("sparse_attention", "dsa_context_module_perf.parquet", FamilyOp::DsaContext, false),
            ("sparse_attention", "dsa_generation_module_perf.parquet", FamilyOp::DsaGeneration, true),
        ]
    } else {
        [
            ("mla", "mla_context_module_perf.parquet", FamilyOp::MlaContext, false),
            ("mla", "mla_generation_module_perf.parquet", FamilyOp::MlaGeneration, false),
            ("sparse_attention", "dsa_context_module_perf.parquet", FamilyOp::DsaContext, false),
            ("sparse_attention", "dsa_generation_module_perf.parquet", FamilyOp::DsaGeneration, false),
        ]
    };
    for (kind, file, op, step_is_cached) in module_tables {
        let path = at(kind, file);
        if path.exists() {
            read_module(&Table::read_parquet(&path)?, op, step_is_cached, &mut g)?;
            g.files.push(path);
        }
    }
    let readers: [(&str, &str, fn(&Table, &mut Gathered) -> Result<(), ImportError>); 3] =
        [("mla_bmm", "mla_bmm_perf.parquet", read_bmm), ("moe", "moe_perf.parquet", read_moe), ("linear_attention", "gdn_perf.parquet", read_gdn)];
    for (kind, file, read) in readers {
        let path = at(kind, file);
        if path.exists() {
            read(&Table::read_parquet(&path)?, &mut g)?;
            g.files.push(path);
        }
    }
    if g.points.is_empty() {
        return Ok(None);
    }

    let mut notes: Vec<String> = g.skipped.iter().map(|(why, n)| format!("left out {n} rows: {why}")).collect();
    let mut repeated = 0;
    let rows: Vec<FamilyRow> = std::mem::take(&mut g.points)
        .into_iter()
        .map(|((op, key, x, y), kernels)| {
            // GDN's kernels run one after another; elsewhere each timing is the whole op (two
            // kernels at one point are two backends' timings of it).
            let ms: f64 = if matches!(op, FamilyOp::GdnContext | FamilyOp::GdnGeneration) {
                repeated += usize::from(kernels.values().any(|t| t.len() > 1));
                kernels.values().map(|t| median(t)).sum()
            } else {
                let all: Vec<f64> = kernels.values().flatten().copied().collect();
                repeated += usize::from(all.len() > 1);
                median(&all)
            };
            // Whole nanoseconds, as the profile keeps them.
            FamilyRow { op, key, x, y, median_ns: (ms * 1e6).round().max(1.0) }
        })
        .collect();
    if repeated > 0 {
        notes.push(format!(
            "{repeated} points timed more than once (the same heads from several TP degrees or models) keep the median, of an even count the upper middle one"
        ));
    }
    let data_root = gpu_dir.parent().unwrap_or(gpu_dir);
    let origin = g.files.first().map(|f| origin(f)).unwrap_or_default();
    let files = g
        .files
        .iter()
        .map(|f| match f.strip_prefix(data_root) {
            Ok(rel) => rel.to_string_lossy().replace('\\', "/"),
            Err(_) => collection_path(f).unwrap_or_else(|| f.display().to_string()),
        })
        .collect();
    let families = Families {
        rows,
        provenance: FamiliesProvenance {
            format: "aiconfigurator".into(),
            repository: origin.repository,
            commit: origin.commit,
            license: origin.license,
            gpu: gpu_name.into(),
            engine: engine.into(),
            engine_version: version.into(),
            method: "mean of CUDA-graph replays per op after warm-up (aiconfigurator collector); one GPU, TP and EP \
                     simulated by sharding, no communication"
                .into(),
            files,
            kernels: g.kernels.into_iter().collect(),
            notes,
        },
    };
    let counts = families.counts().into_iter().map(|(op, n)| format!("{op} {n}")).collect::<Vec<_>>().join(", ");
    let mut families = families;
    families.provenance.notes.insert(0, format!("rows: {counts}"));
    Ok(Some(families))
}

fn read_module(table: &Table, op: FamilyOp, step_is_cached: bool, g: &mut Gathered) -> Result<(), ImportError> {
    let [name, kernel, mla_dtype, kv, heads, batch, isl, step, latency] =
        table.columns(["op_name", "kernel_source", "mla_dtype", "kv_cache_dtype", "num_heads", "batch_size", "isl", "step", "latency"])?;
    let model = table.has_column("model").then(|| table.columns(["model"])).transpose()?.map(|[c]| c);
    let gemm = table.has_column("gemm_type").then(|| table.columns(["gemm_type"])).transpose()?.map(|[c]| c);
    let context = matches!(op, FamilyOp::MlaContext | FamilyOp::MlaKernelContext | FamilyOp::DsaContext);
    for row in table.rows() {
        if row.text(name)?.ends_with("_skip_indexer") {
            g.skip("DSA layers that reuse the previous layer's top-k (GLM-5.2's `_skip_indexer`)".into());
            continue;
        }
        if row.text(mla_dtype)? != "bfloat16" {
            g.skip(format!("{} with {} prefill queries", op.name(), row.text(mla_dtype)?));
            continue;
        }
        let step_value = row.whole(step, DIM_MAX * DIM_MAX)?;
        let (x, y) = if context {
            if step_value > 0 {
                g.skip(format!("{} over a cached prefix", op.name()));
                continue;
            }
            (row.count(batch, DIM_MAX)?, row.count(isl, DIM_MAX)?)
        } else {
            (row.count(batch, DIM_MAX)?, if step_is_cached { step_value + 1 } else { step_value })
        };
        let mut key = String::new();
        if let Some(m) = model {
            key.push_str(&format!("model={} ", short_model(row.text(m)?)));
        }
        if let Some(gm) = gemm {
            key.push_str(&format!("gemm={} ", row.text(gm)?));
        }
        key.push_str(&format!("kv={} heads={}", row.text(kv)?, row.count(heads, DIM_MAX)?));
        g.add(op, key, x, y, row.text(kernel)?, row.positive(latency)?);
    }
    Ok(())
}

fn read_bmm(table: &Table, g: &mut Gathered) -> Result<(), ImportError> {
    let [name, kernel, dtype, tokens, heads, latency] =
        table.columns(["op_name", "kernel_source", "bmm_dtype", "num_tokens", "num_heads", "latency"])?;
    for row in table.rows() {
        let op = match row.text(name)? {
            "mla_gen_pre" => FamilyOp::MlaBmmPre,
            "mla_gen_post" => FamilyOp::MlaBmmPost,
            other => {
                g.skip(format!("MLA BMM {other}"));
                continue;
            }
        };
        let key = format!("dtype={} heads={}", row.text(dtype)?, row.count(heads, DIM_MAX)?);
        g.add(op, key, row.count(tokens, DIM_MAX)?, 0, row.text(kernel)?, row.positive(latency)?);
    }
    Ok(())
}

fn read_moe(table: &Table, g: &mut Gathered) -> Result<(), ImportError> {
    let [kernel, dtype, tokens, hidden, inter, topk, experts, tp, ep, distribution, latency] = table.columns([
        "kernel_source",
        "moe_dtype",
        "num_tokens",
        "hidden_size",
        "inter_size",
        "topk",
        "num_experts",
        "moe_tp_size",
        "moe_ep_size",
        "distribution",
        "latency",
    ])?;
    for row in table.rows() {
        let routing = row.text(distribution)?;
        if routing != "balanced" {
            g.skip(format!("MoE rows with {routing} routing (balanced rows kept)"));
            continue;
        }
        let key = format!(
            "dtype={} hidden={} inter={} topk={} experts={} tp={} ep={}",
            row.text(dtype)?,
            row.count(hidden, DIM_MAX)?,
            row.count(inter, DIM_MAX)?,
            row.count(topk, DIM_MAX)?,
            row.count(experts, DIM_MAX)?,
            row.count(tp, DIM_MAX)?,
            row.count(ep, DIM_MAX)?
        );
        g.add(FamilyOp::Moe, key, row.count(tokens, DIM_MAX)?, 0, row.text(kernel)?, row.positive(latency)?);
    }
    Ok(())
}

fn read_gdn(table: &Table, g: &mut Gathered) -> Result<(), ImportError> {
    let [kernel, phase, batch, seq_len, k_heads, k_dim, v_heads, v_dim, latency] = table.columns([
        "kernel_source",
        "phase",
        "batch_size",
        "seq_len",
        "num_k_heads",
        "head_k_dim",
        "num_v_heads",
        "head_v_dim",
        "latency",
    ])?;
    for row in table.rows() {
        let (op, y) = match row.text(phase)? {
            "context" => (FamilyOp::GdnContext, row.count(seq_len, DIM_MAX)?),
            "generation" => (FamilyOp::GdnGeneration, 0),
            other => {
                g.skip(format!("GDN phase {other}"));
                continue;
            }
        };
        let key = format!(
            "k_heads={} k_dim={} v_heads={} v_dim={}",
            row.count(k_heads, DIM_MAX)?,
            row.count(k_dim, DIM_MAX)?,
            row.count(v_heads, DIM_MAX)?,
            row.count(v_dim, DIM_MAX)?
        );
        g.add(op, key, row.count(batch, DIM_MAX)?, y, row.text(kernel)?, row.positive(latency)?);
    }
    // A point needs both of its phase's kernels (the convolution and the delta rule): an
    // A100 SGLang table has convolution rows alone for prefill.
    let before = g.points.len();
    g.points.retain(|(op, ..), kernels| !matches!(op, FamilyOp::GdnContext | FamilyOp::GdnGeneration) || kernels.len() >= 2);
    let dropped = before - g.points.len();
    if dropped > 0 {
        *g.skipped.entry("GDN points without both of their phase's kernels".into()).or_default() += dropped as u64;
    }
    Ok(())
}
