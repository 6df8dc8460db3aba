#!/usr/bin/env bash
# The GPU check of issue 37, one run that fits in 8 minutes on one H100 or H200 (the parts'
# timeouts add up to 480 s):
#   1. the CUDA tests with SERVESIM_REQUIRE_GPU=1 (tests/cuda_kernels.rs, tests/cuda_forward.rs:
#      every kernel against an f64 reference, the tensor-core and split-KV attention against it
#      and beside the CUDA-core kernels, the CUDA forward pass against the CPU one, eagerly and
#      from CUDA graphs), as prebuilt test binaries;
#   2. the attention kernels timed (scripts/gpu/run.sh, needs nvcc): tensor-core prefill
#      TFLOP/s at a 4k prompt against the BF16 peak, split-KV decode GB/s at 32k against HBM;
#   3. a calibration of Llama-3.1-8B's shapes at TP 1 by each timing method: `graph` (replayed in
#      CUDA graphs, refining the grid towards leave-one-out medians of 5% GEMM / 10% attention)
#      and `flush` (one launch after an L2 flush); each compares its GEMMs with the bundled
#      profile of the same GPU on the shapes both hold (median ratio);
#   4. `validate --engine --device cuda:0`: the CUDA engine (decode steps in CUDA graphs, steps
#      timed by parts) against its twin.
# Every part runs under its own timeout; the report (OUT/report.md, which the docs quote) is
# written whatever fails, with each part's exit status and time, and the script exits non-zero
# when any part failed.
#
# The GPU machine needs the driver, NVRTC and cuBLASLt (found by ldconfig or LD_LIBRARY_PATH) and,
# for part 2, nvcc; it needs no Rust. Build on the development machine first:
#
#   cargo build --release && cargo test --release --no-run --test cuda_kernels --test cuda_forward
#   SERVESIM=target/release/servesim scripts/gpu-check.sh target/gpu-check
#
# TEST_BINS overrides where the test binaries are looked for (default: target/release/deps).
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
out="${1:-$here/target/gpu-check}"
mkdir -p "$out"
out="$(cd "$out" && pwd)"
servesim="${SERVESIM:-$here/target/release/servesim}"
test_bins="${TEST_BINS:-$here/target/release/deps}"
report="$out/report.md"
steps="$out/steps.md"
start=$(date +%s)
status=0
: >"$steps"
export PATH="$PATH:/usr/local/cuda/bin"

write_report() {
  {
    echo "# GPU check, $(date -u +%Y-%m-%d)"
    echo
    echo '```'
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 || echo "nvidia-smi failed"
    echo '```'
    echo
    echo "## Steps"
    cat "$steps"
    echo
    echo "## CUDA tests"
    echo '```'
    grep -hE "^test |test result|running on|worst relative|SKIPPED|panicked" "$out"/tests-*.log 2>/dev/null | head -60 || true
    echo '```'
    echo
    echo "## Attention kernels"
    cat "$out/attention/results.md" 2>/dev/null || echo "(no results)"
    for method in graph flush; do
      echo
      echo "## Calibration, $method timing (bundled-profile comparison, leave-one-out)"
      echo '```'
      grep -hiE "calibrating|measured|launch floor|leave-one-out|refined|against the bundled|bf16:|fp16:|fp8:|no bundled|budget" \
        "$out/calibrate-$method.log" 2>/dev/null | head -40 || tail -5 "$out/calibrate-$method.log" 2>/dev/null || true
      echo '```'
    done
    echo
    echo "## validate --engine --device cuda:0"
    echo '```'
    tail -45 "$out/validate-engine.log" 2>/dev/null || true
    echo '```'
    echo
    echo "Total: $(( $(date +%s) - start )) s"
  } >"$report"
}
trap write_report EXIT

# step NAME SECONDS COMMAND...: runs COMMAND under a timeout, logs to NAME.log, records the exit
# status and time; a failure marks the run failed but the next part still runs.
step() {
  local name="$1" limit="$2"; shift 2
  local t0 rc=0
  t0=$(date +%s)
  timeout --kill-after=10 "$limit" "$@" >"$out/$name.log" 2>&1 || rc=$?
  local note=""
  [ "$rc" -eq 124 ] && note=" (timed out after ${limit} s)"
  echo "- $name: exit $rc$note, $(( $(date +%s) - t0 )) s (log: $name.log)" >>"$steps"
  [ "$rc" -eq 0 ] || status=1
  return 0
}

# 1. CUDA tests.
for t in cuda_kernels cuda_forward; do
  bin="$(ls -t "$test_bins"/"$t"-* 2>/dev/null | grep -v '\.d$' | head -1 || true)"
  if [ -n "$bin" ] && [ -x "$bin" ]; then
    step "tests-$t" 90 env SERVESIM_REQUIRE_GPU=1 SERVESIM_REQUIRE_NVRTC=1 "$bin" --test-threads 1
  else
    echo "- tests-$t: no test binary under $test_bins (cargo test --release --no-run --test $t)" >>"$steps"
    status=1
  fi
done

# 2. Attention kernels, timed.
if command -v nvcc >/dev/null; then
  step attention 60 bash "$here/scripts/gpu/run.sh" "$out/attention"
else
  echo "- attention: nvcc not found; kernels not timed" >>"$steps"
  status=1
fi

if [ ! -x "$servesim" ]; then
  echo "- servesim binary not found at $servesim: calibration and validation not run" >>"$steps"
  exit 1
fi

# 3. Calibration by each method (the budget bounds the grid and the refinement together).
step calibrate-graph 110 "$servesim" calibrate --device cuda:0 --model llama-3.1-8b --tp 1 --grid quick \
  --timing-method graph --budget-minutes 1.4 --loo-target 5,10 --out "$out/calibration/graph.csv"
step calibrate-flush 60 "$servesim" calibrate --device cuda:0 --model llama-3.1-8b --tp 1 --grid quick \
  --timing-method flush --budget-minutes 0.7 --out "$out/calibration/flush.csv"

# 4. The CUDA engine against its twin.
step validate-engine 70 "$servesim" validate --engine --device cuda:0 --random-weights small \
  --input-len 32 --output-len 16 --concurrency 1,4 --rounds 2 --poisson-load 0.5 \
  --max-num-seqs 8 --max-num-batched-tokens 128 --num-gpu-blocks 256 --calibration-minutes 0.5 \
  --out "$out/validate-engine"

exit $status
