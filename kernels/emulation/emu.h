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
struct EmuWarp { std::unique_ptr<std::barrier<>> bar; float vals[32]; unsigned mma_a[32][4], mma_b[32][2]; const unsigned short* ldsm[32]; };
inline std::vector<EmuWarp>* emu_warps;
inline float* g_dyn_smem;
#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static
#define __align__(n) __attribute__((aligned(n)))
#define SERVESIM_EMULATION 1
#define SERVESIM_TC_VARIANTS 1  // also check the variants scripts/gpu/attn_bench.cu times
#define SERVESIM_DS_VARIANTS 1
struct uint4 { unsigned x, y, z, w; };
struct float4 { float x, y, z, w; };
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return {x, y, z, w}; }
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
// mma.sync.aligned.m16n8k16.row.col.f32.{bf16,f16}: every lane deposits its fragments, then
// computes its own four outputs from the whole warp's (fragment layouts of the PTX ISA, "Matrix
// fragments for mma.m16n8k16": groupID = lane / 4, tig = lane % 4; A reg r holds row groupID
// (+8 for r = 1, 3), columns 2 tig + {0, 1} (+8 for r = 2, 3); B reg r holds rows 2 tig + {0, 1}
// (+8 for r = 1), column groupID; C holds rows groupID (c0, c1) and groupID + 8 (c2, c3),
// columns 2 tig + {0, 1}; the lower column / row index sits in a register's low 16 bits).
inline double emu_b16(unsigned short h, bool f16) {
  if (f16) return emu_f16_to_f32(h); unsigned u = (unsigned)h << 16; float f; memcpy(&f, &u, 4); return f; }
inline void emu_mma_16816(float* c, const unsigned* a, const unsigned* b, bool f16) {
  auto& w = (*emu_warps)[emu_warp];
  memcpy(w.mma_a[emu_lane], a, 16); memcpy(w.mma_b[emu_lane], b, 8);
  w.bar->arrive_and_wait();
  auto half = [&](unsigned v, int odd) { return emu_b16((unsigned short)(odd ? v >> 16 : v & 0xffffu), f16); };
  auto A = [&](int r, int k) { return half(w.mma_a[(r % 8) * 4 + (k % 8) / 2][(r >= 8) + 2 * (k >= 8)], k & 1); };
  auto B = [&](int k, int n) { return half(w.mma_b[n * 4 + (k % 8) / 2][k >= 8], k & 1); };
  int g = emu_lane / 4, t = emu_lane % 4;
  for (int i = 0; i < 4; ++i) {
    int row = g + (i >= 2 ? 8 : 0), col = 2 * t + (i & 1); double s = c[i];
    for (int k = 0; k < 16; ++k) s += A(row, k) * B(k, col);
    c[i] = (float)s; }
  w.bar->arrive_and_wait(); }
// ldmatrix.sync.aligned.m8n8.x4[.trans].shared.b16: lane i supplies the address of row i % 8 of
// matrix i / 8 (eight consecutive 16-bit elements); register j of every lane receives two elements
// of matrix j: without .trans row lane / 4, columns 2 (lane % 4) and 2 (lane % 4) + 1; with .trans
// rows 2 (lane % 4) and 2 (lane % 4) + 1, column lane / 4 (PTX ISA, "Warp-level matrix load
// instruction: ldmatrix"); the first element in the low 16 bits.
inline void emu_ldmatrix_x4(unsigned* r, const unsigned short* p, bool trans) {
  auto& w = (*emu_warps)[emu_warp];
  w.ldsm[emu_lane] = p;
  w.bar->arrive_and_wait();
  int g = emu_lane / 4, t = emu_lane % 4;
  for (int j = 0; j < 4; ++j) {
    unsigned lo, hi;
    if (!trans) { lo = w.ldsm[j * 8 + g][2 * t]; hi = w.ldsm[j * 8 + g][2 * t + 1]; }
    else { lo = w.ldsm[j * 8 + 2 * t][g]; hi = w.ldsm[j * 8 + 2 * t + 1][g]; }
    r[j] = lo | (hi << 16); }
  w.bar->arrive_and_wait(); }
// cp.async.cg.shared.global 16 bytes with src-size 16 or 0: a plain copy (zeros when !valid); the
// commit / wait_group calls are no-ops, the kernels' __syncthreads after the wait stays a barrier.
inline void emu_cp_async16(void* dst, const void* src, bool valid) {
  if (valid) memcpy(dst, src, 16); else memset(dst, 0, 16); }
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
