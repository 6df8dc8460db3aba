//! LLMServingSim's profiler bundles (`profiler/perf/<hardware>/<org>/<model>/<variant>/`,
//! profiler 1.0.0; the older per-layer format is [`super::llmservingsim`]'s). vLLM ran one
//! layer of the model (`hf_overrides.num_hidden_layers: 1`) with dummy weights, eager, on one
//! GPU, and emulated TP N there by dividing the heads, KV heads, intermediate size and
//! vocabulary by N: so `tp<N>/` times the per-GPU shapes of TP N. Each row is the CUDA time of
//! one vLLM module's kernels (vLLM's layerwise profile), the mean over `measurement_iterations`
//! forwards after a warm-up, in **microseconds**. `meta.yaml` beside the `tp<N>/` folders names
//! the vLLM version, the GPU, the model and the dtypes ([`super::llmservingsim_meta`]).
//!
//! - `dense.csv` (`layer, tokens, time_us`; one request of `tokens` new tokens): `qkv_proj`
//!   (fused QKV), `o_proj`, `gate_up_proj` (fused gate and up), `down_proj` → GEMM rows,
//!   m = `tokens`, (n, k) of the model at TP N, exactly the shapes servesim's cost model asks
//!   for. Embedding, RMSNorms, q/k norms, RoPE and SiLU·mul are counted and left out: servesim
//!   prices elementwise work from the roofline.
//! - `per_sequence.csv` (`layer, sequences, time_us`; that many one-token requests): `lm_head`
//!   (vLLM's `LogitsProcessor`: the LM head's GEMM) → GEMM rows, m = `sequences`. The sampler
//!   (greedy, on the GPU) is counted and left out, with its times in a note: servesim's
//!   `sampling` rows are a host sampler's cost per logit, linear in rows, and vLLM's has a floor
//!   (10–25 µs at one sequence on these GPUs) that such a row would spread over every row.
//! - `attention.csv` (`prefill_chunk, kv_prefill, n_decode, kv_decode, time_us`; one chunk of
//!   `prefill_chunk` new tokens over `kv_prefill` cached ones, plus `n_decode` decodes over
//!   `kv_decode` cached tokens each, in one call of vLLM's attention layer, its KV-cache write
//!   included) → `prefill` (no cached tokens), `mixed` (a chunk over a cached prefix) and
//!   `decode` rows. A batch holding both a chunk and decodes is left out (servesim prices the
//!   two apart) and kept to check that: the sum of the two parts' prices against the measured
//!   time, in a note and the provenance's `agreement`.
//! - `moe.csv` (`tokens, activated_experts, time_us`; `tokens` tokens routed, `top_k` each, over
//!   `activated_experts` experts in turn, at TP 1): the whole MoE block (router, top-k, the fused
//!   experts) → the grouped expert GEMMs servesim prices routed experts with: `a` experts of
//!   `m = tokens · top_k / a` rows each, gate+up `n = a · 2f` and down `n = a · h`. The block's
//!   time is split 2 : 1 between them, their share of its FLOPs and weights, so both run at one
//!   utilisation; the router and SiLU ride along in it (servesim prices its router apart, from
//!   the roofline: a few microseconds counted twice).
//! - `skew.csv`, `skew_fit.csv`: left out (decode batches with two context lengths, and
//!   LLMServingSim's correction fitted to them; servesim's uneven decode rows spread contexts
//!   evenly).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use super::ImportError;
use super::aiconfigurator;
use super::build::{Accumulator, DIM_MAX, Imported, Source, assemble, dim, median, percentile};
use super::gpu::{gpu_preset, named};
use super::llmservingsim_meta::{BundleModel, Meta, model_of};
use super::table::Table;
use crate::calibrate::backend::{AttentionPhase, AttentionShape, GemmShape};
use crate::calibrate::grid::{GemmOp, Shape, model_gemm_nk, model_heads, moe_gemm_nk};
use crate::calibrate::profile::Profile;
use crate::calibrate::profile::ProfileIndex;
use crate::scenario::{Dtype, GpuSpec, ModelSpec};

pub const META: &str = "meta.yaml";
pub const DENSE: &str = "dense.csv";
pub const PER_SEQUENCE: &str = "per_sequence.csv";
pub const ATTENTION: &str = "attention.csv";
pub const MOE: &str = "moe.csv";

