#!/usr/bin/env python3
"""Predicts recorded runs kept out of an engine-time fit with the values that fit found, and writes
the signed errors as a markdown table.

    python3 scripts/predicted_table.py SERVESIM OUT.md FITTED.toml SCENARIO...

FITTED.toml is the profile `servesim fit --out` wrote: its `[cost]` values of the parameters named
in `provenance.fitted_parameters` are passed to `SERVESIM validate` as `--set cost.NAME=VALUE`, so
the runs are predicted by the fit just made whether or not the binary was rebuilt with it. Nothing
is fitted here.
"""

import os
import re
import statistics
import subprocess
import sys
import tomllib

COLUMNS = [("output_throughput", "output throughput"), ("mean_tpot_ms", "mean TPOT"), ("mean_ttft_ms", "mean TTFT")]


def fitted_sets(path):
    with open(path, "rb") as f:
        profile = tomllib.load(f)
    sets = []
    for name in profile["provenance"]["fitted_parameters"]:
        sets += ["--set", f"cost.{name}={profile['cost'][name]:.4g}"]
    return sets


def errors(servesim, sets, scenario):
    """{metric: signed error %} for the scenario's recorded point."""
    out = subprocess.run([servesim, "validate", *sets, scenario], check=True, capture_output=True, text=True).stdout
    found = {}
    for line in out.splitlines():
        m = re.match(r"^  (\w+)\s+[-\d.]+\s+[-\d.]+\s+([-\d.]+)%$", line)
        if m:
            found[m.group(1)] = float(m.group(2))
    return found


def main():
    if len(sys.argv) < 5:
        sys.exit(__doc__)
    servesim, out, fitted, scenarios = sys.argv[1], sys.argv[2], sys.argv[3], sorted(sys.argv[4:])
    sets = fitted_sets(fitted)
    rows = [(os.path.basename(s)[: -len(".toml")], errors(servesim, sets, s)) for s in scenarios]
    lines = ["| run | " + " | ".join(name for _, name in COLUMNS) + " |", "| --- |" + " ---: |" * len(COLUMNS)]
    for run, found in rows:
        lines.append(f"| `{run}` | " + " | ".join(f"{found[k]:+.1f}%" if k in found else "—" for k, _ in COLUMNS) + " |")
    medians = []
    for key, _ in COLUMNS:
        values = [abs(found[key]) for _, found in rows if key in found]
        medians.append(f"{statistics.median(values):.1f}% ({len(values)})" if values else "—")
    lines.append("| **median absolute** | " + " | ".join(medians) + " |")
    with open(out, "w") as f:
        f.write("# Runs predicted, not fitted (signed error, simulated against recorded)\n\n")
        f.write("Written by `scripts/accuracy.sh` (`scripts/predicted_table.py`) with the engine time fitted to the other\n"
                f"runs ({' '.join(sets[1::2])}); see [accuracy](accuracy.md).\n\n")
        f.write("\n".join(lines) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
