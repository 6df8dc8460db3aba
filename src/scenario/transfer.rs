//! Corrections for a GPU that no bundled kernel profile measured, whose steps are priced by
//! carrying another GPU's profile over (`cost.profile = "auto"`, see `cost::bundled::nearest`).
//! Carrying utilisation over assumes the vendor's kernels are as well tuned on the new GPU; the
//! recorded MI300X runs show they are not (priced 1.4–3.3× too fast). A correction holds the
//! values `servesim fit --kernels` found for such a GPU on its recorded runs, on top of the
//! carried-over profile, and the command that regenerates it (`calibration/transfer/`).
//!
//! A correction is a profile file as `fit --out` writes it: only the parameters its provenance
//! lists as fitted are taken; the rest of its `[cost]` table is what the fit held fixed.

use std::sync::OnceLock;

use super::cost_params::{self, ParamSpec};
use super::CostParams;

/// The corrections compiled in: the GPU preset each is for, its file, its text.
const BUNDLED: [(&str, &str, &str); 1] =
    [("MI300X", "calibration/transfer/mi300x.toml", include_str!("../../calibration/transfer/mi300x.toml"))];

static PARSED: [OnceLock<TransferCorrection>; 1] = [OnceLock::new()];

/// The fitted values for one GPU, and where they came from.
#[derive(Clone, Debug, PartialEq)]
pub struct TransferCorrection {
    /// The GPU preset it corrects.
    pub gpu: &'static str,
    /// Its file in the repository.
    pub file: &'static str,
    /// The fitted parameters and their values.
    pub values: Vec<(&'static str, f64)>,
    /// The command that fitted them (the file's `provenance.command_line`).
    pub command_line: String,
    /// The engine policies of the runs fitted (`provenance.engine_policy`): the correction holds
    /// engine time as well as the GPU's (a fixed time per prefill step, say), so it applies to
    /// these engines only.
    pub policies: Vec<String>,
}

impl TransferCorrection {
    /// Whether it was fitted on runs of the engine policy called `policy`.
    pub fn fitted_on(&self, policy: &str) -> bool {
        self.policies.iter().any(|p| p == policy)
    }

    /// `params` with the correction's values in place.
    pub fn apply(&self, params: &mut CostParams) {
        for (name, value) in &self.values {
            let spec: &ParamSpec = cost_params::find(name).expect("checked when parsed");
            spec.set(params, *value);
        }
    }

    /// One line for outputs: what was corrected, from which file and command.
    pub fn describe(&self) -> String {
        let values: Vec<String> = self.values.iter().map(|(n, v)| format!("{n} = {}", short(*v))).collect();
        format!("{} corrections from {} ({}), fitted by `{}`", self.gpu, self.file, values.join(", "), self.command_line)
    }
}

fn short(v: f64) -> String {
    if v.abs() >= 100.0 { format!("{v:.0}") } else { format!("{v:.3}") }
}

/// The correction for the GPU preset called `gpu`, if one is bundled.
pub fn for_gpu(gpu: &str) -> Option<&'static TransferCorrection> {
    let i = BUNDLED.iter().position(|(name, _, _)| *name == gpu)?;
    Some(PARSED[i].get_or_init(|| {
        let (gpu, file, text) = BUNDLED[i];
        // Bundled and checked by a unit test, so a failure here is a build of a broken tree.
        parse(gpu, file, text).unwrap_or_else(|e| panic!("bundled {file}: {e}"))
    }))
}

fn parse(gpu: &'static str, file: &'static str, text: &str) -> Result<TransferCorrection, String> {
    let table: toml::Table = toml::from_str(text).map_err(|e| e.to_string())?;
    let provenance = table.get("provenance").and_then(|p| p.as_table()).ok_or("no [provenance] table")?;
    let command_line = provenance.get("command_line").and_then(|c| c.as_str()).ok_or("no provenance.command_line")?;
    let fitted = provenance.get("fitted_parameters").and_then(|f| f.as_array()).ok_or("no provenance.fitted_parameters")?;
    let cost = table.get("cost").and_then(|c| c.as_table()).ok_or("no [cost] table")?;
    let mut values = Vec::new();
    for name in fitted {
        let name = name.as_str().ok_or("provenance.fitted_parameters: not a string")?;
        let spec = cost_params::find(name).ok_or_else(|| format!("provenance.fitted_parameters: unknown parameter {name}"))?;
        let value = cost.get(name).and_then(|v| v.as_float()).ok_or_else(|| format!("cost.{name}: missing or not a number"))?;
        spec.kind.check(value).map_err(|reason| format!("cost.{name} = {value}: {reason}"))?;
        values.push((spec.name, value));
    }
    if values.is_empty() {
        return Err("provenance.fitted_parameters is empty".into());
    }
    let policies = provenance.get("engine_policy").and_then(|p| p.as_str()).ok_or("no provenance.engine_policy")?;
    let policies: Vec<String> = policies.split(", ").map(str::to_string).collect();
    Ok(TransferCorrection { gpu, file, values, command_line: command_line.to_string(), policies })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_bundled_correction_parses_and_says_how_it_was_fitted() {
        for (gpu, file, _) in BUNDLED {
            let c = for_gpu(gpu).expect("bundled");
            assert_eq!((c.gpu, c.file), (gpu, file));
            assert!(c.command_line.contains("servesim fit") && c.command_line.contains("--kernels"), "{}", c.command_line);
            assert!(c.values.iter().any(|(n, _)| *n == "transfer_utilisation"), "{:?}", c.values);
            let mut params = CostParams::default();
            c.apply(&mut params);
            for (name, value) in &c.values {
                assert_eq!(cost_params::find(name).unwrap().get(&params), *value, "{name}");
            }
            assert_ne!(params, CostParams::default(), "a correction that changes nothing");
        }
        assert!(for_gpu("H100-SXM").is_none());
    }

    #[test]
    fn a_broken_correction_is_refused_with_the_field() {
        let good = "[provenance]\ncommand_line = \"servesim fit\"\nengine_policy = \"vllm-v0, tgi\"\nfitted_parameters = [\"transfer_utilisation\"]\n[cost]\ntransfer_utilisation = 0.5\n";
        let parsed = parse("X", "x.toml", good).unwrap();
        assert_eq!(parsed.values, vec![("transfer_utilisation", 0.5)]);
        assert!(parsed.fitted_on("tgi") && parsed.fitted_on("vllm-v0") && !parsed.fitted_on("vllm-v1"));
        for (bad, says) in [
            (good.replace("= 0.5", "= 1.5"), "cost.transfer_utilisation = 1.5"),
            (good.replace("[\"transfer_utilisation\"]", "[\"gemm_eff\"]"), "unknown parameter gemm_eff"),
            (good.replace("[\"transfer_utilisation\"]", "[]"), "empty"),
            (good.replace("command_line", "command"), "command_line"),
        ] {
            let err = parse("X", "x.toml", &bad).unwrap_err();
            assert!(err.contains(says), "{err}");
        }
    }
}
