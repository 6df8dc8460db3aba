// Rotary position embedding, applied in place to queries and keys.
//
//   q [num_tokens, num_heads, head_dim], k [num_tokens, num_kv_heads, head_dim], heads contiguous
//   within a token; consecutive tokens are `q_stride` / `k_stride` elements apart (so q and k can
//   be views into a fused QKV projection output), positions [num_tokens] (int32), cos_sin [max_position, rot_dim] fp32 where row p
//   holds cos(p * f_i) for i < rot_dim / 2 followed by sin(p * f_i) (computed on the host in f64,
//   see src/engine/cuda/kernels.rs), f_i = base^(-2i / rot_dim).
//
// Only the first rot_dim (even, <= head_dim) dimensions of each head rotate (partial rotary).
// `is_neox` selects the pairing: NeoX/Llama style rotates (x[i], x[i + rot_dim/2]); GPT-J style
// rotates (x[2i], x[2i + 1]). For each pair (a, b) and angle th:
//   a' = a cos th - b sin th,   b' = b cos th + a sin th.
//
// Launch: grid (num_tokens), block 128 or 256, no dynamic shared memory.

template <typename T>
__device__ __forceinline__ void rotate_pair(u16* __restrict__ head, int i, int half, float c,
                                            float s, int is_neox) {
    const int ia = is_neox ? i : 2 * i;
    const int ib = is_neox ? i + half : 2 * i + 1;
    const float a = T::load(head[ia]);
    const float b = T::load(head[ib]);
    head[ia] = T::store(a * c - b * s);
    head[ib] = T::store(b * c + a * s);
}

template <typename T>
__device__ void rotary_impl(u16* __restrict__ q, u16* __restrict__ k,
                            const int* __restrict__ positions, const float* __restrict__ cos_sin,
                            int q_stride, int k_stride, int num_heads, int num_kv_heads,
                            int head_dim, int rot_dim, int is_neox) {
    const long long t = blockIdx.x;
    const int half = rot_dim / 2;
    const float* row = cos_sin + (long long)positions[t] * rot_dim;
    const int q_work = num_heads * half;
    for (int w = threadIdx.x; w < q_work; w += blockDim.x) {
        const int h = w / half;
        const int i = w % half;
        u16* head = q + t * q_stride + (long long)h * head_dim;
        rotate_pair<T>(head, i, half, row[i], row[half + i], is_neox);
    }
    const int k_work = num_kv_heads * half;
    for (int w = threadIdx.x; w < k_work; w += blockDim.x) {
        const int h = w / half;
        const int i = w % half;
        u16* head = k + t * k_stride + (long long)h * head_dim;
        rotate_pair<T>(head, i, half, row[i], row[half + i], is_neox);
    }
}

extern "C" __global__ void rotary_bf16(u16* q, u16* k, const int* positions, const float* cos_sin,
                                       int q_stride, int k_stride, int num_heads,
                                       int num_kv_heads, int head_dim, int rot_dim, int is_neox) {
    rotary_impl<Bf16>(q, k, positions, cos_sin, q_stride, k_stride, num_heads, num_kv_heads,
                      head_dim, rot_dim, is_neox);
}

extern "C" __global__ void rotary_f16(u16* q, u16* k, const int* positions, const float* cos_sin,
                                      int q_stride, int k_stride, int num_heads, int num_kv_heads,
                                      int head_dim, int rot_dim, int is_neox) {
    rotary_impl<F16>(q, k, positions, cos_sin, q_stride, k_stride, num_heads, num_kv_heads,
                     head_dim, rot_dim, is_neox);
}
