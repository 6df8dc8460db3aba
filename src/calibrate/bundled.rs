//! The kernel profiles bundled with servesim (`calibration/public/`), compiled into the binary so
//! that an installed servesim has them wherever it runs: published per-op measurements of vLLM's
//! kernels on GPUs this project cannot run, imported by `calibrate import` (see
//! `calibration/public/import.sh` and docs/calibration.md).

use std::sync::OnceLock;

use super::families::Families;
use super::profile::{Profile, ProfileFacts, ProfileIndex, Provenance, pack, parse_csv, parse_provenance};
use crate::scenario::GpuSpec;

/// The engine whose kernels a bundled profile timed: the same GPU has one profile per engine,
/// since each engine picks its own kernels (its GEMM backend, attention, MoE and MLA kernels).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EngineFamily {
    Vllm,
    Sglang,
}

impl EngineFamily {
    /// As profiles' provenance names engines.
    pub fn name(self) -> &'static str {
        match self {
            EngineFamily::Vllm => "vllm",
            EngineFamily::Sglang => "sglang",
        }
    }

    /// The family of a scheduler policy's engine (`engine.policy`): SGLang's policies are
    /// named `sglang…`; every other policy servesim models runs vLLM-class kernels (TGI's
    /// cuBLAS GEMMs and FlashAttention-class attention are priced with vLLM's, with a note).
    pub fn of_policy(policy: &str) -> EngineFamily {
        if policy.starts_with("sglang") { EngineFamily::Sglang } else { EngineFamily::Vllm }
    }

    pub fn parse(name: &str) -> Option<EngineFamily> {
        match name.to_ascii_lowercase().as_str() {
            "vllm" => Some(EngineFamily::Vllm),
            "sglang" => Some(EngineFamily::Sglang),
            _ => None,
        }
    }
}

/// One bundled profile's files: the hardware preset it was measured on, its file name, its CSV,
/// its provenance and its packed index (see [`pack`]).
struct Files {
    engine: EngineFamily,
    gpu: &'static str,
    name: &'static str,
    csv_zst: &'static [u8],
    provenance: &'static str,
    index: &'static [u8],
}

macro_rules! bundled {
    ($engine:expr, $gpu:literal, $name:literal) => {
        Files {
            engine: $engine,
            gpu: $gpu,
            name: $name,
            csv_zst: include_bytes!(concat!("../../calibration/public/", $name, ".csv.zst")),
            provenance: include_str!(concat!("../../calibration/public/", $name, ".provenance.toml")),
            index: include_bytes!(concat!("../../calibration/public/", $name, ".index")),
        }
    };
}

const BUNDLED: [Files; 6] = [
    bundled!(EngineFamily::Vllm, "H100-SXM", "h100-sxm--vllm-0.24.0"),
    bundled!(EngineFamily::Vllm, "H200", "h200-sxm--vllm-0.24.0"),
    bundled!(EngineFamily::Vllm, "B200", "b200-sxm--vllm-0.24.0"),
    bundled!(EngineFamily::Vllm, "A100-80G-SXM", "a100-80g-sxm--vllm-0.14.0"),
    // SGLang 0.5.14's kernels. Its H100 tables are not bundled: their all-reduce at 1 KiB on 8
    // GPUs (38 µs between 3.3 and 3.5 µs) fails the import's physics check.
    bundled!(EngineFamily::Sglang, "H200", "h200-sxm--sglang-0.5.14"),
    bundled!(EngineFamily::Sglang, "B200", "b200-sxm--sglang-0.5.14"),
];

static LOADED: [OnceLock<Bundled>; BUNDLED.len()] = [const { OnceLock::new() }; BUNDLED.len()];

/// The whole-module rows beside a bundled profile (`<name>.families.csv.zst`, see
/// [`super::families`]): by the profile's name, and its provenance.
struct FamilyFiles {
    name: &'static str,
    csv_zst: &'static [u8],
    provenance: &'static str,
}

macro_rules! families {
    ($name:literal) => {
        FamilyFiles {
            name: $name,
            csv_zst: include_bytes!(concat!("../../calibration/public/", $name, ".families.csv.zst")),
            provenance: include_str!(concat!("../../calibration/public/", $name, ".families.provenance.toml")),
        }
    };
}

const FAMILY_FILES: [FamilyFiles; 5] = [
    families!("h100-sxm--vllm-0.24.0"),
    families!("h200-sxm--vllm-0.24.0"),
    families!("b200-sxm--vllm-0.24.0"),
    families!("h200-sxm--sglang-0.5.14"),
    families!("b200-sxm--sglang-0.5.14"),
];

/// A bundled families file, parsed (on first use by a model that needs it: tens of thousands
/// of rows, read only then, so other runs still load in milliseconds).
fn parse_families(files: &FamilyFiles) -> Families {
    let bytes = zstd::decode_all(files.csv_zst).expect("bundled families file decompresses");
    let text = String::from_utf8(bytes).expect("bundled families file is UTF-8");
    let path = std::path::Path::new(files.name);
    let rows = super::families::parse_csv(&text, path).expect("bundled families file parses");
    let provenance = toml::from_str(files.provenance).expect("bundled families provenance parses");
    Families { rows, provenance }
}

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
    /// The engine whose kernels it timed.
    pub engine: EngineFamily,
    csv_zst: &'static [u8],
    profile: OnceLock<Profile>,
    families: OnceLock<Option<Families>>,
}