const KERNEL_GEMM: &str = "torch.nn.functional.linear (vLLM UnquantizedLinearMethod, eager)";
const KERNEL_ATTENTION: &str = "vLLM Attention layer (backend not recorded; its KV-cache write included)";
const KERNEL_MOE: &str = "vLLM FusedMoE block with its router (kernel not recorded)";

/// `dense.csv`'s GEMM ops, as vLLM names the modules.
const GEMMS: [(&str, GemmOp); 4] =
    [("qkv_proj", GemmOp::Qkv), ("o_proj", GemmOp::O), ("gate_up_proj", GemmOp::GateUp), ("down_proj", GemmOp::Down)];

/// Why one of `dense.csv`'s other ops is left out.
fn other_op(name: &str) -> String {
    let what = match name {
        "embedding" => "embedding lookup",
        "layernorm" => "RMSNorm with the residual add, the mean of a layer's two",
        "final_layernorm" => "the final RMSNorm",
        "qk_norm" => "per-head RMSNorm of q and k",
        "rotary_emb" => "rotary embedding",
        "act_fn" => "SiLU and multiply",
        _ => return format!("LLMServingSim `{name}` (not an op servesim's profiles hold)"),
    };
    format!("LLMServingSim `{name}` ({what}; servesim prices elementwise work from the roofline)")
}

/// Whether `path` belongs to a profile bundle: its `meta.yaml`, or a file of a `tp<N>/` folder
/// beside one.
pub fn in_bundle(path: &Path) -> bool {
    if path.file_name().is_some_and(|n| n == META) {
        return true;
    }
    tp_of(path).is_some() && path.parent().and_then(Path::parent).is_some_and(|b| b.join(META).is_file())
}

/// The TP degree of a file in a `tp<N>/` folder.
fn tp_of(file: &Path) -> Option<u32> {
    let folder = file.parent()?.file_name()?.to_str()?;
    folder.strip_prefix("tp")?.parse().ok().filter(|tp| (1..=1024).contains(tp))
}

/// One bundle: its `meta.yaml`, the model it timed, and its data files with their TP degree.
struct Bundle {
    meta: Meta,
    model: BundleModel,
    files: Vec<(u32, PathBuf)>,
}

/// Imports the bundle files among `files` (from [`super::build::files_under`]; `others` are the
/// other CSVs found, named in notes). `gpu` names the GPU where `meta.yaml`'s device is no
/// preset; `model` the model where neither the checkout nor a preset gives it; `allreduce` an
/// aiconfigurator `custom_allreduce_perf.parquet` of the same GPU and vLLM release, whose rows
/// price the TP all-reduces the profiler, on one GPU, could not time.
pub fn import(
    files: &[PathBuf],
    others: &[PathBuf],
    gpu: Option<&str>,
    model: Option<&str>,
    allreduce: Option<&Path>,
) -> Result<Imported, ImportError> {
    let bundles = bundles(files, model)?;
    let spec = gpu_of(&bundles, gpu)?;
    let mut acc = Accumulator::default();
    let allreduce_method = match allreduce {
        Some(file) => Some(read_allreduce(file, &bundles[0].meta, &mut acc)?),
        None => None,
    };
    for other in others {
        let why = match other.file_name().and_then(|n| n.to_str()) {
            Some("skew.csv") => "decode batches of two context lengths (LLMServingSim's skew correction); servesim's uneven \
                                 decode rows spread contexts evenly",
            Some("skew_fit.csv") => "LLMServingSim's correction fitted to skew.csv, not a measurement",
            _ => "not a table this format reads",
        };
        acc.notes.push(format!("{}: left out, {why}", other.display()));
    }
    let mut checks = Checks::default();
    let mut read = Vec::new();
    for bundle in &bundles {
        for (tp, file) in &bundle.files {
            read_file(bundle, *tp, file, &mut acc, &mut checks)?;
            read.push(file.clone());
        }
        let given: Vec<u32> = bundle.files.iter().map(|(tp, _)| *tp).collect();
        for tp in bundle.meta.tp_degrees.iter().filter(|tp| !given.contains(tp)) {
            acc.notes.push(format!("{}: lists TP {tp}, whose tp{tp}/ files were not given", bundle.meta.file.display()));
        }
    }
    checks.sampler_note(&mut acc);
    let metas: Vec<&Meta> = bundles.iter().map(|b| &b.meta).collect();
    read.extend(metas.iter().map(|m| m.file.clone()));
    read.extend(allreduce.map(Path::to_path_buf));
    let method = match allreduce_method {
        Some(line) => format!("{}; {line}", method(&bundles)),
        None => method(&bundles),
    };
    let source = Source {
        format: "llmservingsim (profiler bundle)",
        device: format!("{} (meta.yaml `gpu`)", metas[0].gpu),
        gpu: spec,
        engine: "vllm".into(),
        engine_version: distinct(metas.iter().map(|m| m.vllm_version.clone())),
        files: read,
        files_root: None,
        agreement: Vec::new(),
        compare_bundled: true,
        method,
    };
    let mut imported = assemble(acc, source)?;
    if let Some(line) = checks.mixed_agreement(&imported.profile) {
        imported.notes.push(format!("checked: {line}"));
        if let Some(source) = imported.profile.provenance.source.as_mut() {
            source.agreement.push(line);
        }
    }
    Ok(imported)
}

