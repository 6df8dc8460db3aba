#!/bin/sh
# Rows of docs/moe.md's DeepSeek-V3 data-parallel table: mean TTFT / mean TPOT (ms), output tok/s.
bin=${1:-target/release/servesim}
row() {
  label=$1; shift
  $bin simulate scenarios/deepseek-v3-dp.toml "$@" 2>/dev/null | awk -v label="$label" '
    /Mean TTFT/ {ttft=$4} /Mean TPOT/ {tpot=$4} /Output token throughput/ {tput=$5}
    /P99 ITL/ {cells = cells sprintf(" %.0f / %.1f, %d |", ttft, tpot, tput)}
    END {print "| " label " |" cells}'
}
row "TP 8 (vLLM's default)" --set engine.tensor_parallel=8 --set engine.data_parallel=1 --set engine.expert_parallel=false
row "TP 8, EP" --set engine.tensor_parallel=8 --set engine.data_parallel=1
row "TP 2 × DP 4, EP" --set engine.tensor_parallel=2 --set engine.data_parallel=4
row "TP 1 × DP 8, EP"
row "the same, \`deepep_low_latency\`" --set engine.all2all_backend=deepep_low_latency
row "the same, \`deepep_high_throughput\`" --set engine.all2all_backend=deepep_high_throughput
