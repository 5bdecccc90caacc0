#!/usr/bin/env bash
# The first GPU sitting as one script, in order and within 15 minutes (--budget-s 900): `populora doctor` (what the
# machine has against what paper-7b needs), bench/gpu_check.sh (engine and sandbox on a random 7B, ~6 min), two real
# paper-7b steps on the model you carried (a checkpoint each), then a --resume for one more step. Each phase has a
# timeout that leaves the later phases their share; a phase that fails is recorded and the next one still runs.
# Writes one JSON (bench/results/gpu_first_run.json; bench/gpu_first_run.py assembles it) and exits 1 when a phase
# failed. docs/engine.md, "The first GPU sitting", says what each number means and what to do when one fails.
#   bash bench/gpu_first_run.sh --model /data/Qwen2.5-Coder-7B      # the node has no internet: carry the model
#   bash bench/gpu_first_run.sh --model /data/Qwen2.5-Coder-7B --dry-run   # print the plan, run nothing
#   bash bench/gpu_first_run.sh --shrink --out X.json               # the same phases on a CPU, tiny model (tests)
# Options: --python PY (the interpreter of the GPU install; default as bench/gpu_check.sh chooses), --set KEY=VALUE
# (repeatable, for the real steps: e.g. the memory settings), --budget-s S, --keep DIR (keep the run folder there).
# Sizes of the real steps (env): STEPS_PROMPTS=6 STEPS_ROLLOUTS=4 STEPS_NEW_TOKENS=512 (paper-7b's are 72, 8, 4096:
# a full step takes far longer than this sitting has); GPU_CHECK_ARGS (default "--only engine,sandbox").
set -uo pipefail
cd "$(dirname "$0")/.."
REPO="$PWD"
MODEL="" PY="${PY:-}" OUT="" BUDGET="" DRY=0 SHRINK=0 KEEP=""
sets=()
while [ $# -gt 0 ]; do
  case "$1" in
    --model) MODEL="${2:?--model needs a path}"; shift 2 ;;
    --python) PY="${2:?--python needs a path}"; shift 2 ;;
    --out) OUT="${2:?--out needs a file}"; shift 2 ;;
    --budget-s) BUDGET="${2:?--budget-s needs seconds}"; shift 2 ;;
    --keep) KEEP="${2:?--keep needs a folder}"; shift 2 ;;
    --set) sets+=("--set" "${2:?--set needs KEY=VALUE}"); shift 2 ;;
    --dry-run) DRY=1; shift ;;
    --shrink) SHRINK=1; shift ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    *) echo "gpu_first_run: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
has_vllm() { "$1" -c 'import importlib.util, sys; sys.exit(importlib.util.find_spec("vllm") is None)' 2>/dev/null; }
if [ -z "$PY" ]; then  # the interpreter with vLLM first: vLLM is never installed in .venv (docs/engine.md)
  for cand in .venv-vllm/bin/python "$(command -v python3 || true)" .venv/bin/python; do
    if [ -n "$cand" ] && [ -x "$cand" ] && has_vllm "$cand"; then PY="$cand"; break; fi
  done
  [ -z "$PY" ] && for cand in .venv/bin/python "$(command -v python3 || true)"; do
    if [ -n "$cand" ] && [ -x "$cand" ]; then PY="$cand"; break; fi
  done
fi
export PYTHONPATH="$REPO/src${PYTHONPATH:+:$PYTHONPATH}" OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-PASSIVE}"
export VLLM_LOGGING_LEVEL="${VLLM_LOGGING_LEVEL:-WARNING}" PYTHONUNBUFFERED=1

PROMPTS="${STEPS_PROMPTS:-6}" ROLLOUTS="${STEPS_ROLLOUTS:-4}" NEW="${STEPS_NEW_TOKENS:-512}"
# phase caps in seconds (sum <= the budget); a phase that ends early leaves its time to the later ones
CAP_DOCTOR=45 CAP_CHECK=420 CAP_STEPS=300 CAP_RESUME=135
# gpu_check's engine and sandbox parts (~340 s expected); its run and resume are the real steps' job here
CHECK_ARGS="${GPU_CHECK_ARGS:---only engine,sandbox}"
cpu_sets=()
if [ "$SHRINK" = 1 ]; then  # a CPU: the tiny model, the hf backend, short everything
  MODEL="${MODEL:-tiny}" PROMPTS="${STEPS_PROMPTS:-3}" ROLLOUTS="${STEPS_ROLLOUTS:-2}" NEW="${STEPS_NEW_TOKENS:-16}"
  cpu_sets=(--set model.device=cpu --set model.dtype=float32 --set model.backend=hf --set train.threads=1
    --set sandbox.workers=2 --set tasks.references=1)
  CHECK_ARGS="${GPU_CHECK_ARGS:---shrink --device cpu --only sandbox}"
  CAP_DOCTOR=120 CAP_CHECK=300 CAP_STEPS=400 CAP_RESUME=300
  BUDGET="${BUDGET:-1200}"
fi
BUDGET="${BUDGET:-900}"
read -r -a check_args <<< "$CHECK_ARGS"
if [ -z "$MODEL" ]; then
  echo "gpu_first_run: --model PATH is needed: the folder of Qwen2.5-Coder-7B (config.json, tokenizer, safetensors)" \
    "carried to this node, which has no internet (docs/engine.md, 'The first GPU sitting'); --shrink for a CPU." >&2
  exit 2
