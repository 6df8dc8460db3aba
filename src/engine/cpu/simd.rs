//! SIMD for the hand-written kernels: an 8-lane f32 vector trait with an AVX2+FMA implementation
//! and a portable one, runtime dispatch between them, a vectorised `exp`, and fixed-order
//! reductions.
//!
//! Why explicit vectors rather than loops for LLVM to vectorise: the hot loops (four keys × two
//! vectors of queries, say) keep 8 accumulators in registers, and LLVM's SLP vectoriser turns
//! such nests into lane shuffles and stack spills as often as not (measured: 13 GFLOP/s on a
//! core instead of 75). With [`Simd`] the kernel says which vector is which.
//!
//! - [`Avx2`]: `__m256` with FMA. Its methods are `#[inline(always)]` and only run inside the
//!   `#[target_feature(enable = "avx2,fma")]` functions that [`simd_kernel!`] defines, so every
//!   intrinsic inlines into a body compiled for AVX2.
//! - [`Portable`]: `[f32; 8]` and scalar loops, for CPUs without AVX2 (and other architectures),
//!   where LLVM vectorises what it can.
//!
//! Horizontal reductions add lanes in one fixed tree in both, and kernels reduce over keys in a
//! fixed order, so results never depend on the thread count.
//!
//! Kernel bodies generic over [`Simd`] use no closures around vector operations (`array::map`,
//! `from_fn`): a closure is a function of its own, compiled without AVX2, and when LLVM does not
//! inline it every intrinsic in it becomes a call (measured: 6× slower).

/// The instruction set the kernels are dispatched to, detected once per process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Isa {
    /// The compilation target's baseline (SSE2 on x86-64, NEON on aarch64), with [`Portable`].
    Baseline,
    /// x86-64 with AVX2 and FMA, with [`Avx2`].
    Avx2Fma,
}

/// The best instruction set this CPU supports among those the kernels are compiled for, or
/// [`Isa::Baseline`] when the environment sets `SERVESIM_CPU_ISA=baseline` (to test that path on
/// a machine that has AVX2, or to rule the dispatch out when debugging). Decided once per process.
pub fn isa() -> Isa {
    static ISA: std::sync::OnceLock<Isa> = std::sync::OnceLock::new();
    *ISA.get_or_init(|| {
        if std::env::var("SERVESIM_CPU_ISA").is_ok_and(|v| v == "baseline") {
            return Isa::Baseline;
        }
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
                return Isa::Avx2Fma;
            }
        }
        Isa::Baseline
    })
}

/// Defines a kernel entry point that runs a body generic over [`Simd`] with the best
/// implementation:
///
/// ```text
/// simd_kernel!(fn name / body(arg: Type, ...) -> Ret);
///   ⇒ fn name(isa: Isa, arg: Type, ...) -> Ret
///        Avx2Fma  → body::<Avx2> inside a #[target_feature(enable = "avx2,fma")] function
///        Baseline → body::<Portable>
/// ```
///
/// Entry points are small loops (a tile of a microkernel, a chunk of rows): each is its own
/// function, which keeps the compiler's view small and shows up by name in a profile; one call
/// per tile costs nothing next to the tile's work.
macro_rules! simd_kernel {
    ($vis:vis fn $name:ident / $body:ident ( $($arg:ident : $ty:ty),* $(,)? ) $(-> $ret:ty)?) => {
        #[inline]
        #[allow(clippy::too_many_arguments)]
        $vis fn $name(isa: $crate::engine::cpu::simd::Isa, $($arg: $ty),*) $(-> $ret)? {
            #[cfg(target_arch = "x86_64")]
            #[target_feature(enable = "avx2,fma")]
            #[allow(clippy::too_many_arguments)]
            fn avx2($($arg: $ty),*) $(-> $ret)? {
                $body::<$crate::engine::cpu::simd::Avx2>($($arg),*)
            }
            match isa {
                #[cfg(target_arch = "x86_64")]
                // SAFETY: `isa()` returns Avx2Fma only when the CPU has AVX2 and FMA.
                $crate::engine::cpu::simd::Isa::Avx2Fma => unsafe { avx2($($arg),*) },
                _ => $body::<$crate::engine::cpu::simd::Portable>($($arg),*),
            }
        }
    };
}
pub(crate) use simd_kernel;

