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
// Launch (the default entry points attention_prefill_tc_{bf16,f16}_d{64,128}): grid
// (ceil(max_new_tokens / TC_BM), num_heads, num_seqs) with TC_BM = 128, block TC_THREADS = 128,
// dynamic shared memory TC_SMEM_BYTES(D) with D the entry point's (not head_dim): 55,296 B for
// D = 64, 104,448 B for D = 128. That is over the 48 KiB a launch gets by default, so the host
// must first raise the entry's limit once: cuFuncSetAttribute(f,
// CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, TC_SMEM_BYTES(D)) (driver API) or
// cudaFuncSetAttribute(f, cudaFuncAttributeMaxDynamicSharedMemorySize, ...) (runtime); without it
// the launch fails with "too many resources requested" / invalid value. sm_80 allows up to 163 KiB,
// sm_90 227 KiB, so two blocks of the d128 entry share an SM on both.
//
// Blocks are taken heaviest-first across heads: the linear index over (x, y) walks the heads of
// the last (longest) query tile first, so the grid's x and y only fix how many tiles and heads
// there are.
//
// Work split, as template parameters (the default: W = 4 warps, MT = 2, BN = 64, S = 2, Q in
// shared memory): a block owns BM = W * MT * 16 query rows of one head, a warp MT * 16 of them
// (MT m16 tiles). Q·Kᵀ and P·V run on `mma.sync.m16n8k16` (bf16 or f16 in, fp32 accumulate).
// Why MT = 2: every K or V B fragment a warp loads with `ldmatrix` then feeds MT mma's, so two m
// tiles halve the shared-memory reads per FLOP, which capped the 16-row version at ~20% of peak;
// the price is registers (O alone is MT * D / 2 floats per thread), so Q is not held in registers
// but re-read from shared memory per k-step (QREG = false; QREG = true keeps Q's A fragments in
// registers, affordable only with MT = 1). The scores' C fragments become P's A fragments without
// touching shared memory; the softmax works in log2 units with the scale folded into one FMA per
// score (p = 2^(s * scale * log2 e - m)).
//
// K and V tiles of BN keys go through an S-stage ring of shared-memory slots (a slot holds one K
// and one V tile, rows padded by 8 halves so that ldmatrix's eight 16-byte rows hit distinct
// banks), filled by 16-byte `cp.async` copies (zero-filled past the keys / head_dim), read with
// `ldmatrix.x4` (K) and `ldmatrix.x4.trans` (V, so no transposed copy is needed). One barrier per
// tile: after it, tile j has landed and slot (j - 1) % S is free, so the copies of tile j + S - 1
// are issued there and overlap the compute of tiles j .. j + S - 2. A warp skips tiles wholly in
// its causal future and masks only tiles that cross its diagonal.
//
// Shared memory: S * 2 * BN * (D + 8) * 2 bytes of K/V slots, plus BM * (D + 8) * 2 of Q unless
// QREG (then Q is staged in the last slot before the loop).
//
// Registers (ptxas 12.9): d128 255 with no spills on sm_90 (sm_80's ptxas spills 48 bytes), d64
// 235; the launch bounds ask for 2 blocks per SM, which the shared memory allows too.
//
// Other configurations are compiled as extra entry points only when SERVESIM_TC_VARIANTS is
// defined (scripts/gpu/attn_bench.cu times them against the default; see the list at the end).
// On an H200 (scripts/gpu/results/2026-11-27-h200-variants.md) the default gave 287 TFLOP/s at a
// 4k prompt (d128), 236 at 1k over 8k cached; 16 rows per warp with Q in registers
// (w4m1n64s2q) 235 / 169, three stages (w4m2n64s3, one block per SM) 198 / 147, BN 32 (w4m2n32s3)
// 265 / 219, 256-row blocks (w8m2n64s2, one block per SM) 289 / 254 but slower on short prompts.

