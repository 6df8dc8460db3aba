//! Prefill attention: causal, grouped-query, over a batch of sequences of different lengths
//! packed together, with optional cached context (chunked prefill). Flash-attention style: keys
//! are visited in tiles with an online softmax, so no score matrix larger than a tile exists.
//!
//! ```text
//! q, out: [total_new_tokens, num_heads, head_dim]; sequence s = rows cu_seqlens_q[s]..cu_seqlens_q[s+1]
//! kv:     sequence s holds seq_len(s) = context_len + q_len positions; its new tokens are the last q_len
//!
//!                 keys 0 ──────── context_len ──────── seq_len
//!   new token r:  ████████████████████████ ██ (r + 1 of the new ones: causal)
//! ```
//!
//! Work is split into tasks of (sequence, head, tile of [`QT`] new tokens), run in parallel with
//! rayon. Each output element is computed by one task in a fixed order, so results are identical
//! at any thread count.
//!
//! Inside a task the queries lie along the vector lanes: the task keeps `Qᵀ` and `Oᵀ` as
//! `[head_dim][QT]`, so `S = K·Qᵀ` and `Oᵀ += Vᵀ·P` are broadcast-multiply-adds into full vectors,
//! and the softmax's running max and sum are lane-wise: no horizontal reductions anywhere.

use rayon::prelude::*;

use super::attention::AttentionDims;
use super::kv::KvSource;
use super::scratch::with_scratch;
use super::simd::{self, Isa, SharedMut, Simd, W, exp, simd_kernel};

/// New tokens per task, one per vector lane (two AVX2 registers).
pub const QT: usize = 16;
/// Keys per online-softmax step: rescaling `Oᵀ` costs `1/KT` of the `P·V` product.
pub const KT: usize = 32;

/// Causal attention of each sequence's new tokens over its `seq_len` keys, into `out`.
///
/// - `q`, `out`: `[cu_seqlens_q[last], num_heads, head_dim]`.
/// - `cu_seqlens_q`: `num_seqs + 1` offsets of each sequence's new tokens in `q`, from 0.
/// - `kv`: every sequence's keys and values, new tokens included (last), so a sequence with
///   `q_len` new tokens has `context_len = kv.seq_len(s) − q_len` cached ones; new token `r`
///   attends to keys `0..=context_len + r`.
/// - `scale`: multiplies the scores, usually [`AttentionDims::default_scale`].
///
/// Runs on the current rayon pool (call inside `ThreadPool::install` to choose it).
///
/// # Panics
/// If shapes disagree or a sequence has more new tokens than keys.
pub fn prefill_attention<K: KvSource>(
    q: &[f32],
    cu_seqlens_q: &[usize],
    kv: &K,
    out: &mut [f32],
    dims: AttentionDims,
    scale: f32,
) {
    prefill_attention_on(simd::isa(), q, cu_seqlens_q, kv, out, dims, scale);
}

/// [`prefill_attention`] on a given instruction set (tests run both).
pub(crate) fn prefill_attention_on<K: KvSource>(
    isa: Isa,
    q: &[f32],
    cu_seqlens_q: &[usize],
    kv: &K,
    out: &mut [f32],
    dims: AttentionDims,
    scale: f32,
) {
    dims.check(kv, "prefill_attention");
    let num_seqs = kv.num_seqs();
    assert_eq!(cu_seqlens_q.len(), num_seqs + 1, "prefill_attention: cu_seqlens_q must have num_seqs + 1 entries");
    assert_eq!(cu_seqlens_q[0], 0, "prefill_attention: cu_seqlens_q must start at 0");
    for s in 0..num_seqs {
        let q_len = cu_seqlens_q[s + 1].checked_sub(cu_seqlens_q[s]).expect("cu_seqlens_q must be non-decreasing");
        assert!(
            q_len <= kv.seq_len(s),
            "prefill_attention: sequence {s} has {q_len} new tokens but only {} keys",
            kv.seq_len(s)
        );
    }
    let len = cu_seqlens_q[num_seqs] * dims.num_heads * dims.head_dim;
    assert!(
        q.len() == len && out.len() == len,
        "prefill_attention: q and out must hold {len} floats, got {} and {}",
        q.len(),
        out.len()
    );

    let out = SharedMut(out.as_mut_ptr());
    let heads = dims.num_heads;
    (0..num_seqs).into_par_iter().for_each(|seq| {
        let tok0 = cu_seqlens_q[seq];
        let q_len = cu_seqlens_q[seq + 1] - tok0;
        let tiles = q_len.div_ceil(QT);
        (0..tiles * heads).into_par_iter().for_each(|task| {
            // Later tiles see more keys (causal): start them first so the last tasks are short.
            let tile = tiles - 1 - task / heads;
            let task = Task { seq, tok0, q_len, r0: tile * QT, head: task % heads };
            run_task(isa, q, kv, out, dims, scale, task);
        });
    });
}

/// One (sequence, head, tile of new tokens).
#[derive(Clone, Copy)]
struct Task {
    seq: usize,
    /// Row of the sequence's first new token in `q`.
    tok0: usize,
    q_len: usize,
    /// First new token of the tile, counted within the sequence.
    r0: usize,
    head: usize,
}