/// The bundles `files` belong to, in order, each with its model.
fn bundles(files: &[PathBuf], model: Option<&str>) -> Result<Vec<Bundle>, ImportError> {
    let mut by_root: BTreeMap<PathBuf, Vec<(u32, PathBuf)>> = BTreeMap::new();
    for file in files {
        if file.file_name().is_some_and(|n| n == META) {
            by_root.entry(file.parent().map(Path::to_path_buf).unwrap_or_default()).or_default();
            continue;
        }
        let tp = tp_of(file).ok_or_else(|| ImportError::File {
            file: file.clone(),
            message: "not in a tp<N>/ folder of a profile bundle (LLMServingSim's profiler/perf/…/<variant>/tp<N>/)".into(),
        })?;
        let root = file.parent().and_then(Path::parent).map(Path::to_path_buf).unwrap_or_default();
        by_root.entry(root).or_default().push((tp, file.clone()));
    }
    let mut out = Vec::new();
    for (root, files) in by_root {
        let meta_file = root.join(META);
        if !meta_file.is_file() {
            let file = files.first().map_or(root.clone(), |f| f.1.clone());
            return Err(ImportError::File {
                file,
                message: format!("no {META} beside its tp<N>/ folder: the model, GPU and vLLM version are read from it"),
            });
        }
        if files.is_empty() {
            return Err(ImportError::File { file: meta_file, message: "no tp<N>/ files beside it".into() });
        }
        let meta = Meta::read(&meta_file)?;
        let model = model_of(&meta, model)?;
        out.push(Bundle { meta, model, files });
    }
    if model.is_some()
        && let Some(first) = out.first()
        && let Some(other) = out.iter().find(|b| b.meta.model_id != first.meta.model_id)
    {
        return Err(ImportError::File {
            file: other.meta.file.clone(),
            message: format!(
                "times {}, and {} times {}: --model names one model",
                other.meta.model_id,
                first.meta.file.display(),
                first.meta.model_id
            ),
        });
    }
    Ok(out)
}

/// The TP all-reduce rows of aiconfigurator's `file` into `acc`, once its GPU and vLLM release
/// are checked to be the bundle's (`meta`): how it was timed, for the provenance's method.
fn read_allreduce(file: &Path, meta: &Meta, acc: &mut Accumulator) -> Result<String, ImportError> {
    let (device, engine, version) = aiconfigurator::read_allreduce_file(file, acc)?;
    let mismatch = |what: &str, theirs: &str, ours: &str| ImportError::File {
        file: file.to_path_buf(),
        message: format!("times the all-reduce on {what} {theirs}, and {} was profiled on {ours}: one GPU and vLLM release per profile", meta.file.display()),
    };
    if device != meta.gpu {
        return Err(mismatch("the GPU", &device, &meta.gpu));
    }
    if engine != "vllm" || version != meta.vllm_version {
        return Err(mismatch("the engine", &format!("{engine} {version}"), &format!("vllm {}", meta.vllm_version)));
    }
    acc.notes.push(format!(
        "{}: vLLM {version}'s TP all-reduce on {device}, timed by aiconfigurator (CUDA-graph replays; the eager rows left out)",
        file.display()
    ));
    Ok(format!(
        "the TP all-reduce from aiconfigurator's custom_allreduce_perf of vLLM {version} on {device} ({}), the mean over CUDA-graph replays after warm-up",
        file.display()
    ))
}