#define TC_PAD 8
#define TC_LOG2E 1.4426950408889634f
// The default configuration, the one behind the entry points listed in compile.rs.
#define TC_WARPS 4
#define TC_MT 2
#define TC_BN 64
#define TC_STAGES 2
#define TC_THREADS (TC_WARPS * SERVESIM_WARP)
#define TC_BM (TC_WARPS * TC_MT * 16)
// Shared memory of a configuration (QREG 0 or 1) and of the default one.
#define TC_SMEM_BYTES_CFG(D, W, MT, BN, S, QREG)                                                    \
    ((S) * 2 * (BN) * ((D) + TC_PAD) * 2 + ((QREG) ? 0 : (W) * (MT) * 16 * ((D) + TC_PAD) * 2))
#define TC_SMEM_BYTES(D) TC_SMEM_BYTES_CFG(D, TC_WARPS, TC_MT, TC_BN, TC_STAGES, 0)

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

// The same two loads from a shared-window byte address (tc_smem_addr), which saves the generic ->
// shared conversion per call and keeps addresses in 32-bit registers.
__device__ __forceinline__ void tc_ldsm_x4_a(unsigned* r, unsigned a) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a)
                 : "memory");
}

__device__ __forceinline__ void tc_ldsm_x4_trans_a(unsigned* r, unsigned a) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a)
                 : "memory");
}
typedef unsigned TcSAddr;  // a shared-window byte address

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

// Waits until at most N of this thread's committed groups are still in flight.
template <int N>
__device__ __forceinline__ void tc_cp_async_wait() { asm volatile("cp.async.wait_group %0;" :: "n"(N) : "memory"); }
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
typedef const char* TcSAddr;  // the emulator's "shared address": a host pointer, in bytes
inline TcSAddr tc_smem_addr(const void* p) { return (TcSAddr)p; }
inline void tc_ldsm_x4_a(unsigned* r, TcSAddr a) { emu_ldmatrix_x4(r, (const u16*)a, false); }
inline void tc_ldsm_x4_trans_a(unsigned* r, TcSAddr a) { emu_ldmatrix_x4(r, (const u16*)a, true); }
inline void tc_cp_async16(u16* dst, const u16* src, bool valid) { emu_cp_async16(dst, src, valid); }
inline void tc_cp_async_commit() {}
inline void tc_cp_async_wait_all() {}
template <int N>
inline void tc_cp_async_wait() {}
#endif

// Issues the cp.async copies of one BN-key tile of K and of V (rows kb .. kb + BN - 1) into
// `dst` [BN][D + TC_PAD] (K) and dst + BN * (D + TC_PAD) (V): cached rows through the block table,
// new rows from k / v (K and V rows share their offsets, so each row's address is computed once);
// rows past n_keys and chunks past head_dim are zero-filled (so masked keys contribute 0, not
// NaN · 0). `kc`, `vc`, `kf`, `vf` already point at this thread's 16-byte chunk of the KV head,
// kf / vf at row `ctx` of the fresh keys / values minus ctx rows (fresh row j at kf + j * kv_stride).
template <int D, int BN, int THREADS>
__device__ __forceinline__ void tc_load_kv_tile(
    u16* dst, const u16* kc, const u16* vc, const u16* kf, const u16* vf, const int* table,
    int kb, int n_keys, int ctx, int block_size, long long cache_row, long long kv_stride,
    bool cvalid, int tid) {
    constexpr int DC = D / 8;                   // 16-byte chunks per row
    constexpr int RPP = THREADS / DC;           // rows per pass
    constexpr int ITERS = BN / RPP;             // passes
    static_assert(THREADS % DC == 0 && BN % RPP == 0, "tile must split evenly");
    const int c = tid % DC;
    const int r0 = tid / DC;
#pragma unroll 1
    for (int it = 0; it < ITERS; ++it) {
        const int r = r0 + it * RPP;
        const int j = kb + r;
        const bool valid = j < n_keys && cvalid;
        const u16* ks = kc;  // any valid address when nothing is read
        const u16* vs = vc;
        if (valid) {
            if (j < ctx) {
                const long long off = ((long long)table[j / block_size] * block_size + j % block_size) * cache_row;
                ks = kc + off;
                vs = vc + off;
            } else {
                const long long off = (long long)j * kv_stride;
                ks = kf + off;
                vs = vf + off;
            }
        }
        u16* d = dst + r * (D + TC_PAD) + c * 8;
        tc_cp_async16(d, ks, valid);
        tc_cp_async16(d + BN * (D + TC_PAD), vs, valid);
    }
}

