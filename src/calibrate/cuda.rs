//! The CUDA calibration backend: cuBLASLt GEMMs and servesim's own attention kernels
//! (`kernels/`, compiled with NVRTC) on `cuda:N`, timed with CUDA events.
//!
//! ```text
//!  prepare_*  allocate operands, fill them on the device (fill.cu), plan the GEMM / build the
//!             paged cache and block tables            ─► PreparedOp
//!  run_once       event ─► launch(es) ─► event; elapsed time between the two events
//!  flush          memset of a buffer 2 × L2 (at least 64 MiB) between repeats (flush method)
//!  run_replayed   the launch(es) R times captured once in a CUDA graph; event ─► graph launch
//!                 ─► event, ÷ R (graph method: no flush, operands that fit stay in L2)
//! ```
//!
//! What an attention shape times is what the engine's attention step runs per layer: writing the
//! new tokens' keys and values into the paged cache (`reshape_and_cache`), then the attention
//! kernel (prefill/mixed: `attention_prefill`; decode: `attention_decode` and, for long contexts,
//! its reduction). Caches use 16-token blocks laid out in a scrambled (but deterministic) order,
//! as a cache that has served many requests is.
//!
//! Without a driver, [`CudaBackend::new`] returns [`DeviceError::Unavailable`]; it never
//! panics.

use std::collections::BTreeMap;

use cudarc::driver::sys::{CUevent_flags, CUgraphInstantiate_flags, CUstreamCaptureMode};
use cudarc::driver::{CudaEvent, CudaGraph, CudaSlice, CudaStream, DevicePtr};

use super::backend::{
    AllReduceShape, AttentionPhase, AttentionShape, Backend, DeviceError, DeviceInfo, ElementwiseTiming, GemmShape,
    LaunchFloor, Peak, PreparedOp,
};
use super::timing::TimingMethod;
use crate::engine::cuda::compile::{kernel_hashes, nvrtc_version};
use crate::engine::cuda::device::{CudaDevice, check_cublaslt, check_nvrtc, device_count, driver_error, nccl_present};
use crate::engine::cuda::gemm::{CublasLt, GemmDtype, GemmPlan};
use crate::engine::cuda::kernels::{
    At, CudaKernels, DecodeParams, DecodeWorkspace, KernelFloat, MAX_HEAD_DIM, PagedKvCache, PrefillParams, RotaryParams,
    rotary_cos_sin_cache,
};
use crate::scenario::model::Dtype;
use crate::scenario::{GpuSpec, ModelSpec};

/// Tokens per KV-cache block in calibration (vLLM's default on CUDA).
pub use super::backend::CALIBRATION_BLOCK_SIZE;

/// Where a backend's [`Peak`] came from.
#[derive(Clone, Debug, PartialEq)]
pub enum PeakSource {
    /// A datasheet entry of [`known_gpu_peak`], by its label.
    Datasheet(&'static str),
    /// Unknown GPU: FLOP/s from a large bf16 GEMM, bandwidth from the memory clock and bus width
    /// (or, when the driver does not report them, a device-to-device copy).
    Measured,
}

/// Datasheet peaks (dense 16-bit tensor FLOP/s, memory bytes/s) of GPUs known by the name the
/// driver reports. The main SKUs reuse the scenario presets (`src/scenario/hardware.rs`, with
/// their datasheet citations); the variants are cited here.
pub fn known_gpu_peak(device_name: &str) -> Option<(&'static str, Peak)> {
    let name = device_name.to_ascii_uppercase();
    let preset = |label: &'static str, preset: &str| {
        GpuSpec::preset(preset).map(|g| {
            (label, Peak { flops_per_s: g.peak_flops_16bit, memory_bytes_per_s: g.memory_bandwidth_bytes_per_s })
        })
    };
    let fixed = |label: &'static str, tflops: f64, tb_per_s: f64| {
        Some((label, Peak { flops_per_s: tflops * 1e12, memory_bytes_per_s: tb_per_s * 1e12 }))
    };
    if name.contains("H200") {
        // NVIDIA H200 datasheet, H200 NVL column: BF16 1,671 TFLOPS with sparsity → 835 dense;
        // 141 GB HBM3e at 4.8 TB/s.
        if name.contains("NVL") {
            return fixed("H200 NVL", 835.5, 4.8);
        }
        return preset("H200 SXM", "H200");
    }
    if name.contains("H100") {
        // NVIDIA H100 datasheet: H100 NVL column BF16 1,671 TFLOPS sparse → 835 dense, 94 GB
        // HBM3 at 3.9 TB/s; H100 PCIe column BF16 1,513 sparse → 756 dense, 80 GB HBM2e at
        // 2.0 TB/s.
        if name.contains("NVL") {
            return fixed("H100 NVL", 835.5, 3.9);
        }
        if name.contains("PCIE") {
            return fixed("H100 PCIe", 756.5, 2.0);
        }
        return preset("H100 SXM", "H100-SXM");
    }
    if name.contains("A100") {
        // NVIDIA A100 datasheet: BF16 312 TFLOPS dense on every form factor; HBM bandwidth
        // 2,039 GB/s (80GB SXM), 1,935 GB/s (80GB PCIe), 1,555 GB/s (40GB, SXM and PCIe).
        let is_80 = name.contains("80G");
        let is_pcie = name.contains("PCIE");
        return match (is_80, is_pcie) {
            (true, false) => preset("A100 80GB SXM", "A100-80G-SXM"),
            (true, true) => fixed("A100 80GB PCIe", 312.0, 1.935),
            (false, _) => fixed("A100 40GB", 312.0, 1.555),
        };
    }
    if name.contains("L40S") {
        return preset("L40S", "L40S");
    }
    if name.contains("B200") {
        return preset("B200", "B200");
    }
    None
}

