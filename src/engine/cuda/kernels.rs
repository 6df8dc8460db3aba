//! Typed launchers for the kernels in `kernels/`.
//!
//! Each launcher checks its arguments on the host (shapes, buffer lengths, limits the kernel
//! relies on) before launching, so a wrong call is an error here rather than an out-of-bounds
//! access on the device. Launches are asynchronous on the device's stream; nothing here
//! synchronises.
//!
//! Element types: the kernels take raw 16-bit floats, and the launchers are generic over
//! [`KernelFloat`] (`half::bf16`, `half::f16`), which picks the `_bf16` / `_f16` entry point.

use std::collections::BTreeMap;
use std::sync::Arc;

use cudarc::driver::sys::CUfunction_attribute;
use cudarc::driver::{
    CudaFunction, CudaSlice, CudaStream, DevicePtr, DeviceRepr, LaunchConfig, PushKernelArg, ValidAsZeroBits,
};

use super::attention_fast::{
    self, AttentionKernels, FastAttention, SPLIT_PARTITION_MAX, SPLIT_REDUCE_THREADS, SPLIT_THREADS, TC_BLOCK_ROWS,
    TC_THREADS, split_entry_shape, tc_bucket, tc_smem_bytes,
};
use super::compile::{KERNELS, arch_for, compile_cached};
use super::device::{CudaDevice, driver_error};
use crate::engine::DeviceError;

/// Query rows per prefill thread block (`PF_BM` in attention_prefill.cu).
pub const PREFILL_BLOCK_ROWS: usize = 32;
/// Keys per prefill tile (`PF_BN`).
pub const PREFILL_BLOCK_KEYS: usize = 32;
/// Threads per prefill block (`PF_THREADS`).
pub const PREFILL_THREADS: u32 = 128;
/// Context tokens per decode thread block (`DEC_PARTITION` in attention_decode.cu).
pub const DECODE_PARTITION_TOKENS: usize = 512;
/// Query heads one decode block serves (`DEC_MAX_G`).
pub const DECODE_MAX_GROUP: usize = 8;
/// Threads per decode block (`DEC_THREADS`).
pub const DECODE_THREADS: u32 = 256;
/// Largest head dimension the attention kernels take.
pub const MAX_HEAD_DIM: usize = 256;

/// A 16-bit float the kernels take; selects the entry point by suffix.
pub trait KernelFloat: DeviceRepr + ValidAsZeroBits + Copy + Default + Send + Sync + 'static {
    /// Entry-point suffix: "bf16" or "f16".
    const SUFFIX: &'static str;
    fn from_f32(value: f32) -> Self;
    fn to_f32(self) -> f32;
}

impl KernelFloat for half::bf16 {
    const SUFFIX: &'static str = "bf16";
    fn from_f32(value: f32) -> Self {
        half::bf16::from_f32(value)
    }
    fn to_f32(self) -> f32 {
        half::bf16::to_f32(self)
    }
}

impl KernelFloat for half::f16 {
    const SUFFIX: &'static str = "f16";
    fn from_f32(value: f32) -> Self {
        half::f16::from_f32(value)
    }
    fn to_f32(self) -> f32 {
        half::f16::to_f32(self)
    }
}

/// A paged KV cache as the attention kernels read it: `k` and `v` are
/// `[num_blocks, block_size, num_kv_heads, head_dim]`; `block_tables` is
/// `[num_seqs, max_blocks_per_seq]` (physical block of each logical block); `context_lens` is
/// `[num_seqs]`.
pub struct PagedKvCache<'a, T> {
    pub k: &'a CudaSlice<T>,
    pub v: &'a CudaSlice<T>,
    pub block_tables: &'a CudaSlice<i32>,
    pub context_lens: &'a CudaSlice<i32>,
    pub block_size: usize,
    pub num_kv_heads: usize,
    pub head_dim: usize,
    pub max_blocks_per_seq: usize,
}

impl<T> PagedKvCache<'_, T> {
    fn check(&self, num_seqs: usize) -> Result<(), DeviceError> {
        let row = self.block_size * self.num_kv_heads * self.head_dim;
        ensure(self.block_size > 0, "block_size must be positive")?;
        ensure(row > 0, "empty KV cache rows")?;
        ensure(self.k.len().is_multiple_of(row) && self.v.len() == self.k.len(), "k/v cache lengths are not whole blocks")?;
        ensure(self.block_tables.len() >= num_seqs * self.max_blocks_per_seq, "block_tables shorter than num_seqs x max_blocks_per_seq")?;
        ensure(self.context_lens.len() >= num_seqs, "context_lens shorter than num_seqs")?;
        fits_i32(self.k.len(), "KV cache elements")?;
        Ok(())
    }
}

/// A tensor that starts `offset` elements into a device buffer: q, k and v are column ranges of
/// one fused QKV GEMM output, read and written in place through their row strides. Kernels
/// write through it (rotary's q and k in place), so two `At`s into one buffer may both be
/// written: the launchers only hand the device disjoint elements of it.
pub struct At<'a, T> {
    pub buf: &'a CudaSlice<T>,
    pub offset: usize,
}

impl<T> Clone for At<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for At<'_, T> {}

impl<'a, T> From<&'a CudaSlice<T>> for At<'a, T> {
    fn from(buf: &'a CudaSlice<T>) -> Self {
        At { buf, offset: 0 }
    }
}

impl<'a, T> From<&'a mut CudaSlice<T>> for At<'a, T> {
    fn from(buf: &'a mut CudaSlice<T>) -> Self {
        At { buf, offset: 0 }
    }
}

impl<'a, T> At<'a, T> {
    pub fn new(buf: &'a CudaSlice<T>, offset: usize) -> Self {
        At { buf, offset }
    }