template <typename T, int D, int W, int MT, int BN, int S, bool QREG>
__device__ __forceinline__ void attention_prefill_tc_impl(
    u16* __restrict__ out, const u16* __restrict__ q, const u16* __restrict__ k,
    const u16* __restrict__ v, const u16* __restrict__ k_cache, const u16* __restrict__ v_cache,
    const int* __restrict__ block_tables, const int* __restrict__ context_lens,
    const int* __restrict__ cu_seqlens_q, float scale, int num_heads, int num_kv_heads,
    int head_dim, int q_stride, int kv_stride, int block_size, int max_blocks_per_seq) {
    constexpr int THREADS = W * SERVESIM_WARP;
    constexpr int BM = W * MT * 16;
    constexpr int KS = D + TC_PAD;  // K / V / Q tile row stride (u16)
    constexpr int DC = D / 8;       // 16-byte chunks per row
    constexpr int KD = D / 16;      // k-steps of Q·Kᵀ
    constexpr int ND = D / 8;       // n-tiles of P·V (output dims)
    constexpr int NB = BN / 8;      // n-tiles of Q·Kᵀ (keys)
    constexpr int KB = BN / 16;     // k-steps of P·V
    constexpr int SLOT = 2 * BN * KS;  // one K tile + one V tile (u16)
    static_assert(S >= 2, "at least double buffering");
    static_assert(!QREG || BM <= 2 * BN, "QREG stages Q in one slot");
    static_assert(BM * DC % THREADS == 0, "Q tile must split evenly");

    // Heaviest first across heads: linear block index -> (tile from the last, head).
    const int lin = blockIdx.x + gridDim.x * blockIdx.y;
    const int tile = gridDim.x - 1 - lin / gridDim.y;
    const int h = lin % gridDim.y;
    const int seq = blockIdx.z;
    const int q_start = cu_seqlens_q[seq];
    const int q_len = cu_seqlens_q[seq + 1] - q_start;
    const int row0 = tile * BM;
    if (row0 >= q_len) {
        return;
    }
    const int ctx = context_lens[seq];
    const int kvh = h / (num_heads / num_kv_heads);
    const int rows_here = min(BM, q_len - row0);
    const int n_keys = ctx + row0 + rows_here;  // keys visible to the block's last row
    const int ntiles = (n_keys + BN - 1) / BN;
    const int hd = head_dim;
    const int hc = head_dim / 8;  // 16-byte chunks actually present

    extern __shared__ __align__(16) float tc_smem[];
    u16* ring = (u16*)tc_smem;                      // S slots of [K tile | V tile]
    u16* Qs = QREG ? ring + (S - 1) * SLOT : ring + S * SLOT;  // [BM][KS]

    const int tid = threadIdx.x;
    const int lane = tid % SERVESIM_WARP;
    const int warp = tid / SERVESIM_WARP;
    const int gr = lane >> 2;       // fragment row (groupID)
    const int gc = (lane & 3) * 2;  // fragment column pair (2 * threadID_in_group)
    const long long cache_row = (long long)num_kv_heads * hd;
    const int* table = block_tables + (long long)seq * max_blocks_per_seq;
    // This thread's chunk of the KV head in the cache and in the fresh keys / values.
    const bool cvalid = tid % DC < hc;
    const long long chunk_off = (long long)kvh * hd + (tid % DC) * 8;
    const u16* kc = k_cache + chunk_off;
    const u16* vc = v_cache + chunk_off;
    const u16* kf = k + chunk_off + (long long)(q_start - ctx) * kv_stride;
    const u16* vf = v + chunk_off + (long long)(q_start - ctx) * kv_stride;

    // Prologue: Q and tiles 0 .. S - 2, one group per tile (Q rides with tile 0); the loop
    // commits exactly one group per iteration so that wait<S - 2> always means "tile j landed".
    {
        const int c = tid % DC;
#pragma unroll
        for (int it = 0; it < BM * DC / THREADS; ++it) {
            const int r = tid / DC + it * (THREADS / DC);
            const bool valid = r < rows_here && c < hc;
            const u16* src = valid ? q + (long long)(q_start + row0 + r) * q_stride + (long long)h * hd + c * 8 : q;
            tc_cp_async16(Qs + r * KS + c * 8, src, valid);
        }
    }
#pragma unroll
    for (int st = 0; st < S - 1; ++st) {
        if (st < ntiles) {
            tc_load_kv_tile<D, BN, THREADS>(ring + st * SLOT, kc, vc, kf, vf, table, st * BN,
                                            n_keys, ctx, block_size, cache_row, kv_stride, cvalid,
                                            tid);
        }
        tc_cp_async_commit();
    }

    const int wrow = warp * MT * 16;  // the warp's first row within the tile
    // ldmatrix address roles: lane supplies row (lane % 8) of matrix (lane / 8).
    const int lm = lane >> 3;
    const int lr = lane & 7;
    // A fragment of rows r..r+15, columns kd*16..+15: matrices (rows +0/+8) x (cols +0/+8) in the
    // order a0 (r+0, c+0), a1 (r+8, c+0), a2 (r+0, c+8), a3 (r+8, c+8).
    const TcSAddr qaddr = tc_smem_addr(Qs + (wrow + lr + (lm & 1) * 8) * KS + (lm >> 1) * 8);
    unsigned qf[QREG ? MT : 1][QREG ? KD : 1][4];
    if (QREG) {
        tc_cp_async_wait_all();
        __syncthreads();
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
            for (int kd = 0; kd < KD; ++kd) {
                tc_ldsm_x4_a(qf[QREG ? mt : 0][QREG ? kd : 0], qaddr + (mt * 16 * KS + kd * 16) * 2);
            }
        }
        // The slot Q was staged in is refilled only after the loop's first barrier.
    }

    float o[MT][ND][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
        for (int dn = 0; dn < ND; ++dn) {
            o[mt][dn][0] = o[mt][dn][1] = o[mt][dn][2] = o[mt][dn][3] = 0.0f;
        }
    }
    // Running max of the raw scores (rows gr, gr + 8 of each m tile) and this lane's share of
    // the row sums.
    float m[MT][2], l[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
        m[mt][0] = m[mt][1] = SERVESIM_NEG_INF;
        l[mt][0] = l[mt][1] = 0.0f;
    }
    const float sl2 = scale * TC_LOG2E;
    const bool warp_active = wrow < rows_here;
    const int first_pos = ctx + row0 + wrow;  // absolute position of the warp's first row
    const int last_pos = first_pos + MT * 16 - 1;

    // K fragments (B of Q·Kᵀ, "col-major" 16x8 = K rows as stored): matrices (keys nb*8 / nb*8+8)
    // x (dims +0 / +8) in the order b[nb][0], b[nb][1], b[nb+1][0], b[nb+1][1].
    const int koff = ((lm >> 1) * 8 + lr) * KS + (lm & 1) * 8;
    // V fragments (B of P·V: 16 keys x 8 dims) by .trans: matrices (keys +0 / +8) x (dims dn*8 /
    // dn*8+8) in the order b[dn][0], b[dn][1], b[dn+1][0], b[dn+1][1].
    const int voff = BN * KS + ((lm & 1) * 8 + lr) * KS + (lm >> 1) * 8;

    const TcSAddr ring_addr = tc_smem_addr(ring);
    for (int j = 0; j < ntiles; ++j) {
        const int kb = j * BN;
        // Tile j has landed (this thread's copies), and after the barrier everyone's have, and
        // every warp is done with tile j - 1: refill its slot with tile j + S - 1.
        tc_cp_async_wait<S - 2>();
        __syncthreads();
        if (j + S - 1 < ntiles) {
            tc_load_kv_tile<D, BN, THREADS>(ring + ((j + S - 1) % S) * SLOT, kc, vc, kf, vf, table,
                                            (j + S - 1) * BN, n_keys, ctx, block_size, cache_row,
                                            kv_stride, cvalid, tid);
        }
        tc_cp_async_commit();
        if (!warp_active || kb > last_pos) {  // warp-uniform: nothing of this tile is visible
            continue;
        }
        const TcSAddr slot = ring_addr + (j % S) * SLOT * 2;

        // S = Q·Kᵀ (MT * 16 rows x BN keys per warp)
        float s[MT][NB][4];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
            for (int nb = 0; nb < NB; ++nb) {
                s[mt][nb][0] = s[mt][nb][1] = s[mt][nb][2] = s[mt][nb][3] = 0.0f;
            }
        }
