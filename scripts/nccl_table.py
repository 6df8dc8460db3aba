#!/usr/bin/env python3
"""Writes calibration/nccl/allgather_reducescatter.csv from aiconfigurator's nccl-tests table of the
RTX PRO 6000 Server Edition (calibration/public-runs/aiconfigurator/, its MANIFEST.tsv names the
commit): NCCL's all-gather and reduce-scatter in half precision on 2, 4 and 8 GPUs of one node,
the collectives of vLLM's default `allgather_reducescatter` exchange between data-parallel ranks.
Needs pyarrow. Usage: python3 scripts/nccl_table.py

nccl-tests sizes both by the whole buffer (`message_size` elements: all-gather's output,
reduce-scatter's input), so each rank's share is message_size x 2 bytes / GPUs; `latency` is
the out-of-place time per iteration, ms.
"""
import os

import pyarrow.parquet as pq

HERE = os.path.join(os.path.dirname(__file__), "..")
SOURCES = {
    "rtx-pro-6000": "calibration/public-runs/aiconfigurator/ai-dynamo-aiconfigurator/rtx_pro_6000_server/comm/nccl/2.29.2/nccl_perf.parquet",
}
OUT = os.path.join(HERE, "calibration", "nccl", "allgather_reducescatter.csv")

times = {}
for gpu, path in SOURCES.items():
    for r in pq.read_table(os.path.join(HERE, path)).to_pylist():
        if r["nccl_dtype"] != "half" or r["op_name"] not in ("all_gather", "reduce_scatter"):
            continue
        key = (gpu, r["num_gpus"], r["message_size"] * 2 // r["num_gpus"])
        times.setdefault(key, {})[r["op_name"]] = r["latency"] * 1000.0
with open(OUT, "w") as f:
    f.write("# NCCL all-gather and reduce-scatter (nccl-tests, half, one node), mean time per iteration, us.\n")
    f.write("# From ai-dynamo/aiconfigurator @095f58a51c4ca8e61b66ec108d86f223f8d559ce (Apache-2.0),\n")
    f.write("# systems/data/rtx_pro_6000_server/comm/nccl/2.29.2/nccl_perf.parquet (NCCL 2.29.2, RTX PRO 6000\n")
    f.write("# Blackwell Server Edition, PCIe). bytes_per_rank: each rank's share of the whole buffer.\n")
    f.write("# Regenerate: python3 scripts/nccl_table.py\n")
    f.write("gpu,gpus,bytes_per_rank,all_gather_us,reduce_scatter_us\n")
    for (gpu, gpus, share), ops in sorted(times.items()):
        if len(ops) == 2:
            f.write(f"{gpu},{gpus},{share},{ops['all_gather']:.3f},{ops['reduce_scatter']:.3f}\n")
