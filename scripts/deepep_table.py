#!/usr/bin/env python3
"""Writes calibration/deepep/deepep.csv from aiconfigurator's DeepEP tables (section 1b.4 of
../shared/public-measurements/README.md): dispatch and combine of one MoE layer, µs, per GPU,
shape and tokens per rank. Needs pyarrow. Usage: python3 scripts/deepep_table.py [DATA_DIR]

Low-latency rows are the `ll` table as measured; high-throughput rows are the `normal` table's
at 20 SMs for dispatch and for combine, the SM budget vLLM gives DeepEP
(`DeepEPAll2AllManagerBase.num_sms = 20`, vllm/distributed/device_communicators/all2all.py).
"""
import os
import sys

import pyarrow.parquet as pq

DATA = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
    os.path.dirname(__file__), "..", "..", "shared", "public-measurements", "ai-dynamo-aiconfigurator",
    "aic-core", "src", "aiconfigurator_core", "systems", "data")
VLLM_DEEPEP_SMS = 20
OUT = os.path.join(os.path.dirname(__file__), "..", "calibration", "deepep", "deepep.csv")

rows = []
for gpu in ["h100", "h200", "b200"]:
    folder = os.path.join(DATA, f"{gpu}_sxm", "comm", "sglang", "0.5.12")
    for r in pq.read_table(os.path.join(folder, "wideep_deepep_ll_perf.parquet")).to_pylist():
        assert r["node_num"] == 1
        rows.append((gpu, "low_latency", r["hidden_size"], r["num_experts"], r["num_topk"], r["num_token"],
                     r["dispatch_avg_t_us"], r["combine_avg_t_us"]))
    for r in pq.read_table(os.path.join(folder, "wideep_deepep_normal_perf.parquet")).to_pylist():
        assert r["node_num"] == 1
        if r["dispatch_sms"] != VLLM_DEEPEP_SMS or r["combine_sms"] != VLLM_DEEPEP_SMS:
            continue
        rows.append((gpu, "high_throughput", r["hidden_size"], r["num_experts"], r["num_topk"], r["num_token"],
                     r["dispatch_transmit_us"] + r["dispatch_notify_us"], r["combine_transmit_us"] + r["combine_notify_us"]))
rows.sort(key=lambda r: r[:6])
with open(OUT, "w") as f:
    f.write("# DeepEP dispatch and combine of one MoE layer on one 8-GPU node (EP 8 over NVLink), mean kernel time, us.\n")
    f.write("# From ai-dynamo/aiconfigurator @095f58a51c4ca8e61b66ec108d86f223f8d559ce (Apache-2.0),\n")
    f.write("# systems/data/<gpu>_sxm/comm/sglang/0.5.12/wideep_deepep_{ll,normal}_perf.parquet (DeepEP's own test harness,\n")
    f.write("# uniform random top-k routing, collected 2026-07-31); high_throughput at 20 SMs, vLLM's budget for DeepEP.\n")
    f.write("# num_token: tokens each rank dispatches. Regenerate: python3 scripts/deepep_table.py\n")
    f.write("gpu,kernels,hidden_size,num_experts,num_topk,num_token,dispatch_us,combine_us\n")
    for r in rows:
        f.write(",".join(str(x) if not isinstance(x, float) else f"{x:.3f}" for x in r) + "\n")
print(f"{len(rows)} rows -> {OUT}")