/// Lanes of a vector.
pub(crate) const W: usize = 8;

/// An 8-lane f32 vector and the operations the kernels use. `max(a, b)` is `a > b ? a : b`
/// (`maxps`): a NaN in `b` propagates, one in `a` does not.
pub(crate) trait Simd {
    type V: Copy;
    /// Whether a scalar `f32::mul_add` is one instruction (else it is a libm call: use `a*b+c`).
    const FMA: bool;
    fn splat(x: f32) -> Self::V;
    fn load(x: &[f32; W]) -> Self::V;
    fn store(v: Self::V, out: &mut [f32; W]);
    fn add(a: Self::V, b: Self::V) -> Self::V;
    fn sub(a: Self::V, b: Self::V) -> Self::V;
    fn mul(a: Self::V, b: Self::V) -> Self::V;
    fn div(a: Self::V, b: Self::V) -> Self::V;
    /// `a · b + c`.
    fn fma(a: Self::V, b: Self::V, c: Self::V) -> Self::V;
    fn max(a: Self::V, b: Self::V) -> Self::V;
    fn min(a: Self::V, b: Self::V) -> Self::V;
    /// Lane-wise `a < b ? x : y`.
    fn select_lt(a: Self::V, b: Self::V, x: Self::V, y: Self::V) -> Self::V;
    /// `2^n` for lanes holding `ROUND + n` (n integral in −126..=127; see [`exp`]).
    fn pow2_of_rounded(t: Self::V) -> Self::V;
    /// Sum of the lanes by the tree ((0+4)+(2+6)) + ((1+5)+(3+7)).
    fn hsum(v: Self::V) -> f32;
    /// Largest lane.
    fn hmax(v: Self::V) -> f32;

    /// Scalar `a · b + c`, fused where that is one instruction.
    #[inline(always)]
    fn fmadd(a: f32, b: f32, c: f32) -> f32 {
        if Self::FMA { a.mul_add(b, c) } else { a * b + c }
    }
}

/// `a > b ? a : b` on scalars, the scalar twin of [`Simd::max`].
#[inline(always)]
pub(crate) fn max(a: f32, b: f32) -> f32 {
    if a > b { a } else { b }
}

/// `[f32; W]` with lane `l` = `$e` (a loop, not a closure: closures do not always inline).
macro_rules! lanes {
    (|$l:ident| $e:expr) => {{
        let mut out = [0.0f32; W];
        for $l in 0..W {
            out[$l] = $e;
        }
        out
    }};
}

/// Portable vectors: arrays and loops (LLVM maps them to SSE2 or NEON where it can).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Portable;

impl Simd for Portable {
    type V = [f32; W];
    const FMA: bool = cfg!(target_arch = "aarch64");
    #[inline(always)]
    fn splat(x: f32) -> Self::V {
        [x; W]
    }
    #[inline(always)]
    fn load(x: &[f32; W]) -> Self::V {
        *x
    }
    #[inline(always)]
    fn store(v: Self::V, out: &mut [f32; W]) {
        *out = v;
    }
    #[inline(always)]
    fn add(a: Self::V, b: Self::V) -> Self::V {
        lanes!(|l| a[l] + b[l])
    }
    #[inline(always)]
    fn sub(a: Self::V, b: Self::V) -> Self::V {
        lanes!(|l| a[l] - b[l])
    }
    #[inline(always)]
    fn mul(a: Self::V, b: Self::V) -> Self::V {
        lanes!(|l| a[l] * b[l])
    }
    #[inline(always)]
    fn div(a: Self::V, b: Self::V) -> Self::V {
        lanes!(|l| a[l] / b[l])
    }
    #[inline(always)]
    fn fma(a: Self::V, b: Self::V, c: Self::V) -> Self::V {
        lanes!(|l| Self::fmadd(a[l], b[l], c[l]))
    }
    #[inline(always)]
    fn max(a: Self::V, b: Self::V) -> Self::V {
        lanes!(|l| max(a[l], b[l]))
    }
    #[inline(always)]
    fn min(a: Self::V, b: Self::V) -> Self::V {
        lanes!(|l| if a[l] < b[l] { a[l] } else { b[l] })
    }
    #[inline(always)]
    fn select_lt(a: Self::V, b: Self::V, x: Self::V, y: Self::V) -> Self::V {
        lanes!(|l| if a[l] < b[l] { x[l] } else { y[l] })
    }
    #[inline(always)]
    fn pow2_of_rounded(t: Self::V) -> Self::V {
        lanes!(|l| {
            let n = t[l].to_bits().wrapping_sub(EXP_ROUND.to_bits()) as i32;
            f32::from_bits(((n + 127) as u32) << 23)
        })
    }
    #[inline(always)]
    fn hsum(v: Self::V) -> f32 {
        ((v[0] + v[4]) + (v[2] + v[6])) + ((v[1] + v[5]) + (v[3] + v[7]))
    }
    #[inline(always)]
    fn hmax(v: Self::V) -> f32 {
        v.iter().copied().fold(f32::MIN, max)
    }
}

