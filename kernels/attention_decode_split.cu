// Split-KV decode attention (flash-decoding) over a paged KV cache, built for bandwidth: one pass
// over each partition's key and value rows with an online softmax, 16-byte loads, several rows in
// flight per thread, a context split into `partition_size`-token partitions so that even one
// sequence fills the GPU, and every key/value row read once for all the query heads that share it
// (GQA). Same layout and arguments as attention_decode.cu plus `partition_size`:
//
//   out          [num_seqs, num_heads, head_dim] contiguous
//   q            [num_seqs, num_heads, head_dim], sequences `q_stride` elements apart
//   k_cache, v_cache [num_blocks, block_size, num_kv_heads, head_dim] contiguous
//   block_tables [num_seqs, max_blocks_per_seq] int32
//   context_lens [num_seqs] int32, *including* the token being decoded
//   tmp_out      [num_seqs, num_heads, max_partitions, head_dim] fp32 (partial outputs)
//   tmp_max, tmp_sum [num_seqs, num_heads, max_partitions] fp32 (partial softmax statistics; the
//                maxima are in log2 units, so these temporaries pair only with
//                attention_decode_split_reduce_*, not with attention_decode_reduce_*)
//   max_partitions >= ceil(max(context_lens) / partition_size)
//   partition_size 1 ..= DS_MAX_PART (512) tokens; see "Partition size" below.
//
// When max_partitions == 1 the main kernel writes `out` directly (no reduce launch needed).
// Requirements: head_dim a multiple of 8 and at most the entry point's D (256 for the generic
// entry points); q_stride a multiple of 8; 16-byte aligned q and caches; num_heads a multiple of
// num_kv_heads.
//
// Entry points (same arguments):
//   attention_decode_split_{bf16,f16}_d{64,128,256}_g{1,2,4,8}   the fast path: one head-dim
//       bucket D (head_dim <= D) and G query heads per block, both compile-time, so each kernel
//       gets the registers its own shape needs. Pick D = the smallest bucket >= head_dim and
//       G = min(8, the smallest power of two >= num_heads / num_kv_heads).
//       Launch: grid (num_kv_heads * ceil(group / G), num_seqs, ceil(max(context_lens) /
//       partition_size)), block DS_THREADS = 128, no dynamic shared memory (static: 19,984 B
//       at d128 g4 on sm_90, under 48 KiB for every entry, so no opt-in).
//   attention_decode_split_{bf16,f16}   generic (any head_dim <= 256, any group): picks the same
//       code at run time, so it carries the registers of the largest shape (slower). Launch as
//       above with G = DS_MAX_G = 8.
// Launch (reduce, unchanged): grid (num_heads, num_seqs), block DS_RED_THREADS = 256, no dynamic
// shared memory (8 KiB static).
//
// Work split (main, CUDA cores): a lane owns 8 dimensions (one uint4) of a row; D/8 lanes (8, 16
// or 32) cover a row, so a warp reads 4, 2 or 1 rows per load. Each thread takes U rows per step,
// computes their scores per head (dot products reduced over the row's lanes by shuffles), and
// folds them into a per-thread online softmax (running max in log2 units, running sum, 8
// accumulators per head), rescaling once per U rows. Template knobs: W warps, U rows per thread
// per step, S stages. S = 1 (the default entries; U = 8, 8, 4, 2 for G = 1, 2, 4, 8) loads the
// rows' K and V chunks straight into registers (2U 16-byte loads in flight per thread); S >= 2
// streams them through a per-thread cp.async ring in shared memory (S - 1 steps in flight while
// one is computed; each thread reads back only its own copies, so no barrier). On an H200 the
// ring did not beat the register loads across batch sizes (at G = 4, U 4 / S 2 reached 50% / 65%
// of HBM at batch 1 / 8, 32k, but 56% at batch 64 against 64%), so the default stays S = 1; the
// bench keeps timing the ring variants. The partition's block-table slice is staged in shared
// memory first. At the end the row groups of a warp are merged by shuffles and the warps through
// shared memory (log-sum-exp merge), then the block writes `out` or the partition's temporaries.
//
// Why it stays near 60% of HBM for G = 4: the shuffles and per-row softmax cost ~130 instructions
// per warp per KiB of K/V, so the SMs issue-bound before the memory is saturated (G = 1, a quarter
// of the math per byte, reaches 80-89%). The tensor-core variants further down
// (attention_decode_split_*_tc_*, compiled under SERVESIM_DS_VARIANTS until a GPU run picks them)
// put the G heads on the M rows of mma.sync and cut that to a few instructions per row.
//
// Partition size (host): DS_MAX_PART bounds it. scripts/gpu/attn_bench.cu picks the largest power
// of two in [64, 512] whose grid still fills 80% of one wave (resident blocks per SM from the
// occupancy API x SMs); fewer, longer partitions are cheaper per token, but a grid short of a
// wave leaves bandwidth idle.

#define DS_THREADS 128
#define DS_WARPS (DS_THREADS / SERVESIM_WARP)
#define DS_MAX_G 8
#define DS_MAX_WARPS 8
// The default pipeline (see the header): S = 1, loads straight into registers, U rows per thread
// per step by G (more heads, more registers per row); the generic entry's U and S.
#define DS_STAGES 1
#define DS_U_FOR(G) ((G) <= 2 ? 8 : (G) == 4 ? 4 : 2)
#define DS_U 2
#define DS_MAX_PART 512
#define DS_RED_THREADS 256
#define DS_LOG2E 1.4426950408889634f

template <typename T>
__device__ __forceinline__ void ds_unpack8(const uint4& v, float* f) {
    f[0] = T::load((u16)(v.x & 0xffffu));
    f[1] = T::load((u16)(v.x >> 16));
    f[2] = T::load((u16)(v.y & 0xffffu));
    f[3] = T::load((u16)(v.y >> 16));
    f[4] = T::load((u16)(v.z & 0xffffu));
    f[5] = T::load((u16)(v.z >> 16));
    f[6] = T::load((u16)(v.w & 0xffffu));
    f[7] = T::load((u16)(v.w >> 16));
}

