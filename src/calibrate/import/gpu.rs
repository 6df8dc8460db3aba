//! The GPU an import's rows were measured on: named by the source's folders or device strings
//! (`a100`, `h100_dgx`, `NVIDIA H100 80GB HBM3`), or by `--gpu`, a servesim GPU preset or a TOML
//! file whose `[hardware]` table gives the GPU's datasheet figures. The table has the keys of
//! a scenario's `[hardware]` (`name`, `peak_tflops_16bit`, `peak_tflops_fp8`, `memory_gib`,
//! `memory_bandwidth_gbps`, `interconnect_gbps`, or a `gpu` preset they override), so the
//! scenario that will use the profile can name its own GPU for the import too.
//!
//! Why a file rather than presets: published tables cover GPUs servesim has no preset for (the
//! RTX 4090 and RTX PRO 6000 that LLMServingSim profiled). A profile's utilisation is relative to
//! its GPU's peak FLOP/s and memory bandwidth, so those figures must come from somewhere, and
//! the scenario's own figures keep the profile and the scenario on the same peaks.

use std::path::{Path, PathBuf};

use super::ImportError;
use crate::scenario::GpuSpec;
use crate::scenario::schema::RawHardware;

/// The hardware preset of a GPU named by a source (a device string such as "NVIDIA H100 80GB
/// HBM3", or a folder such as `a100_dgx`). H800 is H100 SXM silicon with NVLink cut to 400 GB/s:
/// its kernels time as an H100's, so it takes the H100 SXM preset (its collectives do not).
pub fn gpu_preset(name: &str) -> Option<GpuSpec> {
    let upper = name.to_ascii_uppercase();
    [("H100", "H100-SXM"), ("H800", "H100-SXM"), ("H200", "H200"), ("B200", "B200"), ("A100", "A100-80G-SXM")]
        .iter()
        .find(|(needle, _)| upper.contains(needle))
        .and_then(|(_, preset)| GpuSpec::preset(preset))
}

/// The GPU a file was measured on, from the first folder or file name of its path that names one
/// (`…/compute/a100/…`, `…/network/h100_dgx/…`, `…/perf_models/H100/…`): the name as written
/// and its preset.
pub fn gpu_in_path(file: &Path) -> Option<(String, GpuSpec)> {
    file.components().rev().find_map(|c| {
        let name = c.as_os_str().to_string_lossy();
        let upper = name.to_ascii_uppercase();
        let word = ["H100", "H800", "H200", "B200", "A100"].into_iter().find(|w| upper.starts_with(w))?;
        gpu_preset(word).map(|spec| (word.to_string(), spec))
    })
}

/// The GPU every one of `files` was measured on: `gpu` when the user named one (a preset, or a
/// `.toml` file of its figures: [`named`]), else the one their paths name. Files naming
/// different GPUs, or none, are an error naming them.
pub fn gpu_of(files: &[PathBuf], gpu: Option<&str>) -> Result<(String, GpuSpec), ImportError> {
    let first = files.first().cloned().unwrap_or_default();
    if let Some(name) = gpu {
        let spec = named(name, &first)?;
        // A figures file is named by the GPU it describes, a preset as the user wrote it.
        let word = if name.ends_with(".toml") { spec.name.clone() } else { name.to_string() };
        return Ok((word, spec));
    }
    let mut found: Option<(PathBuf, String, GpuSpec)> = None;
    for file in files {
        let (word, spec) = gpu_in_path(file).ok_or_else(|| ImportError::File {
            file: file.clone(),
            message: "no folder in its path names the GPU it was measured on (a100, h100, h800, …); give --gpu".into(),
        })?;
        match &found {
            Some((other, _, known)) if known.name != spec.name => {
                return Err(ImportError::File {
                    file: file.clone(),
                    message: format!(
                        "measured on {} by its path, and {} on {}: import one GPU's files at a time",
                        spec.name,
                        other.display(),
                        known.name
                    ),
                });
            }
            Some(_) => {}
            None => found = Some((file.clone(), word, spec)),
        }
    }
    found.map(|(_, word, spec)| (word, spec)).ok_or_else(|| ImportError::File { file: first, message: "no files".into() })
}

/// Bytes in a GiB, as scenarios count `memory_gib`.
const GIB_BYTES: f64 = (1u64 << 30) as f64;

/// The GPU `value` names: a preset (`H100-SXM`, or a name containing one, `h100_sxm`), or a
/// `.toml` file with a `[hardware]` table. `context` is the file an error about a preset names.
pub fn named(value: &str, context: &Path) -> Result<GpuSpec, ImportError> {
    if value.ends_with(".toml") {
        return from_file(Path::new(value));
    }
    GpuSpec::preset(value).or_else(|| gpu_preset(value)).ok_or_else(|| ImportError::File {
        file: context.to_path_buf(),
        message: format!(
            "--gpu {value:?} is not a GPU preset ({}) nor a .toml file with the GPU's [hardware] figures",
            GpuSpec::preset_names().join(", ")
        ),
    })
}

