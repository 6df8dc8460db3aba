//! GEMMs through cuBLASLt, as real engines run their projections.
//!
//! Convention (PyTorch's `Linear`): `Y = X · Wᵀ` with row-major `X [m × k]` (activations),
//! `W [n × k]` (weights) and `Y [m × n]`. In cuBLASLt's column-major terms that is
//! `Yᵀ [n × m] = op(W) · Xᵀ` with `op = T` on `W`: the "TN" layout, which is also the one fp8
//! requires.
//!
//! | dtype | X, W     | Y    | compute            | needs              |
//! |-------|----------|------|--------------------|--------------------|
//! | bf16  | bf16     | bf16 | fp32 accumulate    | compute cap. ≥ 8.0 |
//! | fp16  | fp16     | fp16 | fp32 accumulate    | compute cap. ≥ 7.0 |
//! | fp8   | e4m3     | bf16 | fp32 accumulate    | compute cap. ≥ 8.9, k and n multiples of 16 |
//!
//! A [`GemmPlan`] holds the descriptors and the algorithm cuBLASLt's heuristic picked for one
//! shape, so timing a shape repeatedly measures the matmul and nothing else.

use std::ffi::c_void;
use std::sync::Arc;

use cudarc::cublaslt::result as lt;
use cudarc::cublaslt::sys;
use cudarc::driver::{CudaSlice, CudaStream, DevicePtr, DevicePtrMut};

use super::device::{CudaDevice, check_cublaslt, driver_error, no_panic};
use crate::engine::DeviceError;
use crate::scenario::Dtype;

/// Element types of a cuBLASLt GEMM.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GemmDtype {
    Bf16,
    F16,
    /// fp8 e4m3 inputs, bf16 output.
    Fp8E4m3,
}

impl GemmDtype {
    /// The GEMM dtype for a model dtype; `None` for fp32 (not a serving dtype here).
    pub fn from_dtype(dtype: Dtype) -> Option<Self> {
        match dtype {
            Dtype::Bf16 => Some(Self::Bf16),
            Dtype::Fp16 => Some(Self::F16),
            Dtype::Fp8 => Some(Self::Fp8E4m3),
            Dtype::Fp32 => None,
        }
    }

    /// Bytes per element of X and W.
    pub fn input_bytes(self) -> usize {
        match self {
            Self::Bf16 | Self::F16 => 2,
            Self::Fp8E4m3 => 1,
        }
    }

    /// Bytes per element of Y.
    pub fn output_bytes(self) -> usize {
        2
    }

    fn input_type(self) -> sys::cudaDataType_t {
        match self {
            Self::Bf16 => sys::cudaDataType_t::CUDA_R_16BF,
            Self::F16 => sys::cudaDataType_t::CUDA_R_16F,
            Self::Fp8E4m3 => sys::cudaDataType_t::CUDA_R_8F_E4M3,
        }
    }

    fn output_type(self) -> sys::cudaDataType_t {
        match self {
            Self::Bf16 | Self::Fp8E4m3 => sys::cudaDataType_t::CUDA_R_16BF,
            Self::F16 => sys::cudaDataType_t::CUDA_R_16F,
        }
    }

    /// Whether a device of compute capability `cc` runs this dtype on its tensor cores.
    pub fn supported_on(self, cc: (i32, i32)) -> bool {
        match self {
            Self::Bf16 => cc >= (8, 0),
            Self::F16 => cc >= (7, 0),
            Self::Fp8E4m3 => cc >= (8, 9),
        }
    }
}

fn blas_error(context: &str, e: lt::CublasError) -> DeviceError {
    match e.0 {
        sys::cublasStatus_t::CUBLAS_STATUS_NOT_SUPPORTED => {
            DeviceError::Unsupported(format!("{context}: cuBLASLt does not support this GEMM ({e:?})"))
        }
        _ => DeviceError::Failed(format!("{context}: {e:?}")),
    }
}

/// A cuBLASLt handle, its workspace and the stream it runs on.
pub struct CublasLt {
    handle: sys::cublasLtHandle_t,
    workspace: CudaSlice<u8>,
    stream: Arc<CudaStream>,
    compute_capability: (i32, i32),
}

// SAFETY: the handle is only used through &self on the owning stream; cuBLASLt handles are
// thread-safe to share as long as calls are not made concurrently on one handle, which the
// calibration harness (single-threaded per device) guarantees.
unsafe impl Send for CublasLt {}

