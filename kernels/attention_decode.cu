// Decode attention over a paged KV cache: one new query token per sequence, grouped-query heads,
// any context length (the context is split into partitions of DEC_PARTITION tokens, each handled
// by its own thread block, and the partial results are merged by a second kernel: flash-decoding).
//
//   out          [num_seqs, num_heads, head_dim] contiguous
//   q            [num_seqs, num_heads, head_dim], sequences `q_stride` elements apart
//   k_cache, v_cache [num_blocks, block_size, num_kv_heads, head_dim] contiguous
//   block_tables [num_seqs, max_blocks_per_seq] int32
//   context_lens [num_seqs] int32: tokens in the cache for each sequence, *including* the token
//                being decoded (its key and value are written to the cache first)
//   tmp_out      [num_seqs, num_heads, max_partitions, head_dim] fp32 (partial outputs)
//   tmp_max, tmp_sum [num_seqs, num_heads, max_partitions] fp32 (partial softmax statistics)
//   max_partitions >= ceil(max(context_lens) / DEC_PARTITION): the scratch arrays' partition
//                stride (a workspace sized for the longest context serves shorter steps)
//
// When max_partitions == 1 the first kernel writes `out` directly and the temporaries are unused;
// otherwise it writes the temporaries and attention_decode_reduce_* merges them into `out`.
//
// A thread block handles up to DEC_MAX_G query heads that share one KV head, so each key and value
// row is read once for the whole group. head_dim must be at most DEC_MAX_D.
//
// Launch (main): grid (num_kv_heads * ceil(group / DEC_MAX_G), num_seqs,
// ceil(max(context_lens) / DEC_PARTITION) <= max_partitions), block
// DEC_THREADS, no dynamic shared memory (32 KiB static).
// Launch (reduce): grid (num_heads, num_seqs), block 128.

#define DEC_THREADS 256
#define DEC_WARPS (DEC_THREADS / SERVESIM_WARP)
#define DEC_PARTITION 512
#define DEC_MAX_G 8
#define DEC_MAX_D 256
#define DEC_D_PER_LANE (DEC_MAX_D / SERVESIM_WARP)

template <typename T>
__device__ void attention_decode_impl(
    u16* __restrict__ out, const u16* __restrict__ q, const u16* __restrict__ k_cache,
    const u16* __restrict__ v_cache, const int* __restrict__ block_tables,
    const int* __restrict__ context_lens, float* __restrict__ tmp_out,
    float* __restrict__ tmp_max, float* __restrict__ tmp_sum, float scale, int num_heads,
    int num_kv_heads, int head_dim, int q_stride, int block_size, int max_blocks_per_seq,
    int max_partitions) {
    __shared__ float q_s[DEC_MAX_G][DEC_MAX_D];
    __shared__ float p_s[DEC_MAX_G][DEC_PARTITION];
    __shared__ float red_s[DEC_THREADS * DEC_MAX_G];
    __shared__ float m_s[DEC_MAX_G];
    __shared__ float l_s[DEC_MAX_G];

    const int group = num_heads / num_kv_heads;
    const int head_groups = (group + DEC_MAX_G - 1) / DEC_MAX_G;
    const int kvh = blockIdx.x / head_groups;
    const int hg = blockIdx.x % head_groups;
    const int h0 = kvh * group + hg * DEC_MAX_G;
    const int ng = min(DEC_MAX_G, group - hg * DEC_MAX_G);
    const int seq = blockIdx.y;
    const int part = blockIdx.z;
    const int D = head_dim;
    const int tid = threadIdx.x;
    const int lane = tid % SERVESIM_WARP;
    const int warp = tid / SERVESIM_WARP;
    const bool direct = max_partitions == 1;

    const int ctx = context_lens[seq];
    const int start = part * DEC_PARTITION;
    if (start >= ctx) {
        if (direct) {  // empty sequence: defined output (zeros) rather than garbage
            for (int i = tid; i < ng * D; i += DEC_THREADS) {
                out[((long long)seq * num_heads + h0 + i / D) * D + i % D] = T::store(0.0f);
            }
        }
        return;
    }
    const int n = min(DEC_PARTITION, ctx - start);

    for (int i = tid; i < ng * D; i += DEC_THREADS) {
        const int g = i / D;
        const int d = i - g * D;
        q_s[g][d] = T::load(q[(long long)seq * q_stride + (long long)(h0 + g) * D + d]) * scale;
    }
    __syncthreads();

    // Phase 1: scores. A warp takes one key row at a time; lanes split the head dimension.
    const long long cache_row = (long long)num_kv_heads * D;
    const int* table = block_tables + (long long)seq * max_blocks_per_seq;
    for (int t = warp; t < n; t += DEC_WARPS) {
        const int pos = start + t;
        const long long blk = table[pos / block_size];
        const u16* krow = k_cache + (blk * block_size + pos % block_size) * cache_row + (long long)kvh * D;
        float kr[DEC_D_PER_LANE];
#pragma unroll
        for (int j = 0; j < DEC_D_PER_LANE; ++j) {
            const int d = lane + SERVESIM_WARP * j;
            kr[j] = d < D ? T::load(krow[d]) : 0.0f;
        }
        for (int g = 0; g < ng; ++g) {
            float dot = 0.0f;
#pragma unroll
            for (int j = 0; j < DEC_D_PER_LANE; ++j) {
                const int d = lane + SERVESIM_WARP * j;
                if (d < D) {
                    dot += kr[j] * q_s[g][d];
                }
            }
            dot = warp_sum(dot);
            if (lane == 0) {
                p_s[g][t] = dot;
            }
        }
    }
    __syncthreads();

    // Phase 2: softmax statistics of this partition, one warp per query head.
    for (int g = warp; g < ng; g += DEC_WARPS) {
        float mx = SERVESIM_NEG_INF;
        for (int t = lane; t < n; t += SERVESIM_WARP) {
            mx = fmaxf(mx, p_s[g][t]);
        }
        mx = warp_max(mx);
        float sum = 0.0f;
        for (int t = lane; t < n; t += SERVESIM_WARP) {
            const float p = expf(p_s[g][t] - mx);
            p_s[g][t] = p;
            sum += p;
        }
        sum = warp_sum(sum);
        if (lane == 0) {
            m_s[g] = mx;
            l_s[g] = sum;
        }
    }
    __syncthreads();

    // Phase 3: P · V. Thread (tg, d) accumulates dimension d over tokens tg, tg + TG, ... for all
    // heads of the group; consecutive threads read consecutive dimensions of a value row.
    const int token_groups = DEC_THREADS / D;  // >= 1 because D <= DEC_MAX_D == DEC_THREADS
    const int tg = tid / D;
    const int d = tid - tg * D;
    if (tg < token_groups) {
        float acc[DEC_MAX_G];
#pragma unroll
        for (int g = 0; g < DEC_MAX_G; ++g) {
            acc[g] = 0.0f;
        }
        for (int t = tg; t < n; t += token_groups) {
            const int pos = start + t;
            const long long blk = table[pos / block_size];
            const float val = T::load(
                v_cache[(blk * block_size + pos % block_size) * cache_row + (long long)kvh * D + d]);
#pragma unroll
            for (int g = 0; g < DEC_MAX_G; ++g) {
                if (g < ng) {
                    acc[g] += p_s[g][t] * val;
                }
            }
        }
#pragma unroll
        for (int g = 0; g < DEC_MAX_G; ++g) {
            red_s[(tg * DEC_MAX_G + g) * D + d] = acc[g];
        }
    }
    __syncthreads();

    for (int i = tid; i < ng * D; i += DEC_THREADS) {
        const int g = i / D;
        const int dd = i - g * D;
        float o = 0.0f;
        for (int x = 0; x < token_groups; ++x) {
            o += red_s[(x * DEC_MAX_G + g) * D + dd];
        }
        o /= l_s[g];
        const long long head = (long long)seq * num_heads + h0 + g;
        if (direct) {
            out[head * D + dd] = T::store(o);
        } else {
            tmp_out[(head * max_partitions + part) * D + dd] = o;
            if (dd == 0) {
                tmp_max[head * max_partitions + part] = m_s[g];
                tmp_sum[head * max_partitions + part] = l_s[g];
            }
        }
    }
}