    /// Elements from the offset to the end of the buffer.
    pub fn len(&self) -> usize {
        self.buf.len().saturating_sub(self.offset)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The device address of the first element, for a kernel argument.
    pub(super) fn ptr(&self, stream: &CudaStream) -> Result<u64, DeviceError> {
        ensure(self.offset <= self.buf.len(), "tensor offset past the end of its buffer")?;
        let (base, _sync) = self.buf.device_ptr(stream);
        Ok(base + (self.offset * std::mem::size_of::<T>()) as u64)
    }
}

/// Shapes for [`CudaKernels::attention_prefill`].
#[derive(Clone, Copy, Debug)]
pub struct PrefillParams {
    pub num_seqs: usize,
    /// New tokens over all sequences (`cu_seqlens_q[num_seqs]`).
    pub total_new_tokens: usize,
    /// The longest sequence's new tokens (sizes the grid).
    pub max_new_tokens: usize,
    pub num_heads: usize,
    pub scale: f32,
    /// Elements between consecutive tokens of `q` (`num_heads * head_dim` when contiguous).
    pub q_stride: usize,
    /// Elements between consecutive tokens of `k` and `v`.
    pub kv_stride: usize,
}

/// Shapes for [`CudaKernels::attention_decode`].
#[derive(Clone, Copy, Debug)]
pub struct DecodeParams {
    pub num_seqs: usize,
    pub num_heads: usize,
    pub scale: f32,
    /// Elements between consecutive sequences of `q`.
    pub q_stride: usize,
    /// An upper bound on every `context_lens[s]` (tokens including the one decoded). Sizes the
    /// grid: a context longer than this would be silently truncated (the device cannot report
    /// it), so it must be a true bound and fit the workspace.
    pub max_context_len: usize,
}

/// Shapes for [`CudaKernels::rotary`].
#[derive(Clone, Copy, Debug)]
pub struct RotaryParams {
    pub num_tokens: usize,
    pub num_heads: usize,
    pub num_kv_heads: usize,
    pub head_dim: usize,
    /// Rotated dimensions per head (even, ≤ head_dim); `head_dim` for full rotary.
    pub rot_dim: usize,
    /// NeoX/Llama pairing (i, i + rot_dim/2) when true; GPT-J pairing (2i, 2i + 1) when false.
    pub is_neox: bool,
    pub q_stride: usize,
    pub k_stride: usize,
    /// Rows in the cos/sin cache; every position must be below it.
    pub max_position: usize,
}

/// Scratch for split-context decode: partial outputs and softmax statistics per partition.
pub struct DecodeWorkspace {
    pub(super) tmp_out: CudaSlice<f32>,
    pub(super) tmp_max: CudaSlice<f32>,
    pub(super) tmp_sum: CudaSlice<f32>,
    pub(super) num_seqs: usize,
    pub(super) num_heads: usize,
    pub(super) head_dim: usize,
    /// The partition stride of the scratch arrays; 1: the kernel writes `out` directly.
    pub(super) max_partitions: usize,
    /// The longest context it serves, for every kernel that may run with it.
    pub(super) max_context: usize,
}

impl DecodeWorkspace {
    pub fn max_context_len(&self) -> usize {
        self.max_context
    }

    /// Whether a call of `num_seqs` sequences, `partitions` partitions and this head shape fits.
    pub(super) fn fits(&self, num_seqs: usize, partitions: usize, num_heads: usize, head_dim: usize) -> bool {
        partitions <= self.max_partitions
            && (self.max_partitions == 1
                || (self.num_seqs >= num_seqs && self.num_heads == num_heads && self.head_dim == head_dim))
    }
}

/// cos/sin table for [`CudaKernels::rotary`]: row p is cos(p·f_i) for i < rot_dim/2 then
/// sin(p·f_i), f_i = base^(−2i/rot_dim), computed in f64 so long positions keep their accuracy.
pub fn rotary_cos_sin_cache(max_position: usize, rot_dim: usize, base: f64) -> Vec<f32> {
    let half = rot_dim / 2;
    let mut table = Vec::with_capacity(max_position * rot_dim);
    for p in 0..max_position {
        let angles: Vec<f64> = (0..half).map(|i| p as f64 * base.powf(-2.0 * i as f64 / rot_dim as f64)).collect();
        table.extend(angles.iter().map(|a| a.cos() as f32));
        table.extend(angles.iter().map(|a| a.sin() as f32));
    }
    table
}

/// Dynamic shared memory of the prefill kernel for a head dimension, in bytes (Qs in f32 with one
/// column of padding, K and V tiles in 16 bits with two, and the probability tile).
pub fn attention_prefill_smem_bytes(head_dim: usize) -> usize {
    PREFILL_BLOCK_ROWS * (head_dim + 1) * 4
        + 2 * PREFILL_BLOCK_KEYS * (head_dim + 2) * 2
        + PREFILL_BLOCK_ROWS * (PREFILL_BLOCK_KEYS + 1) * 4
}

/// The head-dimension bucket (compile-time register tile) the prefill kernel uses for `head_dim`.
pub fn prefill_head_dim_bucket(head_dim: usize) -> Option<usize> {
    [64, 128, 256].into_iter().find(|&b| head_dim <= b)
}

/// Every kernel compiled for the device and loaded, with typed launchers.
pub struct CudaKernels {
    stream: Arc<CudaStream>,
    functions: BTreeMap<&'static str, CudaFunction>,
    max_smem_optin: usize,
    arch: &'static str,
    /// The tensor-core prefill and split-KV decode kernels, when this device runs them.
    fast: Option<FastAttention>,
    attention: AttentionKernels,
}

impl CudaKernels {
    /// Compiles every kernel the engine launches with NVRTC for the device's architecture and
    /// loads it.
    pub fn load(device: &CudaDevice) -> Result<Self, DeviceError> {
        let arch = arch_for(device.compute_capability())?;
        let ctx = device.context();
        let mut functions = BTreeMap::new();
        let fast_ok = attention_fast::runs_on(arch);
        for kernel in KERNELS.iter().filter(|k| fast_ok || !attention_fast::is_fast(k.name)) {
            let ptx = compile_cached(kernel, arch)?;
            let module = ctx.load_module(ptx).map_err(|e| {
                DeviceError::Failed(format!(
                    "loading the PTX of kernels/{} failed: {e:?} (CUDA_ERROR_UNSUPPORTED_PTX_VERSION means the \
                     driver ({}) is older than NVRTC; use an NVRTC no newer than the driver)",
                    kernel.file,
                    device.driver_version()
                ))
            })?;
            for &entry in kernel.entry_points {
                let f = module
                    .load_function(entry)
                    .map_err(|e| driver_error(&format!("cuModuleGetFunction({entry})"), e))?;
                functions.insert(entry, f);
            }
        }
        let max_smem_optin = device.max_shared_memory_per_block_optin() as usize;
        // Raise the dynamic shared-memory limit of the prefill entry points that need more than
        // the default 48 KiB (head dims above ~160), where the device allows it.
        for (name, f) in &functions {
            // (The tensor-core entries opt in through attention_fast::prepare.)
            if name.starts_with("attention_prefill_tc_") {
                continue;
            }
            if let Some(bucket) = name.strip_prefix("attention_prefill_").and_then(|s| s.split("_d").nth(1)) {
                let d: usize = bucket.parse().unwrap_or(MAX_HEAD_DIM);
                let need = attention_prefill_smem_bytes(d).min(max_smem_optin);
                if need > 48 << 10 {
                    f.set_attribute(
                        CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                        need as i32,
                    )
                    .map_err(|e| driver_error(&format!("raising the shared-memory limit of {name}"), e))?;
                }
            }
        }
        let fast = if fast_ok { attention_fast::prepare(&functions, device, max_smem_optin)? } else { None };
        Ok(Self { stream: device.stream().clone(), functions, max_smem_optin, arch, fast, attention: AttentionKernels::Fast })
    }

