#!/usr/bin/env bash
# Builds and runs the attention kernel check + benchmark (scripts/gpu/attn_bench.cu) on a machine
# with a GPU and nvcc (no Rust needed):
#
#   scripts/gpu/run.sh [OUT_DIR]        # default OUT_DIR: target/gpu-bench
#
# Concatenates kernels/common.cuh and the four attention kernel files into one header (the same
# text NVRTC compiles, with #line markers so errors point at the real files), compiles with
# `nvcc -O3 -arch=sm_90a` (falls back to sm_80 if that fails, e.g. on an A100 or an older nvcc),
# runs, and leaves results.json / results.md (+ build log and ptxas resource usage) in OUT_DIR.
# Exit status: the benchmark's (0 ok, 1 mismatch between new and old kernels, 2 CUDA error), or 3
# when the build fails.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
out="${1:-$root/target/gpu-bench}"
mkdir -p "$out"
out="$(cd "$out" && pwd)"
build="$(mktemp -d)"
trap 'rm -rf "$build"' EXIT

command -v nvcc >/dev/null || { echo "error: nvcc not found on PATH (try /usr/local/cuda/bin)" >&2; exit 3; }
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,clocks.max.mem --format=csv 2>/dev/null | tee "$out/gpu.txt" || true
nvcc --version | tail -2

{
  for f in common.cuh attention_prefill.cu attention_decode.cu attention_prefill_tc.cu attention_decode_split.cu; do
    echo "#line 1 \"$root/kernels/$f\""
    cat "$root/kernels/$f"
    echo
  done
} > "$build/kernels_all.cuh"

arch=""
for a in sm_90a sm_80; do
  echo "building with -arch=$a ..."
  if nvcc -O3 -std=c++17 -arch=$a -lineinfo -Xptxas -v -I "$build" -o "$build/attn_bench" \
      "$here/attn_bench.cu" > "$out/build_$a.log" 2>&1; then
    arch=$a
    break
  fi
  echo "  build with $a failed; log: $out/build_$a.log" >&2
  grep -E "error" "$out/build_$a.log" | head -20 >&2 || true
done
[ -n "$arch" ] || { echo "error: attn_bench did not build (see $out/build_*.log)" >&2; exit 3; }
# Registers / spills of the kernels under test.
grep -E -A2 "attention_(prefill_tc|decode_split)" "$out/build_$arch.log" | grep -E "Compiling|registers|spill" > "$out/ptxas.txt" || true
cat "$out/ptxas.txt"

set +e
"$build/attn_bench" "$out"
rc=$?
set -e
echo "exit status $rc; results in $out"
exit $rc
