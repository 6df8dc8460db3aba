//! The kernels against the f64 references in `reference.rs`: odd shapes, partial tiles and
//! blocks, GQA ratios 1/4/8, batches of unequal sequences, chunked prefill with context, both KV
//! layouts, and determinism across thread counts.

use super::reference::{self, RefSeq, TestRng, assert_close, max_abs_diff};
use super::*;

fn pool(threads: usize) -> rayon::ThreadPool {
    rayon::ThreadPoolBuilder::new().num_threads(threads).build().expect("test thread pool")
}

// ---------------------------------------------------------------- GEMM

#[test]
fn gemm_matches_reference_over_odd_shapes_layouts_and_threads() {
    let mut rng = TestRng::new(1);
    let shapes = [(1, 1, 1), (1, 257, 96), (7, 13, 5), (33, 17, 65), (64, 64, 64), (130, 96, 200), (16, 300, 129)];
    let pool2 = pool(2);
    for &(m, n, k) in &shapes {
        let a = rng.vec(m * k);
        let b = rng.vec(k * n);
        let expected = reference::gemm(&a, &b, m, n, k);
        // Bᵀ, for the transposed layout.
        let mut bt = vec![0.0; k * n];
        for p in 0..k {
            for j in 0..n {
                bt[j * k + p] = b[p * n + j];
            }
        }
        for threads in [1, 2] {
            let what = format!("gemm {m}×{n}×{k} on {threads} threads");
            let mut c = vec![f32::NAN; m * n];
            pool2.install(|| matmul(&a, &b, &mut c, m, n, k, threads));
            assert_close(&c, &expected, &what);

            let mut c = vec![f32::NAN; m * n];
            pool2.install(|| Gemm::new(m, n, k).b_transposed().run(&a, &bt, &mut c, threads));
            assert_close(&c, &expected, &format!("{what}, B transposed"));

            let base = rng.vec(m * n);
            let mut c = base.clone();
            pool2.install(|| Gemm::new(m, n, k).accumulating().run(&a, &b, &mut c, threads));
            let expected_acc: Vec<f32> = expected.iter().zip(&base).map(|(x, y)| x + y).collect();
            assert_close(&c, &expected_acc, &format!("{what}, accumulating"));
        }
    }
}

#[test]
fn gemm_with_empty_inner_dimension_zeroes_or_keeps_c() {
    let mut c = vec![3.0f32; 6];
    matmul(&[], &[], &mut c, 2, 3, 0, 1);
    assert_eq!(c, vec![0.0; 6]);
    let mut c = vec![3.0f32; 6];
    Gemm::new(2, 3, 0).accumulating().run(&[], &[], &mut c, 1);
    assert_eq!(c, vec![3.0; 6]);
}

#[test]
#[should_panic(expected = "gemm: B must hold")]
fn gemm_rejects_wrong_lengths() {
    let mut c = vec![0.0; 4];
    matmul(&[0.0; 4], &[0.0; 3], &mut c, 2, 2, 2, 1);
}

// ---------------------------------------------------------------- attention fixtures

/// A batch for the attention kernels: per sequence (context length, new tokens), with random
/// queries, keys and values, laid out for both the kernels and the reference.
struct Batch {
    dims: AttentionDims,
    /// Per sequence: queries `[q_len, H, d]`, keys and values `[seq_len, KVH, d]`.
    q: Vec<Vec<f32>>,
    k: Vec<Vec<f32>>,
    v: Vec<Vec<f32>>,
    q_lens: Vec<usize>,
    seq_lens: Vec<usize>,
}

