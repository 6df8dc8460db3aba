//! Decode attention: one new token per sequence over its whole KV history, usually a paged
//! cache ([`super::kv::PagedKv`]), grouped-query.
//!
//! ```text
//! q, out: [num_seqs, num_heads, head_dim]      (the new token of each sequence)
//! kv:     sequence s holds seq_len(s) positions, the new token's included (last)
//! ```
//!
//! Work is split into tasks of (sequence, KV head): the `group` query heads that share a KV head
//! run together, so each tile of keys and values is fetched from memory once and reused from L1
//! by the other heads; decode attention is bound by reading the cache. Within a task, keys are
//! visited in tiles of [`KT`] with an online softmax per head. Each output element is computed
//! by one task in a fixed order, so results are identical at any thread count.

use rayon::prelude::*;

use super::attention::AttentionDims;
use super::kv::KvSource;
use super::scratch::with_scratch;
use super::simd::{self, Isa, SharedMut, Simd, W, dot, dot4, exp_scalar, exp_shifted_sum, max, max_of, prefetch, simd_kernel};

/// Keys per online-softmax step (a tile of keys and values stays in L1 while the group's heads
/// read it).
pub const KT: usize = 32;

/// Attention of each sequence's newest token over all `kv.seq_len(s)` of its keys, into `out`.
///
/// - `q`, `out`: `[num_seqs, num_heads, head_dim]`, `num_seqs = kv.num_seqs()`.
/// - `scale`: multiplies the scores, usually [`AttentionDims::default_scale`].
///
/// Runs on the current rayon pool (call inside `ThreadPool::install` to choose it).
///
/// # Panics
/// If shapes disagree or a sequence is empty.
pub fn decode_attention<K: KvSource>(q: &[f32], kv: &K, out: &mut [f32], dims: AttentionDims, scale: f32) {
    decode_attention_on(simd::isa(), q, kv, out, dims, scale);
}

/// [`decode_attention`] on a given instruction set (tests run both).
pub(crate) fn decode_attention_on<K: KvSource>(
    isa: Isa,
    q: &[f32],
    kv: &K,
    out: &mut [f32],
    dims: AttentionDims,
    scale: f32,
) {
    dims.check(kv, "decode_attention");
    let num_seqs = kv.num_seqs();
    let len = num_seqs * dims.num_heads * dims.head_dim;
    assert!(
        q.len() == len && out.len() == len,
        "decode_attention: q and out must hold {len} floats, got {} and {}",
        q.len(),
        out.len()
    );
    if let Some(s) = (0..num_seqs).find(|&s| kv.seq_len(s) == 0) {
        panic!("decode_attention: sequence {s} is empty; its new token must be in the cache");
    }

    let out = SharedMut(out.as_mut_ptr());
    let kv_heads = dims.num_kv_heads;
    (0..num_seqs * kv_heads).into_par_iter().for_each(|task| {
        let (seq, kv_head) = (task / kv_heads, task % kv_heads);
        run_task(isa, q, kv, out, dims, scale, seq, kv_head);
    });
}

#[allow(clippy::too_many_arguments)]
fn run_task<K: KvSource>(
    isa: Isa,
    q: &[f32],
    kv: &K,
    out: SharedMut,
    dims: AttentionDims,
    scale: f32,
    seq: usize,
    kv_head: usize,
) {
    let d = dims.head_dim;
    let group = dims.group();
    let seq_len = kv.seq_len(seq);
    // The group's query rows are adjacent: heads kv_head·group .. (kv_head+1)·group.
    let q_off = (seq * dims.num_heads + kv_head * group) * d;

    with_scratch(2 * group * d + 2 * group + KT, |buf| {
        let (qs, rest) = buf.split_at_mut(group * d);
        let (acc, rest) = rest.split_at_mut(group * d);
        let (m, rest) = rest.split_at_mut(group);
        let (l, sc) = rest.split_at_mut(group);
        for (x, &y) in qs.iter_mut().zip(&q[q_off..q_off + group * d]) {
            *x = y * scale;
        }
        acc.fill(0.0);
        // f32::MIN rather than −∞: the first correction exp(MIN − m) is a clean 0, never NaN.
        m.fill(f32::MIN);
        l.fill(0.0);
        let mut k_rows: [&[f32]; KT] = [&[]; KT];
        let mut v_rows: [&[f32]; KT] = [&[]; KT];

        let mut k0 = 0;
        while k0 < seq_len {
            let nk = KT.min(seq_len - k0);
            for j in 0..nk {
                k_rows[j] = kv.key(seq, k0 + j, kv_head);
                v_rows[j] = kv.value(seq, k0 + j, kv_head);
            }
            // The next tile loads while this one computes.
            for pos in k0 + nk..seq_len.min(k0 + nk + KT) {
                prefetch(kv.key(seq, pos, kv_head));
                prefetch(kv.value(seq, pos, kv_head));
            }
            let (k_rows, v_rows) = (&k_rows[..nk], &v_rows[..nk]);
            for g in 0..group {
                let sc = &mut sc[..nk];
                tile_scores(isa, &qs[g * d..(g + 1) * d], k_rows, sc);
                tile_update(isa, v_rows, sc, &mut m[g], &mut l[g], &mut acc[g * d..(g + 1) * d]);
            }
            k0 += nk;
        }

        for g in 0..group {
            // SAFETY: the group's rows of this sequence belong to this task alone, and lie
            // inside `out` (its length is checked in `decode_attention`).
            let dst = unsafe { out.slice(q_off + g * d, d) };
            let inv = 1.0 / l[g];
            for (y, &x) in dst.iter_mut().zip(&acc[g * d..(g + 1) * d]) {
                *y = x * inv;
            }
        }
    });
}

