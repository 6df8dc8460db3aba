// Writes new tokens' keys and values into the paged KV cache (vLLM's reshape_and_cache).
//
//   key, value  [num_tokens, num_kv_heads, head_dim], heads contiguous within a token, tokens
//               `kv_stride` elements apart (views into a fused QKV output are fine)
//   k_cache, v_cache [num_blocks, block_size, num_kv_heads, head_dim], contiguous
//   slot_mapping [num_tokens] int32: slot = block_index * block_size + offset; negative = skip
//               (padding tokens)
//
// Launch: grid (num_tokens), block 128 or 256.

__device__ void reshape_and_cache_impl(const u16* __restrict__ key, const u16* __restrict__ value,
                                       u16* __restrict__ k_cache, u16* __restrict__ v_cache,
                                       const int* __restrict__ slot_mapping, int kv_stride,
                                       int num_kv_heads, int head_dim) {
    const long long t = blockIdx.x;
    const long long slot = slot_mapping[t];
    if (slot < 0) {
        return;
    }
    const int row = num_kv_heads * head_dim;
    // [block, offset] flattens to `slot` because a block holds block_size consecutive rows.
    const long long dst = slot * row;
    const long long src = t * kv_stride;
    for (int i = threadIdx.x; i < row; i += blockDim.x) {
        k_cache[dst + i] = key[src + i];
        v_cache[dst + i] = value[src + i];
    }
}

// The copy is bit-exact, so one entry point serves bf16 and fp16.
extern "C" __global__ void reshape_and_cache_u16(const u16* key, const u16* value, u16* k_cache,
                                                 u16* v_cache, const int* slot_mapping,
                                                 int kv_stride, int num_kv_heads, int head_dim) {
    reshape_and_cache_impl(key, value, k_cache, v_cache, slot_mapping, kv_stride, num_kv_heads,
                           head_dim);
}