impl Batch {
    fn new(seed: u64, dims: AttentionDims, seqs: &[(usize, usize)]) -> Batch {
        let mut rng = TestRng::new(seed);
        let (h, kvh, d) = (dims.num_heads, dims.num_kv_heads, dims.head_dim);
        let mut batch = Batch { dims, q: vec![], k: vec![], v: vec![], q_lens: vec![], seq_lens: vec![] };
        for &(ctx, q_len) in seqs {
            let seq_len = ctx + q_len;
            // Queries scaled up so the softmax is peaked, not near-uniform: a wrong mask or a
            // wrong key then shows as a large error.
            batch.q.push(rng.vec(q_len * h * d).iter().map(|x| 4.0 * x).collect());
            batch.k.push(rng.vec(seq_len * kvh * d));
            batch.v.push(rng.vec(seq_len * kvh * d));
            batch.q_lens.push(q_len);
            batch.seq_lens.push(seq_len);
        }
        batch
    }

    fn q_packed(&self) -> Vec<f32> {
        self.q.concat()
    }

    fn cu_seqlens_q(&self) -> Vec<usize> {
        cumulative(&self.q_lens)
    }

    fn reference(&self, causal: bool) -> Vec<f32> {
        let seqs: Vec<RefSeq<'_>> = (0..self.q.len())
            .map(|s| RefSeq { q: &self.q[s], k: &self.k[s], v: &self.v[s], q_len: self.q_lens[s], seq_len: self.seq_lens[s] })
            .collect();
        let d = self.dims;
        reference::attention(&seqs, d.num_heads, d.num_kv_heads, d.head_dim, d.default_scale(), causal)
    }

    /// A paged cache holding every sequence, with blocks handed out in a scrambled order (as a
    /// cache looks after many requests) plus spare blocks, written through `write_paged`.
    fn paged(&self, block_size: usize, seed: u64) -> Paged {
        let row = self.dims.num_kv_heads * self.dims.head_dim;
        let needed: usize = self.seq_lens.iter().map(|l| l.div_ceil(block_size)).sum();
        let num_blocks = needed + 3;
        let mut ids: Vec<u32> = (0..num_blocks as u32).collect();
        let mut rng = TestRng::new(seed);
        for i in (1..ids.len()).rev() {
            ids.swap(i, rng.below(i + 1));
        }
        let mut k_cache = vec![f32::NAN; num_blocks * block_size * row];
        let mut v_cache = vec![f32::NAN; num_blocks * block_size * row];
        let mut blocks = Vec::new();
        let mut cu_blocks = vec![0];
        let mut next = 0;
        for s in 0..self.seq_lens.len() {
            let n = self.seq_lens[s].div_ceil(block_size);
            let table = ids[next..next + n].to_vec();
            next += n;
            let slots: Vec<usize> = (0..self.seq_lens[s]).map(|p| table[p / block_size] as usize * block_size + p % block_size).collect();
            write_paged(&mut k_cache, &mut v_cache, &self.k[s], &self.v[s], &slots, self.dims.num_kv_heads, self.dims.head_dim);
            blocks.extend_from_slice(&table);
            cu_blocks.push(blocks.len());
        }
        Paged { k_cache, v_cache, blocks, cu_blocks, block_size }
    }

    fn run_prefill_packed(&self) -> Vec<f32> {
        let (k, v) = (self.k.concat(), self.v.concat());
        let cu_k = cumulative(&self.seq_lens);
        let kv = PackedKv::new(&k, &v, &cu_k, self.dims.num_kv_heads, self.dims.head_dim);
        let q = self.q_packed();
        let mut out = vec![f32::NAN; q.len()];
        prefill_attention(&q, &self.cu_seqlens_q(), &kv, &mut out, self.dims, self.dims.default_scale());
        out
    }

    fn run_prefill_paged(&self, paged: &Paged) -> Vec<f32> {
        let kv = paged.view(self);
        let q = self.q_packed();
        let mut out = vec![f32::NAN; q.len()];
        prefill_attention(&q, &self.cu_seqlens_q(), &kv, &mut out, self.dims, self.dims.default_scale());
        out
    }

    fn run_decode_paged(&self, paged: &Paged) -> Vec<f32> {
        assert!(self.q_lens.iter().all(|&l| l == 1), "decode batches have one new token per sequence");
        let kv = paged.view(self);
        let q = self.q_packed();
        let mut out = vec![f32::NAN; q.len()];
        decode_attention(&q, &kv, &mut out, self.dims, self.dims.default_scale());
        out
    }
}

