#!/usr/bin/env bash
# GPU readiness check: the engine at Qwen2.5-Coder-7B shape (random weights from bench/configs, nothing
# downloaded), 8 LoRA slots rank 32 q/k/v/o in bf16 vs 1 slot; dist.workers=2 when two GPUs exist.
# Writes bench/results/gpu.json and prints a table. Stops itself after 8 minutes.
#   bash bench/gpu_check.sh                 # on a GPU machine, from the repository root
#   bash bench/gpu_check.sh --shrink        # a tiny config of the same family: checks the script on a CPU
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PY:-}"
if [ -z "$PY" ]; then
  if [ -x .venv/bin/python ]; then PY=.venv/bin/python; else PY=python3; fi
fi
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-PASSIVE}"
exec timeout "${GPU_CHECK_TIMEOUT:-480}" "$PY" bench/gpu_check.py "$@"