/// Multi-GPU state for all-reduce timing: one communicator per GPU.
struct NcclGroup {
    comms: Vec<cudarc::nccl::Comm>,
    starts: Vec<CudaEvent>,
    ends: Vec<CudaEvent>,
}

/// Calibrates `cuda:N`.
pub struct CudaBackend {
    device: CudaDevice,
    kernels: CudaKernels,
    blas: CublasLt,
    flush: CudaSlice<u8>,
    start: CudaEvent,
    end: CudaEvent,
    peak: Peak,
    peak_source: PeakSource,
    nccl: BTreeMap<u32, NcclGroup>,
    /// Seed for operand fills; advanced per prepared op so operands differ between shapes.
    seed: u32,
}

impl CudaBackend {
    /// Opens `cuda:ordinal`, compiles and loads the kernels, creates the cuBLASLt handle and
    /// settles the peak. `Unavailable` when the driver, a GPU, NVRTC or cuBLASLt is missing.
    pub fn new(ordinal: usize) -> Result<Self, DeviceError> {
        // Check every library before touching any: a clear message names all that is missing.
        let missing: Vec<String> = [
            crate::engine::cuda::device::check_driver(),
            check_nvrtc(),
            check_cublaslt(),
        ]
        .into_iter()
        .filter_map(|r| r.err().map(|e| e.to_string()))
        .collect();
        if !missing.is_empty() {
            return Err(DeviceError::Unavailable(format!("cuda:{ordinal} is unavailable: {}", missing.join("; "))));
        }
        let device = CudaDevice::new(ordinal)?;
        let kernels = CudaKernels::load(&device)?;
        let blas = CublasLt::new(&device)?;
        let stream = device.stream().clone();
        let flush_bytes = (2 * device.l2_bytes() as usize).max(64 << 20);
        let flush = stream.alloc_zeros::<u8>(flush_bytes).map_err(|e| driver_error("allocating the L2 flush buffer", e))?;
        let timing_event = || {
            device
                .context()
                .new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
                .map_err(|e| driver_error("cuEventCreate", e))
        };
        let (start, end) = (timing_event()?, timing_event()?);
        let mut backend = Self {
            device,
            kernels,
            blas,
            flush,
            start,
            end,
            peak: Peak { flops_per_s: 0.0, memory_bytes_per_s: 0.0 },
            peak_source: PeakSource::Measured,
            nccl: BTreeMap::new(),
            seed: 1,
        };
        match known_gpu_peak(backend.device.name()) {
            Some((label, peak)) => {
                backend.peak = peak;
                backend.peak_source = PeakSource::Datasheet(label);
            }
            None => backend.peak = backend.measure_peak()?,
        }
        Ok(backend)
    }

    pub fn device(&self) -> &CudaDevice {
        &self.device
    }

    pub fn kernels(&self) -> &CudaKernels {
        &self.kernels
    }

    pub fn blas(&self) -> &CublasLt {
        &self.blas
    }

    pub fn peak_source(&self) -> &PeakSource {
        &self.peak_source
    }

    fn stream(&self) -> &std::sync::Arc<CudaStream> {
        self.device.stream()
    }

    fn next_seed(&mut self) -> u32 {
        self.seed = self.seed.wrapping_mul(747_796_405).wrapping_add(2_891_336_453);
        self.seed
    }

    /// Nanoseconds between events recorded before and after `launch` on the device's stream.
    fn time(&self, launch: impl FnOnce() -> Result<(), DeviceError>) -> Result<f64, DeviceError> {
        let stream = self.stream();
        self.start.record(stream).map_err(|e| driver_error("cuEventRecord", e))?;
        launch()?;
        self.end.record(stream).map_err(|e| driver_error("cuEventRecord", e))?;
        let ms = self.start.elapsed_ms(&self.end).map_err(|e| driver_error("cuEventElapsedTime", e))?;
        Ok(f64::from(ms) * 1e6)
    }

    /// `launch` called `replays` times, captured into one CUDA graph on the device's stream and
    /// uploaded. The capture always ends, so a failed launch leaves the stream usable.
    fn capture(&self, replays: u32, mut launch: impl FnMut() -> Result<(), DeviceError>) -> Result<CudaGraph, DeviceError> {
        let stream = self.stream();
        stream
            .begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
            .map_err(|e| driver_error("cuStreamBeginCapture", e))?;
        let mut launched = Ok(());
        for _ in 0..replays.max(1) {
            launched = launch();
            if launched.is_err() {
                break;
            }
        }
        let graph = stream.end_capture(CUgraphInstantiate_flags(0));
        launched?;
        let graph = graph
            .map_err(|e| driver_error("cuStreamEndCapture / cuGraphInstantiate", e))?
            .ok_or_else(|| DeviceError::Failed("the captured CUDA graph is empty".into()))?;
        graph.upload().map_err(|e| driver_error("cuGraphUpload", e))?;
        Ok(graph)
    }

    /// Nanoseconds per replay of a graph of `replays` launches.
    fn time_graph(&self, graph: &CudaGraph, replays: u32) -> Result<f64, DeviceError> {
        let ns = self.time(|| graph.launch().map_err(|e| driver_error("cuGraphLaunch", e)))?;
        Ok(ns / f64::from(replays.max(1)))
    }

    fn flush_l2(&self) -> Result<(), DeviceError> {
        let stream = self.stream();
        self.device.context().bind_to_thread().map_err(|e| driver_error("cuCtxSetCurrent", e))?;
        let (ptr, _guard) = self.flush.device_ptr(stream);
        // SAFETY: writes exactly the flush buffer's bytes on its own stream.
        unsafe { cudarc::driver::result::memset_d8_async(ptr, 0x5a, self.flush.len(), stream.cu_stream()) }
            .map_err(|e| driver_error("flushing L2 (cuMemsetD8Async)", e))
    }