struct Paged {
    k_cache: Vec<f32>,
    v_cache: Vec<f32>,
    blocks: Vec<u32>,
    cu_blocks: Vec<usize>,
    block_size: usize,
}

impl Paged {
    fn view<'a>(&'a self, batch: &'a Batch) -> PagedKv<'a> {
        let d = batch.dims;
        let cache = PagedCache {
            k: &self.k_cache,
            v: &self.v_cache,
            block_size: self.block_size,
            num_kv_heads: d.num_kv_heads,
            head_dim: d.head_dim,
        };
        PagedKv::new(cache, &self.blocks, &self.cu_blocks, &batch.seq_lens)
    }
}

fn cumulative(lens: &[usize]) -> Vec<usize> {
    let mut cu = vec![0];
    for &l in lens {
        cu.push(cu.last().unwrap() + l);
    }
    cu
}

fn dims(num_heads: usize, num_kv_heads: usize, head_dim: usize) -> AttentionDims {
    AttentionDims { num_heads, num_kv_heads, head_dim }
}

/// GQA ratios 1, 4 and 8 (and an MQA-like 8:1), over head dims that exercise every tail path
/// (7: not a multiple of 4 or 8; 80: not of 32).
const HEAD_LAYOUTS: [(usize, usize, usize); 5] = [(4, 4, 64), (8, 2, 7), (8, 1, 80), (16, 2, 32), (2, 2, 128)];

// ---------------------------------------------------------------- prefill

#[test]
fn prefill_matches_reference_for_unequal_prompts() {
    // Lengths around the tile sizes (QT = 16 queries, KT = 32 keys): partial tiles everywhere.
    let seqs = [(0, 1), (0, 17), (0, 40), (0, 3), (0, 16), (0, 33), (0, 100)];
    for (i, &(h, kvh, d)) in HEAD_LAYOUTS.iter().enumerate() {
        let batch = Batch::new(10 + i as u64, dims(h, kvh, d), &seqs);
        let expected = batch.reference(true);
        assert_close(&batch.run_prefill_packed(), &expected, &format!("prefill H={h} KVH={kvh} d={d}"));
    }
}

#[test]
fn chunked_prefill_attends_to_context_packed_and_paged() {
    // (context, new tokens): a chunk after a long context, a chunk straddling tiles, a single
    // token (decode-like), a chunk with no context, and one with context shorter than a tile.
    let seqs = [(37, 20), (100, 16), (64, 1), (0, 9), (5, 3), (31, 33)];
    for (i, &(h, kvh, d)) in HEAD_LAYOUTS.iter().enumerate() {
        let batch = Batch::new(20 + i as u64, dims(h, kvh, d), &seqs);
        let expected = batch.reference(true);
        let what = format!("chunked prefill H={h} KVH={kvh} d={d}");
        assert_close(&batch.run_prefill_packed(), &expected, &format!("{what}, packed"));
        for block_size in [16, 4] {
            let paged = batch.paged(block_size, 7);
            assert_close(&batch.run_prefill_paged(&paged), &expected, &format!("{what}, paged by {block_size}"));
        }
    }
}

#[test]
fn prefill_is_causal_the_check_would_catch_a_missing_mask() {
    // The same comparison against attention without the causal mask must fail by far: the
    // tolerance used everywhere is tight enough to see a masking error.
    let batch = Batch::new(3, dims(4, 2, 64), &[(0, 40), (10, 20)]);
    let (err, _) = max_abs_diff(&batch.run_prefill_packed(), &batch.reference(false));
    assert!(err > 1e-2, "causal and non-causal attention differ by only {err}");
}

#[test]
fn prefill_with_no_new_tokens_in_some_sequences() {
    let batch = Batch::new(4, dims(4, 1, 16), &[(5, 0), (0, 18), (12, 0)]);
    assert_close(&batch.run_prefill_packed(), &batch.reference(true), "prefill with empty sequences");
}

