//! A CUDA device that never panics for want of a driver or library.
//!
//! cudarc loads `libcuda`, `libnvrtc` and `libcublasLt` lazily and *panics* when one is missing.
//! Every entry point here first asks cudarc whether the library can be loaded
//! (`cudarc::<lib>::sys::is_culib_present()`) and turns "not there" into
//! [`DeviceError::Unavailable`] with a message that says what to install; the remaining
//! panics cudarc can raise (a symbol missing from an old driver) are caught at construction.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

use cudarc::driver::sys::CUdevice_attribute;
use cudarc::driver::{CudaContext, CudaStream, DriverError};

use crate::engine::DeviceError;

/// Why no CUDA driver was found, for error messages and test skip reasons.
const NO_DRIVER: &str = "no CUDA driver: libcuda.so could not be loaded (no NVIDIA GPU or driver on this machine)";

/// `Ok` when the CUDA driver library (`libcuda.so`) can be loaded.
pub fn check_driver() -> Result<(), DeviceError> {
    // SAFETY: only tries to dlopen the library by its usual names.
    if unsafe { cudarc::driver::sys::is_culib_present() } {
        Ok(())
    } else {
        Err(DeviceError::Unavailable(NO_DRIVER.to_string()))
    }
}

/// `Ok` when NVRTC (`libnvrtc.so.12`) can be loaded. NVRTC needs no GPU.
pub fn check_nvrtc() -> Result<(), DeviceError> {
    // SAFETY: only tries to dlopen the library by its usual names.
    if unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        Ok(())
    } else {
        Err(DeviceError::Unavailable(
            "NVRTC not found: libnvrtc.so could not be loaded; `pip install nvidia-cuda-nvrtc-cu12` and put \
             its site-packages/nvidia/cuda_nvrtc/lib directory on LD_LIBRARY_PATH, or install the CUDA toolkit"
                .to_string(),
        ))
    }
}

/// `Ok` when cuBLASLt (`libcublasLt.so.12`) can be loaded.
pub fn check_cublaslt() -> Result<(), DeviceError> {
    // SAFETY: only tries to dlopen the library by its usual names.
    if unsafe { cudarc::cublaslt::sys::is_culib_present() } {
        Ok(())
    } else {
        Err(DeviceError::Unavailable(
            "cuBLASLt not found: libcublasLt.so could not be loaded; `pip install nvidia-cublas-cu12` and put \
             its site-packages/nvidia/cublas/lib directory on LD_LIBRARY_PATH, or install the CUDA toolkit"
                .to_string(),
        ))
    }
}

/// Whether NCCL (`libnccl.so.2`) can be loaded; needed only for multi-GPU all-reduce.
pub fn nccl_present() -> bool {
    // SAFETY: only tries to dlopen the library by its usual names.
    unsafe { cudarc::nccl::sys::is_culib_present() }
}

/// Renders a driver error with its CUDA name and description.
pub fn driver_error(context: &str, err: DriverError) -> DeviceError {
    DeviceError::Failed(format!("{context}: {err:?}"))
}

/// Runs `f`, turning a cudarc panic (e.g. a symbol missing from an old driver) into an error.
pub fn no_panic<T>(what: &str, f: impl FnOnce() -> Result<T, DeviceError>) -> Result<T, DeviceError> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(result) => result,
        Err(payload) => {
            let message = payload
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "unknown panic".to_string());
            Err(DeviceError::Unavailable(format!("{what}: the CUDA libraries failed: {message}")))
        }
    }
}

/// Number of CUDA devices; an error when there is no driver (or it reports no device).
pub fn device_count() -> Result<usize, DeviceError> {
    check_driver()?;
    no_panic("counting CUDA devices", || {
        cudarc::driver::result::init()
            .map_err(|e| DeviceError::Unavailable(format!("the CUDA driver failed to initialise: {e:?}")))?;
        let n = CudaContext::device_count().map_err(|e| driver_error("cuDeviceGetCount", e))?;
        Ok(n.max(0) as usize)
    })
}

/// One GPU: its primary context, a stream that all of servesim's work on it goes to, and the
/// facts about it that kernels and provenance need.
#[derive(Debug)]
pub struct CudaDevice {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    ordinal: usize,
    name: String,
    compute_capability: (i32, i32),
    sm_count: u32,
    l2_bytes: u64,
    total_memory_bytes: u64,
    /// Max SM clock and memory clock in kHz, as the driver reports them (not the current clocks).
    sm_clock_khz: Option<u32>,
    memory_clock_khz: Option<u32>,
    memory_bus_width_bits: Option<u32>,
    max_shared_memory_per_block_optin: u32,
    driver_version: i32,
}

impl CudaDevice {
    /// Opens `cuda:ordinal`. `Unavailable` when there is no driver, no such device, or the driver
    /// cannot be initialised; never panics.
    pub fn new(ordinal: usize) -> Result<Self, DeviceError> {
        check_driver()?;
        no_panic("opening the CUDA device", || Self::open(ordinal))
    }

