#!/usr/bin/env python3
"""Writes a servesim scenario for each recorded public run of the training set.

    python3 scripts/public_runs.py ../shared/recorded/public-runs

reads the collection's runs.csv, stages.csv and LLMServingSim's verbatim files, and (re)writes:

    tests/data/public-runs/runs.csv, stages.csv       the collection's facts, copied
    tests/data/public-runs/recorded.json              one vLLM --save-result-like object per run
    tests/data/public-runs/traces/<run>.csv           each run's requests: arrival, lengths, prefix
    tests/data/public-runs/models/<model>/config.json  the configs of models servesim has no preset for
    scenarios/public-runs/<run>.toml                  a scenario per run, [validation] on recorded.json

MLPerf's runs publish no per-request data: their scenarios draw lengths from distributions whose
means are the recorded ones (see mlperf_workload) instead of replaying a trace.

Runs it cannot write a faithful scenario for are listed in scenarios/public-runs/EXCLUDED.md with
the reason. Every choice below that is not in the recorded configuration is an assumption, said
so in the scenario's comments. Re-running on the same input writes the same files.
"""

import csv
import json
import os
import shutil
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(REPO, "tests", "data", "public-runs")
SCENARIOS = os.path.join(REPO, "scenarios", "public-runs")

# Models servesim has a preset for, by Hugging Face id.
PRESETS = {
    "meta-llama/Llama-3.1-8B": "Llama-3.1-8B",
    "meta-llama/Llama-3.1-70B-Instruct": "Llama-3.1-70B",
    "Qwen/Qwen2.5-7B-Instruct": "Qwen2.5-7B",
    "mistralai/Mixtral-8x7B-v0.1": "Mixtral-8x7B",
    "Qwen/Qwen3-30B-A3B-Instruct-2507": "Qwen3-30B-A3B",
    "RedHatAI/Llama-4-Scout-17B-16E-Instruct-FP8-dynamic": "Llama-4-Scout",
}

# The others' config.json keys servesim reads, from each repository's config.json on the Hub.
CONFIGS = {
    "meta-llama/Llama-2-7b-hf": dict(num_hidden_layers=32, hidden_size=4096, num_attention_heads=32, num_key_value_heads=32,
                                     intermediate_size=11008, vocab_size=32000, max_position_embeddings=4096, torch_dtype="float16"),
    "meta-llama/Llama-2-70b-hf": dict(num_hidden_layers=80, hidden_size=8192, num_attention_heads=64, num_key_value_heads=8,
                                      intermediate_size=28672, vocab_size=32000, max_position_embeddings=4096, torch_dtype="float16"),
    "codellama/CodeLlama-34b-Instruct-hf": dict(num_hidden_layers=48, hidden_size=8192, num_attention_heads=64, num_key_value_heads=8,
                                                intermediate_size=22016, vocab_size=32000, max_position_embeddings=16384, torch_dtype="bfloat16"),
    "mistralai/Mistral-Nemo-Instruct-2407": dict(num_hidden_layers=40, hidden_size=5120, num_attention_heads=32, num_key_value_heads=8,
                                                 head_dim=128, intermediate_size=14336, vocab_size=131072,
                                                 max_position_embeddings=1024000, torch_dtype="bfloat16"),
    "01-ai/Yi-34B": dict(num_hidden_layers=60, hidden_size=7168, num_attention_heads=56, num_key_value_heads=8,
                         intermediate_size=20480, vocab_size=64000, max_position_embeddings=4096, torch_dtype="bfloat16"),
    "Qwen/Qwen3-32B": dict(num_hidden_layers=64, hidden_size=5120, num_attention_heads=64, num_key_value_heads=8, head_dim=128,
                           intermediate_size=25600, vocab_size=151936, max_position_embeddings=40960, torch_dtype="bfloat16",
                           tie_word_embeddings=False),
}