#ifndef SERVESIM_EMULATION
__device__ __forceinline__ float ds_exp2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}
#else
inline float ds_exp2(float x) { return exp2f(x); }
#endif

// Shared memory of one block: the partition's block-table slice, then per-warp softmax states.
struct DsShared {
    int table[DS_MAX_PART + 1];
    float m[DS_MAX_WARPS][DS_MAX_G];
    float l[DS_MAX_WARPS][DS_MAX_G];
    float tm[DS_MAX_WARPS][16];  // the tensor-core path's per-warp statistics (16 mma rows)
    float tl[DS_MAX_WARPS][16];
};

// Per-thread cp.async copies (16 bytes; src-size 0 writes zeros) and their groups. The emulator
// (kernels/emulation) supplies host versions.
#ifndef SERVESIM_EMULATION
__device__ __forceinline__ void ds_cp_async16(void* dst, const void* src, bool valid) {
    unsigned d;
    asm("{ .reg .u64 a; cvta.to.shared.u64 a, %1; cvt.u32.u64 %0, a; }" : "=r"(d) : "l"(dst));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(d), "l"(src),
                 "r"(valid ? 16 : 0)
                 : "memory");
}
__device__ __forceinline__ void ds_cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void ds_cp_async_wait() { asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory"); }
#else
inline void ds_cp_async16(void* dst, const void* src, bool valid) { emu_cp_async16(dst, src, valid); }
inline void ds_cp_async_commit() {}
template <int N>
inline void ds_cp_async_wait() {}
#endif

// Shared memory of the ring of one block: S stages x U rows x (K, V) x THREADS 16-byte chunks,
// laid out so that a warp's 32 chunks of one (stage, row, K or V) are contiguous (no bank
// conflicts). After the loop the same bytes hold the warps' partial outputs (W * G * D floats).
#define DS_RING_BYTES(W, U, S) ((S) * (U) * 2 * (W) * SERVESIM_WARP * 16)
#define DS_RED_BYTES(W, G, D) ((W) * (G) * (D) * 4)
#define DS_BUF_BYTES(W, G, D, U, S)                                                                \
    (DS_RING_BYTES(W, U, S) > DS_RED_BYTES(W, G, D) ? DS_RING_BYTES(W, U, S) : DS_RED_BYTES(W, G, D))

// D: head-dim bucket (64, 128, 256); G: query heads per block (1, 2, 4, 8), ng <= G of them real;
// W warps; U rows per thread per stage; S stages of the cp.async ring (S - 1 in flight while one
// is computed). `buf` holds DS_BUF_BYTES(W, G, D, U, S) bytes.
template <typename T, int D, int G, int W, int U, int S>
__device__ __forceinline__ void attention_decode_split_impl(
    DsShared& sh, uint4* buf, u16* __restrict__ out, const u16* __restrict__ q,
    const u16* __restrict__ k_cache, const u16* __restrict__ v_cache,
    const int* __restrict__ block_tables, const int* __restrict__ context_lens,
    float* __restrict__ tmp_out, float* __restrict__ tmp_max, float* __restrict__ tmp_sum,
    float scale, int num_heads, int num_kv_heads, int head_dim, int q_stride, int block_size,
    int max_blocks_per_seq, int max_partitions, int partition_size) {
    constexpr int THREADS = W * SERVESIM_WARP;
    constexpr int LPT = D / 8;                 // lanes per row
    constexpr int TPW = SERVESIM_WARP / LPT;   // rows per warp per load
    constexpr int SLOTS = W * TPW;             // rows per block per load
    constexpr int RPS = SLOTS * U;             // rows per block per stage
    static_assert(W <= DS_MAX_WARPS && S >= 1, "DsShared holds DS_MAX_WARPS warps");

    const int group = num_heads / num_kv_heads;
    const int head_groups = (group + G - 1) / G;
    const int kvh = blockIdx.x / head_groups;
    const int hg = blockIdx.x % head_groups;
    const int h0 = kvh * group + hg * G;
    const int ng = min(G, group - hg * G);
    const int seq = blockIdx.y;
    const int part = blockIdx.z;
    const int hd = head_dim;
    const int tid = threadIdx.x;
    const int lane = tid % SERVESIM_WARP;
    const int warp = tid / SERVESIM_WARP;
    const bool direct = max_partitions == 1;

    const int ctx = context_lens[seq];
    const int start = part * partition_size;
    if (start >= ctx) {
        if (direct) {  // empty sequence: defined output (zeros)
            for (int i = tid; i < ng * hd; i += THREADS) {
                out[((long long)seq * num_heads + h0 + i / hd) * hd + i % hd] = T::store(0.0f);
            }
        }
        return;
    }
    const int n = min(partition_size, ctx - start);
    const int steps = (n + RPS - 1) / RPS;
    const int c = lane % LPT;  // this lane's 8-dim chunk
    const int slot = warp * TPW + lane / LPT;
    const bool cvalid = c * 8 < hd;
    const long long cache_row = (long long)num_kv_heads * hd;
    const long long head_off = (long long)kvh * hd + c * 8;
    const u16* kbase = k_cache + head_off;
    const u16* vbase = v_cache + head_off;

    // The partition's slice of the block table.
    const int b0 = start / block_size;
    const int nblk = (start + n - 1) / block_size - b0 + 1;
    const int* table = block_tables + (long long)seq * max_blocks_per_seq + b0;
    for (int i = tid; i < nblk; i += THREADS) {
        sh.table[i] = table[i];
    }
    __syncthreads();  // table slice staged

    // ring[stage][u][K or V][thread]; each thread reads back only its own copies, so the
    // pipeline needs no barrier: cp.async.wait_group makes them visible to the thread.
    const int off0 = start - b0 * block_size;  // offset of token 0 within the slice's blocks
    auto issue = [&](int step) {
        uint4* st = buf + (step % S) * U * 2 * THREADS + tid;
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const int t = step * RPS + u * SLOTS + slot;
            const bool valid = t < n && cvalid;
            long long off = 0;
            if (valid) {
                const int p = off0 + t;
                off = ((long long)sh.table[p / block_size] * block_size + p % block_size) * cache_row;
            }
            ds_cp_async16(st + (2 * u) * THREADS, kbase + off, valid);
            ds_cp_async16(st + (2 * u + 1) * THREADS, vbase + off, valid);
        }
    };
#pragma unroll
    for (int i = 0; i < S - 1; ++i) {  // none for S = 1
        if (i < steps) {
            issue(i);
        }
        ds_cp_async_commit();
    }

    // Query chunks in registers, pre-scaled to log2 units (loaded while the first copies fly).
    float qv[G][8];
    const float sl2 = scale * DS_LOG2E;
#pragma unroll
    for (int g = 0; g < G; ++g) {
        uint4 raw = make_uint4(0u, 0u, 0u, 0u);
        if (g < ng && cvalid) {
            raw = *(const uint4*)(q + (long long)seq * q_stride + (long long)(h0 + g) * hd + c * 8);
        }
        ds_unpack8<T>(raw, qv[g]);
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            qv[g][i] *= sl2;
        }
    }
    float m[G], l[G], acc[G][8];
