// Minimal CPU emulation of the CUDA execution model for testing servesim kernels.
#pragma once
#include <atomic>
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <thread>
#include <vector>
#include <algorithm>
using std::min; using std::max;
struct dim3 { unsigned x = 1, y = 1, z = 1; };
inline thread_local dim3 threadIdx, blockIdx;
inline dim3 blockDim, gridDim;
inline thread_local int emu_lane, emu_warp;
inline std::barrier<>* emu_block_bar;
struct EmuWarp { std::unique_ptr<std::barrier<>> bar; float vals[32]; };
inline std::vector<EmuWarp>* emu_warps;
inline float* g_dyn_smem;
#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(x)
#define __shared__ static
inline void __syncthreads() { emu_block_bar->arrive_and_wait(); }
inline void __syncwarp() { (*emu_warps)[emu_warp].bar->arrive_and_wait(); }
inline float __shfl_xor_sync(unsigned, float v, int o) {
  auto& w = (*emu_warps)[emu_warp]; w.vals[emu_lane] = v; w.bar->arrive_and_wait();
  float r = w.vals[emu_lane ^ o]; w.bar->arrive_and_wait(); return r; }
inline float __int_as_float(int i) { float f; memcpy(&f, &i, 4); return f; }
inline float __uint_as_float(unsigned i) { float f; memcpy(&f, &i, 4); return f; }
inline unsigned __float_as_uint(float f) { unsigned i; memcpy(&i, &f, 4); return i; }
inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
inline float emu_f16_to_f32(unsigned short h) { _Float16 x; memcpy(&x, &h, 2); return (float)x; }
inline unsigned short emu_f32_to_f16(float f) { _Float16 x = (_Float16)f; unsigned short h; memcpy(&h, &x, 2); return h; }
inline void emu_launch(dim3 grid, dim3 block, size_t smem, std::function<void()> fn) {
  gridDim = grid; blockDim = block;
  std::vector<float> dyn(smem / 4 + 16);
  g_dyn_smem = dyn.data();
  for (unsigned z = 0; z < grid.z; ++z) for (unsigned y = 0; y < grid.y; ++y) for (unsigned x = 0; x < grid.x; ++x) {
    int n = block.x;
    std::barrier<> bar(n); emu_block_bar = &bar;
    std::vector<EmuWarp> warps((n + 31) / 32);
    for (int w = 0; w < (int)warps.size(); ++w) warps[w].bar = std::make_unique<std::barrier<>>(std::min(32, n - 32 * w));
    emu_warps = &warps;
    std::vector<std::thread> ts;
    for (int t = 0; t < n; ++t) ts.emplace_back([=] {
      threadIdx = {(unsigned)t, 0, 0}; blockIdx = {x, y, z}; emu_lane = t % 32; emu_warp = t / 32; fn(); });
    for (auto& t : ts) t.join();
  }
}
