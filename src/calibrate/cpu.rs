//! The CPU calibration backend: times the CPU engine's own kernels (`src/engine/cpu/`) on a
//! rayon pool of a chosen size, with a monotonic clock.
//!
//! ```text
//!  new        rayon pool of `threads`; peak FLOP/s from 1024³ GEMMs, bandwidth from parallel
//!             copies of a buffer 4 × the last-level cache                    (< 1 s)
//!  prepare_*  allocate operands, fill them with seeded pseudo-random values (in parallel), build
//!             the paged cache and block tables                               ─► PreparedOp
//!  run_once   inside the pool: Instant ─► kernel(s) ─► elapsed; servesim's code allocates
//!             nothing on this path (the gemm crate sizes and allocates its packing buffers)
//!  flush      the pool's threads read one float per cache line of a buffer 2 × the last-level
//!             cache, evicting the last run's operands (an engine step finds weights and KV
//!             cache in memory, not in cache: a 100M-parameter f32 model is 400 MB)
//! ```
//!
//! What an attention shape times is what the engine's attention step runs per layer, as on CUDA:
//! write the new tokens' keys and values into the paged cache ([`write_paged`]), then attend —
//! prefill: [`prefill_attention`] over the new tokens' own keys ([`PackedKv`], no context);
//! mixed: [`prefill_attention`] over the cache ([`PagedKv`], context + new tokens); decode:
//! [`decode_attention`] over the cache. Caches use 16-token blocks handed out in a scrambled
//! (seeded) order, as in a cache that has served many requests, and each run reads the next of
//! several copies of the cache, as each layer of a step reads its own (see [`KV_COPIES`]).
//!
//! A GEMM that streams its weights (a decode step's) is timed among its layer's GEMMs, in order,
//! over copies of the layer's weights (see [`GemmSequenceOp`]); a compute-bound one over copies
//! of its own B.
//!
//! GEMMs take B as `[k × n]` row-major ([`CALIBRATION_B_LAYOUT`]): the layout the CPU engine
//! keeps its weights in, for speed at decode-sized m. They run through [`Gemm::run`], as the
//! engine's do, so a profile times whichever kernel the engine gets for each shape (the `gemm`
//! crate, or the AVX-512 few-row kernel for 7–64 rows of a B larger than L2).

use std::time::Instant;

use rayon::prelude::*;

use super::backend::{
    AttentionPhase, AttentionShape, Backend, DeviceError, DeviceInfo, GemmShape, Peak, PreparedOp, SamplingOp, SamplingShape,
    StepGemms,
};
use super::grid::gemm_work;
use crate::engine::cpu::{
    AttentionDims, BLayout, Gemm, KERNEL_SOURCES, PackedKv, PagedCache, PagedKv, decode_attention, gemm_skinny,
    prefill_attention, write_paged,
};
use crate::scenario::model::Dtype;

/// Tokens per KV-cache block in calibration (vLLM's default, and the CUDA backend's).
pub use super::backend::CALIBRATION_BLOCK_SIZE;

/// B's layout in calibrated GEMMs, which must be the CPU engine's: weights transposed once at
/// load to `[in, out]` (row-major `[k × n]`). With the `gemm` crate that is as fast as `[out,
/// in]` at large m and 1.2–3.5× faster at decode-sized m (4–32 rows; measured on one core).
pub const CALIBRATION_B_LAYOUT: BLayout = BLayout::RowMajor;

/// Passes over the grid a CPU calibration makes by default (`RunOptions::passes`). On the
/// development machine the same kernel's time moved by 10% over a few seconds, and a shape is
/// timed in well under a second: one profile had the 100m model's LM head at 6.6 ms for m = 6
/// (4.7 ms in another), and priced the engine's decode steps of 6 sequences 17% dear. With
/// three passes a shape's median drops one disturbed pass.
pub const PASSES_DEFAULT: u32 = 3;

/// Most bytes of operands a CPU calibration holds at once by default (see
/// [`memory_cap_default_bytes`]). It was half the memory available at start-up: 11 GiB on the
/// development machine, where the default grid (every preset) kept a 70B model's layer and LM
/// head and grew to 12.4 GB. 4 GiB holds every shape of the 1B-3B models and an 8B model's
/// layer with its LM head (3 GiB), and leaves a shared machine its memory.
pub const MEMORY_CAP_BYTES: u64 = 4 << 30;

/// The cap on operands held at once: [`MEMORY_CAP_BYTES`], or a quarter of the memory available
/// at start-up where that is less.
pub fn memory_cap_default_bytes() -> u64 {
    mem_available_bytes().map_or(MEMORY_CAP_BYTES, |b| (b / 4).min(MEMORY_CAP_BYTES))
}

/// Assumed last-level cache when sysfs does not say (a common server L3 slice).
const LLC_BYTES_DEFAULT: usize = 32 << 20;

/// The environment variable that sets the last-level cache a CPU calibration assumes, in MiB,
/// instead of what sysfs reports: the cache sizes the flush buffer and how many copies of small
/// weights a GEMM streams, so a test or CI run can pin it (a VM may report its host's 300 MiB).
pub const LLC_MIB_VAR: &str = "SERVESIM_LLC_MIB";

