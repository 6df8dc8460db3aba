//! GEMM for few rows (a decode step's tokens) with B `[k × n]` row-major: an AVX-512 kernel that
//! reads each weight from memory once and packs nothing but A.
//!
//! ```text
//!   A [m × k] ─ pack ─► Aᵀ tiles [⌈m/8⌉][k][8]   (rows shared evenly; 96 KiB at 32 × 768)
//!   B [k × n]: panels of 48 columns, split into contiguous runs across threads
//!   per panel, per block of 256 rows of B:
//!     tile 0 reads the block from memory (prefetched), tiles 1… from cache;
//!     each tile prefetches its share of the next block, one row every `tiles` rows it computes
//!   per tile: up to 24 zmm accumulators (8 rows × 3 vectors), one FMA chain over k per element
//! ```
//!
//! Why not the `gemm` crate at decode sizes: it packs B on every call, a pass over weights that
//! are read once per step; and it splits few-row products poorly across threads (measured on one
//! core: 1.1–1.9× slower on the `100m` model's decode GEMMs, most on the LM head and gate|up). Here the work is split by column panel, so each
//! output element is the same FMA chain over `k` in order (from 0, or from C when accumulating)
//! whatever the thread count, the row count (within [`takes`]) or the row's place in its tile.

#[cfg(target_arch = "x86_64")]
use std::cell::RefCell;

/// Whether [`Gemm::run`](super::Gemm::run) hands an `m × n × k` product with B `[k × n]` to this
/// kernel (where it is [`available`]): few rows and a B larger than L2, i.e. a decode step's
/// weights, read from memory once per step. Measured on the development machine:
///
/// - above 64 rows, B is reused across enough rows that the `gemm` crate's packing pays (2
///   threads: this kernel 15% ahead at 32 rows and at 128, even at 64);
/// - from 2 rows, with panels as wide as [`panel_vectors`] gives, it is as fast as the crate's
///   few-row path and times the same in calibration as in a decode step, where the crate's does
///   not. One core, the 100m model's decode GEMMs (`examples/decode_gemms.rs`), crate
///   against this kernel: 16.2–16.7 against 15.3–16.0 ms at 2 rows, 17.0 against 15.5–16.1 at
///   3, 16.9–17.0 against 17.4–17.7 at 4, 18.2–18.6 against 17.5–18.0 at 5, 18.7 against
///   18.0–18.4 at 6. One row stays with the crate's matrix-vector path (16 columns per FMA
///   chain would leave this kernel latency-bound);
/// - on a B that stays in L2 between calls the crate is as fast, and its cost grows smoothly
///   with m, where this kernel's grows in steps of 8 rows (each tile reads B again), which
///   calibration's interpolation over m would miss.
pub fn takes(m: usize, n: usize, k: usize) -> bool {
    ROWS.contains(&m) && k * n > B_FLOATS_MIN && available()
}

/// Row counts this kernel takes (see [`takes`]).
pub const ROWS: std::ops::RangeInclusive<usize> = 2..=64;

/// Vectors of 16 columns per panel for an `m`-row product. A tile keeps `rows × vectors`
/// accumulators, each an FMA chain over k, and at most 8 rows: with 3 vectors, tiles of 2–6
/// rows had 6–18 chains, too few to hide their latency (a decode step of 2 sequences ran 1.6×
/// slower than through the `gemm` crate). Fewer rows get wider panels instead, for 16–25
/// chains, as many as leave registers for B's row (4 rows of 6 vectors spilled and ran 5%
/// slower than of 5), so their time stays that of streaming B once. The `gemm` crate, which
/// took 2–6 rows before, timed up to 1.6× its 2-row time at 4–6 rows in calibration but not
/// inside the engine's steps, so the twin priced a decode step of 3–4 sequences 21% too slow
/// (issue 13); with this kernel, within 1%.
pub fn panel_vectors(m: usize) -> usize {
    match m {
        0..=2 => 8,
        3 => 7,
        4 | 5 => 5,
        6 => 4,
        _ => 3,
    }
}

/// Rows per tile: the kernel reads B once per tile of at most this many rows.
pub const MR: usize = 8;

/// 1 MiB of f32: a typical L2 per core (the development machine's).
const B_FLOATS_MIN: usize = (1 << 20) / 4;

/// Whether this CPU runs the kernel: x86-64 with AVX-512F, unless `SERVESIM_CPU_ISA=baseline`
/// asks for the portable paths (see [`super::isa`]).
pub fn available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        static AVAILABLE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        *AVAILABLE
            .get_or_init(|| super::isa() != super::Isa::Baseline && std::arch::is_x86_feature_detected!("avx512f"))
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

