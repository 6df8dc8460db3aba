#!/usr/bin/env python3
"""Runs a servesim plan as shards on a Ray cluster, then merges them.

    python3 scripts/plan_ray.py plans/llama70b-chat.toml --shards 8 --out runs/plan-llama70b

Each shard is one Ray task that runs `servesim plan PLAN --shard K/N --out DIR/shards/K`; the
driver then runs `servesim plan merge` over the shard directories, which writes exactly what an
unsharded `servesim plan PLAN --out DIR` writes. Without RAY_ADDRESS, ray.init() starts a local
cluster on this machine; on a real cluster the same driver runs unchanged, provided every node
sees the servesim binary, the plan file and DIR at the same paths (a shared filesystem). Each
task runs in the driver's working directory, so the plan and DIR are passed on as given: the
outputs name the plan as an unsharded run from the same directory names it, not by an absolute
path of the driver's machine.
"""

import argparse
import os
import subprocess
import sys

import ray


@ray.remote
def run_shard(servesim, plan, k, n, out, threads, cwd):
    """One shard, on whichever node Ray picks, in the driver's working directory; returns its
    directory."""
    command = [servesim, "plan", plan, "--shard", f"{k}/{n}", "--out", out]
    if threads:
        command += ["--threads", str(threads)]
    done = subprocess.run(command, capture_output=True, text=True, cwd=cwd)
    if done.returncode != 0:
        raise RuntimeError(f"shard {k}/{n} failed ({done.returncode}): {done.stderr.strip()}")
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("plan", help="plan file (TOML)")
    parser.add_argument("--shards", type=int, required=True, help="number of shards (Ray tasks)")
    parser.add_argument("--out", required=True, help="directory for the merged outputs; shards go to OUT/shards/K")
    parser.add_argument("--servesim", default="servesim", help="the servesim binary (default: servesim on the PATH)")
    parser.add_argument("--threads", type=int, default=1, help="threads per shard (default 1: one task per core)")
    args = parser.parse_args()
    if args.shards < 1:
        parser.error("--shards must be at least 1")

    plan = args.plan
    out = args.out
    cwd = os.getcwd()
    shard_dirs = [os.path.join(out, "shards", str(k)) for k in range(1, args.shards + 1)]
    ray.init(address=os.environ.get("RAY_ADDRESS"), include_dashboard=False, log_to_driver=False)
    try:
        tasks = [
            run_shard.options(num_cpus=args.threads).remote(args.servesim, plan, k, args.shards, d, args.threads, cwd)
            for k, d in enumerate(shard_dirs, start=1)
        ]
        ray.get(tasks)
    finally:
        ray.shutdown()
    # The merge prints the ranked table and exits as an unsharded plan does (3: no answer).
    merged = subprocess.run([args.servesim, "plan", "merge", *shard_dirs, "--out", out])
    sys.exit(merged.returncode)


if __name__ == "__main__":
    main()
