#!/usr/bin/env bash
# GPU readiness check of the paper-7b run's own path, nothing downloaded: a random-weight model from the
# Qwen2.5-Coder-7B config in bench/configs; vLLM next to the trainer with 8 rank-32 LoRAs; a train step on a
# maximum-length row against the memory preflight's estimate; the adapter refresh; the sandbox on this node's
# cores; a 2-step paper-7b-shaped run with dist.workers = the GPUs present; 8 slots vs 1 in the HF engine.
# One pass/fail line per check; writes bench/results/gpu_check.json on a GPU; exit 1 when a check failed.
# Fits 10 minutes on one GPU (checks that would not finish are skipped; this wrapper stops it at 590 s).
#   bash bench/gpu_check.sh                       # on a GPU machine, from the repository root
#   bash bench/gpu_check.sh --shrink --out X.json # the same path on a CPU, tiny config (make test runs it)
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PY:-}"
if [ -z "$PY" ]; then
  if [ -x .venv/bin/python ]; then PY=.venv/bin/python; else PY=python3; fi
fi
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-PASSIVE}"
export VLLM_LOGGING_LEVEL="${VLLM_LOGGING_LEVEL:-WARNING}"
exec timeout "${GPU_CHECK_TIMEOUT:-590}" "$PY" bench/gpu_check.py "$@"
