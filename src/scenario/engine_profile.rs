//! Engine profiles: what an engine spends outside its kernels, and the defaults it ships with,
//! per engine and version family, as data (`calibration/engine/*.toml`, compiled in).
//!
//! ```text
//!  [engine] policy, version ──select──► EngineProfile ──► CostParams' engine-time fields
//!                                                     └─► the version's defaults (max_num_seqs,
//!                                                         max_num_batched_tokens by GPU class,
//!                                                         prefix caching, multi-step streaming)
//! ```
//!
//! A kernel profile prices what runs on the GPU; an engine profile prices what the engine does
//! around it: per-step CPU time (scheduling, input preparation, sampling bookkeeping, output
//! processing) as a function of the batch, the share of it hidden behind the GPU, and the API
//! server's time per request before the scheduler sees it. The two never absorb each other's
//! error: a kernel profile holds no engine time, and an engine profile is fitted on top of
//! kernel tables that stay as measured (docs/engine-profiles.md).

use serde::Deserialize;

use super::cost_params::{self, ParamKind};
use super::{CostParams, GpuSpec, Policy};

/// A release number: `0.6.3`, `0.6.3.post1`, `v0.15.1`, `0.9.2.dev364` (the part after the
/// third number is ignored: profiles cover whole releases).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct EngineVersion {
    pub major: u32,
    pub minor: u32,
    pub patch: u32,
}

impl EngineVersion {
    /// Parses `text`; `None` unless it is one to three dot-separated whole numbers (an optional
    /// leading `v`, and anything after a third number's suffix, such as `.post1` or `rc1`).
    pub fn parse(text: &str) -> Option<EngineVersion> {
        let text = text.trim();
        let text = text.strip_prefix('v').unwrap_or(text);
        let mut numbers = [0u32; 3];
        let mut parts = text.split('.');
        for (i, slot) in numbers.iter_mut().enumerate() {
            let Some(part) = parts.next() else {
                // "0.6" means 0.6.0; a bare "0" is not a release.
                return (i >= 2).then_some(EngineVersion { major: numbers[0], minor: numbers[1], patch: 0 });
            };
            let digits: String = part.chars().take_while(char::is_ascii_digit).collect();
            // Only the last number may carry a suffix (`1rc1`, `3post1`); the others are whole.
            if digits.is_empty() || (i < 2 && digits.len() != part.len()) || digits.len() > 6 {
                return None;
            }
            *slot = digits.parse().ok()?;
            if i == 2 {
                break;
            }
        }
        Some(EngineVersion { major: numbers[0], minor: numbers[1], patch: numbers[2] })
    }
}

impl std::fmt::Display for EngineVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

/// How multi-step scheduling (`num_scheduler_steps` > 1) hands tokens to the client.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MultiStepStreaming {
    /// One chunk per window, at its end (vLLM 0.6.0–0.6.2).
    Window,
    /// Every step's token as it is sampled (vLLM 0.6.3 onwards: the output processor runs after
    /// each step of the window).
    EveryStep,
}

/// One engine and version family's profile.
#[derive(Clone, Debug, PartialEq)]
pub struct EngineProfile {
    /// The file's stem, e.g. `vllm-v1-0.9`.
    pub name: String,
    /// `vllm`, `tgi` or `sglang`.
    pub engine: String,
    pub policy: Policy,
    /// Releases it covers: from `min_version` (inclusive) to `below_version` (exclusive; `None`:
    /// every later one).
    pub min_version: EngineVersion,
    pub below_version: Option<EngineVersion>,
    /// The release a scenario that names none is taken to run: the family's newest known one.
    pub default_version: EngineVersion,
    /// One line for reports: what the family is and how its values were derived.
    pub description: String,
    /// `CostParams` fields and their values, in the file's order, each with its source.
    pub engine_time: Vec<(String, f64, String)>,
    pub defaults: EngineDefaults,
}

/// What an engine of the family chooses when a flag is not given.
#[derive(Clone, Debug, PartialEq)]
pub struct EngineDefaults {
    pub max_num_seqs: u32,
    pub max_num_batched_tokens: Option<u32>,
    /// Larger defaults on large GPUs (vLLM ≥ 0.9: ≥ 70 GiB and not an A100).
    pub large_gpu: Option<LargeGpuDefaults>,
    pub enable_prefix_caching: bool,
    pub multi_step_streaming: MultiStepStreaming,
}