/// Largest last-level cache [`LLC_MIB_VAR`] accepts: beyond any CPU made, and the flush buffer is
/// capped at 512 MiB anyway.
const LLC_MIB_MAX: u64 = 1 << 16;

/// Calibrates this machine's CPU with the engine's f32 kernels on `threads` threads.
pub struct CpuBackend {
    pool: rayon::ThreadPool,
    threads: usize,
    peak: Peak,
    name: String,
    /// Read between repeats to evict the caches: 2 × the last-level cache (see [`host_llc_bytes`]).
    flush: Vec<f32>,
    /// Most bytes of operands held at once: kept weights, KV-cache copies and the shape being
    /// prepared (see [`memory_cap_default_bytes`]).
    bytes_max: u64,
    /// Seed for operand fills; advanced per prepared op so operands differ between shapes.
    seed: u64,
    /// Weights of the GEMM sequences timed last (most recent last; see [`WEIGHTS_KEPT`]).
    weights_kept: Vec<SequenceWeights>,
    /// Paged caches that attention shapes read, kept between shapes.
    kv: KvCopies,
}

/// Copies of a GEMM sequence's weights, kept between shapes: every m of a layer's GEMMs reads
/// the same weights, as an engine's steps do, and a CPU spends longer filling a large model's
/// layers than timing them.
struct SequenceWeights {
    sequence: Vec<(u32, u32)>,
    /// `[copy][gemm in the sequence]`: B of each GEMM, `[k × n]`.
    copies: Vec<Vec<Vec<f32>>>,
}

impl SequenceWeights {
    fn bytes(&self) -> u64 {
        self.copies.iter().flatten().map(|b| b.len() as u64 * 4).sum()
    }
}

/// Weight sets kept: a layer's, and the layer-plus-LM-head sequence of the same model.
const WEIGHTS_KEPT: usize = 2;

impl CpuBackend {
    /// Builds a pool of `threads` workers and measures [`Peak`] on it (about 0.1–0.5 s), for the
    /// host's last-level cache ([`host_llc_bytes`]).
    ///
    /// Errors: `Failed` when `threads` is 0, the pool cannot be built or [`LLC_MIB_VAR`] is
    /// malformed.
    pub fn new(threads: usize) -> Result<CpuBackend, DeviceError> {
        CpuBackend::with_llc_bytes(threads, host_llc_bytes()?)
    }

    /// [`CpuBackend::new`] for a last-level cache of `llc_bytes`, whatever the host has.
    pub fn with_llc_bytes(threads: usize, llc_bytes: usize) -> Result<CpuBackend, DeviceError> {
        if threads == 0 {
            return Err(DeviceError::Failed("the CPU backend needs at least 1 thread".to_string()));
        }
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .thread_name(|i| format!("servesim-cpu-{i}"))
            .build()
            .map_err(|e| DeviceError::Failed(format!("building a pool of {threads} threads: {e}")))?;
        let llc = llc_bytes;
        let bytes_max = memory_cap_default_bytes();
        let mut backend = CpuBackend {
            pool,
            threads,
            peak: Peak { flops_per_s: 0.0, memory_bytes_per_s: 0.0 },
            name: cpu_model_name().unwrap_or_else(|| format!("unknown {} CPU", std::env::consts::ARCH)),
            // Written, not zeroed: untouched zeroed pages all map to one shared page, and
            // reading that evicts nothing.
            flush: vec![1.0; (2 * llc).clamp(32 << 20, 512 << 20) / 4],
            bytes_max,
            seed: 1,
            weights_kept: Vec::new(),
            kv: KvCopies::default(),
        };
        backend.peak = Peak { flops_per_s: backend.measure_flops(), memory_bytes_per_s: backend.measure_bandwidth(llc) };
        Ok(backend)
    }

    pub fn threads(&self) -> usize {
        self.threads
    }

    /// Sets the most bytes of operands held at once; shapes that need more are refused
    /// (`Unsupported`, with what they need).
    pub fn set_memory_cap(&mut self, bytes: u64) {
        self.bytes_max = bytes;
    }

    pub fn memory_cap_bytes(&self) -> u64 {
        self.bytes_max
    }

    /// Best FLOP/s of a few 1024×1024×1024 GEMMs (the engine's kernel, on the pool).
    fn measure_flops(&self) -> f64 {
        const N: usize = 1024;
        let gemm = Gemm { m: N, n: N, k: N, b_layout: CALIBRATION_B_LAYOUT, accumulate: false };
        let (mut a, mut b, mut c) = (vec![0.0; N * N], vec![0.0; N * N], vec![0.0; N * N]);
        self.fill(&mut a, 101);
        self.fill(&mut b, 102);
        let mut best_ns = f64::INFINITY;
        // One warm-up, then the best of four: the peak is what the machine can do, not a median.
        for i in 0..5 {
            let ns = self.pool.install(|| {
                let t = Instant::now();
                gemm.run(&a, &b, &mut c, self.threads);
                t.elapsed().as_nanos() as f64
            });
            if i > 0 {
                best_ns = best_ns.min(ns);
            }
        }
        gemm.flops() / (best_ns.max(1.0) * 1e-9)
    }