simd_kernel!(fn tile_scores / tile_scores_body(q: &[f32], k: &[&[f32]], sc: &mut [f32]));
simd_kernel!(fn tile_update / tile_update_body(v: &[&[f32]], sc: &mut [f32], m: &mut f32, l: &mut f32, acc: &mut [f32]));

/// `sc[j] = q · k[j]` (q pre-scaled), four keys at a time sharing the loads of `q`.
#[inline(always)]
fn tile_scores_body<S: Simd>(q: &[f32], k: &[&[f32]], sc: &mut [f32]) {
    let d = q.len();
    let mut j = 0;
    while j + 4 <= k.len() {
        let s4 = dot4::<S>(q, [k[j], k[j + 1], k[j + 2], k[j + 3]]);
        sc[j..j + 4].copy_from_slice(&s4);
        j += 4;
    }
    for jj in j..k.len() {
        sc[jj] = dot::<S>(q, &k[jj][..d]);
    }
}

/// The online softmax step of one head over one tile: scores `sc` become probabilities
/// relative to the new running maximum `m`, the running sum `l` and the output `acc` are
/// rescaled, and `acc += Σ_j p[j] · v[j]`.
#[inline(always)]
fn tile_update_body<S: Simd>(v: &[&[f32]], sc: &mut [f32], m: &mut f32, l: &mut f32, acc: &mut [f32]) {
    let m_new = max(max_of::<S>(sc), *m);
    let corr = exp_scalar::<S>(*m - m_new);
    *m = m_new;
    let sum = exp_shifted_sum::<S>(sc, m_new);
    *l = S::fmadd(*l, corr, sum);
    let d = acc.len();
    let (chunks, tail) = acc.as_chunks_mut::<W>();
    // Four vectors (32 lanes) at a time: four independent FMA chains while the keys stream
    // past; then one vector; then scalars.
    let mut c = 0;
    while c + 4 <= chunks.len() {
        accumulate_pv::<S, 4>(v, sc, corr, &mut chunks[c..c + 4], c);
        c += 4;
    }
    while c < chunks.len() {
        accumulate_pv::<S, 1>(v, sc, corr, &mut chunks[c..c + 1], c);
        c += 1;
    }
    let t0 = d - tail.len();
    for x in tail.iter_mut() {
        *x *= corr;
    }
    for (vj, &pj) in v.iter().zip(sc.iter()) {
        for (x, &y) in tail.iter_mut().zip(&vj[t0..d]) {
            *x = S::fmadd(pj, y, *x);
        }
    }
}

/// `acc[u] = acc[u] · corr + Σ_j p[j] · v[j][chunk first + u]` for `N` vector chunks of the
/// output, held in registers while the keys stream past.
#[inline(always)]
fn accumulate_pv<S: Simd, const N: usize>(v: &[&[f32]], p: &[f32], corr: f32, acc: &mut [[f32; W]], first: usize) {
    let c = S::splat(corr);
    let mut a = [c; N];
    for u in 0..N {
        a[u] = S::mul(S::load(&acc[u]), c);
    }
    for (vj, &pj) in v.iter().zip(p) {
        let vc = &vj[first * W..(first + N) * W].as_chunks::<W>().0;
        let ps = S::splat(pj);
        for u in 0..N {
            a[u] = S::fma(ps, S::load(&vc[u]), a[u]);
        }
    }
    for u in 0..N {
        S::store(a[u], &mut acc[u]);
    }
}