# GPUs servesim has no preset for: datasheet figures, as [hardware] keys.
CUSTOM_GPUS = {
    "NVIDIA GeForce RTX 4090 (24 GB)": (
        "RTX-4090",
        "NVIDIA Ada architecture whitepaper (RTX 4090): FP16/BF16 tensor 165.2 TFLOPS dense with FP32 accumulate, "
        "FP8 330.3; 24 GB GDDR6X at 1,008 GB/s; PCIe Gen4 x16, 32 GB/s per direction",
        dict(peak_tflops_16bit=165.2, peak_tflops_fp8=330.3, memory_gib=23.99, memory_bandwidth_gbps=1008.0, interconnect_gbps=32.0),
    ),
    "NVIDIA RTX PRO 6000 Blackwell Server Edition (96 GB)": (
        "RTX-PRO-6000",
        "NVIDIA RTX PRO 6000 Blackwell datasheet: 4,000 AI TOPS (FP4, sparse), so BF16 500 and FP8 1,000 TFLOPS dense; "
        "96 GB GDDR7 at 1,792 GB/s; PCIe Gen5 x16, 64 GB/s per direction",
        dict(peak_tflops_16bit=500.0, peak_tflops_fp8=1000.0, memory_gib=95.59, memory_bandwidth_gbps=1792.0, interconnect_gbps=64.0),
    ),
}

PRESET_GPUS = {"NVIDIA H100 80GB HBM3 (SXM)": "H100-SXM", "NVIDIA H100-SXM-80GB": "H100-SXM", "NVIDIA H200-SXM-141GB": "H200"}

# Kernel profiles of the very GPU, model and vLLM release (LLMServingSim's profiler, imported in
# calibration/public-runs/): an RTX GPU has no bundled profile, and the roofline would guess.
LSS_PROFILES = {
    "lss-rtx4090-llama31-8b-tp1-s256": "rtx-4090--llama-3.1-8b--vllm-0.19.0.csv.zst",
    "lss-rtx4090-llama31-8b-tp1-s128": "rtx-4090--llama-3.1-8b--vllm-0.19.0.csv.zst",
    "lss-rtxpro6000-llama31-8b-tp1": "rtx-pro-6000--llama-3.1-8b--vllm-0.19.0.csv.zst",
    "lss-rtxpro6000-qwen3-32b-tp2": "rtx-pro-6000--qwen3-32b--vllm-0.19.0.csv.zst",
    "lss-rtxpro6000-qwen3-30b-a3b-dp2ep2": "rtx-pro-6000--qwen3-30b-a3b-instruct-2507--vllm-0.19.0.csv.zst",
}

# LLMServingSim's runs: where each run's files are, relative to the collection.
LSS_FILES = {
    "lss-rtx4090-llama31-8b-tp1-s256": ("bench/examples/RTX4090/Llama-3.1-8B/vllm", "workloads/sharegpt-llama-3.1-8b-300-sps10.jsonl"),
    "lss-rtx4090-llama31-8b-tp1-s128": ("history-5bae11f/bench/results/rtx4090-llama8b-tp1", "workloads/sharegpt-llama-3.1-8b-300-sps10.jsonl"),
    "lss-rtxpro6000-llama31-8b-tp1": ("bench/examples/RTXPRO6000/Llama-3.1-8B/vllm", "workloads/sharegpt-llama-3.1-8b-300-sps10.jsonl"),
    "lss-rtxpro6000-qwen3-32b-tp2": ("bench/examples/RTXPRO6000/Qwen3-32B/vllm", "workloads/sharegpt-qwen3-32b-300-sps10.jsonl"),
    "lss-rtxpro6000-qwen3-30b-a3b-dp2ep2": ("bench/examples/RTXPRO6000/Qwen3-30B-A3B-Instruct-2507/vllm",
                                            "workloads/sharegpt-qwen3-30b-a3b-300-sps10.jsonl"),
}

# The shared-prefix profiles of inference-perf the isim and s2r runs used (runs.csv notes).
def profile_params(text):
    """(system prompts, users per prompt, system_prompt_len, question_len, output_len) from a notes text."""
    import re
    m = re.search(r"(\d+) system prompts x (\d+) users, system_prompt_len=(\d+), question_len=(\d+)(?:, output_len=(\d+))?", text)
    if not m:
        return None
    groups, users, system, question, output = m.groups()
    return int(groups), int(users), int(system), int(question), int(output) if output else None


def number(text):
    try:
        return float(text)
    except (TypeError, ValueError):
        return None