#pragma unroll
        for (int kd = 0; kd < KD; ++kd) {
            unsigned qa[MT][4];
            if (!QREG) {
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) {
                    tc_ldsm_x4_a(qa[mt], qaddr + (mt * 16 * KS + kd * 16) * 2);
                }
            }
#pragma unroll
            for (int nb = 0; nb < NB; nb += 2) {
                unsigned b[4];
                tc_ldsm_x4_a(b, slot + (koff + nb * 8 * KS + kd * 16) * 2);
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) {
                    const unsigned* a = QREG ? qf[QREG ? mt : 0][QREG ? kd : 0] : qa[mt];
                    tc_mma_16816<T>(s[mt][nb], a, b);
                    tc_mma_16816<T>(s[mt][nb + 1], a, b + 2);
                }
            }
        }

        // Causal mask (only on tiles crossing the warp's diagonal), online softmax per row.
        const bool need_mask = kb + BN - 1 > first_pos;
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
            const int pos0 = first_pos + mt * 16 + gr;
            const int pos1 = pos0 + 8;
            float mx0 = m[mt][0], mx1 = m[mt][1];
#pragma unroll
            for (int nb = 0; nb < NB; ++nb) {
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    if (need_mask) {
                        const int key = kb + nb * 8 + gc + e;
                        s[mt][nb][e] = key > pos0 ? SERVESIM_NEG_INF : s[mt][nb][e];
                        s[mt][nb][2 + e] = key > pos1 ? SERVESIM_NEG_INF : s[mt][nb][2 + e];
                    }
                    mx0 = fmaxf(mx0, s[mt][nb][e]);
                    mx1 = fmaxf(mx1, s[mt][nb][2 + e]);
                }
            }
            mx0 = fmaxf(mx0, __shfl_xor_sync(SERVESIM_FULL_MASK, mx0, 1));
            mx0 = fmaxf(mx0, __shfl_xor_sync(SERVESIM_FULL_MASK, mx0, 2));
            mx1 = fmaxf(mx1, __shfl_xor_sync(SERVESIM_FULL_MASK, mx1, 1));
            mx1 = fmaxf(mx1, __shfl_xor_sync(SERVESIM_FULL_MASK, mx1, 2));
            // In log2 units; a row with nothing visible yet keeps p = 0 instead of inf - inf.
            const float ms0 = mx0 == SERVESIM_NEG_INF ? 0.0f : mx0 * sl2;
            const float ms1 = mx1 == SERVESIM_NEG_INF ? 0.0f : mx1 * sl2;
            const float alpha0 = tc_exp2(m[mt][0] * sl2 - ms0);
            const float alpha1 = tc_exp2(m[mt][1] * sl2 - ms1);
            m[mt][0] = mx0;
            m[mt][1] = mx1;
            float rs0 = 0.0f, rs1 = 0.0f;