#pragma unroll
    for (int g = 0; g < G; ++g) {
        m[g] = SERVESIM_NEG_INF;
        l[g] = 0.0f;
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            acc[g][i] = 0.0f;
        }
    }

    for (int step = 0; step < steps; ++step) {
        const int t0 = step * RPS;
        uint4 kr[U], vr[U];
        if (S == 1) {
            // No ring: the U rows' K and V chunks go straight to registers (2U loads in flight).
#pragma unroll
            for (int u = 0; u < U; ++u) {
                const int t = t0 + u * SLOTS + slot;
                kr[u] = make_uint4(0u, 0u, 0u, 0u);
                vr[u] = make_uint4(0u, 0u, 0u, 0u);
                if (t < n && cvalid) {
                    const int p = off0 + t;
                    const long long off =
                        ((long long)sh.table[p / block_size] * block_size + p % block_size) * cache_row;
                    kr[u] = *(const uint4*)(kbase + off);
                    vr[u] = *(const uint4*)(vbase + off);
                }
            }
        } else {
            // Refill the stage computed in the previous step (read by this thread only, and its
            // reads have been consumed), then wait for this step's stage.
            if (step + S - 1 < steps) {
                issue(step + S - 1);
            }
            ds_cp_async_commit();
            ds_cp_async_wait<(S > 1 ? S - 1 : 0)>();
            const uint4* st = buf + (step % S) * U * 2 * THREADS + tid;
#pragma unroll
            for (int u = 0; u < U; ++u) {
                kr[u] = st[(2 * u) * THREADS];
                vr[u] = st[(2 * u + 1) * THREADS];
            }
        }
        // Scores of the U rows for every head; rows past the partition get -inf.
        float s[G][U];
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const bool live = t0 + u * SLOTS + slot < n;
            float kf[8];
            ds_unpack8<T>(kr[u], kf);
#pragma unroll
            for (int g = 0; g < G; ++g) {
                float dot = 0.0f;
#pragma unroll
                for (int i = 0; i < 8; ++i) {
                    dot += kf[i] * qv[g][i];
                }
#pragma unroll
                for (int o = LPT / 2; o > 0; o >>= 1) {
                    dot += __shfl_xor_sync(SERVESIM_FULL_MASK, dot, o);
                }
                s[g][u] = live ? dot : SERVESIM_NEG_INF;
            }
        }
        // Online softmax: one rescale per U rows.
#pragma unroll
        for (int g = 0; g < G; ++g) {
            float mx = m[g];
#pragma unroll
            for (int u = 0; u < U; ++u) {
                mx = fmaxf(mx, s[g][u]);
            }
            const float ms = mx == SERVESIM_NEG_INF ? 0.0f : mx;  // nothing seen yet: p = 0
            const float alpha = ds_exp2(m[g] - ms);
            m[g] = mx;
            float sum = 0.0f;
#pragma unroll
            for (int u = 0; u < U; ++u) {
                s[g][u] = ds_exp2(s[g][u] - ms);
                sum += s[g][u];
            }
            l[g] = l[g] * alpha + sum;
#pragma unroll
            for (int i = 0; i < 8; ++i) {
                acc[g][i] *= alpha;
            }
        }
#pragma unroll
        for (int u = 0; u < U; ++u) {
            float vf[8];
            ds_unpack8<T>(vr[u], vf);
#pragma unroll
            for (int g = 0; g < G; ++g) {
#pragma unroll
                for (int i = 0; i < 8; ++i) {
                    acc[g][i] += s[g][u] * vf[i];
                }
            }
        }
    }
    ds_cp_async_wait<0>();  // the trailing groups are empty; none may outlive the block

    // Merge the warp's row groups (lanes LPT, 2 LPT, ... apart hold the same dims).
