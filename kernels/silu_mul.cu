// SiLU-and-multiply (the gated MLP activation): out[t, i] = silu(x[t, i]) * x[t, d + i], where
// silu(g) = g / (1 + exp(-g)). x is [num_tokens, 2 * d] (gate projection then up projection, as
// vLLM's merged gate_up_proj writes it) and out is [num_tokens, d].
//
// Launch: grid (ceil(d / blockDim.x), num_tokens), any block size (256 recommended).

template <typename T>
__device__ void silu_mul_impl(u16* __restrict__ out, const u16* __restrict__ x, int d) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= d) {
        return;
    }
    const long long t = blockIdx.y;
    const float gate = T::load(x[t * 2 * d + i]);
    const float up = T::load(x[t * 2 * d + d + i]);
    const float silu = gate / (1.0f + expf(-gate));
    out[t * d + i] = T::store(silu * up);
}

extern "C" __global__ void silu_mul_bf16(u16* out, const u16* x, int d) {
    silu_mul_impl<Bf16>(out, x, d);
}

extern "C" __global__ void silu_mul_f16(u16* out, const u16* x, int d) {
    silu_mul_impl<F16>(out, x, d);
}
