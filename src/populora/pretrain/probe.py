"""Fixed held-out probe sets (one per task type) and greedy scoring of an engine slot on them.

The probe sets ship with the package (`populora/assets/probe/<task>.jsonl.gz`, one `Problem.to_dict()` per
line). They are drawn from the program generator's "heldout" split (`programs.program_split`), which the
pretraining corpus and the trainer's synthetic seeds never draw from, with a seed of their own
(`PROBE_SEED`) and the bundled model's generator settings; every problem was validated by its task in the
real sandbox (`task.problem_from`), so its outputs are what the sandbox computes.

    from populora.pretrain.probe import load_probes, score_probe
    probes = load_probes()                      # {"code_i": [Problem, ...], "code_o": [...], "code_f": [...]}
    acc = score_probe(engine, slot, probes, "compact", 160, sandbox)   # {"code_i": 0.41, ...}

Rebuild (only when the generator changes; the files are part of the package):
`python -m populora.pretrain.probe --out src/populora/assets/probe`.
"""

from __future__ import annotations

import gzip
import json
import random
from collections.abc import Mapping, Sequence
from pathlib import Path

from populora.pretrain.programs import (
    DEFAULT_LEVEL,
    DEFAULT_NAMES,
    MAX_STATEMENTS,
    sample_code_f,
    sample_triplet,
)

TASKS = ("code_i", "code_o", "code_f")
PROBE_DIR = Path(__file__).resolve().parents[1] / "assets" / "probe"
PROBE_SEED = 15_015  # its own stream; the split (not the seed) is what keeps probes out of training data
PROBE_SIZE = 256
# Enough new tokens for a perfect compact answer (p95 of gold answers is about 20 for code_i/code_o and
# about 100 for code_f programs; see `populora bench tiny-model`), and for code_o the execution trace the
# bundled model writes first (pretrain/trace.py: p95 about 70 tokens).
MAX_NEW_TOKENS = {"code_i": 64, "code_o": 128, "code_f": 160}


class ProbeError(RuntimeError):
    """A probe set is missing or malformed; the message says how to rebuild it."""


def probe_path(task: str, folder: Path | None = None) -> Path:
    if task not in TASKS:
        raise ProbeError(f"unknown task {task!r}; probe sets exist for {', '.join(TASKS)}")
    return Path(folder or PROBE_DIR) / f"{task}.jsonl.gz"


def load_probe(task: str, folder: Path | None = None) -> list:
    """The fixed probe problems of one task type, in file order."""
    from populora.tasks import Problem

    path = probe_path(task, folder)
    if not path.is_file():
        raise ProbeError(
            f"no probe set at {path}; rebuild it with `python -m populora.pretrain.probe --out {path.parent}`"
        )
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        problems = [Problem.from_dict(json.loads(line)) for line in fh if line.strip()]
    bad = [p.id for p in problems if p.task != task]
    if bad:
        raise ProbeError(f"{path} holds problems of another task ({bad[:3]}); rebuild it")
    return problems


def load_probes(folder: Path | None = None) -> dict[str, list]:
    """All three probe sets: {task: [Problem, ...]}."""
    return {t: load_probe(t, folder) for t in TASKS}


def build_probe(
    task: str,
    sandbox,
    n: int = PROBE_SIZE,
    seed: int = PROBE_SEED,
    names: str = DEFAULT_NAMES,
    max_statements: int = MAX_STATEMENTS,
    level: str = DEFAULT_LEVEL,
) -> list:
    """`n` distinct held-out problems of `task`, each validated by the task in `sandbox`.

    Programs come from the generator's "heldout" split only; a program is used at most once per set.
    """
    from populora.tasks import InvalidProblem, get

    t = get(task)
    # One stream per task type, so the sets do not depend on each other's sizes.
    rng = random.Random(f"{seed}:{task}")
    gen = dict(names=names, max_statements=max_statements, split="heldout", level=level)
    out: list = []
    seen: set[str] = set()
    tries = 0
    while len(out) < n:
        tries += 1
        if tries > 50 * n:
            raise ProbeError(
                f"could only build {len(out)} of {n} {task} probe problems; the generator or "
                "the task policy rejects almost everything"
            )
        if task == "code_f":
            prog, pairs = sample_code_f(rng, t.config.n_inputs, **gen)
            program, inputs, message = prog.code, [i for i, _ in pairs], prog.message
        else:
            tr = sample_triplet(rng, **gen)
            program, inputs, message = tr.program, [tr.input], ""
        if program in seen:
            continue
        try:
            problem = t.problem_from(sandbox, program, inputs, message, "probe", 0)
        except InvalidProblem:
            continue  # the task policy refuses a rare generated program: draw another
        seen.add(program)
        out.append(problem)
    return out