impl CublasLt {
    /// Creates a handle on the device's stream with NVIDIA's recommended workspace (32 MiB on
    /// Hopper and later, 4 MiB before).
    pub fn new(device: &CudaDevice) -> Result<Self, DeviceError> {
        check_cublaslt()?;
        no_panic("creating a cuBLASLt handle", || {
            device.context().bind_to_thread().map_err(|e| driver_error("cuCtxSetCurrent", e))?;
            let handle = lt::create_handle().map_err(|e| blas_error("cublasLtCreate", e))?;
            let bytes = if device.compute_capability().0 >= 9 { 32 << 20 } else { 4 << 20 };
            let workspace = device
                .stream()
                .alloc_zeros::<u8>(bytes)
                .map_err(|e| driver_error("allocating the cuBLASLt workspace", e))?;
            Ok(Self { handle, workspace, stream: device.stream().clone(), compute_capability: device.compute_capability() })
        })
    }

    /// cuBLASLt's version number (e.g. 120903 for 12.9.3); `None` when the library is missing.
    pub fn version() -> Option<usize> {
        check_cublaslt().ok()?;
        // SAFETY: a pure query.
        no_panic("cublasLtGetVersion", || Ok(unsafe { sys::cublasLtGetVersion() })).ok()
    }

    /// Plans `Y [m × n] = X [m × k] · W [n × k]ᵀ`: creates the descriptors and asks the heuristic
    /// for the best algorithm that fits the workspace. `Unsupported` when the device or cuBLASLt
    /// cannot run the shape in this dtype.
    pub fn plan(&self, m: usize, n: usize, k: usize, dtype: GemmDtype) -> Result<GemmPlan, DeviceError> {
        if !dtype.supported_on(self.compute_capability) {
            let (major, minor) = self.compute_capability;
            return Err(DeviceError::Unsupported(format!(
                "{dtype:?} GEMM needs a newer GPU than compute capability {major}.{minor}"
            )));
        }
        if m == 0 || n == 0 || k == 0 {
            return Err(DeviceError::Failed(format!("empty GEMM {m}x{n}x{k}")));
        }
        if dtype == GemmDtype::Fp8E4m3 && (!k.is_multiple_of(16) || !n.is_multiple_of(16)) {
            return Err(DeviceError::Unsupported(format!(
                "fp8 GEMM needs k and n to be multiples of 16 (got n={n}, k={k})"
            )));
        }
        let mut plan = GemmPlan { desc: std::ptr::null_mut(), a: std::ptr::null_mut(), b: std::ptr::null_mut(), d: std::ptr::null_mut(), algo: None, m, n, k, dtype };
        let (m64, n64, k64) = (m as u64, n as u64, k as u64);
        // A = W: stored k × n column-major (row-major n × k), ld k, transposed by the op.
        plan.a = lt::create_matrix_layout(dtype.input_type(), k64, n64, k as i64).map_err(|e| blas_error("A layout", e))?;
        // B = X: stored k × m column-major (row-major m × k), ld k.
        plan.b = lt::create_matrix_layout(dtype.input_type(), k64, m64, k as i64).map_err(|e| blas_error("B layout", e))?;
        // C = D = Y: n × m column-major (row-major m × n), ld n.
        plan.d = lt::create_matrix_layout(dtype.output_type(), n64, m64, n as i64).map_err(|e| blas_error("D layout", e))?;
        plan.desc = lt::create_matmul_desc(sys::cublasComputeType_t::CUBLAS_COMPUTE_32F, sys::cudaDataType_t::CUDA_R_32F)
            .map_err(|e| blas_error("matmul descriptor", e))?;
        let op_t: i32 = 1; // CUBLAS_OP_T
        let op_n: i32 = 0; // CUBLAS_OP_N
        // SAFETY: the descriptor is live; attribute values are i32 as cuBLASLt expects.
        unsafe {
            lt::set_matmul_desc_attribute(
                plan.desc,
                sys::cublasLtMatmulDescAttributes_t::CUBLASLT_MATMUL_DESC_TRANSA,
                (&op_t) as *const i32 as *const c_void,
                std::mem::size_of::<i32>(),
            )
            .map_err(|e| blas_error("TRANSA", e))?;
            lt::set_matmul_desc_attribute(
                plan.desc,
                sys::cublasLtMatmulDescAttributes_t::CUBLASLT_MATMUL_DESC_TRANSB,
                (&op_n) as *const i32 as *const c_void,
                std::mem::size_of::<i32>(),
            )
            .map_err(|e| blas_error("TRANSB", e))?;
        }
        self.stream.context().bind_to_thread().map_err(|e| driver_error("cuCtxSetCurrent", e))?;
        let pref = lt::create_matmul_pref().map_err(|e| blas_error("matmul preference", e))?;
        let workspace_bytes = self.workspace.len();
        // SAFETY: all descriptors are live; the preference is destroyed below on every path.
        let heuristic = unsafe {
            let r = lt::set_matmul_pref_attribute(
                pref,
                sys::cublasLtMatmulPreferenceAttributes_t::CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                (&workspace_bytes) as *const usize as *const c_void,
                std::mem::size_of::<usize>(),
            )
            .and_then(|_| lt::get_matmul_algo_heuristic(self.handle, plan.desc, plan.a, plan.b, plan.d, plan.d, pref));
            let _ = lt::destroy_matmul_pref(pref);
            r.map_err(|e| blas_error(&format!("no cuBLASLt algorithm for {dtype:?} {m}x{n}x{k}"), e))?
        };
        plan.algo = Some(heuristic.algo);
        Ok(plan)
    }

