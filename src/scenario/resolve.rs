//! Raw schema → validated [`Scenario`].
use super::{Scenario, ScenarioError};
use std::path::Path;

pub(super) fn load(_path: &Path, _overrides: &[String]) -> Result<Scenario, ScenarioError> {
    todo!()
}

pub(super) fn from_str(_text: &str, _path: &Path, _overrides: &[String]) -> Result<Scenario, ScenarioError> {
    todo!()
}