    /// Best bytes/s of a parallel copy between two buffers of 4 × the last-level cache (so that
    /// neither fits), counting the read and the write (STREAM's convention for `copy`).
    fn measure_bandwidth(&self, llc: usize) -> f64 {
        let len = (4 * llc).clamp(64 << 20, 1 << 30) / 4;
        let src = vec![1.0f32; len];
        let mut dst = vec![0.0f32; len];
        let chunk = len.div_ceil(self.threads * 4).max(1 << 16);
        let mut best_ns = f64::INFINITY;
        // The first copy also faults the destination's pages in; then the best of three.
        for i in 0..4 {
            let ns = self.pool.install(|| {
                let t = Instant::now();
                dst.par_chunks_mut(chunk).zip(src.par_chunks(chunk)).for_each(|(d, s)| d.copy_from_slice(s));
                t.elapsed().as_nanos() as f64
            });
            if i > 0 {
                best_ns = best_ns.min(ns);
            }
        }
        std::hint::black_box(&dst);
        2.0 * 4.0 * len as f64 / (best_ns.max(1.0) * 1e-9)
    }

    /// Fills `buf` with values in [-1, 1) from `seed`, in parallel; element `i` depends only on
    /// (seed, i), so the contents do not depend on the thread count.
    fn fill(&self, buf: &mut [f32], seed: u64) {
        const CHUNK: usize = 1 << 16;
        self.pool.install(|| {
            buf.par_chunks_mut(CHUNK).enumerate().for_each(|(c, chunk)| {
                for (i, x) in chunk.iter_mut().enumerate() {
                    let z = splitmix64(seed ^ ((c * CHUNK + i) as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15));
                    *x = (z >> 40) as f32 / (1u64 << 23) as f32 - 1.0;
                }
            })
        });
    }

    /// A buffer of `len` floats filled from the next seed.
    fn random(&mut self, len: usize) -> Vec<f32> {
        self.seed = splitmix64(self.seed);
        let mut v = vec![0.0; len];
        self.fill(&mut v, self.seed);
        v
    }

    /// Makes room for `floats` new operands within [`CpuBackend::bytes_max`], freeing kept
    /// weights (oldest first) and, with `free_kv`, the KV-cache copies. A shape that needs more
    /// than the cap by itself is refused ("unsupported here", with what it needs) rather than
    /// an allocation failure that aborts the process, or a machine driven into swap.
    fn make_room(&mut self, floats: u64, what: &str, free_kv: bool) -> Result<(), DeviceError> {
        let bytes = floats.saturating_mul(4);
        if bytes > self.bytes_max {
            return Err(DeviceError::Unsupported(format!(
                "{what} needs {:.2} GiB of operands; the CPU calibration holds at most {:.2} GiB at once (--memory-gib)",
                bytes as f64 / (1u64 << 30) as f64,
                self.bytes_max as f64 / (1u64 << 30) as f64
            )));
        }
        while self.held_bytes() + bytes > self.bytes_max {
            if !self.weights_kept.is_empty() {
                self.weights_kept.remove(0);
            } else if free_kv && !self.kv.copies.is_empty() {
                self.kv.copies.clear();
            } else {
                break;
            }
        }
        Ok(())
    }

    /// Bytes of operands kept between shapes.
    fn held_bytes(&self) -> u64 {
        self.weights_kept.iter().map(SequenceWeights::bytes).sum::<u64>() + self.kv.bytes()
    }

    /// Reads the flush buffer on every pool thread, evicting the operands of the last run from
    /// the caches (each thread's private ones, and the shared last level).
    fn flush_caches(&self) {
        evict_caches(&self.pool, &self.flush, self.threads);
    }
}

impl Backend for CpuBackend {
    fn device_info(&self) -> DeviceInfo {
        DeviceInfo {
            device: "cpu".to_string(),
            name: self.name.clone(),
            driver_version: None,
            runtime_version: None,
            clocks: None,
            parallelism: Some(self.threads as u32),
        }
    }

    fn peak(&self) -> Peak {
        self.peak
    }

    /// The CPU engine computes in f32, so f32 is the only dtype its kernels run; a profile of
    /// f32 kernels stands for the CPU engine whatever the model's nominal dtype.
    fn supports(&self, dtype: Dtype) -> bool {
        dtype == Dtype::Fp32
    }

    /// FNV-1a 64 of each source file of the CPU kernels (`engine/cpu/<file>`), in hex.
    fn kernel_hashes(&self) -> Vec<(String, String)> {
        KERNEL_SOURCES
            .iter()
            .map(|(file, source)| (format!("engine/cpu/{file}"), format!("{:016x}", fnv1a_64(source.as_bytes()))))
            .collect()
    }

    /// Where [`Gemm::run`] switches kernels (the `gemm` crate below the few-row kernel's
    /// range, and above it), and the few-row kernel's steps: it reads B once per tile of up to
    /// [`gemm_skinny::MR`] rows, so its time is nearly flat over `j·MR + 1 ..= (j+1)·MR` rows and
    /// jumps after each multiple (one core, 100m model: a decode step's GEMMs took 18 ms at 8
    /// sequences and 21.7 ms at 9 through 16).
    fn gemm_m_breakpoints(&self) -> Vec<u32> {
        if !gemm_skinny::available() {
            return Vec::new();
        }
        few_row_kernel_breakpoints()
    }