#[derive(Clone, Debug, PartialEq)]
pub struct LargeGpuDefaults {
    pub min_memory_gib: f64,
    /// GPUs (preset names, case-insensitive substrings) that keep the small defaults whatever
    /// their memory.
    pub except: Vec<String>,
    pub max_num_seqs: u32,
    pub max_num_batched_tokens: u32,
}

impl EngineProfile {
    /// Whether `version` is one of the family's releases.
    pub fn covers(&self, version: EngineVersion) -> bool {
        version >= self.min_version && self.below_version.is_none_or(|below| version < below)
    }

    /// The engine-time value called `name`, if the profile sets it.
    pub fn engine_time_value(&self, name: &str) -> Option<f64> {
        self.engine_time.iter().find(|(n, _, _)| n == name).map(|(_, value, _)| *value)
    }

    /// Replaces the engine-time value called `name` (where the profile sets it and it differs)
    /// with `value`, for `source`: a scenario key that changes what the release would do.
    pub fn override_engine_time(&mut self, name: &str, value: f64, source: &str) {
        for (n, v, why) in &mut self.engine_time {
            if n == name && *v != value {
                *v = value;
                *why = source.to_string();
            }
        }
    }

    /// `params` with this profile's engine-time values in place.
    pub fn apply(&self, params: &mut CostParams) {
        for (name, value, _) in &self.engine_time {
            cost_params::find(name).expect("checked when the profile was read").set(params, *value);
        }
    }

    /// `max_num_seqs` and `max_num_batched_tokens` (if the family sets one) this family picks
    /// on `gpu` (`None`: the GPU is not known yet, which keeps the small GPUs' defaults).
    pub fn batch_defaults(&self, gpu: Option<&GpuSpec>) -> (u32, Option<u32>) {
        let d = &self.defaults;
        match (&d.large_gpu, gpu) {
            (Some(large), Some(gpu))
                if gpu.memory_bytes as f64 >= large.min_memory_gib * (1u64 << 30) as f64
                    && !large.except.iter().any(|e| gpu.name.to_ascii_lowercase().contains(&e.to_ascii_lowercase())) =>
            {
                (large.max_num_seqs, Some(large.max_num_batched_tokens))
            }
            _ => (d.max_num_seqs, d.max_num_batched_tokens),
        }
    }

    /// The versions it covers, for messages: `0.9.0 to below 0.16.0`, `2.3.0 onwards`.
    pub fn versions(&self) -> String {
        match self.below_version {
            Some(below) => format!("{} to below {below}", self.min_version),
            None => format!("{} onwards", self.min_version),
        }
    }
}

/// The bundled profiles' files, by name.
const BUNDLED: [(&str, &str); 9] = [
    ("vllm-0.5", include_str!("../../calibration/engine/vllm-0.5.toml")),
    ("vllm-0.6", include_str!("../../calibration/engine/vllm-0.6.toml")),
    ("vllm-0.6.3", include_str!("../../calibration/engine/vllm-0.6.3.toml")),
    ("vllm-v1-0.8", include_str!("../../calibration/engine/vllm-v1-0.8.toml")),
    ("vllm-v1-0.9", include_str!("../../calibration/engine/vllm-v1-0.9.toml")),
    ("vllm-v1-0.14", include_str!("../../calibration/engine/vllm-v1-0.14.toml")),
    ("vllm-v1-0.19", include_str!("../../calibration/engine/vllm-v1-0.19.toml")),
    ("tgi-2.3", include_str!("../../calibration/engine/tgi-2.3.toml")),
    ("sglang-0.4", include_str!("../../calibration/engine/sglang-0.4.toml")),
];

/// Every bundled profile, parsed.
///
/// # Panics
///
/// If a bundled file is malformed: the unit tests read every one.
pub fn bundled() -> Vec<EngineProfile> {
    BUNDLED
        .iter()
        .map(|(name, text)| parse(name, text).unwrap_or_else(|e| panic!("calibration/engine/{name}.toml: {e}")))
        .collect()
}

/// The bundled profile called `name`.
pub fn bundled_named(name: &str) -> Option<EngineProfile> {
    bundled().into_iter().find(|p| p.name == name)
}

