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
//   partition_size 1 ..= DS_MAX_PART (512) tokens. Pick it so that the grid has at least ~4
//                blocks per SM, e.g. the largest power of two in [64, 512] with
//                grid.x * num_seqs * ceil(max_ctx / partition_size) >= 4 * num_sms.
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
//       partition_size)), block DS_THREADS = 128, no dynamic shared memory.
//   attention_decode_split_{bf16,f16}   generic (any head_dim <= 256, any group): picks the same
//       code at run time, so it carries the registers of the largest shape (slower). Launch as
//       above with G = DS_MAX_G = 8.
// Launch (reduce, unchanged): grid (num_heads, num_seqs), block DS_RED_THREADS = 256, no dynamic
// shared memory (8 KiB static).
//
// Work split (main): a lane owns 8 dimensions (one uint4) of a row; D/8 lanes (8, 16 or 32) cover
// a row, so a warp reads 4, 2 or 1 rows per load. Each thread loads the key *and* value chunks of
// U rows at once (2U 16-byte loads in flight; U = 8, 8, 4, 2 for G = 1, 2, 4, 8), computes the U
// scores per head (dot products reduced over the row's lanes by shuffles), and folds them into a
// per-thread online softmax (running max in log2 units, running sum, 8 accumulators per head),
// rescaling once per U rows. The partition's block-table slice is staged in shared memory first.
// At the end the row groups of a warp are merged by shuffles and the 4 warps through shared
// memory (log-sum-exp merge), then the block writes `out` or the partition's temporaries.

#define DS_THREADS 128
#define DS_WARPS (DS_THREADS / SERVESIM_WARP)
#define DS_MAX_G 8
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
    float m[DS_WARPS][DS_MAX_G];
    float l[DS_WARPS][DS_MAX_G];
};

// D: head-dim bucket (64, 128, 256); G: query heads per block (1, 2, 4, 8), ng <= G of them real.
// `red` holds DS_WARPS * G * D floats.
template <typename T, int D, int G>
__device__ __forceinline__ void attention_decode_split_impl(
    DsShared& sh, float* red, u16* __restrict__ out, const u16* __restrict__ q,
    const u16* __restrict__ k_cache, const u16* __restrict__ v_cache,
    const int* __restrict__ block_tables, const int* __restrict__ context_lens,
    float* __restrict__ tmp_out, float* __restrict__ tmp_max, float* __restrict__ tmp_sum,
    float scale, int num_heads, int num_kv_heads, int head_dim, int q_stride, int block_size,
    int max_blocks_per_seq, int max_partitions, int partition_size) {
    constexpr int LPT = D / 8;                 // lanes per row
    constexpr int TPW = SERVESIM_WARP / LPT;   // rows per warp per load
    constexpr int SLOTS = DS_WARPS * TPW;      // rows per block per load
    constexpr int U = G <= 2 ? 8 : G == 4 ? 4 : 2;  // rows per thread per step

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
            for (int i = tid; i < ng * hd; i += DS_THREADS) {
                out[((long long)seq * num_heads + h0 + i / hd) * hd + i % hd] = T::store(0.0f);
            }
        }
        return;
    }
    const int n = min(partition_size, ctx - start);
    const int c = lane % LPT;  // this lane's 8-dim chunk
    const int slot = warp * TPW + lane / LPT;
    const bool cvalid = c * 8 < hd;
    const long long cache_row = (long long)num_kv_heads * hd;
    const long long head_off = (long long)kvh * hd + c * 8;

    // The partition's slice of the block table.
    const int b0 = start / block_size;
    const int nblk = (start + n - 1) / block_size - b0 + 1;
    const int* table = block_tables + (long long)seq * max_blocks_per_seq + b0;
    for (int i = tid; i < nblk; i += DS_THREADS) {
        sh.table[i] = table[i];
    }

    // Query chunks in registers, pre-scaled to log2 units.
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
    __syncthreads();  // table slice staged

    const int off0 = start - b0 * block_size;  // offset of token 0 within the slice's blocks
    for (int t0 = 0; t0 < n; t0 += SLOTS * U) {
        uint4 kr[U], vr[U];
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const int t = t0 + u * SLOTS + slot;
            kr[u] = make_uint4(0u, 0u, 0u, 0u);
            vr[u] = make_uint4(0u, 0u, 0u, 0u);
            if (t < n && cvalid) {
                const int p = off0 + t;
                const long long blk = sh.table[p / block_size];
                const long long off = (blk * block_size + p % block_size) * cache_row + head_off;
                kr[u] = *(const uint4*)(k_cache + off);
                vr[u] = *(const uint4*)(v_cache + off);
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
    // Then the warps, through shared memory: red[warp][g][d].
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
    for (int i = tid; i < ng * hd; i += DS_THREADS) {
        const int g = i / hd;
        const int d = i - g * hd;
        float mx = SERVESIM_NEG_INF;
#pragma unroll
        for (int w = 0; w < DS_WARPS; ++w) {
            mx = fmaxf(mx, sh.m[w][g]);
        }
        float o = 0.0f, sum = 0.0f;
#pragma unroll
        for (int w = 0; w < DS_WARPS; ++w) {
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
    __shared__ __align__(16) float red[DS_WARPS * DS_MAX_G * 256];
#define DS_CALL(DD)                                                                                \
    attention_decode_split_impl<T, DD, DS_MAX_G>(sh, red, DS_ARGS)
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
#define SERVESIM_DECODE_SPLIT_SPEC(NAME, TYPE, D, G)                                               \
    extern "C" __global__ void __launch_bounds__(DS_THREADS, (G) == 8 ? 2 : 4) NAME(DS_PARAMS) {   \
        __shared__ DsShared sh;                                                                    \
        __shared__ __align__(16) float red[DS_WARPS * (G) * (D)];                                  \
        attention_decode_split_impl<TYPE, D, G>(sh, red, DS_ARGS);                                 \
    }
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