/// The GPU every bundle was timed on: `--gpu`, else the preset its device name contains.
fn gpu_of(bundles: &[Bundle], gpu: Option<&str>) -> Result<GpuSpec, ImportError> {
    let first = &bundles[0].meta;
    if let Some(other) = bundles.iter().map(|b| &b.meta).find(|m| m.gpu != first.gpu) {
        return Err(ImportError::File {
            file: other.file.clone(),
            message: format!(
                "timed on {}, and {} on {}: import one GPU's bundles at a time",
                other.gpu,
                first.file.display(),
                first.gpu
            ),
        });
    }
    match gpu {
        Some(value) => named(value, &first.file),
        None => gpu_preset(&first.gpu).ok_or_else(|| ImportError::File {
            file: first.file.clone(),
            message: format!(
                "timed on {}, which is no servesim GPU preset: give --gpu FILE.toml with its [hardware] figures \
                 (name, peak_tflops_16bit, memory_bandwidth_gbps, …, as a scenario's), or --gpu PRESET",
                first.gpu
            ),
        }),
    }
}

fn distinct(values: impl Iterator<Item = String>) -> String {
    let mut seen: Vec<String> = Vec::new();
    for v in values {
        if !seen.contains(&v) {
            seen.push(v);
        }
    }
    seen.join("; ")
}

/// How the rows were timed, with each bundle's model, run settings and date.
fn method(bundles: &[Bundle]) -> String {
    let runs: Vec<String> = bundles
        .iter()
        .map(|b| {
            let m = &b.meta;
            let tps: BTreeSet<u32> = b.files.iter().map(|(tp, _)| *tp).collect();
            let tps: Vec<String> = tps.iter().map(u32::to_string).collect();
            format!(
                "{} {} at TP {} (dimensions: {}), profiled {}, CUDA {}, enforce_eager {}, load_format {}, {} hidden layer(s)",
                m.model_id,
                m.dtype.name(),
                tps.join("/"),
                b.model.from,
                m.profiled_at.as_deref().unwrap_or("(not recorded)"),
                m.cuda_version.as_deref().unwrap_or("(not recorded)"),
                m.enforce_eager.as_deref().unwrap_or("(not recorded)"),
                m.load_format.as_deref().unwrap_or("(not recorded)"),
                m.layers.as_deref().unwrap_or("(not recorded)")
            )
        })
        .collect();
    format!(
        "vLLM's layerwise profile: each module's summed CUDA kernel time per call, the mean of {} forward(s) after one \
         warm-up, one GPU, TP emulated by sharded sizes; {}",
        distinct(bundles.iter().map(|b| b.meta.iterations.to_string())),
        runs.join("; ")
    )
}

/// What the rows left out still tell: the sampler's times, and the batches mixing a chunk with
/// decodes, to check servesim's pricing of them.
#[derive(Default)]
struct Checks {
    /// (sequences, µs) of the sampler rows.
    sampler_us: Vec<(u64, f64)>,
    /// (the chunk's shape, the decodes' shape, measured ns).
    mixed: Vec<(AttentionShape, AttentionShape, f64)>,
}

impl Checks {
    fn sampler_note(&self, acc: &mut Accumulator) {
        let (Some(lo), Some(hi)) = (self.sampler_us.iter().min_by_key(|p| p.0), self.sampler_us.iter().max_by_key(|p| p.0)) else {
            return;
        };
        acc.notes.push(format!(
            "vLLM's sampler (greedy, on the GPU): {:.1} µs at {} sequence(s) to {:.1} µs at {}; not in the profile, whose \
             sampling rows are a host sampler's cost per logit",
            lo.1, lo.0, hi.1, hi.0
        ));
    }

    /// The batches mixing a chunk and decodes, priced as servesim prices them (the chunk's
    /// prefill or mixed row plus the decodes' row) against their measured time.
    fn mixed_agreement(&self, profile: &Profile) -> Option<String> {
        let index = ProfileIndex::new(profile);
        let signed: Vec<f64> = self
            .mixed
            .iter()
            .filter_map(|(chunk, decodes, ns)| {
                let priced = index.predict_attention_ns(chunk)? + index.predict_attention_ns(decodes)?;
                Some((priced - ns) / ns)
            })
            .collect();
        if signed.is_empty() {
            return None;
        }
        let sizes: Vec<f64> = signed.iter().map(|d| d.abs()).collect();
        Some(format!(
            "a chunk and decodes in one attention call, priced as the sum of the two parts' rows, against its measured time \
             on {} batches: median {:.1}%, p90 {:.1}% (signed median {:+.1}%)",
            signed.len(),
            median(&sizes) * 100.0,
            percentile(&sizes, 0.9) * 100.0,
            median(&signed) * 100.0
        ))
    }
}