    fn open(ordinal: usize) -> Result<Self, DeviceError> {
        cudarc::driver::result::init()
            .map_err(|e| DeviceError::Unavailable(format!("the CUDA driver failed to initialise: {e:?}")))?;
        let count = CudaContext::device_count().map_err(|e| driver_error("cuDeviceGetCount", e))?.max(0) as usize;
        if ordinal >= count {
            return Err(DeviceError::Unavailable(format!(
                "cuda:{ordinal} does not exist: the driver reports {count} CUDA device(s)"
            )));
        }
        let ctx = CudaContext::new(ordinal)
            .map_err(|e| DeviceError::Unavailable(format!("cannot create a context on cuda:{ordinal}: {e:?}")))?;
        // servesim runs all work for a device on one stream, in order, so cudarc's per-buffer
        // read/write events (cross-stream synchronisation) are pure overhead: turn them off before
        // any buffer exists.
        // SAFETY: every buffer of this context is used on `stream` only (NCCL's streams, on other
        // contexts, have their own buffers).
        unsafe { ctx.disable_event_tracking() };
        let stream = ctx.new_stream().map_err(|e| driver_error("cuStreamCreate", e))?;
        let name = ctx.name().map_err(|e| driver_error("cuDeviceGetName", e))?;
        let compute_capability = ctx.compute_capability().map_err(|e| driver_error("compute capability", e))?;
        let attr = |a: CUdevice_attribute| ctx.attribute(a).ok().filter(|v| *v > 0).map(|v| v as u32);
        let sm_count = attr(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT).unwrap_or(1);
        let l2_bytes = attr(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE).unwrap_or(64 << 20) as u64;
        let sm_clock_khz = attr(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_CLOCK_RATE);
        let memory_clock_khz = attr(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE);
        let memory_bus_width_bits = attr(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH);
        let max_shared_memory_per_block_optin =
            attr(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN).unwrap_or(48 << 10);
        let total_memory_bytes = ctx.total_mem().map_err(|e| driver_error("cuDeviceTotalMem", e))? as u64;
        let mut driver_version: std::ffi::c_int = 0;
        // SAFETY: writes one int.
        unsafe { cudarc::driver::sys::cuDriverGetVersion(&mut driver_version) }
            .result()
            .map_err(|e| driver_error("cuDriverGetVersion", e))?;
        Ok(Self {
            ctx,
            stream,
            ordinal,
            name,
            compute_capability,
            sm_count,
            l2_bytes,
            total_memory_bytes,
            sm_clock_khz,
            memory_clock_khz,
            memory_bus_width_bits,
            max_shared_memory_per_block_optin,
            driver_version,
        })
    }

    pub fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }

    /// The stream servesim launches everything on for this device.
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    pub fn ordinal(&self) -> usize {
        self.ordinal
    }

    /// `cuda:N`.
    pub fn label(&self) -> String {
        format!("cuda:{}", self.ordinal)
    }

    /// The marketing name the driver reports, e.g. "NVIDIA H100 80GB HBM3".
    pub fn name(&self) -> &str {
        &self.name
    }

    /// (major, minor), e.g. (9, 0) for Hopper.
    pub fn compute_capability(&self) -> (i32, i32) {
        self.compute_capability
    }

    pub fn sm_count(&self) -> u32 {
        self.sm_count
    }

    pub fn l2_bytes(&self) -> u64 {
        self.l2_bytes
    }

    pub fn total_memory_bytes(&self) -> u64 {
        self.total_memory_bytes
    }

    /// Largest dynamic shared memory a block may opt into, in bytes.
    pub fn max_shared_memory_per_block_optin(&self) -> u32 {
        self.max_shared_memory_per_block_optin
    }

    /// The driver's CUDA version as "major.minor", e.g. "12.4".
    pub fn driver_version(&self) -> String {
        format!("{}.{}", self.driver_version / 1000, (self.driver_version % 1000) / 10)
    }

    /// Maximum SM and memory clocks, when the driver reports them: "sm 1980 MHz, memory 2619 MHz".
    pub fn clocks(&self) -> Option<String> {
        match (self.sm_clock_khz, self.memory_clock_khz) {
            (None, None) => None,
            (sm, mem) => {
                let show = |khz: Option<u32>| khz.map_or("unknown".to_string(), |k| format!("{} MHz", k / 1000));
                Some(format!("sm {} (max), memory {}", show(sm), show(mem)))
            }
        }
    }

    /// Theoretical DRAM bandwidth from the memory clock and bus width (2 transfers per clock), in
    /// bytes/s; `None` when the driver does not report them.
    pub fn memory_bandwidth_from_clocks(&self) -> Option<f64> {
        let clock_khz = self.memory_clock_khz? as f64;
        let width_bits = self.memory_bus_width_bits? as f64;
        Some(2.0 * clock_khz * 1e3 * width_bits / 8.0)
    }

    /// Whether the tensor cores run fp8 e4m3 GEMMs (Ada, compute capability 8.9, and later).
    pub fn has_fp8(&self) -> bool {
        self.compute_capability >= (8, 9)
    }

    /// Waits for all work on this device's stream.
    pub fn synchronize(&self) -> Result<(), DeviceError> {
        self.stream.synchronize().map_err(|e| driver_error("cuStreamSynchronize", e))
    }
}
