// Prefill (and chunked-prefill) attention on tensor cores: causal, grouped-query, paged cached
// context, varlen batches; FlashAttention-2-style tiles with an online softmax in fp32. Same
// layout and arguments as attention_prefill.cu (see there for the argument list):
//
//   out [total_new_tokens, num_heads, head_dim]; q (q_stride); k, v (kv_stride);
//   k_cache, v_cache [num_blocks, block_size, num_kv_heads, head_dim]; block_tables; context_lens
//   (cached tokens before this step); cu_seqlens_q; scale.
//
// Extra requirements of this kernel (16-byte copies): head_dim a multiple of 8 and at most the
// entry point's D (64 or 128); q_stride, kv_stride multiples of 8; q, k, v, caches 16-byte
// aligned. Needs sm_80 or newer (cp.async, ldmatrix, mma.sync bf16).
//
// Launch: grid (ceil(max_new_tokens / TC_BM), num_heads, num_seqs) with TC_BM = 64, block
// TC_THREADS = 128, dynamic shared memory TC_SMEM_BYTES(D) = 2 * TC_BN * (D + 8) * 2 bytes with D
// the entry point's (not head_dim): 18,432 B for D = 64, 34,816 B for D = 128 (under 48 KiB, no
// opt-in). Blocks are taken heaviest-first across heads: the linear index over (x, y) walks the
// heads of the last (longest) query tile first, so the grid's x and y only fix how many tiles and
// heads there are.
//
// Work split: a block owns TC_BM = 64 query rows of one head, one warp per 16 rows. Q·Kᵀ and P·V
// run on `mma.sync.m16n8k16` (bf16 or f16 in, fp32 accumulate). Q's A fragments are loaded once
// with `ldmatrix` and stay in registers; the scores' C fragments become P's A fragments without
// touching shared memory. One K tile and one V tile of TC_BN = 64 keys live in shared memory
// (row-major, rows padded by 8 halves so that ldmatrix's eight 16-byte rows hit distinct banks),
// filled by 16-byte `cp.async` copies (zero-filled past the keys / head_dim) and read with
// `ldmatrix.x4` (K) and `ldmatrix.x4.trans` (V, so no transposed copy is needed). The copies are
// pipelined: V(j) lands while the warps compute S = Q·K(j)ᵀ and its softmax, K(j+1) lands while
// they compute O += P·V(j); two barriers per tile. Q is staged once in the V buffer. A warp skips
// tiles wholly in its causal future and masks only tiles that cross its diagonal.

#define TC_WARPS 4
#define TC_THREADS (TC_WARPS * SERVESIM_WARP)
#define TC_BM (TC_WARPS * 16)
#define TC_BN 64
#define TC_PAD 8
#define TC_LOG2E 1.4426950408889634f
#define TC_SMEM_BYTES(D) (2 * TC_BN * ((D) + TC_PAD) * 2)
// Blocks per SM the register budget is sized for (ptxas caps registers at 65536 / (128 * this)).
#define TC_MIN_BLOCKS_D64 3
#define TC_MIN_BLOCKS_D128 3

// ---- tensor-core, copy and conversion primitives. The emulator (kernels/emulation) defines
// SERVESIM_EMULATION and supplies host versions of the same operations; NVRTC never does.
#ifndef SERVESIM_EMULATION
// D = A·B + D for one warp: A 16x16 row-major (4 regs of 2 halves), B 16x8 column-major (2 regs),
// D 16x8 fp32 (4 floats). Fragment layouts: PTX ISA, "Matrix fragments for mma.m16n8k16".
template <typename T>
__device__ __forceinline__ void tc_mma_16816(float* c, const unsigned* a, const unsigned* b);

template <>
__device__ __forceinline__ void tc_mma_16816<Bf16>(float* c, const unsigned* a, const unsigned* b) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

