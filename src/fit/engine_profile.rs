//! Writing fitted engine-time values into an engine profile file (calibration/engine/), keeping
//! the rest of it as written: its header, defaults, comments and the values not fitted.

use std::path::Path;

use crate::Error;
use crate::scenario::engine_profile::{ENGINE_TIME_KEYS, parse};

/// Replaces the `[engine_time]` entries of `values` in the profile at `path` with their value and
/// `source`; the file must already hold each one (a profile lists every engine-time key it sets)
/// and must parse after the change.
pub fn rewrite(path: &Path, values: &[(String, f64)], source: &str) -> Result<(), Error> {
    let text = std::fs::read_to_string(path).map_err(|e| Error::Recorded(format!("{}: {e}", path.display())))?;
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    for (name, value) in values {
        if !ENGINE_TIME_KEYS.contains(&name.as_str()) {
            return Err(Error::Usage {
                flag: "--engine-profile",
                value: name.clone(),
                reason: format!("is not an engine-time parameter; an engine profile holds {}", ENGINE_TIME_KEYS.join(", ")),
            });
        }
        let prefix = format!("{name} = ");
        let Some(line) = lines.iter_mut().find(|l| l.starts_with(&prefix)) else {
            return Err(Error::Recorded(format!("{}: no `{name} = {{ value = …, source = … }}` line to replace", path.display())));
        };
        *line = format!("{name} = {{ value = {}, source = {} }}", toml_float(*value), toml_string(source));
    }
    let mut out = lines.join("\n");
    out.push('\n');
    let stem = path.file_stem().map_or(String::new(), |s| s.to_string_lossy().into_owned());
    parse(&stem, &out).map_err(|e| Error::Recorded(format!("{}: the rewritten profile does not read back: {e}", path.display())))?;
    std::fs::write(path, out).map_err(|source| Error::Output { path: path.to_path_buf(), source })
}

/// A value rounded to what the data can say (four significant digits), always with a point.
fn toml_float(value: f64) -> String {
    if value == 0.0 {
        return "0.0".to_string();
    }
    let digits = (3 - value.abs().log10().floor().max(-6.0) as i32).max(0) as usize;
    let text = format!("{value:.digits$}");
    if text.contains('.') { text } else { format!("{text}.0") }
}

fn toml_string(text: &str) -> String {
    serde_json::to_string(text).expect("a string serializes")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fitted_values_replace_their_lines_and_nothing_else() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.toml");
        let text = "# keep me\n[profile]\nengine = \"vllm\"\npolicy = \"vllm-v1\"\nmin_version = \"0.9.0\"\ndefault_version = \"0.9.2\"\ndescription = \"d\"\n\n[engine_time]\nseq_overhead_us = { value = 10.0, source = \"old\" }\ncpu_overlap = { value = 0.0, source = \"kept\" }\n\n[defaults]\nmax_num_seqs = 256\nenable_prefix_caching = true\n";
        std::fs::write(&path, text).unwrap();
        rewrite(&path, &[("seq_overhead_us".into(), 23.456789)], "fitted \"here\"").unwrap();
        let out = std::fs::read_to_string(&path).unwrap();
        assert!(out.starts_with("# keep me\n"), "{out}");
        assert!(out.contains("seq_overhead_us = { value = 23.46, source = \"fitted \\\"here\\\"\" }"), "{out}");
        assert!(out.contains("cpu_overlap = { value = 0.0, source = \"kept\" }"), "{out}");
        // A key the profile lacks, or one that is not engine time, is refused.
        assert!(rewrite(&path, &[("frontend_overhead_us".into(), 1.0)], "x").is_err());
        assert!(rewrite(&path, &[("gemm_efficiency".into(), 0.5)], "x").is_err());
        assert_eq!(toml_float(0.0), "0.0");
        assert_eq!(toml_float(1234.5678), "1235.0");
        assert_eq!(toml_float(0.012345), "0.01235");
    }
}