#pragma unroll
            for (int nb = 0; nb < NB; ++nb) {
                s[mt][nb][0] = tc_exp2(fmaf(s[mt][nb][0], sl2, -ms0));
                s[mt][nb][1] = tc_exp2(fmaf(s[mt][nb][1], sl2, -ms0));
                s[mt][nb][2] = tc_exp2(fmaf(s[mt][nb][2], sl2, -ms1));
                s[mt][nb][3] = tc_exp2(fmaf(s[mt][nb][3], sl2, -ms1));
                rs0 += s[mt][nb][0] + s[mt][nb][1];
                rs1 += s[mt][nb][2] + s[mt][nb][3];
            }
            l[mt][0] = l[mt][0] * alpha0 + rs0;
            l[mt][1] = l[mt][1] * alpha1 + rs1;
#pragma unroll
            for (int dn = 0; dn < ND; ++dn) {
                o[mt][dn][0] *= alpha0;
                o[mt][dn][1] *= alpha0;
                o[mt][dn][2] *= alpha1;
                o[mt][dn][3] *= alpha1;
            }
        }

        // O += P·V, P's A fragments packed straight from the probabilities.
#pragma unroll
        for (int kb2 = 0; kb2 < KB; ++kb2) {
            unsigned pf[MT][4];
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) {
                pf[mt][0] = tc_pack2<T>(s[mt][2 * kb2][0], s[mt][2 * kb2][1]);
                pf[mt][1] = tc_pack2<T>(s[mt][2 * kb2][2], s[mt][2 * kb2][3]);
                pf[mt][2] = tc_pack2<T>(s[mt][2 * kb2 + 1][0], s[mt][2 * kb2 + 1][1]);
                pf[mt][3] = tc_pack2<T>(s[mt][2 * kb2 + 1][2], s[mt][2 * kb2 + 1][3]);
            }