// Merges partition results: out = sum_p w_p o_p / sum_p w_p with w_p = sum_p * exp(max_p - max).
template <typename T>
__device__ void attention_decode_reduce_impl(u16* __restrict__ out,
                                             const float* __restrict__ tmp_out,
                                             const float* __restrict__ tmp_max,
                                             const float* __restrict__ tmp_sum,
                                             const int* __restrict__ context_lens, int num_heads,
                                             int head_dim, int max_partitions) {
    const int h = blockIdx.x;
    const int seq = blockIdx.y;
    const long long head = (long long)seq * num_heads + h;
    const int ctx = context_lens[seq];
    const int np = (ctx + DEC_PARTITION - 1) / DEC_PARTITION;
    const float* mx = tmp_max + head * max_partitions;
    const float* sm = tmp_sum + head * max_partitions;
    float global_max = SERVESIM_NEG_INF;
    for (int p = 0; p < np; ++p) {
        global_max = fmaxf(global_max, mx[p]);
    }
    float total = 0.0f;
    for (int p = 0; p < np; ++p) {
        total += sm[p] * expf(mx[p] - global_max);
    }
    const float inv_total = total > 0.0f ? 1.0f / total : 0.0f;
    for (int d = threadIdx.x; d < head_dim; d += blockDim.x) {
        float o = 0.0f;
        for (int p = 0; p < np; ++p) {
            o += sm[p] * expf(mx[p] - global_max) * tmp_out[(head * max_partitions + p) * head_dim + d];
        }
        out[head * head_dim + d] = T::store(o * inv_total);
    }
}

#define SERVESIM_DECODE_ENTRY(NAME, REDUCE_NAME, TYPE)                                             \
    extern "C" __global__ void __launch_bounds__(DEC_THREADS) NAME(                                \
        u16* out, const u16* q, const u16* k_cache, const u16* v_cache, const int* block_tables,   \
        const int* context_lens, float* tmp_out, float* tmp_max, float* tmp_sum, float scale,      \
        int num_heads, int num_kv_heads, int head_dim, int q_stride, int block_size,               \
        int max_blocks_per_seq, int max_partitions) {                                              \
        attention_decode_impl<TYPE>(out, q, k_cache, v_cache, block_tables, context_lens,          \
                                    tmp_out, tmp_max, tmp_sum, scale, num_heads, num_kv_heads,     \
                                    head_dim, q_stride, block_size, max_blocks_per_seq,            \
                                    max_partitions);                                               \
    }                                                                                              \
    extern "C" __global__ void REDUCE_NAME(u16* out, const float* tmp_out, const float* tmp_max,   \
                                           const float* tmp_sum, const int* context_lens,          \
                                           int num_heads, int head_dim, int max_partitions) {      \
        attention_decode_reduce_impl<TYPE>(out, tmp_out, tmp_max, tmp_sum, context_lens,           \
                                           num_heads, head_dim, max_partitions);                   \
    }

SERVESIM_DECODE_ENTRY(attention_decode_bf16, attention_decode_reduce_bf16, Bf16)
SERVESIM_DECODE_ENTRY(attention_decode_f16, attention_decode_reduce_f16, F16)