/// Which profile a scenario runs: the one of `policy` covering `version`, or of `policy`'s
/// newest family when no version is given. `Err` says why none applies, listing what does.
pub fn select(policy: Policy, version: Option<EngineVersion>) -> Result<EngineProfile, String> {
    let of_policy: Vec<EngineProfile> = bundled().into_iter().filter(|p| p.policy == policy).collect();
    let listing = || of_policy.iter().map(|p| format!("{} ({})", p.name, p.versions())).collect::<Vec<_>>().join(", ");
    match version {
        Some(v) => of_policy.iter().find(|p| p.covers(v)).cloned().ok_or_else(|| {
            if of_policy.is_empty() {
                format!("no engine profile models policy {:?}", policy.name())
            } else {
                format!("no engine profile of policy {:?} covers {v}; known: {}", policy.name(), listing())
            }
        }),
        None => of_policy
            .iter()
            .max_by_key(|p| p.min_version)
            .cloned()
            .ok_or_else(|| format!("no engine profile models policy {:?}", policy.name())),
    }
}

/// The policy an engine's release runs when the scenario names none: vLLM's V0 engine before
/// 0.8, its V1 engine from 0.8 (where V1 became the default).
pub fn policy_of_vllm_version(version: EngineVersion) -> Policy {
    if version < (EngineVersion { major: 0, minor: 8, patch: 0 }) { Policy::VllmV0 } else { Policy::VllmV1 }
}