    /// Refuses shapes whose operands would not fit in free device memory (with 10% headroom), so
    /// that a too-large shape is "unsupported here" rather than a failed allocation.
    fn ensure_fits(&self, bytes: u64, what: &str) -> Result<(), DeviceError> {
        let (free, _total) =
            self.device.context().mem_get_info().map_err(|e| driver_error("cuMemGetInfo", e))?;
        if bytes as f64 > 0.9 * free as f64 {
            return Err(DeviceError::Unsupported(format!(
                "{what} needs {:.2} GiB; {:.2} GiB free on {}",
                bytes as f64 / (1u64 << 30) as f64,
                free as f64 / (1u64 << 30) as f64,
                self.device.label()
            )));
        }
        Ok(())
    }

    fn alloc<T: cudarc::driver::DeviceRepr + cudarc::driver::ValidAsZeroBits>(
        &self,
        n: usize,
    ) -> Result<CudaSlice<T>, DeviceError> {
        self.stream()
            .alloc_zeros::<T>(n.max(1))
            .map_err(|e| DeviceError::Failed(format!("allocating {n} elements on {}: {e:?}", self.device.label())))
    }

    fn upload<T: cudarc::driver::DeviceRepr>(&self, host: &[T]) -> Result<CudaSlice<T>, DeviceError> {
        self.stream().clone_htod(host).map_err(|e| driver_error("host-to-device copy", e))
    }

    /// Peak of an unknown GPU: a large bf16 GEMM (best of several runs) for FLOP/s; the memory
    /// clock × bus width for bandwidth, or a 1 GiB device-to-device copy when not reported.
    fn measure_peak(&mut self) -> Result<Peak, DeviceError> {
        let n = 8192;
        let mut op = self.prepare_gemm_typed::<half::bf16>(n, n, n, GemmDtype::Bf16)?;
        let mut best_ns = f64::INFINITY;
        for i in 0..8 {
            let ns = op.run_once()?;
            if i >= 2 {
                best_ns = best_ns.min(ns);
            }
        }
        let flops_per_s = 2.0 * (n as f64).powi(3) / (best_ns * 1e-9);
        drop(op);
        let memory_bytes_per_s = match self.device.memory_bandwidth_from_clocks() {
            Some(bw) => bw,
            None => {
                let bytes = 1usize << 30;
                let src = self.alloc::<u8>(bytes)?;
                let mut dst = self.alloc::<u8>(bytes)?;
                let stream = self.stream().clone();
                let mut best = f64::INFINITY;
                for _ in 0..5 {
                    let ns = self.time(|| stream.memcpy_dtod(&src, &mut dst).map_err(|e| driver_error("cuMemcpyDtoD", e)))?;
                    best = best.min(ns);
                }
                2.0 * bytes as f64 / (best * 1e-9)
            }
        };
        Ok(Peak { flops_per_s, memory_bytes_per_s })
    }

    fn prepare_gemm_typed<T: KernelFloat>(
        &mut self,
        m: usize,
        n: usize,
        k: usize,
        dtype: GemmDtype,
    ) -> Result<Box<dyn PreparedOp + '_>, DeviceError> {
        let bytes = ((m * k + n * k) * dtype.input_bytes() + m * n * dtype.output_bytes()) as u64;
        self.ensure_fits(bytes, &format!("GEMM {m}x{n}x{k}"))?;
        let plan = self.blas.plan(m, n, k, dtype)?;
        let seed = self.next_seed();
        let (x, w) = match dtype {
            GemmDtype::Fp8E4m3 => {
                let mut x = self.alloc::<u8>(m * k)?;
                let mut w = self.alloc::<u8>(n * k)?;
                self.kernels.fill_e4m3(&mut x, seed)?;
                self.kernels.fill_e4m3(&mut w, seed ^ 0x9e37_79b9)?;
                (GemmOperand::Fp8(x), GemmOperand::Fp8(w))
            }
            _ => {
                let mut x = self.alloc::<T>(m * k)?;
                let mut w = self.alloc::<T>(n * k)?;
                self.kernels.fill_uniform(&mut x, seed, 1.0)?;
                self.kernels.fill_uniform(&mut w, seed ^ 0x9e37_79b9, 1.0 / (k as f32).sqrt())?;
                (GemmOperand::Half(x), GemmOperand::Half(w))
            }
        };
        let y = self.alloc::<T>(m * n)?;
        self.device.synchronize()?;
        Ok(Box::new(GemmOp::<T> { backend: self, plan, x, w, y, graph: None }))
    }

    fn prepare_attention_typed<T: KernelFloat>(
        &mut self,
        shape: &AttentionShape,
    ) -> Result<Box<dyn PreparedOp + '_>, DeviceError> {
        let layout = AttentionLayout::new(shape)?;
        let h = shape.num_heads as usize;
        let kv = shape.num_kv_heads as usize;
        let d = shape.head_dim as usize;
        let elem = 2u64;
        let cache_elems = layout.num_blocks * CALIBRATION_BLOCK_SIZE * kv * d;
        let token_elems = layout.new_tokens * (2 * h + 2 * kv) * d;
        let bytes = elem * (2 * cache_elems + token_elems) as u64;
        self.ensure_fits(bytes, &format!("attention {shape:?}"))?;
        let seed = self.next_seed();

        let mut k_cache = self.alloc::<T>(cache_elems)?;
        let mut v_cache = self.alloc::<T>(cache_elems)?;
        let mut q = self.alloc::<T>(layout.new_tokens * h * d)?;
        let mut k_new = self.alloc::<T>(layout.new_tokens * kv * d)?;
        let mut v_new = self.alloc::<T>(layout.new_tokens * kv * d)?;
        let out = self.alloc::<T>(layout.new_tokens * h * d)?;
        for (i, buf) in [&mut k_cache, &mut v_cache, &mut q, &mut k_new, &mut v_new].into_iter().enumerate() {
            self.kernels.fill_uniform(buf, seed.wrapping_add(i as u32), 1.0)?;
        }
        let block_tables = self.upload(&layout.block_tables)?;
        let context_lens = self.upload(&layout.kernel_context_lens)?;
        let cu_seqlens = self.upload(&layout.cu_seqlens)?;
        let slot_mapping = self.upload(&layout.slot_mapping)?;
        let workspace = match shape.phase {
            AttentionPhase::Decode => {
                Some(self.kernels.decode_workspace(layout.num_seqs, h, kv, d, layout.max_kernel_context)?)
            }
            _ => None,
        };
        self.device.synchronize()?;
        Ok(Box::new(AttentionOp::<T> {
            backend: self,
            phase: shape.phase,
            layout,
            num_heads: h,
            num_kv_heads: kv,
            head_dim: d,
            q,
            k_new,
            v_new,
            out,
            k_cache,
            v_cache,
            block_tables,
            context_lens,
            cu_seqlens,
            slot_mapping,
            workspace,
            graph: None,
        }))
    }
}

