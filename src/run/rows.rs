//! A scenario whose model a profile's GEMM and attention rows cannot price (latent or sparse
//! attention, linear-attention layers, 4-bit or MXFP4 experts), priced where the profile's
//! whole-module rows have its parts ([`RowPriced`]).

use super::{CostKind, ScenarioCost, auto_notes, read_profile};
use crate::calibrate::families::{Families, FamilyOp};
use crate::cost::CostModel;
use crate::cost::bundled;
use crate::cost::calibrated::Calibrated;
use crate::cost::family::{RowPriced, moe_rows};
use crate::cost::profile_match::kernel_profile_mismatches;
use crate::calibrate::profile::ProfileFacts;
use crate::scenario::{KernelProfile, Scenario, ScenarioError};

/// What the rows made of a scenario.
pub(super) enum Rows {
    /// Priced, at least in part, from them.
    Priced(ScenarioCost),
    /// Not priced from them: why, one line per part (none where the profile has no such rows).
    Unpriced(Vec<String>),
}

/// The scenario's cost model from its profile's whole-module rows, where the profile has them
/// and they cover a part of its model.
pub(super) fn row_priced(scenario: &Scenario, allow_mismatch: bool) -> Result<Rows, ScenarioError> {
    let gpu = &scenario.hardware.gpu;
    let mut warnings = Vec::new();
    let (families, name, measured_on, mut notes): (&Families, String, String, Vec<String>);
    let from_file;
    match &scenario.kernel_profile {
        None => return Ok(Rows::Unpriced(Vec::new())),
        Some(KernelProfile::Auto) => {
            let Some(b) = bundled::for_policy(gpu, scenario.engine.policy.name()) else { return Ok(Rows::Unpriced(Vec::new())) };
            let Some(f) = b.families() else { return Ok(Rows::Unpriced(Vec::new())) };
            families = f;
            (name, measured_on) = (format!("bundled {}", b.name), b.provenance.measured_on());
            notes = auto_notes(b.name, kernel_profile_mismatches(&b.provenance, &b.facts, scenario));
        }
        Some(KernelProfile::File(path)) => {
            let invalid = |reason: String| ScenarioError::Invalid {
                file: scenario.path.clone(),
                field: "cost.profile".into(),
                value: format!("{:?}", path.display().to_string()),
                reason,
            };
            from_file = match Families::read_beside(path).map_err(|e| invalid(e.to_string()))? {
                Some(f) => f,
                None => return Ok(Rows::Unpriced(Vec::new())),
            };
            families = &from_file;
            let profile = read_profile(path).map_err(invalid)?;
            let mismatches = kernel_profile_mismatches(&profile.provenance, &ProfileFacts::of(&profile.rows), scenario);
            if !mismatches.is_empty() {
                let all = mismatches.join("; ");
                if !allow_mismatch {
                    return Err(invalid(format!("{all}: its numbers would be wrong here (--allow-profile-mismatch uses it anyway)")));
                }
                warnings.push(format!("{all}: {} prices this scenario's steps anyway (--allow-profile-mismatch)", path.display()));
            }
            (name, measured_on, notes) = (path.display().to_string(), profile.provenance.measured_on(), Vec::new());
        }
    }
    let source = &families.provenance;
    let measured = format!("{measured_on}, {} {}", source.engine, source.engine_version);
    let tp = scenario.engine.tensor_parallel;
    let (model, row_notes) = RowPriced::new(families, &measured, &scenario.model, gpu, tp, &scenario.cost);
    let Some(model) = model else { return Ok(Rows::Unpriced(row_notes)) };
    notes.extend(row_notes);
    let label = format!("{} ({name}, measured on {measured_on})", model.source());
    Ok(Rows::Priced(ScenarioCost { model: Box::new(model), kind: CostKind::Calibrated, label, notes, warnings }))
}

/// `calibrated` with the model's routed experts priced from the profile's fused-MoE rows
/// (measured on `measured_on`), where the profile has rows for them, and the notes that say
/// which rows, or why none. A dense model, or a profile without whole-module rows, is left as
/// it was, without a note.
pub(super) fn with_fused_moe(
    scenario: &Scenario,
    calibrated: Calibrated,
    measured_on: &str,
) -> Result<(Calibrated, Vec<String>), ScenarioError> {
    if scenario.model.moe.is_none_or(|m| m.experts_per_token == 0) {
        return Ok((calibrated, Vec::new()));
    }
    let from_file;
    let families: &Families = match &scenario.kernel_profile {
        None => return Ok((calibrated, Vec::new())),
        Some(KernelProfile::Auto) => {
            match bundled::for_policy(&scenario.hardware.gpu, scenario.engine.policy.name()).and_then(|b| b.families()) {
                Some(f) => f,
                None => return Ok((calibrated, Vec::new())),
            }
        }
        Some(KernelProfile::File(path)) => {
            let read = Families::read_beside(path).map_err(|e| ScenarioError::Invalid {
                file: scenario.path.clone(),
                field: "cost.profile".into(),
                value: format!("{:?}", path.display().to_string()),
                reason: e.to_string(),
            })?;
            match read {
                Some(f) => {
                    from_file = f;
                    &from_file
                }
                None => return Ok((calibrated, Vec::new())),
            }
        }
    };
    if !families.rows.iter().any(|r| r.op == FamilyOp::Moe) {
        return Ok((calibrated, Vec::new()));
    }
    let source = &families.provenance;
    let measured = format!("{measured_on}, {} {}", source.engine, source.engine_version);
    let mut notes = Vec::new();
    let tp = scenario.engine.tensor_parallel;
    match moe_rows(families, &measured, &scenario.model, tp, &mut notes) {
        Some(rows) => Ok((calibrated.with_fused_moe(rows), notes)),
        None => Ok((calibrated, notes)),
    }
}
