//! The kernel profiles bundled with servesim (`calibration/public/`), compiled into the binary so
//! that an installed servesim has them wherever it runs: published per-op measurements of vLLM's
//! kernels on GPUs this project cannot run, imported by `calibrate import` (see
//! `calibration/public/import.sh` and docs/calibration.md).

use std::sync::OnceLock;

use super::profile::{Profile, ProfileFacts, ProfileIndex, Provenance, pack, parse_csv, parse_provenance};
use crate::scenario::GpuSpec;

/// One bundled profile's files: the hardware preset it was measured on, its file name, its CSV,
/// its provenance and its packed index (see [`pack`]).
struct Files {
    gpu: &'static str,
    name: &'static str,
    csv_zst: &'static [u8],
    provenance: &'static str,
    index: &'static [u8],
}

macro_rules! bundled {
    ($gpu:literal, $name:literal) => {
        Files {
            gpu: $gpu,
            name: $name,
            csv_zst: include_bytes!(concat!("../../calibration/public/", $name, ".csv.zst")),
            provenance: include_str!(concat!("../../calibration/public/", $name, ".provenance.toml")),
            index: include_bytes!(concat!("../../calibration/public/", $name, ".index")),
        }
    };
}

const BUNDLED: [Files; 4] = [
    bundled!("H100-SXM", "h100-sxm--vllm-0.24.0"),
    bundled!("H200", "h200-sxm--vllm-0.24.0"),
    bundled!("B200", "b200-sxm--vllm-0.24.0"),
    bundled!("A100-80G-SXM", "a100-80g-sxm--vllm-0.14.0"),
];

static LOADED: [OnceLock<Bundled>; 4] = [OnceLock::new(), OnceLock::new(), OnceLock::new(), OnceLock::new()];

/// A bundled profile, loaded: what pricing reads (its provenance, its facts and its index, whose
/// curves are built when first read), and its rows, parsed from the CSV only when asked for.
pub struct Bundled {
    /// Its file name.
    pub name: &'static str,
    /// The hardware preset it was measured on.
    pub gpu: &'static str,
    pub provenance: Provenance,
    pub facts: ProfileFacts,
    pub index: ProfileIndex,
    csv_zst: &'static [u8],
    profile: OnceLock<Profile>,
}

impl Bundled {
    /// The whole profile, rows and all (parsed from its CSV on first use: about 0.1 s).
    pub fn profile(&self) -> &Profile {
        self.profile.get_or_init(|| parse_rows(self.name, self.csv_zst, self.provenance.clone()))
    }
}

/// A bundled CSV's rows with `provenance`, parsed; `name` labels them.
fn parse_rows(name: &str, csv_zst: &[u8], provenance: Provenance) -> Profile {
    let bytes = zstd::decode_all(csv_zst).expect("bundled profile decompresses");
    let text = String::from_utf8(bytes).expect("bundled profile is UTF-8");
    let rows = parse_csv(&text, std::path::Path::new(name), &provenance.peak.peak()).expect("bundled profile parses");
    Profile { rows, provenance }
}

/// The bundled profile measured on `gpu`'s preset; `None` for a GPU without one (MI300X, L40S,
/// a custom GPU).
pub fn for_gpu(gpu: &GpuSpec) -> Option<&'static Bundled> {
    BUNDLED.iter().position(|b| b.gpu == gpu.name).map(load)
}

/// For a GPU without a bundled profile, the bundled GPU nearest to it by datasheet: the least
/// distance in (ln dense 16-bit FLOP/s, ln memory bandwidth), since those two peaks are what a
/// kernel's utilisation is relative to.
pub fn nearest(gpu: &GpuSpec) -> Option<&'static Bundled> {
    let distance = |b: &Files| -> f64 {
        let other = GpuSpec::preset(b.gpu).expect("a bundled GPU is a preset");
        let flops = (gpu.peak_flops_16bit / other.peak_flops_16bit).ln();
        let bandwidth = (gpu.memory_bandwidth_bytes_per_s / other.memory_bandwidth_bytes_per_s).ln();
        flops.hypot(bandwidth)
    };
    let usable = gpu.peak_flops_16bit > 0.0 && gpu.memory_bandwidth_bytes_per_s > 0.0;
    let i = (0..BUNDLED.len()).filter(|_| usable).min_by(|&a, &b| distance(&BUNDLED[a]).total_cmp(&distance(&BUNDLED[b])))?;
    Some(load(i))
}

/// The `i`th bundled profile, loaded once per process.
fn load(i: usize) -> &'static Bundled {
    LOADED[i].get_or_init(|| {
        let b = &BUNDLED[i];
        // The files are part of the build, checked by the tests below and tests/calibrate_import.rs:
        // failing to read them is a broken build, not bad input.
        let provenance = parse_provenance(b.provenance, std::path::Path::new(b.name)).expect("bundled provenance parses");
        let (index, facts) = pack::read(b.index).unwrap_or_else(|e| panic!("bundled {}.index: {e}", b.name));
        Bundled { name: b.name, gpu: b.gpu, provenance, facts, index, csv_zst: b.csv_zst, profile: OnceLock::new() }
    })
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
        let nearest_to = |name: &str| nearest(&GpuSpec::preset(name).unwrap()).map(|b| b.gpu);
        // MI300X: 1307 TFLOP/s, 5.3 TB/s; H200 (989, 4.8) is nearer than B200 (2250, 8.0) or
        // H100 (989, 3.35).
        assert_eq!(nearest_to("MI300X"), Some("H200"));
        // L40S: 362 TFLOP/s, 0.86 TB/s; A100 (312, 2.0) is the nearest.
        assert_eq!(nearest_to("L40S"), Some("A100-80G-SXM"));
        for gpu in gpus() {
            assert_eq!(nearest_to(gpu), Some(gpu), "a bundled GPU is nearest to itself");
        }
    }

    /// Each packed index is this crate's own index of its CSV, byte for byte, and reads back as
    /// the index the CSV gives; `SERVESIM_BLESS=1` rewrites the packed files (after
    /// `calibration/public/import.sh`, or a change to how an index is built).
    #[test]
    fn each_packed_index_is_its_csvs_index() {
        let bless = std::env::var_os("SERVESIM_BLESS").is_some();
        for (i, files) in BUNDLED.iter().enumerate() {
            let provenance = parse_provenance(files.provenance, std::path::Path::new(files.name)).unwrap();
            let profile = parse_rows(files.name, files.csv_zst, provenance);
            let packed = pack::write(&profile);
            let path = format!("{}/calibration/public/{}.index", env!("CARGO_MANIFEST_DIR"), files.name);
            if bless {
                std::fs::write(&path, &packed).unwrap();
                continue;
            }
            assert!(
                packed == files.index,
                "{path} is not the index of its CSV: run `SERVESIM_BLESS=1 cargo test --lib bundled` and commit it"
            );
            let bundled = load(i);
            assert_eq!(bundled.facts, ProfileFacts::of(&profile.rows));
            assert_eq!(bundled.index, ProfileIndex::new(&profile), "{} reads back as another index", files.name);
        }
    }
}