/// Host-side description of an attention shape's batch: sequence lengths, block tables, slots.
#[derive(Clone, Debug, PartialEq)]
pub struct AttentionLayout {
    pub num_seqs: usize,
    /// Cached tokens per sequence before the step.
    pub cached: Vec<usize>,
    /// New tokens per sequence.
    pub query_len: usize,
    pub new_tokens: usize,
    /// What the attention kernel gets as `context_lens`: decode counts the new token (its K/V is
    /// written first); prefill/mixed count only cached tokens.
    pub kernel_context_lens: Vec<i32>,
    pub max_kernel_context: usize,
    pub cu_seqlens: Vec<i32>,
    pub block_tables: Vec<i32>,
    pub max_blocks_per_seq: usize,
    pub num_blocks: usize,
    /// Cache slot of every new token.
    pub slot_mapping: Vec<i32>,
}


impl AttentionLayout {
    pub fn new(shape: &AttentionShape) -> Result<Self, DeviceError> {
        let bs = CALIBRATION_BLOCK_SIZE;
        shape.check()?;
        let num_seqs = shape.batch as usize;
        let query_len = shape.query_len as usize;
        let cached = shape.cached_lens();
        let blocks_per_seq: Vec<usize> = cached.iter().map(|c| (c + query_len).div_ceil(bs)).collect();
        let max_blocks_per_seq = blocks_per_seq.iter().copied().max().unwrap_or(1).max(1);
        let num_blocks: usize = blocks_per_seq.iter().sum();
        // Physical blocks in a scrambled order: i ↦ (i · stride) mod num_blocks with a stride
        // coprime to num_blocks, so consecutive logical blocks are far apart in memory.
        let stride = scramble_stride(num_blocks);
        let mut block_tables = vec![0i32; num_seqs * max_blocks_per_seq];
        let mut next = 0usize;
        for (s, &nb) in blocks_per_seq.iter().enumerate() {
            for j in 0..nb {
                block_tables[s * max_blocks_per_seq + j] = ((next * stride) % num_blocks) as i32;
                next += 1;
            }
        }
        let mut slot_mapping = Vec::with_capacity(num_seqs * query_len);
        let mut cu_seqlens = Vec::with_capacity(num_seqs + 1);
        cu_seqlens.push(0i32);
        for (s, &c) in cached.iter().enumerate() {
            for i in 0..query_len {
                let pos = c + i;
                let block = block_tables[s * max_blocks_per_seq + pos / bs] as usize;
                slot_mapping.push((block * bs + pos % bs) as i32);
            }
            cu_seqlens.push(((s + 1) * query_len) as i32);
        }
        let kernel_context_lens: Vec<i32> = match shape.phase {
            AttentionPhase::Decode => cached.iter().map(|&c| (c + 1) as i32).collect(),
            _ => cached.iter().map(|&c| c as i32).collect(),
        };
        let max_kernel_context = kernel_context_lens.iter().copied().max().unwrap_or(0) as usize;
        if num_blocks * bs > i32::MAX as usize {
            return Err(DeviceError::Unsupported(format!("attention shape too large: {shape:?}")));
        }
        Ok(Self {
            num_seqs,
            cached,
            query_len,
            new_tokens: num_seqs * query_len,
            kernel_context_lens,
            max_kernel_context,
            cu_seqlens,
            block_tables,
            max_blocks_per_seq,
            num_blocks,
            slot_mapping,
        })
    }
}

/// A stride coprime to `n` near 0.618·n (1 for tiny n).
fn scramble_stride(n: usize) -> usize {
    if n <= 2 {
        return 1;
    }
    let gcd = |mut a: usize, mut b: usize| {
        while b != 0 {
            (a, b) = (b, a % b);
        }
        a
    };
    let mut s = ((n as f64 * 0.618_033_988_75) as usize).max(1);
    while gcd(s, n) != 1 {
        s += 1;
    }
    s
}

enum GemmOperand<T> {
    Half(CudaSlice<T>),
    Fp8(CudaSlice<u8>),
}

impl<T> GemmOperand<T> {
    fn ptr(&self, stream: &CudaStream) -> u64 {
        match self {
            GemmOperand::Half(s) => s.device_ptr(stream).0,
            GemmOperand::Fp8(s) => s.device_ptr(stream).0,
        }
    }
}