    fn prepare_gemm(&mut self, shape: &GemmShape) -> Result<Box<dyn PreparedOp + '_>, DeviceError> {
        self.prepare_gemm_sequence(shape, &StepGemms { sequence: vec![(shape.n, shape.k)], timed: 0 }, 1)
    }

    /// GEMMs up to twice the machine's FLOP-per-byte balance (a decode step's) run among their
    /// layer's GEMMs. On the development machine (1 thread, 100m model, m = 2–16) the QKV GEMM
    /// took 1.5× as long after the previous layer's down GEMM as after copies of itself, and a
    /// decode step's GEMMs 10–20% longer in all than copies of each timed alone. The balance is
    /// peak FLOP/s over the copy bandwidth, which counts reads and writes, while a GEMM mostly
    /// reads: m = 16 sits above it (8 FLOP/B against 6) yet showed the effect in full, hence the
    /// factor 2. Further up each weight serves enough rows that what streamed before it does not
    /// show (within 1% at m = 32), and running its layer around it would only multiply the
    /// calibration's time.
    fn prepare_gemm_in_step(
        &mut self,
        shape: &GemmShape,
        step: &StepGemms,
    ) -> Result<Box<dyn PreparedOp + '_>, DeviceError> {
        const BALANCE_FACTOR: f64 = 2.0;
        let work = gemm_work(shape);
        let streams_weights = work.flops * self.peak.memory_bytes_per_s < BALANCE_FACTOR * work.bytes * self.peak.flops_per_s;
        if streams_weights { self.prepare_gemm_sequence(shape, step, PLACEMENTS_MIN) } else { self.prepare_gemm(shape) }
    }

    fn prepare_attention(&mut self, shape: &AttentionShape) -> Result<Box<dyn PreparedOp + '_>, DeviceError> {
        self.check_dtype(shape.dtype)?;
        let layout = Layout::new(shape)?;
        let dims = AttentionDims {
            num_heads: shape.num_heads as usize,
            num_kv_heads: shape.num_kv_heads as usize,
            head_dim: shape.head_dim as usize,
        };
        if dims.num_heads == 0 || dims.num_kv_heads == 0 || dims.head_dim == 0 || !dims.num_heads.is_multiple_of(dims.num_kv_heads)
        {
            return Err(DeviceError::Unsupported(format!(
                "attention with {} heads over {} KV heads of {}",
                dims.num_heads, dims.num_kv_heads, dims.head_dim
            )));
        }
        let q_floats = layout.new_tokens * dims.num_heads * dims.head_dim;
        let kv_new_floats = layout.new_tokens * dims.num_kv_heads * dims.head_dim;
        let block_floats = CALIBRATION_BLOCK_SIZE * dims.num_kv_heads * dims.head_dim;
        let cache_floats = layout.num_blocks * block_floats;
        let copies = (KV_COPIES_BYTES_MAX / (2 * 4 * cache_floats).max(1)).clamp(1, KV_COPIES);
        let what = format!("attention {:?} of {} sequences, {} cached blocks", shape.phase, shape.batch, layout.num_blocks);
        let own = (2 * q_floats + 2 * kv_new_floats) as u64;
        // Copies that do not serve this shape are freed before the new are counted.
        let grow = self.kv_growth(block_floats, layout.num_blocks, copies);
        if grow.is_some() {
            self.kv.copies.clear();
        }
        let exact = (2 * copies * cache_floats) as u64;
        let kv_floats = match grow {
            None => 0,
            Some(roomy) if own + (2 * copies * roomy) as u64 <= self.bytes_max / 4 => (2 * copies * roomy) as u64,
            Some(_) => exact,
        };
        self.make_room(own + kv_floats, &what, false)?;
        let q = self.random(q_floats);
        let k_new = self.random(kv_new_floats);
        let v_new = self.random(kv_new_floats);
        if grow.is_some() {
            let floats = (kv_floats / (2 * copies as u64)) as usize;
            self.fill_kv_copies(block_floats, floats, copies);
        }
        let CpuBackend { pool, flush, threads, kv, .. } = self;
        Ok(Box::new(AttentionOp {
            pool,
            flush,
            threads: *threads,
            phase: shape.phase,
            dims,
            layout,
            q,
            k_new,
            v_new,
            caches: &mut kv.copies[..copies],
            next: 0,
            out: vec![0.0; q_floats],
        }))
    }

    /// On the backend's pool: the CPU engine samples a step's rows in parallel on its own.
    fn prepare_sampling(&mut self, shape: &SamplingShape) -> Result<Option<Box<dyn PreparedOp + '_>>, DeviceError> {
        Ok(Some(Box::new(SamplingOp::new(shape, Some(&self.pool))?)))
    }
}

/// Fewest copies of an attention shape's paged cache, where they fit in
/// [`KV_COPIES_BYTES_MAX`]; each run reads the next. An engine's step reads each layer's cache
/// once, between other layers' work; one cache read run after run, even with the caches flushed
/// between, comes back partly warm. On the development machine (1 thread, huge pages, the 100m
/// model's heads, 16 sequences of 160 tokens) decode attention took 370–380 µs over one cache
/// and 415–445 µs over four copies, against 420 µs per layer in the engine's steps. (Blocks
/// scattered over twice the blocks used cost another 5–7%; the engine's blocks are not: a prompt's
/// come off its free list together.)
const KV_COPIES: usize = 4;

