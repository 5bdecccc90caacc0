"""How long a run will take, before it starts: a per-step seconds model, for the line a long command prints.

Commands that may run for more than `LONG_S` (10 minutes) say so, with their estimate, before they start work
(`populora train`, `populora experiment ablation|learning|retention`):

    this will take about 9 h 40 min on this machine (estimated: ...); Ctrl-C stops, `...` continues

The model is a measured table, not a guess:

- `PROFILES`: for the bundled tiny model (presets `tiny` and `tiny-learn`) and `smol`, the seconds of one step,
  of one probe and of the start-up, measured on the project's shared 2-core CPU machine
  (`bench/results/readme_times.json`, load average noted there). A run is priced at the profile of its model
  (`tiny-learn` when it rolls out 4 or more answers per problem, as that preset does), its steps times the
  profile's seconds per step scaled to its population size, plus its probes scaled to its members and probe
  size (the one at step 0 answers once: every member is still the same adapter), plus the start-up.
- `POP_COST`: how a step's seconds grow with the number of members, a least-squares line through the
  population-size ablation's measured seconds per step on the same machine (1T+1S 6.4 s, 2T+2S 8.0 s, 4T+4S
  14.3 s; the single agent, 5.5 s, costs as `SINGLE_MEMBERS` members). Only the ratio is used.
- `gpu_step_seconds`: `paper-7b` on GPUs, from a throughput model (generated and trained tokens per step at
  assumed lengths, an assumed vLLM decode rate and training efficiency; docs/engine.md, "Planning a GPU run").
  Not yet measured on a GPU: every number it gives is an estimate.

A run that has steps already (a resume) is priced at its own measured seconds per step instead
(`experiment.progress.read_progress`). Anything else (another model, a custom preset on a GPU) gets no estimate
and prints no line: an unfounded number would be worse than none.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

LONG_S = 600.0  # commands estimated to run longer than this say so before they start


@dataclass(frozen=True)
class Profile:
    """Measured costs of one preset's run on the 2-core CPU machine."""

    name: str
    step_s: float  # seconds per training step at `members` members
    members: float
    probe_s: float  # seconds of one probe of `members` members at `probe_size` items per task type
    probe_size: int
    start_s: float  # model loading, sandbox, buffer seeding, first checkpoint
    load: float  # the 1-minute load average while it was measured


# Measured by the README commands (bench/results/readme_times.json; see docs/benchmarks.md, "README commands").
PROFILES: dict[str, Profile] = {
    # populora demo (24 steps) and train --set train.steps=8: 6.5-9.0 s a step at load 3-6, start-up 10-16 s
    "tiny": Profile("tiny", step_s=8.0, members=4, probe_s=0.0, probe_size=260, start_s=15.0, load=5.0),
    # train --preset tiny-learn --set train.steps=10 at load 4-9: 16.5 s a step, a probe of 4 members 280 s
    "tiny-learn": Profile(
        "tiny-learn", step_s=16.5, members=4, probe_s=280.0, probe_size=260, start_s=10.0, load=6.0
    ),
    # smol (SmolLM2-135M-Instruct, 2T+2S): docs/training.md, "smol on a CPU" (77 s per step, 2 cores)
    "smol": Profile("smol", step_s=77.0, members=4, probe_s=0.0, probe_size=256, start_s=20.0, load=2.0),
}

# seconds per step = POP_COST[0] + POP_COST[1] * members (only the ratio to the profile's size is used)
POP_COST = (3.25, 1.35)
SINGLE_MEMBERS = 1.66  # the single agent's step costs as 1.66 members' (5.5 s against 1T+1S's 6.4 s)


def members_of(cfg) -> float:
    """Members a step's cost grows with: teachers + students, the single agent as `SINGLE_MEMBERS`."""
    p = cfg.population
    return SINGLE_MEMBERS if p.mode == "single" else float(p.teachers + p.students)


def population_factor(members: float, ref_members: float) -> float:
    """Seconds per step at `members` over seconds per step at `ref_members` (the POP_COST line)."""
    a, b = POP_COST
    return (a + b * members) / (a + b * ref_members)