    /// Which attention kernels the launchers pick: the fast ones where a shape allows (the
    /// default), or the CUDA-core reference kernels always (to check the fast ones against).
    pub fn set_attention(&mut self, attention: AttentionKernels) {
        self.attention = attention;
    }

    pub fn attention_kernels(&self) -> AttentionKernels {
        self.attention
    }

    /// Whether the tensor-core prefill (some head-dimension bucket) and the split-KV decode were
    /// loaded: false below compute capability 8.0, or where the device refused their set-up.
    pub fn has_fast_attention(&self) -> (bool, bool) {
        self.fast.as_ref().map_or((false, false), |f| (f.prefill_loaded(), f.decode_fits(8)))
    }

    /// The fast kernels, when loaded and chosen.
    pub(super) fn fast(&self) -> Option<&FastAttention> {
        self.fast.as_ref().filter(|_| self.attention == AttentionKernels::Fast)
    }

    /// The PTX architecture the kernels were compiled for.
    pub fn arch(&self) -> &'static str {
        self.arch
    }

    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    pub(super) fn function(&self, name: &str) -> Result<&CudaFunction, DeviceError> {
        self.functions
            .get(name)
            .ok_or_else(|| DeviceError::Failed(format!("kernel entry point {name} is not loaded")))
    }

    /// `out = rmsnorm(x) * weight` over rows of `hidden`.
    pub fn rmsnorm<T: KernelFloat>(
        &self,
        out: &mut CudaSlice<T>,
        x: &CudaSlice<T>,
        weight: &CudaSlice<T>,
        num_tokens: usize,
        hidden: usize,
        eps: f32,
    ) -> Result<(), DeviceError> {
        let rows = x.len().min(out.len());
        let Some((f, cfg, hidden_i)) = self.norm_launch::<T>("rmsnorm", rows, weight.len(), num_tokens, hidden)? else {
            return Ok(());
        };
        let mut b = self.stream.launch_builder(f);
        b.arg(out).arg(x).arg(weight).arg(&eps).arg(&hidden_i);
        // SAFETY: argument order and types match rmsnorm.cu; lengths checked by norm_launch.
        unsafe { b.launch(cfg) }.map(drop).map_err(|e| driver_error("launching rmsnorm", e))
    }

    /// `residual = x + residual; x = rmsnorm(residual) * weight`, in place.
    pub fn fused_add_rmsnorm<T: KernelFloat>(
        &self,
        x: &mut CudaSlice<T>,
        residual: &mut CudaSlice<T>,
        weight: &CudaSlice<T>,
        num_tokens: usize,
        hidden: usize,
        eps: f32,
    ) -> Result<(), DeviceError> {
        let rows = x.len().min(residual.len());
        let Some((f, cfg, hidden_i)) =
            self.norm_launch::<T>("fused_add_rmsnorm", rows, weight.len(), num_tokens, hidden)?
        else {
            return Ok(());
        };
        let mut b = self.stream.launch_builder(f);
        b.arg(x).arg(residual).arg(weight).arg(&eps).arg(&hidden_i);
        // SAFETY: argument order and types match rmsnorm.cu; lengths checked by norm_launch.
        unsafe { b.launch(cfg) }.map(drop).map_err(|e| driver_error("launching fused_add_rmsnorm", e))
    }

    /// The checks and launch shape both RMSNorm entry points share (one block per row):
    /// `None` when there is nothing to do. `buffer_len` is the shorter of the two row buffers.
    fn norm_launch<T: KernelFloat>(
        &self,
        entry: &str,
        buffer_len: usize,
        weight_len: usize,
        num_tokens: usize,
        hidden: usize,
    ) -> Result<Option<(&CudaFunction, LaunchConfig, i32)>, DeviceError> {
        ensure(hidden > 0, "hidden must be positive")?;
        ensure(buffer_len >= num_tokens * hidden, &format!("{entry} buffers too short"))?;
        ensure(weight_len >= hidden, &format!("{entry} weight shorter than hidden"))?;
        if num_tokens == 0 {
            return Ok(None);
        }
        let f = self.function(&format!("{entry}_{}", T::SUFFIX))?;
        let hidden_i = fits_i32(hidden, "hidden")?;
        let cfg = LaunchConfig { grid_dim: (grid_x(num_tokens)?, 1, 1), block_dim: (256, 1, 1), shared_mem_bytes: 0 };
        Ok(Some((f, cfg, hidden_i)))
    }

