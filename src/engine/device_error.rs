//! What can go wrong when running kernels on a device: shared by the engine and by calibration,
//! which times the engine's kernels.

/// A device or kernel failure. `Unavailable` is how a missing GPU or library is reported
/// (cudarc panics when a library is missing, so every CUDA entry point checks first).
#[derive(Debug, thiserror::Error)]
pub enum DeviceError {
    /// The device or a library it needs is not there (no driver, no CUDA libraries).
    #[error("{0}")]
    Unavailable(String),
    /// The backend cannot run this shape or dtype (e.g. fp8 on a GPU without it).
    #[error("unsupported: {0}")]
    Unsupported(String),
    /// A kernel launch, compilation or allocation failed.
    #[error("{0}")]
    Failed(String),
}