// ---------------------------------------------------------------- decode

#[test]
fn decode_matches_reference_over_paged_cache() {
    // Context lengths around block (16, 8) and tile (32) boundaries, up to several tiles.
    let seqs: Vec<(usize, usize)> = [0, 4, 15, 16, 32, 99, 256, 300].iter().map(|&ctx| (ctx, 1)).collect();
    for (i, &(h, kvh, d)) in HEAD_LAYOUTS.iter().enumerate() {
        let batch = Batch::new(30 + i as u64, dims(h, kvh, d), &seqs);
        let expected = batch.reference(true);
        for block_size in [16, 8] {
            let paged = batch.paged(block_size, 11 + i as u64);
            let what = format!("decode H={h} KVH={kvh} d={d}, blocks of {block_size}");
            assert_close(&batch.run_decode_paged(&paged), &expected, &what);
        }
    }
}

#[test]
fn decode_over_packed_kv_matches_prefill_of_one_token() {
    let batch = Batch::new(5, dims(8, 2, 64), &[(50, 1), (0, 1), (129, 1)]);
    let (k, v) = (batch.k.concat(), batch.v.concat());
    let cu_k = cumulative(&batch.seq_lens);
    let kv = PackedKv::new(&k, &v, &cu_k, 2, 64);
    let q = batch.q_packed();
    let mut out = vec![f32::NAN; q.len()];
    decode_attention(&q, &kv, &mut out, batch.dims, batch.dims.default_scale());
    assert_close(&out, &batch.run_prefill_packed(), "decode vs one-token prefill");
    assert_close(&out, &batch.reference(true), "decode over packed kv");
}

#[test]
fn decode_check_would_catch_a_wrong_context_length() {
    // Attending to one key too few must fail the tolerance.
    let batch = Batch::new(6, dims(4, 4, 32), &[(40, 1), (70, 1)]);
    let paged = batch.paged(16, 1);
    let out = batch.run_decode_paged(&paged);
    let shorter: Vec<usize> = batch.seq_lens.iter().map(|l| l - 1).collect();
    let mut short = Batch::new(6, batch.dims, &[(39, 1), (69, 1)]);
    short.q = batch.q.clone();
    short.k = batch.k.iter().zip(&shorter).map(|(k, &l)| k[..l * 4 * 32].to_vec()).collect();
    short.v = batch.v.iter().zip(&shorter).map(|(v, &l)| v[..l * 4 * 32].to_vec()).collect();
    let (err, _) = max_abs_diff(&out, &short.reference(true));
    assert!(err > 1e-3, "dropping a key changed the output by only {err}");
}

#[test]
fn portable_and_dispatched_attention_agree_with_the_reference() {
    // The default run takes the AVX2 path on most machines; this runs the portable one too.
    let batch = Batch::new(13, dims(8, 2, 36), &[(0, 21), (40, 17), (3, 1)]);
    let decode_batch = Batch::new(14, dims(8, 1, 36), &[(45, 1), (0, 1), (70, 1)]);
    let expected = batch.reference(true);
    let expected_decode = decode_batch.reference(true);
    let paged = batch.paged(8, 5);
    let decode_paged = decode_batch.paged(16, 6);
    for isa in [Isa::Baseline, simd::isa()] {
        let kv = paged.view(&batch);
        let q = batch.q_packed();
        let mut out = vec![f32::NAN; q.len()];
        prefill::prefill_attention_on(isa, &q, &batch.cu_seqlens_q(), &kv, &mut out, batch.dims, batch.dims.default_scale());
        assert_close(&out, &expected, &format!("prefill on {isa:?}"));

        let kv = decode_paged.view(&decode_batch);
        let q = decode_batch.q_packed();
        let mut out = vec![f32::NAN; q.len()];
        decode::decode_attention_on(isa, &q, &kv, &mut out, decode_batch.dims, decode_batch.dims.default_scale());
        assert_close(&out, &expected_decode, &format!("decode on {isa:?}"));
    }
}