/// Most bytes of cache copies (K and V, all copies) an attention shape reads.
const KV_COPIES_BYTES_MAX: usize = 512 << 20;

/// Copies of a paged KV cache, kept between attention shapes and grown to the largest asked
/// for: filling hundreds of megabytes per shape would take longer than timing it.
#[derive(Default)]
struct KvCopies {
    /// Floats per block (`block_size · kv_heads · head_dim`): copies serve one head layout.
    block_floats: usize,
    /// `(K, V)` per copy, each `[blocks, block_size, kv_heads, head_dim]`.
    copies: Vec<(Vec<f32>, Vec<f32>)>,
}

impl KvCopies {
    fn bytes(&self) -> u64 {
        self.copies.iter().map(|(k, v)| (k.len() + v.len()) as u64 * 4).sum()
    }
}

impl CpuBackend {
    /// `None` when [`CpuBackend::kv`] holds at least `copies` caches of `blocks` blocks of
    /// `block_floats`; else the floats of each K or V copy to fill: grown with room (twice what
    /// was held, within [`KV_COPIES_BYTES_MAX`]), so a grid of growing contexts refills a few
    /// times, not per shape.
    fn kv_growth(&self, block_floats: usize, blocks: usize, copies: usize) -> Option<usize> {
        let floats = blocks * block_floats;
        let held = self.kv.copies.first().map_or(0, |(k, _)| k.len());
        let same_heads = self.kv.block_floats == block_floats;
        if same_heads && self.kv.copies.len() >= copies && held >= floats {
            return None;
        }
        let room = if same_heads { 2 * held } else { 0 };
        Some(floats.max(room.min(KV_COPIES_BYTES_MAX / (2 * 4 * copies))))
    }

    /// Fills [`CpuBackend::kv`] with `copies` caches of `floats` each (K and V) for
    /// `block_floats` per block; the old copies must have been freed.
    fn fill_kv_copies(&mut self, block_floats: usize, floats: usize, copies: usize) {
        // Cloned like a GEMM sequence's weights: each clone is an allocation of its own.
        let first = (self.random(floats), self.random(floats));
        self.kv = KvCopies { block_floats, copies: vec![first; copies] };
    }
}

impl CpuBackend {
    /// `shape` timed at `step.timed` of `step.sequence`, all at its m (see [`GemmSequenceOp`]),
    /// over at least `placements` copies of the weights where they fit in
    /// [`PLACEMENTS_BYTES_MAX`]: [`PLACEMENTS_MIN`] for a GEMM that streams its weights, whose
    /// time depends on where they lie; 1 for a compute-bound one, where extra copies would only
    /// multiply the calibration's time.
    fn prepare_gemm_sequence(
        &mut self,
        shape: &GemmShape,
        step: &StepGemms,
        placements: usize,
    ) -> Result<Box<dyn PreparedOp + '_>, DeviceError> {
        self.check_dtype(shape.dtype)?;
        let m = shape.m as usize;
        if m == 0 || shape.n == 0 || shape.k == 0 || step.sequence.iter().any(|&(n, k)| n == 0 || k == 0) {
            return Err(DeviceError::Failed(format!("empty GEMM in {}×{}×{} or its step {:?}", m, shape.n, shape.k, step.sequence)));
        }
        if step.sequence.get(step.timed) != Some(&(shape.n, shape.k)) {
            return Err(DeviceError::Failed(format!(
                "GEMM {}×{}×{} is not entry {} of its step {:?}",
                m, shape.n, shape.k, step.timed, step.sequence
            )));
        }
        let gemms: Vec<Gemm> = step
            .sequence
            .iter()
            .map(|&(n, k)| Gemm { m, n: n as usize, k: k as usize, b_layout: CALIBRATION_B_LAYOUT, accumulate: false })
            .collect();
        // As many copies of the sequence's weights as it takes to stream 2 × the last-level
        // cache per run, each GEMM reading its own copy; and at least `placements`.
        let weights_bytes = gemms.iter().map(|g| g.k * g.n * 4).sum::<usize>();
        let stream_bytes = self.flush.len() * 4; // the flush buffer: 2 × the last-level cache
        let placements = placements.min(PLACEMENTS_BYTES_MAX / weights_bytes);
        let (k_max, n_max) = (gemms.iter().map(|g| g.k).max().unwrap_or(0), gemms.iter().map(|g| g.n).max().unwrap_or(0));
        // Copies beyond the first are a refinement, never a reason to refuse: they stop at what
        // the memory cap holds beside the shape's own operands, so whether a shape runs does
        // not depend on the host's cache size (a 300 MiB L3 asks for 512 MiB of copies).
        let operands_bytes = (m * k_max + m * n_max) as u64 * 4;
        let copies_in_cap = (self.bytes_max.saturating_sub(operands_bytes) / weights_bytes as u64) as usize;
        let copies = stream_bytes.div_ceil(weights_bytes).max(placements).min(copies_in_cap).clamp(1, B_COPIES_MAX);
        let what = format!("GEMM {}×{}×{} in a step of {} GEMMs", m, shape.n, shape.k, gemms.len());
        // The set this shape reads is taken out of the kept ones, so that making room does not
        // free it, and counted with the shape's own operands. A set with more copies serves
        // (its first `copies`); one with fewer is replaced, not kept beside the new.
        let kept = self.weights_kept.iter().position(|w| w.sequence == step.sequence && w.copies.len() >= copies);
        let reused = kept.map(|i| self.weights_kept.remove(i));
        if reused.is_none() {
            self.weights_kept.retain(|w| w.sequence != step.sequence);
        }
        let own = (m * k_max + m * n_max) as u64
            + reused.as_ref().map_or((copies * weights_bytes / 4) as u64, |set| set.bytes() / 4);
        if let Err(e) = self.make_room(own, &what, true) {
            self.weights_kept.extend(reused);
            return Err(e);
        }
        while self.weights_kept.len() >= WEIGHTS_KEPT {
            self.weights_kept.remove(0);
        }
        let a = self.random(m * k_max);
        let c = vec![0.0; m * n_max];
        let set = match reused {
            Some(set) => set,
            None => {
                // One random copy, cloned: the values do not change the timing, and a copy is
                // a fresh allocation (a placement of its own) at memcpy speed.
                let first: Vec<Vec<f32>> = gemms.iter().map(|g| self.random(g.k * g.n)).collect();
                SequenceWeights { sequence: step.sequence.clone(), copies: vec![first; copies] }
            }
        };
        self.weights_kept.push(set);
        let this: &CpuBackend = self;
        let weights = &this.weights_kept.last().expect("just pushed").copies[..copies];
        Ok(Box::new(GemmSequenceOp { backend: this, gemms, timed: step.timed, a, weights, c }))
    }

    fn check_dtype(&self, dtype: Dtype) -> Result<(), DeviceError> {
        if self.supports(dtype) {
            Ok(())
        } else {
            Err(DeviceError::Unsupported(format!("the CPU engine computes in f32, not {}", dtype.name())))
        }
    }
}