/// The GPU of `file`'s `[hardware]` table. Errors name the file and the key.
pub fn from_file(file: &Path) -> Result<GpuSpec, ImportError> {
    let bad = |message: String| ImportError::File { file: file.to_path_buf(), message };
    let text = std::fs::read_to_string(file).map_err(|e| bad(format!("cannot read: {e}")))?;
    let value: toml::Table = toml::from_str(&text).map_err(|e| bad(format!("not TOML: {e}")))?;
    let table = value.get("hardware").ok_or_else(|| bad("no [hardware] table".into()))?;
    let raw: RawHardware = table.clone().try_into().map_err(|e| bad(format!("[hardware]: {e}")))?;
    let base = match &raw.gpu {
        Some(g) => Some(GpuSpec::preset(g).ok_or_else(|| bad(format!("hardware.gpu {g:?} is not a GPU preset")))?),
        None => None,
    };
    // A positive, finite figure in the file's unit, scaled to SI; else the preset's.
    let figure = |key: &str, given: Option<f64>, scale: f64, preset: Option<f64>| match given {
        Some(x) if x.is_finite() && x > 0.0 => Ok(x * scale),
        Some(x) => Err(bad(format!("hardware.{key} = {x}: must be a positive, finite number"))),
        None => preset.ok_or_else(|| bad(format!("hardware.{key} is missing (required without a `gpu` preset)"))),
    };
    let b = base.as_ref();
    let name = raw.name.clone().or_else(|| b.map(|g| g.name.clone())).ok_or_else(|| bad("hardware.name is missing".into()))?;
    let peak_flops_fp8 = match raw.peak_tflops_fp8 {
        // 0: no FP8 tensor cores, as in a scenario.
        Some(x) if x == 0.0 => None,
        Some(x) => Some(figure("peak_tflops_fp8", Some(x), 1e12, None)?),
        None => b.and_then(|g| g.peak_flops_fp8),
    };
    Ok(GpuSpec {
        name,
        peak_flops_16bit: figure("peak_tflops_16bit", raw.peak_tflops_16bit, 1e12, b.map(|g| g.peak_flops_16bit))?,
        peak_flops_fp8,
        peak_flops_fp4: b.and_then(|g| g.peak_flops_fp4),
        memory_bytes: figure("memory_gib", raw.memory_gib, GIB_BYTES, b.map(|g| g.memory_bytes as f64))?.round() as u64,
        memory_bandwidth_bytes_per_s: figure(
            "memory_bandwidth_gbps",
            raw.memory_bandwidth_gbps,
            1e9,
            b.map(|g| g.memory_bandwidth_bytes_per_s),
        )?,
        interconnect_bandwidth_bytes_per_s: figure(
            "interconnect_gbps",
            raw.interconnect_gbps,
            1e9,
            b.map(|g| g.interconnect_bandwidth_bytes_per_s),
        )?,
        // A kernel table's GPU crosses no network: the base GPU's, for its scenarios.
        scale_out_bandwidth_bytes_per_s: b.and_then(|g| g.scale_out_bandwidth_bytes_per_s),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hardware_table_names_a_gpu_without_a_preset() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("gpu.toml");
        std::fs::write(
            &file,
            "name = \"x\"\n[hardware]\nname = \"RTX-4090\"\npeak_tflops_16bit = 165.2\npeak_tflops_fp8 = 330.3\n\
             memory_gib = 24\nmemory_bandwidth_gbps = 1008\ninterconnect_gbps = 32\ncount = 1\n",
        )
        .unwrap();
        let gpu = named(file.to_str().unwrap(), &file).unwrap();
        assert_eq!(gpu.name, "RTX-4090");
        assert_eq!((gpu.peak_flops_16bit, gpu.peak_flops_fp8), (165.2e12, Some(330.3e12)));
        assert_eq!((gpu.memory_bytes, gpu.memory_bandwidth_bytes_per_s), (24 << 30, 1008e9));
        // A preset is still a preset; a figure left out of a table without one is named.
        assert_eq!(named("h100_sxm", &file).unwrap().name, "H100-SXM");
        std::fs::write(&file, "[hardware]\nname = \"y\"\npeak_tflops_16bit = 1\n").unwrap();
        let err = named(file.to_str().unwrap(), &file).unwrap_err().to_string();
        assert!(err.contains("gpu.toml") && err.contains("hardware.memory_gib is missing"), "{err}");
        std::fs::write(&file, "[hardware]\nname = \"y\"\npeak_tflop_16bit = 1\n").unwrap();
        let err = named(file.to_str().unwrap(), &file).unwrap_err().to_string();
        assert!(err.contains("unknown field `peak_tflop_16bit`"), "{err}");
        assert!(named("RTX-4090", &file).unwrap_err().to_string().contains("not a GPU preset"));
    }
}