def probes_in(cfg, start: int, steps: int) -> int:
    """Probes a run makes between step `start` (done) and `steps`: at step 0 and every probe_every steps."""
    every = cfg.diagnostics.probe_every
    if every <= 0:
        return 0
    first = 0 if start <= 0 else (start // every + 1) * every
    return 0 if first > steps else (steps - first) // every + 1


def profile_for(cfg) -> Profile | None:
    """The measured profile a config is priced at, or None (no estimate) for any other model or device."""
    if cfg.model.device == "cuda" or cfg.model.backend == "vllm" or cfg.dist.workers > 1:
        return None
    name = str(cfg.model.name)
    if name == "tiny":
        return PROFILES["tiny-learn" if cfg.rl.rollouts >= 4 else "tiny"]
    if name in ("smol", "HuggingFaceTB/SmolLM2-135M-Instruct"):
        return PROFILES["smol"]
    return None


def step_seconds(cfg) -> float | None:
    """Estimated seconds of one training step of `cfg` on this kind of machine (None: no estimate)."""
    gpu = gpu_step_seconds(cfg)
    if gpu is not None:
        return gpu
    prof = profile_for(cfg)
    if prof is None:
        return None
    return prof.step_s * population_factor(members_of(cfg), prof.members)


def run_seconds(cfg, start: int = 0) -> float | None:
    """Estimated seconds to train `cfg` from step `start` to `cfg.train.steps`: start-up, steps, probes."""
    step_s = step_seconds(cfg)
    if step_s is None:
        return None
    steps_left = max(0, cfg.train.steps - start)
    prof = profile_for(cfg)
    if prof is None:  # the GPU model: steps only (its start-up is minutes, small against 200 steps)
        return steps_left * step_s
    one = prof.probe_s / prof.members * cfg.diagnostics.probe_size / prof.probe_size  # one member's probe
    probe_members = (
        1 if cfg.population.mode == "single" else cfg.population.teachers + cfg.population.students
    )
    n = probes_in(cfg, start, cfg.train.steps)
    # at step 0 every member is the same adapter, so the probe answers once (measured: 88 s against 280 s)
    first = 1 if n and start <= 0 else 0
    return prof.start_s + steps_left * step_s + first * one + (n - first) * one * probe_members


def read_progress(path: Path) -> tuple[int, float]:
    """(last step, seconds spent in steps 1.. and their probes) of a run folder; (0, 0.0) before its first step.

    The step-0 probe is left out: it runs once, before any step, so counting it as step 1's cost made an
    experiment's first progress lines read the probe's 90 s as the price of every step ("about 108 h left" for
    a 19 h ablation)."""
    f = Path(path) / "metrics.jsonl"
    if not f.is_file():
        return 0, 0.0
    by_step: dict[int, float] = {}
    try:
        text = f.read_text()
    except OSError:
        return 0, 0.0
    for line in text.splitlines():
        try:
            r = json.loads(line)
            step = int(r.get("step", 0))
        except (ValueError, AttributeError, TypeError):
            continue  # a line cut by a kill, or being written now
        if step >= 1:
            by_step[step] = float(r.get("step_s") or 0.0) + float(r.get("probe_s") or 0.0)
    return (max(by_step) if by_step else 0), sum(by_step.values())


# --- paper-7b on GPUs: a throughput model (docs/engine.md, "Planning a GPU run"); not yet measured on a GPU ---

PARAMS_7B = 7.62e9  # Qwen2.5-Coder-7B
TEACHER_PROMPT_TOKENS = 1600  # a code_i/code_o/code_f prompt with K = 6 references (docs/engine.md, "Memory")
PROPOSAL_TOKENS = 700  # assumed mean proposal length (the budget is 4,096)
STUDENT_PROMPT_TOKENS = 600  # assumed
ANSWER_TOKENS = 500  # assumed mean answer length (the budget is 4,096)
VALID_SHARE = 0.5  # assumed share of valid proposals (each gets rl.rollouts answers)
DECODE_TOKENS_PER_S = 3000.0  # assumed vLLM decode rate per H100 at 8 LoRA slots and half the GPU's memory
DECODE_STEP_S = (
    0.012  # assumed seconds per decode iteration: one 4,096-token row bounds each phase from below
)
GPU_FLOPS = 989e12 * 0.35  # H100 bf16 dense peak at an assumed 35% model-FLOPs utilisation
TRAIN_FLOPS_PER_TOKEN = 6 * PARAMS_7B  # forward + checkpointed forward again + backward to activations only
OTHER_S = 20.0  # sandbox validation and scoring, adapter refresh, evolution, checkpoint share (assumed)
SINGLE_COST = 1 / 1.31  # the paper: 4T+4S costs 1.31x the single agent's wall-clock on 8xH100


def gpu_step_parts(
    workers: int = 1, teachers: int = 4, prompts: int = 72, rollouts: int = 8, max_new: int = 4096
) -> dict[str, float]:
    """Seconds of one paper-7b population step on `workers` H100s, by part (the throughput model)."""
    proposals = teachers * prompts
    answers = proposals * VALID_SHARE * rollouts
    tail = max_new * DECODE_STEP_S  # the longest row's decode iterations cannot be split across GPUs
    gen_t = max(proposals * PROPOSAL_TOKENS / (workers * DECODE_TOKENS_PER_S), tail)
    gen_s = max(answers * ANSWER_TOKENS / (workers * DECODE_TOKENS_PER_S), tail)
    # prefill: every prompt once (a problem's rollouts share theirs through the prefix cache), 2 N FLOPs a token
    prefill_tokens = proposals * TEACHER_PROMPT_TOKENS + proposals * VALID_SHARE * STUDENT_PROMPT_TOKENS
    train_tokens = proposals * (TEACHER_PROMPT_TOKENS + PROPOSAL_TOKENS) + answers * (
        STUDENT_PROMPT_TOKENS + ANSWER_TOKENS
    )
    return {
        "teacher_generation": gen_t,
        "student_generation": gen_s,
        "prefill": prefill_tokens * 2 * PARAMS_7B / (workers * GPU_FLOPS),
        "update": train_tokens * TRAIN_FLOPS_PER_TOKEN / (workers * GPU_FLOPS),
        "other": OTHER_S,
    }


def gpu_step_seconds(cfg) -> float | None:
    """paper-7b's step on GPUs (the throughput model), None for any other config."""
    if cfg.model.device != "cuda" or "qwen2.5-coder-7b" not in str(cfg.model.name).lower():
        return None
    p = cfg.population
    parts = gpu_step_parts(
        max(1, cfg.dist.workers),
        teachers=p.teachers if p.mode != "single" else 4,
        prompts=cfg.tasks.prompts,
        rollouts=cfg.rl.rollouts,
        max_new=max(cfg.tasks.teacher_max_new_tokens, cfg.tasks.student_max_new_tokens),
    )
    total = sum(parts.values())
    return total * SINGLE_COST if p.mode == "single" else total


def fmt_span(seconds: float) -> str:
    """'45 s', '12 min', '9 h 40 min'."""
    s = int(round(seconds))
    if s < 90:
        return f"{s} s"
    h, m = divmod(round(s / 60), 60)
    return f"{m} min" if h == 0 else f"{h} h {m:02d} min"


def basis(cfg) -> str:
    """What an estimate of `cfg` rests on, for the line."""
    if gpu_step_seconds(cfg) is not None:
        return "paper-7b's throughput model, not yet measured on a GPU; docs/engine.md"
    prof = profile_for(cfg)
    if prof is None:
        return ""
    return f"the {prof.name} preset's steps measured on a 2-core CPU at load {prof.load:g}, scaled to the population"


def where(cfg) -> str:
    """Where the estimate holds: this machine (a measured CPU profile) or N H100s (the GPU model)."""
    if gpu_step_seconds(cfg) is None:
        return "on this machine"
    n = max(1, cfg.dist.workers)
    return f"on {n} H100 GPU" + ("s" if n > 1 else "")


def long_line(seconds: float | None, how: str, basis_text: str, place: str = "on this machine") -> str | None:
    """The up-front line when `seconds` exceeds LONG_S, else None."""
    if seconds is None or not math.isfinite(seconds) or seconds <= LONG_S:
        return None
    return (
        f"this will take about {fmt_span(seconds)} {place} (estimated from {basis_text}); Ctrl-C stops; {how}"
    )


__all__ = [
    "LONG_S",
    "PROFILES",
    "Profile",
    "basis",
    "fmt_span",
    "gpu_step_parts",
    "gpu_step_seconds",
    "long_line",
    "members_of",
    "population_factor",
    "probes_in",
    "read_progress",
    "profile_for",
    "run_seconds",
    "step_seconds",
    "where",
]
