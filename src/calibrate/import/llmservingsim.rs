//! LLMServingSim's profiles, in either of its two formats, told apart by their files: the
//! profiler's bundles (`profiler/perf/…/<variant>/meta.yaml` beside `tp<N>/dense.csv`, …, timed
//! in vLLM; [`super::llmservingsim_perf`]) and the older per-layer tables read here
//! (`profiler/v0/perf_models/<GPU>/<org>/<model>/tp<N>/…`), timed on an H100 in Hugging Face
//! transformers 4.57.3 layers (cuBLAS) and flash-attn 2, fp16. One `--from llmservingsim`
//! serves both because a user holds "LLMServingSim's profiles", not a format name, and the two
//! cannot be confused: only the bundles have `meta.yaml`, only the old tables `layers.csv`.
//!
//! - `layers.csv` (`layer_name, input, kv_cache, tp_size, latency(ns)`): one layer of the model
//!   per token count (`input`, batch 1, 1 … 2048) and TP degree, each op the median of its
//!   summed CUDA kernel time over the repeats, in **nanoseconds**. The model is the folder
//!   naming it (`Llama-3.1-8B`): its dimensions are servesim's preset of that name. GEMMs →
//!   servesim GEMM rows, m = `input`, per GPU (see [`super::layers`]): `q_proj`, `k_proj` and
//!   `v_proj` apart, `o_proj`, `gate_proj` and `up_proj` apart, `down_proj`, `lm_head`. Its
//!   other ops (embedding, eager RMSNorm, RoPE, SiLU, and SDPA attention, which `attention.csv`
//!   times with flash-attn) are counted and left out.
//! - `attention.csv`: flash-attn 2 `flash_attn_varlen_func` over contiguous K/V, read by
//!   [`super::attention_csv`] with LLMServingSim's meaning of `kv_cache_size` (the keys in all,
//!   the chunk's included; a decode batch's total).

use std::path::{Path, PathBuf};

use super::ImportError;
use super::attention_csv::{self, AttentionCsv, KvMeaning};
use super::build::{Accumulator, DIM_MAX, Imported, Source, assemble, dim, files_under};
use super::gpu::gpu_of;
use super::llmservingsim_meta::model_named;
use super::llmservingsim_perf as perf;
use super::layers::{Dims, Projection};
use super::table::Table;
use crate::calibrate::backend::GemmShape;
use crate::calibrate::grid::Shape;
use crate::scenario::{Dtype, ModelSpec};

const LAYERS: &str = "layers.csv";
const ATTENTION: &str = "attention.csv";

/// Repeats behind each median: the shipped profiling scripts' `--repeat` (30 for layers, 50 for
/// attention); the H100 run's own setting is not recorded.
const LAYER_REPEATS: u32 = 30;
const ATTENTION_REPEATS: u32 = 50;

const GEMMS: [(&str, Projection); 8] = [
    ("q_proj", Projection::Q),
    ("k_proj", Projection::KOrV),
    ("v_proj", Projection::KOrV),
    ("o_proj", Projection::O),
    ("gate_proj", Projection::GateOrUp),
    ("up_proj", Projection::GateOrUp),
    ("down_proj", Projection::Down),
    ("lm_head", Projection::LmHead),
];

const KERNEL_GEMM: &str = "cuBLAS (torch linear, Hugging Face transformers 4.57.3)";

/// Imports the LLMServingSim files at or under `paths`, of one format; `gpu` names the GPU
/// where the files do not, `model` the model where their folders do not (a preset, or a
/// Hugging Face `config.json`).
/// `allreduce`: an aiconfigurator `custom_allreduce_perf.parquet` of the bundles' GPU and vLLM
/// release (profiler bundles only; see [`perf::import`]).
pub fn import(paths: &[PathBuf], gpu: Option<&str>, model: Option<&str>, allreduce: Option<&Path>) -> Result<Imported, ImportError> {
    let wanted = [LAYERS, ATTENTION, perf::META, perf::DENSE, perf::PER_SEQUENCE, perf::MOE];
    let (files, others) = files_under(paths, &wanted)?;
    // `attention.csv` is a name of both formats: a bundle's is in a tp<N>/ folder beside its
    // meta.yaml. The other names are one format's.
    let (bundled, tables): (Vec<PathBuf>, Vec<PathBuf>) =
        files.into_iter().partition(|f| perf::in_bundle(f) || !(f.ends_with(LAYERS) || f.ends_with(ATTENTION)));
    match (bundled.first(), tables.first()) {
        (Some(bundle), Some(table)) => Err(ImportError::File {
            file: table.clone(),
            message: format!(
                "LLMServingSim's older per-layer format, and {} is of its profiler bundles: import one format at a time",
                bundle.display()
            ),
        }),
        (Some(_), None) => perf::import(&bundled, &others, gpu, model, allreduce),
        _ => match allreduce {
            Some(file) => Err(ImportError::File {
                file: file.to_path_buf(),
                message: "an all-reduce table joins LLMServingSim's profiler bundles (vLLM), not its older per-layer tables".into(),
            }),
            None => import_tables(tables, others, gpu, model),
        },
    }
}

