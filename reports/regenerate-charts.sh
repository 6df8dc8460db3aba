#!/bin/sh
# Regenerates the chart reports under reports/ (servesim report): the quickstart sweep, and
# run-002's 80-token series (vLLM 0.6.3, Llama-3.1-405B, 8 x MI300X) against its recorded results.
#
#   sh reports/regenerate-charts.sh
#
# The simulated runs go to target/report-runs/ (a fixed path, so index.html names the same run
# directories every time); the reports are byte-identical from one regeneration to the next.
set -eu
cd "$(dirname "$0")/.."
cargo build --release --quiet
bin=target/release/servesim
runs=target/report-runs
rm -rf "$runs"

"$bin" simulate scenarios/quickstart.toml --out "$runs/quickstart" > /dev/null
"$bin" report "$runs/quickstart" --out reports/quickstart

"$bin" simulate scenarios/recorded/run-002-vllm-80.toml --report-layout legacy --out "$runs/run-002-vllm-80" > /dev/null
"$bin" report "$runs/run-002-vllm-80" --recorded tests/data/recorded/run-002-vllm-405b.txt --out reports/recorded-charts
