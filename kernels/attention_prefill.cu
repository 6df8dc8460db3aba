// Prefill (and chunked-prefill) attention: causal, grouped-query, tiled with an online softmax
// (flash-attention style), 16-bit inputs, fp32 accumulation.
//
// A batch is `num_seqs` sequences with different numbers of new tokens (cumulative offsets, like
// flash-attention's varlen API). Sequence s has `context_lens[s]` tokens already in the paged KV
// cache (0 for a plain prompt) followed by its new tokens, whose keys and values come from `k` and
// `v` directly. New token i of sequence s sits at absolute position context_lens[s] + i and attends
// to every cached token and to new tokens 0..=i (causal).
//
//   out          [total_new_tokens, num_heads, head_dim] contiguous
//   q            [total_new_tokens, num_heads, head_dim], tokens `q_stride` elements apart
//   k, v         [total_new_tokens, num_kv_heads, head_dim], tokens `kv_stride` elements apart
//   k_cache, v_cache [num_blocks, block_size, num_kv_heads, head_dim] contiguous
//   block_tables [num_seqs, max_blocks_per_seq] int32 (only read for cached positions)
//   context_lens [num_seqs] int32, cached tokens before this step
//   cu_seqlens_q [num_seqs + 1] int32, offsets of each sequence's new tokens
//   scale        softmax scale, usually 1 / sqrt(head_dim)
//
// Query head h reads KV head h / (num_heads / num_kv_heads). head_dim must be even and at most the
// entry point's D (64, 128 or 256).
//
// Launch: grid (ceil(max_new_tokens / PF_BM), num_heads, num_seqs), block PF_THREADS (128),
// dynamic shared memory attention_prefill_smem_bytes(head_dim) (see src/engine/cuda/kernels.rs;
// above 48 KiB the host raises the function's limit).
//
// Work split: a thread block owns PF_BM = 32 query rows of one head; 4 consecutive threads own a
// row, each holding a quarter of the row's output dimensions in registers. Key tiles of PF_BN = 32
// are staged in shared memory; tiles entirely in the causal future of the block's last row are
// never loaded. Math runs on CUDA cores (NVRTC has no mma headers here); correctness first.

#define PF_BM 32
#define PF_BN 32
#define PF_THREADS 128
#define PF_THREADS_PER_ROW 4
#define PF_COLS_PER_THREAD (PF_BN / PF_THREADS_PER_ROW)

