//! The kernel profiles bundled with servesim (`calibration/public/`), compiled into the binary so
//! that an installed servesim has them wherever it runs: published per-op measurements of vLLM's
//! kernels on GPUs this project cannot run, imported by `calibrate import` (see
//! `calibration/public/import.sh` and docs/calibration.md).

use std::sync::OnceLock;

use crate::calibrate::profile::{Profile, parse_csv, parse_provenance};
use crate::scenario::GpuSpec;

/// One bundled profile: the hardware preset it was measured on, its file name, and its files.
struct Bundled {
    gpu: &'static str,
    name: &'static str,
    csv_zst: &'static [u8],
    provenance: &'static str,
}

macro_rules! bundled {
    ($gpu:literal, $name:literal) => {
        Bundled {
            gpu: $gpu,
            name: $name,
            csv_zst: include_bytes!(concat!("../../calibration/public/", $name, ".csv.zst")),
            provenance: include_str!(concat!("../../calibration/public/", $name, ".provenance.toml")),
        }
    };
}

const BUNDLED: [Bundled; 4] = [
    bundled!("H100-SXM", "h100-sxm--vllm-0.24.0"),
    bundled!("H200", "h200-sxm--vllm-0.24.0"),
    bundled!("B200", "b200-sxm--vllm-0.24.0"),
    bundled!("A100-80G-SXM", "a100-80g-sxm--vllm-0.14.0"),
];

static LOADED: [OnceLock<Profile>; 4] = [OnceLock::new(), OnceLock::new(), OnceLock::new(), OnceLock::new()];

/// The bundled profile measured on `gpu`'s preset, by name, parsed once per process; `None` for a
/// GPU without one (MI300X, L40S, a custom GPU).
pub fn for_gpu(gpu: &GpuSpec) -> Option<(&'static str, &'static Profile)> {
    let i = BUNDLED.iter().position(|b| b.gpu == gpu.name)?;
    let b = &BUNDLED[i];
    let profile = LOADED[i].get_or_init(|| {
        // The files are part of the build, checked by tests/calibrate_import.rs: failing to read
        // them is a broken build, not bad input.
        let file = std::path::Path::new(b.name);
        let provenance = parse_provenance(b.provenance, file).expect("bundled provenance parses");
        let bytes = zstd::decode_all(b.csv_zst).expect("bundled profile decompresses");
        let text = String::from_utf8(bytes).expect("bundled profile is UTF-8");
        let rows = parse_csv(&text, file, &provenance.peak.peak()).expect("bundled profile parses");
        Profile { rows, provenance }
    });
    Some((b.name, profile))
}

/// The GPU presets that have a bundled profile.
pub fn gpus() -> Vec<&'static str> {
    BUNDLED.iter().map(|b| b.gpu).collect()
}
