//! Summary statistics.

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Stat;

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Summary;