#pragma unroll
    for (int o = LPT; o < SERVESIM_WARP; o <<= 1) {
#pragma unroll
        for (int g = 0; g < G; ++g) {
            const float mo = __shfl_xor_sync(SERVESIM_FULL_MASK, m[g], o);
            const float lo = __shfl_xor_sync(SERVESIM_FULL_MASK, l[g], o);
            const float mx = fmaxf(m[g], mo);
            const float ms = mx == SERVESIM_NEG_INF ? 0.0f : mx;
            const float a = ds_exp2(m[g] - ms);
            const float b = ds_exp2(mo - ms);
            m[g] = mx;
            l[g] = l[g] * a + lo * b;
#pragma unroll
            for (int i = 0; i < 8; ++i) {
                const float x = __shfl_xor_sync(SERVESIM_FULL_MASK, acc[g][i], o);
                acc[g][i] = acc[g][i] * a + x * b;
            }
        }
    }
    // Then the warps, through shared memory: red[warp][g][d], over the ring once every thread is
    // done reading it.
    float* red = (float*)buf;
    __syncthreads();
    if (lane < LPT) {
#pragma unroll
        for (int g = 0; g < G; ++g) {
            float4* r = (float4*)(red + (warp * G + g) * D + c * 8);
            r[0] = make_float4(acc[g][0], acc[g][1], acc[g][2], acc[g][3]);
            r[1] = make_float4(acc[g][4], acc[g][5], acc[g][6], acc[g][7]);
            if (lane == 0) {
                sh.m[warp][g] = m[g];
                sh.l[warp][g] = l[g];
            }
        }
    }
    __syncthreads();
    for (int i = tid; i < ng * hd; i += THREADS) {
        const int g = i / hd;
        const int d = i - g * hd;
        float mx = SERVESIM_NEG_INF;
#pragma unroll
        for (int w = 0; w < W; ++w) {
            mx = fmaxf(mx, sh.m[w][g]);
        }
        float o = 0.0f, sum = 0.0f;
#pragma unroll
        for (int w = 0; w < W; ++w) {
            const float a = sh.m[w][g] == SERVESIM_NEG_INF ? 0.0f : ds_exp2(sh.m[w][g] - mx);
            o += a * red[(w * G + g) * D + d];
            sum += a * sh.l[w][g];
        }
        const float inv = 1.0f / sum;  // n >= 1: some warp saw a row
        const long long head = (long long)seq * num_heads + h0 + g;
        if (direct) {
            out[head * hd + d] = T::store(o * inv);
        } else {
            tmp_out[(head * max_partitions + part) * hd + d] = o * inv;
            if (d == 0) {
                tmp_max[head * max_partitions + part] = mx;
                tmp_sum[head * max_partitions + part] = sum;
            }
        }
    }
}

#define DS_ARGS                                                                                    \
    out, q, k_cache, v_cache, block_tables, context_lens, tmp_out, tmp_max, tmp_sum, scale,        \
        num_heads, num_kv_heads, head_dim, q_stride, block_size, max_blocks_per_seq,               \
        max_partitions, partition_size
#define DS_PARAMS                                                                                  \
    u16 *out, const u16 *q, const u16 *k_cache, const u16 *v_cache, const int *block_tables,       \
        const int *context_lens, float *tmp_out, float *tmp_max, float *tmp_sum, float scale,      \
        int num_heads, int num_kv_heads, int head_dim, int q_stride, int block_size,               \
        int max_blocks_per_seq, int max_partitions, int partition_size

// Generic entry: the head-dim bucket chosen at run time, G = DS_MAX_G heads per block (a group
// smaller than 8 leaves slots idle, as the previous version's grid did).
template <typename T>
__device__ __forceinline__ void attention_decode_split_dispatch(DS_PARAMS) {
    __shared__ DsShared sh;
    __shared__ uint4 buf[DS_BUF_BYTES(DS_WARPS, DS_MAX_G, 256, DS_U, DS_STAGES) / 16];
#define DS_CALL(DD)                                                                                \
    attention_decode_split_impl<T, DD, DS_MAX_G, DS_WARPS, DS_U, DS_STAGES>(sh, buf, DS_ARGS)
    if (head_dim <= 64) {
        DS_CALL(64);
    } else if (head_dim <= 128) {
        DS_CALL(128);
    } else {
        DS_CALL(256);
    }
#undef DS_CALL
}

// Merges partition results: out = sum_p w_p o_p / sum_p w_p, w_p = sum_p * 2^(max_p - max).
// A warp takes partitions p = warp, warp + 8, ...; a lane 4 consecutive dimensions (float4) per
// 128 dimensions; the warps' sums meet in shared memory.
template <typename T>
__device__ __forceinline__ void attention_decode_split_reduce_impl(
    u16* __restrict__ out, const float* __restrict__ tmp_out, const float* __restrict__ tmp_max,
    const float* __restrict__ tmp_sum, const int* __restrict__ context_lens, int num_heads,
    int head_dim, int max_partitions, int partition_size) {
    constexpr int NW = DS_RED_THREADS / SERVESIM_WARP;
    __shared__ float scratch[32];
    __shared__ __align__(16) float red[NW][256];
    const int h = blockIdx.x;
    const int seq = blockIdx.y;
    const int tid = threadIdx.x;
    const int lane = tid % SERVESIM_WARP;
    const int warp = tid / SERVESIM_WARP;
    const int D = head_dim;
    const long long head = (long long)seq * num_heads + h;
    const int ctx = context_lens[seq];
    const int np = (ctx + partition_size - 1) / partition_size;
    const float* mx = tmp_max + head * max_partitions;
    const float* sm = tmp_sum + head * max_partitions;

    float gmax = SERVESIM_NEG_INF;
    for (int p = tid; p < np; p += DS_RED_THREADS) {
        gmax = fmaxf(gmax, mx[p]);
    }
    gmax = block_max(gmax, scratch);
    float total = 0.0f;
    for (int p = tid; p < np; p += DS_RED_THREADS) {
        total += sm[p] * exp2f(mx[p] - gmax);
    }
    total = block_sum(total, scratch);
    const float inv_total = total > 0.0f ? 1.0f / total : 0.0f;

    float acc[2][4];
#pragma unroll
    for (int j = 0; j < 2; ++j) {
        acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
    }
    for (int p = warp; p < np; p += NW) {
        const float w = sm[p] * exp2f(mx[p] - gmax);
        const float* row = tmp_out + (head * max_partitions + p) * D;
#pragma unroll
        for (int j = 0; j < 2; ++j) {
            const int d = j * 128 + lane * 4;
            if (d < D) {
                const float4 x = *(const float4*)(row + d);
                acc[j][0] += w * x.x;
                acc[j][1] += w * x.y;
                acc[j][2] += w * x.z;
                acc[j][3] += w * x.w;
            }
        }
    }
#pragma unroll
    for (int j = 0; j < 2; ++j) {
        const int d = j * 128 + lane * 4;
        if (d < D) {
            red[warp][d + 0] = acc[j][0];
            red[warp][d + 1] = acc[j][1];
            red[warp][d + 2] = acc[j][2];
            red[warp][d + 3] = acc[j][3];
        }
    }
    __syncthreads();
    for (int d = tid; d < D; d += DS_RED_THREADS) {
        float o = 0.0f;
#pragma unroll
        for (int w = 0; w < NW; ++w) {
            o += red[w][d];
        }
        out[head * D + d] = T::store(o * inv_total);
    }
}

