// Row gather: out[i, :] = src[indices[i], :] for i < num_rows. The engine uses it for the token
// embedding lookup (src = the embedding table, indices = token ids) and to pick the rows whose
// logits are sampled (src = the final hidden states, indices = rows).
//
//   src     [num_src_rows, row_len] contiguous
//   out     [num_rows, row_len] contiguous
//   indices [num_rows] int32, each in [0, num_src_rows) (checked on the host)
//
// Launch: grid (num_rows), block 128 or 256, no dynamic shared memory.

// The copy is bit-exact, so one entry point serves bf16 and fp16.
extern "C" __global__ void gather_rows_u16(u16* __restrict__ out, const u16* __restrict__ src,
                                           const int* __restrict__ indices, int row_len) {
    const long long i = blockIdx.x;
    const long long s = indices[i];
    for (int j = threadIdx.x; j < row_len; j += blockDim.x) {
        out[i * row_len + j] = src[s * row_len + j];
    }
}
