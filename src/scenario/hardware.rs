//! GPU presets with datasheet numbers, and explicit hardware.

/// One accelerator's datasheet figures.
#[derive(Clone, Debug, PartialEq)]
pub struct GpuSpec {
    pub name: String,
    /// Peak dense (no sparsity) BF16/FP16 tensor FLOP/s.
    pub peak_flops_16bit: f64,
    /// Peak dense FP8 tensor FLOP/s; `None` where the GPU has no FP8 tensor cores.
    pub peak_flops_fp8: Option<f64>,
    /// HBM (or GDDR) capacity, bytes.
    pub memory_bytes: u64,
    /// Peak memory bandwidth, bytes per second.
    pub memory_bandwidth_bytes_per_s: f64,
    /// GPU-to-GPU bandwidth per GPU per direction (NVLink, Infinity Fabric or PCIe), bytes/s.
    pub interconnect_bandwidth_bytes_per_s: f64,
}

/// The GPUs of a deployment: one kind, `count` of them.
#[derive(Clone, Debug, PartialEq)]
pub struct Hardware {
    pub gpu: GpuSpec,
    pub count: u32,
}