/// The older format's `layers.csv` and `attention.csv` files.
fn import_tables(files: Vec<PathBuf>, others: Vec<PathBuf>, gpu: Option<&str>, model: Option<&str>) -> Result<Imported, ImportError> {
    let (device, spec) = gpu_of(&files, gpu)?;
    let given = model.map(|name| model_named(name, &files[0]).map(|m| m.spec)).transpose()?;
    let mut acc = Accumulator::default();
    for other in &others {
        acc.notes.push(format!("{}: left out, not a table this format reads", other.display()));
    }
    for file in &files {
        let table = Table::read_csv(file)?;
        if file.ends_with(LAYERS) {
            let model = match &given {
                Some(model) => model.clone(),
                None => model_of(file)?,
            };
            read_layers(&table, &model, &mut acc)?;
        } else {
            let format = AttentionCsv { kv: KvMeaning::KeysInAll, dtype: Dtype::Fp16, repeats: ATTENTION_REPEATS };
            attention_csv::read(&table, &format, &mut acc)?;
        }
    }
    let source = Source {
        format: "llmservingsim",
        device: format!("{device} (LLMServingSim's folder name; variant not recorded)"),
        gpu: spec,
        engine: "Hugging Face transformers; flash-attn 2".into(),
        engine_version: "transformers 4.57.3 (nvcr.io/nvidia/pytorch:25.01-py3)".into(),
        files,
        files_root: None,
        agreement: Vec::new(),
        compare_bundled: true,
        method: "torch-profiler CUDA kernel time summed over each op's region, fp16: per-layer ops the median over the \
                 repeats of a one-layer model at batch 1 (no all-reduce inside); attention the median over the repeats \
                 after 10 warm-ups"
            .into(),
    };
    assemble(acc, source)
}

/// The model a `layers.csv` times: the first folder above it named as a servesim preset.
fn model_of(file: &Path) -> Result<ModelSpec, ImportError> {
    file.ancestors().skip(1).filter_map(|d| d.file_name()).find_map(|name| ModelSpec::preset(&name.to_string_lossy())).ok_or_else(
        || ImportError::File {
            file: file.to_path_buf(),
            message: format!(
                "no folder above it names the model it times as a servesim preset ({})",
                ModelSpec::preset_names().join(", ")
            ),
        },
    )
}

fn read_layers(table: &Table, model: &ModelSpec, acc: &mut Accumulator) -> Result<(), ImportError> {
    let [layer, input, kv_cache, tp, latency] = table.columns(["layer_name", "input", "kv_cache", "tp_size", "latency(ns)"])?;
    let dims = Dims {
        hidden: u64::from(model.hidden_size),
        heads: u64::from(model.num_heads),
        kv_heads: u64::from(model.num_kv_heads),
        head_dim: u64::from(model.head_dim),
        ffn: u64::from(model.ffn_size),
        vocab: u64::from(model.vocab_size),
        gated: true,
    };
    for row in table.rows() {
        let name = row.text(layer)?;
        let Some(&(_, projection)) = GEMMS.iter().find(|(op, _)| *op == name) else {
            let what = match name {
                "attn" => "SDPA attention without a KV cache; attention.csv times flash-attn",
                "input_layernorm" | "post_layernorm" | "final_layernorm" => "RMSNorm, eager PyTorch",
                "rope" => "rotary embedding, eager PyTorch",
                "act_fn" => "SiLU, eager PyTorch",
                "embedding" => "embedding lookup",
                _ => "not an op servesim's profiles hold",
            };
            acc.skip(format!("LLMServingSim `{name}` ({what})"));
            continue;
        };
        if row.whole(kv_cache, DIM_MAX)? != 0 {
            acc.skip("per-layer rows over a KV cache".into());
            continue;
        }
        let tp_degree = row.count(tp, 1024)?;
        let (n, k) = projection
            .gemm_nk(&dims, tp_degree)
            .ok_or_else(|| row.invalid(tp, &format!("{}'s {name} does not split over it", model.name)))?;
        let shape = GemmShape { m: dim(row.count(input, DIM_MAX)?), n: dim(n), k: dim(k), dtype: Dtype::Fp16 };
        acc.add(Shape::Gemm(shape), row.positive(latency)? / 1e6, KERNEL_GEMM, LAYER_REPEATS);
    }
    Ok(())
}