impl Bundled {
    /// Its whole-module rows (MLA, DSA, fused MoE, Gated DeltaNet), where it has them.
    pub fn families(&self) -> Option<&Families> {
        self.families.get_or_init(|| FAMILY_FILES.iter().find(|f| f.name == self.name).map(parse_families)).as_ref()
    }

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
    bundled_profile_for(gpu, EngineFamily::Vllm)
}

/// The bundled profile of `engine`'s kernels measured on `gpu`'s preset; `None` where none is
/// bundled (SGLang's are for H100, H200 and B200).
pub fn bundled_profile_for(gpu: &GpuSpec, engine: EngineFamily) -> Option<&'static Bundled> {
    BUNDLED.iter().position(|b| b.gpu == gpu.name && b.engine == engine).map(load)
}

/// The bundled profile `cost.profile = "auto"` (or `"bundled"`) picks: `gpu`'s for the family of
/// the scenario's `engine.policy`, else `gpu`'s vLLM profile.
pub fn for_policy(gpu: &GpuSpec, policy: &str) -> Option<&'static Bundled> {
    bundled_profile_for(gpu, EngineFamily::of_policy(policy)).or_else(|| for_gpu(gpu))
}

/// The bundled profile named `name` (its file name without `.csv.zst`).
pub fn by_name(name: &str) -> Option<&'static Bundled> {
    BUNDLED.iter().position(|b| b.name == name).map(load)
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
    // vLLM's kernels carry over: the engines servesim's policies model ran them.
    let i = (0..BUNDLED.len())
        .filter(|&i| usable && BUNDLED[i].engine == EngineFamily::Vllm)
        .min_by(|&a, &b| distance(&BUNDLED[a]).total_cmp(&distance(&BUNDLED[b])))?;
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
        Bundled {
            name: b.name,
            gpu: b.gpu,
            provenance,
            facts,
            index,
            engine: b.engine,
            csv_zst: b.csv_zst,
            profile: OnceLock::new(),
            families: OnceLock::new(),
        }
    })
}

/// cuBLASLt's per-tensor FP8 GEMMs, timed apart from the engines' own kernels (aiconfigurator's
/// TRT-LLM rows: its FP8 `Linear` runs `cublas_scaled_mm`, the cuBLASLt call `torch._scaled_mm`
/// makes). SGLang runs a checkpoint with per-tensor FP8 scales through `torch._scaled_mm`
/// (`src/run/fp8_gemms.rs`); its own tables time only its cutlass kernel.
struct GemmFiles {
    gpu: &'static str,
    name: &'static str,
    csv_zst: &'static [u8],
    provenance: &'static str,
}

const CUBLASLT_FP8: [GemmFiles; 1] = [GemmFiles {
    gpu: "H200",
    name: "h200-sxm--trtllm-1.3.0rc20.fp8-gemm",
    csv_zst: include_bytes!("../../calibration/public/h200-sxm--trtllm-1.3.0rc20.fp8-gemm.csv.zst"),
    provenance: include_str!("../../calibration/public/h200-sxm--trtllm-1.3.0rc20.fp8-gemm.provenance.toml"),
}];

/// A bundled table of GEMMs alone, loaded: its file name and its index.
pub struct BundledGemms {
    pub name: &'static str,
    pub index: ProfileIndex,
}

static CUBLASLT_LOADED: [OnceLock<BundledGemms>; CUBLASLT_FP8.len()] = [const { OnceLock::new() }; CUBLASLT_FP8.len()];

/// cuBLASLt's per-tensor FP8 GEMMs measured on `gpu`'s preset (parsed on first use); `None`
/// where none is bundled (only the H200's are).
pub fn cublaslt_fp8_gemms(gpu: &GpuSpec) -> Option<&'static BundledGemms> {
    let i = CUBLASLT_FP8.iter().position(|f| f.gpu == gpu.name)?;
    Some(CUBLASLT_LOADED[i].get_or_init(|| {
        let f = &CUBLASLT_FP8[i];
        let provenance = parse_provenance(f.provenance, std::path::Path::new(f.name)).expect("bundled provenance parses");
        BundledGemms { name: f.name, index: ProfileIndex::new(&parse_rows(f.name, f.csv_zst, provenance)) }
    }))
}

/// The GPU presets that have a bundled profile.
pub fn gpus() -> Vec<&'static str> {
    BUNDLED.iter().filter(|b| b.engine == EngineFamily::Vllm).map(|b| b.gpu).collect()
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

    #[test]
    fn the_cublaslt_table_holds_fp8_gemms_alone_against_the_sglang_profiles_peak() {
        let h200 = GpuSpec::preset("H200").unwrap();
        let gemms = cublaslt_fp8_gemms(&h200).expect("bundled for the H200");
        assert!(gemms.index.gemm.keys().all(|key| key.0 == crate::scenario::model::Dtype::Fp8));
        assert!(gemms.index.attention.len() == 0 && gemms.index.allreduce.is_empty());
        let sglang = bundled_profile_for(&h200, EngineFamily::Sglang).unwrap();
        assert!(sglang.index.with_fp8_gemms_of(&gemms.index).is_some(), "measured against the same peaks");
        assert!(cublaslt_fp8_gemms(&GpuSpec::preset("B200").unwrap()).is_none());
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