    /// Runs a planned GEMM on raw device pointers.
    ///
    /// # Safety
    /// `x`, `w` and `y` must point to at least `m·k`, `n·k` and `m·n` elements of the plan's types
    /// on this handle's device, live until the stream has run the GEMM.
    pub unsafe fn matmul_raw(&self, plan: &GemmPlan, x: u64, w: u64, y: u64) -> Result<(), DeviceError> {
        let algo = plan.algo.as_ref().ok_or_else(|| DeviceError::Failed("GEMM plan has no algorithm".into()))?;
        // cuBLASLt runs in the calling thread's current context.
        self.stream.context().bind_to_thread().map_err(|e| driver_error("cuCtxSetCurrent", e))?;
        let alpha: f32 = 1.0;
        let beta: f32 = 0.0;
        let (ws, _ws_guard) = self.workspace.device_ptr(&self.stream);
        // SAFETY: forwarded to the caller; descriptors are live for the plan's lifetime.
        unsafe {
            lt::matmul(
                self.handle,
                plan.desc,
                (&alpha) as *const f32 as *const c_void,
                (&beta) as *const f32 as *const c_void,
                w as *const c_void,
                plan.a,
                x as *const c_void,
                plan.b,
                y as *const c_void,
                plan.d,
                y as *mut c_void,
                plan.d,
                algo,
                ws as *mut c_void,
                self.workspace.len(),
                self.stream.cu_stream() as sys::cudaStream_t,
            )
        }
        .map_err(|e| blas_error("cublasLtMatmul", e))
    }

    /// Runs a planned GEMM: `y = x · wᵀ`. Checks buffer sizes in bytes against the plan.
    pub fn matmul<I, O>(&self, plan: &GemmPlan, x: &CudaSlice<I>, w: &CudaSlice<I>, y: &mut CudaSlice<O>) -> Result<(), DeviceError> {
        let ib = plan.dtype.input_bytes();
        let ob = plan.dtype.output_bytes();
        if std::mem::size_of::<I>() != ib || std::mem::size_of::<O>() != ob {
            return Err(DeviceError::Failed(format!("GEMM element sizes do not match {:?}", plan.dtype)));
        }
        if x.len() < plan.m * plan.k || w.len() < plan.n * plan.k || y.len() < plan.m * plan.n {
            return Err(DeviceError::Failed(format!("GEMM buffers too short for {}x{}x{}", plan.m, plan.n, plan.k)));
        }
        let (xp, _gx) = x.device_ptr(&self.stream);
        let (wp, _gw) = w.device_ptr(&self.stream);
        let (yp, _gy) = y.device_ptr_mut(&self.stream);
        // SAFETY: sizes and element types checked above; the slices outlive the call and the
        // guards record their use on the stream.
        unsafe { self.matmul_raw(plan, xp, wp, yp) }
    }
}

impl Drop for CublasLt {
    fn drop(&mut self) {
        if !self.handle.is_null() {
            // SAFETY: created by cublasLtCreate, destroyed once.
            let _ = unsafe { lt::destroy_handle(self.handle) };
            self.handle = std::ptr::null_mut();
        }
    }
}

/// Descriptors and the chosen algorithm for one GEMM shape.
pub struct GemmPlan {
    desc: sys::cublasLtMatmulDesc_t,
    a: sys::cublasLtMatrixLayout_t,
    b: sys::cublasLtMatrixLayout_t,
    d: sys::cublasLtMatrixLayout_t,
    algo: Option<sys::cublasLtMatmulAlgo_t>,
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub dtype: GemmDtype,
}

// SAFETY: plain descriptors, not tied to a thread.
unsafe impl Send for GemmPlan {}

impl GemmPlan {
    /// 2·m·n·k.
    pub fn flops(&self) -> f64 {
        2.0 * self.m as f64 * self.n as f64 * self.k as f64
    }

    /// Bytes the GEMM must move at least once: X, W and Y.
    pub fn bytes(&self) -> f64 {
        let ib = self.dtype.input_bytes() as f64;
        (self.m * self.k + self.n * self.k) as f64 * ib + (self.m * self.n) as f64 * self.dtype.output_bytes() as f64
    }
}

impl Drop for GemmPlan {
    fn drop(&mut self) {
        // SAFETY: each descriptor was created once and is destroyed once; null ones were never made.
        unsafe {
            if !self.desc.is_null() {
                let _ = lt::destroy_matmul_desc(self.desc);
            }
            for layout in [self.a, self.b, self.d] {
                if !layout.is_null() {
                    let _ = lt::destroy_matrix_layout(layout);
                }
            }
        }
    }
}