template <typename T, int MAXD>
__device__ void attention_prefill_impl(
    u16* __restrict__ out, const u16* __restrict__ q, const u16* __restrict__ k,
    const u16* __restrict__ v, const u16* __restrict__ k_cache, const u16* __restrict__ v_cache,
    const int* __restrict__ block_tables, const int* __restrict__ context_lens,
    const int* __restrict__ cu_seqlens_q, float scale, int num_heads, int num_kv_heads,
    int head_dim, int q_stride, int kv_stride, int block_size, int max_blocks_per_seq) {
    const int tile = blockIdx.x;
    const int h = blockIdx.y;
    const int seq = blockIdx.z;
    const int q_start = cu_seqlens_q[seq];
    const int q_len = cu_seqlens_q[seq + 1] - q_start;
    const int row0 = tile * PF_BM;
    if (row0 >= q_len) {
        return;
    }
    const int ctx = context_lens[seq];
    const int kvh = h / (num_heads / num_kv_heads);
    const int rows_here = min(PF_BM, q_len - row0);
    // Keys visible to the block's last row: the whole context plus new tokens up to that row.
    const int n_keys = ctx + row0 + rows_here;
    const int D = head_dim;
    const int qs_stride = D + 1;   // padding: rows of Qs fall in different banks
    const int kvs_stride = D + 2;  // u16 elements; keeps rows 4-byte aligned, shifts banks

    extern __shared__ float smem[];
    float* Qs = smem;                                        // [PF_BM][D + 1] fp32, pre-scaled
    u16* Ks = (u16*)(Qs + PF_BM * qs_stride);                // [PF_BN][D + 2]
    u16* Vs = Ks + PF_BN * kvs_stride;                       // [PF_BN][D + 2]
    float* Ps = (float*)(Vs + PF_BN * kvs_stride);           // [PF_BM][PF_BN + 1]

    const int tid = threadIdx.x;
    for (int i = tid; i < PF_BM * D; i += PF_THREADS) {
        const int r = i / D;
        const int d = i - r * D;
        float val = 0.0f;
        if (r < rows_here) {
            val = T::load(q[(long long)(q_start + row0 + r) * q_stride + (long long)h * D + d]) *
                  scale;
        }
        Qs[r * qs_stride + d] = val;
    }

    const int r = tid / PF_THREADS_PER_ROW;
    const int sub = tid % PF_THREADS_PER_ROW;
    const bool row_valid = r < rows_here;
    const int my_pos = ctx + row0 + r;

    float m = SERVESIM_NEG_INF;
    float l = 0.0f;
    float acc[MAXD / PF_THREADS_PER_ROW];
#pragma unroll
    for (int j = 0; j < MAXD / PF_THREADS_PER_ROW; ++j) {
        acc[j] = 0.0f;
    }

    const long long cache_row = (long long)num_kv_heads * D;
    for (int kb = 0; kb < n_keys; kb += PF_BN) {
        __syncthreads();  // Qs is written; the previous tile's Ks/Vs/Ps are consumed.
        for (int i = tid; i < PF_BN * D; i += PF_THREADS) {
            const int c = i / D;
            const int d = i - c * D;
            const int j = kb + c;
            u16 kval = 0;
            u16 vval = 0;
            if (j < n_keys) {
                if (j < ctx) {
                    const long long blk = block_tables[(long long)seq * max_blocks_per_seq + j / block_size];
                    const long long off =
                        (blk * block_size + (j % block_size)) * cache_row + (long long)kvh * D + d;
                    kval = k_cache[off];
                    vval = v_cache[off];
                } else {
                    const long long off =
                        (long long)(q_start + j - ctx) * kv_stride + (long long)kvh * D + d;
                    kval = k[off];
                    vval = v[off];
                }
            }
            Ks[c * kvs_stride + d] = kval;
            Vs[c * kvs_stride + d] = vval;
        }
        __syncthreads();

        float s[PF_COLS_PER_THREAD];
#pragma unroll
        for (int i = 0; i < PF_COLS_PER_THREAD; ++i) {
            s[i] = 0.0f;
        }
        for (int d = 0; d < D; ++d) {
            const float qv = Qs[r * qs_stride + d];
#pragma unroll
            for (int i = 0; i < PF_COLS_PER_THREAD; ++i) {
                const int c = sub + PF_THREADS_PER_ROW * i;
                s[i] += qv * T::load(Ks[c * kvs_stride + d]);
            }
        }
        float tile_max = SERVESIM_NEG_INF;
#pragma unroll
        for (int i = 0; i < PF_COLS_PER_THREAD; ++i) {
            const int j = kb + sub + PF_THREADS_PER_ROW * i;
            if (!row_valid || j > my_pos) {
                s[i] = SERVESIM_NEG_INF;
            }
            tile_max = fmaxf(tile_max, s[i]);
        }
        tile_max = fmaxf(tile_max, __shfl_xor_sync(SERVESIM_FULL_MASK, tile_max, 1));
        tile_max = fmaxf(tile_max, __shfl_xor_sync(SERVESIM_FULL_MASK, tile_max, 2));
        const float m_new = fmaxf(m, tile_max);
        // A row with no visible key so far (only padding rows) keeps p = 0 and avoids inf - inf.
        const bool any = m_new != SERVESIM_NEG_INF;
        const float alpha = any ? expf(m - m_new) : 1.0f;
        float row_sum = 0.0f;
#pragma unroll
        for (int i = 0; i < PF_COLS_PER_THREAD; ++i) {
            const float p = any ? expf(s[i] - m_new) : 0.0f;
            Ps[r * (PF_BN + 1) + sub + PF_THREADS_PER_ROW * i] = p;
            row_sum += p;
        }
        row_sum += __shfl_xor_sync(SERVESIM_FULL_MASK, row_sum, 1);
        row_sum += __shfl_xor_sync(SERVESIM_FULL_MASK, row_sum, 2);
        l = l * alpha + row_sum;
        m = m_new;
#pragma unroll
        for (int j = 0; j < MAXD / PF_THREADS_PER_ROW; ++j) {
            acc[j] *= alpha;
        }
        __syncwarp();  // a row's 4 threads are lanes of one warp: its Ps row is complete

        for (int c = 0; c < PF_BN; ++c) {
            const float p = Ps[r * (PF_BN + 1) + c];
#pragma unroll
            for (int j = 0; j < MAXD / PF_THREADS_PER_ROW; ++j) {
                const int d = sub + PF_THREADS_PER_ROW * j;
                if (d < D) {
                    acc[j] += p * T::load(Vs[c * kvs_stride + d]);
                }
            }
        }
    }

    if (row_valid) {
        const float inv_l = l > 0.0f ? 1.0f / l : 0.0f;
        u16* o = out + ((long long)(q_start + row0 + r) * num_heads + h) * D;
#pragma unroll
        for (int j = 0; j < MAXD / PF_THREADS_PER_ROW; ++j) {
            const int d = sub + PF_THREADS_PER_ROW * j;
            if (d < D) {
                o[d] = T::store(acc[j] * inv_l);
            }
        }
    }
}

#define SERVESIM_PREFILL_ENTRY(NAME, TYPE, MAXD)                                                   \
    extern "C" __global__ void __launch_bounds__(PF_THREADS) NAME(                                 \
        u16* out, const u16* q, const u16* k, const u16* v, const u16* k_cache,                    \
        const u16* v_cache, const int* block_tables, const int* context_lens,                      \
        const int* cu_seqlens_q, float scale, int num_heads, int num_kv_heads, int head_dim,       \
        int q_stride, int kv_stride, int block_size, int max_blocks_per_seq) {                     \
        attention_prefill_impl<TYPE, MAXD>(out, q, k, v, k_cache, v_cache, block_tables,           \
                                           context_lens, cu_seqlens_q, scale, num_heads,           \
                                           num_kv_heads, head_dim, q_stride, kv_stride,            \
                                           block_size, max_blocks_per_seq);                        \
    }

SERVESIM_PREFILL_ENTRY(attention_prefill_bf16_d64, Bf16, 64)
SERVESIM_PREFILL_ENTRY(attention_prefill_bf16_d128, Bf16, 128)
SERVESIM_PREFILL_ENTRY(attention_prefill_bf16_d256, Bf16, 256)
SERVESIM_PREFILL_ENTRY(attention_prefill_f16_d64, F16, 64)
SERVESIM_PREFILL_ENTRY(attention_prefill_f16_d128, F16, 128)
SERVESIM_PREFILL_ENTRY(attention_prefill_f16_d256, F16, 256)
