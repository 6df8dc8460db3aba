#!/bin/sh
# Regenerates the bundled profiles in this folder from aiconfigurator's published per-op tables.
#
#   sh calibration/public/import.sh PATH/TO/public-measurements
#
# PATH/TO/public-measurements is a copy of the measurement collection whose MANIFEST.tsv names
# each file's repository and commit (here: ai-dynamo/aiconfigurator @095f58a, Apache-2.0).
# servesim runs through cargo, so the release binary is found wherever cargo builds it.
#
# One profile per GPU and engine: vLLM's on H100, H200, B200 and A100, SGLang's on H100, H200
# and B200 (aiconfigurator publishes no SGLang MLA or DSA tables for A100). Where the GPU's
# folder holds whole-module tables (MLA, DSA, fused MoE, Gated DeltaNet) for the engine's
# version, the import writes them beside the profile (`*.families.csv.zst` and its provenance).
set -eu
cd "$(dirname "$0")/../.."
data="$1/ai-dynamo-aiconfigurator/aic-core/src/aiconfigurator_core/systems/data"
servesim() { cargo run --release --quiet -- "$@"; }
for gpu in h100_sxm h200_sxm b200_sxm a100_sxm; do
    for engine in vllm sglang; do
        if [ "$engine" = sglang ] && [ "$gpu" = a100_sxm ]; then continue; fi
        version=$(ls "$data/$gpu/gemm/$engine" | sort -V | tail -n 1)
        name=$(echo "$gpu" | sed 's/_sxm/-sxm/; s/a100-sxm/a100-80g-sxm/')
        servesim calibrate import --from aiconfigurator "$data/$gpu" --engine "$engine" \
            --out "calibration/public/$name--$engine-$version.csv.zst"
    done
done
# cuBLASLt's per-tensor FP8 GEMMs on the H200 (TRT-LLM's `cublas_scaled_mm` rows), which price SGLang's
# torch._scaled_mm path for per-tensor FP8 checkpoints (src/run/fp8_gemms.rs). The H200's TRT-LLM attention
# table is refused as corrupt, so its GEMM and comm folders are imported alone (with the collection's
# MANIFEST.tsv beside them, which names their source) and cut to the FP8 GEMM rows. The provenance beside
# the cut file was cut to match by hand (dtypes, files, kernels, row counts, method).
tmp=$(mktemp -d)
part=ai-dynamo-aiconfigurator/aic-core/src/aiconfigurator_core/systems/data/h200_sxm
mkdir -p "$tmp/$part/gemm/trtllm" "$tmp/$part/comm"
cp "$1/MANIFEST.tsv" "$tmp/"
cp -r "$1/$part/gemm/trtllm/1.3.0rc20" "$tmp/$part/gemm/trtllm/"
cp -r "$1/$part/comm/trtllm" "$1/$part/comm/nccl" "$tmp/$part/comm/"
servesim calibrate import --from aiconfigurator "$tmp/$part" --engine trtllm --out "$tmp/trtllm.csv.zst"
{ zstd -dc "$tmp/trtllm.csv.zst" | head -n 1; zstd -dc "$tmp/trtllm.csv.zst" | grep '^gemm,,fp8,'; } |
    zstd -19 -q -f -o calibration/public/h200-sxm--trtllm-1.3.0rc20.fp8-gemm.csv.zst
rm -r "$tmp"
# Each profile's packed index (`*.index`, what a run loads) is rebuilt from its new CSV.
SERVESIM_BLESS=1 cargo test --lib --quiet bundled
