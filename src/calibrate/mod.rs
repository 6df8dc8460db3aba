//! Calibration: timing real kernels over a model-agnostic grid of shapes, and the profile that
//! records the timings with their provenance.

pub mod backend;
pub mod bundled;
pub mod compare;
pub mod consistency;
pub mod cpu;
pub mod cuda;
pub mod families;
pub mod focus;
pub mod grid;
pub mod import;
pub mod noise;
pub mod profile;
pub mod progress;
pub mod refine;
pub mod run;
pub mod timing;