struct GemmOp<'a, T> {
    backend: &'a CudaBackend,
    plan: GemmPlan,
    x: GemmOperand<T>,
    w: GemmOperand<T>,
    y: CudaSlice<T>,
    /// The graph of the last replay count asked for (the graph method).
    graph: Option<(u32, CudaGraph)>,
}

impl<T: KernelFloat> PreparedOp for GemmOp<'_, T> {
    fn run_once(&mut self) -> Result<f64, DeviceError> {
        let b = self.backend;
        let stream = b.stream();
        let (x, w) = (self.x.ptr(stream), self.w.ptr(stream));
        let y = self.y.device_ptr(stream).0;
        // SAFETY: the operands were allocated for this plan's shape and dtype and live in self.
        b.time(|| unsafe { b.blas.matmul_raw(&self.plan, x, w, y) })
    }

    fn flush_cache(&mut self) -> Result<(), DeviceError> {
        self.backend.flush_l2()
    }

    fn run_replayed(&mut self, replays: u32) -> Result<f64, DeviceError> {
        let b = self.backend;
        if self.graph.as_ref().is_none_or(|(n, _)| *n != replays) {
            let stream = b.stream();
            let (x, w) = (self.x.ptr(stream), self.w.ptr(stream));
            let y = self.y.device_ptr(stream).0;
            let plan = &self.plan;
            // SAFETY: as in run_once; the graph is replayed only while self (the operands) lives.
            let graph = b.capture(replays, || unsafe { b.blas.matmul_raw(plan, x, w, y) })?;
            self.graph = Some((replays, graph));
        }
        let (n, graph) = self.graph.as_ref().expect("captured above");
        b.time_graph(graph, *n)
    }
}

struct AttentionOp<'a, T> {
    backend: &'a CudaBackend,
    phase: AttentionPhase,
    layout: AttentionLayout,
    num_heads: usize,
    num_kv_heads: usize,
    head_dim: usize,
    q: CudaSlice<T>,
    k_new: CudaSlice<T>,
    v_new: CudaSlice<T>,
    out: CudaSlice<T>,
    k_cache: CudaSlice<T>,
    v_cache: CudaSlice<T>,
    block_tables: CudaSlice<i32>,
    context_lens: CudaSlice<i32>,
    cu_seqlens: CudaSlice<i32>,
    slot_mapping: CudaSlice<i32>,
    workspace: Option<DecodeWorkspace>,
    graph: Option<(u32, CudaGraph)>,
}

impl<T: KernelFloat> AttentionOp<'_, T> {
    fn launch(&mut self) -> Result<(), DeviceError> {
        let kernels = &self.backend.kernels;
        let (h, kv, d) = (self.num_heads, self.num_kv_heads, self.head_dim);
        kernels.reshape_and_cache(
            &self.k_new,
            &self.v_new,
            &mut self.k_cache,
            &mut self.v_cache,
            &self.slot_mapping,
            self.layout.new_tokens,
            kv,
            d,
            kv * d,
        )?;
        let cache = PagedKvCache {
            k: &self.k_cache,
            v: &self.v_cache,
            block_tables: &self.block_tables,
            context_lens: &self.context_lens,
            block_size: CALIBRATION_BLOCK_SIZE,
            num_kv_heads: kv,
            head_dim: d,
            max_blocks_per_seq: self.layout.max_blocks_per_seq,
        };
        let scale = 1.0 / (d as f32).sqrt();
        match (self.phase, self.workspace.as_mut()) {
            (AttentionPhase::Decode, Some(ws)) => kernels.attention_decode(
                &mut self.out,
                &self.q,
                &cache,
                ws,
                &DecodeParams {
                    num_seqs: self.layout.num_seqs,
                    num_heads: h,
                    scale,
                    q_stride: h * d,
                    max_context_len: self.layout.max_kernel_context,
                },
            ),
            _ => kernels.attention_prefill(
                &mut self.out,
                &self.q,
                &self.k_new,
                &self.v_new,
                &cache,
                &self.cu_seqlens,
                &PrefillParams {
                    num_seqs: self.layout.num_seqs,
                    total_new_tokens: self.layout.new_tokens,
                    max_new_tokens: self.layout.query_len,
                    num_heads: h,
                    scale,
                    q_stride: h * d,
                    kv_stride: kv * d,
                },
            ),
        }
    }
}

impl<T: KernelFloat> PreparedOp for AttentionOp<'_, T> {
    fn run_once(&mut self) -> Result<f64, DeviceError> {
        let backend = self.backend;
        let stream = backend.stream();
        backend.start.record(stream).map_err(|e| driver_error("cuEventRecord", e))?;
        self.launch()?;
        backend.end.record(stream).map_err(|e| driver_error("cuEventRecord", e))?;
        let ms = backend.start.elapsed_ms(&backend.end).map_err(|e| driver_error("cuEventElapsedTime", e))?;
        Ok(f64::from(ms) * 1e6)
    }

    fn flush_cache(&mut self) -> Result<(), DeviceError> {
        self.backend.flush_l2()
    }

    fn run_replayed(&mut self, replays: u32) -> Result<f64, DeviceError> {
        let backend = self.backend;
        if self.graph.as_ref().is_none_or(|(n, _)| *n != replays) {
            self.graph = None;
            // Each replay writes the same slots and reads the same cache: idempotent.
            let graph = backend.capture(replays, || self.launch())?;
            self.graph = Some((replays, graph));
        }
        let (n, graph) = self.graph.as_ref().expect("captured above");
        backend.time_graph(graph, *n)
    }
}

struct AllReduceOp<'a> {
    group: &'a NcclGroup,
    buffers: Vec<CudaSlice<half::bf16>>,
}