// ---------------------------------------------------------------- threads

#[test]
fn attention_is_bitwise_identical_at_any_thread_count() {
    let batch = Batch::new(8, dims(8, 2, 64), &[(0, 70), (33, 17), (100, 1), (5, 40)]);
    let paged = batch.paged(16, 3);
    let decode_batch = Batch::new(9, dims(8, 2, 64), &[(300, 1), (7, 1), (64, 1)]);
    let decode_paged = decode_batch.paged(16, 4);
    let run = |threads: usize| {
        pool(threads).install(|| {
            (batch.run_prefill_packed(), batch.run_prefill_paged(&paged), decode_batch.run_decode_paged(&decode_paged))
        })
    };
    let one = run(1);
    for threads in [2, 3, 5] {
        let many = run(threads);
        assert!(one.0 == many.0 && one.1 == many.1 && one.2 == many.2, "results differ between 1 and {threads} threads");
    }
}

#[test]
fn gemm_is_bitwise_identical_at_any_thread_count() {
    // The gemm crate splits the output, not the k reduction; this checks it stays so.
    let mut rng = TestRng::new(2);
    let (m, n, k) = (96, 200, 512);
    let (a, b) = (rng.vec(m * k), rng.vec(k * n));
    let run = |threads: usize| {
        let mut c = vec![0.0; m * n];
        pool(threads).install(|| matmul(&a, &b, &mut c, m, n, k, threads));
        c
    };
    let one = run(1);
    for threads in [2, 3] {
        assert!(one == run(threads), "gemm results differ between 1 and {threads} threads");
    }
}

#[test]
fn few_row_gemm_is_exact_across_threads_and_batch_rows() {
    // Decode-sized products (the AVX-512 few-row kernel where the CPU has it): panels of B split
    // across threads and rows tiled by 8 must leave every element's sum as computed alone, so
    // a token's logits do not depend on the threads or on the batch it decodes in. Row counts
    // on both sides of a tile boundary (7, 8, 9, 17), where rows are shared out differently, and
    // of each change of panel width (2–7 rows).
    let mut rng = TestRng::new(3);
    let shapes = [(32, 1000, 300), (13, 4100, 80), (64, 577, 500), (8, 1030, 270), (7, 1030, 270), (9, 1030, 270), (17, 1030, 270)];
    let narrow = [(2, 1030, 270), (3, 1030, 270), (4, 4100, 80), (5, 1030, 270), (6, 1030, 270)];
    for &(m, n, k) in shapes.iter().chain(&narrow) {
        let (a, b) = (rng.vec(m * k), rng.vec(k * n));
        let base = rng.vec(m * n);
        let expected = reference::gemm(&a, &b, m, n, k);
        let mut c = vec![f32::NAN; m * n];
        pool(2).install(|| Gemm::new(m, n, k).run(&a, &b, &mut c, 2));
        assert_close(&c, &expected, &format!("gemm {m}×{n}×{k}"));
        let run = |threads: usize| {
            let mut c = base.clone();
            pool(threads).install(|| Gemm::new(m, n, k).accumulating().run(&a, &b, &mut c, threads));
            c
        };
        let one = run(1);
        let expected: Vec<f32> = expected.iter().zip(&base).map(|(x, y)| x + y).collect();
        assert_close(&one, &expected, &format!("gemm {m}×{n}×{k}, accumulating"));
        for threads in [2, 3] {
            assert!(one == run(threads), "gemm {m}×{n}×{k} differs between 1 and {threads} threads");
        }
        if !gemm_skinny::takes(m, n, k) {
            continue; // the gemm crate makes no promise across row counts
        }
        // Any 2 of the rows as a product of their own (the fewest the few-row kernel takes).
        const FEWEST: usize = *gemm_skinny::ROWS.start();
        for r0 in [0, (m - FEWEST) / 2, m - FEWEST] {
            assert!(gemm_skinny::takes(FEWEST, n, k) && !gemm_skinny::takes(FEWEST - 1, n, k));
            let rows = r0..r0 + FEWEST;
            let mut part = base[rows.start * n..rows.end * n].to_vec();
            Gemm::new(FEWEST, n, k).accumulating().run(&a[rows.start * k..rows.end * k], &b, &mut part, 1);
            assert!(part == one[rows.start * n..rows.end * n], "gemm {m}×{n}×{k}: rows {rows:?} differ alone");
        }
    }
}

