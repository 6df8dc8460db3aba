//! What each modelled engine release accepts on its command line, as data
//! (`calibration/engine/flags/*.toml`, compiled in): the flag table a deploy command is checked
//! against, the release's container image and pip pin, and how it joins prefill and decode
//! instances.
//!
//! The tables are read off each release's documentation or source (every file names its source),
//! apart from the code that writes commands: a flag the code emits that the pinned release does
//! not have is caught, not assumed.

use std::collections::BTreeSet;

use serde::Deserialize;

/// One release's command line.
#[derive(Clone, Debug, PartialEq)]
pub struct FlagTable {
    /// The engine profile it belongs to (`vllm-0.6.3`, `tgi-2.3`).
    pub profile: &'static str,
    /// The release the table is for.
    pub release: String,
    /// Where the flags were read.
    pub source: String,
    /// The release's official container image (`vllm/vllm-openai:v0.6.3`).
    pub image: String,
    /// `pip install` requirement (`vllm==0.6.3`); empty when the engine is not installed by pip.
    pub pip: String,
    pub flags: BTreeSet<String>,
    /// Environment variables the release reads that a command may set.
    pub env: BTreeSet<String>,
    /// How prefill and decode instances are joined, for releases that have disaggregated prefill.
    pub pd_proxy: Option<PdProxy>,
}

/// A release's prefill/decode disaggregation: the KV connector and the proxy that sends each
/// request to a prefill instance, then to a decode instance.
#[derive(Clone, Debug, PartialEq, Deserialize)]
pub struct PdProxy {
    pub connector: String,
    pub prefill_role: String,
    pub decode_role: String,
    /// `--kv-transfer-config` of a prefill instance and of a decode instance (JSON).
    pub prefill_kv_transfer_config: String,
    pub decode_kv_transfer_config: String,
    /// Environment the instances need (`NAME=value`), or may set (a bare name).
    #[serde(default)]
    pub env: Vec<String>,
    /// The proxy program, as a path inside the engine's repository at that release.
    pub script: String,
    /// The proxy's flags, in the order its example gives them.
    pub args: Vec<String>,
    pub source: String,
}

// Unknown keys are allowed: the files also carry, for people, the release's documentation page,
// the planner's flags checked one by one, and the values some flags accept. The keys read here
// are all required, so a misspelt one fails.
#[derive(Deserialize)]
struct RawTable {
    release: String,
    #[allow(dead_code)] // what was read, for people; `release` is what commands pin
    release_read: Option<String>,
    source: String,
    image: String,
    pip: String,
    flags: Vec<String>,
    #[serde(default)]
    env: Vec<String>,
    #[allow(dead_code)]
    complete: Option<bool>,
    pd_proxy: Option<PdProxy>,
}

const BUNDLED: [(&str, &str); 9] = [
    ("vllm-0.5", include_str!("../../../calibration/engine/flags/vllm-0.5.toml")),
    ("vllm-0.6", include_str!("../../../calibration/engine/flags/vllm-0.6.toml")),
    ("vllm-0.6.3", include_str!("../../../calibration/engine/flags/vllm-0.6.3.toml")),
    ("vllm-v1-0.8", include_str!("../../../calibration/engine/flags/vllm-v1-0.8.toml")),
    ("vllm-v1-0.9", include_str!("../../../calibration/engine/flags/vllm-v1-0.9.toml")),
    ("vllm-v1-0.14", include_str!("../../../calibration/engine/flags/vllm-v1-0.14.toml")),
    ("vllm-v1-0.19", include_str!("../../../calibration/engine/flags/vllm-v1-0.19.toml")),
    ("tgi-2.3", include_str!("../../../calibration/engine/flags/tgi-2.3.toml")),
    ("sglang-0.4", include_str!("../../../calibration/engine/flags/sglang-0.4.toml")),
];

fn parse(profile: &'static str, text: &str) -> Result<FlagTable, String> {
    let raw: RawTable = toml::from_str(text).map_err(|e| e.to_string())?;
    let flags: BTreeSet<String> = raw.flags.iter().cloned().collect();
    if flags.len() != raw.flags.len() {
        return Err("a flag is listed twice".into());
    }
    if let Some(bad) = flags.iter().find(|f| !f.starts_with("--") || f.contains(char::is_whitespace)) {
        return Err(format!("flags: {bad:?} is not a long flag"));
    }
    Ok(FlagTable {
        profile,
        release: raw.release,
        source: raw.source,
        image: raw.image,
        pip: raw.pip,
        flags,
        env: raw.env.into_iter().collect(),
        pd_proxy: raw.pd_proxy,
    })
}

/// The flag table of the engine profile called `profile`, if one is bundled.
///
/// # Panics
///
/// If a bundled table is malformed: the unit tests read every one.
pub fn table(profile: &str) -> Option<FlagTable> {
    BUNDLED
        .iter()
        .find(|(name, _)| *name == profile)
        .map(|(name, text)| parse(name, text).unwrap_or_else(|e| panic!("calibration/engine/flags/{name}.toml: {e}")))
}

/// The profile names that have a table.
pub fn profiles() -> impl Iterator<Item = &'static str> {
    BUNDLED.iter().map(|(name, _)| *name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::engine_profile;

    /// Every engine profile has a table, every table parses, and each names the release its
    /// profile runs by default.
    #[test]
    fn every_engine_profile_has_a_table_of_its_default_release() {
        let mut names: Vec<&str> = profiles().collect();
        names.sort_unstable();
        let mut expected: Vec<String> = engine_profile::bundled().into_iter().map(|p| p.name).collect();
        expected.sort_unstable();
        assert_eq!(names, expected);
        for profile in engine_profile::bundled() {
            let t = table(&profile.name).unwrap();
            assert_eq!(t.release, profile.default_version.to_string(), "{}", profile.name);
            assert!(t.flags.len() >= 20, "{}: {} flags", profile.name, t.flags.len());
            assert!(t.image.contains(&t.release), "{}: image {}", profile.name, t.image);
            // A post-release of the modelled one (SGLang's 0.4.9.post2) pins the build recorded.
            let pin = t.pip.split_once("==").map(|(_, v)| v.split(".post").next().unwrap_or(v));
            assert!(t.pip.is_empty() || pin == Some(t.release.as_str()), "{}: pip {}", profile.name, t.pip);
        }
    }

    #[test]
    fn a_malformed_table_is_refused() {
        let base = "release = \"1.0.0\"\nsource = \"s\"\nimage = \"i:1.0.0\"\npip = \"\"\n";
        assert!(parse("x", &format!("{base}flags = [\"--a\", \"--a\"]")).unwrap_err().contains("twice"));
        assert!(parse("x", &format!("{base}flags = [\"-a\"]")).unwrap_err().contains("\"-a\""));
        assert!(parse("x", "release = \"1.0.0\"\nflags = []").unwrap_err().contains("source"));
    }
}
