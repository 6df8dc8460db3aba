//! NVIDIA aiconfigurator's per-op tables (`systems/data/<gpu>/…/*.parquet`): GEMMs, prefill and
//! decode attention, and the engine's all-reduce, each timed inside one engine build (vLLM,
//! SGLang or TRT-LLM) on H100, H200, B200 and A100 GPUs.
//!
//! What the rows mean (read from the collector that wrote them; see the collection's README):
//!
//! - Every `latency` is milliseconds: the mean over CUDA-graph replays of one op, after warm-up.
//! - `gemm_perf.parquet`: `y[m,n] = x[m,k] · W[n,k]ᵀ` per GPU (TP sharding already applied),
//!   weights not resident in L2. `gemm_dtype` `bfloat16` is a bf16 GEMM, `fp8` a per-tensor FP8
//!   one; block-scaled and 4-bit paths are not imported. → servesim GEMM rows `(m, n, k, dtype)`.
//! - `context_attention_perf.parquet`: `batch_size` prompts of `isl` tokens, causal, no cached
//!   prefix, per-GPU head counts. → `prefill` rows, `context_len` 0.
//! - `generation_attention_perf.parquet`: `batch_size` sequences, one new token each over `step`
//!   cached tokens. → `decode` rows, `context_len = step`.
//!   Both attention tables: dense rows only (`window_size` 0, beam width 1), bf16 queries; the KV
//!   cache dtype (`bfloat16` or `fp8`) is the row's dtype, as servesim keys attention by it.
//! - `custom_allreduce_perf.parquet`: the engine's TP all-reduce of `message_size` bf16 elements
//!   on `num_gpus` GPUs. vLLM and SGLang rows captured in a CUDA graph are kept (decode steps run
//!   the graph; the eager rows carry ~20 µs of launch time). → all-reduce rows, bytes = 2 ×
//!   elements.
//! - `comm/nccl/<NCCL version>/nccl_perf.parquet` (not per engine; the newest NCCL version is
//!   read): nccl-tests `<op>_perf -d half` in one process, one thread per GPU, all GPUs in one
//!   node; `latency` is nccl-tests' out-of-place time (the mean per iteration). Only its
//!   `alltoall` rows in `half` are imported (the engines' own all-reduce is the table above).
//!   `message_size` is in **elements** of the whole buffer each GPU sends, as nccl-tests sizes
//!   it. → all-to-all rows, bytes = 2 × elements.
//!
//! A shape timed more than once (several kernels for one shape) keeps the median of its times.

use std::path::Path;

use super::ImportError;
use super::build::{Accumulator, DIM_MAX, Imported, Source, assemble, dim, percentile};
use super::gpu::gpu_preset;
use super::table::Table;
use crate::calibrate::backend::{AllReduceShape, AllToAllShape, AttentionPhase, AttentionShape, GemmShape};
use crate::calibrate::grid::Shape;
use crate::scenario::{Dtype, GpuSpec};

/// Engines whose builds the tables were timed in, as folder names.
pub const ENGINES: [&str; 3] = ["vllm", "sglang", "trtllm"];

/// Replays averaged into each `latency` (the collector's default).
const REPLAYS: u32 = 6;

/// Iterations nccl-tests averaged into each `latency`: the fewer of the collector's two
/// settings (`-n 100` or `-n 60`), as the rows do not say which.
const NCCL_ITERATIONS: u32 = 60;

/// Bytes of one nccl-tests `half` element.
const HALF_BYTES: u64 = 2;