#pragma unroll
            for (int dn = 0; dn < ND; dn += 2) {
                unsigned b[4];
                tc_ldsm_x4_trans_a(b, slot + (voff + kb2 * 16 * KS + dn * 8) * 2);
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) {
                    tc_mma_16816<T>(o[mt][dn], pf[mt], b);
                    tc_mma_16816<T>(o[mt][dn + 1], pf[mt], b + 2);
                }
            }
        }
    }
    tc_cp_async_wait_all();  // no copy may outlive the block (the last groups are empty)

    if (!warp_active) {
        return;
    }
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
        float l0 = l[mt][0], l1 = l[mt][1];
        l0 += __shfl_xor_sync(SERVESIM_FULL_MASK, l0, 1);
        l0 += __shfl_xor_sync(SERVESIM_FULL_MASK, l0, 2);
        l1 += __shfl_xor_sync(SERVESIM_FULL_MASK, l1, 1);
        l1 += __shfl_xor_sync(SERVESIM_FULL_MASK, l1, 2);
        const float inv0 = l0 > 0.0f ? 1.0f / l0 : 0.0f;
        const float inv1 = l1 > 0.0f ? 1.0f / l1 : 0.0f;
        const int r0 = wrow + mt * 16 + gr;
        const int r1 = r0 + 8;
        u16* o0 = out + ((long long)(q_start + row0 + r0) * num_heads + h) * hd;
        u16* o1 = out + ((long long)(q_start + row0 + r1) * num_heads + h) * hd;
#pragma unroll
        for (int dn = 0; dn < ND; ++dn) {
            const int col = dn * 8 + gc;
            if (col < hd) {
                if (r0 < rows_here) {
                    *(unsigned*)(o0 + col) = tc_pack2<T>(o[mt][dn][0] * inv0, o[mt][dn][1] * inv0);
                }
                if (r1 < rows_here) {
                    *(unsigned*)(o1 + col) = tc_pack2<T>(o[mt][dn][2] * inv1, o[mt][dn][3] * inv1);
                }
            }
        }
    }
}