// ---------------------------------------------------------------- KV layouts

#[test]
fn paged_kv_reads_back_what_write_paged_wrote() {
    let batch = Batch::new(12, dims(2, 2, 8), &[(0, 37), (0, 5)]);
    let paged = batch.paged(8, 2);
    let kv = paged.view(&batch);
    for s in 0..2 {
        for p in 0..batch.seq_lens[s] {
            for h in 0..2 {
                assert_eq!(kv.key(s, p, h), &batch.k[s][(p * 2 + h) * 8..][..8]);
                assert_eq!(kv.value(s, p, h), &batch.v[s][(p * 2 + h) * 8..][..8]);
            }
        }
    }
}

#[test]
#[should_panic(expected = "refers to block 9")]
fn paged_kv_rejects_a_block_outside_the_cache() {
    let cache = vec![0.0; 2 * 4 * 8];
    let paged = PagedCache { k: &cache, v: &cache, block_size: 4, num_kv_heads: 1, head_dim: 8 };
    PagedKv::new(paged, &[0, 9], &[0, 2], &[6]);
}

#[test]
#[should_panic(expected = "power of two")]
fn paged_kv_rejects_a_block_size_not_a_power_of_two() {
    let cache = vec![0.0; 6 * 8];
    let paged = PagedCache { k: &cache, v: &cache, block_size: 6, num_kv_heads: 1, head_dim: 8 };
    PagedKv::new(paged, &[0], &[0, 1], &[3]);
}

#[test]
#[should_panic(expected = "not a multiple of num_kv_heads")]
fn attention_rejects_uneven_head_groups() {
    let batch = Batch::new(1, dims(3, 3, 8), &[(0, 2)]);
    let (k, v) = (batch.k.concat(), batch.v.concat());
    let cu = cumulative(&batch.seq_lens);
    let kv = PackedKv::new(&k, &v, &cu, 3, 8);
    let q = batch.q_packed();
    let mut out = vec![0.0; q.len()];
    prefill_attention(&q, &cu, &kv, &mut out, dims(4, 3, 8), 1.0);
}

// ---------------------------------------------------------------- element-wise kernels

#[test]
fn rms_norm_and_fused_add_match_reference() {
    let mut rng = TestRng::new(40);
    // Small (one thread) and large (split across tasks), odd hidden sizes included.
    for &(tokens, hidden) in &[(1, 7), (3, 64), (5, 1000), (300, 768), (70, 1031)] {
        let x = rng.vec(tokens * hidden);
        let w = rng.vec(hidden);
        let mut out = vec![f32::NAN; x.len()];
        pool(3).install(|| rms_norm(&x, &w, 1e-5, &mut out));
        assert_close(&out, &reference::rms_norm(&x, &w, 1e-5), &format!("rms_norm {tokens}×{hidden}"));

        let residual0 = rng.vec(x.len());
        let mut residual = residual0.clone();
        let mut out = vec![f32::NAN; x.len()];
        pool(3).install(|| add_rms_norm(&mut residual, &x, &w, 1e-5, &mut out));
        let summed: Vec<f32> = residual0.iter().zip(&x).map(|(a, b)| a + b).collect();
        assert_eq!(residual, summed, "add_rms_norm must leave residual + x in residual");
        assert_close(&out, &reference::rms_norm(&summed, &w, 1e-5), &format!("add_rms_norm {tokens}×{hidden}"));
    }
}