// Entry points the macros below generate (listed so that a search, and compile.rs's test, finds them):
//   attention_decode_split_bf16_d64_g1 attention_decode_split_bf16_d64_g2 attention_decode_split_bf16_d64_g4 attention_decode_split_bf16_d64_g8
//   attention_decode_split_bf16_d128_g1 attention_decode_split_bf16_d128_g2 attention_decode_split_bf16_d128_g4 attention_decode_split_bf16_d128_g8
//   attention_decode_split_bf16_d256_g1 attention_decode_split_bf16_d256_g2 attention_decode_split_bf16_d256_g4 attention_decode_split_bf16_d256_g8
//   attention_decode_split_f16_d64_g1 attention_decode_split_f16_d64_g2 attention_decode_split_f16_d64_g4 attention_decode_split_f16_d64_g8
//   attention_decode_split_f16_d128_g1 attention_decode_split_f16_d128_g2 attention_decode_split_f16_d128_g4 attention_decode_split_f16_d128_g8
//   attention_decode_split_f16_d256_g1 attention_decode_split_f16_d256_g2 attention_decode_split_f16_d256_g4 attention_decode_split_f16_d256_g8
#define SERVESIM_DECODE_SPLIT_ENTRY(NAME, REDUCE_NAME, TYPE)                                       \
    extern "C" __global__ void __launch_bounds__(DS_THREADS) NAME(DS_PARAMS) {                     \
        attention_decode_split_dispatch<TYPE>(DS_ARGS);                                            \
    }                                                                                              \
    extern "C" __global__ void __launch_bounds__(DS_RED_THREADS) REDUCE_NAME(                      \
        u16* out, const float* tmp_out, const float* tmp_max, const float* tmp_sum,                \
        const int* context_lens, int num_heads, int head_dim, int max_partitions,                  \
        int partition_size) {                                                                      \
        attention_decode_split_reduce_impl<TYPE>(out, tmp_out, tmp_max, tmp_sum, context_lens,     \
                                                 num_heads, head_dim, max_partitions,              \
                                                 partition_size);                                  \
    }

SERVESIM_DECODE_SPLIT_ENTRY(attention_decode_split_bf16, attention_decode_split_reduce_bf16, Bf16)
SERVESIM_DECODE_SPLIT_ENTRY(attention_decode_split_f16, attention_decode_split_reduce_f16, F16)

// Specialised entry points: attention_decode_split_<type>_d<D>_g<G>.
// G <= 4 fit 128 registers (4 blocks per SM); G = 8 needs ~210 (2 blocks per SM; capping it at 168
// spills). For groups of 5..8 heads the host may also launch the g4 kernel with two blocks per KV
// head (the second read of each row then mostly hits L2): scripts/gpu/attn_bench.cu times both.
#define SERVESIM_DECODE_SPLIT_SPEC_CFG(NAME, TYPE, D, G, W, U, S, MINB)                            \
    extern "C" __global__ void __launch_bounds__((W) * SERVESIM_WARP, MINB) NAME(DS_PARAMS) {      \
        __shared__ DsShared sh;                                                                    \
        __shared__ uint4 buf[DS_BUF_BYTES(W, G, D, U, S) / 16];                                    \
        attention_decode_split_impl<TYPE, D, G, W, U, S>(sh, buf, DS_ARGS);                        \
    }
#define SERVESIM_DECODE_SPLIT_SPEC(NAME, TYPE, D, G)                                               \
    SERVESIM_DECODE_SPLIT_SPEC_CFG(NAME, TYPE, D, G, DS_WARPS, DS_U_FOR(G), DS_STAGES, (G) == 8 ? 2 : 4)
#define SERVESIM_DECODE_SPLIT_SPEC_G(TNAME, TYPE, D)                                               \
    SERVESIM_DECODE_SPLIT_SPEC(attention_decode_split_##TNAME##_d##D##_g1, TYPE, D, 1)             \
    SERVESIM_DECODE_SPLIT_SPEC(attention_decode_split_##TNAME##_d##D##_g2, TYPE, D, 2)             \
    SERVESIM_DECODE_SPLIT_SPEC(attention_decode_split_##TNAME##_d##D##_g4, TYPE, D, 4)             \
    SERVESIM_DECODE_SPLIT_SPEC(attention_decode_split_##TNAME##_d##D##_g8, TYPE, D, 8)
SERVESIM_DECODE_SPLIT_SPEC_G(bf16, Bf16, 64)
SERVESIM_DECODE_SPLIT_SPEC_G(bf16, Bf16, 128)
SERVESIM_DECODE_SPLIT_SPEC_G(bf16, Bf16, 256)
SERVESIM_DECODE_SPLIT_SPEC_G(f16, F16, 64)
SERVESIM_DECODE_SPLIT_SPEC_G(f16, F16, 128)
SERVESIM_DECODE_SPLIT_SPEC_G(f16, F16, 256)

// ---- tensor-core path (groups of 3..16 query heads per KV head, D 64 or 128).
// The CUDA-core loop above spends ~130 instructions per warp per 1 KiB of K/V at G = 4 (dot
// products reduced over 16 lanes by shuffles, a softmax per row and head), which caps it near 60%
// of HBM bandwidth. Here the G query heads of a KV head are the M rows of `mma.sync.m16n8k16`
// (rows G..15 zero), so 16 keys cost 2 * D / 8 mma's plus a handful of softmax instructions.
// A warp owns every W-th 16-key stage of the partition and streams it through its own S-slot
// cp.async ring in shared memory (warp-private, so only __syncwarp, no block barrier), reads K
// with ldmatrix and V with ldmatrix.trans as the prefill does; the W warps' (max, sum, O) are then
// merged through shared memory like the CUDA-core path's, with the same outputs and temporaries
// (maxima in log2 units). Shared memory: W * S * 2 * 16 * (D + 8) * 2 bytes (34,816 B for W 2,
// S 2, D 128), static; block W * 32 threads.
#ifndef SERVESIM_EMULATION
template <typename T>
__device__ __forceinline__ void dt_mma(float* c, const unsigned* a, const unsigned* b);
template <>
__device__ __forceinline__ void dt_mma<Bf16>(float* c, const unsigned* a, const unsigned* b) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
template <>
__device__ __forceinline__ void dt_mma<F16>(float* c, const unsigned* a, const unsigned* b) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
template <typename T>
__device__ __forceinline__ unsigned dt_pack2(float lo, float hi);
template <>
__device__ __forceinline__ unsigned dt_pack2<Bf16>(float lo, float hi) {
    unsigned r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}
template <>
__device__ __forceinline__ unsigned dt_pack2<F16>(float lo, float hi) {
    unsigned r;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}
__device__ __forceinline__ void dt_ldsm(unsigned* r, const u16* p, bool trans) {
    unsigned a;
    asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(a) : "l"(p));
    if (trans) {
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a) : "memory");
    } else {
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a) : "memory");
    }
}
#else
template <typename T>
inline void dt_mma(float* c, const unsigned* a, const unsigned* b) {
    emu_mma_16816(c, a, b, T::store(1.0f) == 0x3c00);
}
template <typename T>
inline unsigned dt_pack2(float lo, float hi) {
    return (unsigned)T::store(lo) | ((unsigned)T::store(hi) << 16);
}
inline void dt_ldsm(unsigned* r, const u16* p, bool trans) { emu_ldmatrix_x4(r, p, trans); }
#endif