/// AVX2 + FMA vectors. Only for bodies run by [`simd_kernel!`] on a CPU that has both.
#[cfg(target_arch = "x86_64")]
#[derive(Clone, Copy, Debug)]
pub(crate) struct Avx2;

// SAFETY (every `unsafe` below): these methods are only called from bodies that
// `simd_kernel!` runs inside `#[target_feature(enable = "avx2,fma")]` functions, after `isa()`
// found both features; loads and stores go through `&[f32; 8]`, so they are in bounds.
#[cfg(target_arch = "x86_64")]
impl Simd for Avx2 {
    type V = std::arch::x86_64::__m256;
    const FMA: bool = true;
    #[inline(always)]
    fn splat(x: f32) -> Self::V {
        unsafe { std::arch::x86_64::_mm256_set1_ps(x) }
    }
    #[inline(always)]
    fn load(x: &[f32; W]) -> Self::V {
        unsafe { std::arch::x86_64::_mm256_loadu_ps(x.as_ptr()) }
    }
    #[inline(always)]
    fn store(v: Self::V, out: &mut [f32; W]) {
        unsafe { std::arch::x86_64::_mm256_storeu_ps(out.as_mut_ptr(), v) }
    }
    #[inline(always)]
    fn add(a: Self::V, b: Self::V) -> Self::V {
        unsafe { std::arch::x86_64::_mm256_add_ps(a, b) }
    }
    #[inline(always)]
    fn sub(a: Self::V, b: Self::V) -> Self::V {
        unsafe { std::arch::x86_64::_mm256_sub_ps(a, b) }
    }
    #[inline(always)]
    fn mul(a: Self::V, b: Self::V) -> Self::V {
        unsafe { std::arch::x86_64::_mm256_mul_ps(a, b) }
    }
    #[inline(always)]
    fn div(a: Self::V, b: Self::V) -> Self::V {
        unsafe { std::arch::x86_64::_mm256_div_ps(a, b) }
    }
    #[inline(always)]
    fn fma(a: Self::V, b: Self::V, c: Self::V) -> Self::V {
        unsafe { std::arch::x86_64::_mm256_fmadd_ps(a, b, c) }
    }
    #[inline(always)]
    fn max(a: Self::V, b: Self::V) -> Self::V {
        // maxps returns its second operand when either is NaN: b propagates, as in `max`.
        unsafe { std::arch::x86_64::_mm256_max_ps(a, b) }
    }
    #[inline(always)]
    fn min(a: Self::V, b: Self::V) -> Self::V {
        unsafe { std::arch::x86_64::_mm256_min_ps(a, b) }
    }
    #[inline(always)]
    fn select_lt(a: Self::V, b: Self::V, x: Self::V, y: Self::V) -> Self::V {
        use std::arch::x86_64::*;
        unsafe { _mm256_blendv_ps(y, x, _mm256_cmp_ps::<_CMP_LT_OQ>(a, b)) }
    }
    #[inline(always)]
    fn pow2_of_rounded(t: Self::V) -> Self::V {
        use std::arch::x86_64::*;
        unsafe {
            let n = _mm256_sub_epi32(_mm256_castps_si256(t), _mm256_set1_epi32(EXP_ROUND.to_bits() as i32));
            _mm256_castsi256_ps(_mm256_slli_epi32::<23>(_mm256_add_epi32(n, _mm256_set1_epi32(127))))
        }
    }
    #[inline(always)]
    fn hsum(v: Self::V) -> f32 {
        use std::arch::x86_64::*;
        unsafe {
            let h = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v)); // (0+4)(1+5)(2+6)(3+7)
            let q = _mm_add_ps(h, _mm_movehl_ps(h, h)); // (0+4)+(2+6), (1+5)+(3+7)
            _mm_cvtss_f32(_mm_add_ss(q, _mm_movehdup_ps(q)))
        }
    }
    #[inline(always)]
    fn hmax(v: Self::V) -> f32 {
        let mut lanes = [0.0; W];
        Self::store(v, &mut lanes);
        lanes.iter().copied().fold(f32::MIN, max)
    }
}