/// A GEMM timed as an engine step runs it: one of many, each with its own weights, back to
/// back. A step streams every layer's weights from memory in turn (400 MB for the 100M model),
/// so a GEMM's B never starts in cache and its reads compete with the prefetch of the next.
/// One GEMM timed alone after a cache flush reads its B faster than that: on the development
/// machine the 100M model's decode GEMMs (m = 2–8) ran 1.5× faster alone than back to back.
/// So a run goes through `weights`' copies of the step's GEMM sequence (all multiplying rows of
/// the same A), which together stream 2 × the last-level cache, and reports the mean time of
/// the GEMM at `timed`. A sequence of one is that GEMM over copies of its own B.
struct GemmSequenceOp<'a> {
    backend: &'a CpuBackend,
    gemms: Vec<Gemm>,
    timed: usize,
    a: Vec<f32>,
    /// `[copy][gemm in the sequence]`: B of each GEMM, `[k × n]`.
    weights: &'a [Vec<Vec<f32>>],
    c: Vec<f32>,
}

/// Fewest copies of the weights of a GEMM that streams them, where they fit in
/// [`PLACEMENTS_BYTES_MAX`]. How fast a large matrix streams depends on where its allocation
/// lands (on the development machine, a VM, the 100m model's 98 MB LM head read in 3.4–3.8 ms or
/// 4.2–5.2 ms from one allocation to the next, at every m); an engine's weights land once, so a
/// profile should hold the mean over placements, not one draw.
const PLACEMENTS_MIN: usize = 4;

/// Most bytes spent on extra placements: beyond this (a 1B model's f32 layer is 243 MB) a
/// sequence gets only the copies that stream 2 × the last-level cache.
const PLACEMENTS_BYTES_MAX: usize = 512 << 20;

/// Most copies of a GEMM sequence's weights in one shape: small weights need many to stream
/// 2 × the cache, and 64 of a 1 MB matrix already do.
const B_COPIES_MAX: usize = 64;

impl PreparedOp for GemmSequenceOp<'_> {
    fn run_once(&mut self) -> Result<f64, DeviceError> {
        let GemmSequenceOp { backend, gemms, timed, a, weights, c } = self;
        // Timed inside the pool: the cost of entering it from outside is not the kernel's (an
        // engine step enters once for all its kernels).
        Ok(backend.pool.install(|| {
            let mut timed_ns = 0u128;
            for copy in weights.iter() {
                for (i, (gemm, b)) in gemms.iter().zip(copy).enumerate() {
                    let (a, c) = (&a[..gemm.m * gemm.k], &mut c[..gemm.m * gemm.n]);
                    if i == *timed {
                        let t = Instant::now();
                        gemm.run(a, b, c, backend.threads);
                        timed_ns += t.elapsed().as_nanos();
                    } else {
                        gemm.run(a, b, c, backend.threads);
                    }
                }
            }
            timed_ns as f64 / weights.len() as f64
        }))
    }

    fn flush_cache(&mut self) -> Result<(), DeviceError> {
        self.backend.flush_caches();
        Ok(())
    }
}