def write_probe(problems: Sequence, path: Path) -> None:
    """Write problems as gzip'd JSON lines (mtime 0, so the same problems give the same bytes)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    raw = "".join(json.dumps(p.to_dict(), sort_keys=True) + "\n" for p in problems).encode()
    with open(path, "wb") as fh, gzip.GzipFile(fileobj=fh, mode="wb", mtime=0, filename="") as gz:
        gz.write(raw)


def score_probe(
    engine,
    slot: int,
    problems: Mapping[str, Sequence] | Sequence,
    template: str = "compact",
    max_new_tokens: int | Mapping[str, int] | None = None,
    sandbox=None,
) -> dict[str, float]:
    """Greedy accuracy of engine slot `slot` per task type on probe problems.

    - `problems`: {task: [Problem, ...]} (e.g. `load_probes()`), or one flat list of problems of any tasks.
    - `template`: the task prompt template (`"compact"` for the tiny model).
    - `max_new_tokens`: an int for every task, a {task: int} mapping, or None for `MAX_NEW_TOKENS`.
    - `sandbox`: a running `populora.sandbox.Sandbox` (scoring executes code_i answers and code_f programs).
    One batched `engine.generate` call for all problems (temperature 0), then one `task.score` per problem.
    Returns {task: accuracy in [0, 1]} for the task types present.
    """
    from populora.engine import GenRequest
    from populora.tasks import get

    if isinstance(problems, Mapping):
        flat = [p for ps in problems.values() for p in ps]
    else:
        flat = list(problems)
    if not flat:
        return {}
    if sandbox is None:
        raise ProbeError("score_probe needs a running Sandbox (code_i and code_f answers are executed)")

    def budget(task: str) -> int:
        if max_new_tokens is None:
            return MAX_NEW_TOKENS[task]
        if isinstance(max_new_tokens, Mapping):
            return max_new_tokens[task]
        return int(max_new_tokens)

    tasks = {p.task: get(p.task) for p in flat}
    requests = [
        GenRequest(
            slot=slot,
            prompt=tasks[p.task].student_prompt(p, template=template),
            max_new_tokens=budget(p.task),
            temperature=0.0,
        )
        for p in flat
    ]
    gens = engine.generate(requests)
    correct: dict[str, list[bool]] = {}
    for p, g in zip(flat, gens, strict=True):
        task = tasks[p.task]
        ok = task.score(p, [task.parse_answer(g.text)], sandbox)[0]
        correct.setdefault(p.task, []).append(bool(ok))
    return {t: sum(v) / len(v) for t, v in correct.items()}


def main(argv: list[str] | None = None) -> None:
    import argparse

    from populora.sandbox import Sandbox

    ap = argparse.ArgumentParser(description="Build the fixed held-out probe sets.")
    ap.add_argument("--out", type=Path, default=PROBE_DIR)
    ap.add_argument("--n", type=int, default=PROBE_SIZE)
    ap.add_argument("--seed", type=int, default=PROBE_SEED)
    args = ap.parse_args(argv)
    with Sandbox(workers=2) as sb:
        for task in TASKS:
            problems = build_probe(task, sb, n=args.n, seed=args.seed)
            write_probe(problems, probe_path(task, args.out))
            print(f"{task}: {len(problems)} problems -> {probe_path(task, args.out)}")


if __name__ == "__main__":
    main()