/// Adding this rounds an f32 in ±2²² to the nearest integer, left in the low mantissa bits.
const EXP_ROUND: f32 = 12_582_912.0; // 1.5 · 2^23
const EXP_X_MIN: f32 = -87.3;
const EXP_X_MAX: f32 = 88.3;

/// `e^x` lane-wise to about 2 ulp (Cephes' `expf`): `x = n·ln2 + r`, `|r| ≤ ln2/2`, a degree-6
/// polynomial for `e^r`, and `2^n` built in the exponent bits. libm's `expf` is a call per
/// element; softmax and SiLU need one per element. Exactly 0 below −87.3 (−∞ included),
/// saturates near 2^128 above 88.3, NaN stays NaN.
#[inline(always)]
pub(crate) fn exp<S: Simd>(x: S::V) -> S::V {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    // ln2 split in two so that `n · LN2_HI` is exact (Cody–Waite reduction).
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    let xc = S::min(S::splat(EXP_X_MAX), S::max(S::splat(EXP_X_MIN), x));
    let t = S::fma(xc, S::splat(LOG2E), S::splat(EXP_ROUND));
    let n = S::sub(t, S::splat(EXP_ROUND));
    let r = S::fma(n, S::splat(-LN2_HI), xc);
    let r = S::fma(n, S::splat(-LN2_LO), r);
    let mut p = S::splat(1.987_569_1e-4);
    for c in [1.398_199_9e-3, 8.333_452e-3, 4.166_579_6e-2, 1.666_666_5e-1, 0.5] {
        p = S::fma(p, r, S::splat(c));
    }
    let er = S::add(S::fma(p, S::mul(r, r), r), S::splat(1.0));
    let y = S::mul(er, S::pow2_of_rounded(t));
    S::select_lt(x, S::splat(EXP_X_MIN), S::splat(0.0), y)
}

/// Scalar [`exp`] (the same polynomial, lane 0 of a splat).
#[inline(always)]
pub(crate) fn exp_scalar<S: Simd>(x: f32) -> f32 {
    let mut out = [0.0; W];
    S::store(exp::<S>(S::splat(x)), &mut out);
    out[0]
}

/// `Σ a[i]·b[i]`: two vector accumulators, a vector step, then scalars, in a fixed order.
#[inline(always)]
pub(crate) fn dot<S: Simd>(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let (ac, at) = a[..n].as_chunks::<W>();
    let (bc, bt) = b[..n].as_chunks::<W>();
    let (mut s0, mut s1) = (S::splat(0.0), S::splat(0.0));
    let pairs = ac.len() / 2;
    for c in 0..pairs {
        s0 = S::fma(S::load(&ac[2 * c]), S::load(&bc[2 * c]), s0);
        s1 = S::fma(S::load(&ac[2 * c + 1]), S::load(&bc[2 * c + 1]), s1);
    }
    if ac.len() % 2 == 1 {
        s0 = S::fma(S::load(&ac[ac.len() - 1]), S::load(&bc[ac.len() - 1]), s0);
    }
    let mut sum = S::hsum(S::add(s0, s1));
    for (&x, &y) in at.iter().zip(bt) {
        sum = S::fmadd(x, y, sum);
    }
    sum
}