/// [`CpuBackend::gemm_m_breakpoints`] where the few-row kernel runs: both sides of the switch
/// into it, of each change of its panel width, and of each multiple of its tile.
pub fn few_row_kernel_breakpoints() -> Vec<u32> {
    let (first, last) = (*gemm_skinny::ROWS.start(), *gemm_skinny::ROWS.end());
    let mut m = vec![first - 1, first];
    for rows in first..last {
        if gemm_skinny::panel_vectors(rows) != gemm_skinny::panel_vectors(rows + 1) {
            m.extend([rows, rows + 1]);
        }
    }
    for step in (gemm_skinny::MR..=last).step_by(gemm_skinny::MR) {
        m.extend([step, step + 1]);
    }
    m.sort_unstable();
    m.dedup();
    m.iter().map(|&m| m as u32).collect()
}

/// Sequence lengths, block tables and cache slots of an attention shape.
struct Layout {
    new_tokens: usize,
    /// `num_seqs + 1` offsets of each sequence's new tokens (also its keys, for prefill).
    cu_seqlens: Vec<usize>,
    /// Tokens in the cache per sequence after this step's are written: context + new.
    seq_lens: Vec<usize>,
    blocks: Vec<u32>,
    cu_blocks: Vec<usize>,
    /// Blocks in the cache: as many as the sequences use.
    num_blocks: usize,
    /// Cache slot of every new token.
    slots: Vec<usize>,
}

impl Layout {
    fn new(shape: &AttentionShape) -> Result<Layout, DeviceError> {
        let bs = CALIBRATION_BLOCK_SIZE;
        shape.check()?;
        let num_seqs = shape.batch as usize;
        let query_len = shape.query_len as usize;
        // The same cached lengths as the CUDA backend, uneven spread included.
        let cached = shape.cached_lens();
        let seq_lens: Vec<usize> = cached.iter().map(|c| c + query_len).collect();
        let num_blocks: usize = seq_lens.iter().map(|l| l.div_ceil(bs)).sum();
        if num_blocks > u32::MAX as usize {
            return Err(DeviceError::Unsupported(format!("attention shape too large: {shape:?}")));
        }
        // Physical blocks in a seeded random order (Fisher–Yates), so consecutive logical
        // blocks are scattered in memory as in a long-running cache.
        let mut ids: Vec<u32> = (0..num_blocks as u32).collect();
        let mut state = 0x5eed_u64;
        for i in (1..ids.len()).rev() {
            state = splitmix64(state);
            ids.swap(i, (state % (i as u64 + 1)) as usize);
        }
        let mut cu_blocks = Vec::with_capacity(num_seqs + 1);
        cu_blocks.push(0);
        let mut slots = Vec::with_capacity(num_seqs * query_len);
        for (s, (&c, &len)) in cached.iter().zip(&seq_lens).enumerate() {
            let table = &ids[cu_blocks[s]..cu_blocks[s] + len.div_ceil(bs)];
            slots.extend((c..len).map(|pos| table[pos / bs] as usize * bs + pos % bs));
            cu_blocks.push(cu_blocks[s] + table.len());
        }
        Ok(Layout {
            new_tokens: num_seqs * query_len,
            cu_seqlens: (0..=num_seqs).map(|s| s * query_len).collect(),
            seq_lens,
            blocks: ids,
            cu_blocks,
            num_blocks,
            slots,
        })
    }
}

struct AttentionOp<'a> {
    pool: &'a rayon::ThreadPool,
    flush: &'a [f32],
    threads: usize,
    phase: AttentionPhase,
    dims: AttentionDims,
    layout: Layout,
    /// `[new_tokens, num_heads, head_dim]`.
    q: Vec<f32>,
    /// `[new_tokens, num_kv_heads, head_dim]`.
    k_new: Vec<f32>,
    v_new: Vec<f32>,
    /// Copies of the paged cache, `(K, V)` each `[≥ num_blocks, 16, num_kv_heads,
    /// head_dim]`; run `i` reads copy `i mod len`.
    caches: &'a mut [(Vec<f32>, Vec<f32>)],
    next: usize,
    out: Vec<f32>,
}

impl PreparedOp for AttentionOp<'_> {
    fn run_once(&mut self) -> Result<f64, DeviceError> {
        let AttentionOp { pool, phase, dims, layout, q, k_new, v_new, caches, next, out, .. } = self;
        let (phase, dims) = (*phase, *dims);
        let scale = dims.default_scale();
        let (k_cache, v_cache) = &mut caches[*next % caches.len()];
        *next += 1;
        let cache_floats = layout.num_blocks * CALIBRATION_BLOCK_SIZE * dims.num_kv_heads * dims.head_dim;
        let (k_cache, v_cache) = (&mut k_cache[..cache_floats], &mut v_cache[..cache_floats]);
        Ok(pool.install(|| {
            let t = Instant::now();
            write_paged(k_cache, v_cache, k_new, v_new, &layout.slots, dims.num_kv_heads, dims.head_dim);
            match phase {
                AttentionPhase::Prefill => {
                    let kv = PackedKv::new(k_new, v_new, &layout.cu_seqlens, dims.num_kv_heads, dims.head_dim);
                    prefill_attention(q, &layout.cu_seqlens, &kv, out, dims, scale);
                }
                AttentionPhase::Mixed | AttentionPhase::Decode => {
                    let cache = PagedCache {
                        k: k_cache,
                        v: v_cache,
                        block_size: CALIBRATION_BLOCK_SIZE,
                        num_kv_heads: dims.num_kv_heads,
                        head_dim: dims.head_dim,
                    };
                    // Builds the view inside the timed region, as an engine must every step
                    // (it checks the tables: one pass over them).
                    let kv = PagedKv::new(cache, &layout.blocks, &layout.cu_blocks, &layout.seq_lens);
                    if phase == AttentionPhase::Decode {
                        decode_attention(q, &kv, out, dims, scale);
                    } else {
                        prefill_attention(q, &layout.cu_seqlens, &kv, out, dims, scale);
                    }
                }
            }
            t.elapsed().as_nanos() as f64
        }))
    }

    fn flush_cache(&mut self) -> Result<(), DeviceError> {
        evict_caches(self.pool, self.flush, self.threads);
        Ok(())
    }
}

