// RMSNorm (Llama): out[t, i] = x[t, i] / sqrt(mean_i(x[t, :]^2) + eps) * weight[i].
//
// Layout: x, out [num_tokens, hidden] row-major with row stride `hidden`; weight [hidden].
// Launch: grid (num_tokens), block a multiple of 32 (256 recommended), no dynamic shared memory.
// The fused variant first adds the residual (vLLM's fused_add_rms_norm):
//   residual = x + residual  (written back, in the model dtype)
//   x        = rmsnorm(residual) * weight
// Sums are fp32; the residual is rounded to the model dtype before normalising, as in vLLM.

template <typename T>
__device__ void rmsnorm_impl(u16* __restrict__ out, const u16* __restrict__ x,
                             const u16* __restrict__ weight, float eps, int hidden) {
    __shared__ float scratch[32];
    const long long row = (long long)blockIdx.x * hidden;
    float sum_sq = 0.0f;
    for (int i = threadIdx.x; i < hidden; i += blockDim.x) {
        const float v = T::load(x[row + i]);
        sum_sq += v * v;
    }
    sum_sq = block_sum(sum_sq, scratch);
    const float inv_rms = rsqrtf(sum_sq / (float)hidden + eps);
    for (int i = threadIdx.x; i < hidden; i += blockDim.x) {
        const float v = T::load(x[row + i]);
        out[row + i] = T::store(v * inv_rms * T::load(weight[i]));
    }
}

template <typename T>
__device__ void fused_add_rmsnorm_impl(u16* __restrict__ x, u16* __restrict__ residual,
                                       const u16* __restrict__ weight, float eps, int hidden) {
    __shared__ float scratch[32];
    const long long row = (long long)blockIdx.x * hidden;
    float sum_sq = 0.0f;
    for (int i = threadIdx.x; i < hidden; i += blockDim.x) {
        const u16 r = T::store(T::load(x[row + i]) + T::load(residual[row + i]));
        residual[row + i] = r;
        const float v = T::load(r);
        sum_sq += v * v;
    }
    sum_sq = block_sum(sum_sq, scratch);
    const float inv_rms = rsqrtf(sum_sq / (float)hidden + eps);
    // Each thread re-reads only the residual elements it wrote itself: no barrier needed.
    for (int i = threadIdx.x; i < hidden; i += blockDim.x) {
        const float v = T::load(residual[row + i]);
        x[row + i] = T::store(v * inv_rms * T::load(weight[i]));
    }
}

extern "C" __global__ void rmsnorm_bf16(u16* out, const u16* x, const u16* weight, float eps,
                                        int hidden) {
    rmsnorm_impl<Bf16>(out, x, weight, eps, hidden);
}

extern "C" __global__ void rmsnorm_f16(u16* out, const u16* x, const u16* weight, float eps,
                                       int hidden) {
    rmsnorm_impl<F16>(out, x, weight, eps, hidden);
}

extern "C" __global__ void fused_add_rmsnorm_bf16(u16* x, u16* residual, const u16* weight,
                                                  float eps, int hidden) {
    fused_add_rmsnorm_impl<Bf16>(x, residual, weight, eps, hidden);
}

extern "C" __global__ void fused_add_rmsnorm_f16(u16* x, u16* residual, const u16* weight,
                                                 float eps, int hidden) {
    fused_add_rmsnorm_impl<F16>(x, residual, weight, eps, hidden);
}