    /// `out[t, i] = silu(x[t, i]) * x[t, d + i]`; `x` is `[num_tokens, 2d]`, `out` `[num_tokens, d]`.
    pub fn silu_mul<T: KernelFloat>(
        &self,
        out: &mut CudaSlice<T>,
        x: &CudaSlice<T>,
        num_tokens: usize,
        d: usize,
    ) -> Result<(), DeviceError> {
        ensure(x.len() >= num_tokens * 2 * d && out.len() >= num_tokens * d, "silu_mul buffers too short")?;
        if num_tokens == 0 || d == 0 {
            return Ok(());
        }
        ensure(num_tokens <= 65_535, "silu_mul: at most 65535 tokens per launch")?;
        fits_i32(num_tokens * 2 * d, "silu_mul elements")?;
        let f = self.function(&format!("silu_mul_{}", T::SUFFIX))?;
        let d_i = fits_i32(d, "d")?;
        let cfg = LaunchConfig {
            grid_dim: (d.div_ceil(256) as u32, num_tokens as u32, 1),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut b = self.stream.launch_builder(f);
        b.arg(out).arg(x).arg(&d_i);
        // SAFETY: argument order and types match silu_mul.cu; lengths checked above.
        unsafe { b.launch(cfg) }.map(drop).map_err(|e| driver_error("launching silu_mul", e))
    }

    /// Rotary embedding of `q` and `k` in place (both may lie in one buffer, e.g. the fused QKV
    /// output). `cos_sin` comes from [`rotary_cos_sin_cache`].
    pub fn rotary<'a, T: KernelFloat>(
        &self,
        q: impl Into<At<'a, T>>,
        k: impl Into<At<'a, T>>,
        positions: &CudaSlice<i32>,
        cos_sin: &CudaSlice<f32>,
        p: &RotaryParams,
    ) -> Result<(), DeviceError> {
        let (q, k) = (q.into(), k.into());
        ensure(p.rot_dim.is_multiple_of(2) && p.rot_dim > 0 && p.rot_dim <= p.head_dim, "rot_dim must be even, positive and <= head_dim")?;
        ensure(p.q_stride >= p.num_heads * p.head_dim && p.k_stride >= p.num_kv_heads * p.head_dim, "rotary strides too small")?;
        if p.num_tokens == 0 {
            return Ok(());
        }
        ensure(q.len() >= (p.num_tokens - 1) * p.q_stride + p.num_heads * p.head_dim, "rotary q too short")?;
        ensure(k.len() >= (p.num_tokens - 1) * p.k_stride + p.num_kv_heads * p.head_dim, "rotary k too short")?;
        ensure(positions.len() >= p.num_tokens, "positions shorter than num_tokens")?;
        ensure(cos_sin.len() >= p.max_position * p.rot_dim, "cos_sin cache shorter than max_position x rot_dim")?;
        let f = self.function(&format!("rotary_{}", T::SUFFIX))?;
        let args = [p.q_stride, p.k_stride, p.num_heads, p.num_kv_heads, p.head_dim, p.rot_dim]
            .iter()
            .map(|&v| fits_i32(v, "rotary shape"))
            .collect::<Result<Vec<_>, _>>()?;
        let is_neox = i32::from(p.is_neox);
        let (q_ptr, k_ptr) = (q.ptr(&self.stream)?, k.ptr(&self.stream)?);
        let cfg = LaunchConfig { grid_dim: (grid_x(p.num_tokens)?, 1, 1), block_dim: (128, 1, 1), shared_mem_bytes: 0 };
        let mut b = self.stream.launch_builder(f);
        b.arg(&q_ptr).arg(&k_ptr).arg(positions).arg(cos_sin);
        for a in &args {
            b.arg(a);
        }
        b.arg(&is_neox);
        // SAFETY: argument order and types match rotary.cu (pointers as device addresses);
        // lengths checked above (positions are trusted to be < max_position).
        unsafe { b.launch(cfg) }.map(drop).map_err(|e| driver_error("launching rotary", e))
    }