fn run_task<K: KvSource>(isa: Isa, q: &[f32], kv: &K, out: SharedMut, dims: AttentionDims, scale: f32, task: Task) {
    let d = dims.head_dim;
    let heads = dims.num_heads;
    let kv_head = task.head / dims.group();
    let n_q = QT.min(task.q_len - task.r0);
    let first_pos = kv.seq_len(task.seq) - task.q_len + task.r0;
    // Keys past the tile's last query are masked for every lane: never visit them.
    let kv_end = first_pos + n_q;

    with_scratch(2 * d * QT + KT * QT, |buf| {
        let (qt, rest) = buf.split_at_mut(d * QT);
        let (ot, st) = rest.split_at_mut(d * QT);
        let qt = qt.as_chunks_mut::<QT>().0;
        let ot = ot.as_chunks_mut::<QT>().0;
        let st = st.as_chunks_mut::<QT>().0;

        // Qᵀ, pre-scaled. Lanes past the last query repeat it: finite, never all-masked, unread.
        // Positions as f32 (exact below 2^24) so the mask is one vector compare.
        let mut q_pos = [0.0f32; QT];
        for r in 0..QT {
            let rr = r.min(n_q - 1);
            q_pos[r] = (first_pos + rr) as f32;
            let row = &q[((task.tok0 + task.r0 + rr) * heads + task.head) * d..][..d];
            for (i, &x) in row.iter().enumerate() {
                qt[i][r] = x * scale;
            }
        }
        ot.fill([0.0; QT]);
        let mut state = Softmax { m: [f32::MIN; QT], l: [0.0; QT], corr: [0.0; QT] };
        let mut k_rows: [&[f32]; KT] = [&[]; KT];
        let mut v_rows: [&[f32]; KT] = [&[]; KT];

        let mut k0 = 0;
        while k0 < kv_end {
            let nk = KT.min(kv_end - k0);
            for j in 0..nk {
                k_rows[j] = kv.key(task.seq, k0 + j, kv_head);
                v_rows[j] = kv.value(task.seq, k0 + j, kv_head);
            }
            let st = &mut st[..nk];
            scores(isa, &k_rows[..nk], qt, st);
            // Only a tile that crosses the diagonal has masked entries.
            let mask = k0 + nk - 1 > first_pos;
            softmax_tile(isa, st, k0 as f32, &q_pos, mask, &mut state);
            accumulate_pv(isa, &v_rows[..nk], st, &state.corr, ot);
            k0 += nk;
        }

        for (r, &l) in state.l[..n_q].iter().enumerate() {
            let inv = 1.0 / l;
            // SAFETY: row (token, head) belongs to this task alone, and lies inside `out`
            // (checked against cu_seqlens_q in `prefill_attention`).
            let dst = unsafe { out.slice(((task.tok0 + task.r0 + r) * heads + task.head) * d, d) };
            for (i, y) in dst.iter_mut().enumerate() {
                *y = ot[i][r] * inv;
            }
        }
    });
}

/// The online softmax's running state, one lane per query.
struct Softmax {
    /// Largest score so far. Starts at f32::MIN rather than −∞, so that the first correction
    /// exp(MIN − m) is a clean 0, never NaN.
    m: [f32; QT],
    /// Σ exp(score − m) so far.
    l: [f32; QT],
    /// exp(m_before − m_after) of the last tile: what the output accumulated so far is scaled by.
    corr: [f32; QT],
}

simd_kernel!(fn scores / scores_body(k: &[&[f32]], qt: &[[f32; QT]], st: &mut [[f32; QT]]));
simd_kernel!(fn softmax_tile / softmax_tile_body(
    st: &mut [[f32; QT]], key0: f32, q_pos: &[f32; QT], mask: bool, state: &mut Softmax
));
simd_kernel!(fn accumulate_pv / accumulate_pv_body(
    v: &[&[f32]], p: &[[f32; QT]], corr: &[f32; QT], ot: &mut [[f32; QT]]
));

/// A row of [`QT`] lanes as two vectors.
#[inline(always)]
fn load_row<S: Simd>(row: &[f32; QT]) -> [S::V; 2] {
    let (c, _) = row.as_chunks::<W>();
    [S::load(&c[0]), S::load(&c[1])]
}

#[inline(always)]
fn store_row<S: Simd>(v: [S::V; 2], row: &mut [f32; QT]) {
    let (c, _) = row.as_chunks_mut::<W>();
    S::store(v[0], &mut c[0]);
    S::store(v[1], &mut c[1]);
}

