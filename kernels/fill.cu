// Deterministic pseudo-random fills for benchmark operands, so that calibration never uploads
// gigabytes from the host. Element i gets a value from a hash of (seed, i): uniform in
// [-amplitude, amplitude) for 16-bit floats; for fp8 e4m3 a finite value of magnitude in
// [2^-3, 2^2) with random sign (no NaN encodings).
//
// Launch: grid (min(ceil(n / blockDim.x), 65535)), block 256; grid-stride loop over n.

__device__ __forceinline__ unsigned int fill_hash(unsigned int seed, unsigned long long i) {
    // splitmix-style mixing of the 64-bit index with the seed.
    unsigned long long z = i * 0x9E3779B97F4A7C15ull + (unsigned long long)seed * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (unsigned int)(z >> 32);
}

__device__ __forceinline__ float fill_uniform(unsigned int seed, unsigned long long i, float amplitude) {
    const float u = (float)(fill_hash(seed, i) >> 8) * (1.0f / 16777216.0f);  // [0, 1)
    return (2.0f * u - 1.0f) * amplitude;
}

extern "C" __global__ void fill_uniform_bf16(u16* x, unsigned long long n, unsigned int seed,
                                             float amplitude) {
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
         i += (unsigned long long)gridDim.x * blockDim.x) {
        x[i] = f32_to_bf16_bits(fill_uniform(seed, i, amplitude));
    }
}

extern "C" __global__ void fill_uniform_f16(u16* x, unsigned long long n, unsigned int seed,
                                            float amplitude) {
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
         i += (unsigned long long)gridDim.x * blockDim.x) {
        x[i] = f32_to_f16_bits(fill_uniform(seed, i, amplitude));
    }
}

extern "C" __global__ void fill_e4m3(u8* x, unsigned long long n, unsigned int seed) {
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
         i += (unsigned long long)gridDim.x * blockDim.x) {
        const unsigned int h = fill_hash(seed, i);
        // e4m3: sign(1) exponent(4, bias 7) mantissa(3). Exponent fields 4..8 give 2^-3 .. 2^1.
        const unsigned int sign = (h >> 31) & 1u;
        const unsigned int exponent = 4u + (h % 5u);
        const unsigned int mantissa = (h >> 8) & 7u;
        x[i] = (u8)((sign << 7) | (exponent << 3) | mantissa);
    }
}