/// Reads `flush` on every thread of `pool` (one float per 64-byte line), evicting what the
/// caches held.
fn evict_caches(pool: &rayon::ThreadPool, flush: &[f32], threads: usize) {
    let chunk = flush.len().div_ceil(threads).max(1);
    let sum: f32 = pool.install(|| flush.par_chunks(chunk).map(|c| c.iter().step_by(16).sum::<f32>()).sum());
    std::hint::black_box(sum);
}

fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn fnv1a_64(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// `model name` from /proc/cpuinfo (Linux), if readable.
fn cpu_model_name() -> Option<String> {
    let info = std::fs::read_to_string("/proc/cpuinfo").ok()?;
    info.lines()
        .find_map(|line| line.strip_prefix("model name")?.split_once(':').map(|(_, v)| v.trim().to_string()))
        .filter(|name| !name.is_empty())
}

/// The last-level cache a calibration on this host assumes: [`LLC_MIB_VAR`] when set, else what
/// sysfs reports ([`sysfs_llc_bytes`]).
///
/// Errors: `Failed`, naming the variable and its value, when it is not a whole number of MiB in
/// 1..=65536.
pub fn host_llc_bytes() -> Result<usize, DeviceError> {
    match std::env::var_os(LLC_MIB_VAR) {
        None => Ok(sysfs_llc_bytes()),
        Some(value) => llc_bytes_from_var(&value),
    }
}

/// [`LLC_MIB_VAR`]'s value in bytes.
fn llc_bytes_from_var(value: &std::ffi::OsStr) -> Result<usize, DeviceError> {
    match value.to_str().map(|v| v.trim().parse::<u64>()) {
        Some(Ok(mib)) if (1..=LLC_MIB_MAX).contains(&mib) => Ok((mib << 20) as usize),
        _ => Err(DeviceError::Failed(format!("{LLC_MIB_VAR}={value:?}: expected a whole number of MiB from 1 to {LLC_MIB_MAX}"))),
    }
}

/// Total last-level cache: the size of the highest cache level times the number of distinct
/// instances (one per CCX on an EPYC), from sysfs; [`LLC_BYTES_DEFAULT`] if unreadable.
fn sysfs_llc_bytes() -> usize {
    let base = std::path::Path::new("/sys/devices/system/cpu");
    let Ok(entries) = std::fs::read_dir(base) else { return LLC_BYTES_DEFAULT };
    // (level, size, shared_cpu_list) of every cache of every CPU; keep the highest level.
    let mut caches: Vec<(u32, usize, String)> = Vec::new();
    for cpu in entries.flatten() {
        let name = cpu.file_name().to_string_lossy().into_owned();
        if !name.strip_prefix("cpu").is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit())) {
            continue;
        }
        let Ok(indices) = std::fs::read_dir(cpu.path().join("cache")) else { continue };
        for index in indices.flatten() {
            let read = |f: &str| std::fs::read_to_string(index.path().join(f)).ok().map(|s| s.trim().to_string());
            let (Some(level), Some(size), Some(shared)) = (read("level"), read("size"), read("shared_cpu_list")) else {
                continue;
            };
            let (Ok(level), Some(size)) = (level.parse::<u32>(), parse_cache_size(&size)) else { continue };
            caches.push((level, size, shared));
        }
    }
    let Some(top) = caches.iter().map(|c| c.0).max() else { return LLC_BYTES_DEFAULT };
    let mut instances: Vec<(&str, usize)> =
        caches.iter().filter(|c| c.0 == top).map(|c| (c.2.as_str(), c.1)).collect();
    instances.sort();
    instances.dedup();
    let total: usize = instances.iter().map(|i| i.1).sum();
    if total == 0 { LLC_BYTES_DEFAULT } else { total }
}

/// sysfs cache sizes: "32768K", "2M", or bytes.
fn parse_cache_size(s: &str) -> Option<usize> {
    let (digits, unit) = match s.char_indices().find(|(_, c)| !c.is_ascii_digit()) {
        Some((i, _)) => s.split_at(i),
        None => (s, ""),
    };
    let n: usize = digits.parse().ok()?;
    match unit.trim() {
        "" => Some(n),
        "K" | "k" => Some(n << 10),
        "M" => Some(n << 20),
        "G" => Some(n << 30),
        _ => None,
    }
}

/// `MemAvailable` from /proc/meminfo, in bytes, if readable.
pub fn mem_available_bytes() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = info.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

#[cfg(test)]
mod tests;