// ---- the file format ---------------------------------------------------------------------------

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    profile: RawHeader,
    engine_time: toml::Table,
    defaults: RawDefaults,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawHeader {
    engine: String,
    policy: String,
    min_version: String,
    below_version: Option<String>,
    default_version: String,
    description: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDefaults {
    max_num_seqs: u32,
    max_num_batched_tokens: Option<u32>,
    large_gpu: Option<RawLargeGpu>,
    enable_prefix_caching: bool,
    multi_step_streaming: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLargeGpu {
    min_memory_gib: f64,
    #[serde(default)]
    except: Vec<String>,
    max_num_seqs: u32,
    max_num_batched_tokens: u32,
}

/// The engine-time keys a profile may set: the CPU and front-end parameters of [`CostParams`],
/// never a kernel efficiency (an engine profile must not absorb kernel error).
pub const ENGINE_TIME_KEYS: [&str; 8] = [
    "step_overhead_eager_us",
    "step_overhead_graph_us",
    "prefill_step_overhead_us",
    "prefill_seq_overhead_us",
    "seq_overhead_us",
    "frontend_overhead_us",
    "frontend_per_token_us",
    "cpu_overlap",
];

/// Parses a profile file's `text`; `name` is its stem. Errors name the key and value.
pub fn parse(name: &str, text: &str) -> Result<EngineProfile, String> {
    let raw: RawFile = toml::from_str(text).map_err(|e| e.to_string().trim_end().replace('\n', " "))?;
    let version = |key: &str, text: &str| {
        EngineVersion::parse(text).ok_or_else(|| format!("profile.{key} = {text:?} is not a release number like 0.6.3"))
    };
    let policy = match raw.profile.policy.as_str() {
        "vllm-v0" => Policy::VllmV0,
        "vllm-v1" => Policy::VllmV1,
        "tgi" => Policy::Tgi,
        "sglang" => Policy::Sglang,
        other => return Err(format!("profile.policy = {other:?}: known: vllm-v0, vllm-v1, tgi, sglang")),
    };
    let min_version = version("min_version", &raw.profile.min_version)?;
    let below_version = raw.profile.below_version.as_deref().map(|b| version("below_version", b)).transpose()?;
    let default_version = version("default_version", &raw.profile.default_version)?;
    let mut engine_time = Vec::new();
    for (key, value) in &raw.engine_time {
        if !ENGINE_TIME_KEYS.contains(&key.as_str()) {
            return Err(format!("engine_time.{key}: not an engine-time parameter; known: {}", ENGINE_TIME_KEYS.join(", ")));
        }
        let table = value.as_table().ok_or_else(|| format!("engine_time.{key}: expected {{ value = …, source = \"…\" }}"))?;
        let number = table.get("value").and_then(|v| v.as_float().or_else(|| v.as_integer().map(|i| i as f64)));
        let Some(number) = number else { return Err(format!("engine_time.{key}.value: expected a number")) };
        let source = table.get("source").and_then(|s| s.as_str()).filter(|s| !s.trim().is_empty());
        let Some(source) = source else { return Err(format!("engine_time.{key}.source: every value names its source")) };
        if let Some(extra) = table.keys().find(|k| *k != "value" && *k != "source") {
            return Err(format!("engine_time.{key}.{extra}: unknown key (value, source)"));
        }
        let spec = cost_params::find(key).expect("ENGINE_TIME_KEYS are cost parameters");
        spec.kind.check(number).map_err(|reason| format!("engine_time.{key}.value = {number}: {reason}"))?;
        debug_assert!(matches!(spec.kind, ParamKind::NonNegativeMicros | ParamKind::Share));
        engine_time.push((key.clone(), number, source.to_string()));
    }
    let d = raw.defaults;
    let multi_step_streaming = match d.multi_step_streaming.as_deref() {
        None | Some("window") => MultiStepStreaming::Window,
        Some("every-step") => MultiStepStreaming::EveryStep,
        Some(other) => return Err(format!("defaults.multi_step_streaming = {other:?}: known: window, every-step")),
    };
    let profile = EngineProfile {
        name: name.to_string(),
        engine: raw.profile.engine,
        policy,
        min_version,
        below_version,
        default_version,
        description: raw.profile.description,
        engine_time,
        defaults: EngineDefaults {
            max_num_seqs: d.max_num_seqs,
            max_num_batched_tokens: d.max_num_batched_tokens,
            large_gpu: d.large_gpu.map(|l| LargeGpuDefaults {
                min_memory_gib: l.min_memory_gib,
                except: l.except,
                max_num_seqs: l.max_num_seqs,
                max_num_batched_tokens: l.max_num_batched_tokens,
            }),
            enable_prefix_caching: d.enable_prefix_caching,
            multi_step_streaming,
        },
    };
    if !profile.covers(profile.default_version) {
        return Err(format!("profile.default_version {} is outside {}", profile.default_version, profile.versions()));
    }
    Ok(profile)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(text: &str) -> EngineVersion {
        EngineVersion::parse(text).unwrap_or_else(|| panic!("{text}"))
    }

    #[test]
    fn release_numbers_parse_as_engines_write_them() {
        assert_eq!(v("0.6.3"), EngineVersion { major: 0, minor: 6, patch: 3 });
        assert_eq!(v("0.6.3.post1"), v("0.6.3"));
        assert_eq!(v("v0.15.1"), EngineVersion { major: 0, minor: 15, patch: 1 });
        assert_eq!(v("0.9.2.dev364"), v("0.9.2"));
        assert_eq!(v("2.3"), v("2.3.0"));
        assert_eq!(v("1.3.0rc20"), v("1.3.0"));
        for bad in ["", "0", "latest", "0.x.1", "0.6a.1", "-1.2.3", "1234567.0.0"] {
            assert_eq!(EngineVersion::parse(bad), None, "{bad}");
        }
        assert!(v("0.10.0") > v("0.9.2") && v("0.6.3") < v("0.6.10"));
    }

    #[test]
    fn every_bundled_profile_reads_and_families_do_not_overlap() {
        let profiles = bundled();
        assert_eq!(profiles.len(), BUNDLED.len());
        for p in &profiles {
            assert!(!p.engine_time.is_empty(), "{}", p.name);
            for q in &profiles {
                if p.name != q.name && p.policy == q.policy {
                    assert!(!p.covers(q.min_version) || !q.covers(p.min_version), "{} and {} overlap", p.name, q.name);
                    assert!(!p.covers(q.default_version), "{} covers {}'s default", p.name, q.name);
                }
            }
        }
    }

    #[test]
    fn a_version_picks_its_family_and_none_picks_the_newest() {
        assert_eq!(select(Policy::VllmV0, Some(v("0.5.4"))).unwrap().name, "vllm-0.5");
        assert_eq!(select(Policy::VllmV0, Some(v("0.6.0"))).unwrap().name, "vllm-0.6");
        assert_eq!(select(Policy::VllmV0, Some(v("0.6.3"))).unwrap().name, "vllm-0.6.3");
        assert_eq!(select(Policy::VllmV1, Some(v("0.8.5"))).unwrap().name, "vllm-v1-0.8");
        assert_eq!(select(Policy::VllmV1, Some(v("0.11.0"))).unwrap().name, "vllm-v1-0.9");
        assert_eq!(select(Policy::VllmV1, Some(v("0.13.0"))).unwrap().name, "vllm-v1-0.9");
        assert_eq!(select(Policy::VllmV1, Some(v("0.14.0"))).unwrap().name, "vllm-v1-0.14");
        assert_eq!(select(Policy::VllmV1, Some(v("0.15.1"))).unwrap().name, "vllm-v1-0.14");
        assert_eq!(select(Policy::VllmV1, Some(v("0.19.0"))).unwrap().name, "vllm-v1-0.19");
        assert_eq!(select(Policy::VllmV1, None).unwrap().name, "vllm-v1-0.19");
        assert_eq!(select(Policy::Tgi, None).unwrap().name, "tgi-2.3");
        let e = select(Policy::VllmV1, Some(v("0.5.4"))).unwrap_err();
        assert!(e.contains("0.5.4") && e.contains("vllm-v1-0.8 (0.8.0 to below 0.9.0)"), "{e}");
        assert_eq!(policy_of_vllm_version(v("0.6.3")), Policy::VllmV0);
        assert_eq!(policy_of_vllm_version(v("0.8.0")), Policy::VllmV1);
    }

    #[test]
    fn large_gpus_get_larger_batches_from_vllm_0_9_but_not_an_a100() {
        let p = select(Policy::VllmV1, Some(v("0.11.0"))).unwrap();
        let gpu = |name: &str| GpuSpec::preset(name).unwrap();
        assert_eq!(p.batch_defaults(Some(&gpu("H100-SXM"))), (1024, Some(8192)));
        assert_eq!(p.batch_defaults(Some(&gpu("MI300X"))), (1024, Some(8192)));
        assert_eq!(p.batch_defaults(Some(&gpu("A100-80G-SXM"))), (256, Some(2048)));
        assert_eq!(p.batch_defaults(Some(&gpu("L40S"))), (256, Some(2048)));
        assert_eq!(p.batch_defaults(None), (256, Some(2048)));
        let old = select(Policy::VllmV1, Some(v("0.8.4"))).unwrap();
        assert_eq!(old.batch_defaults(Some(&gpu("H100-SXM"))), (256, Some(2048)));
    }

    #[test]
    fn malformed_profiles_are_refused_naming_the_key() {
        let good = r#"
[profile]
engine = "vllm"
policy = "vllm-v1"
min_version = "0.9.0"
default_version = "0.9.2"
description = "a test family"

[engine_time]
seq_overhead_us = { value = 10.0, source = "a test" }
cpu_overlap = { value = 0.0, source = "a test" }

[defaults]
max_num_seqs = 256
enable_prefix_caching = true
"#;
        assert!(parse("x", good).is_ok());
        let cases = [
            (good.replace("policy = \"vllm-v1\"", "policy = \"trtllm\""), "profile.policy"),
            (good.replacen("[engine_time]", "[engine_time]\ngemm_efficiency = { value = 0.5, source = \"x\" }", 1), "engine_time.gemm_efficiency"),
            (good.replace("cpu_overlap = { value = 0.0,", "cpu_overlap = { value = 1.5,"), "engine_time.cpu_overlap.value = 1.5"),
            (good.replace("cpu_overlap = { value = 0.0, source = \"a test\" }", "cpu_overlap = { value = 0.5 }"), "engine_time.cpu_overlap.source"),
            (good.replace("cpu_overlap = { value = 0.0, source = \"a test\" }", "cpu_overlap = { value = 0.5, source = \"a\", by = 1 }"), "engine_time.cpu_overlap.by"),
            (good.replace("min_version = \"0.9.0\"", "min_version = \"nine\""), "profile.min_version"),
            (good.replace("default_version = \"0.9.2\"", "default_version = \"0.8.0\""), "profile.default_version 0.8.0"),
            (good.replacen("[defaults]", "[defaults]\nbogus = 1", 1), "bogus"),
            (good.replacen("enable_prefix_caching = true", "enable_prefix_caching = true\nmulti_step_streaming = \"often\"", 1), "defaults.multi_step_streaming"),
        ];
        for (text, want) in cases {
            let e = parse("x", &text).unwrap_err();
            assert!(e.contains(want), "{want}: {e}");
        }
    }
}