/// Imports `engine`'s tables under `gpu_dir` (`…/systems/data/h100_sxm`), at `version` or the
/// newest version there.
pub fn import(gpu_dir: &Path, engine: &str, version: Option<&str>) -> Result<Imported, ImportError> {
    let bad_dir = |message: String| ImportError::File { file: gpu_dir.to_path_buf(), message };
    if !ENGINES.contains(&engine) {
        return Err(bad_dir(format!("unknown engine `{engine}`; known: {}", ENGINES.join(", "))));
    }
    let version = match version {
        Some(v) => v.to_string(),
        None => newest_version(&gpu_dir.join("gemm").join(engine)).ok_or_else(|| {
            bad_dir(format!("no gemm/{engine}/<version>/ folder (is this an aiconfigurator systems/data/<gpu> folder?)"))
        })?,
    };
    let at = |kind: &str, file: &str| gpu_dir.join(kind).join(engine).join(&version).join(file);
    let gemm_file = at("gemm", "gemm_perf.parquet");
    let context_file = at("attention", "context_attention_perf.parquet");
    let generation_file = at("attention", "generation_attention_perf.parquet");
    let allreduce_file = at("comm", "custom_allreduce_perf.parquet");

    let mut acc = Accumulator::default();
    let gemm = Table::read_parquet(&gemm_file)?;
    let (device, gpu) = device_of(&gemm)?;
    read_gemms(&gemm, &mut acc)?;
    let mut files = vec![gemm_file.clone()];
    for (file, phase) in [(&context_file, AttentionPhase::Prefill), (&generation_file, AttentionPhase::Decode)] {
        if file.exists() {
            read_attention(&Table::read_parquet(file)?, phase, &mut acc)?;
            files.push(file.clone());
        } else {
            acc.notes.push(format!("{}: absent; that attention phase falls back to the roofline", file.display()));
        }
    }
    if allreduce_file.exists() {
        read_allreduce(&Table::read_parquet(&allreduce_file)?, engine, &mut acc)?;
        files.push(allreduce_file.clone());
    }
    match nccl_file(gpu_dir) {
        Some(nccl) => {
            read_alltoall(&Table::read_parquet(&nccl)?, &mut acc)?;
            files.push(nccl);
        }
        None => acc.notes.push(format!(
            "{}: no comm/nccl/<version>/nccl_perf.parquet; expert parallelism's all-to-alls fall back to the roofline",
            gpu_dir.display()
        )),
    }

    // Where other engines' builds timed the same GEMMs, how far they differ from this one: the
    // rule keeps one source per profile (the engine asked for, its newest version), and says
    // how much the choice matters.
    let mut agreement = Vec::new();
    for other in ENGINES.iter().filter(|&&e| e != engine) {
        let Some(other_version) = newest_version(&gpu_dir.join("gemm").join(other)) else { continue };
        let file = gpu_dir.join("gemm").join(other).join(&other_version).join("gemm_perf.parquet");
        let Ok(table) = Table::read_parquet(&file) else { continue };
        let mut theirs = Accumulator::default();
        read_gemms(&table, &mut theirs)?;
        let ours = acc.gemm_medians_ms();
        let errors: Vec<f64> = theirs
            .gemm_medians_ms()
            .iter()
            .filter_map(|(shape, b)| {
                let a = ours.get(shape)?;
                Some((b - a).abs() / a)
            })
            .collect();
        if errors.is_empty() {
            continue;
        }
        let (mid, p90) = (percentile(&errors, 0.5), percentile(&errors, 0.9));
        let line = format!(
            "{other} {other_version} against {engine} {version} on {} shared GEMM shapes: median {:.1}%, p90 {:.1}%",
            errors.len(),
            mid * 100.0,
            p90 * 100.0
        );
        acc.notes.push(format!("sources differ: {line}"));
        agreement.push(line);
    }

    let families = super::aiconfigurator_families::import(gpu_dir, engine, &version, &gpu.name)?;
    let data_root = gpu_dir.parent().unwrap_or(gpu_dir).to_path_buf();
    let source = Source {
        format: "aiconfigurator",
        device,
        gpu,
        engine: engine.into(),
        engine_version: version,
        files,
        files_root: Some(data_root),
        agreement,
        compare_bundled: false,
        method: "mean of CUDA-graph replays per op after warm-up (aiconfigurator collector); GEMM weights not \
                 resident in L2; attention excludes the QKV/O projections and RoPE; all-to-alls: nccl-tests' mean \
                 out-of-place time per iteration"
            .into(),
    };
    let mut imported = assemble(acc, source)?;
    imported.families = families;
    Ok(imported)
}