fi
steps_sets=(--set "model.name=$MODEL" --set train.steps=2 --set train.checkpoint_every=1
  --set "tasks.prompts=$PROMPTS" --set "rl.rollouts=$ROLLOUTS"
  --set "tasks.teacher_max_new_tokens=$NEW" --set "tasks.student_max_new_tokens=$NEW" "${cpu_sets[@]}" "${sets[@]}")
if [ -z "$OUT" ]; then
  if [ "$SHRINK" = 1 ]; then OUT="${TMPDIR:-/tmp}/populora-gpu-first-run-shrunk.json"; else OUT="bench/results/gpu_first_run.json"; fi
fi

WORK="$(mktemp -d "${TMPDIR:-/tmp}/populora-first-run-XXXXXX")"
RUN="${KEEP:-$WORK/run}"
PHASES="$WORK/phases.jsonl"
: > "$PHASES"
child=""
cleanup() { if [ -n "$child" ]; then kill -TERM "$child" 2>/dev/null; wait "$child" 2>/dev/null; fi; rm -rf "$WORK"; }
trap cleanup EXIT
trap 'cleanup; exit 143' TERM INT HUP
START=$SECONDS

# run_phase NAME CAP RESERVE CMD...: run CMD with a timeout of what is left of the budget less RESERVE, the later
# phases' shares (so CAP plus whatever the earlier phases saved); record its exit status and seconds in $PHASES.
run_phase() {
  local name="$1" cap="$2" reserve="$3"; shift 3
  local left=$(( BUDGET - (SECONDS - START) - reserve ))
  local limit=$left
  if [ "$limit" -lt 10 ]; then
    printf '{"name": "%s", "status": "skipped", "why": "no time left (%s s before the later phases)"}\n' "$name" "$left" >> "$PHASES"
    echo "=== $name: SKIPPED (no time left)"
    return
  fi
  echo "=== $name: up to $limit s (its share $cap s) $(date -u +%H:%M:%S)"
  local t0=$SECONDS
  timeout --kill-after=30 "$limit" "$@" > >(tee "$WORK/$name.log") 2>&1 &
  child=$!
  wait "$child"
  local rc=$?
  child=""
  local took=$(( SECONDS - t0 ))
  local status=pass
  if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then status=timeout; elif [ "$rc" != 0 ]; then status=fail; fi
  printf '{"name": "%s", "status": "%s", "rc": %s, "seconds": %s, "limit_s": %s, "share_s": %s}\n' \
    "$name" "$status" "$rc" "$took" "$limit" "$cap" >> "$PHASES"
  echo "=== $name: ${status^^} (exit $rc) in $took s"
}

doctor=("$PY" -m populora.cli doctor --preset paper-7b --set "model.name=$MODEL" "${cpu_sets[@]}" "${sets[@]}"
  --json "$WORK/doctor.json")
check=(env "PY=$PY" "GPU_CHECK_TIMEOUT=$(( CAP_CHECK - 10 ))" bash bench/gpu_check.sh --budget-s "$(( CAP_CHECK - 60 ))"
  --out "$WORK/gpu_check.json" "${check_args[@]}" "${sets[@]}")
steps=("$PY" -m populora.cli train --quiet --preset paper-7b --run-dir "$RUN" "${steps_sets[@]}")
resume=("$PY" -m populora.cli train --quiet --resume "$RUN" --set train.steps=3)
if [ "$DRY" = 1 ]; then
  echo "gpu_first_run plan (budget $BUDGET s; interpreter $PY; writes $OUT):"
  echo "1. doctor    (share $CAP_DOCTOR s): ${doctor[*]}"
  echo "2. gpu_check (share $CAP_CHECK s): ${check[*]}"
  echo "3. steps     (share $CAP_STEPS s): ${steps[*]}"
  echo "4. resume    (share $CAP_RESUME s): ${resume[*]}"
  echo "5. report: $PY bench/gpu_first_run.py --work $WORK --run $RUN --out $OUT"
  exit 0
fi
echo "gpu_first_run: interpreter $PY, model $MODEL, budget $BUDGET s, run folder $RUN"
if "$PY" -c 'import populora.doctor' 2>/dev/null; then
  run_phase doctor "$CAP_DOCTOR" $(( CAP_CHECK + CAP_STEPS + CAP_RESUME )) "${doctor[@]}"
else
  printf '{"name": "doctor", "status": "skipped", "why": "populora doctor is not in this checkout (populora.doctor does not import)"}\n' >> "$PHASES"
  echo "=== doctor: SKIPPED: populora doctor is not in this checkout"
fi
run_phase gpu_check "$CAP_CHECK" $(( CAP_STEPS + CAP_RESUME )) "${check[@]}"
run_phase steps "$CAP_STEPS" "$CAP_RESUME" "${steps[@]}"
if [ -f "$RUN/checkpoints/step_000002/state.json" ]; then
  run_phase resume "$CAP_RESUME" 0 "${resume[@]}"
else
  printf '{"name": "resume", "status": "skipped", "why": "no step-2 checkpoint to resume (see steps)"}\n' >> "$PHASES"
  echo "=== resume: SKIPPED (no step-2 checkpoint)"
fi
mkdir -p "$(dirname "$OUT")"
"$PY" bench/gpu_first_run.py --work "$WORK" --run "$RUN" --out "$OUT" --model "$MODEL" --budget-s "$BUDGET" \
  --wall-s $(( SECONDS - START ))