/// `st[j][r] = Σ_i k[j][i] · qt[i][r]`: four keys at a time, so each loaded pair of query
/// vectors feeds eight FMAs into accumulators held in registers.
#[inline(always)]
fn scores_body<S: Simd>(k: &[&[f32]], qt: &[[f32; QT]], st: &mut [[f32; QT]]) {
    let d = qt.len();
    let mut j = 0;
    while j + 4 <= k.len() {
        let k4 = [&k[j][..d], &k[j + 1][..d], &k[j + 2][..d], &k[j + 3][..d]];
        let mut acc = [[S::splat(0.0); 2]; 4];
        for (i, qv) in qt.iter().enumerate() {
            let [q0, q1] = load_row::<S>(qv);
            for t in 0..4 {
                let x = S::splat(k4[t][i]);
                acc[t][0] = S::fma(x, q0, acc[t][0]);
                acc[t][1] = S::fma(x, q1, acc[t][1]);
            }
        }
        for t in 0..4 {
            store_row::<S>(acc[t], &mut st[j + t]);
        }
        j += 4;
    }
    for (kj, sj) in k[j..].iter().zip(&mut st[j..]) {
        let kj = &kj[..d];
        let mut acc = [S::splat(0.0); 2];
        for (i, qv) in qt.iter().enumerate() {
            let [q0, q1] = load_row::<S>(qv);
            let x = S::splat(kj[i]);
            acc[0] = S::fma(x, q0, acc[0]);
            acc[1] = S::fma(x, q1, acc[1]);
        }
        store_row::<S>(acc, sj);
    }
}

/// Masks keys after each query (when `mask`), then turns the tile's scores `st` into
/// probabilities relative to the new running maximum and updates `state`, lane by lane.
#[inline(always)]
fn softmax_tile_body<S: Simd>(st: &mut [[f32; QT]], key0: f32, q_pos: &[f32; QT], mask: bool, state: &mut Softmax) {
    if mask {
        let neg_inf = S::splat(f32::NEG_INFINITY);
        let [qp0, qp1] = load_row::<S>(q_pos);
        for (j, row) in st.iter_mut().enumerate() {
            let key_pos = S::splat(key0 + j as f32);
            let [v0, v1] = load_row::<S>(row);
            // Query before key: masked.
            store_row::<S>([S::select_lt(qp0, key_pos, neg_inf, v0), S::select_lt(qp1, key_pos, neg_inf, v1)], row);
        }
    }
    let [m_old0, m_old1] = load_row::<S>(&state.m);
    let (mut m0, mut m1) = (m_old0, m_old1);
    for row in st.iter() {
        let [v0, v1] = load_row::<S>(row);
        m0 = S::max(v0, m0);
        m1 = S::max(v1, m1);
    }
    let corr = [exp::<S>(S::sub(m_old0, m0)), exp::<S>(S::sub(m_old1, m1))];
    let (mut sum0, mut sum1) = (S::splat(0.0), S::splat(0.0));
    for row in st.iter_mut() {
        let [v0, v1] = load_row::<S>(row);
        let (e0, e1) = (exp::<S>(S::sub(v0, m0)), exp::<S>(S::sub(v1, m1)));
        store_row::<S>([e0, e1], row);
        sum0 = S::add(sum0, e0);
        sum1 = S::add(sum1, e1);
    }
    let [l0, l1] = load_row::<S>(&state.l);
    store_row::<S>([S::fma(l0, corr[0], sum0), S::fma(l1, corr[1], sum1)], &mut state.l);
    store_row::<S>([m0, m1], &mut state.m);
    store_row::<S>(corr, &mut state.corr);
}

/// `ot[i][r] = ot[i][r] · corr[r] + Σ_j v[j][i] · p[j][r]`: four head dimensions at a time
/// (eight accumulators in registers while the keys stream past).
#[inline(always)]
fn accumulate_pv_body<S: Simd>(v: &[&[f32]], p: &[[f32; QT]], corr: &[f32; QT], ot: &mut [[f32; QT]]) {
    let d = ot.len();
    let c = load_row::<S>(corr);
    let mut i = 0;
    while i + 4 <= d {
        let mut acc = [[S::splat(0.0); 2]; 4];
        for t in 0..4 {
            let o = load_row::<S>(&ot[i + t]);
            acc[t] = [S::mul(o[0], c[0]), S::mul(o[1], c[1])];
        }
        for (vj, pj) in v.iter().zip(p) {
            let x: &[f32; 4] = vj[i..i + 4].try_into().expect("value row shorter than head_dim");
            let [p0, p1] = load_row::<S>(pj);
            for t in 0..4 {
                let xs = S::splat(x[t]);
                acc[t][0] = S::fma(xs, p0, acc[t][0]);
                acc[t][1] = S::fma(xs, p1, acc[t][1]);
            }
        }
        for t in 0..4 {
            store_row::<S>(acc[t], &mut ot[i + t]);
        }
        i += 4;
    }
    for (ii, row) in ot.iter_mut().enumerate().skip(i) {
        let o = load_row::<S>(row);
        let mut acc = [S::mul(o[0], c[0]), S::mul(o[1], c[1])];
        for (vj, pj) in v.iter().zip(p) {
            let [p0, p1] = load_row::<S>(pj);
            let xs = S::splat(vj[ii]);
            acc[0] = S::fma(xs, p0, acc[0]);
            acc[1] = S::fma(xs, p1, acc[1]);
        }
        store_row::<S>(acc, row);
    }
}