/// `comm/nccl/<newest NCCL version>/nccl_perf.parquet` under `gpu_dir`, when there is one.
fn nccl_file(gpu_dir: &Path) -> Option<std::path::PathBuf> {
    let dir = gpu_dir.join("comm").join("nccl");
    let file = dir.join(newest_version(&dir)?).join("nccl_perf.parquet");
    file.exists().then_some(file)
}

/// The newest `<version>` folder in `dir`, comparing dotted numbers numerically (`0.24.0` after
/// `0.9.1`; a pre-release such as `1.3.0rc20` sorts by its numbers).
fn newest_version(dir: &Path) -> Option<String> {
    let key = |v: &str| -> Vec<u64> {
        v.split(|c: char| !c.is_ascii_digit()).filter(|s| !s.is_empty()).map(|s| s.parse().unwrap_or(0)).collect()
    };
    std::fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok())
        .filter(|e| e.path().is_dir())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .max_by(|a, b| key(a).cmp(&key(b)).then(a.cmp(b)))
}

/// The GPU the table was measured on: its `device` column, matched to a hardware preset (whose
/// datasheet peaks the utilisations are relative to).
fn device_of(table: &Table) -> Result<(String, GpuSpec), ImportError> {
    let [col] = table.columns(["device"])?;
    let row = table.rows().next().ok_or_else(|| ImportError::File { file: table.file.clone(), message: "no rows".into() })?;
    let device = row.text(col)?.to_string();
    let preset = gpu_preset(&device).ok_or_else(|| ImportError::Cell {
            file: table.file.clone(),
            row: row.number,
            column: "device".into(),
            message: format!("{device:?} is none of the GPUs servesim has a preset for (H100, H200, B200, A100)"),
        })?;
    Ok((device, preset))
}

fn read_gemms(table: &Table, acc: &mut Accumulator) -> Result<(), ImportError> {
    let [dtype, m, n, k, latency, kernel] = table.columns(["gemm_dtype", "m", "n", "k", "latency", "kernel_source"])?;
    for row in table.rows() {
        let dtype = match row.text(dtype)? {
            "bfloat16" => Dtype::Bf16,
            "fp8" => Dtype::Fp8,
            other => {
                acc.skip(format!("GEMM dtype {other} (servesim prices bf16 and per-tensor fp8 GEMMs)"));
                continue;
            }
        };
        let shape = GemmShape { m: dim(row.count(m, DIM_MAX)?), n: dim(row.count(n, DIM_MAX)?), k: dim(row.count(k, DIM_MAX)?), dtype };
        acc.add(Shape::Gemm(shape), row.positive(latency)?, row.text(kernel)?, REPLAYS);
    }
    Ok(())
}

fn read_attention(table: &Table, phase: AttentionPhase, acc: &mut Accumulator) -> Result<(), ImportError> {
    let [batch, isl, heads, kv_heads, head_dim, attn_dtype, kv_dtype, step, latency, kernel] = table.columns([
        "batch_size",
        "isl",
        "num_heads",
        "num_key_value_heads",
        "head_dim",
        "attn_dtype",
        "kv_cache_dtype",
        "step",
        "latency",
        "kernel_source",
    ])?;
    let window = table.has_column("window_size").then(|| table.columns(["window_size"])).transpose()?.map(|[c]| c);
    let beam = table.has_column("beam_width").then(|| table.columns(["beam_width"])).transpose()?.map(|[c]| c);
    for row in table.rows() {
        if let Some(w) = window
            && row.whole(w, u64::MAX >> 1)? != 0
        {
            acc.skip("sliding-window attention".into());
            continue;
        }
        if let Some(b) = beam
            && row.count(b, DIM_MAX)? != 1
        {
            acc.skip("beam search attention".into());
            continue;
        }
        if row.text(attn_dtype)? != "bfloat16" {
            acc.skip(format!("attention with {} queries", row.text(attn_dtype)?));
            continue;
        }
        let dtype = match row.text(kv_dtype)? {
            "bfloat16" => Dtype::Bf16,
            "fp8" => Dtype::Fp8,
            other => {
                acc.skip(format!("KV cache dtype {other}"));
                continue;
            }
        };
        let (query_len, context_len) = match phase {
            AttentionPhase::Decode => (1, dim(row.whole(step, DIM_MAX)?)),
            _ => (dim(row.count(isl, DIM_MAX)?), 0),
        };
        let shape = AttentionShape {
            phase,
            batch: dim(row.count(batch, DIM_MAX)?),
            query_len,
            context_len,
            num_heads: dim(row.count(heads, DIM_MAX)?),
            num_kv_heads: dim(row.count(kv_heads, DIM_MAX)?),
            head_dim: dim(row.count(head_dim, DIM_MAX)?),
            uneven: false,
            dtype,
        };
        acc.add(Shape::Attention(shape), row.positive(latency)?, row.text(kernel)?, REPLAYS);
    }
    Ok(())
}

