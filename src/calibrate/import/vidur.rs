//! Microsoft vidur's profiling CSVs (`data/profiling/…`), timed with sarathi-serve's layers
//! (vidur branch, about 2024) on A100 and H100 GPUs, fp16:
//!
//! - `compute/<gpu>/<org>/<model>/mlp.csv`: one row per (`num_tokens`, TP degree) of one layer
//!   of the model, whose dimensions are in the row (`n_embd`, `n_head`, `n_kv_head`,
//!   `n_expanded_embd`, `use_gated_mlp`). Columns `time_stats.<op>.median` are milliseconds of
//!   CUDA kernel time, the median over 20 repeats of the layer. The GEMMs → servesim GEMM rows,
//!   m = `num_tokens`, per GPU after TP sharding (see [`super::layers`]): `attn_pre_proj` (fused
//!   QKV), `attn_post_proj` (O), `mlp_up_proj` (fused gate and up), `mlp_down_proj`. Its other
//!   ops (embedding, RMSNorms, RoPE, SiLU, residual add) are counted and left out.
//! - `network/<gpu>_<topology>/all_reduce.csv`: NCCL all-reduce of `size` **bytes** (fp16
//!   buffers) on `num_workers` GPUs, the median of 3 runs of the median of 11 launches. Rows
//!   within one node (`devices_per_node == num_workers`, as vidur prices TP) → all-reduce rows.
//! - `<gpu>/attention.csv` (an older commit's file): FlashAttention over a paged KV cache, read
//!   by [`super::attention_csv`] (vidur's meaning: `kv_cache_size` cached tokens per sequence).
//!
//! The GPU is the one the files' folders name (`a100`, `h100_dgx`); whether vidur's A100 was
//! SXM or PCIe is not recorded, and its datasheet peaks are the SXM preset's.

use std::path::PathBuf;

use super::ImportError;
use super::attention_csv::{self, AttentionCsv, KvMeaning};
use super::build::{Accumulator, DIM_MAX, Imported, Source, assemble, dim, files_under};
use super::gpu::gpu_of;
use super::layers::{Dims, Projection};
use super::table::Table;
use crate::calibrate::backend::{AllReduceShape, GemmShape};
use crate::calibrate::grid::Shape;
use crate::scenario::Dtype;

const MLP: &str = "mlp.csv";
const ALL_REDUCE: &str = "all_reduce.csv";
const ATTENTION: &str = "attention.csv";

/// Repeats behind each median: the layer 20 times per pass, attention 5, all-reduce 3.
const MLP_REPEATS: u32 = 20;
const ATTENTION_REPEATS: u32 = 5;
const ALL_REDUCE_REPEATS: u32 = 3;

/// `mlp.csv`'s GEMM ops.
const GEMMS: [(&str, Projection); 4] = [
    ("attn_pre_proj", Projection::Qkv),
    ("attn_post_proj", Projection::O),
    ("mlp_up_proj", Projection::GateUp),
    ("mlp_down_proj", Projection::Down),
];

/// `mlp.csv`'s other ops, what each is.
const OTHER_OPS: [(&str, &str); 6] = [
    ("emb", "embedding lookup"),
    ("input_layernorm", "RMSNorm"),
    ("post_attention_layernorm", "RMSNorm"),
    ("attn_rope", "rotary embedding"),
    ("mlp_act", "SiLU and multiply"),
    ("add", "residual add"),
];

const KERNEL_GEMM: &str = "cuBLAS (torch linear, sarathi-serve ColumnParallel/RowParallelLinear)";
const KERNEL_ALL_REDUCE: &str = "NCCL all_reduce (torch.distributed)";

