//! The kernel profiles bundled with servesim (`calibration/public/`), compiled into the binary so
//! that an installed servesim has them wherever it runs: published per-op measurements of vLLM's
//! kernels on GPUs this project cannot run, imported by `calibrate import` (see
//! `calibration/public/import.sh` and docs/calibration.md).

use std::sync::OnceLock;

use super::profile::{Profile, parse_csv, parse_provenance};
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
    BUNDLED.iter().position(|b| b.gpu == gpu.name).map(load)
}

/// For a GPU without a bundled profile, the bundled GPU nearest to it by datasheet: the least
/// distance in (ln dense 16-bit FLOP/s, ln memory bandwidth), since those two peaks are what a
/// kernel's utilisation is relative to. Its name, its profile and its preset's name.
pub fn nearest(gpu: &GpuSpec) -> Option<(&'static str, &'static Profile, &'static str)> {
    let distance = |b: &Bundled| -> f64 {
        let other = GpuSpec::preset(b.gpu).expect("a bundled GPU is a preset");
        let flops = (gpu.peak_flops_16bit / other.peak_flops_16bit).ln();
        let bandwidth = (gpu.memory_bandwidth_bytes_per_s / other.memory_bandwidth_bytes_per_s).ln();
        flops.hypot(bandwidth)
    };
    let usable = gpu.peak_flops_16bit > 0.0 && gpu.memory_bandwidth_bytes_per_s > 0.0;
    let i = (0..BUNDLED.len()).filter(|_| usable).min_by(|&a, &b| distance(&BUNDLED[a]).total_cmp(&distance(&BUNDLED[b])))?;
    let (name, profile) = load(i);
    Some((name, profile, BUNDLED[i].gpu))
}

/// The `i`th bundled profile, parsed once per process.
fn load(i: usize) -> (&'static str, &'static Profile) {
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
    (b.name, profile)
}

/// The GPU presets that have a bundled profile.
pub fn gpus() -> Vec<&'static str> {
    BUNDLED.iter().map(|b| b.gpu).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gpus_without_a_profile_borrow_the_nearest_by_datasheet() {
        let nearest_to = |name: &str| nearest(&GpuSpec::preset(name).unwrap()).map(|(_, _, gpu)| gpu);
        // MI300X: 1307 TFLOP/s, 5.3 TB/s; H200 (989, 4.8) is nearer than B200 (2250, 8.0) or
        // H100 (989, 3.35).
        assert_eq!(nearest_to("MI300X"), Some("H200"));
        // L40S: 362 TFLOP/s, 0.86 TB/s; A100 (312, 2.0) is the nearest.
        assert_eq!(nearest_to("L40S"), Some("A100-80G-SXM"));
        for gpu in gpus() {
            assert_eq!(nearest_to(gpu), Some(gpu), "a bundled GPU is nearest to itself");
        }
    }
}