#define DT_KEYS 16  // keys per stage
#define DT_SMEM_BYTES(W, S, D) ((W) * (S) * 2 * DT_KEYS * ((D) + 8) * 2)

template <typename T, int D, int G, int W, int S>
__device__ __forceinline__ void attention_decode_split_tc_impl(
    DsShared& sh, u16* ring_all, u16* __restrict__ out, const u16* __restrict__ q,
    const u16* __restrict__ k_cache, const u16* __restrict__ v_cache,
    const int* __restrict__ block_tables, const int* __restrict__ context_lens,
    float* __restrict__ tmp_out, float* __restrict__ tmp_max, float* __restrict__ tmp_sum,
    float scale, int num_heads, int num_kv_heads, int head_dim, int q_stride, int block_size,
    int max_blocks_per_seq, int max_partitions, int partition_size) {
    constexpr int THREADS = W * SERVESIM_WARP;
    constexpr int KS = D + 8;        // smem row stride (u16): ldmatrix rows hit distinct banks
    constexpr int DC = D / 8;        // 16-byte chunks per row
    constexpr int KD = D / 16;       // k-steps of Q·Kᵀ
    constexpr int ND = D / 8;        // n-tiles of P·V
    constexpr int STAGE = 2 * DT_KEYS * KS;  // one K and one V stage (u16)
    static_assert(G <= 16 && W <= DS_MAX_WARPS && S >= 2, "16 mma rows, DsShared warps");
    static_assert(DS_RED_BYTES(W, 16, D) <= DT_SMEM_BYTES(W, S, D), "merge fits the ring");

    const int group = num_heads / num_kv_heads;
    const int head_groups = (group + G - 1) / G;
    const int kvh = blockIdx.x / head_groups;
    const int hg = blockIdx.x % head_groups;
    const int h0 = kvh * group + hg * G;
    const int ng = min(G, group - hg * G);
    const int seq = blockIdx.y;
    const int part = blockIdx.z;
    const int hd = head_dim;
    const int tid = threadIdx.x;
    const int lane = tid % SERVESIM_WARP;
    const int warp = tid / SERVESIM_WARP;
    const bool direct = max_partitions == 1;

    const int ctx = context_lens[seq];
    const int start = part * partition_size;
    if (start >= ctx) {
        if (direct) {
            for (int i = tid; i < ng * hd; i += THREADS) {
                out[((long long)seq * num_heads + h0 + i / hd) * hd + i % hd] = T::store(0.0f);
            }
        }
        return;
    }
    const int n = min(partition_size, ctx - start);
    const int b0 = start / block_size;
    const int nblk = (start + n - 1) / block_size - b0 + 1;
    const int* table = block_tables + (long long)seq * max_blocks_per_seq + b0;
    for (int i = tid; i < nblk; i += THREADS) {
        sh.table[i] = table[i];
    }
    u16* ring = ring_all + warp * S * STAGE;
    // Q rows (heads h0 .. h0 + ng - 1, zeros below) staged in this warp's last slot.
    {
        u16* qs = ring + (S - 1) * STAGE;
        for (int i = lane; i < 16 * DC; i += SERVESIM_WARP) {
            const int r = i / DC, c = i % DC;
            uint4 val = make_uint4(0u, 0u, 0u, 0u);
            if (r < ng && c * 8 < hd) {
                val = *(const uint4*)(q + (long long)seq * q_stride + (long long)(h0 + r) * hd + c * 8);
            }
            *(uint4*)(qs + r * KS + c * 8) = val;
        }
    }
    __syncthreads();  // table slice staged (and each warp's Q)
    const int lm = lane >> 3, lr = lane & 7;
    unsigned qf[KD][4];
#pragma unroll
    for (int kd = 0; kd < KD; ++kd) {
        dt_ldsm(qf[kd], ring + (S - 1) * STAGE + (lr + (lm & 1) * 8) * KS + (lm >> 1) * 8 + kd * 16, false);
    }
    __syncwarp();  // Q read before its slot is refilled

    const int off0 = start - b0 * block_size;
    const long long cache_row = (long long)num_kv_heads * hd;
    const int c = lane % DC;
    const bool cvalid = c * 8 < hd;
    const u16* kbase = k_cache + (long long)kvh * hd + c * 8;
    const u16* vbase = v_cache + (long long)kvh * hd + c * 8;
    const int nst = (n + DT_KEYS - 1) / DT_KEYS;           // stages of the partition
    const int mine = warp < nst ? (nst - warp + W - 1) / W : 0;  // stages warp, warp + W, ...
    auto issue = [&](int i) {
        const int kb = (warp + i * W) * DT_KEYS;
        u16* st = ring + (i % S) * STAGE;
#pragma unroll
        for (int it = 0; it < DT_KEYS * DC / SERVESIM_WARP; ++it) {
            const int r = lane / DC + it * (SERVESIM_WARP / DC);
            const int t = kb + r;
            const bool valid = t < n && cvalid;
            long long off = 0;
            if (valid) {
                const int p = off0 + t;
                off = ((long long)sh.table[p / block_size] * block_size + p % block_size) * cache_row;
            }
            ds_cp_async16(st + r * KS + c * 8, kbase + off, valid);
            ds_cp_async16(st + (DT_KEYS + r) * KS + c * 8, vbase + off, valid);
        }
    };
#pragma unroll
    for (int i = 0; i < S - 1; ++i) {
        if (i < mine) {
            issue(i);
        }
        ds_cp_async_commit();
    }

    float o[ND][4];
#pragma unroll
    for (int dn = 0; dn < ND; ++dn) {
        o[dn][0] = o[dn][1] = o[dn][2] = o[dn][3] = 0.0f;
    }
    float m0 = SERVESIM_NEG_INF, m1 = SERVESIM_NEG_INF, l0 = 0.0f, l1 = 0.0f;  // raw-score max
    const float sl2 = scale * DS_LOG2E;
    const int gr = lane >> 2, gc = (lane & 3) * 2;
    const int koff = ((lm >> 1) * 8 + lr) * KS + (lm & 1) * 8;
    const int voff = DT_KEYS * KS + ((lm & 1) * 8 + lr) * KS + (lm >> 1) * 8;
    for (int i = 0; i < mine; ++i) {
        __syncwarp();  // every lane is done with slot (i - 1) % S
        if (i + S - 1 < mine) {
            issue(i + S - 1);
        }
        ds_cp_async_commit();
        ds_cp_async_wait<S - 1>();
        __syncwarp();  // the lanes' copies of stage i visible to the whole warp
        const u16* st = ring + (i % S) * STAGE;
        const int kb = (warp + i * W) * DT_KEYS;
        float s[2][4];
#pragma unroll
        for (int nb = 0; nb < 2; ++nb) {
            s[nb][0] = s[nb][1] = s[nb][2] = s[nb][3] = 0.0f;
        }
#pragma unroll
        for (int kd = 0; kd < KD; ++kd) {
            unsigned b[4];
            dt_ldsm(b, st + koff + kd * 16, false);
            dt_mma<T>(s[0], qf[kd], b);
            dt_mma<T>(s[1], qf[kd], b + 2);
        }
        float mx0 = m0, mx1 = m1;
#pragma unroll
        for (int nb = 0; nb < 2; ++nb) {
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                const bool live = kb + nb * 8 + gc + e < n;
                s[nb][e] = live ? s[nb][e] : SERVESIM_NEG_INF;
                s[nb][2 + e] = live ? s[nb][2 + e] : SERVESIM_NEG_INF;
                mx0 = fmaxf(mx0, s[nb][e]);
                mx1 = fmaxf(mx1, s[nb][2 + e]);
            }
        }
        mx0 = fmaxf(mx0, __shfl_xor_sync(SERVESIM_FULL_MASK, mx0, 1));
        mx0 = fmaxf(mx0, __shfl_xor_sync(SERVESIM_FULL_MASK, mx0, 2));
        mx1 = fmaxf(mx1, __shfl_xor_sync(SERVESIM_FULL_MASK, mx1, 1));
        mx1 = fmaxf(mx1, __shfl_xor_sync(SERVESIM_FULL_MASK, mx1, 2));
        const float ms0 = mx0 == SERVESIM_NEG_INF ? 0.0f : mx0 * sl2;
        const float ms1 = mx1 == SERVESIM_NEG_INF ? 0.0f : mx1 * sl2;
        const float a0 = ds_exp2(m0 * sl2 - ms0), a1 = ds_exp2(m1 * sl2 - ms1);
        m0 = mx0;
        m1 = mx1;
        float rs0 = 0.0f, rs1 = 0.0f;
#pragma unroll
        for (int nb = 0; nb < 2; ++nb) {
            s[nb][0] = ds_exp2(fmaf(s[nb][0], sl2, -ms0));
            s[nb][1] = ds_exp2(fmaf(s[nb][1], sl2, -ms0));
            s[nb][2] = ds_exp2(fmaf(s[nb][2], sl2, -ms1));
            s[nb][3] = ds_exp2(fmaf(s[nb][3], sl2, -ms1));
            rs0 += s[nb][0] + s[nb][1];
            rs1 += s[nb][2] + s[nb][3];
        }
        l0 = l0 * a0 + rs0;
        l1 = l1 * a1 + rs1;
        unsigned pf[4];
        pf[0] = dt_pack2<T>(s[0][0], s[0][1]);
        pf[1] = dt_pack2<T>(s[0][2], s[0][3]);
        pf[2] = dt_pack2<T>(s[1][0], s[1][1]);
        pf[3] = dt_pack2<T>(s[1][2], s[1][3]);
#pragma unroll
        for (int dn = 0; dn < ND; dn += 2) {
            o[dn][0] *= a0;
            o[dn][1] *= a0;
            o[dn][2] *= a1;
            o[dn][3] *= a1;
            o[dn + 1][0] *= a0;
            o[dn + 1][1] *= a0;
            o[dn + 1][2] *= a1;
            o[dn + 1][3] *= a1;
            unsigned b[4];
            dt_ldsm(b, st + voff + dn * 8, true);
            dt_mma<T>(o[dn], pf, b);
            dt_mma<T>(o[dn + 1], pf, b + 2);
        }
    }
    ds_cp_async_wait<0>();
    l0 += __shfl_xor_sync(SERVESIM_FULL_MASK, l0, 1);
    l0 += __shfl_xor_sync(SERVESIM_FULL_MASK, l0, 2);
    l1 += __shfl_xor_sync(SERVESIM_FULL_MASK, l1, 1);
    l1 += __shfl_xor_sync(SERVESIM_FULL_MASK, l1, 2);

    // Merge the warps: red[warp][row][d] (rows < ng; the rows gr + 8 are padding unless G > 8).
    __syncthreads();  // every warp is done with its ring
    float* red = (float*)ring_all;
