#!/usr/bin/env bash
# Runs the CUDA kernels on the CPU: every CUDA thread is an OS thread, __syncthreads and warp
# shuffles are barriers (emu.h), and test.cpp checks each kernel against an f64 reference over the
# same odd shapes as tests/cuda_kernels.rs. A check of the kernels' index arithmetic and
# synchronisation on a machine without a GPU; not a substitute for the GPU tests (no memory model,
# no timing). Needs g++ >= 12 (C++20 <barrier>, _Float16) and python3. Several minutes on 2 cores
# (the split-KV decode checks are the slow part: every warp shuffle is a barrier of OS threads).
# `run.sh new` runs only the checks of the tensor-core prefill and split-KV decode kernels;
# `run.sh prefill_tc` or `run.sh decode_split` only those of one of them.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
kernels="$here/.."
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
python3 - "$kernels" "$work/kernels_emu.h" <<'PY'
import sys
kernels, out_path = sys.argv[1], sys.argv[2]
pre = open(f"{kernels}/common.cuh").read()
# The two inline-PTX fp16 conversions become host conversions.
pre = pre.replace('asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(x));', 'f = emu_f16_to_f32(x);')
pre = pre.replace('asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));', 'h = emu_f32_to_f16(f);')
assert "asm(" not in pre, "common.cuh has inline PTX the emulator does not know"
out = '#include "emu.h"\n' + pre
for name in ["rmsnorm.cu", "silu_mul.cu", "rotary.cu", "kv_cache.cu", "attention_decode.cu",
             "attention_prefill.cu", "fill.cu", "gather.cu", "attention_prefill_tc.cu",
             "attention_decode_split.cu"]:
    src = open(f"{kernels}/{name}").read()
    src = src.replace("extern __shared__ float smem[];", "float* smem = g_dyn_smem;")
    src = src.replace("extern __shared__ __align__(16) float tc_smem[];", "float* tc_smem = g_dyn_smem;")
    out += f"\n// ---- {name}\n{src}"
open(out_path, "w").write(out)
PY
cp "$here/emu.h" "$here/test.cpp" "$work/"
g++ -std=c++20 -O2 -fno-strict-aliasing -pthread "$work/test.cpp" -o "$work/test"
"$work/test" "$@"
