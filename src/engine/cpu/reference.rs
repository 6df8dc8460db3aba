//! Straightforward reference implementations, in f64, for the kernels' tests: no tiling, no
//! online softmax, no SIMD, no threads. Written from the definitions, not from the kernels.

/// A seeded generator of values in [-1, 1) (SplitMix64): tests need reproducible inputs, not
/// statistical quality.
pub struct TestRng(u64);

impl TestRng {
    pub fn new(seed: u64) -> TestRng {
        TestRng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    pub fn uniform(&mut self) -> f32 {
        ((self.next_u64() >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }

    pub fn vec(&mut self, len: usize) -> Vec<f32> {
        (0..len).map(|_| self.uniform()).collect()
    }

    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
}

/// `C[m×n] = A[m×k] · B[k×n]`, row-major, f64 accumulation.
pub fn gemm(a: &[f32], b: &[f32], m: usize, n: usize, k: usize) -> Vec<f32> {
    let mut c = vec![0.0f32; m * n];
    for i in 0..m {
        for j in 0..n {
            let mut s = 0.0f64;
            for p in 0..k {
                s += a[i * k + p] as f64 * b[p * n + j] as f64;
            }
            c[i * n + j] = s as f32;
        }
    }
    c
}

/// One sequence for the attention reference: all its keys and values `[seq_len, num_kv_heads,
/// head_dim]`, and its new tokens' queries `[q_len, num_heads, head_dim]` (the last `q_len`
/// positions).
pub struct RefSeq<'a> {
    pub q: &'a [f32],
    pub k: &'a [f32],
    pub v: &'a [f32],
    pub q_len: usize,
    pub seq_len: usize,
}

/// Attention by the definition: the whole score matrix of each sequence, a full softmax per
/// row, in f64. With `causal`, new token `r` sees keys `0..=seq_len − q_len + r`; without, all.
/// Returns `[Σ q_len, num_heads, head_dim]`.
pub fn attention(
    seqs: &[RefSeq<'_>],
    num_heads: usize,
    num_kv_heads: usize,
    head_dim: usize,
    scale: f32,
    causal: bool,
) -> Vec<f32> {
    let group = num_heads / num_kv_heads;
    let mut out = Vec::new();
    for s in seqs {
        let ctx = s.seq_len - s.q_len;
        for r in 0..s.q_len {
            let visible = if causal { ctx + r + 1 } else { s.seq_len };
            for h in 0..num_heads {
                let kvh = h / group;
                let q = &s.q[(r * num_heads + h) * head_dim..][..head_dim];
                let scores: Vec<f64> = (0..visible)
                    .map(|p| {
                        let k = &s.k[(p * num_kv_heads + kvh) * head_dim..][..head_dim];
                        q.iter().zip(k).map(|(&a, &b)| a as f64 * b as f64).sum::<f64>() * scale as f64
                    })
                    .collect();
                let mx = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let weights: Vec<f64> = scores.iter().map(|&x| (x - mx).exp()).collect();
                let total: f64 = weights.iter().sum();
                for i in 0..head_dim {
                    let mut acc = 0.0f64;
                    for (p, w) in weights.iter().enumerate() {
                        acc += w * s.v[(p * num_kv_heads + kvh) * head_dim + i] as f64;
                    }
                    out.push((acc / total) as f32);
                }
            }
        }
    }
    out
}

/// RMSNorm by the definition, f64.
pub fn rms_norm(x: &[f32], w: &[f32], eps: f32) -> Vec<f32> {
    let hidden = w.len();
    let mut out = Vec::with_capacity(x.len());
    for row in x.chunks(hidden) {
        let ms = row.iter().map(|&v| v as f64 * v as f64).sum::<f64>() / hidden as f64;
        let inv = 1.0 / (ms + eps as f64).sqrt();
        out.extend(row.iter().zip(w).map(|(&v, &wi)| (v as f64 * inv * wi as f64) as f32));
    }
    out
}

/// Rotate-half rotary embedding by the definition, f64, for `x: [tokens, heads, head_dim]`.
pub fn rope(x: &[f32], positions: &[usize], heads: usize, head_dim: usize, theta: f64) -> Vec<f32> {
    let half = head_dim / 2;
    let mut out = x.to_vec();
    for (t, &pos) in positions.iter().enumerate() {
        for h in 0..heads {
            let base = (t * heads + h) * head_dim;
            for i in 0..half {
                let angle = pos as f64 / theta.powf((2 * i) as f64 / head_dim as f64);
                let (a, b) = (x[base + i] as f64, x[base + half + i] as f64);
                out[base + i] = (a * angle.cos() - b * angle.sin()) as f32;
                out[base + half + i] = (b * angle.cos() + a * angle.sin()) as f32;
            }
        }
    }
    out
}

/// `silu(gate) · up` by the definition, f64, for `x: [tokens, 2·inter]` (gate, then up).
pub fn silu_and_mul(x: &[f32], inter: usize) -> Vec<f32> {
    let mut out = Vec::with_capacity(x.len() / 2);
    for row in x.chunks(2 * inter) {
        for i in 0..inter {
            let g = row[i] as f64;
            out.push((g / (1.0 + (-g).exp()) * row[inter + i] as f64) as f32);
        }
    }
    out
}

/// Largest `|a − b|`, and the largest `|b|` (the magnitude the error is judged against).
pub fn max_abs_diff(a: &[f32], b: &[f32]) -> (f32, f32) {
    assert_eq!(a.len(), b.len(), "compared buffers differ in length");
    let err = a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0f32, f32::max);
    let mag = b.iter().map(|y| y.abs()).fold(0.0f32, f32::max);
    (err, mag)
}

/// Asserts `max |actual − expected| ≤ 1e-4 · max(1, max |expected|)`; NaN fails.
#[track_caller]
pub fn assert_close(actual: &[f32], expected: &[f32], what: &str) {
    let (err, mag) = max_abs_diff(actual, expected);
    let tol = 1e-4 * mag.max(1.0);
    assert!(
        err <= tol && actual.iter().all(|x| x.is_finite()),
        "{what}: max abs error {err:e} > {tol:e} (max |expected| {mag})"
    );
}