template <>
__device__ __forceinline__ void tc_mma_16816<F16>(float* c, const unsigned* a, const unsigned* b) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// Two fp32 -> one register of two 16-bit floats, `lo` in the low half (round to nearest even).
template <typename T>
__device__ __forceinline__ unsigned tc_pack2(float lo, float hi);

template <>
__device__ __forceinline__ unsigned tc_pack2<Bf16>(float lo, float hi) {
    unsigned r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

template <>
__device__ __forceinline__ unsigned tc_pack2<F16>(float lo, float hi) {
    unsigned r;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

__device__ __forceinline__ float tc_exp2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

__device__ __forceinline__ unsigned tc_smem_addr(const void* p) {
    unsigned r;
    asm("{ .reg .u64 a; cvta.to.shared.u64 a, %1; cvt.u32.u64 %0, a; }" : "=r"(r) : "l"(p));
    return r;
}

// ldmatrix .x4: lane i gives the address of row i % 8 of matrix i / 8 (16 bytes, 16-byte
// aligned); register j receives matrix j's elements (row lane / 4, columns 2 (lane % 4) + {0, 1}),
// or with .trans (rows 2 (lane % 4) + {0, 1}, column lane / 4); lower index in the low half.
__device__ __forceinline__ void tc_ldsm_x4(unsigned* r, const u16* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(tc_smem_addr(p))
                 : "memory");
}

__device__ __forceinline__ void tc_ldsm_x4_trans(unsigned* r, const u16* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(tc_smem_addr(p))
                 : "memory");
}

// 16-byte global -> shared copy that bypasses L1 (.cg); `valid` false writes 16 zero bytes and
// reads nothing (src-size 0). Completion: tc_cp_async_commit() closes a group,
// tc_cp_async_wait_all() waits for all of this thread's groups; a __syncthreads() after the wait
// makes every thread's copies visible to the block.
__device__ __forceinline__ void tc_cp_async16(u16* dst, const u16* src, bool valid) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;"
                 :
                 : "r"(tc_smem_addr(dst)), "l"(src), "r"(valid ? 16 : 0)
                 : "memory");
}

__device__ __forceinline__ void tc_cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }

__device__ __forceinline__ void tc_cp_async_wait_all() { asm volatile("cp.async.wait_group 0;" ::: "memory"); }
#else
template <typename T>
inline void tc_mma_16816(float* c, const unsigned* a, const unsigned* b) {
    emu_mma_16816(c, a, b, T::store(1.0f) == 0x3c00);  // f16 1.0 is 0x3c00, bf16's is 0x3f80
}
template <typename T>
inline unsigned tc_pack2(float lo, float hi) {
    return (unsigned)T::store(lo) | ((unsigned)T::store(hi) << 16);
}
inline float tc_exp2(float x) { return exp2f(x); }
inline void tc_ldsm_x4(unsigned* r, const u16* p) { emu_ldmatrix_x4(r, p, false); }
inline void tc_ldsm_x4_trans(unsigned* r, const u16* p) { emu_ldmatrix_x4(r, p, true); }
inline void tc_cp_async16(u16* dst, const u16* src, bool valid) { emu_cp_async16(dst, src, valid); }
inline void tc_cp_async_commit() {}
inline void tc_cp_async_wait_all() {}
#endif