/// Microseconds to the accumulator's milliseconds.
fn ms(us: f64) -> f64 {
    us / 1000.0
}

fn read_file(bundle: &Bundle, tp: u32, file: &Path, acc: &mut Accumulator, checks: &mut Checks) -> Result<(), ImportError> {
    let model = &bundle.model.spec;
    for (what, whole) in [("attention heads", model.num_heads), ("KV heads", model.num_kv_heads)] {
        if !whole.is_multiple_of(tp) {
            return Err(ImportError::File {
                file: file.to_path_buf(),
                message: format!("{}'s {whole} {what} do not split over the TP {tp} of its folder", model.name),
            });
        }
    }
    let table = Table::read_csv(file)?;
    let repeats = bundle.meta.iterations;
    let dtype = bundle.meta.dtype;
    match file.file_name().and_then(|n| n.to_str()) {
        Some(DENSE) => read_dense(&table, model, tp, dtype, repeats, acc),
        Some(PER_SEQUENCE) => read_per_sequence(&table, model, tp, dtype, repeats, acc, checks),
        Some(ATTENTION) => read_attention(&table, model, tp, dtype, repeats, acc, checks),
        Some(MOE) if tp != 1 => {
            acc.notes.push(format!("{}: left out, the profiler times the MoE block at TP 1 only", file.display()));
            Ok(())
        }
        Some(MOE) => read_moe(&table, model, dtype, repeats, acc),
        _ => Ok(()),
    }
}

fn read_dense(table: &Table, model: &ModelSpec, tp: u32, dtype: Dtype, repeats: u32, acc: &mut Accumulator) -> Result<(), ImportError> {
    let [layer, tokens, time] = table.columns(["layer", "tokens", "time_us"])?;
    let shapes = model_gemm_nk(model, tp);
    for row in table.rows() {
        let name = row.text(layer)?;
        let m = dim(row.count(tokens, DIM_MAX)?);
        let us = row.positive(time)?;
        let Some(&(_, op)) = GEMMS.iter().find(|(n, _)| *n == name) else {
            acc.skip(other_op(name));
            continue;
        };
        let &(_, n, k) = shapes.iter().find(|(o, _, _)| *o == op).expect("every layer GEMM has a shape");
        if n == 0 || k == 0 {
            return Err(row.invalid(layer, &format!("{} has no dense MLP for it", model.name)));
        }
        acc.add(Shape::Gemm(GemmShape { m, n, k, dtype }), ms(us), KERNEL_GEMM, repeats);
    }
    Ok(())
}

fn read_per_sequence(
    table: &Table,
    model: &ModelSpec,
    tp: u32,
    dtype: Dtype,
    repeats: u32,
    acc: &mut Accumulator,
    checks: &mut Checks,
) -> Result<(), ImportError> {
    let [layer, sequences, time] = table.columns(["layer", "sequences", "time_us"])?;
    let &(_, n, k) = model_gemm_nk(model, tp).iter().find(|(op, _, _)| *op == GemmOp::LmHead).expect("an LM head");
    for row in table.rows() {
        let name = row.text(layer)?;
        let seqs = row.count(sequences, DIM_MAX)?;
        let us = row.positive(time)?;
        match name {
            "lm_head" => acc.add(Shape::Gemm(GemmShape { m: dim(seqs), n, k, dtype }), ms(us), KERNEL_GEMM, repeats),
            "sampler" => {
                checks.sampler_us.push((seqs, us));
                acc.skip("LLMServingSim `sampler` (vLLM's GPU sampler; see the note on its times)".into());
            }
            other => acc.skip(format!("LLMServingSim `{other}` (not an op servesim's profiles hold)")),
        }
    }
    Ok(())
}