/// Imports the vidur files at or under `paths`; `gpu` names the GPU where the paths do not.
pub fn import(paths: &[PathBuf], gpu: Option<&str>) -> Result<Imported, ImportError> {
    let (files, others) = files_under(paths, &[MLP, ALL_REDUCE, ATTENTION])?;
    let (device, spec) = gpu_of(&files, gpu)?;
    let reducers: Vec<&PathBuf> = files.iter().filter(|f| f.ends_with(ALL_REDUCE)).collect();
    if let [first, second, ..] = reducers.as_slice() {
        return Err(ImportError::File {
            file: (*second).clone(),
            message: format!(
                "a second all-reduce table (the first: {}); each is one topology (DGX, pairwise NVLink): give one",
                first.display()
            ),
        });
    }
    let mut acc = Accumulator::default();
    for other in &others {
        let name = other.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let why = match name.as_str() {
            "send_recv.csv" => "point-to-point send/recv (servesim's profiles hold all-reduces)",
            "cpu_overheads.csv" => "engine CPU time per step, not kernels (see docs/calibration.md on engine overheads)",
            _ => "not a table this format reads",
        };
        acc.notes.push(format!("{}: left out, {why}", other.display()));
    }
    for file in &files {
        let table = Table::read_csv(file)?;
        if file.ends_with(MLP) {
            read_mlp(&table, &mut acc)?;
        } else if file.ends_with(ALL_REDUCE) {
            read_all_reduce(&table, &mut acc)?;
        } else {
            let format = AttentionCsv { kv: KvMeaning::CachedPerSequence, dtype: Dtype::Fp16, repeats: ATTENTION_REPEATS };
            attention_csv::read(&table, &format, &mut acc)?;
        }
    }
    let source = Source {
        format: "vidur",
        device: format!("{device} (vidur's folder name; SXM or PCIe not recorded)"),
        gpu: spec,
        engine: "sarathi-serve".into(),
        engine_version: "vidur branch, about 2024 (not recorded)".into(),
        files,
        files_root: None,
        agreement: Vec::new(),
        compare_bundled: true,
        method: "torch-profiler CUDA kernel time summed over each op's region, fp16, dummy weights: per-layer ops the \
                 median of 20 repeats of one layer (no all-reduce inside); attention the median of 5; all-reduce the \
                 median of 3 runs of the median of 11 NCCL launches"
            .into(),
    };
    assemble(acc, source)
}

fn read_mlp(table: &Table, acc: &mut Accumulator) -> Result<(), ImportError> {
    let [heads, kv_heads, embd, ffn, vocab, gated, tokens, tp] = table.columns([
        "n_head",
        "n_kv_head",
        "n_embd",
        "n_expanded_embd",
        "vocab_size",
        "use_gated_mlp",
        "num_tokens",
        "num_tensor_parallel_workers",
    ])?;
    let mut gemm_cols = Vec::new();
    for (op, projection) in GEMMS {
        let [col] = table.columns([format!("time_stats.{op}.median").as_str()])?;
        gemm_cols.push((col, projection));
    }
    for row in table.rows() {
        let (embd_v, heads_v) = (row.count(embd, DIM_MAX)?, row.count(heads, DIM_MAX)?);
        if embd_v % heads_v != 0 {
            return Err(row.invalid(embd, &format!("not a multiple of n_head {heads_v}")));
        }
        let dims = Dims {
            hidden: embd_v,
            heads: heads_v,
            kv_heads: row.count(kv_heads, DIM_MAX)?,
            head_dim: embd_v / heads_v,
            ffn: row.count(ffn, DIM_MAX)?,
            vocab: row.count(vocab, DIM_MAX)?,
            gated: row.flag(gated)?,
        };
        let tp_degree = row.count(tp, 1024)?;
        let m = dim(row.count(tokens, DIM_MAX)?);
        for &(col, projection) in &gemm_cols {
            let (n, k) = projection
                .gemm_nk(&dims, tp_degree)
                .ok_or_else(|| row.invalid(tp, &format!("the model's {projection:?} projection does not split over it")))?;
            let shape = GemmShape { m, n: dim(n), k: dim(k), dtype: Dtype::Fp16 };
            acc.add(Shape::Gemm(shape), row.positive(col)?, KERNEL_GEMM, MLP_REPEATS);
        }
    }
    for (op, what) in OTHER_OPS {
        let name = format!("time_stats.{op}.median");
        if table.has_column(&name) {
            let [col] = table.columns([name.as_str()])?;
            let count = table.rows().filter(|r| !r.is_null(col)).count() as u64;
            acc.skip_n(format!("vidur `{op}` ({what}; servesim's profiles hold GEMMs, attention and all-reduces)"), count);
        }
    }
    Ok(())
}

fn read_all_reduce(table: &Table, acc: &mut Accumulator) -> Result<(), ImportError> {
    let [workers, per_node, size, latency] =
        table.columns(["num_workers", "devices_per_node", "size", "time_stats.all_reduce.median"])?;
    for row in table.rows() {
        let gpus = row.count(workers, 1024)?;
        if row.count(per_node, 1024)? != gpus {
            acc.skip("all-reduce spanning nodes (a TP group is one node)".into());
            continue;
        }
        let shape = AllReduceShape { bytes: row.count(size, DIM_MAX * DIM_MAX)?, gpus: dim(gpus) };
        acc.add(Shape::AllReduce(shape), row.positive(latency)?, KERNEL_ALL_REDUCE, ALL_REDUCE_REPEATS);
    }
    Ok(())
}
