#!/bin/sh
# Regenerates the bundled profiles in this folder from aiconfigurator's published per-op tables.
#
#   sh calibration/public/import.sh PATH/TO/public-measurements
#
# PATH/TO/public-measurements is a copy of the measurement collection whose MANIFEST.tsv names
# each file's repository and commit (here: ai-dynamo/aiconfigurator @095f58a, Apache-2.0).
# servesim runs through cargo, so the release binary is found wherever cargo builds it.
set -eu
cd "$(dirname "$0")/../.."
data="$1/ai-dynamo-aiconfigurator/aic-core/src/aiconfigurator_core/systems/data"
servesim() { cargo run --release --quiet -- "$@"; }
for gpu in h100_sxm h200_sxm b200_sxm a100_sxm; do
    version=$(ls "$data/$gpu/gemm/vllm" | sort -V | tail -n 1)
    name=$(echo "$gpu" | sed 's/_sxm/-sxm/; s/a100-sxm/a100-80g-sxm/')
    servesim calibrate import --from aiconfigurator "$data/$gpu" --engine vllm \
        --out "calibration/public/$name--vllm-$version.csv.zst"
done
# Each profile's packed index (`*.index`, what a run loads) is rebuilt from its new CSV.
SERVESIM_BLESS=1 cargo test --lib --quiet bundled
