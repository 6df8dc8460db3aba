#!/bin/sh
# Regenerates the profiles in this folder from LLMServingSim's profiler bundles (README.md here).
#
#   sh calibration/public-runs/import.sh PATH/TO/public-runs
#
# PATH/TO/public-runs is a copy of the recorded-runs collection whose MANIFEST.tsv names each
# file's repository and commit (casys-kaist/LLMServingSim @5daddb2, MIT): the profiles'
# provenance is read from it. servesim runs through cargo's release build, or the binary that
# $SERVESIM names.
set -eu
cd "$(dirname "$0")/../.."
perf="$1/casys-kaist-LLMServingSim/profiler/perf"
here=calibration/public-runs
servesim() {
    if [ -n "${SERVESIM:-}" ]; then "$SERVESIM" "$@"; else cargo run --release --quiet -- "$@"; fi
}
servesim calibrate import --from llmservingsim "$perf/RTX4090/meta-llama/Llama-3.1-8B" \
    --gpu "$here/rtx-4090.toml" --out "$here/rtx-4090--llama-3.1-8b--vllm-0.19.0.csv.zst"
servesim calibrate import --from llmservingsim "$perf/RTXPRO6000/meta-llama/Llama-3.1-8B" \
    --gpu "$here/rtx-pro-6000.toml" --out "$here/rtx-pro-6000--llama-3.1-8b--vllm-0.19.0.csv.zst"
# TP 2: the profiler ran one GPU, so the all-reduce is aiconfigurator's timing of vLLM 0.19.0's on
# two RTX PRO 6000 Server Edition GPUs (aiconfigurator/, its MANIFEST.tsv and LICENSE).
servesim calibrate import --from llmservingsim "$perf/RTXPRO6000/Qwen/Qwen3-32B" \
    --gpu "$here/rtx-pro-6000.toml" --model "$here/models/Qwen3-32B.json" \
    --allreduce "$here/aiconfigurator/ai-dynamo-aiconfigurator/rtx_pro_6000_server/comm/vllm/0.19.0/custom_allreduce_perf.parquet" \
    --out "$here/rtx-pro-6000--qwen3-32b--vllm-0.19.0.csv.zst"
servesim calibrate import --from llmservingsim "$perf/RTXPRO6000/Qwen/Qwen3-30B-A3B-Instruct-2507" \
    --gpu "$here/rtx-pro-6000.toml" --model "$here/models/Qwen3-30B-A3B-Instruct-2507.json" \
    --out "$here/rtx-pro-6000--qwen3-30b-a3b-instruct-2507--vllm-0.19.0.csv.zst"
