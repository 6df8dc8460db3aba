//! Where imported files come from: the repository, commit and license recorded beside them.
//!
//! The published-measurement collections this importer reads keep a `MANIFEST.tsv` at their root
//! (columns `local_path, source_repo, commit, source_path, …`, tab-separated) and each source
//! repository's `LICENSE` in its top folder. A file installed from a Python wheel (the
//! `aiconfigurator-core` package on PyPI carries aiconfigurator's tables) is named by its
//! distribution: the `*.dist-info` beside its package whose `RECORD` lists it gives the name,
//! version and license. A file outside both is imported with its origin marked unknown, and the
//! importer says so.

use std::path::{Path, PathBuf};

/// What is known of a file's origin.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Origin {
    /// `owner/repository`.
    pub repository: String,
    pub commit: String,
    /// The license's title, e.g. `Apache License, Version 2.0`.
    pub license: String,
}

const UNKNOWN: &str = "unknown";

/// The collection holding `file`: its root (where `MANIFEST.tsv` is), the file's path in it,
/// and the manifest's fields for that path; `None` when no manifest above the file names it.
fn manifest_entry(file: &Path) -> Option<(PathBuf, String, Vec<String>)> {
    let file = file.canonicalize().ok()?;
    let (root, manifest) = file.ancestors().skip(1).find_map(|dir| {
        std::fs::read_to_string(dir.join("MANIFEST.tsv")).ok().map(|text| (dir.to_path_buf(), text))
    })?;
    let relative = file.strip_prefix(&root).ok()?.to_string_lossy().replace('\\', "/");
    let fields = manifest
        .lines()
        .map(|l| l.split('\t').map(str::to_string).collect::<Vec<_>>())
        .find(|f| f.first() == Some(&relative))?;
    Some((root, relative, fields))
}

/// `file`'s path in the collection whose `MANIFEST.tsv` names it.
pub fn collection_path(file: &Path) -> Option<String> {
    manifest_entry(file).map(|(_, relative, _)| relative)
}

/// The origin of `file`, from the nearest `MANIFEST.tsv` above it, else from the installed
/// wheel that holds it; fields it cannot find are `unknown`.
pub fn origin(file: &Path) -> Origin {
    let Some((root, relative, fields)) = manifest_entry(file) else {
        return wheel_origin(file)
            .unwrap_or_else(|| Origin { repository: UNKNOWN.into(), commit: UNKNOWN.into(), license: UNKNOWN.into() });
    };
    let license = relative.split('/').next().map(|top| license_title(&root.join(top).join("LICENSE"))).unwrap_or_default();
    Origin {
        repository: fields.get(1).map_or(UNKNOWN.into(), |s| s.to_string()),
        commit: fields.get(2).map_or(UNKNOWN.into(), |s| s.to_string()),
        license: if license.is_empty() { UNKNOWN.into() } else { license },
    }
}

/// A license file's title: its first line, with the second when that is a version line
/// (`Apache License` / `Version 2.0, January 2004` → `Apache License, Version 2.0`).
fn license_title(path: &PathBuf) -> String {
    let Ok(text) = std::fs::read_to_string(path) else { return String::new() };
    let mut lines = text.lines().map(str::trim).filter(|l| !l.is_empty());
    let Some(first) = lines.next() else { return String::new() };
    match lines.next() {
        Some(second) if second.starts_with("Version") => {
            format!("{first}, {}", second.split(',').next().unwrap_or(second))
        }
        _ => first.to_string(),
    }
}

/// The installed Python distribution that holds `file`: the `*.dist-info` directory in a
/// folder above it whose `RECORD` lists the file's path below that folder. Named
/// `<name> (PyPI wheel)`, its version standing for the commit, its `License-Expression` (or
/// `License`) for the license.
fn wheel_origin(file: &Path) -> Option<Origin> {
    let file = file.canonicalize().ok()?;
    file.ancestors().skip(1).find_map(|site| {
        let relative = file.strip_prefix(site).ok()?.to_string_lossy().replace('\\', "/");
        let mut infos: Vec<PathBuf> = std::fs::read_dir(site)
            .ok()?
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|e| e == "dist-info"))
            .collect();
        infos.sort();
        infos.into_iter().find_map(|info| {
            let record = std::fs::read_to_string(info.join("RECORD")).ok()?;
            record.lines().any(|l| l.split(',').next() == Some(relative.as_str())).then_some(())?;
            let metadata = std::fs::read_to_string(info.join("METADATA")).ok()?;
            // The header ends at the first blank line; the description follows.
            let field = |key: &str| {
                metadata
                    .lines()
                    .take_while(|l| !l.is_empty())
                    .find_map(|l| l.strip_prefix(key)?.strip_prefix(':').map(|v| v.trim().to_string()))
                    .filter(|v| !v.is_empty())
            };
            let name = field("Name")?;
            Some(Origin {
                repository: format!("{name} (PyPI wheel)"),
                commit: field("Version").map_or(UNKNOWN.into(), |v| format!("version {v}")),
                license: field("License-Expression").or_else(|| field("License")).unwrap_or_else(|| UNKNOWN.into()),
            })
        })
    })
}

impl Origin {
    pub fn is_known(&self) -> bool {
        self.repository != UNKNOWN && self.commit != UNKNOWN
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origin_comes_from_the_manifest_and_the_license_above_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("acme-sim/data/h100");
        std::fs::create_dir_all(&data).unwrap();
        std::fs::write(data.join("t.csv"), "a\n1\n").unwrap();
        std::fs::write(dir.path().join("acme-sim/LICENSE"), "\n   Apache License\n  Version 2.0, January 2004\n").unwrap();
        std::fs::write(
            dir.path().join("MANIFEST.tsv"),
            "local_path\tsource_repo\tcommit\nacme-sim/data/h100/t.csv\tacme/sim\tabc123\n",
        )
        .unwrap();
        let o = origin(&data.join("t.csv"));
        assert_eq!(o, Origin { repository: "acme/sim".into(), commit: "abc123".into(), license: "Apache License, Version 2.0".into() });
        assert!(o.is_known());
        std::fs::write(data.join("other.csv"), "a\n").unwrap();
        assert!(!origin(&data.join("other.csv")).is_known());
    }

    #[test]
    fn a_file_of_an_installed_wheel_is_named_by_its_distribution() {
        let site = tempfile::tempdir().unwrap();
        let data = site.path().join("acme_core/systems/data/h100_sxm");
        std::fs::create_dir_all(&data).unwrap();
        std::fs::write(data.join("t.parquet"), "x").unwrap();
        std::fs::write(data.join("stray.parquet"), "x").unwrap();
        let info = site.path().join("acme_core-1.2.0.dist-info");
        std::fs::create_dir_all(&info).unwrap();
        std::fs::write(info.join("RECORD"), "acme_core/__init__.py,sha256=a,1\nacme_core/systems/data/h100_sxm/t.parquet,sha256=b,1\n").unwrap();
        std::fs::write(
            info.join("METADATA"),
            "Metadata-Version: 2.4\nName: acme-core\nVersion: 1.2.0\nLicense-Expression: Apache-2.0\n\nLicense: not a header\n",
        )
        .unwrap();
        let o = origin(&data.join("t.parquet"));
        assert_eq!(o, Origin { repository: "acme-core (PyPI wheel)".into(), commit: "version 1.2.0".into(), license: "Apache-2.0".into() });
        assert!(o.is_known());
        // A file the wheel's RECORD does not list is not the wheel's.
        assert!(!origin(&data.join("stray.parquet")).is_known());
    }
}