def excluded_reason(row):
    run, model = row["run_id"], row["model"]
    if run.startswith("mlperf51"):
        if row["gpu"] not in PRESET_GPUS:
            return ("ROCm vLLM on MI300X: no kernel table was published for it, and the MI300X correction "
                    "(calibration/transfer/mi300x.toml) was fitted on V0 and TGI, not on this build")
        if row["engine"].startswith("SGLang") and not SGLANG_POLICY:
            return "SGLang 0.4.9: this build has no policy \"sglang\" to simulate it with"
        if not row["ttft_p99_ms"] and not row["run_id"].endswith("-offline"):
            return "no latency recorded"
    if number(row["failed"]) and number(row["failed"]) > 0.1 * number(row["num_requests"]):
        return (f"overload: {row['failed']} of {row['num_requests']} requests timed out; the source excludes it "
                "from latency fits (preemption cascades under KV pressure), and servesim does not model the client's timeout")
    return None


# MLPerf v5.1's llama2-70b task set: 24,576 OpenOrca samples. Its prompts' token counts are not in
# the result files; the sampled dataset's are, in the HBFSim repository's digest-checked record of
# that file (FlashLab-MBZUAI/HBFSim validation/calibration/h100-llama2-70b-calibration-protocol.json
# at 96cf1b37cd60e8fabb77967a591cf60edb8d1f23, of
# open_orca_gpt4_tokenized_llama.sampled_24576.pkl.gz, sha256 ec34d70f...): 48 to 1,021 tokens,
# 5,463,976 in all, counted by the Llama 2 tokenizer with the Llama 2 chat template.
OPENORCA_INPUT = dict(min=48, max=1021, mean=5463976 / 24576)
# Loadgen's limit on generated tokens (max 1024 per MLPerf's rules, runs.csv).
MLPERF_MAX_OUTPUT = 1024
# Prompts: only the minimum, maximum and mean are known, not the spread: drawn log-normal with a
# standard deviation equal to the mean (an assumption, said in each scenario).
MLPERF_LENGTH_CV = 1.0


