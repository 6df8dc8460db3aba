//! NetX-lab Frontier's attention profiles (`data/profiling/compute/<gpu>/<model>/attention*.csv`,
//! a vidur-derived simulator): FlashInfer over a paged KV cache (block 16), chunked prefill over
//! a cached prefix and decode, read by [`super::attention_csv`] with vidur's meaning of
//! `kv_cache_size` (cached tokens per sequence). Each row's time is its phase's kernel plus the
//! KV-cache write Frontier times apart (`attn_kv_cache_save`), as aiconfigurator's vLLM rows
//! include it. The dtype is the file's `profiling_precision` (BF16 in the H800 file; the H100
//! file records none, and vidur's default, fp16, is taken).
//!
//! An H800 is H100 SXM silicon (the same SMs, HBM3 and clocks, NVLink cut to 400 GB/s): its
//! kernel times are an H100's, and the profile takes the H100 SXM preset, saying so.

use std::path::PathBuf;

use super::ImportError;
use super::attention_csv::{self, AttentionCsv, KvMeaning};
use super::build::{Accumulator, Imported, Source, assemble, files_under};
use super::gpu::gpu_of;
use super::table::Table;
use crate::scenario::Dtype;

const FILES: [&str; 2] = ["attention_kernel_only.csv", "attention.csv"];

/// Frontier's H800 rows are a single sample each (min = max); the H100 file does not say.
const REPEATS: u32 = 1;

/// Imports the Frontier attention files at or under `paths`; `gpu` names the GPU where the
/// paths do not.
pub fn import(paths: &[PathBuf], gpu: Option<&str>) -> Result<Imported, ImportError> {
    let (files, others) = files_under(paths, &FILES)?;
    let (device, spec) = gpu_of(&files, gpu)?;
    let mut acc = Accumulator::default();
    for other in &others {
        acc.notes.push(format!("{}: left out, not a table this format reads", other.display()));
    }
    if device.eq_ignore_ascii_case("h800") {
        acc.notes.push("H800: H100 SXM silicon with NVLink cut to 400 GB/s; its kernels are priced as the H100 SXM's".into());
    }
    for file in &files {
        let format = AttentionCsv { kv: KvMeaning::CachedPerSequence, dtype: Dtype::Fp16, repeats: REPEATS };
        attention_csv::read(&Table::read_csv(file)?, &format, &mut acc)?;
    }
    let source = Source {
        format: "frontier",
        device,
        gpu: spec,
        engine: "Frontier (vidur-derived); FlashInfer".into(),
        engine_version: "not recorded".into(),
        files,
        files_root: None,
        agreement: Vec::new(),
        compare_bundled: true,
        method: "torch-profiler device time summed over each op's region (KERNEL_ONLY), one sample per row; attention \
                 plus its KV-cache write"
            .into(),
    };
    assemble(acc, source)
}
