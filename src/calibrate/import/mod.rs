//! Profiles from published measurements: other projects' per-op GPU timings, converted into
//! servesim's profile format, so GPUs this project cannot run still get measured kernel costs.
//!
//! ```text
//!   source files ──► <format>::import ──► rows of servesim's model-agnostic grid
//!   (parquet, CSV)      (units, semantics)      GEMM (m, n, k, dtype), attention (phase, batch,
//!                                               query, context, heads, KV heads, head dim)
//!                   ──► Profile { rows, provenance with the source, commit, license, engine }
//! ```
//!
//! Each format's module documents what its rows timed and how they map. The measurements are
//! facts from their sources (named in every profile's provenance); the converters are servesim's.

pub mod aiconfigurator;
pub mod aiconfigurator_families;
pub mod attention_csv;
pub mod build;
pub mod compare;
pub mod frontier;
pub mod gpu;
pub mod layers;
pub mod llmservingsim;
pub mod llmservingsim_meta;
pub mod llmservingsim_perf;
pub mod physics;
pub mod source;
pub mod table;
pub mod vidur;

use std::path::PathBuf;

/// Why an import failed. Each names the file, and the row and column where there is one.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    #[error("{}: {message}", file.display())]
    File { file: PathBuf, message: String },
    #[error("{}: row {row}: {message}", file.display())]
    Row { file: PathBuf, row: usize, message: String },
    #[error("{}: row {row}, column `{column}`: {message}", file.display())]
    Cell { file: PathBuf, row: usize, column: String, message: String },
    /// A key of a YAML or TOML file (LLMServingSim's `meta.yaml`), by its line.
    #[error("{}: line {line}, `{key}`: {message}", file.display())]
    Key { file: PathBuf, line: usize, key: String, message: String },
}

/// The formats `servesim calibrate import --from` reads.
pub const FORMATS: [&str; 4] = ["aiconfigurator", "vidur", "llmservingsim", "frontier"];