impl PreparedOp for AllReduceOp<'_> {
    fn run_once(&mut self) -> Result<f64, DeviceError> {
        use cudarc::nccl::{ReduceOp, group_end, group_start};
        let g = self.group;
        let nccl_err = |what: &str, e: cudarc::nccl::result::NcclError| DeviceError::Failed(format!("{what}: {e:?}"));
        for (comm, start) in g.comms.iter().zip(&g.starts) {
            start.record(&comm.stream()).map_err(|e| driver_error("cuEventRecord", e))?;
        }
        group_start().map_err(|e| nccl_err("ncclGroupStart", e))?;
        for (comm, buf) in g.comms.iter().zip(self.buffers.iter_mut()) {
            comm.all_reduce_in_place(buf, &ReduceOp::Sum).map_err(|e| nccl_err("ncclAllReduce", e))?;
        }
        group_end().map_err(|e| nccl_err("ncclGroupEnd", e))?;
        let mut slowest_ms = 0f32;
        for ((comm, start), end) in g.comms.iter().zip(&g.starts).zip(&g.ends) {
            end.record(&comm.stream()).map_err(|e| driver_error("cuEventRecord", e))?;
            slowest_ms = slowest_ms.max(start.elapsed_ms(end).map_err(|e| driver_error("cuEventElapsedTime", e))?);
        }
        Ok(f64::from(slowest_ms) * 1e6)
    }
}

impl Backend for CudaBackend {
    fn device_info(&self) -> DeviceInfo {
        let nvrtc = nvrtc_version().map(|(a, b)| format!("NVRTC {a}.{b}"));
        let blas = CublasLt::version().map(|v| format!("cuBLASLt {}.{}.{}", v / 10_000, (v / 100) % 100, v % 100));
        let runtime = [nvrtc, blas].into_iter().flatten().collect::<Vec<_>>().join(", ");
        DeviceInfo {
            device: self.device.label(),
            name: self.device.name().to_string(),
            driver_version: Some(self.device.driver_version()),
            runtime_version: (!runtime.is_empty()).then_some(runtime),
            clocks: self.device.clocks(),
            parallelism: Some(self.device.sm_count()),
        }
    }

    fn peak(&self) -> Peak {
        self.peak
    }

    /// Graph replay first: what an engine's captured decode step does, and what the bundled
    /// (aiconfigurator) profiles timed.
    fn timing_methods(&self) -> Vec<TimingMethod> {
        vec![TimingMethod::Graph, TimingMethod::Flush]
    }

    /// A one-element fill (the smallest kernel servesim has) launched 200 times: from the host
    /// one by one, and replayed in a graph.
    fn launch_floor(&mut self) -> Result<Option<LaunchFloor>, DeviceError> {
        const LAUNCHES: u32 = 200;
        let mut one = self.alloc::<half::bf16>(1)?;
        let kernels = &self.kernels;
        for _ in 0..10 {
            kernels.fill_uniform(&mut one, 1, 1.0)?;
        }
        let eager_ns = self.time(|| (0..LAUNCHES).try_for_each(|_| kernels.fill_uniform(&mut one, 1, 1.0)))? / f64::from(LAUNCHES);
        let graph = self.capture(LAUNCHES, || kernels.fill_uniform(&mut one, 1, 1.0))?;
        self.time_graph(&graph, LAUNCHES)?; // the first replay sets the graph up
        let graph_ns = self.time_graph(&graph, LAUNCHES)?;
        drop(graph);
        Ok(Some(LaunchFloor { kernel: format!("fill_uniform_{}", <half::bf16 as KernelFloat>::SUFFIX), eager_ns, graph_ns }))
    }

