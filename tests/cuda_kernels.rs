//! The CUDA kernels in `kernels/`: they compile with NVRTC (no GPU needed), and on a GPU each one
//! matches a naive CPU reference (written here, in f64) over odd shapes, partial KV blocks and
//! several grouped-query ratios; a tiny calibration runs end to end.
//!
//! Skips, with the reason printed:
//! - NVRTC tests when `libnvrtc.so` cannot be loaded, unless `SERVESIM_REQUIRE_NVRTC=1` (CI).
//! - GPU tests when there is no CUDA driver or GPU, unless `SERVESIM_REQUIRE_GPU=1`.
//!
//! Tolerances are those of the output dtype: inputs are rounded to bf16/fp16 on the host, the
//! reference computes in f64 from the rounded values, and the kernels accumulate in f32, so the
//! error is dominated by rounding the output (2⁻⁹ relative for bf16, 2⁻¹² for fp16).

mod common;
use common::required;

use std::sync::Arc;

use cudarc::driver::{CudaSlice, CudaStream};
use servesim::calibrate::backend::{AttentionPhase, AttentionShape, Backend, DeviceError, GemmShape};
use servesim::calibrate::cuda::CudaBackend;
use servesim::calibrate::grid::{Grid, GridOptions, GridScale};
use servesim::calibrate::run::{RunOptions, calibrate};
use servesim::calibrate::timing::{TimingMethod, TimingOptions};
use servesim::engine::cuda::compile::{CI_ARCHES, KERNELS, compile, nvrtc_version};
use servesim::engine::cuda::device::check_nvrtc;
use servesim::engine::cuda::kernels::{At, DecodeParams, PagedKvCache, PrefillParams, RotaryParams, rotary_cos_sin_cache};
use servesim::engine::cuda::{AttentionKernels, CublasLt, CudaDevice, CudaKernels, GemmDtype, KernelFloat};
use servesim::scenario::Dtype;

// ---------------------------------------------------------------------------------------------
// NVRTC: no GPU needed.

#[test]
fn every_kernel_compiles_to_ptx_for_sm80_and_sm90() {
    if let Err(e) = check_nvrtc() {
        assert!(!required("SERVESIM_REQUIRE_NVRTC"), "SERVESIM_REQUIRE_NVRTC=1 but NVRTC is unavailable: {e}");
        println!("SKIPPED every_kernel_compiles_to_ptx_for_sm80_and_sm90: {e}");
        return;
    }
    println!("NVRTC {:?}", nvrtc_version());
    for arch in CI_ARCHES {
        for kernel in KERNELS {
            let ptx = compile(kernel, arch).unwrap_or_else(|e| panic!("{e}"));
            let text = ptx.to_src();
            let target = arch.replace("compute_", "sm_");
            assert!(text.contains(&format!(".target {target}")), "kernels/{} for {arch}: no .target {target}", kernel.file);
            for entry in kernel.entry_points {
                assert!(text.contains(&format!(".entry {entry}(")), "kernels/{} for {arch} lacks entry {entry}", kernel.file);
            }
            println!("kernels/{} -> {arch}: {} bytes of PTX, {} entry points", kernel.file, text.len(), kernel.entry_points.len());
        }
    }
}

#[test]
fn every_cu_file_in_kernels_is_compiled() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("kernels");
    let mut files: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|f| f.ends_with(".cu"))
        .collect();
    files.sort();
    let mut listed: Vec<String> = KERNELS.iter().map(|k| k.file.to_string()).collect();
    listed.sort();
    assert_eq!(files, listed, "every kernels/*.cu must be listed in engine::cuda::compile::KERNELS");
    for k in KERNELS {
        let on_disk = std::fs::read_to_string(dir.join(k.file)).unwrap();
        assert_eq!(on_disk, k.source, "kernels/{} changed after the build: rebuild", k.file);
    }
}

#[test]
fn a_compile_error_carries_the_nvrtc_log() {
    if let Err(e) = check_nvrtc() {
        assert!(!required("SERVESIM_REQUIRE_NVRTC"), "SERVESIM_REQUIRE_NVRTC=1 but NVRTC is unavailable: {e}");
        println!("SKIPPED a_compile_error_carries_the_nvrtc_log: {e}");
        return;
    }
    let broken = servesim::engine::cuda::compile::KernelSource {
        name: "broken",
        file: "broken.cu",
        source: "extern \"C\" __global__ void broken(float* x) { x[0] = undefined_name; }\n",
        entry_points: &["broken"],
    };
    let err = compile(&broken, "compute_80").unwrap_err().to_string();
    assert!(err.contains("undefined_name") && err.contains("broken.cu"), "{err}");
}

// ---------------------------------------------------------------------------------------------
// GPU harness.

struct Gpu {
    device: CudaDevice,
    kernels: CudaKernels,
}

impl Gpu {
    fn stream(&self) -> &Arc<CudaStream> {
        self.device.stream()
    }

    fn up<T: cudarc::driver::DeviceRepr>(&self, host: &[T]) -> CudaSlice<T> {
        self.stream().clone_htod(host).unwrap()
    }