#[cfg(target_arch = "x86_64")]
thread_local! {
    /// The packed Aᵀ tiles of the calling thread's GEMM; grows to the largest shape.
    static PACKED_A: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// `C[m×n] (+)= A[m×k] · B[k×n]`, all row-major and of the right lengths (checked by the
/// caller), on up to `threads` threads of the current rayon pool. Call only when
/// [`available`] is true.
#[cfg(target_arch = "x86_64")]
#[allow(clippy::too_many_arguments)]
pub fn run(m: usize, n: usize, k: usize, a: &[f32], b: &[f32], c: &mut [f32], accumulate: bool, threads: usize) {
    use avx512::pack_a;
    assert!(available(), "gemm_skinny::run needs AVX-512F");
    debug_assert!(a.len() == m * k && b.len() == k * n && c.len() == m * n);
    let packed_len = m.div_ceil(MR) * MR * k;
    PACKED_A.with(|cell| {
        // A nested call on this thread (work stolen while waiting) would find the buffer
        // borrowed: it gets a buffer of its own rather than a panic.
        let (mut borrowed, mut owned);
        let buf: &mut Vec<f32> = match cell.try_borrow_mut() {
            Ok(b) => {
                borrowed = b;
                &mut borrowed
            }
            Err(_) => {
                owned = Vec::new();
                &mut owned
            }
        };
        if buf.len() < packed_len {
            buf.resize(packed_len, 0.0);
        }
        let at = &mut buf[..packed_len];
        pack_a(a, m, k, at);
        avx512::run_packed(m, n, k, at, b, c, accumulate, threads);
    });
}

#[cfg(not(target_arch = "x86_64"))]
#[allow(clippy::too_many_arguments)]
pub fn run(
    _m: usize,
    _n: usize,
    _k: usize,
    _a: &[f32],
    _b: &[f32],
    _c: &mut [f32],
    _accumulate: bool,
    _threads: usize,
) {
    unreachable!("gemm_skinny::run called where `available()` is false");
}

#[cfg(target_arch = "x86_64")]
pub mod avx512 {
    use std::arch::x86_64::*;

    use rayon::prelude::*;

    use super::{MR, panel_vectors};
    /// Floats per zmm vector: a panel is [`panel_vectors`] of them wide. A tile's `rows ×
    /// vectors` accumulators leave registers for the panel's row of B and a broadcast of A (32
    /// zmm in all).
    const LANES: usize = 16;
    /// Below this many multiply-adds a product runs on the calling thread: splitting costs a few
    /// microseconds of rayon hand-off.
    const PARALLEL_MACS_MIN: usize = 1 << 20;
    /// Rows of B per block: the block's rows are read by every tile in turn, so they should stay
    /// in L2 and few enough pages for the TLB (each row of a wide B is on a page of its own).
    /// 256 measured best of 64–1024 on the development machine (128: +3%, 512: +18% per step).
    const KC: usize = 256;

    /// Rows `r0..r1` of A (and C) that tile `t` of an `m`-row product computes. The rows are
    /// shared out evenly over the fewest tiles of at most `MR` (9 rows: 4 + 5, not 8 + 1): a
    /// tile of one or two rows has too few FMA chains to hide their latency, and it paid for a
    /// whole extra pass over the block of B (measured on one core, 100m model: a decode step of
    /// 9 sequences took 28 ms against 23 ms for 16).
    #[inline]
    pub fn tile_rows(m: usize, t: usize) -> (usize, usize) {
        let tiles = m.div_ceil(MR);
        (t * m / tiles, (t + 1) * m / tiles)
    }

    /// `a` `[m × k]` → `at` `[tiles][k][MR]`, tile `t` holding rows [`tile_rows`]`(m, t)`; a
    /// tile's spare rows are zero (unread).
    pub fn pack_a(a: &[f32], m: usize, k: usize, at: &mut [f32]) {
        for (t, tile) in at.chunks_exact_mut(k * MR).enumerate() {
            let (r0, r1) = tile_rows(m, t);
            for r in 0..MR {
                let row = r0 + r;
                if row < r1 {
                    for (kk, &x) in a[row * k..(row + 1) * k].iter().enumerate() {
                        tile[kk * MR + r] = x;
                    }
                } else {
                    for kk in 0..k {
                        tile[kk * MR + r] = 0.0;
                    }
                }
            }
        }
    }

    /// C's base pointer, shared by workers that write disjoint column ranges.
    #[derive(Clone, Copy)]
    struct CPtr(*mut f32);
    // SAFETY: workers write disjoint panels of C (see `run_packed`), and C outlives them.
    unsafe impl Send for CPtr {}
    unsafe impl Sync for CPtr {}

    #[allow(clippy::too_many_arguments)]
    pub fn run_packed(
        m: usize,
        n: usize,
        k: usize,
        at: &[f32],
        b: &[f32],
        c: &mut [f32],
        accumulate: bool,
        threads: usize,
    ) {
        let nr = panel_vectors(m) * LANES;
        let panels = n.div_ceil(nr);
        // Twice the threads: a thread slowed by another process leaves work to steal (measured:
        // 1, 2 and 4 parts per thread within 5% on an idle machine, 2 ahead).
        let parts = if threads <= 1 || m * n * k < PARALLEL_MACS_MIN { 1 } else { panels.min(2 * threads) };
        let cp = CPtr(c.as_mut_ptr());
        let part = |i: usize| {
            let (p0, p1) = (i * panels / parts, (i + 1) * panels / parts);
            // SAFETY: panels p0..p1 cover columns inside [0, n) of every row of C, disjoint from
            // other parts'; A and B have the lengths the caller checked.
            unsafe { panel_run(m, n, k, at, b, cp, accumulate, nr, p0, p1) }
        };
        if parts == 1 {
            part(0);
        } else {
            (0..parts).into_par_iter().for_each(part);
        }
    }

    /// Panels `p0..p1` of C, `nr` columns wide, every row.
    ///
    /// # Safety
    /// The CPU has AVX-512F; `at` is packed from `[m × k]`, `b` is `[k × n]` and `c` points to
    /// `[m × n]` that nothing else touches in these panels' columns.
    #[allow(clippy::too_many_arguments)]
    #[target_feature(enable = "avx512f")]
    unsafe fn panel_run(
        m: usize,
        n: usize,
        k: usize,
        at: &[f32],
        b: &[f32],
        c: CPtr,
        accumulate: bool,
        nr: usize,
        p0: usize,
        p1: usize,
    ) {
        // SAFETY: the function's contract; every offset below stays inside the operands.
        unsafe {
            for p in p0..p1 {
                let j0 = p * nr;
                let width = nr.min(n - j0);
                let vectors = width.div_ceil(LANES);
                let tail = width - (vectors - 1) * LANES;
                let mask: __mmask16 = if tail == LANES { 0xFFFF } else { (1u16 << tail) - 1 };
                for k0 in (0..k).step_by(KC) {
                    // The next block of B (this panel's next rows, or the next panel's first)
                    // streams in while this one computes. Prefetches never fault, so a pointer
                    // past B's end would be harmless; `wrapping_add` keeps it defined.
                    let (next, next_rows) = if k0 + KC < k {
                        (b.as_ptr().wrapping_add((k0 + KC) * n + j0), KC.min(k - k0 - KC))
                    } else if p + 1 < p1 {
                        (b.as_ptr().wrapping_add(j0 + nr), KC.min(k))
                    } else {
                        (std::ptr::null(), 0)
                    };
                    let tiles = m.div_ceil(MR);
                    for t in 0..tiles {
                        let (r0, r1) = tile_rows(m, t);
                        // Each tile prefetches its share of the next block's rows, one row every
                        // `tiles` rows it computes: the block streams in evenly over the whole
                        // block's compute, instead of in a burst that overflows the core's queue
                        // of outstanding misses.
                        // (Measured: 17% off a decode step on one core, against tile 0 issuing all.)
                        let (share0, share1) = (t * next_rows / tiles, (t + 1) * next_rows / tiles);
                        let tile = Tile {
                            k: KC.min(k - k0),
                            at: at.as_ptr().add((t * k + k0) * MR),
                            b: b.as_ptr().add(k0 * n + j0),
                            ldb: n,
                            c: c.0.add(r0 * n + j0),
                            ldc: n,
                            rows: r1 - r0,
                            mask,
                            load_c: accumulate || k0 > 0,
                            prefetch: next.wrapping_add(share0 * n),
                            prefetch_rows: share1 - share0,
                            prefetch_every: tiles,
                        };
                        match tile.rows {
                            8 => tile.run_rows::<8>(vectors),
                            7 => tile.run_rows::<7>(vectors),
                            6 => tile.run_rows::<6>(vectors),
                            5 => tile.run_rows::<5>(vectors),
                            4 => tile.run_rows::<4>(vectors),
                            3 => tile.run_rows::<3>(vectors),
                            2 => tile.run_rows::<2>(vectors),
                            _ => tile.run_rows::<1>(vectors),
                        }
                    }
                }
            }
        }
    }

    /// One tile (up to 8 rows) of one panel over one block of k.
    struct Tile {
        k: usize,
        /// Packed Aᵀ tile `[k][MR]`.
        at: *const f32,
        /// The panel's first column of B's row 0.
        b: *const f32,
        ldb: usize,
        /// The tile's first element of C.
        c: *mut f32,
        ldc: usize,
        /// Rows of C (1 to MR): a tile computes only its rows, so that time grows with m in
        /// steps of one row, not of a tile (calibration interpolates over m).
        rows: usize,
        /// Columns of the last vector that lie inside C.
        mask: __mmask16,
        /// Start from C's values (accumulating, or a later block of k) rather than zero.
        load_c: bool,
        /// The next block of B to prefetch (row stride `ldb`), one row per row computed.
        prefetch: *const f32,
        prefetch_rows: usize,
        /// Rows computed per row prefetched.
        prefetch_every: usize,
    }

    impl Tile {
        /// [`Tile::run`] with `R` = `self.rows` and `vectors` vectors per row.
        ///
        /// # Safety
        /// As [`Tile::run`].
        #[inline]
        #[target_feature(enable = "avx512f")]
        unsafe fn run_rows<const R: usize>(&self, vectors: usize) {
            // SAFETY: the function's contract.
            unsafe {
                match vectors {
                    8 => self.run::<R, 8>(),
                    7 => self.run::<R, 7>(),
                    6 => self.run::<R, 6>(),
                    5 => self.run::<R, 5>(),
                    4 => self.run::<R, 4>(),
                    3 => self.run::<R, 3>(),
                    2 => self.run::<R, 2>(),
                    _ => self.run::<R, 1>(),
                }
            }
        }

        /// `R` rows, `V` vectors per row (the last one masked).
        ///
        /// # Safety
        /// As [`panel_run`]: the pointers address the tile's `R` rows and `V` vectors' columns.
        #[inline]
        #[target_feature(enable = "avx512f")]
        unsafe fn run<const R: usize, const V: usize>(&self) {
            debug_assert_eq!(self.rows, R);
            // SAFETY: the function's contract.
            unsafe {
                // Constant bounds throughout: an index the compiler cannot unroll would send the
                // accumulators to the stack.
                let mut acc = [[_mm512_setzero_ps(); V]; R];
                if self.load_c {
                    for (r, acc_r) in acc.iter_mut().enumerate() {
                        for (v, acc_rv) in acc_r.iter_mut().enumerate() {
                            let mask = if v == V - 1 { self.mask } else { 0xFFFF };
                            *acc_rv = _mm512_maskz_loadu_ps(mask, self.c.add(r * self.ldc + v * LANES));
                        }
                    }
                }
                let mut brow = self.b;
                let mut arow = self.at;
                let mut next = self.prefetch;
                let mut prefetch_left = self.prefetch_rows;
                let mut wait = 0;
                for _ in 0..self.k {
                    let mut bv = [_mm512_setzero_ps(); V];
                    for (v, bv_v) in bv.iter_mut().enumerate() {
                        let mask = if v == V - 1 { self.mask } else { 0xFFFF };
                        *bv_v = _mm512_maskz_loadu_ps(mask, brow.add(v * LANES));
                    }
                    if prefetch_left > 0 {
                        if wait == 0 {
                            // The row's first, middle and last bytes: its lines, however aligned.
                            for v in 0..V {
                                _mm_prefetch::<_MM_HINT_T0>(next.wrapping_add(v * LANES) as *const i8);
                            }
                            _mm_prefetch::<_MM_HINT_T0>(next.wrapping_add(V * LANES - 1) as *const i8);
                            next = next.wrapping_add(self.ldb);
                            prefetch_left -= 1;
                            wait = self.prefetch_every;
                        }
                        wait -= 1;
                    }
                    for (r, acc_r) in acc.iter_mut().enumerate() {
                        let ar = _mm512_set1_ps(*arow.add(r));
                        for (acc_rv, &b) in acc_r.iter_mut().zip(&bv) {
                            *acc_rv = _mm512_fmadd_ps(ar, b, *acc_rv);
                        }
                    }
                    // Wrapping: after the last row these point past the operands, unread.
                    brow = brow.wrapping_add(self.ldb);
                    arow = arow.wrapping_add(MR);
                }
                for (r, acc_r) in acc.iter().enumerate() {
                    for (v, &acc_rv) in acc_r.iter().enumerate() {
                        let mask = if v == V - 1 { self.mask } else { 0xFFFF };
                        _mm512_mask_storeu_ps(self.c.add(r * self.ldc + v * LANES), mask, acc_rv);
                    }
                }
            }
        }
    }
}
