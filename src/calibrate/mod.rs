//! Calibration: timing real kernels over a model-agnostic grid of shapes, and the profile that
//! records the timings with their provenance.

pub mod backend;
