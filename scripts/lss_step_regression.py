#!/usr/bin/env python3
"""What a step, a running sequence and a prompt token cost, regressed on 1-second counts, for one of
LLMServingSim's recorded runs (its vllm/timeseries.csv) and for simulations of it (`servesim
simulate --out DIR`'s DIR/timeline.csv): each second, 1 s = steps x a + generated tokens x b +
prompt tokens x c, with steps = generated tokens / running sequences. docs/accuracy.md uses it to
tell which kind of step a simulation misprices.

    python3 scripts/lss_step_regression.py ../shared/recorded/public-runs/casys-kaist-LLMServingSim/bench/examples/RTXPRO6000/Qwen3-30B-A3B-Instruct-2507/vllm/timeseries.csv runs/a3b/timeline.csv
"""
import csv
import sys
from collections import defaultdict


def solve(a, b):
    """Gauss-Jordan with partial pivoting: x with a x = b."""
    n = len(b)
    m = [a[i][:] + [b[i]] for i in range(n)]
    for i in range(n):
        p = max(range(i, n), key=lambda r: abs(m[r][i]))
        m[i], m[p] = m[p], m[i]
        for r in range(n):
            if r != i:
                f = m[r][i] / m[i][i]
                for c in range(i, n + 1):
                    m[r][c] -= f * m[i][c]
    return [m[i][n] / m[i][i] for i in range(n)]


def fit(seconds):
    """(a, b, c) by least squares over seconds with at least 8 running and 50 generated tokens."""
    x = [[g / r, g, p] for g, p, r in seconds if r >= 8 and g >= 50]
    a = [[sum(v[i] * v[j] for v in x) for j in range(3)] for i in range(3)]
    return solve(a, [sum(v[i] for v in x) for i in range(3)]), len(x)


def recorded(path):
    rows = list(csv.DictReader(open(path)))
    return [(float(rows[i]["gen_throughput"]), float(rows[i]["prompt_throughput"]),
             (int(rows[i]["running"]) + int(rows[i - 1]["running"])) / 2) for i in range(1, len(rows) - 1)]


def simulated(path):
    gen, prompt, running = defaultdict(float), defaultdict(float), defaultdict(dict)
    for r in csv.DictReader(open(path)):
        t = int(float(r["start_s"]))
        gen[t] += int(r["decode_tokens"])
        prompt[t] += int(r["prefill_tokens"])
        running[t][r["replica"]] = int(r["running"])
    ts = sorted(gen)[1:-1]
    return [(gen[t], prompt[t], sum(running[t].values())) for t in ts]


if len(sys.argv) < 2:
    sys.exit(__doc__)
for label, seconds in [("recorded", recorded(sys.argv[1]))] + [(p, simulated(p)) for p in sys.argv[2:]]:
    (a, b, c), n = fit(seconds)
    print(f"{label}: {n} s; a step {a * 1e3:.1f} ms, a running sequence {b * 1e3:.3f} ms, a prompt token {c * 1e6:.1f} us")