// Issues the cp.async copies of one TC_BN-key tile of K or V (rows kb .. kb + TC_BN - 1) into
// `dst` [TC_BN][D + TC_PAD]: cached rows through the block table, new rows from k / v; rows past
// n_keys and chunks past head_dim are zero-filled (so masked keys contribute 0, not NaN · 0).
template <int D>
__device__ __forceinline__ void tc_load_kv_tile(
    u16* dst, const u16* __restrict__ cache, const u16* __restrict__ fresh, const int* table,
    int kb, int n_keys, int ctx, int q_start, int block_size, long long cache_row,
    long long kv_stride, long long head_off, int hc, int tid) {
    constexpr int DC = D / 8;                   // 16-byte chunks per row
    constexpr int RPP = TC_THREADS / DC;        // rows per pass
    constexpr int ITERS = TC_BN / RPP;          // passes
    static_assert(TC_THREADS % DC == 0 && TC_BN % RPP == 0, "tile must split evenly");
    const int c = tid % DC;
    const int r0 = tid / DC;
#pragma unroll 1
    for (int it = 0; it < ITERS; ++it) {
        const int r = r0 + it * RPP;
        const int j = kb + r;
        const bool valid = j < n_keys && c < hc;
        const u16* src = cache;  // any valid address when nothing is read
        if (valid) {
            if (j < ctx) {
                const long long blk = table[j / block_size];
                src = cache + (blk * block_size + j % block_size) * cache_row + head_off + c * 8;
            } else {
                src = fresh + (long long)(q_start + j - ctx) * kv_stride + head_off + c * 8;
            }
        }
        tc_cp_async16(dst + r * (D + TC_PAD) + c * 8, src, valid);
    }
}

