#!/usr/bin/env bash
# The GPU check of issue 37, in one run that fits in 8 minutes on one H100 or H200:
#   1. the attention kernels (kernels/*.cu) against each other and timed: the tensor-core
#      prefill and split-KV decode kernels beside the CUDA-core ones (scripts/gpu/run.sh);
#   2. a calibration of one model's shapes (Llama-3.1-8B, TP 1, 2 minutes) and its comparison
#      with the bundled profile of the same GPU on the shapes both hold (calibrate prints it);
#   3. `validate --engine --device cuda:0`: the CUDA engine against its twin.
# Writes everything under OUT (default target/gpu-check) and a summary, report.md, that the docs
# quote.
#
# The GPU machine needs the driver, CUDA's NVRTC and cuBLASLt libraries (found by ldconfig or
# LD_LIBRARY_PATH) and nvcc; it needs no Rust: SERVESIM names a servesim binary built elsewhere
# (default target/release/servesim).
#
#   SERVESIM=target/release/servesim scripts/gpu-check.sh target/gpu-check
set -uo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
out="${1:-$here/target/gpu-check}"
servesim="${SERVESIM:-$here/target/release/servesim}"
mkdir -p "$out"
report="$out/report.md"
start=$(date +%s)
status=0

{
  echo "# GPU check, $(date -u +%Y-%m-%d)"
  echo
  echo '```'
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 || echo "nvidia-smi failed"
  echo '```'
} >"$report"

step() { # name, command...
  local name="$1"; shift
  local t0=$(date +%s)
  "$@" >"$out/$name.log" 2>&1
  local rc=$?
  echo "- $name: exit $rc, $(( $(date +%s) - t0 )) s (log: $name.log)" >>"$report"
  [ $rc -eq 0 ] || status=1
  return $rc
}

echo >>"$report"
echo "## Steps" >>"$report"
export PATH="$PATH:/usr/local/cuda/bin"
step attention bash "$here/scripts/gpu/run.sh" "$out/attention"
[ -x "$servesim" ] || { echo "- servesim binary not found at $servesim" >>"$report"; exit 1; }
step calibrate "$servesim" calibrate --device cuda:0 --model llama-3.1-8b --tp 1 --budget-minutes 2 \
  --out "$out/calibration/gpu.csv"
step validate-engine "$servesim" validate --engine --device cuda:0 --random-weights small \
  --input-len 32 --output-len 16 --concurrency 1,4 --rounds 2 --poisson-load 0.5 \
  --max-num-seqs 8 --max-num-batched-tokens 128 --num-gpu-blocks 256 --calibration-minutes 0.5 \
  --out "$out/validate-engine"

{
  echo
  echo "## Attention kernels"
  cat "$out/attention/results.md" 2>/dev/null || echo "(no results)"
  echo
  echo "## Calibration (the comparison with the bundled profile, and leave-one-out)"
  echo '```'
  grep -iE "agree|bundled|leave|median|measured|shapes" "$out/calibrate.log" | head -40
  echo '```'
  echo
  echo "## validate --engine --device cuda:0"
  echo '```'
  tail -40 "$out/validate-engine.log"
  echo '```'
  echo
  echo "Total: $(( $(date +%s) - start )) s"
} >>"$report"
cat "$report"
exit $status