fn read_attention(
    table: &Table,
    model: &ModelSpec,
    tp: u32,
    dtype: Dtype,
    repeats: u32,
    acc: &mut Accumulator,
    checks: &mut Checks,
) -> Result<(), ImportError> {
    let [chunk, kv_prefill, n_decode, kv_decode, time] =
        table.columns(["prefill_chunk", "kv_prefill", "n_decode", "kv_decode", "time_us"])?;
    let heads = model_heads(model, tp);
    let shape = |phase, batch: u64, query_len: u64, context_len: u64| AttentionShape {
        phase,
        batch: dim(batch),
        query_len: dim(query_len),
        context_len: dim(context_len),
        num_heads: heads.num_heads,
        num_kv_heads: heads.num_kv_heads,
        head_dim: heads.head_dim,
        uneven: false,
        dtype,
    };
    for row in table.rows() {
        let (pc, kp) = (row.whole(chunk, DIM_MAX)?, row.whole(kv_prefill, DIM_MAX)?);
        let (nd, kd) = (row.whole(n_decode, DIM_MAX)?, row.whole(kv_decode, DIM_MAX)?);
        let us = row.positive(time)?;
        if pc == 0 && nd == 0 {
            return Err(row.invalid(n_decode, "an empty batch: no prefill chunk and no decodes"));
        }
        if pc == 0 && kp > 0 {
            return Err(row.invalid(kv_prefill, "cached tokens for a prefill chunk of 0 tokens"));
        }
        let phase = if kp == 0 { AttentionPhase::Prefill } else { AttentionPhase::Mixed };
        let prefill = shape(phase, 1, pc, kp);
        let decodes = shape(AttentionPhase::Decode, nd, 1, kd);
        if nd > 0 && kd == 0 {
            // The profiler skips these (a 1-token prefill in disguise); a row of them is not
            // a decode servesim would price.
            acc.skip("attention with decodes over no cached token".into());
        } else if pc > 0 && nd > 0 {
            checks.mixed.push((prefill, decodes, us * 1000.0));
            acc.skip("attention over a prefill chunk and decodes in one call (servesim prices the two apart; checked below)".into());
        } else if pc > 0 {
            acc.add(Shape::Attention(prefill), ms(us), KERNEL_ATTENTION, repeats);
        } else {
            acc.add(Shape::Attention(decodes), ms(us), KERNEL_ATTENTION, repeats);
        }
    }
    Ok(())
}

fn read_moe(table: &Table, model: &ModelSpec, dtype: Dtype, repeats: u32, acc: &mut Accumulator) -> Result<(), ImportError> {
    let [tokens, activated, time] = table.columns(["tokens", "activated_experts", "time_us"])?;
    let (Some(moe), Some([_, gate_up, down])) = (model.moe, moe_gemm_nk(model, 1)) else {
        return Err(ImportError::File { file: table.file.clone(), message: format!("{} has no routed experts", model.name) });
    };
    let (experts, top_k) = (u64::from(moe.num_experts), u64::from(moe.experts_per_token));
    for row in table.rows() {
        let t = row.count(tokens, DIM_MAX)?;
        let a = row.count(activated, DIM_MAX)?;
        let us = row.positive(time)?;
        if a < top_k || a > experts.min(t * top_k) {
            return Err(row.invalid(activated, &format!("outside {top_k} (top-k) … min({experts} experts, tokens × top-k)")));
        }
        // The profiler routes token i to experts (i·k + j) mod a: every expert gets t·k/a rows
        // when that divides, as it does on its power-of-two grid.
        if !(t * top_k).is_multiple_of(a) {
            acc.skip("MoE rows whose routed tokens do not split evenly over the experts".into());
            continue;
        }
        let m = dim(t * top_k / a);
        // `a` experts side by side, as one GEMM (see `cost::calibrated`'s grouped experts).
        let wide = |n: u32| {
            let n = a * u64::from(n);
            if n <= DIM_MAX { Ok(dim(n)) } else { Err(row.invalid(activated, "experts too wide for a shape")) }
        };
        let gate_up_shape = GemmShape { m, n: wide(gate_up.0)?, k: gate_up.1, dtype };
        let down_shape = GemmShape { m, n: wide(down.0)?, k: down.1, dtype };
        // Gate+up does twice down's FLOPs and reads twice its weights.
        acc.add(Shape::Gemm(gate_up_shape), ms(us) * 2.0 / 3.0, KERNEL_MOE, repeats);
        acc.add(Shape::Gemm(down_shape), ms(us) / 3.0, KERNEL_MOE, repeats);
    }
    Ok(())
}
