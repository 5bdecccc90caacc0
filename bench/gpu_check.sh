#!/usr/bin/env bash
# GPU readiness check of the paper-7b run's own path, nothing downloaded (bench/gpu_check.py says what each check
# does): a random-weight model from the Qwen2.5-Coder-7B config in bench/configs, written once; vLLM next to the
# trainer with 8 rank-32 LoRAs; a generation under KV-cache pressure; a train step on a maximum-length row against
# the memory preflight's estimate; the adapter refresh; greedy equal before vLLM's sleep and after its wake-up; the
# sandbox; step 1 of a paper-7b-shaped run with students playing, then a --resume for step 2; 8 slots vs 1.
# Each check prints its expected seconds, then PASS/FAIL/SKIPPED with its measured seconds; writes
# bench/results/gpu_check.json on a GPU; exit 1 when a check failed. Fits 10 minutes on one GPU (its own budget
# skips what would not fit; this wrapper stops it at 590 s).
#   bash bench/gpu_check.sh                        # on a GPU machine, from the repository root
#   bash bench/gpu_check.sh --python .venv-gpu/bin/python   # the interpreter that has the GPU install (vLLM)
#   bash bench/gpu_check.sh --shrink --out X.json  # the same path on a CPU, tiny config (make test runs it)
# The interpreter: --python PATH, else $PY, else the first of .venv-vllm/bin/python, python3 on the PATH and
# .venv/bin/python that imports vLLM, else the first that exists (the hf path only). vLLM is never installed in
# .venv (docs/engine.md), so .venv is the last choice. The line "gpu_check.sh: interpreter ..." says which.
# The random model lives in a scratch folder removed on any exit: Python removes it (SIGTERM included), and this
# wrapper removes its scratch root after Python is gone (a SIGKILLed Python included).
set -uo pipefail
cd "$(dirname "$0")/.."
PY="${PY:-}"
args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --python) PY="${2:?--python needs a path}"; shift 2 ;;
    --python=*) PY="${1#--python=}"; shift ;;
    *) args+=("$1"); shift ;;
  esac
done
has_vllm() { "$1" -c 'import importlib.util, sys; sys.exit(importlib.util.find_spec("vllm") is None)' 2>/dev/null; }
if [ -z "$PY" ]; then
  for cand in .venv-vllm/bin/python "$(command -v python3 || true)" .venv/bin/python; do
    if [ -n "$cand" ] && [ -x "$cand" ] && has_vllm "$cand"; then PY="$cand"; break; fi
  done
fi
if [ -z "$PY" ]; then
  for cand in .venv/bin/python "$(command -v python3 || true)"; do
    if [ -n "$cand" ] && [ -x "$cand" ]; then PY="$cand"; break; fi
  done
fi
if has_vllm "$PY"; then what="has vLLM"; else what="no vLLM: the hf path only"; fi
echo "gpu_check.sh: interpreter $PY ($what)"
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-PASSIVE}"
export VLLM_LOGGING_LEVEL="${VLLM_LOGGING_LEVEL:-WARNING}"

ROOT="$(mktemp -d "${TMPDIR:-/tmp}/populora-gpu-check-XXXXXX")"
child=""
cleanup() { rm -rf "$ROOT"; }
stop() {  # a signal to this wrapper: pass it on, let Python close its engines and remove its folder, then ours
  if [ -n "$child" ]; then kill -TERM "$child" 2>/dev/null; wait "$child" 2>/dev/null; fi
  cleanup
  exit 143
}
trap cleanup EXIT
trap stop TERM INT HUP
timeout --kill-after=30 "${GPU_CHECK_TIMEOUT:-590}" "$PY" bench/gpu_check.py --scratch-root "$ROOT" "${args[@]}" &
child=$!
wait "$child"
rc=$?
child=""
exit "$rc"