template <typename T, int D>
__device__ __forceinline__ void attention_prefill_tc_impl(
    u16* __restrict__ out, const u16* __restrict__ q, const u16* __restrict__ k,
    const u16* __restrict__ v, const u16* __restrict__ k_cache, const u16* __restrict__ v_cache,
    const int* __restrict__ block_tables, const int* __restrict__ context_lens,
    const int* __restrict__ cu_seqlens_q, float scale, int num_heads, int num_kv_heads,
    int head_dim, int q_stride, int kv_stride, int block_size, int max_blocks_per_seq) {
    constexpr int KS = D + TC_PAD;  // K / V / Q tile row stride (u16)
    constexpr int DC = D / 8;       // 16-byte chunks per row
    constexpr int KD = D / 16;      // k-steps of Q·Kᵀ
    constexpr int ND = D / 8;       // n-tiles of P·V (output dims)
    constexpr int NB = TC_BN / 8;   // n-tiles of Q·Kᵀ (keys)
    constexpr int KB = TC_BN / 16;  // k-steps of P·V
    static_assert(TC_BM == TC_BN, "Q is staged in the V buffer");

    // Heaviest first across heads: linear block index -> (tile from the last, head).
    const int lin = blockIdx.x + gridDim.x * blockIdx.y;
    const int tile = gridDim.x - 1 - lin / gridDim.y;
    const int h = lin % gridDim.y;
    const int seq = blockIdx.z;
    const int q_start = cu_seqlens_q[seq];
    const int q_len = cu_seqlens_q[seq + 1] - q_start;
    const int row0 = tile * TC_BM;
    if (row0 >= q_len) {
        return;
    }
    const int ctx = context_lens[seq];
    const int kvh = h / (num_heads / num_kv_heads);
    const int rows_here = min(TC_BM, q_len - row0);
    const int n_keys = ctx + row0 + rows_here;  // keys visible to the block's last row
    const int hd = head_dim;
    const int hc = head_dim / 8;  // 16-byte chunks actually present

    extern __shared__ __align__(16) float tc_smem[];
    u16* Ks = (u16*)tc_smem;   // [TC_BN][KS]
    u16* Vs = Ks + TC_BN * KS; // [TC_BN][KS]; first holds Q [TC_BM][KS]

    const int tid = threadIdx.x;
    const int lane = tid % SERVESIM_WARP;
    const int warp = tid / SERVESIM_WARP;
    const int gr = lane >> 2;       // fragment row (groupID)
    const int gc = (lane & 3) * 2;  // fragment column pair (2 * threadID_in_group)
    const long long cache_row = (long long)num_kv_heads * hd;
    const long long head_off = (long long)kvh * hd;
    const int* table = block_tables + (long long)seq * max_blocks_per_seq;

    // Q tile -> the V buffer, K tile 0 -> the K buffer, one group.
    {
        const int c = tid % DC;
#pragma unroll
        for (int it = 0; it < TC_BM * DC / TC_THREADS; ++it) {
            const int r = tid / DC + it * (TC_THREADS / DC);
            const bool valid = r < rows_here && c < hc;
            const u16* src = valid ? q + (long long)(q_start + row0 + r) * q_stride + (long long)h * hd + c * 8 : q;
            tc_cp_async16(Vs + r * KS + c * 8, src, valid);
        }
    }
    tc_load_kv_tile<D>(Ks, k_cache, k, table, 0, n_keys, ctx, q_start, block_size, cache_row,
                       kv_stride, head_off, hc, tid);
    tc_cp_async_commit();
    tc_cp_async_wait_all();
    __syncthreads();

    const int wrow = warp * 16;  // the warp's first row within the tile
    // ldmatrix address roles: lane supplies row (lane % 8) of matrix (lane / 8).
    const int lm = lane >> 3;
    const int lr = lane & 7;
    unsigned qf[KD][4];
    {
        // A fragment of rows wrow..+15, columns kd*16..+15: matrices (rows +0/+8) x (cols +0/+8)
        // in the order a0 (r+0, c+0), a1 (r+8, c+0), a2 (r+0, c+8), a3 (r+8, c+8).
        const u16* qa = Vs + (wrow + lr + (lm & 1) * 8) * KS + (lm >> 1) * 8;
#pragma unroll
        for (int kd = 0; kd < KD; ++kd) {
            tc_ldsm_x4(qf[kd], qa + kd * 16);
        }
    }
    __syncthreads();  // Q read: the V buffer is free
    tc_load_kv_tile<D>(Vs, v_cache, v, table, 0, n_keys, ctx, q_start, block_size, cache_row,
                       kv_stride, head_off, hc, tid);
    tc_cp_async_commit();

    float o[ND][4];
#pragma unroll
    for (int dn = 0; dn < ND; ++dn) {
        o[dn][0] = o[dn][1] = o[dn][2] = o[dn][3] = 0.0f;
    }
    float m0 = SERVESIM_NEG_INF, m1 = SERVESIM_NEG_INF;  // running max (log2 units), rows gr, gr+8
    float l0 = 0.0f, l1 = 0.0f;                          // this lane's share of the row sums
    const float sl2 = scale * TC_LOG2E;
    const bool warp_active = wrow < rows_here;
    const int first_pos = ctx + row0 + wrow;  // absolute position of the warp's first row
    const int pos0 = first_pos + gr;
    const int pos1 = pos0 + 8;
    const int last_pos = first_pos + 15;

    // K fragments (B of Q·Kᵀ, "col-major" 16x8 = K rows as stored): matrices (keys nb*8 / nb*8+8)
    // x (dims +0 / +8) in the order b[nb][0], b[nb][1], b[nb+1][0], b[nb+1][1].
    const u16* kaddr = Ks + ((lm >> 1) * 8 + lr) * KS + (lm & 1) * 8;
    // V fragments (B of P·V: 16 keys x 8 dims) by .trans: matrices (keys +0 / +8) x (dims dn*8 /
    // dn*8+8) in the order b[dn][0], b[dn][1], b[dn+1][0], b[dn+1][1].
    const u16* vaddr = Vs + ((lm & 1) * 8 + lr) * KS + (lm >> 1) * 8;

    for (int kb = 0; kb < n_keys; kb += TC_BN) {
        const bool active = warp_active && kb <= last_pos;  // warp-uniform
        float s[NB][4];
        float alpha0 = 1.0f, alpha1 = 1.0f;
        if (active) {
            // S = Q·Kᵀ (16 rows x TC_BN keys per warp)
#pragma unroll
            for (int nb = 0; nb < NB; ++nb) {
                s[nb][0] = s[nb][1] = s[nb][2] = s[nb][3] = 0.0f;
            }
#pragma unroll
            for (int kd = 0; kd < KD; ++kd) {
#pragma unroll
                for (int nb = 0; nb < NB; nb += 2) {
                    unsigned b[4];
                    tc_ldsm_x4(b, kaddr + nb * 8 * KS + kd * 16);
                    tc_mma_16816<T>(s[nb], qf[kd], b);
                    tc_mma_16816<T>(s[nb + 1], qf[kd], b + 2);
                }
            }

            // Scale to log2 units, causal mask (only on tiles crossing the warp's diagonal).
            const bool need_mask = kb + TC_BN - 1 > first_pos;
            float mx0 = SERVESIM_NEG_INF, mx1 = SERVESIM_NEG_INF;
#pragma unroll
            for (int nb = 0; nb < NB; ++nb) {
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    const int j = kb + nb * 8 + gc + e;
                    float v0 = s[nb][e] * sl2;
                    float v1 = s[nb][2 + e] * sl2;
                    if (need_mask) {
                        v0 = j > pos0 ? SERVESIM_NEG_INF : v0;
                        v1 = j > pos1 ? SERVESIM_NEG_INF : v1;
                    }
                    s[nb][e] = v0;
                    s[nb][2 + e] = v1;
                    mx0 = fmaxf(mx0, v0);
                    mx1 = fmaxf(mx1, v1);
                }
            }
            mx0 = fmaxf(mx0, __shfl_xor_sync(SERVESIM_FULL_MASK, mx0, 1));
            mx0 = fmaxf(mx0, __shfl_xor_sync(SERVESIM_FULL_MASK, mx0, 2));
            mx1 = fmaxf(mx1, __shfl_xor_sync(SERVESIM_FULL_MASK, mx1, 1));
            mx1 = fmaxf(mx1, __shfl_xor_sync(SERVESIM_FULL_MASK, mx1, 2));
            const float mn0 = fmaxf(m0, mx0);
            const float mn1 = fmaxf(m1, mx1);
            // A row with nothing visible yet keeps p = 0 instead of computing inf - inf.
            const float ms0 = mn0 == SERVESIM_NEG_INF ? 0.0f : mn0;
            const float ms1 = mn1 == SERVESIM_NEG_INF ? 0.0f : mn1;
            alpha0 = tc_exp2(m0 - ms0);
            alpha1 = tc_exp2(m1 - ms1);
            m0 = mn0;
            m1 = mn1;
            float rs0 = 0.0f, rs1 = 0.0f;
#pragma unroll
            for (int nb = 0; nb < NB; ++nb) {
                s[nb][0] = tc_exp2(s[nb][0] - ms0);
                s[nb][1] = tc_exp2(s[nb][1] - ms0);
                s[nb][2] = tc_exp2(s[nb][2] - ms1);
                s[nb][3] = tc_exp2(s[nb][3] - ms1);
                rs0 += s[nb][0] + s[nb][1];
                rs1 += s[nb][2] + s[nb][3];
            }
            l0 = l0 * alpha0 + rs0;
            l1 = l1 * alpha1 + rs1;
        }

        // V(kb) has landed and every warp is done with K(kb): start K(kb + TC_BN).
        tc_cp_async_wait_all();
        __syncthreads();
        if (kb + TC_BN < n_keys) {
            tc_load_kv_tile<D>(Ks, k_cache, k, table, kb + TC_BN, n_keys, ctx, q_start,
                               block_size, cache_row, kv_stride, head_off, hc, tid);
            tc_cp_async_commit();
        }

        if (active) {
#pragma unroll
            for (int dn = 0; dn < ND; ++dn) {
                o[dn][0] *= alpha0;
                o[dn][1] *= alpha0;
                o[dn][2] *= alpha1;
                o[dn][3] *= alpha1;
            }
            // O += P·V, P's A fragments packed straight from the probabilities.
#pragma unroll
            for (int kb2 = 0; kb2 < KB; ++kb2) {
                unsigned pf[4];
                pf[0] = tc_pack2<T>(s[2 * kb2][0], s[2 * kb2][1]);
                pf[1] = tc_pack2<T>(s[2 * kb2][2], s[2 * kb2][3]);
                pf[2] = tc_pack2<T>(s[2 * kb2 + 1][0], s[2 * kb2 + 1][1]);
                pf[3] = tc_pack2<T>(s[2 * kb2 + 1][2], s[2 * kb2 + 1][3]);
#pragma unroll
                for (int dn = 0; dn < ND; dn += 2) {
                    unsigned b[4];
                    tc_ldsm_x4_trans(b, vaddr + kb2 * 16 * KS + dn * 8);
                    tc_mma_16816<T>(o[dn], pf, b);
                    tc_mma_16816<T>(o[dn + 1], pf, b + 2);
                }
            }
        }

        // K(kb + TC_BN) has landed and every warp is done with V(kb): start V(kb + TC_BN).
        tc_cp_async_wait_all();
        __syncthreads();
        if (kb + TC_BN < n_keys) {
            tc_load_kv_tile<D>(Vs, v_cache, v, table, kb + TC_BN, n_keys, ctx, q_start,
                               block_size, cache_row, kv_stride, head_off, hc, tid);
            tc_cp_async_commit();
        }
    }

    if (!warp_active) {
        return;
    }
    l0 += __shfl_xor_sync(SERVESIM_FULL_MASK, l0, 1);
    l0 += __shfl_xor_sync(SERVESIM_FULL_MASK, l0, 2);
    l1 += __shfl_xor_sync(SERVESIM_FULL_MASK, l1, 1);
    l1 += __shfl_xor_sync(SERVESIM_FULL_MASK, l1, 2);
    const float inv0 = l0 > 0.0f ? 1.0f / l0 : 0.0f;
    const float inv1 = l1 > 0.0f ? 1.0f / l1 : 0.0f;
    const int r0 = wrow + gr;
    const int r1 = r0 + 8;
    u16* o0 = out + ((long long)(q_start + row0 + r0) * num_heads + h) * hd;
    u16* o1 = out + ((long long)(q_start + row0 + r1) * num_heads + h) * hd;