// MIN_BLOCKS: blocks per SM the register budget is sized for (ptxas caps registers at
// 65536 / (W * 32 * MIN_BLOCKS), at most 255).
#define SERVESIM_PREFILL_TC_ENTRY(NAME, TYPE, D, W, MT, BN, S, QREG, MIN_BLOCKS)                   \
    extern "C" __global__ void __launch_bounds__((W) * SERVESIM_WARP, MIN_BLOCKS) NAME(            \
        u16* out, const u16* q, const u16* k, const u16* v, const u16* k_cache,                    \
        const u16* v_cache, const int* block_tables, const int* context_lens,                      \
        const int* cu_seqlens_q, float scale, int num_heads, int num_kv_heads, int head_dim,       \
        int q_stride, int kv_stride, int block_size, int max_blocks_per_seq) {                     \
        attention_prefill_tc_impl<TYPE, D, W, MT, BN, S, QREG>(                                    \
            out, q, k, v, k_cache, v_cache, block_tables, context_lens, cu_seqlens_q, scale,       \
            num_heads, num_kv_heads, head_dim, q_stride, kv_stride, block_size,                    \
            max_blocks_per_seq);                                                                   \
    }

// The default entry points (compile.rs lists these): W 4, MT 2, BN 64, S 2, Q in shared memory.
SERVESIM_PREFILL_TC_ENTRY(attention_prefill_tc_bf16_d64, Bf16, 64, TC_WARPS, TC_MT, TC_BN, TC_STAGES, false, 2)
SERVESIM_PREFILL_TC_ENTRY(attention_prefill_tc_bf16_d128, Bf16, 128, TC_WARPS, TC_MT, TC_BN, TC_STAGES, false, 2)
SERVESIM_PREFILL_TC_ENTRY(attention_prefill_tc_f16_d64, F16, 64, TC_WARPS, TC_MT, TC_BN, TC_STAGES, false, 2)
SERVESIM_PREFILL_TC_ENTRY(attention_prefill_tc_f16_d128, F16, 128, TC_WARPS, TC_MT, TC_BN, TC_STAGES, false, 2)

#ifdef SERVESIM_TC_VARIANTS
// Alternatives the GPU bench times against the default (bf16 only), named
// attention_prefill_tc_bf16_d<D>_w<W>m<MT>n<BN>s<S>[q] (q: Q held in registers). The X-macro
// SERVESIM_TC_VARIANT_LIST(X) lets the bench build its table from the same list:
// X(D, W, MT, BN, S, QREG, MIN_BLOCKS, NAME).
#define SERVESIM_TC_VARIANT_LIST(X)                                                                \
    X(128, 4, 1, 64, 2, 1, 2, attention_prefill_tc_bf16_d128_w4m1n64s2q)                          \
    X(128, 4, 2, 64, 3, 0, 1, attention_prefill_tc_bf16_d128_w4m2n64s3)                           \
    X(128, 4, 2, 32, 3, 0, 2, attention_prefill_tc_bf16_d128_w4m2n32s3)                           \
    X(128, 8, 1, 64, 2, 1, 2, attention_prefill_tc_bf16_d128_w8m1n64s2q)                          \
    X(128, 8, 2, 64, 2, 0, 1, attention_prefill_tc_bf16_d128_w8m2n64s2)                           \
    X(64, 4, 1, 64, 2, 1, 3, attention_prefill_tc_bf16_d64_w4m1n64s2q)                            \
    X(64, 4, 2, 64, 3, 0, 2, attention_prefill_tc_bf16_d64_w4m2n64s3)                             \
    X(64, 8, 2, 64, 2, 0, 1, attention_prefill_tc_bf16_d64_w8m2n64s2)
#define SERVESIM_TC_VARIANT_DEF(D, W, MT, BN, S, QREG, MINB, NAME)                                 \
    SERVESIM_PREFILL_TC_ENTRY(NAME, Bf16, D, W, MT, BN, S, QREG, MINB)
SERVESIM_TC_VARIANT_LIST(SERVESIM_TC_VARIANT_DEF)
#endif
