#!/usr/bin/env python3
"""Predicts the MLPerf v5.1 runs of the training set (scenarios/public-runs/mlperf51-*.toml) with
the engine profiles as they stand, and writes the signed errors as a markdown table.

    python3 scripts/mlperf_table.py SERVESIM OUT.md SCENARIO...

Runs `SERVESIM validate` on each scenario and reads its comparison lines (metric, recorded,
simulated, error). Nothing is fitted here: each run is predicted by the profile of its engine
release, fitted (or not) elsewhere (scripts/accuracy.sh).
"""

import os
import re
import subprocess
import sys

COLUMNS = [
    ("output_throughput", "output tok/s"),
    ("mean_ttft_ms", "TTFT mean"),
    ("p99_ttft_ms", "TTFT p99"),
    ("mean_tpot_ms", "TPOT mean"),
    ("p99_tpot_ms", "TPOT p99"),
]


def compare(servesim, scenario):
    """{metric: (recorded, simulated)} for the scenario's one recorded point."""
    out = subprocess.run([servesim, "validate", scenario], check=True, capture_output=True, text=True).stdout
    values = {}
    for line in out.splitlines():
        m = re.match(r"^  (\w+)\s+([-\d.]+)\s+([-\d.]+)\s+[-\d.]+%$", line)
        if m:
            values[m.group(1)] = (float(m.group(2)), float(m.group(3)))
    return values


def label(scenario):
    """`H200 x8 vLLM 0.9.2 fp8_dyn server` from the run id."""
    run = os.path.basename(scenario)[:-len(".toml")]
    m = re.match(r"mlperf51-krai-\w+?_(h100|h200)_x(\d+)_(vllm|sglang)_(\d)(\d)(\d)-llama3_1-70b-(fp8_\w+?)-(\w+)$", run)
    gpu, n, engine, a, b, c, weights, mode = m.groups()
    engine = {"vllm": "vLLM", "sglang": "SGLang"}[engine]
    return run, f"{gpu.upper()} ×{n}", f"{engine} {a}.{b}.{c}", weights, mode


def cell(values, key):
    if key not in values:
        return "–"
    recorded, simulated = values[key]
    error = (simulated - recorded) / recorded * 100
    return f"{recorded:,.1f} → {simulated:,.1f} ({error:+.1f}%)"


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    servesim, out, scenarios = sys.argv[1], sys.argv[2], sys.argv[3:]
    lines = ["| GPUs | engine | weights | scenario | " + " | ".join(name for _, name in COLUMNS) + " |",
             "| --- | --- | --- | --- |" + " ---: |" * len(COLUMNS)]
    for scenario in sorted(scenarios):
        values = compare(servesim, scenario)
        run, gpus, engine, weights, mode = label(scenario)
        lines.append(f"| {gpus} | {engine} | {weights} | {mode} | "
                     + " | ".join(cell(values, key) for key, _ in COLUMNS) + " |")
    with open(out, "w") as f:
        f.write("# MLPerf v5.1 runs predicted (recorded → simulated, signed error)\n\n")
        f.write("Written by `scripts/accuracy.sh` (`scripts/mlperf_table.py`); see [accuracy](accuracy.md). Each row is\n"
                "`scenarios/public-runs/mlperf51-krai-<system>-llama3_1-70b-<weights>-<scenario>.toml`.\n\n")
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
