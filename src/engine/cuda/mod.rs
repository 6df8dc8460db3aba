//! The engine on NVIDIA GPUs, through `cudarc` with dynamic loading: nothing here needs a CUDA
//! toolkit at build time, and with no driver every entry point returns
//! [`DeviceError::Unavailable`](crate::engine::DeviceError) instead of panicking.
//!
//! ```text
//!  kernels/*.cu ──NVRTC (compile.rs)──► PTX ──load (kernels.rs)──► typed launchers
//!  cuBLASLt (gemm.rs) ─────────────────────────────────────────────► GEMM plans
//!                       both run on CudaDevice's stream (device.rs)
//!  forward.rs: the Llama forward pass built from both (CudaModelExecutor)
//! ```

pub mod attention_fast;
pub mod compile;
pub mod device;
pub mod forward;
pub mod gemm;
pub mod graphs;
pub mod kernels;
pub mod parts;
pub mod step_index;

pub use device::CudaDevice;
pub use forward::CudaModelExecutor;
pub use gemm::{CublasLt, GemmDtype, GemmPlan};
pub use attention_fast::AttentionKernels;
pub use kernels::{At, CudaKernels, KernelFloat};