/// Four dot products of `q` with `k[0..4]` (each at least `q.len()` long), sharing the loads of
/// `q`: eight independent accumulators (four keys × two vectors).
#[inline(always)]
pub(crate) fn dot4<S: Simd>(q: &[f32], k: [&[f32]; 4]) -> [f32; 4] {
    let d = q.len();
    let (qc, qt) = q.as_chunks::<W>();
    let kc = k.map(|row| row[..d].as_chunks::<W>().0);
    let mut acc = [[S::splat(0.0); 2]; 4];
    let pairs = qc.len() / 2;
    for c in 0..pairs {
        let (q0, q1) = (S::load(&qc[2 * c]), S::load(&qc[2 * c + 1]));
        for t in 0..4 {
            acc[t][0] = S::fma(q0, S::load(&kc[t][2 * c]), acc[t][0]);
            acc[t][1] = S::fma(q1, S::load(&kc[t][2 * c + 1]), acc[t][1]);
        }
    }
    if qc.len() % 2 == 1 {
        let c = qc.len() - 1;
        let q0 = S::load(&qc[c]);
        for t in 0..4 {
            acc[t][0] = S::fma(q0, S::load(&kc[t][c]), acc[t][0]);
        }
    }
    let tail0 = d - qt.len();
    let mut out = [0.0f32; 4];
    for t in 0..4 {
        let mut sum = S::hsum(S::add(acc[t][0], acc[t][1]));
        for (i, &x) in qt.iter().enumerate() {
            sum = S::fmadd(x, k[t][tail0 + i], sum);
        }
        out[t] = sum;
    }
    out
}

/// Largest element (`f32::MIN` for an empty slice).
#[inline(always)]
pub(crate) fn max_of<S: Simd>(x: &[f32]) -> f32 {
    let (chunks, tail) = x.as_chunks::<W>();
    let mut m = S::splat(f32::MIN);
    for c in chunks {
        m = S::max(S::load(c), m);
    }
    tail.iter().copied().fold(S::hmax(m), max)
}

/// Replaces each `x[i]` by `e^(x[i] − shift)` and returns their sum (fixed order).
#[inline(always)]
pub(crate) fn exp_shifted_sum<S: Simd>(x: &mut [f32], shift: f32) -> f32 {
    let (chunks, tail) = x.as_chunks_mut::<W>();
    let s = S::splat(shift);
    let mut acc = S::splat(0.0);
    for c in chunks {
        let e = exp::<S>(S::sub(S::load(c), s));
        S::store(e, c);
        acc = S::add(acc, e);
    }
    let mut sum = S::hsum(acc);
    for v in tail {
        *v = exp_scalar::<S>(*v - shift);
        sum += *v;
    }
    sum
}

/// Asks the CPU to start loading `row` into L1 (one hint per 64-byte line). Decode attention
/// reads each key and value row once, scattered over cache blocks; the hardware prefetcher does
/// not follow rows a page apart, so the kernel names the next tile's rows itself. A no-op off
/// x86-64.
#[inline(always)]
pub(crate) fn prefetch(row: &[f32]) {
    #[cfg(target_arch = "x86_64")]
    for line in row.chunks(16) {
        // SAFETY: a prefetch is a hint: it never faults and has no visible effect, and SSE is
        // part of the x86-64 baseline.
        unsafe { std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(line.as_ptr().cast()) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = row;
}

/// A raw pointer that kernels share across rayon tasks which write disjoint parts of one output
/// buffer (each task a different (sequence, head) slice); the disjointness is the caller's proof.
#[derive(Clone, Copy)]
pub(crate) struct SharedMut(pub *mut f32);
// SAFETY: only used for writes to disjoint regions, each by exactly one task.
unsafe impl Send for SharedMut {}
unsafe impl Sync for SharedMut {}

impl SharedMut {
    /// # Safety
    /// `offset..offset + len` must lie inside the buffer and be written by no other task.
    #[inline(always)]
    pub(crate) unsafe fn slice<'a>(self, offset: usize, len: usize) -> &'a mut [f32] {
        // SAFETY: forwarded to the caller.
        unsafe { std::slice::from_raw_parts_mut(self.0.add(offset), len) }
    }
}