def mlperf_output_cv(collection):
    """The outputs' spread, from loadgen's latency percentiles in the facts file (§4 of the
    collection's README): a query's end-to-end latency is its TTFT plus (n - 1) times its time per
    output token, and TPOT varies far less than n (p90/p50 of TPOT about 1.1, of latency 1.8), so
    n's percentiles are (latency - mean TTFT) / mean TPOT + 1. Over the server and interactive runs
    (the same greedy Llama-3.1-70B on the same 24,576 prompts, whatever the engine) the ratio of the
    90th to the 50th percentile is pooled by its median; a log-normal with that ratio has
    sigma = ln(ratio) / 1.2816 and std / mean = sqrt(exp(sigma^2) - 1)."""
    import math
    facts = {}
    with open(os.path.join(collection, "facts", "mlperf-v5.1-krai_summary.csv"), newline="") as f:
        for run, key, value, *_ in csv.reader(f):
            facts.setdefault(run, {})[key] = value
    ratios = []
    for run, f in sorted(facts.items()):
        if run.endswith("-offline") or "detail:result_time_to_output_token_mean" not in f:
            continue
        get = lambda key: float(f["detail:" + key])
        ttft, tpot = get("result_first_token_mean_latency_ns"), get("result_time_to_output_token_mean")
        n = lambda p: (get(f"result_{p}_percentile_latency_ns") - ttft) / tpot + 1
        ratios.append(n("90.00") / n("50.00"))
    ratio = sorted(ratios)[len(ratios) // 2]
    sigma = math.log(ratio) / 1.2816
    return round(math.sqrt(math.exp(sigma ** 2) - 1), 2)


MLPERF_OUTPUT_CV = None  # set by main() from the collection's facts
# SGLang's runs need the scheduler of issue 36 (`policy = "sglang"`); True once it is in the build.
SGLANG_POLICY = True
# What an MLPerf run is compared on: throughput, and loadgen's TTFT and TPOT (server runs).
MLPERF_METRICS = ["output_throughput", "request_throughput", "mean_ttft_ms", "median_ttft_ms", "p90_ttft_ms",
                  "p99_ttft_ms", "mean_tpot_ms", "median_tpot_ms", "p99_tpot_ms"]


def clamped_lognormal_mean(mean, std, lo, hi):
    """E[min(max(X, lo), hi)] for X log-normal with the given own mean and std (before rounding)."""
    import math
    sigma2 = math.log(1 + (std / mean) ** 2)
    sigma, mu = math.sqrt(sigma2), math.log(mean) - sigma2 / 2
    phi = lambda x: 0.5 * (1 + math.erf(x / math.sqrt(2)))
    a, b = (math.log(lo) - mu) / sigma, (math.log(hi) - mu) / sigma
    inside = mean * (phi(b - sigma) - phi(a - sigma))
    return lo * phi(a) + inside + hi * (1 - phi(b))


def lognormal_for_clamped_mean(target, cv, lo, hi):
    """The log-normal mean (std = cv x mean) whose values clamped to [lo, hi] average `target`."""
    low, high = lo, hi * 4.0
    for _ in range(100):
        mid = (low + high) / 2
        if clamped_lognormal_mean(mid, cv * mid, lo, hi) < target:
            low = mid
        else:
            high = mid
    return round((low + high) / 2, 1)


def mlperf_workload(row):
    """[workload] lines and a note for an MLPerf run: Poisson arrivals at loadgen's target rate
    (server, interactive) or every sample at once (offline), lengths drawn as said above."""
    offline = row["run_id"].endswith("-offline")
    rate = number(row["request_rate_rps"])
    recorded_count = int(number(row["num_requests"]))
    # Every recorded request: a server run's queue settles only after the longest outputs have
    # cycled (1,024 tokens at ~0.1 s each), and the runs were ~800 s long.
    count = recorded_count
    out_mean = number(row["mean_output_tokens"])
    inp = OPENORCA_INPUT
    in_dist = lognormal_for_clamped_mean(inp["mean"], MLPERF_LENGTH_CV, inp["min"], inp["max"])
    out_dist = lognormal_for_clamped_mean(out_mean, MLPERF_OUTPUT_CV, 1, MLPERF_MAX_OUTPUT)
    lines = [f"num_prompts = {count}",
             'request_rate = "inf"  # offline: every sample issued at t = 0' if offline
             else f"request_rate = {rate:g}  # loadgen's target_qps, Poisson arrivals",
             "seed = 0", "",
             "# The OpenOrca prompts' lengths as the MLPerf task set counts them (scripts/public_runs.py:",
             f"# {inp['min']} to {inp['max']} tokens, mean {inp['mean']:.1f}), outputs at the run's recorded mean "
             f"({out_mean:g} tokens: tokens/s / samples/s), at most {MLPERF_MAX_OUTPUT};",
             f"# log-normal, prompts with std = {MLPERF_LENGTH_CV:g} x mean (assumed: only min, max and mean are known),",
             f"# outputs with std = {MLPERF_OUTPUT_CV:g} x mean (from loadgen's latency percentiles: scripts/public_runs.py,",
             "# mlperf_output_cv); each `mean` set so that the clamped lengths average the recorded one.",
             "[workload.dataset]", 'kind = "sharegpt"',
             f"input = {{ dist = \"lognormal\", mean = {in_dist}, std = {round(MLPERF_LENGTH_CV * in_dist, 1)}, "
             f"min = {inp['min']}, max = {inp['max']} }}",
             f"output = {{ dist = \"lognormal\", mean = {out_dist}, std = {round(MLPERF_OUTPUT_CV * out_dist, 1)}, "
             f"min = 1, max = {MLPERF_MAX_OUTPUT} }}", ""]
    if offline:
        note = f"the recorded {count} samples, all at t = 0"
    else:
        note = f"the recorded {count} queries, Poisson arrivals at {rate:g} req/s"
    return lines, note


# Each constant-rate stage is simulated for at most this long: its means are steady-state ones,
# reached within seconds, so 150 s of a 600 s stage gives the same figures for a quarter of the
# simulation (which matters when a fit simulates every run hundreds of times). The stages keep
# their rates and their shares of the requests.
STAGE_SECONDS_MAX = 150.0


# The prompts inference-perf's shared_prefix generator sends, cycled. The runs' own resolved
# configs (inference-sim/training default_args/<run>/results/config.yaml @c4f0340) read
# `shared_prefix: {num_groups: 10, num_prompts_per_group: 10, system_prompt_len, question_len,
# output_len}` and no `enable_multi_turn_chat`: the inference-perf that ran them (its config schema
# has `circuit_breakers` and no multi-turn key, kubernetes-sigs/inference-perf between b81afa4,
# 2025-10-15, and 4ec6bfd, 2025-11-24) did not know the profile's `num_unique_system_prompts`,
# `num_users_per_system_prompt` and `enable_multi_turn_chat`, and took its defaults, 10 x 10,
# single-turn. That generator (`datagen/shared_prefix_datagen.py`) draws 100 prompts once (each
# a group's system prompt and its own question), shuffles them, and gives a stage's n-th request
# prompt n % 100 (`get_request`; `load_generator.py` numbers each stage's requests from 0). So
# every prompt returns 100 requests later, whole: with prefix caching on, all but its first
# sending find it cached (vLLM recomputes the last block).
INFERENCE_PERF_PROMPTS = 100


def inference_perf_trace(row, stages):
    """Constant-rate stages (inference-perf load.type=constant: one request every 1/rate s), the
    n-th request of a stage sending prompt n % 100 of the 100 the generator drew (a system prompt
    of its group, then its question), so whole prompts repeat; lengths fixed at the run's recorded
    means when recorded, else the profile's."""
    params = profile_params(row["notes"]) or profile_params(row["workload"])
    _, _, system, question, output = params
    input_tokens = round(number(row["mean_input_tokens"]) or system + question)
    output_tokens = round(number(row["mean_output_tokens"]) or output)
    if stages:
        recorded = [(number(s["requested_rate_rps"]), int(s["count"])) for s in stages]
    else:
        rates = [float(r) for r in row["request_rate_rps"].split("→")]
        duration = number(row["duration_s"]) / len(rates)
        recorded = [(rate, round(rate * duration)) for rate in rates]
        assert sum(n for _, n in recorded) == int(row["num_requests"]), (row["run_id"], recorded)
    plan = [(rate, min(count, round(rate * STAGE_SECONDS_MAX))) for rate, count in recorded]
    rows, start = [], 0.0
    for rate, count in plan:
        for i in range(count):
            rows.append((start + i / rate, input_tokens, output_tokens, i % INFERENCE_PERF_PROMPTS, input_tokens))
        start += count / rate
    note = (f"inference-perf shared_prefix as it ran: {INFERENCE_PERF_PROMPTS} prompts drawn once (its default 10 system "
            f"prompts x 10 questions; the profile's {params[0]} x {params[1]} and multi-turn keys were not read), "
            f"a stage's n-th request sending prompt n % {INFERENCE_PERF_PROMPTS} whole, so prompts repeat and hit the prefix cache; "
            f"{'recorded mean' if number(row['mean_input_tokens']) else 'profile'} lengths {input_tokens} in, {output_tokens} out; "
            + ", then ".join(f"{n} requests at {r:g} req/s" for r, n in plan)
            + f" (the recorded {' and '.join(str(n) for _, n in recorded)}, each stage cut to its first {STAGE_SECONDS_MAX:g} s)")
    return rows, note


def lcp(a, b):
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def lss_trace(row, collection):
    folder, workload = LSS_FILES[row["run_id"]]
    requests = [json.loads(l) for l in open(os.path.join(collection, "casys-kaist-LLMServingSim", folder, "requests.jsonl"))]
    prompts = [json.loads(l) for l in open(os.path.join(collection, "casys-kaist-LLMServingSim", workload))]
    assert len(requests) == len(prompts)
    for r, p in zip(requests, prompts):
        assert (r["input_toks"], r["output_toks"]) == (p["input_toks"], p["output_toks"]), row["run_id"]
    ids = [p["input_tok_ids"] for p in prompts]
    # Prompts sharing a prefix of a block or more (multi-turn conversations, common openings)
    # form one shared text each; a prompt's shared length is its longest prefix shared with
    # any other prompt.
    parent = list(range(len(ids)))

    def find(i):
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    shared = [0] * len(ids)
    for i in range(len(ids)):
        for j in range(i):
            n = lcp(ids[i], ids[j])
            if n >= 16:
                shared[i], shared[j] = max(shared[i], n), max(shared[j], n)
                parent[find(i)] = find(j)
    t0 = min(r["queued_ts"] for r in requests)
    rows = []
    for i, r in sorted(enumerate(requests), key=lambda e: (e[1]["queued_ts"], e[0])):
        rows.append((r["queued_ts"] - t0, r["input_toks"], r["output_toks"], find(i), shared[i]))
    meta = json.load(open(os.path.join(collection, "casys-kaist-LLMServingSim", folder, "meta.json")))
    blocks = (meta.get("kv_cache") or {}).get("num_gpu_blocks")
    note = (f"the run's own {len(rows)} requests (LLMServingSim requests.jsonl), arriving when the engine core queued them; "
            f"prefixes shared with other prompts of the workload file (a block or more): {sum(1 for s in shared if s)} prompts")
    return rows, note, blocks


def write_trace(path, rows):
    with open(path, "w") as f:
        f.write("arrival_s,input_tokens,output_tokens,prefix_id,prefix_tokens\n")
        for arrival, inp, out, prefix_id, prefix_tokens in rows:
            f.write(f"{arrival:.6f},{inp},{out},{prefix_id},{prefix_tokens}\n")


def recorded_object(row):
    """The run's recorded aggregates under vLLM's --save-result keys (ms, tokens/s)."""
    keys = {
        "output_throughput": "output_tok_s",
        "request_throughput": "request_throughput_rps",
        "mean_ttft_ms": "ttft_mean_ms",
        "median_ttft_ms": "ttft_median_ms",
        "p99_ttft_ms": "ttft_p99_ms",
        "mean_tpot_ms": "tpot_mean_ms",
        "mean_e2el_ms": "e2e_mean_ms",
    }
    if row["run_id"].startswith("mlperf51"):
        # Loadgen's percentiles (the other sources published means only; their objects keep
        # the keys they had).
        keys.update({"p90_ttft_ms": "ttft_p90_ms", "median_tpot_ms": "tpot_median_ms",
                     "p90_tpot_ms": "tpot_p90_ms", "p99_tpot_ms": "tpot_p99_ms"})
    obj = {"run_id": row["run_id"], "engine_version": row["engine_version"], "gpu": row["gpu"], "timing_reference": row["timing_reference"]}
    for key, column in keys.items():
        value = number(row[column])
        if value is not None:
            obj[key] = value
    return obj


def toml_string(text):
    return json.dumps(text, ensure_ascii=False)


def scenario_text(row, trace_name, trace_note, blocks_override, recorded_index, metrics):
    run = row["run_id"]
    engine_clock = row["timing_reference"].startswith("engine")
    mlperf = run.startswith("mlperf51")
    sglang = row["engine"].startswith("SGLang")
    lines = [f"# {run}: {row['source']} ({row['source_repo'].split(' ;')[0]}),",
             f"# {row['gpu']} x{row['gpu_count']}, {row['model']}, {'SGLang' if sglang else 'vLLM'} {row['engine_version']}.",
             "# Written by scripts/public_runs.py from tests/data/public-runs/runs.csv; do not edit by hand.",
             "#",
             f"#   servesim validate scenarios/public-runs/{run}.toml",
             "",
             f"name = {toml_string(run)}",
             "",
             "[model]"]
    if row["model"] in PRESETS:
        lines.append(f"preset = {toml_string(PRESETS[row['model']])}")
    else:
        lines.append(f"hf_config = {toml_string('../../tests/data/public-runs/models/' + row['model'].split('/')[1] + '/config.json')}")
    dtype = row["weights_dtype"]
    if dtype.startswith("fp16"):
        lines.append('dtype = "fp16"')
    elif dtype.startswith("fp8"):
        lines.append(f'dtype = "fp8"  # {dtype}: FP8 linear layers, 16-bit activations')
    lines += ["", "[hardware]"]
    tp, dp = int(row["tp"]), int(row["dp"])
    if row["gpu"] in PRESET_GPUS:
        lines.append(f"gpu = {toml_string(PRESET_GPUS[row['gpu']])}")
    else:
        name, source, figures = CUSTOM_GPUS[row["gpu"]]
        lines.append(f"# {source}")
        lines.append(f"name = {toml_string(name)}")
        lines += [f"{k} = {v}" for k, v in figures.items()]
    lines.append(f"count = {tp * dp}")
    lines += ["", "[engine]", f"policy = {toml_string('sglang' if sglang else 'vllm-v1')}", f"version = {toml_string(row['engine_version'])}", f"tensor_parallel = {tp}"]
    ep = number(row["ep"]) if "ep" in row else None
    # LLMServingSim's runs record vLLM's own data-parallel engine (meta.json `data_parallel_size`,
    # `enable_expert_parallel`): ranks with their own schedulers that meet in every expert layer.
    engine_dp = dp > 1 and run.startswith("lss-") and bool(ep) and int(ep) == tp * dp
    if engine_dp:
        lines.append(f"data_parallel = {dp}  # vLLM's --data-parallel-size (meta.json data_parallel_size, recorded)")
    elif dp > 1:
        if mlperf:
            lines.append(f"# Recorded as TP{tp} x DP{dp} under the KRAI harness's one OpenAI client, which does not record whether")
            lines.append("# the replicas were separate servers or the engine's own data-parallel mode: assumed separate")
            lines.append("# replicas, each request sent to the next in turn.")
        lines.append(f"replicas = {dp}")
        lines.append('router = "round-robin"')
    if mlperf and number(row["gpu_memory_utilization"]) and not sglang:
        lines.append(f"gpu_memory_utilization = {number(row['gpu_memory_utilization']):g}")
    for key in [] if sglang else ["max_num_seqs", "max_num_batched_tokens", "max_model_len"]:
        value = number(row[key])
        if value:
            lines.append(f"{key} = {int(value)}")
        elif key == "max_model_len" and run.startswith("s2r-"):
            lines.append("max_model_len = 4096  # the collection protocol's (not in this run's record)")
    blocks = number(row["num_gpu_blocks"]) or blocks_override
    if blocks:
        lines.append(f"num_gpu_blocks = {int(blocks)}  # as the engine resolved it (recorded)")
    if ep and ep > 1 and dp == 1 and int(ep) == tp:
        lines.append(f"expert_parallel = true  # EP {int(ep)} over the tensor-parallel GPUs (recorded)")
    elif engine_dp:
        lines.append(f"expert_parallel = true  # EP {int(ep)} over the data-parallel ranks' GPUs (enable_expert_parallel, recorded)")
    elif ep and ep > 1:
        lines.append(f"# Recorded with expert parallelism over the {dp} data-parallel ranks (EP {row['ep']}); servesim")
        lines.append("# models expert parallelism within a tensor-parallel group, so each replica holds every expert here.")
    if "offload" in row["kv_cpu_offload"] or row["kv_cpu_offload"].startswith("yes"):
        lines.append("# The run offloaded KV to 8 GiB of CPU memory (OffloadingConnector): not modelled; it matters only")
        lines.append("# once the GPU's blocks run out, which the runs kept here do not reach.")
    if sglang:
        lines += ["# --attention-backend fa3 (recorded): the kernel profile's attention is FlashAttention 3's. The",
                  "# other flags keep 0.4.9's defaults (chunked prefill 8,192 tokens on an H200, fcfs, radix cache).",
                  "[engine.sglang]",
                  f"mem_fraction_static = {number(row['gpu_memory_utilization']):g}  # recorded",
                  f"max_running_requests = {int(number(row['max_num_seqs']))}  # recorded"]
        if "pre-quantized" in row["weights_dtype"]:
            # docs/sglang.md, "FP8 GEMMs": the checkpoint folder names Meta-Llama-3.1-70B-Instruct-FP8, the
            # name of Neural Magic's per-tensor FP8 Llama 3.1 (its per-channel one is "-FP8-dynamic").
            lines += ["# Assumed: per-tensor weight scales (the result files name the checkpoint folder, not its",
                      "# quantization config). SGLang runs those through torch._scaled_mm (cuBLASLt), not sgl-kernel's",
                      "# cutlass fp8_scaled_mm.",
                      'fp8_weight_scale = "tensor"']
    if mlperf:
        workload, note = mlperf_workload(row)
        lines += ["", f"# {note}", "[workload]"] + workload
    else:
        lines += ["", "[workload]", f"num_prompts = {int(trace_rows_count(trace_name))}", "seed = 0", "",
                  f"# {trace_note}", "[workload.dataset]", 'kind = "trace"',
                  f"path = {toml_string('../../tests/data/public-runs/traces/' + trace_name)}", "",
                  ]
    if run in LSS_PROFILES:
        lines += ["[cost]", "# LLMServingSim's kernel timings of this GPU, model and vLLM release (calibration/public-runs/README.md)",
                  f"profile = {toml_string('../../calibration/public-runs/' + LSS_PROFILES[run])}", ""]
    lines += ["[validation]", 'recorded = "../../tests/data/public-runs/recorded.json"', f"blocks = [{recorded_index}]",
              f"metrics = {json.dumps(metrics)}"]
    if engine_clock:
        lines.append('# Timed from the engine core\'s queue (queued_ts): no API server in the recorded times.')
        lines.append('clock = "engine"')
    lines.append("")
    return "\n".join(lines)


_TRACE_ROWS = {}


def trace_rows_count(name):
    return _TRACE_ROWS[name]


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    collection = sys.argv[1]
    global MLPERF_OUTPUT_CV
    MLPERF_OUTPUT_CV = mlperf_output_cv(collection)
    rows = list(csv.DictReader(open(os.path.join(collection, "runs.csv"), newline="")))
    stages = list(csv.DictReader(open(os.path.join(collection, "stages.csv"), newline="")))
    for sub in ["traces", "models"]:
        shutil.rmtree(os.path.join(DATA, sub), ignore_errors=True)
        os.makedirs(os.path.join(DATA, sub))
    shutil.rmtree(SCENARIOS, ignore_errors=True)
    os.makedirs(SCENARIOS)
    for name in ["runs.csv", "stages.csv"]:
        shutil.copyfile(os.path.join(collection, name), os.path.join(DATA, name))
    shutil.copyfile(os.path.join(collection, "casys-kaist-LLMServingSim", "LICENSE"), os.path.join(DATA, "LICENSE-LLMServingSim"))
    for model, config in CONFIGS.items():
        folder = os.path.join(DATA, "models", model.split("/")[1])
        os.makedirs(folder)
        with open(os.path.join(folder, "config.json"), "w") as f:
            json.dump(config, f, indent=2)
            f.write("\n")
    with open(os.path.join(DATA, "models", "README.md"), "w") as f:
        f.write("# Model configs\n\nThe keys servesim reads of each model's `config.json` on the Hugging Face Hub, "
                "written by `scripts/public_runs.py`:\n\n")
        for model in CONFIGS:
            f.write(f"- `{model.split('/')[1]}/config.json`: https://huggingface.co/{model}/blob/main/config.json\n")
    recorded, excluded = [], []
    for row in rows:
        reason = excluded_reason(row)
        if reason:
            excluded.append((row["run_id"], reason))
            continue
        run = row["run_id"]
        if run.startswith("mlperf51"):
            obj = recorded_object(row)
            recorded.append(obj)
            metrics = [m for m in MLPERF_METRICS if m in obj]
            with open(os.path.join(SCENARIOS, f"{run}.toml"), "w") as f:
                f.write(scenario_text(row, None, None, None, len(recorded), metrics))
            continue
        if run.startswith("lss-"):
            trace, note, blocks = lss_trace(row, collection)
        else:
            trace, note = inference_perf_trace(row, [s for s in stages if s["run_id"] == run and s["metric_source"].startswith("inference-perf")])
            blocks = None
        trace_name = f"{run}.csv"
        write_trace(os.path.join(DATA, "traces", trace_name), trace)
        _TRACE_ROWS[trace_name] = len(trace)
        obj = recorded_object(row)
        recorded.append(obj)
        metrics = [m for m in ["output_throughput", "mean_ttft_ms", "mean_tpot_ms"] if m in obj]
        with open(os.path.join(SCENARIOS, f"{run}.toml"), "w") as f:
            f.write(scenario_text(row, trace_name, note, blocks, len(recorded), metrics))
    with open(os.path.join(DATA, "recorded.json"), "w") as f:
        json.dump(recorded, f, indent=1)
        f.write("\n")
    with open(os.path.join(SCENARIOS, "EXCLUDED.md"), "w") as f:
        f.write("# Recorded public runs without a scenario\n\nWritten by `scripts/public_runs.py`; each run and why.\n\n")
        f.write("| run | why |\n| --- | --- |\n")
        for run, reason in excluded:
            f.write(f"| `{run}` | {reason} |\n")
    print(f"{len(recorded)} scenarios, {len(excluded)} runs excluded")


if __name__ == "__main__":
    main()