    /// A layer's elementwise kernels (bf16) at 1, 16, 256 and 4,096 tokens of each model's shapes,
    /// each launch replayed 20 times in a CUDA graph, per launch.
    fn elementwise(&mut self, models: &[ModelSpec], tp: u32) -> Result<Vec<ElementwiseTiming>, DeviceError> {
        const TOKENS: [usize; 4] = [1, 16, 256, 4096];
        const REPLAYS: u32 = 20;
        let t_max = TOKENS[TOKENS.len() - 1];
        let mut timings = Vec::new();
        for model in models {
            let shard = model.shard(tp);
            let d = model.head_dim as usize;
            let (h, heads, kv, f) = (model.hidden_size as usize, shard.heads as usize, shard.kv_heads as usize, shard.ffn as usize);
            // No dense MLP (a mixture of experts without shared ones) or a head the kernels do
            // not take: nothing comparable to time.
            if h == 0 || heads == 0 || kv == 0 || f == 0 || d == 0 || !d.is_multiple_of(2) || d > MAX_HEAD_DIM {
                continue;
            }
            let (qd, kvd) = (heads * d, kv * d);
            let cols = qd + 2 * kvd;
            let elems = 3 * t_max * h + h + t_max * cols + 3 * t_max * f + 2 * t_max * kvd;
            match self.ensure_fits((2 * elems + 4 * t_max * d + 8 * t_max) as u64, &format!("{}'s elementwise kernels", model.name)) {
                Err(DeviceError::Unsupported(_)) => continue,
                other => other?,
            }
            let seed = self.next_seed();
            let mut x = self.alloc::<half::bf16>(t_max * h)?;
            let mut residual = self.alloc::<half::bf16>(t_max * h)?;
            let mut normed = self.alloc::<half::bf16>(t_max * h)?;
            let mut weight = self.alloc::<half::bf16>(h)?;
            let mut qkv = self.alloc::<half::bf16>(t_max * cols)?;
            let mut gate_up = self.alloc::<half::bf16>(t_max * 2 * f)?;
            let mut act = self.alloc::<half::bf16>(t_max * f)?;
            let mut k_cache = self.alloc::<half::bf16>(t_max * kvd)?;
            let mut v_cache = self.alloc::<half::bf16>(t_max * kvd)?;
            for (i, buf) in [&mut x, &mut residual, &mut weight, &mut qkv, &mut gate_up].into_iter().enumerate() {
                self.kernels.fill_uniform(buf, seed.wrapping_add(i as u32), 1.0)?;
            }
            let ramp: Vec<i32> = (0..t_max as i32).collect();
            let positions = self.upload(&ramp)?;
            let slots = self.upload(&ramp)?;
            let cos_sin = self.upload(&rotary_cos_sin_cache(t_max, d, 10_000.0))?;
            let kernels = &self.kernels;
            let eps = 1e-5;
            for &t in &TOKENS {
                let mut timed = |kernel: &str, ns: f64| {
                    timings.push(ElementwiseTiming { model: model.name.clone(), kernel: kernel.to_string(), tokens: t as u32, ns })
                };
                let g = self.capture(REPLAYS, || kernels.rmsnorm(&mut normed, &x, &weight, t, h, eps))?;
                timed("rmsnorm", self.time_graph(&g, REPLAYS)?);
                let g = self.capture(REPLAYS, || kernels.fused_add_rmsnorm(&mut x, &mut residual, &weight, t, h, eps))?;
                timed("fused_add_rmsnorm", self.time_graph(&g, REPLAYS)?);
                let rotary = RotaryParams {
                    num_tokens: t,
                    num_heads: heads,
                    num_kv_heads: kv,
                    head_dim: d,
                    rot_dim: d,
                    is_neox: true,
                    q_stride: cols,
                    k_stride: cols,
                    max_position: t_max,
                };
                let (q, k, v) = (At::new(&qkv, 0), At::new(&qkv, qd), At::new(&qkv, qd + kvd));
                let g = self.capture(REPLAYS, || kernels.rotary(q, k, &positions, &cos_sin, &rotary))?;
                timed("rotary", self.time_graph(&g, REPLAYS)?);
                let g = self.capture(REPLAYS, || kernels.reshape_and_cache(k, v, &mut k_cache, &mut v_cache, &slots, t, kv, d, cols))?;
                timed("reshape_and_cache", self.time_graph(&g, REPLAYS)?);
                let g = self.capture(REPLAYS, || kernels.silu_mul(&mut act, &gate_up, t, f))?;
                timed("silu_mul", self.time_graph(&g, REPLAYS)?);
            }
        }
        Ok(timings)
    }

    fn supports(&self, dtype: Dtype) -> bool {
        GemmDtype::from_dtype(dtype).is_some_and(|g| g.supported_on(self.device.compute_capability()))
    }

    fn kernel_hashes(&self) -> Vec<(String, String)> {
        let mut hashes = kernel_hashes();
        // GEMMs are cuBLASLt's kernels: its version identifies them.
        if let Some(v) = CublasLt::version() {
            hashes.push(("cublaslt".to_string(), format!("version-{v}")));
        }
        hashes
    }

    fn prepare_gemm(&mut self, shape: &GemmShape) -> Result<Box<dyn PreparedOp + '_>, DeviceError> {
        let dtype = GemmDtype::from_dtype(shape.dtype)
            .ok_or_else(|| DeviceError::Unsupported(format!("{} GEMMs are not calibrated on CUDA", shape.dtype.name())))?;
        let (m, n, k) = (shape.m as usize, shape.n as usize, shape.k as usize);
        match dtype {
            GemmDtype::F16 => self.prepare_gemm_typed::<half::f16>(m, n, k, dtype),
            // bf16 output for bf16 and fp8 inputs.
            GemmDtype::Bf16 | GemmDtype::Fp8E4m3 => self.prepare_gemm_typed::<half::bf16>(m, n, k, dtype),
        }
    }

    fn prepare_attention(&mut self, shape: &AttentionShape) -> Result<Box<dyn PreparedOp + '_>, DeviceError> {
        match shape.dtype {
            Dtype::Bf16 => self.prepare_attention_typed::<half::bf16>(shape),
            Dtype::Fp16 => self.prepare_attention_typed::<half::f16>(shape),
            other => Err(DeviceError::Unsupported(format!(
                "attention kernels take bf16 or fp16, not {}",
                other.name()
            ))),
        }
    }

    fn prepare_allreduce(&mut self, shape: &AllReduceShape) -> Result<Option<Box<dyn PreparedOp + '_>>, DeviceError> {
        let gpus = shape.gpus as usize;
        if gpus < 2 || !nccl_present() {
            return Ok(None);
        }
        let available = device_count()?;
        if available < 2 {
            return Ok(None);
        }
        if gpus > available {
            return Err(DeviceError::Unsupported(format!("all-reduce over {gpus} GPUs; {available} present")));
        }
        if !self.nccl.contains_key(&shape.gpus) {
            let group = self.nccl_group(gpus)?;
            self.nccl.insert(shape.gpus, group);
        }
        let group = &self.nccl[&shape.gpus];
        let elems = (shape.bytes as usize / 2).max(1);
        let mut buffers = Vec::with_capacity(gpus);
        for comm in &group.comms {
            let buf = comm
                .stream()
                .alloc_zeros::<half::bf16>(elems)
                .map_err(|e| driver_error("allocating all-reduce buffers", e))?;
            buffers.push(buf);
        }
        Ok(Some(Box::new(AllReduceOp { group, buffers })))
    }
}

