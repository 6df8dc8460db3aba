#!/bin/sh
# Regenerates the chart reports under reports/ (servesim report): the quickstart sweep, and
# run-002's 80-token series (vLLM 0.6.3, Llama-3.1-405B, 8 x MI300X) against its recorded results.
#
#   sh reports/regenerate-charts.sh
#
# servesim runs through cargo, so the release binary is found wherever cargo builds it
# (CARGO_TARGET_DIR and cargo's config included) and is rebuilt first if the sources changed.
# The simulated runs go to target/report-runs/ in the repository, whatever the target directory:
# index.html names its run directories, so their path must be the same every time for the
# reports to be byte-identical from one regeneration to the next.
set -eu
cd "$(dirname "$0")/.."
servesim() { cargo run --release --quiet -- "$@"; }
runs=target/report-runs
rm -rf "$runs"

servesim simulate scenarios/quickstart.toml --out "$runs/quickstart" > /dev/null
servesim report "$runs/quickstart" --out reports/quickstart

servesim simulate scenarios/recorded/run-002-vllm-80.toml --report-layout legacy --out "$runs/run-002-vllm-80" > /dev/null
servesim report "$runs/run-002-vllm-80" --recorded tests/data/recorded/run-002-vllm-405b.txt --out reports/recorded-charts
