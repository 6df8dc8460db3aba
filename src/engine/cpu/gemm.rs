//! Matrix multiplication, `C[m×n] = A[m×k] · B[k×n]` in f32, through the `gemm` crate: packed,
//! cache-blocked, SIMD-dispatched at run time and multi-threaded on rayon. It is the one kernel
//! the CPU engine does not write itself: a naive loop is ~10× slower (docs/design.md). Except at
//! decode sizes (few rows, B `[k × n]`, AVX-512): there `gemm_skinny.rs` streams B unpacked.

use gemm::Parallelism;

use super::gemm_skinny;

/// How B is stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BLayout {
    /// `[k × n]` row-major.
    RowMajor,
    /// `[n × k]` row-major, i.e. Bᵀ: a linear layer's weight `[out_features, in_features]`
    /// used as `y = x · Wᵀ` (PyTorch's and safetensors' layout), with no copy. As fast as
    /// `RowMajor` at large m, but 1.2–3.5× slower at decode-sized m (4–32 rows, one core): an
    /// engine should transpose its weights once at load instead.
    Transposed,
}

/// One GEMM's shape and options. A and C are row-major (`[m × k]`, `[m × n]`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Gemm {
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub b_layout: BLayout,
    /// `C += A·B` instead of `C = A·B` (e.g. a residual added by the output projection).
    pub accumulate: bool,
}

impl Gemm {
    /// `C = A·B` with B `[k × n]` row-major.
    pub fn new(m: usize, n: usize, k: usize) -> Gemm {
        Gemm { m, n, k, b_layout: BLayout::RowMajor, accumulate: false }
    }

    /// The same product with B given as `[n × k]` (see [`BLayout::Transposed`]).
    pub fn b_transposed(self) -> Gemm {
        Gemm { b_layout: BLayout::Transposed, ..self }
    }

    /// The same product added into C.
    pub fn accumulating(self) -> Gemm {
        Gemm { accumulate: true, ..self }
    }

    /// Floating-point operations: `2·m·n·k` (one multiply and one add per term).
    pub fn flops(&self) -> f64 {
        2.0 * self.m as f64 * self.n as f64 * self.k as f64
    }

    /// Runs the product on up to `threads` threads of the current rayon pool (call inside
    /// `ThreadPool::install` to choose the pool). `threads <= 1` runs on the calling thread.
    /// Few-row products of a large B go to the AVX-512 kernel of `gemm_skinny.rs` (see
    /// `gemm_skinny::takes`), which splits by column panel; elsewhere the `gemm` crate decides
    /// whether a product is large enough to split.
    ///
    /// # Panics
    /// If a slice's length is not the shape's.
    pub fn run(&self, a: &[f32], b: &[f32], c: &mut [f32], threads: usize) {
        let Gemm { m, n, k, b_layout, accumulate } = *self;
        assert_eq!(a.len(), m * k, "gemm: A must be [{m} × {k}]");
        assert_eq!(b.len(), k * n, "gemm: B must hold {k} × {n} floats");
        assert_eq!(c.len(), m * n, "gemm: C must be [{m} × {n}]");
        if m == 0 || n == 0 {
            return;
        }
        if k == 0 {
            if !accumulate {
                c.fill(0.0);
            }
            return;
        }
        if b_layout == BLayout::RowMajor && gemm_skinny::takes(m, n, k) {
            gemm_skinny::run(m, n, k, a, b, c, accumulate, threads);
            return;
        }
        // Strides in elements: (column stride, row stride) of each matrix.
        let (b_cs, b_rs) = match b_layout {
            BLayout::RowMajor => (1, n as isize),
            BLayout::Transposed => (k as isize, 1),
        };
        let parallelism = if threads <= 1 { Parallelism::None } else { Parallelism::Rayon(threads) };
        // SAFETY: the lengths checked above make every (row, column) addressed by these strides
        // lie inside its slice; `c` is exclusively borrowed and does not alias `a` or `b`.
        unsafe {
            gemm::gemm(
                m,
                n,
                k,
                c.as_mut_ptr(),
                1,
                n as isize,
                accumulate,
                a.as_ptr(),
                1,
                k as isize,
                b.as_ptr(),
                b_cs,
                b_rs,
                1.0,
                1.0,
                false,
                false,
                false,
                parallelism,
            );
        }
    }
}

/// `C[m×n] = A[m×k] · B[k×n]`, all row-major: [`Gemm::new`]`(m, n, k).run(a, b, c, threads)`.
pub fn matmul(a: &[f32], b: &[f32], c: &mut [f32], m: usize, n: usize, k: usize, threads: usize) {
    Gemm::new(m, n, k).run(a, b, c, threads);
}