impl CudaBackend {
    /// Communicators over this device and the next `gpus − 1` ordinals (wrapping around).
    fn nccl_group(&self, gpus: usize) -> Result<NcclGroup, DeviceError> {
        let total = device_count()?;
        let mut streams = Vec::with_capacity(gpus);
        for i in 0..gpus {
            let ordinal = (self.device.ordinal() + i) % total;
            let stream = if i == 0 {
                self.stream().clone()
            } else {
                let ctx = cudarc::driver::CudaContext::new(ordinal)
                    .map_err(|e| driver_error(&format!("opening cuda:{ordinal}"), e))?;
                ctx.new_stream().map_err(|e| driver_error("cuStreamCreate", e))?
            };
            streams.push(stream);
        }
        let event = |s: &std::sync::Arc<CudaStream>| {
            s.context().new_event(Some(CUevent_flags::CU_EVENT_DEFAULT)).map_err(|e| driver_error("cuEventCreate", e))
        };
        let starts = streams.iter().map(event).collect::<Result<Vec<_>, _>>()?;
        let ends = streams.iter().map(event).collect::<Result<Vec<_>, _>>()?;
        let comms = crate::engine::cuda::device::no_panic("NCCL", || {
            cudarc::nccl::Comm::from_devices(streams)
                .map_err(|e| DeviceError::Failed(format!("ncclCommInitAll: {e:?}")))
        })?;
        Ok(NcclGroup { comms, starts, ends })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(phase: AttentionPhase, batch: u32, query_len: u32, context_len: u32, uneven: bool) -> AttentionShape {
        AttentionShape {
            phase,
            batch,
            query_len,
            context_len,
            num_heads: 8,
            num_kv_heads: 2,
            head_dim: 64,
            uneven,
            dtype: Dtype::Bf16,
        }
    }

    #[test]
    fn uneven_contexts_average_to_the_context_len() {
        let lens = shape(AttentionPhase::Decode, 8, 1, 1000, true).cached_lens();
        assert_eq!(lens.len(), 8);
        assert_eq!(lens.iter().sum::<usize>(), 8000);
        assert!(lens.iter().all(|&l| (1..=2000).contains(&l)));
        assert_eq!(shape(AttentionPhase::Decode, 3, 1, 7, false).cached_lens(), vec![7, 7, 7]);
    }

    #[test]
    fn layouts_map_every_new_token_to_a_distinct_slot_in_its_own_blocks() {
        for s in [
            shape(AttentionPhase::Decode, 5, 1, 37, true),
            shape(AttentionPhase::Mixed, 3, 20, 33, false),
            shape(AttentionPhase::Prefill, 4, 17, 0, false),
        ] {
            let l = AttentionLayout::new(&s).unwrap();
            let mut used: Vec<i32> = l.block_tables.iter().copied().filter(|&b| b >= 0).collect();
            let blocks_needed: usize =
                l.cached.iter().map(|c| (c + l.query_len).div_ceil(CALIBRATION_BLOCK_SIZE)).sum();
            assert_eq!(l.num_blocks, blocks_needed);
            // Physical blocks are a permutation (unused table entries are 0, so count the used ones).
            used.sort();
            let mut slots = l.slot_mapping.clone();
            slots.sort();
            slots.dedup();
            assert_eq!(slots.len(), l.new_tokens, "{s:?}");
            assert!(slots.iter().all(|&x| (x as usize) < l.num_blocks * CALIBRATION_BLOCK_SIZE));
            assert_eq!(*l.cu_seqlens.last().unwrap() as usize, l.new_tokens);
            if s.phase == AttentionPhase::Decode {
                assert!(l.kernel_context_lens.iter().zip(&l.cached).all(|(&k, &c)| k as usize == c + 1));
            }
        }
    }

    #[test]
    fn scramble_stride_is_a_permutation() {
        for n in [1usize, 2, 3, 10, 64, 1000, 4097] {
            let s = scramble_stride(n);
            let mut seen: Vec<usize> = (0..n).map(|i| (i * s) % n).collect();
            seen.sort();
            seen.dedup();
            assert_eq!(seen.len(), n);
        }
    }

    #[test]
    fn known_gpus_have_datasheet_peaks() {
        let (label, p) = known_gpu_peak("NVIDIA H100 80GB HBM3").unwrap();
        assert_eq!(label, "H100 SXM");
        assert_eq!(p.memory_bytes_per_s, 3.35e12);
        assert_eq!(known_gpu_peak("NVIDIA H100 PCIe").unwrap().0, "H100 PCIe");
        assert_eq!(known_gpu_peak("NVIDIA H200").unwrap().1.memory_bytes_per_s, 4.8e12);
        assert_eq!(known_gpu_peak("NVIDIA A100-SXM4-80GB").unwrap().1.flops_per_s, 312e12);
        assert_eq!(known_gpu_peak("NVIDIA A100-SXM4-40GB").unwrap().0, "A100 40GB");
        assert_eq!(known_gpu_peak("NVIDIA A100 80GB PCIe").unwrap().0, "A100 80GB PCIe");
        assert_eq!(known_gpu_peak("NVIDIA L40S").unwrap().1.memory_bytes_per_s, 0.864e12);
        assert_eq!(known_gpu_peak("NVIDIA B200").unwrap().1.flops_per_s, 2250e12);
        assert!(known_gpu_peak("NVIDIA GeForce RTX 4090").is_none());
    }

    #[test]
    fn new_without_a_driver_is_unavailable_not_a_panic() {
        if crate::engine::cuda::device::check_driver().is_ok() {
            return; // a GPU machine: covered by tests/cuda_kernels.rs
        }
        match CudaBackend::new(0) {
            Err(DeviceError::Unavailable(msg)) => assert!(msg.contains("driver"), "{msg}"),
            Err(other) => panic!("expected Unavailable, got {other:?}"),
            Ok(_) => panic!("a backend without a driver"),
        }
    }
}