#pragma unroll
    for (int dn = 0; dn < ND; ++dn) {
        const int col = dn * 8 + gc;
        if (gr < ng) {
            red[(warp * 16 + gr) * D + col] = o[dn][0];
            red[(warp * 16 + gr) * D + col + 1] = o[dn][1];
        }
        if (gr + 8 < ng) {
            red[(warp * 16 + gr + 8) * D + col] = o[dn][2];
            red[(warp * 16 + gr + 8) * D + col + 1] = o[dn][3];
        }
    }
    if ((lane & 3) == 0) {  // maxima in log2 units, as the CUDA-core path keeps them
        if (gr < ng) {
            sh.tm[warp][gr] = m0 == SERVESIM_NEG_INF ? m0 : m0 * sl2;
            sh.tl[warp][gr] = l0;
        }
        if (gr + 8 < ng) {
            sh.tm[warp][gr + 8] = m1 == SERVESIM_NEG_INF ? m1 : m1 * sl2;
            sh.tl[warp][gr + 8] = l1;
        }
    }
    __syncthreads();
    for (int i = tid; i < ng * hd; i += THREADS) {
        const int g = i / hd;
        const int d = i - g * hd;
        float mx = SERVESIM_NEG_INF;
#pragma unroll
        for (int w = 0; w < W; ++w) {
            mx = fmaxf(mx, sh.tm[w][g]);
        }
        float ov = 0.0f, sum = 0.0f;
#pragma unroll
        for (int w = 0; w < W; ++w) {
            const float a = sh.tm[w][g] == SERVESIM_NEG_INF ? 0.0f : ds_exp2(sh.tm[w][g] - mx);
            ov += a * red[(w * 16 + g) * D + d];
            sum += a * sh.tl[w][g];
        }
        const float inv = 1.0f / sum;
        const long long head = (long long)seq * num_heads + h0 + g;
        if (direct) {
            out[head * hd + d] = T::store(ov * inv);
        } else {
            tmp_out[(head * max_partitions + part) * hd + d] = ov * inv;
            if (d == 0) {
                tmp_max[head * max_partitions + part] = mx;
                tmp_sum[head * max_partitions + part] = sum;
            }
        }
    }
}