    /// Writes new tokens' keys and values into the paged cache at `slot_mapping` (negative slots
    /// are skipped). `key`/`value` are `[num_tokens, num_kv_heads, head_dim]` with token stride
    /// `kv_stride`.
    #[allow(clippy::too_many_arguments)]
    pub fn reshape_and_cache<'a, T: KernelFloat>(
        &self,
        key: impl Into<At<'a, T>>,
        value: impl Into<At<'a, T>>,
        k_cache: &mut CudaSlice<T>,
        v_cache: &mut CudaSlice<T>,
        slot_mapping: &CudaSlice<i32>,
        num_tokens: usize,
        num_kv_heads: usize,
        head_dim: usize,
        kv_stride: usize,
    ) -> Result<(), DeviceError> {
        let (key, value) = (key.into(), value.into());
        let row = num_kv_heads * head_dim;
        ensure(row > 0 && kv_stride >= row, "reshape_and_cache: bad row or stride")?;
        if num_tokens == 0 {
            return Ok(());
        }
        ensure(key.len() >= (num_tokens - 1) * kv_stride + row && value.len() >= (num_tokens - 1) * kv_stride + row, "key/value too short")?;
        ensure(k_cache.len() == v_cache.len() && k_cache.len().is_multiple_of(row), "k/v caches differ or are not whole rows")?;
        ensure(slot_mapping.len() >= num_tokens, "slot_mapping shorter than num_tokens")?;
        let f = self.function("reshape_and_cache_u16")?;
        let (kv_stride_i, heads_i, dim_i) =
            (fits_i32(kv_stride, "kv_stride")?, fits_i32(num_kv_heads, "num_kv_heads")?, fits_i32(head_dim, "head_dim")?);
        let cfg = LaunchConfig { grid_dim: (grid_x(num_tokens)?, 1, 1), block_dim: (128, 1, 1), shared_mem_bytes: 0 };
        let (key, value) = (key.ptr(&self.stream)?, value.ptr(&self.stream)?);
        let mut b = self.stream.launch_builder(f);
        b.arg(&key).arg(&value).arg(k_cache).arg(v_cache).arg(slot_mapping).arg(&kv_stride_i).arg(&heads_i).arg(&dim_i);
        // SAFETY: argument order and types match kv_cache.cu; slots are trusted to be in the cache.
        unsafe { b.launch(cfg) }.map(drop).map_err(|e| driver_error("launching reshape_and_cache", e))
    }

    /// Causal varlen attention of new tokens over their cached context and themselves.
    /// `q`: `[total_new_tokens, num_heads, head_dim]` (token stride `q_stride`); `k`, `v`:
    /// `[total_new_tokens, num_kv_heads, head_dim]` (token stride `kv_stride`); `cu_seqlens_q`:
    /// `[num_seqs + 1]`; `out`: `[total_new_tokens, num_heads, head_dim]` contiguous.
    #[allow(clippy::too_many_arguments)]
    /// Runs the tensor-core kernel (`attention_prefill_tc.cu`) where the device and shape allow
    /// it and the fast kernels are chosen ([`CudaKernels::set_attention`]), else the CUDA-core
    /// one (`attention_prefill.cu`).
    pub fn attention_prefill<'a, T: KernelFloat>(
        &self,
        out: &mut CudaSlice<T>,
        q: impl Into<At<'a, T>>,
        k: impl Into<At<'a, T>>,
        v: impl Into<At<'a, T>>,
        cache: &PagedKvCache<'_, T>,
        cu_seqlens_q: &CudaSlice<i32>,
        p: &PrefillParams,
    ) -> Result<(), DeviceError> {
        let (q, k, v) = (q.into(), k.into(), v.into());
        let d = cache.head_dim;
        check_heads(p.num_heads, cache.num_kv_heads, d)?;
        cache.check(p.num_seqs)?;
        ensure(p.q_stride >= p.num_heads * d && p.kv_stride >= cache.num_kv_heads * d, "prefill strides too small")?;
        ensure(cu_seqlens_q.len() > p.num_seqs, "cu_seqlens_q needs num_seqs + 1 entries")?;
        if p.num_seqs == 0 || p.total_new_tokens == 0 || p.max_new_tokens == 0 {
            return Ok(());
        }
        let t = p.total_new_tokens;
        ensure(q.len() >= (t - 1) * p.q_stride + p.num_heads * d, "q too short")?;
        ensure(k.len() >= (t - 1) * p.kv_stride + cache.num_kv_heads * d && v.len() >= (t - 1) * p.kv_stride + cache.num_kv_heads * d, "k/v too short")?;
        ensure(out.len() >= t * p.num_heads * d, "out too short")?;
        ensure(p.num_heads <= 65_535 && p.num_seqs <= 65_535, "prefill: at most 65535 heads and sequences")?;
        fits_i32(q.len().max(k.len()).max(out.len()), "prefill tensor elements")?;
        if self.fast().is_some_and(|f| f.prefill_fits(d, [p.q_stride, p.kv_stride], [q.offset, k.offset, v.offset])) {
            return self.attention_prefill_tc(out, [q, k, v], cache, cu_seqlens_q, p);
        }
        let bucket = prefill_head_dim_bucket(d)
            .ok_or_else(|| DeviceError::Unsupported(format!("head_dim {d} > {MAX_HEAD_DIM}")))?;
        let smem = attention_prefill_smem_bytes(d);
        ensure_unsupported(
            smem <= self.max_smem_optin.max(48 << 10),
            &format!("prefill attention with head_dim {d} needs {smem} bytes of shared memory; the device allows {}", self.max_smem_optin),
        )?;
        let f = self.function(&format!("attention_prefill_{}_d{bucket}", T::SUFFIX))?;
        let ints = [p.num_heads, cache.num_kv_heads, d, p.q_stride, p.kv_stride, cache.block_size, cache.max_blocks_per_seq]
            .iter()
            .map(|&x| fits_i32(x, "prefill shape"))
            .collect::<Result<Vec<_>, _>>()?;
        let cfg = LaunchConfig {
            grid_dim: (grid_x(p.max_new_tokens.div_ceil(PREFILL_BLOCK_ROWS))?, p.num_heads as u32, p.num_seqs as u32),
            block_dim: (PREFILL_THREADS, 1, 1),
            shared_mem_bytes: smem as u32,
        };
        let (q, k, v) = (q.ptr(&self.stream)?, k.ptr(&self.stream)?, v.ptr(&self.stream)?);
        let mut b = self.stream.launch_builder(f);
        b.arg(out).arg(&q).arg(&k).arg(&v).arg(cache.k).arg(cache.v).arg(cache.block_tables).arg(cache.context_lens);
        b.arg(cu_seqlens_q).arg(&p.scale);
        for x in &ints {
            b.arg(x);
        }
        // SAFETY: argument order and types match attention_prefill.cu; shapes and lengths checked
        // above; block tables and sequence offsets are trusted to be consistent with them.
        unsafe { b.launch(cfg) }.map(drop).map_err(|e| driver_error("launching attention_prefill", e))
    }

    /// Allocates scratch for decoding `num_seqs` sequences of up to `max_context_len` tokens with
    /// `num_kv_heads` KV heads, for whichever decode kernel a call of that size picks.
    pub fn decode_workspace(
        &self,
        num_seqs: usize,
        num_heads: usize,
        num_kv_heads: usize,
        head_dim: usize,
        max_context_len: usize,
    ) -> Result<DecodeWorkspace, DeviceError> {
        let reference = max_context_len.div_ceil(DECODE_PARTITION_TOKENS).max(1);
        let fast = self
            .fast()
            .filter(|f| f.decode_fits(head_dim))
            .map_or(1, |f| f.decode_partitions(num_seqs, num_heads, num_kv_heads, head_dim, max_context_len).1);
        let max_partitions = reference.max(fast);
        let heads = num_seqs.max(1) * num_heads.max(1);
        // With one partition the kernel writes `out` directly; keep the scratch tiny.
        let (out_len, stat_len) =
            if max_partitions == 1 { (1, 1) } else { (heads * max_partitions * head_dim, heads * max_partitions) };
        let alloc = |n: usize| self.stream.alloc_zeros::<f32>(n).map_err(|e| driver_error("allocating decode scratch", e));
        Ok(DecodeWorkspace {
            tmp_out: alloc(out_len)?,
            tmp_max: alloc(stat_len)?,
            tmp_sum: alloc(stat_len)?,
            num_seqs,
            num_heads,
            head_dim,
            max_partitions,
            max_context: max_context_len,
        })
    }

    /// One decode step of attention over the paged cache (`context_lens` include the new token,
    /// whose K/V must already be in the cache). `q`: `[num_seqs, num_heads, head_dim]` with
    /// sequence stride `q_stride`; `out`: `[num_seqs, num_heads, head_dim]`.
    ///
    /// Runs the split-KV kernel (`attention_decode_split.cu`) where the shape allows it and the
    /// fast kernels are chosen, else the CUDA-core one (`attention_decode.cu`).
    pub fn attention_decode<'a, T: KernelFloat>(
        &self,
        out: &mut CudaSlice<T>,
        q: impl Into<At<'a, T>>,
        cache: &PagedKvCache<'_, T>,
        workspace: &mut DecodeWorkspace,
        p: &DecodeParams,
    ) -> Result<(), DeviceError> {
        let q = q.into();
        let d = cache.head_dim;
        check_heads(p.num_heads, cache.num_kv_heads, d)?;
        cache.check(p.num_seqs)?;
        if p.num_seqs == 0 {
            return Ok(());
        }
        ensure(p.q_stride >= p.num_heads * d, "decode q_stride too small")?;
        ensure(q.len() >= (p.num_seqs - 1) * p.q_stride + p.num_heads * d, "q too short")?;
        ensure(out.len() >= p.num_seqs * p.num_heads * d, "out too short")?;
        ensure(p.max_context_len <= workspace.max_context, "decode workspace made for shorter contexts")?;
        if let Some(fast) = self.fast().filter(|f| f.decode_fits(d) && p.q_stride.is_multiple_of(8) && q.offset.is_multiple_of(8)) {
            return self.attention_decode_split(fast, out, q, cache, workspace, p);
        }
        // Partitions this call launches; the workspace may have room for more (a workspace made
        // for the longest context serves every shorter step). Its partition count is the stride
        // of the scratch arrays and decides whether the kernel writes `out` directly (1).
        let partitions = p.max_context_len.div_ceil(DECODE_PARTITION_TOKENS).max(1);
        let stride = workspace.max_partitions;
        ensure(
            workspace.fits(p.num_seqs, partitions, p.num_heads, d),
            "decode workspace too small for this call (more sequences, longer contexts or another head shape)",
        )?;
        ensure(p.num_seqs <= 65_535 && partitions <= 65_535, "decode: at most 65535 sequences and partitions")?;
        fits_i32(cache.k.len().max(q.len()).max(out.len()), "decode tensor elements")?;
        let group = p.num_heads / cache.num_kv_heads;
        let head_groups = group.div_ceil(DECODE_MAX_GROUP);
        let ints = [p.num_heads, cache.num_kv_heads, d, p.q_stride, cache.block_size, cache.max_blocks_per_seq, stride]
            .iter()
            .map(|&x| fits_i32(x, "decode shape"))
            .collect::<Result<Vec<_>, _>>()?;
        let f = self.function(&format!("attention_decode_{}", T::SUFFIX))?;
        let cfg = LaunchConfig {
            grid_dim: (grid_x(cache.num_kv_heads * head_groups)?, p.num_seqs as u32, partitions as u32),
            block_dim: (DECODE_THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        {
            let q = q.ptr(&self.stream)?;
            let mut b = self.stream.launch_builder(f);
            b.arg(&mut *out).arg(&q).arg(cache.k).arg(cache.v).arg(cache.block_tables).arg(cache.context_lens);
            b.arg(&mut workspace.tmp_out).arg(&mut workspace.tmp_max).arg(&mut workspace.tmp_sum).arg(&p.scale);
            for x in &ints {
                b.arg(x);
            }
            // SAFETY: argument order and types match attention_decode.cu; shapes checked above;
            // context_lens are trusted to be <= max_context_len and covered by the block tables.
            unsafe { b.launch(cfg) }.map_err(|e| driver_error("launching attention_decode", e))?;
        }
        if stride > 1 {
            let f = self.function(&format!("attention_decode_reduce_{}", T::SUFFIX))?;
            let (heads_i, dim_i, parts_i) = (ints[0], ints[2], ints[6]);
            let cfg = LaunchConfig {
                grid_dim: (p.num_heads as u32, p.num_seqs as u32, 1),
                block_dim: (128, 1, 1),
                shared_mem_bytes: 0,
            };
            let mut b = self.stream.launch_builder(f);
            b.arg(out).arg(&workspace.tmp_out).arg(&workspace.tmp_max).arg(&workspace.tmp_sum).arg(cache.context_lens);
            b.arg(&heads_i).arg(&dim_i).arg(&parts_i);
            // SAFETY: argument order and types match attention_decode.cu.
            unsafe { b.launch(cfg) }.map_err(|e| driver_error("launching attention_decode_reduce", e))?;
        }
        Ok(())
    }

    /// Copies rows by index: `out[i, :] = src[indices[i], :]` for `i < num_rows`, rows of
    /// `row_len` elements. The indices are trusted to be below `src.len() / row_len` (the device
    /// cannot report one that is not): callers check them on the host before uploading.
    pub fn gather_rows<T: KernelFloat>(
        &self,
        out: &mut CudaSlice<T>,
        src: &CudaSlice<T>,
        indices: &CudaSlice<i32>,
        num_rows: usize,
        row_len: usize,
    ) -> Result<(), DeviceError> {
        ensure(row_len > 0, "gather_rows: row_len must be positive")?;
        ensure(out.len() >= num_rows * row_len, "gather_rows: out shorter than num_rows x row_len")?;
        ensure(indices.len() >= num_rows, "gather_rows: indices shorter than num_rows")?;
        ensure(src.len() >= row_len, "gather_rows: src holds no whole row")?;
        if num_rows == 0 {
            return Ok(());
        }
        let row_len_i = fits_i32(row_len, "row_len")?;
        let f = self.function("gather_rows_u16")?;
        let cfg = LaunchConfig { grid_dim: (grid_x(num_rows)?, 1, 1), block_dim: (128, 1, 1), shared_mem_bytes: 0 };
        let mut b = self.stream.launch_builder(f);
        b.arg(out).arg(src).arg(indices).arg(&row_len_i);
        // SAFETY: argument order and types match gather.cu; lengths checked above, indices
        // trusted (see the doc comment).
        unsafe { b.launch(cfg) }.map(drop).map_err(|e| driver_error("launching gather_rows", e))
    }

    /// Fills `x` with deterministic pseudo-random values uniform in [−amplitude, amplitude).
    pub fn fill_uniform<T: KernelFloat>(&self, x: &mut CudaSlice<T>, seed: u32, amplitude: f32) -> Result<(), DeviceError> {
        let f = self.function(&format!("fill_uniform_{}", T::SUFFIX))?;
        let n = x.len() as u64;
        if n == 0 {
            return Ok(());
        }
        let cfg = fill_config(n);
        let mut b = self.stream.launch_builder(f);
        b.arg(x).arg(&n).arg(&seed).arg(&amplitude);
        // SAFETY: argument order and types match fill.cu; the kernel writes exactly n elements.
        unsafe { b.launch(cfg) }.map(drop).map_err(|e| driver_error("launching fill_uniform", e))
    }

    /// Fills `x` with deterministic pseudo-random finite fp8 e4m3 values.
    pub fn fill_e4m3(&self, x: &mut CudaSlice<u8>, seed: u32) -> Result<(), DeviceError> {
        let f = self.function("fill_e4m3")?;
        let n = x.len() as u64;
        if n == 0 {
            return Ok(());
        }
        let cfg = fill_config(n);
        let mut b = self.stream.launch_builder(f);
        b.arg(x).arg(&n).arg(&seed);
        // SAFETY: argument order and types match fill.cu; the kernel writes exactly n elements.
        unsafe { b.launch(cfg) }.map(drop).map_err(|e| driver_error("launching fill_e4m3", e))
    }
}

/// The fast attention kernels' launches (`attention_fast` holds their contracts).
impl CudaKernels {
    /// Launches the tensor-core prefill (the caller checked `FastAttention::prefill_fits` and
    /// the common arguments).
    fn attention_prefill_tc<T: KernelFloat>(
        &self,
        out: &mut CudaSlice<T>,
        [q, k, v]: [At<'_, T>; 3],
        cache: &PagedKvCache<'_, T>,
        cu_seqlens_q: &CudaSlice<i32>,
        p: &PrefillParams,
    ) -> Result<(), DeviceError> {
        let d = cache.head_dim;
        let bucket = tc_bucket(d).ok_or_else(|| DeviceError::Failed(format!("head_dim {d} has no tensor-core bucket")))?;
        let f = self.function(&format!("attention_prefill_tc_{}_d{bucket}", T::SUFFIX))?;
        let ints = [p.num_heads, cache.num_kv_heads, d, p.q_stride, p.kv_stride, cache.block_size, cache.max_blocks_per_seq]
            .iter()
            .map(|&x| fits_i32(x, "prefill shape"))
            .collect::<Result<Vec<_>, _>>()?;
        let cfg = LaunchConfig {
            grid_dim: (grid_x(p.max_new_tokens.div_ceil(TC_BLOCK_ROWS))?, p.num_heads as u32, p.num_seqs as u32),
            block_dim: (TC_THREADS, 1, 1),
            shared_mem_bytes: tc_smem_bytes(bucket) as u32,
        };
        let stream = &self.stream;
        let (q, k, v) = (q.ptr(stream)?, k.ptr(stream)?, v.ptr(stream)?);
        let mut b = stream.launch_builder(f);
        b.arg(out).arg(&q).arg(&k).arg(&v).arg(cache.k).arg(cache.v).arg(cache.block_tables).arg(cache.context_lens);
        b.arg(cu_seqlens_q).arg(&p.scale);
        for x in &ints {
            b.arg(x);
        }
        // SAFETY: argument order and types match attention_prefill_tc.cu's entry points; shapes,
        // lengths, 16-byte strides and offsets checked by the caller and prefill_fits; the entry
        // was opted into its shared memory at load.
        unsafe { b.launch(cfg) }.map(drop).map_err(|e| driver_error("launching attention_prefill_tc", e))
    }

    /// Launches the split-KV decode and, when the workspace has partitions, its reduce (the
    /// caller checked `FastAttention::decode_fits` and the common arguments).
    fn attention_decode_split<T: KernelFloat>(
        &self,
        fast: &FastAttention,
        out: &mut CudaSlice<T>,
        q: At<'_, T>,
        cache: &PagedKvCache<'_, T>,
        workspace: &mut DecodeWorkspace,
        p: &DecodeParams,
    ) -> Result<(), DeviceError> {
        let d = cache.head_dim;
        let group = p.num_heads / cache.num_kv_heads;
        let (bucket, g) = split_entry_shape(d, group).ok_or_else(|| DeviceError::Failed(format!("head_dim {d} > 256")))?;
        let (mut size, _) = fast.decode_partitions(p.num_seqs, p.num_heads, cache.num_kv_heads, d, p.max_context_len);
        // A workspace sized for a larger batch has fewer partitions than this call would pick:
        // longer partitions fit it.
        while p.max_context_len.div_ceil(size) > workspace.max_partitions && size < SPLIT_PARTITION_MAX {
            size *= 2;
        }
        let partitions = p.max_context_len.div_ceil(size).max(1);
        ensure(
            workspace.fits(p.num_seqs, partitions, p.num_heads, d),
            "decode workspace too small for this call (more sequences, longer contexts or another head shape)",
        )?;
        ensure(p.num_seqs <= 65_535 && partitions <= 65_535, "decode: at most 65535 sequences and partitions")?;
        let stride = workspace.max_partitions;
        let ints = [
            p.num_heads,
            cache.num_kv_heads,
            d,
            p.q_stride,
            cache.block_size,
            cache.max_blocks_per_seq,
            stride,
            size,
        ]
        .iter()
        .map(|&x| fits_i32(x, "decode shape"))
        .collect::<Result<Vec<_>, _>>()?;
        let f = self.function(&format!("attention_decode_split_{}_d{bucket}_g{g}", T::SUFFIX))?;
        let cfg = LaunchConfig {
            grid_dim: (grid_x(cache.num_kv_heads * group.div_ceil(g))?, p.num_seqs as u32, partitions as u32),
            block_dim: (SPLIT_THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        let stream = &self.stream;
        {
            let q = q.ptr(stream)?;
            let mut b = stream.launch_builder(f);
            b.arg(&mut *out).arg(&q).arg(cache.k).arg(cache.v).arg(cache.block_tables).arg(cache.context_lens);
            b.arg(&mut workspace.tmp_out).arg(&mut workspace.tmp_max).arg(&mut workspace.tmp_sum).arg(&p.scale);
            for x in &ints {
                b.arg(x);
            }
            // SAFETY: argument order and types match attention_decode_split.cu's DS_PARAMS;
            // shapes checked above and by the caller; context_lens are trusted to be <=
            // max_context_len and covered by the block tables.
            unsafe { b.launch(cfg) }.map_err(|e| driver_error("launching attention_decode_split", e))?;
        }
        if stride > 1 {
            let f = self.function(&format!("attention_decode_split_reduce_{}", T::SUFFIX))?;
            let (heads_i, dim_i, parts_i, size_i) = (ints[0], ints[2], ints[6], ints[7]);
            let cfg = LaunchConfig {
                grid_dim: (p.num_heads as u32, p.num_seqs as u32, 1),
                block_dim: (SPLIT_REDUCE_THREADS, 1, 1),
                shared_mem_bytes: 0,
            };
            let mut b = stream.launch_builder(f);
            b.arg(out).arg(&workspace.tmp_out).arg(&workspace.tmp_max).arg(&workspace.tmp_sum).arg(cache.context_lens);
            b.arg(&heads_i).arg(&dim_i).arg(&parts_i).arg(&size_i);
            // SAFETY: argument order and types match attention_decode_split_reduce_*.
            unsafe { b.launch(cfg) }.map_err(|e| driver_error("launching attention_decode_split_reduce", e))?;
        }
        Ok(())
    }
}

fn fill_config(n: u64) -> LaunchConfig {
    LaunchConfig { grid_dim: (n.div_ceil(256).min(65_535) as u32, 1, 1), block_dim: (256, 1, 1), shared_mem_bytes: 0 }
}

pub(super) fn check_heads(num_heads: usize, num_kv_heads: usize, head_dim: usize) -> Result<(), DeviceError> {
    ensure(num_heads > 0 && num_kv_heads > 0, "head counts must be positive")?;
    ensure(num_heads.is_multiple_of(num_kv_heads), "num_heads must be a multiple of num_kv_heads")?;
    ensure_unsupported(head_dim > 0 && head_dim.is_multiple_of(2) && head_dim <= MAX_HEAD_DIM, &format!("head_dim {head_dim}: must be even and at most {MAX_HEAD_DIM}"))
}

pub(super) fn ensure(ok: bool, message: &str) -> Result<(), DeviceError> {
    if ok { Ok(()) } else { Err(DeviceError::Failed(format!("kernel arguments: {message}"))) }
}

pub(super) fn ensure_unsupported(ok: bool, message: &str) -> Result<(), DeviceError> {
    if ok { Ok(()) } else { Err(DeviceError::Unsupported(message.to_string())) }
}

/// The kernels index with 32-bit ints where a value is a count of elements in one dimension.
pub(super) fn fits_i32(value: usize, what: &str) -> Result<i32, DeviceError> {
    i32::try_from(value).map_err(|_| DeviceError::Unsupported(format!("{what} = {value} exceeds 2^31 - 1")))
}

pub(super) fn grid_x(blocks: usize) -> Result<u32, DeviceError> {
    u32::try_from(blocks)
        .ok()
        .filter(|&b| b < (1u32 << 31))
        .ok_or_else(|| DeviceError::Unsupported(format!("grid of {blocks} blocks is too large")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constants_match_the_kernel_sources() {
        let prefill = include_str!("../../../kernels/attention_prefill.cu");
        assert!(prefill.contains(&format!("#define PF_BM {PREFILL_BLOCK_ROWS}\n")));
        assert!(prefill.contains(&format!("#define PF_BN {PREFILL_BLOCK_KEYS}\n")));
        assert!(prefill.contains(&format!("#define PF_THREADS {PREFILL_THREADS}\n")));
        let decode = include_str!("../../../kernels/attention_decode.cu");
        assert!(decode.contains(&format!("#define DEC_PARTITION {DECODE_PARTITION_TOKENS}\n")));
        assert!(decode.contains(&format!("#define DEC_MAX_G {DECODE_MAX_GROUP}\n")));
        assert!(decode.contains(&format!("#define DEC_THREADS {DECODE_THREADS}\n")));
        assert!(decode.contains(&format!("#define DEC_MAX_D {MAX_HEAD_DIM}\n")));
    }

    #[test]
    fn prefill_shared_memory() {
        assert_eq!(attention_prefill_smem_bytes(128), 32 * 129 * 4 + 2 * 32 * 130 * 2 + 32 * 33 * 4);
        assert!(attention_prefill_smem_bytes(128) <= 48 << 10);
        assert_eq!(prefill_head_dim_bucket(80), Some(128));
        assert_eq!(prefill_head_dim_bucket(64), Some(64));
        assert_eq!(prefill_head_dim_bucket(257), None);
    }

    #[test]
    fn cos_sin_cache_rows() {
        let t = rotary_cos_sin_cache(3, 4, 10_000.0);
        assert_eq!(t.len(), 12);
        assert_eq!(&t[0..4], &[1.0, 1.0, 0.0, 0.0]);
        assert!((t[4] - 1f32.cos()).abs() < 1e-7 && (t[6] - 1f32.sin()).abs() < 1e-7);
        assert!((t[5] - (0.01f64).cos() as f32).abs() < 1e-7);
    }
}