#[test]
fn rope_matches_reference_at_small_and_large_positions() {
    let mut rng = TestRng::new(41);
    for &(head_dim, theta) in &[(64, 10_000.0), (128, 500_000.0), (6, 10_000.0)] {
        let rope = Rope::new(head_dim, theta, 9000);
        for &tokens in &[3usize, 200] {
            let positions: Vec<usize> = (0..tokens).map(|_| rng.below(9000)).collect();
            let (heads, kv_heads) = (4, 2);
            let q0 = rng.vec(tokens * heads * head_dim);
            let k0 = rng.vec(tokens * kv_heads * head_dim);
            let (mut q, mut k) = (q0.clone(), k0.clone());
            pool(2).install(|| rope.apply(&mut q, &mut k, &positions, heads, kv_heads));
            let what = format!("rope d={head_dim} θ={theta} tokens={tokens}");
            assert_close(&q, &reference::rope(&q0, &positions, heads, head_dim, theta), &format!("{what}, q"));
            assert_close(&k, &reference::rope(&k0, &positions, kv_heads, head_dim, theta), &format!("{what}, k"));
        }
    }
}

#[test]
#[should_panic(expected = "beyond the table")]
fn rope_rejects_positions_past_its_table() {
    let rope = Rope::new(8, 10_000.0, 4);
    let mut x = vec![0.0; 8];
    rope.apply_one(&mut x, &[4], 1);
}

#[test]
fn silu_and_mul_matches_reference_including_large_inputs() {
    let mut rng = TestRng::new(42);
    for &(tokens, inter) in &[(1, 5), (4, 100), (100, 1536)] {
        // Gates over a wide range, so exp's saturation at both ends is exercised.
        let x: Vec<f32> = rng.vec(tokens * 2 * inter).iter().map(|v| v * 100.0).collect();
        let mut out = vec![f32::NAN; tokens * inter];
        pool(2).install(|| silu_and_mul(&x, &mut out, inter));
        assert_close(&out, &reference::silu_and_mul(&x, inter), &format!("silu_and_mul {tokens}×{inter}"));
    }
}

#[test]
fn vectorised_exp_is_accurate_and_clean_at_the_ends() {
    fn check<S: simd::Simd>(name: &str) {
        let e = simd::exp_scalar::<S>;
        let mut x = -87.0f32;
        while x < 88.0 {
            let exact = (x as f64).exp();
            let rel = ((e(x) as f64 - exact) / exact).abs();
            assert!(rel < 1e-6, "{name}: exp({x}) off by {rel:e} relative");
            x += 0.0137;
        }
        assert_eq!(e(f32::NEG_INFINITY), 0.0, "{name}");
        assert_eq!(e(f32::MIN), 0.0, "{name}");
        assert_eq!(e(-100.0), 0.0, "{name}");
        assert!(e(200.0).is_finite() && e(200.0) > 1e38, "{name}");
        assert_eq!(e(0.0), 1.0, "{name}");
        assert!(e(f32::NAN).is_nan(), "{name}: NaN must stay NaN");
    }
    check::<simd::Portable>("portable");
    #[cfg(target_arch = "x86_64")]
    {
        #[target_feature(enable = "avx2,fma")]
        fn avx2() {
            check::<simd::Avx2>("avx2");
        }
        if simd::isa() == Isa::Avx2Fma {
            // SAFETY: the CPU has AVX2 and FMA.
            unsafe { avx2() };
        }
    }
}

// ---------------------------------------------------------------- provenance

#[test]
fn kernel_sources_list_every_kernel_file() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/engine/cpu");
    let mut on_disk: Vec<String> = std::fs::read_dir(&dir)
        .expect("read src/engine/cpu")
        .map(|e| e.expect("dir entry").file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".rs") && name != "tests.rs" && name != "reference.rs")
        .collect();
    on_disk.sort();
    let listed: Vec<&str> = KERNEL_SOURCES.iter().map(|(name, _)| *name).collect();
    assert_eq!(listed, on_disk, "KERNEL_SOURCES must list every kernel file (sorted)");
}