/// An engine's measured TP all-reduce alone (a `custom_allreduce_perf.parquet`), for a profile
/// whose own source timed none (LLMServingSim's one-GPU bundles): its rows into `acc` as
/// [`import`] reads them, and the table's `(device, engine, version)` for the caller to check
/// against its own, the engine lower-cased as the folders name it (`vllm`).
pub fn read_allreduce_file(file: &Path, acc: &mut Accumulator) -> Result<(String, String, String), ImportError> {
    let table = Table::read_parquet(file)?;
    let [device, framework, version] = table.columns(["device", "framework", "version"])?;
    let row = table.rows().next().ok_or_else(|| ImportError::File { file: file.to_path_buf(), message: "no rows".into() })?;
    let found = (row.text(device)?.to_string(), row.text(framework)?.to_ascii_lowercase(), row.text(version)?.to_string());
    for row in table.rows() {
        let this = (row.text(device)?, row.text(framework)?.to_ascii_lowercase(), row.text(version)?);
        if (this.0, this.1.as_str(), this.2) != (found.0.as_str(), found.1.as_str(), found.2.as_str()) {
            return Err(row.invalid(device, &format!("{this:?}, where its first row is {found:?}: one GPU and engine build a table")));
        }
    }
    read_allreduce(&table, &found.1, acc)?;
    Ok(found)
}

fn read_allreduce(table: &Table, engine: &str, acc: &mut Accumulator) -> Result<(), ImportError> {
    let [gpus, size, latency, kernel] = table.columns(["num_gpus", "message_size", "latency", "kernel_source"])?;
    for row in table.rows() {
        let source = row.text(kernel)?;
        if engine != "trtllm" && !source.contains("graph") {
            acc.skip(format!("all-reduce outside a CUDA graph ({source})"));
            continue;
        }
        let shape = AllReduceShape { bytes: 2 * row.count(size, DIM_MAX * DIM_MAX)?, gpus: dim(row.count(gpus, 1024)?) };
        acc.add(Shape::AllReduce(shape), row.positive(latency)?, source, REPLAYS);
    }
    Ok(())
}

/// nccl-tests' `alltoall` rows in `half`: each GPU sends `message_size` elements in all (one
/// `1/num_gpus` slice to each GPU), 2 bytes each. Other collectives and dtypes are skipped.
fn read_alltoall(table: &Table, acc: &mut Accumulator) -> Result<(), ImportError> {
    let [op, dtype, gpus, size, latency, kernel] =
        table.columns(["op_name", "nccl_dtype", "num_gpus", "message_size", "latency", "kernel_source"])?;
    for row in table.rows() {
        let op_name = row.text(op)?;
        if op_name != "alltoall" {
            acc.skip(format!("NCCL {op_name} (servesim imports the engines' own all-reduce, and NCCL's all-to-all)"));
            continue;
        }
        let element = row.text(dtype)?;
        if element != "half" {
            acc.skip(format!("NCCL all-to-all in {element}"));
            continue;
        }
        let shape =
            AllToAllShape { bytes: HALF_BYTES * row.count(size, DIM_MAX * DIM_MAX)?, gpus: dim(row.count(gpus, 1024)?) };
        let source = format!("{} alltoall", row.text(kernel)?);
        acc.add(Shape::AllToAll(shape), row.positive(latency)?, &source, NCCL_ITERATIONS);
    }
    Ok(())
}
