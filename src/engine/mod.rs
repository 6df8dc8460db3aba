//! The engine's model executor: the kernels a real transformer step runs, on CPU and on CUDA.
pub mod cpu;
pub mod cuda;
pub mod model;
pub mod server;
