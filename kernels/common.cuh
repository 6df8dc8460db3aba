// servesim CUDA kernels: common prelude.
//
// Compiled at run time with NVRTC. The build prepends this file to every kernel source (see
// src/engine/cuda/compile.rs), so kernels need no #include: NVRTC ships without the CUDA headers
// (cuda_bf16.h / cuda_fp16.h are not found by the pip NVRTC package), so 16-bit floats are raw
// `unsigned short` bit patterns here, converted with bit arithmetic (bf16) or one PTX `cvt` (fp16).
//
// Storage types: `u16` holds bf16 or fp16 bits; all arithmetic is fp32.

typedef unsigned short u16;
typedef unsigned char u8;

#define SERVESIM_NEG_INF (__int_as_float(0xff800000))
#define SERVESIM_WARP 32
#define SERVESIM_FULL_MASK 0xffffffffu

// bf16 -> fp32 is exact: bf16 is the top half of an fp32.
__device__ __forceinline__ float bf16_bits_to_f32(u16 x) {
    return __uint_as_float(((unsigned int)x) << 16);
}

// fp32 -> bf16 with round-to-nearest-even; NaN stays NaN (quiet).
__device__ __forceinline__ u16 f32_to_bf16_bits(float f) {
    unsigned int u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) {
        return (u16)((u >> 16) | 0x0040u);
    }
    u += 0x7fffu + ((u >> 16) & 1u);
    return (u16)(u >> 16);
}

__device__ __forceinline__ float f16_bits_to_f32(u16 x) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(x));
    return f;
}

__device__ __forceinline__ u16 f32_to_f16_bits(float f) {
    u16 h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
}

// Element-type tags: kernels are templates over these and instantiated as extern "C" entry points
// with a `_bf16` / `_f16` suffix.
struct Bf16 {
    static __device__ __forceinline__ float load(u16 x) { return bf16_bits_to_f32(x); }
    static __device__ __forceinline__ u16 store(float f) { return f32_to_bf16_bits(f); }
};

struct F16 {
    static __device__ __forceinline__ float load(u16 x) { return f16_bits_to_f32(x); }
    static __device__ __forceinline__ u16 store(float f) { return f32_to_f16_bits(f); }
};

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = SERVESIM_WARP / 2; o > 0; o >>= 1) {
        v += __shfl_xor_sync(SERVESIM_FULL_MASK, v, o);
    }
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = SERVESIM_WARP / 2; o > 0; o >>= 1) {
        v = fmaxf(v, __shfl_xor_sync(SERVESIM_FULL_MASK, v, o));
    }
    return v;
}

// Sum over the whole thread block (blockDim.x a multiple of 32, at most 1024). `scratch` holds 32
// floats. Every thread gets the result. Contains __syncthreads: call from all threads.
__device__ __forceinline__ float block_sum(float v, float* scratch) {
    const int lane = threadIdx.x % SERVESIM_WARP;
    const int warp = threadIdx.x / SERVESIM_WARP;
    const int num_warps = (blockDim.x + SERVESIM_WARP - 1) / SERVESIM_WARP;
    v = warp_sum(v);
    __syncthreads();
    if (lane == 0) {
        scratch[warp] = v;
    }
    __syncthreads();
    float total = 0.0f;
    for (int w = 0; w < num_warps; ++w) {
        total += scratch[w];
    }
    return total;
}

__device__ __forceinline__ float block_max(float v, float* scratch) {
    const int lane = threadIdx.x % SERVESIM_WARP;
    const int warp = threadIdx.x / SERVESIM_WARP;
    const int num_warps = (blockDim.x + SERVESIM_WARP - 1) / SERVESIM_WARP;
    v = warp_max(v);
    __syncthreads();
    if (lane == 0) {
        scratch[warp] = v;
    }
    __syncthreads();
    float m = SERVESIM_NEG_INF;
    for (int w = 0; w < num_warps; ++w) {
        m = fmaxf(m, scratch[w]);
    }
    return m;
}
