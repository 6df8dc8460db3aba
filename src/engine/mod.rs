//! The engine's model executor: the kernels a real transformer step runs, on CPU and on CUDA.
pub mod cpu;
pub mod cuda;
mod device_error;
pub mod model;
pub mod server;

pub use device_error::DeviceError;
