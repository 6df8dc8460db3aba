#!/usr/bin/env sh
# Regenerates docs/accuracy.md's tables: fits each vLLM V1 engine profile's engine time to the
# training set's recorded runs (scenarios/public-runs/, written by scripts/public_runs.py), with
# every step priced by the run's kernel profile, then predicts each run from a fit to the others
# (leave-one-run-out). Writes the fitted values into calibration/engine/*.toml (rebuild to use
# them) and the tables into docs/accuracy-*.md; then the MI300X correction (calibration/transfer/).
#
#   sh scripts/accuracy.sh            # about 5 minutes on 2 cores
#   SERVESIM=target/release/servesim sh scripts/accuracy.sh
set -eu
cd "$(dirname "$0")/.."
if [ -z "${SERVESIM:-}" ]; then
  cargo build --release --quiet
  SERVESIM=target/release/servesim
fi
mkdir -p target/accuracy

# vLLM 0.14-0.15 (V1, async scheduling on by default, 90% of the CPU time hidden): the 0.15.1 runs
# of inference-sim's two collections, timed by the client (inference-perf over the OpenAI API), so
# the API server's time is in TTFT. The same CPU times go into the 0.9-0.13 and 0.8 profiles,
# which run them in series with the GPU (those releases schedule synchronously; the training set
# has no 0.8 run, and 0.8 has the same engine-core and API-server processes); the MLPerf vLLM
# 0.9.2 runs below check that. Llama 4 Scout's four runs are left out of the fit and predicted after it
# (below): their kernels are priced from the bundled rows now (its chunked layers span
# max_model_len), but fitted with the rest they still move the engine time (docs/accuracy.md,
# "Llama 4 Scout"). The per-sequence time keeps its earlier value (0.58 us), as the 0.19 fit's
# does: these runs (at most 128 running) do not identify it. Fitted with the rest, it went to
# 140 us a sequence with a worse leave-one-out (TPOT 8.2% against 6.9%), a value that in series
# (the 0.9-0.13 profile) would put 70 ms of CPU time on a 500-sequence MLPerf step.
"$SERVESIM" fit --kernels --robust \
  --params step_overhead_graph_us,frontend_overhead_us,frontend_per_token_us \
  --max-evals 40 --leave-one-out --fold-evals 25 \
  --table docs/accuracy-vllm-v1-0.14.md \
  --engine-profile calibration/engine/vllm-v1-0.14.toml \
  --engine-profile calibration/engine/vllm-v1-0.9.toml \
  --engine-profile calibration/engine/vllm-v1-0.8.toml \
  --out target/accuracy/vllm-v1-0.14.toml \
  scenarios/public-runs/isim-*.toml $(ls scenarios/public-runs/s2r-*.toml | grep -v llama-4-scout)

# Llama 4 Scout (FP8, TP 2, EP 2, vLLM 0.15.1): predicted with the engine time just fitted.
python3 scripts/predicted_table.py "$SERVESIM" docs/accuracy-scout.md target/accuracy/vllm-v1-0.14.toml \
  scenarios/public-runs/s2r-*-llama-4-scout-*.toml

# vLLM 0.16 onwards (V1, async scheduling): LLMServingSim's 0.19.0 runs, timed from the engine
# core's queue, so no front end is fitted. Their batches (at most 256 running) do not tell the
# per-sequence time from the per-step one: fitting both took seq_overhead_us from 10 to 185 us
# for a 9% lower objective (0.0256 to 0.0233), a value that priced 700-sequence H100 steps at
# twice their GPU time. So only the per-step time is fitted, and seq_overhead_us keeps its prior.
# The fit is not written into calibration/engine/vllm-v1-0.19.toml: since the Qwen3 runs' scenarios
# were corrected (vLLM's data-parallel engine for Qwen3-30B-A3B, measured PCIe all-reduce for
# Qwen3-32B), the fit to all five puts 24.5 ms of CPU time on every step, absorbing the A3B run's
# prompt-chunk steps (79 ms recorded, 58 ms simulated, cause not found); 90% hidden, that still
# floors an 8B model's H100 decode step at about 18 ms. The profile keeps 5,974 us (the fit before
# those corrections) until the per-step time is identified by runs that separate it.
"$SERVESIM" fit --kernels --robust \
  --params step_overhead_graph_us \
  --no-frontend-on-bursts --max-evals 40 --leave-one-out --fold-evals 25 \
  --table docs/accuracy-vllm-v1-0.19.md \
  --out target/accuracy/vllm-v1-0.19.toml \
  scenarios/public-runs/lss-*.toml

# MI300X: no kernel table was published for it, so `auto` carries the H200's over (each kernel at
# the utilisation of the MI300X's peaks it reached on the H200). What that leaves out is fitted
# on the recorded 8 x MI300X seed runs (vLLM 0.6.3 and TGI 2.3, Llama-3.1-405B at TP 8) on top of
# each release's own engine profile: the share of the H200's utilisation the MI300X's kernels
# reach, the all-reduce latency (RCCL over xGMI, which the ring formula prices), and a fixed time
# per prefill step. Leave-one-out here holds out one series at a time (run-002 has three), so the
# TGI fold is a fit to vLLM alone. The correction is compiled in (rebuild to use it).
"$SERVESIM" fit --kernels --robust --set cost.profile=auto --no-frontend-on-bursts \
  --params transfer_utilisation,collective_latency_us,prefill_step_overhead_us \
  --max-evals 150 --leave-one-out --fold-evals 40 \
  --table docs/accuracy-mi300x.md \
  --out calibration/transfer/mi300x.toml \
  scenarios/recorded/run-002-vllm-80.toml scenarios/recorded/run-002-vllm-10k.toml \
  scenarios/recorded/run-002-vllm-long.toml scenarios/recorded/run-003-tgi-80.toml

# MLPerf v5.1 (Krai): vLLM 0.9.2 on 8-24 H200 and 8 H100, Llama-3.1-70B FP8, loadgen's server,
# interactive and offline scenarios. Not fitted: predicted by the 0.9-0.13 profile, whose CPU times
# were fitted above on 0.15.1 runs of at most 128 sequences (these run 400 and more), and
# tabled with signed errors. Their prompts are drawn, not replayed (scripts/public_runs.py).
python3 scripts/mlperf_table.py "$SERVESIM" docs/accuracy-mlperf.md scenarios/public-runs/mlperf51-*vllm_092*.toml