#define SERVESIM_DECODE_SPLIT_TC(NAME, TYPE, D, G, W, S, MINB)                                     \
    extern "C" __global__ void __launch_bounds__((W) * SERVESIM_WARP, MINB) NAME(DS_PARAMS) {      \
        __shared__ DsShared sh;                                                                    \
        __shared__ __align__(16) u16 ring[DT_SMEM_BYTES(W, S, D) / 2];                             \
        attention_decode_split_tc_impl<TYPE, D, G, W, S>(sh, ring, DS_ARGS);                       \
    }

#ifdef SERVESIM_DS_VARIANTS
// Alternatives the GPU bench times against the default g4 d128 entry (bf16, 32 heads / 8 KV
// heads): X(D, G, W, U, S, MIN_BLOCKS, NAME), named attention_decode_split_bf16_d<D>_g<G>_w<W>u<U>s<S>.
#define SERVESIM_DS_VARIANT_LIST(X)                                                                \
    X(128, 4, 4, 2, 4, 4, attention_decode_split_bf16_d128_g4_w4u2s4)                              \
    X(128, 4, 4, 1, 8, 4, attention_decode_split_bf16_d128_g4_w4u1s8)                              \
    X(128, 4, 4, 2, 5, 4, attention_decode_split_bf16_d128_g4_w4u2s5)                              \
    X(128, 4, 4, 4, 2, 4, attention_decode_split_bf16_d128_g4_w4u4s2)                              \
    X(128, 4, 4, 2, 3, 4, attention_decode_split_bf16_d128_g4_w4u2s3)                              \
    X(128, 4, 8, 1, 4, 2, attention_decode_split_bf16_d128_g4_w8u1s4)
#define SERVESIM_DS_VARIANT_DEF(D, G, W, U, S, MINB, NAME)                                         \
    SERVESIM_DECODE_SPLIT_SPEC_CFG(NAME, Bf16, D, G, W, U, S, MINB)
SERVESIM_DS_VARIANT_LIST(SERVESIM_DS_VARIANT_DEF)
// Tensor-core variants: X(D, G, W, S, MIN_BLOCKS, NAME), named ..._tc_w<W>s<S>.
#define SERVESIM_DT_VARIANT_LIST(X)                                                                \
    X(128, 4, 2, 2, 4, attention_decode_split_bf16_d128_g4_tc_w2s2)                                \
    X(128, 4, 1, 4, 6, attention_decode_split_bf16_d128_g4_tc_w1s4)                                \
    X(128, 4, 1, 5, 5, attention_decode_split_bf16_d128_g4_tc_w1s5)                                \
    X(128, 4, 1, 3, 8, attention_decode_split_bf16_d128_g4_tc_w1s3)                                \
    X(128, 8, 2, 2, 4, attention_decode_split_bf16_d128_g8_tc_w2s2)
#define SERVESIM_DT_VARIANT_DEF(D, G, W, S, MINB, NAME)                                            \
    SERVESIM_DECODE_SPLIT_TC(NAME, Bf16, D, G, W, S, MINB)
SERVESIM_DT_VARIANT_LIST(SERVESIM_DT_VARIANT_DEF)
#endif