#pragma unroll
    for (int dn = 0; dn < ND; ++dn) {
        const int col = dn * 8 + gc;
        if (col < hd) {
            if (r0 < rows_here) {
                *(unsigned*)(o0 + col) = tc_pack2<T>(o[dn][0] * inv0, o[dn][1] * inv0);
            }
            if (r1 < rows_here) {
                *(unsigned*)(o1 + col) = tc_pack2<T>(o[dn][2] * inv1, o[dn][3] * inv1);
            }
        }
    }
}

#define SERVESIM_PREFILL_TC_ENTRY(NAME, TYPE, D, MIN_BLOCKS)                                       \
    extern "C" __global__ void __launch_bounds__(TC_THREADS, MIN_BLOCKS) NAME(                     \
        u16* out, const u16* q, const u16* k, const u16* v, const u16* k_cache,                    \
        const u16* v_cache, const int* block_tables, const int* context_lens,                      \
        const int* cu_seqlens_q, float scale, int num_heads, int num_kv_heads, int head_dim,       \
        int q_stride, int kv_stride, int block_size, int max_blocks_per_seq) {                     \
        attention_prefill_tc_impl<TYPE, D>(out, q, k, v, k_cache, v_cache, block_tables,           \
                                           context_lens, cu_seqlens_q, scale, num_heads,           \
                                           num_kv_heads, head_dim, q_stride, kv_stride,            \
                                           block_size, max_blocks_per_seq);                        \
    }

SERVESIM_PREFILL_TC_ENTRY(attention_prefill_tc_bf16_d64, Bf16, 64, TC_MIN_BLOCKS_D64)
SERVESIM_PREFILL_TC_ENTRY(attention_prefill_tc_bf16_d128, Bf16, 128, TC_MIN_BLOCKS_D128)
SERVESIM_PREFILL_TC_ENTRY(attention_prefill_tc_f16_d64, F16, 64, TC_MIN_BLOCKS_D64)
SERVESIM_PREFILL_TC_ENTRY(attention_prefill_tc_f16_d128, F16, 128, TC_MIN_BLOCKS_D128)