    fn down<T: cudarc::driver::DeviceRepr + Default + Clone>(&self, dev: &CudaSlice<T>) -> Vec<T> {
        self.stream().clone_dtoh(dev).unwrap()
    }
}

/// The GPU, or `None` (with the reason printed) when there is none and it is not required.
fn gpu(test: &str) -> Option<Gpu> {
    let opened = CudaDevice::new(0).and_then(|device| CudaKernels::load(&device).map(|kernels| Gpu { device, kernels }));
    match opened {
        Ok(g) => {
            println!("{test}: running on {} ({:?})", g.device.name(), g.device.compute_capability());
            Some(g)
        }
        Err(e) => {
            assert!(
                !required("SERVESIM_REQUIRE_GPU") || !matches!(e, DeviceError::Unavailable(_)),
                "SERVESIM_REQUIRE_GPU=1 but no GPU: {e}"
            );
            assert!(matches!(e, DeviceError::Unavailable(_)), "{test}: the GPU is there but failed: {e}");
            println!("SKIPPED {test}: {e}");
            None
        }
    }
}

/// A small deterministic generator (xorshift64*).
struct Rng(u64);

impl Rng {
    fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    /// Uniform in [-1, 1).
    fn uniform(&mut self) -> f32 {
        ((self.next_u64() >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
    fn vec<T: KernelFloat>(&mut self, n: usize, amplitude: f32) -> (Vec<T>, Vec<f64>) {
        let dev: Vec<T> = (0..n).map(|_| T::from_f32(self.uniform() * amplitude)).collect();
        let host = dev.iter().map(|x| f64::from(x.to_f32())).collect();
        (dev, host)
    }
}

/// Output tolerance of a dtype for values of magnitude up to `scale`.
fn tolerance<T: KernelFloat>(scale: f64) -> f64 {
    let rel = if T::SUFFIX == "bf16" { 1.0 / 128.0 } else { 1.0 / 1024.0 };
    rel * scale.max(1.0)
}

fn max_abs_error<T: KernelFloat>(got: &[T], want: &[f64]) -> (f64, usize) {
    assert_eq!(got.len(), want.len());
    got.iter()
        .zip(want)
        .enumerate()
        .map(|(i, (g, w))| ((f64::from(g.to_f32()) - w).abs(), i))
        .fold((0.0, 0), |a, b| if b.0 > a.0 || b.0.is_nan() { b } else { a })
}

fn check<T: KernelFloat>(what: &str, got: &[T], want: &[f64]) {
    let scale = want.iter().fold(0f64, |m, x| m.max(x.abs()));
    let (err, at) = max_abs_error(got, want);
    let tol = tolerance::<T>(scale);
    println!("{what} [{}]: max abs error {err:.2e} (tolerance {tol:.1e}, max |ref| {scale:.2})", T::SUFFIX);
    assert!(err <= tol, "{what} [{}]: error {err} at {at} (got {}, want {}) > {tol}", T::SUFFIX, got[at].to_f32(), want[at]);
}

// ---------------------------------------------------------------------------------------------
// Elementwise kernels.

fn rmsnorm_case<T: KernelFloat>(g: &Gpu, tokens: usize, hidden: usize) {
    let mut rng = Rng(0x1234 + hidden as u64);
    let (x, xh) = rng.vec::<T>(tokens * hidden, 2.0);
    let (w, wh) = rng.vec::<T>(hidden, 1.5);
    let eps = 1e-6f32;
    let mut want = vec![0f64; tokens * hidden];
    for t in 0..tokens {
        let row = &xh[t * hidden..(t + 1) * hidden];
        let inv = 1.0 / (row.iter().map(|v| v * v).sum::<f64>() / hidden as f64 + f64::from(eps)).sqrt();
        for i in 0..hidden {
            want[t * hidden + i] = row[i] * inv * wh[i];
        }
    }
    let (xd, wd) = (g.up(&x), g.up(&w));
    let mut out = g.stream().alloc_zeros::<T>(tokens * hidden).unwrap();
    g.kernels.rmsnorm(&mut out, &xd, &wd, tokens, hidden, eps).unwrap();
    check(&format!("rmsnorm {tokens}x{hidden}"), &g.down(&out), &want);

    // Fused residual add: residual' = round(x + residual); x' = rmsnorm(residual') * w.
    let (r, rh) = rng.vec::<T>(tokens * hidden, 2.0);
    let summed: Vec<T> = xh.iter().zip(&rh).map(|(a, b)| T::from_f32((a + b) as f32)).collect();
    let sh: Vec<f64> = summed.iter().map(|v| f64::from(v.to_f32())).collect();
    let mut want_x = vec![0f64; tokens * hidden];
    for t in 0..tokens {
        let row = &sh[t * hidden..(t + 1) * hidden];
        let inv = 1.0 / (row.iter().map(|v| v * v).sum::<f64>() / hidden as f64 + f64::from(eps)).sqrt();
        for i in 0..hidden {
            want_x[t * hidden + i] = row[i] * inv * wh[i];
        }
    }
    let mut xd = g.up(&x);
    let mut rd = g.up(&r);
    g.kernels.fused_add_rmsnorm(&mut xd, &mut rd, &wd, tokens, hidden, eps).unwrap();
    check(&format!("fused_add_rmsnorm {tokens}x{hidden} (x)"), &g.down(&xd), &want_x);
    check(&format!("fused_add_rmsnorm {tokens}x{hidden} (residual)"), &g.down(&rd), &sh);
}

#[test]
fn rmsnorm_matches_reference() {
    let Some(g) = gpu("rmsnorm_matches_reference") else { return };
    for (tokens, hidden) in [(1, 64), (7, 1000), (3, 4099), (2, 8192)] {
        rmsnorm_case::<half::bf16>(&g, tokens, hidden);
        rmsnorm_case::<half::f16>(&g, tokens, hidden);
    }
}

fn silu_mul_case<T: KernelFloat>(g: &Gpu, tokens: usize, d: usize) {
    let mut rng = Rng(0x51u64 + d as u64);
    let (x, xh) = rng.vec::<T>(tokens * 2 * d, 4.0);
    let mut want = vec![0f64; tokens * d];
    for t in 0..tokens {
        for i in 0..d {
            let gate = xh[t * 2 * d + i];
            let up = xh[t * 2 * d + d + i];
            want[t * d + i] = gate / (1.0 + (-gate).exp()) * up;
        }
    }
    let xd = g.up(&x);
    let mut out = g.stream().alloc_zeros::<T>(tokens * d).unwrap();
    g.kernels.silu_mul(&mut out, &xd, tokens, d).unwrap();
    check(&format!("silu_mul {tokens}x{d}"), &g.down(&out), &want);
}

#[test]
fn silu_mul_matches_reference() {
    let Some(g) = gpu("silu_mul_matches_reference") else { return };
    for (tokens, d) in [(1, 1), (5, 1377), (3, 14336)] {
        silu_mul_case::<half::bf16>(&g, tokens, d);
        silu_mul_case::<half::f16>(&g, tokens, d);
    }
}

#[test]
fn gather_rows_copies_rows_by_index() {
    let Some(g) = gpu("gather_rows_copies_rows_by_index") else { return };
    let mut rng = Rng(0x6a7);
    // An embedding-like table with an odd row length; indices repeat and run backwards.
    let (rows, row_len) = (37, 133);
    let (src, _) = rng.vec::<half::bf16>(rows * row_len, 1.0);
    let indices: Vec<i32> = vec![36, 0, 5, 5, 17, 36, 1];
    let mut out = g.stream().alloc_zeros::<half::bf16>(indices.len() * row_len).unwrap();
    g.kernels.gather_rows(&mut out, &g.up(&src), &g.up(&indices), indices.len(), row_len).unwrap();
    let got = g.down(&out);
    for (i, &r) in indices.iter().enumerate() {
        let r = r as usize;
        assert_eq!(&got[i * row_len..(i + 1) * row_len], &src[r * row_len..(r + 1) * row_len], "row {i} (source {r})");
    }
}

#[allow(clippy::too_many_arguments)]
fn rotary_reference(x: &mut [f64], tokens: usize, heads: usize, d: usize, stride: usize, rot: usize, neox: bool, pos: &[i32], table: &[f32]) {
    let half = rot / 2;
    for t in 0..tokens {
        let row = &table[pos[t] as usize * rot..(pos[t] as usize + 1) * rot];
        for h in 0..heads {
            let base = t * stride + h * d;
            for i in 0..half {
                let (ia, ib) = if neox { (i, i + half) } else { (2 * i, 2 * i + 1) };
                let (c, s) = (f64::from(row[i]), f64::from(row[half + i]));
                let (a, b) = (x[base + ia], x[base + ib]);
                x[base + ia] = a * c - b * s;
                x[base + ib] = b * c + a * s;
            }
        }
    }
}

fn rotary_case<T: KernelFloat>(g: &Gpu, tokens: usize, heads: usize, kv_heads: usize, d: usize, rot: usize, neox: bool) {
    let mut rng = Rng(0x707 + (d * rot) as u64);
    let max_position = 8192;
    // q and k as views into a fused QKV row, as the engine lays them out.
    let row = (heads + 2 * kv_heads) * d;
    let (qkv, qkvh) = rng.vec::<T>(tokens * row, 1.0);
    let positions: Vec<i32> = (0..tokens).map(|_| rng.below(max_position) as i32).collect();
    let table = rotary_cos_sin_cache(max_position, rot, 10_000.0);
    let mut want_q = qkvh.clone();
    rotary_reference(&mut want_q, tokens, heads, d, row, rot, neox, &positions, &table);
    let mut want_k = qkvh[heads * d..].to_vec();
    rotary_reference(&mut want_k, tokens, kv_heads, d, row, rot, neox, &positions, &table);

    // q and k are column ranges of one buffer (stride `row`), as in the engine's fused QKV.
    let fused = g.up(&qkv);
    let pos = g.up(&positions);
    let cs = g.up(&table);
    let p = RotaryParams {
        num_tokens: tokens,
        num_heads: heads,
        num_kv_heads: kv_heads,
        head_dim: d,
        rot_dim: rot,
        is_neox: neox,
        q_stride: row,
        k_stride: row,
        max_position,
    };
    g.kernels.rotary(At::new(&fused, 0), At::new(&fused, heads * d), &pos, &cs, &p).unwrap();
    let all = g.down(&fused);
    let (gq, gk) = (all.clone(), all[heads * d..].to_vec());
    // Compare the q heads and the k heads (the rest of each row is untouched in both).
    let pick = |v: &[T], w: &[f64], n_heads: usize| {
        let mut got = Vec::new();
        let mut want = Vec::new();
        for t in 0..tokens {
            for i in 0..n_heads * d {
                got.push(v[t * row + i]);
                want.push(w[t * row + i]);
            }
        }
        (got, want)
    };
    let (got, want) = pick(&gq, &want_q, heads);
    check(&format!("rotary q t{tokens} h{heads} d{d} rot{rot} neox={neox}"), &got, &want);
    let (got, want) = pick(&gk, &want_k, kv_heads);
    check(&format!("rotary k t{tokens} kv{kv_heads} d{d} rot{rot} neox={neox}"), &got, &want);
}

#[test]
fn rotary_matches_reference() {
    let Some(g) = gpu("rotary_matches_reference") else { return };
    for (tokens, heads, kv, d, rot, neox) in
        [(1, 4, 4, 64, 64, true), (13, 12, 4, 128, 128, true), (5, 8, 2, 128, 64, true), (7, 6, 3, 80, 80, false), (3, 4, 1, 256, 256, true)]
    {
        rotary_case::<half::bf16>(&g, tokens, heads, kv, d, rot, neox);
        rotary_case::<half::f16>(&g, tokens, heads, kv, d, rot, neox);
    }
}

// ---------------------------------------------------------------------------------------------
// Attention over a paged cache.

const BLOCK: usize = 16;

/// One attention test case: per sequence, `cached[s]` tokens already in the cache and `new[s]`
/// new tokens (decode: 1).
struct AttnCase {
    heads: usize,
    kv_heads: usize,
    d: usize,
    cached: Vec<usize>,
    new: Vec<usize>,
}

/// Host data for a case: every sequence's keys/values at every position, queries of the new
/// tokens, and the paged layout.
struct AttnData<T> {
    /// [seq][pos][kv][d] as rounded f64, and the same for values.
    keys: Vec<Vec<f64>>,
    values: Vec<Vec<f64>>,
    /// New tokens in cu_seqlens order: q [t][h][d], k/v [t][kv][d], device-typed.
    q: Vec<T>,
    qh: Vec<f64>,
    k_new: Vec<T>,
    v_new: Vec<T>,
    k_cache: Vec<T>,
    v_cache: Vec<T>,
    block_tables: Vec<i32>,
    max_blocks: usize,
    slots: Vec<i32>,
    cu: Vec<i32>,
}

fn build_case<T: KernelFloat>(c: &AttnCase, seed: u64) -> AttnData<T> {
    let mut rng = Rng(seed);
    let row = c.kv_heads * c.d;
    let totals: Vec<usize> = c.cached.iter().zip(&c.new).map(|(a, b)| a + b).collect();
    let blocks: Vec<usize> = totals.iter().map(|t| t.div_ceil(BLOCK)).collect();
    let num_blocks: usize = blocks.iter().sum::<usize>() + 3; // a few unused blocks
    let max_blocks = blocks.iter().copied().max().unwrap().max(1);
    // Scrambled physical blocks: a random permutation.
    let mut perm: Vec<i32> = (0..num_blocks as i32).collect();
    for i in (1..perm.len()).rev() {
        let j = rng.below(i + 1);
        perm.swap(i, j);
    }
    let mut block_tables = vec![-1i32; c.cached.len() * max_blocks];
    let mut next = 0;
    for (s, &nb) in blocks.iter().enumerate() {
        for j in 0..nb {
            block_tables[s * max_blocks + j] = perm[next];
            next += 1;
        }
    }
    // Fill the whole cache with noise so stale entries would show up in a wrong answer.
    let (mut k_cache, _) = rng.vec::<T>(num_blocks * BLOCK * row, 3.0);
    let (mut v_cache, _) = rng.vec::<T>(num_blocks * BLOCK * row, 3.0);
    let mut data = AttnData {
        keys: Vec::new(),
        values: Vec::new(),
        q: Vec::new(),
        qh: Vec::new(),
        k_new: Vec::new(),
        v_new: Vec::new(),
        k_cache: Vec::new(),
        v_cache: Vec::new(),
        block_tables: block_tables.clone(),
        max_blocks,
        slots: Vec::new(),
        cu: vec![0],
    };
    for s in 0..c.cached.len() {
        let (kd, kh) = rng.vec::<T>(totals[s] * row, 1.0);
        let (vd, vh) = rng.vec::<T>(totals[s] * row, 1.0);
        for pos in 0..totals[s] {
            let block = block_tables[s * max_blocks + pos / BLOCK] as usize;
            let slot = block * BLOCK + pos % BLOCK;
            if pos < c.cached[s] {
                k_cache[slot * row..(slot + 1) * row].copy_from_slice(&kd[pos * row..(pos + 1) * row]);
                v_cache[slot * row..(slot + 1) * row].copy_from_slice(&vd[pos * row..(pos + 1) * row]);
            } else {
                data.k_new.extend_from_slice(&kd[pos * row..(pos + 1) * row]);
                data.v_new.extend_from_slice(&vd[pos * row..(pos + 1) * row]);
                data.slots.push(slot as i32);
            }
        }
        let (qd, qh) = rng.vec::<T>(c.new[s] * c.heads * c.d, 1.0);
        data.q.extend(qd);
        data.qh.extend(qh);
        data.keys.push(kh);
        data.values.push(vh);
        data.cu.push(data.cu.last().unwrap() + c.new[s] as i32);
    }
    data.k_cache = k_cache;
    data.v_cache = v_cache;
    data
}

/// Causal attention in f64: new token i of sequence s attends to positions 0..=cached[s] + i.
fn attention_reference<T>(c: &AttnCase, data: &AttnData<T>) -> Vec<f64> {
    let (h, kv, d) = (c.heads, c.kv_heads, c.d);
    let group = h / kv;
    let scale = 1.0 / (d as f64).sqrt();
    let mut out = Vec::new();
    let mut t0 = 0;
    for s in 0..c.cached.len() {
        for i in 0..c.new[s] {
            let visible = c.cached[s] + i + 1;
            for head in 0..h {
                let kvh = head / group;
                let q = &data.qh[((t0 + i) * h + head) * d..((t0 + i) * h + head + 1) * d];
                let scores: Vec<f64> = (0..visible)
                    .map(|p| {
                        let k = &data.keys[s][(p * kv + kvh) * d..(p * kv + kvh + 1) * d];
                        q.iter().zip(k).map(|(a, b)| a * b).sum::<f64>() * scale
                    })
                    .collect();
                let m = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let w: Vec<f64> = scores.iter().map(|x| (x - m).exp()).collect();
                let total: f64 = w.iter().sum();
                for dd in 0..d {
                    let o: f64 = (0..visible).map(|p| w[p] * data.values[s][(p * kv + kvh) * d + dd]).sum();
                    out.push(o / total);
                }
            }
        }
        t0 += c.new[s];
    }
    out
}

/// `workspace_context`: the context the scratch is sized for (≥ the case's longest; a workspace
/// sized for long contexts must serve short steps too).
fn decode_case<T: KernelFloat>(g: &Gpu, c: &AttnCase, workspace_context: usize) {
    let data = build_case::<T>(c, 0xdec0de + (c.d * c.heads) as u64);
    let want = attention_reference(c, &data);
    let seqs = c.cached.len();
    let mut k_cache = g.up(&data.k_cache);
    let mut v_cache = g.up(&data.v_cache);
    let (k_new, v_new, q) = (g.up(&data.k_new), g.up(&data.v_new), g.up(&data.q));
    let slots = g.up(&data.slots);
    g.kernels
        .reshape_and_cache(&k_new, &v_new, &mut k_cache, &mut v_cache, &slots, seqs, c.kv_heads, c.d, c.kv_heads * c.d)
        .unwrap();
    let context_lens: Vec<i32> = c.cached.iter().map(|&x| (x + 1) as i32).collect();
    let max_context = *context_lens.iter().max().unwrap() as usize;
    let (bt, cl) = (g.up(&data.block_tables), g.up(&context_lens));
    let cache = PagedKvCache {
        k: &k_cache,
        v: &v_cache,
        block_tables: &bt,
        context_lens: &cl,
        block_size: BLOCK,
        num_kv_heads: c.kv_heads,
        head_dim: c.d,
        max_blocks_per_seq: data.max_blocks,
    };
    let mut ws = g.kernels.decode_workspace(seqs, c.heads, c.kv_heads, c.d, max_context.max(workspace_context)).unwrap();
    let mut out = g.stream().alloc_zeros::<T>(seqs * c.heads * c.d).unwrap();
    let p = DecodeParams {
        num_seqs: seqs,
        num_heads: c.heads,
        scale: 1.0 / (c.d as f32).sqrt(),
        q_stride: c.heads * c.d,
        max_context_len: max_context,
    };
    g.kernels.attention_decode(&mut out, &q, &cache, &mut ws, &p).unwrap();
    check(
        &format!(
            "decode ({:?} kernels) h{} kv{} d{} contexts {:?} workspace {}",
            g.kernels.attention_kernels(),
            c.heads,
            c.kv_heads,
            c.d,
            context_lens,
            ws.max_context_len()
        ),
        &g.down(&out),
        &want,
    );
}

#[test]
fn decode_attention_matches_reference() {
    let Some(mut g) = gpu("decode_attention_matches_reference") else { return };
    if g.device.compute_capability() >= (8, 0) {
        assert!(g.kernels.has_fast_attention().1, "the split-KV decode was not loaded on {}", g.device.name());
    }
    let cases = [
        // MHA, tiny and block-boundary contexts.
        AttnCase { heads: 4, kv_heads: 4, d: 64, cached: vec![0, 15, 16, 31], new: vec![1; 4] },
        // GQA 4, one and several context partitions (512 tokens each), partial last blocks.
        AttnCase { heads: 8, kv_heads: 2, d: 128, cached: vec![100, 511, 512, 1300], new: vec![1; 4] },
        // GQA 7 and head_dim 80.
        AttnCase { heads: 28, kv_heads: 4, d: 80, cached: vec![37, 700], new: vec![1; 2] },
        // GQA 12 (> 8 heads per block: two head groups per KV head), head_dim 256.
        AttnCase { heads: 12, kv_heads: 1, d: 256, cached: vec![3, 2100], new: vec![1; 2] },
        // head_dim 96, GQA 3, many sequences.
        AttnCase { heads: 6, kv_heads: 2, d: 96, cached: (0..9).map(|i| 57 * i + 5).collect(), new: vec![1; 9] },
        // Llama-3.1-8B's heads, one long context: the split-KV kernel's short partitions.
        AttnCase { heads: 32, kv_heads: 8, d: 128, cached: vec![5000], new: vec![1] },
    ];
    // The split-KV kernel where the shape allows (every case here: head dims multiples of 8), then the CUDA-core
    // reference kernel, each against the f64 reference.
    for kernels in [AttentionKernels::Fast, AttentionKernels::Reference] {
        g.kernels.set_attention(kernels);
        for c in &cases {
            decode_case::<half::bf16>(&g, c, 0);
            decode_case::<half::f16>(&g, c, 0);
        }
        // Scratch sized for 3000 tokens used by steps that need fewer partitions.
        for cached in [vec![3, 200], vec![700, 20]] {
            let c = AttnCase { heads: 8, kv_heads: 2, d: 64, cached, new: vec![1; 2] };
            decode_case::<half::bf16>(&g, &c, 3000);
        }
    }
}

fn prefill_case<T: KernelFloat>(g: &Gpu, c: &AttnCase) {
    let data = build_case::<T>(c, 0x9ef1 + (c.d * c.heads) as u64);
    let want = attention_reference(c, &data);
    let seqs = c.cached.len();
    let total: usize = c.new.iter().sum();
    let mut k_cache = g.up(&data.k_cache);
    let mut v_cache = g.up(&data.v_cache);
    let (k_new, v_new, q) = (g.up(&data.k_new), g.up(&data.v_new), g.up(&data.q));
    let context_lens: Vec<i32> = c.cached.iter().map(|&x| x as i32).collect();
    let (bt, cl, cu) = (g.up(&data.block_tables), g.up(&context_lens), g.up(&data.cu));
    let mut out = g.stream().alloc_zeros::<T>(total * c.heads * c.d).unwrap();
    {
        let cache = PagedKvCache {
            k: &k_cache,
            v: &v_cache,
            block_tables: &bt,
            context_lens: &cl,
            block_size: BLOCK,
            num_kv_heads: c.kv_heads,
            head_dim: c.d,
            max_blocks_per_seq: data.max_blocks,
        };
        let p = PrefillParams {
            num_seqs: seqs,
            total_new_tokens: total,
            max_new_tokens: *c.new.iter().max().unwrap(),
            num_heads: c.heads,
            scale: 1.0 / (c.d as f32).sqrt(),
            q_stride: c.heads * c.d,
            kv_stride: c.kv_heads * c.d,
        };
        g.kernels.attention_prefill(&mut out, &q, &k_new, &v_new, &cache, &cu, &p).unwrap();
    }
    check(
        &format!(
            "prefill ({:?} kernels) h{} kv{} d{} cached {:?} new {:?}",
            g.kernels.attention_kernels(),
            c.heads,
            c.kv_heads,
            c.d,
            c.cached,
            c.new
        ),
        &g.down(&out),
        &want,
    );

    // reshape_and_cache puts the new tokens' K/V bit-exactly at their slots.
    let slots = g.up(&data.slots);
    g.kernels
        .reshape_and_cache(&k_new, &v_new, &mut k_cache, &mut v_cache, &slots, total, c.kv_heads, c.d, c.kv_heads * c.d)
        .unwrap();
    let (kc, vc) = (g.down(&k_cache), g.down(&v_cache));
    let row = c.kv_heads * c.d;
    for (t, &slot) in data.slots.iter().enumerate() {
        let slot = slot as usize;
        let bits = |v: &[T]| v.iter().map(|x| x.to_f32().to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&kc[slot * row..(slot + 1) * row]), bits(&data.k_new[t * row..(t + 1) * row]), "k of new token {t}");
        assert_eq!(bits(&vc[slot * row..(slot + 1) * row]), bits(&data.v_new[t * row..(t + 1) * row]), "v of new token {t}");
    }
}

#[test]
fn prefill_attention_matches_reference() {
    let Some(mut g) = gpu("prefill_attention_matches_reference") else { return };
    if g.device.compute_capability() >= (8, 0) {
        assert!(g.kernels.has_fast_attention().0, "the tensor-core prefill was not loaded on {}", g.device.name());
    }
    let cases = [
        // Plain prompts of different lengths (varlen), MHA, partial query tiles (tile = 32 rows).
        AttnCase { heads: 4, kv_heads: 4, d: 64, cached: vec![0, 0, 0], new: vec![1, 33, 70] },
        // Chunked prefill over cached context, GQA 4, head_dim 128.
        AttnCase { heads: 8, kv_heads: 2, d: 128, cached: vec![5, 40, 0, 100], new: vec![17, 1, 64, 45] },
        // GQA 7, head_dim 80 (not a power of two).
        AttnCase { heads: 14, kv_heads: 2, d: 80, cached: vec![16, 3], new: vec![31, 9] },
        // MQA, head_dim 256 (dynamic shared memory above 48 KiB).
        AttnCase { heads: 6, kv_heads: 1, d: 256, cached: vec![20, 0], new: vec![40, 7] },
        // Decode-like rows (1 new token) mixed with a long chunk, head_dim 96.
        AttnCase { heads: 6, kv_heads: 3, d: 96, cached: vec![300, 47, 0], new: vec![1, 1, 130] },
    ];
    // The tensor-core kernel where the shape allows (head_dim 64, 80, 96, 128; 256 falls back),
    // then the CUDA-core reference kernel.
    for kernels in [AttentionKernels::Fast, AttentionKernels::Reference] {
        g.kernels.set_attention(kernels);
        for c in &cases {
            prefill_case::<half::bf16>(&g, c);
            prefill_case::<half::f16>(&g, c);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// cuBLASLt GEMM.

fn gemm_reference(x: &[f64], w: &[f64], m: usize, n: usize, k: usize) -> Vec<f64> {
    let mut y = vec![0f64; m * n];
    for i in 0..m {
        for j in 0..n {
            y[i * n + j] = (0..k).map(|p| x[i * k + p] * w[j * k + p]).sum();
        }
    }
    y
}

fn gemm_case<T: KernelFloat>(g: &Gpu, blas: &CublasLt, m: usize, n: usize, k: usize, dtype: GemmDtype) {
    let mut rng = Rng(0x6e44 + (m * n * k) as u64);
    let (x, xh) = rng.vec::<T>(m * k, 1.0);
    let (w, wh) = rng.vec::<T>(n * k, 1.0 / (k as f32).sqrt());
    let want = gemm_reference(&xh, &wh, m, n, k);
    let plan = blas.plan(m, n, k, dtype).unwrap();
    let (xd, wd) = (g.up(&x), g.up(&w));
    let mut y = g.stream().alloc_zeros::<T>(m * n).unwrap();
    blas.matmul(&plan, &xd, &wd, &mut y).unwrap();
    check(&format!("cuBLASLt GEMM {m}x{n}x{k} {dtype:?}"), &g.down(&y), &want);
}

/// Decodes an fp8 e4m3 byte (OCP FP8: bias 7, no infinities, 0x7f/0xff are NaN).
fn e4m3_to_f64(b: u8) -> f64 {
    let sign = if b & 0x80 != 0 { -1.0 } else { 1.0 };
    let e = i32::from((b >> 3) & 0xf);
    let m = f64::from(b & 7);
    if e == 0 { sign * m / 8.0 * 2f64.powi(-6) } else { sign * (1.0 + m / 8.0) * 2f64.powi(e - 7) }
}

#[test]
fn cublaslt_gemm_matches_reference() {
    let Some(g) = gpu("cublaslt_gemm_matches_reference") else { return };
    let blas = match CublasLt::new(&g.device) {
        Ok(b) => b,
        Err(e) => {
            assert!(!required("SERVESIM_REQUIRE_GPU"), "SERVESIM_REQUIRE_GPU=1 but cuBLASLt is unavailable: {e}");
            println!("SKIPPED cublaslt_gemm_matches_reference: {e}");
            return;
        }
    };
    for (m, n, k) in [(1, 64, 64), (37, 96, 80), (130, 256, 1000)] {
        gemm_case::<half::bf16>(&g, &blas, m, n, k, GemmDtype::Bf16);
        gemm_case::<half::f16>(&g, &blas, m, n, k, GemmDtype::F16);
    }
    if g.device.has_fp8() {
        let (m, n, k) = (48, 64, 128);
        let plan = blas.plan(m, n, k, GemmDtype::Fp8E4m3).unwrap();
        let mut x = g.stream().alloc_zeros::<u8>(m * k).unwrap();
        let mut w = g.stream().alloc_zeros::<u8>(n * k).unwrap();
        g.kernels.fill_e4m3(&mut x, 3).unwrap();
        g.kernels.fill_e4m3(&mut w, 4).unwrap();
        let mut y = g.stream().alloc_zeros::<half::bf16>(m * n).unwrap();
        blas.matmul(&plan, &x, &w, &mut y).unwrap();
        let xh: Vec<f64> = g.down(&x).into_iter().map(e4m3_to_f64).collect();
        let wh: Vec<f64> = g.down(&w).into_iter().map(e4m3_to_f64).collect();
        assert!(xh.iter().all(|v| v.is_finite() && v.abs() >= 0.125 && v.abs() < 4.0));
        check(&format!("cuBLASLt GEMM {m}x{n}x{k} fp8 e4m3"), &g.down(&y), &gemm_reference(&xh, &wh, m, n, k));
    } else {
        println!("fp8 GEMM not checked: compute capability {:?} < 8.9", g.device.compute_capability());
        assert!(matches!(blas.plan(16, 16, 16, GemmDtype::Fp8E4m3), Err(DeviceError::Unsupported(_))));
    }
}

// ---------------------------------------------------------------------------------------------
// The backend end to end.

#[test]
fn tiny_calibration_runs_end_to_end() {
    let mut backend = match CudaBackend::new(0) {
        Ok(b) => b,
        Err(e) => {
            assert!(!required("SERVESIM_REQUIRE_GPU"), "SERVESIM_REQUIRE_GPU=1 but the CUDA backend is unavailable: {e}");
            assert!(matches!(e, DeviceError::Unavailable(_)), "expected Unavailable without a GPU: {e}");
            println!("SKIPPED tiny_calibration_runs_end_to_end: {e}");
            return;
        }
    };
    let info = backend.device_info();
    println!("{info:?}; peak {:?} from {:?}", backend.peak(), backend.peak_source());
    assert!(info.device.starts_with("cuda:") && !info.name.is_empty());
    assert!(backend.supports(Dtype::Bf16) && !backend.supports(Dtype::Fp32));
    let hashes = backend.kernel_hashes();
    for k in KERNELS {
        assert!(hashes.iter().any(|(name, _)| name == k.name), "no hash for {}", k.name);
    }

    let grid = Grid {
        options: GridOptions {
            dtypes: vec![Dtype::Bf16],
            tensor_parallel: vec![1],
            models: Vec::new(),
            max_m: 256,
            extra_m: Vec::new(),
            scale: GridScale::Tiny,
            allreduce_gpus: Vec::new(),
            sampling_rows: 0,
        },
        gemms: vec![GemmShape { m: 256, n: 1024, k: 512, dtype: Dtype::Bf16 }],
        attention: vec![
            AttentionShape {
                phase: AttentionPhase::Decode,
                batch: 4,
                query_len: 1,
                context_len: 600,
                num_heads: 8,
                num_kv_heads: 2,
                head_dim: 128,
                uneven: true,
                dtype: Dtype::Bf16,
            },
            AttentionShape {
                phase: AttentionPhase::Mixed,
                batch: 2,
                query_len: 64,
                context_len: 128,
                num_heads: 8,
                num_kv_heads: 2,
                head_dim: 128,
                uneven: false,
                dtype: Dtype::Bf16,
            },
        ],
        allreduce: Vec::new(),
        sampling: Vec::new(),
    };
    // A layer's elementwise kernels at Llama-3.2-1B's shapes: 5 kernels at 4 token counts, each
    // between a launch floor and a millisecond.
    let model = servesim::scenario::ModelSpec::preset("Llama-3.2-1B").unwrap();
    let elementwise = backend.elementwise(std::slice::from_ref(&model), 1).unwrap();
    println!("{elementwise:?}");
    assert_eq!(elementwise.len(), 5 * 4);
    assert!(elementwise.iter().all(|e| e.ns > 100.0 && e.ns < 1e6), "{elementwise:?}");
    // Both timing methods: one launch after an L2 flush, and replays in a CUDA graph.
    assert_eq!(backend.timing_methods(), vec![TimingMethod::Graph, TimingMethod::Flush]);
    for method in [TimingMethod::Flush, TimingMethod::Graph] {
        let options = RunOptions { timing: TimingOptions::quick().with_method(method), ..RunOptions::default() };
        let profile = calibrate(&mut backend, &grid, &options).unwrap();
        println!("{method:?}: {:#?}", profile.rows);
        assert_eq!(profile.rows.len(), 3, "{:?}", profile.provenance.run);
        assert_eq!(profile.provenance.timing.method, method.name());
        for row in &profile.rows {
            assert!(row.measurement.median_ns > 0.0 && row.measurement.median_ns < 1e9, "{row:?}");
            assert!(row.utilisation.is_some_and(|u| u > 0.0 && u < 1.5), "{row:?}");
        }
        // The launch floor: a few microseconds a launch, less in a graph than from the host.
        let floor = profile.provenance.run.launch_floor.clone().expect("a GPU times its launch floor");
        println!("{floor:?}");
        assert!(floor.graph_ns > 0.0 && floor.eager_ns > 0.0 && floor.eager_ns < 100_000.0, "{floor:?}");
    }
}
