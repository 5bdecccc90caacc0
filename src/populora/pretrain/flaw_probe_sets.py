"""The bundled misconception probe sets: held-out items per planted class, validated, tagged with their class.

Two kinds, each in `populora/assets/probe_flaws/<kind>_<task>.jsonl.gz` (code_o, code_i), `FLAW_PROBE_PER_CLASS`
(64) items per class of `flaws.CLASSES` (code_i: `CODE_I_CLASSES`), all from the "probe" split (constant- and
name-masked, so no item has a masked twin in any corpus or RL stream, which draw from "train"):

- `atoms` (the default): one-statement programs around the class's feature (`flaw_atoms.sample_atom`), the form
  the planted model (`tiny-flaws`) was drilled on: where a misconception shows as a rule on new programs;
- `graded`: whole programs of the graded generator at levels 1, 1, 2 that carry the class
  (`flaws.sample_flaw_item`): whether the misreading carries to longer programs.

Each item was validated by its task in the real sandbox (the program's output on the item's input is the
item's right answer) and is distinct as (program, input); `masked_programs` counts the distinct masked programs
a class has (the rarer classes repeat one with other constants or inputs). Lines are `{"flaw", "level",
"message", "wrong", "problem": Problem.to_dict()}`, interleaved by class (a, b, c, ..., a, b, c, ...), so the
first k items of a set are spread evenly over the classes whatever k.

Drawing graded items costs 0.5-3 s each (programs are redrawn until one carries the class; 28 minutes for both
graded sets here), atoms a few ms; reading the bundled sets costs milliseconds, so the trainer's probe
(`diagnostics.probe_flaws`), `experiment control rl --probe-set flaws` and `bench tiny-model --flaws` read these.
This module owns the sets and their tags (`unflawed_tags`); `flaw_probe.py` owns the scoring of a model
folder.

Rebuild (only when a generator or the classes change): `python -m populora.pretrain.flaw_probe_sets [--kind
atoms|graded]`.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from populora.pretrain.flaws import CLASSES, CODE_I_CLASSES

FLAW_PROBE_SEED = 49_049
FLAW_PROBE_LEVELS: tuple[int, ...] = (1, 1, 2)  # where the bundled models' answers can be right
FLAW_TASKS = ("code_o", "code_i")
FLAW_PROBE_DIR = Path(__file__).resolve().parents[1] / "assets" / "probe_flaws"
FLAW_PROBE_PER_CLASS = 64
FLAW_PROBE_KINDS = ("atoms", "graded")
UNFLAWED = "unflawed"  # the tag of a graded probe item whose input no class's misreading changes


class FlawProbeError(RuntimeError):
    """A misconception probe set is missing or malformed; the message says how to rebuild it."""


@dataclass(frozen=True)
class FlawProbeItem:
    """One validated item: the task's `Problem`, its class and the misconceived reader's answer (`wrong`)."""

    flaw: str
    problem: object  # tasks.Problem
    wrong: str
    level: int
    message: str = ""


def classes_for(task: str) -> tuple[str, ...]:
    """The planted classes `task` has items of (code_i: `CODE_I_CLASSES`)."""
    return CODE_I_CLASSES if task == "code_i" else CLASSES


def flaw_probe_path(task: str, folder: Path | None = None, kind: str = "atoms") -> Path:
    if task not in FLAW_TASKS:
        raise FlawProbeError(
            f"unknown task {task!r}; misconception probe sets exist for {', '.join(FLAW_TASKS)}"
        )
    if kind not in FLAW_PROBE_KINDS:
        raise FlawProbeError(
            f"unknown misconception set {kind!r}; the sets are {', '.join(FLAW_PROBE_KINDS)}"
        )
    return Path(folder or FLAW_PROBE_DIR) / f"{kind}_{task}.jsonl.gz"


def build_flaw_probe(
    task: str,
    sandbox,
    per_class: int = FLAW_PROBE_PER_CLASS,
    seed: int = FLAW_PROBE_SEED,
    progress=None,
    kind: str = "atoms",
) -> list[FlawProbeItem]:
    """`per_class` validated items per class of `task`, interleaved by class: each class's own stream of
    held-out items (`kind` "atoms": `flaw_atoms.sample_atom`; "graded": `flaws.sample_flaw_item` at
    `FLAW_PROBE_LEVELS`), distinct as (program, input). Items the task refuses, or whose sandboxed answer differs
    from the generator's, are skipped. `progress(task, flaw, count)` is called after each class."""
    from populora.pretrain.flaw_atoms import sample_atom
    from populora.pretrain.flaws import sample_flaw_item
    from populora.tasks import InvalidProblem, get

    flaw_probe_path(task, kind=kind)  # names a bad task or kind
    t = get(task)
    by_class: dict[str, list[FlawProbeItem]] = {}
    for flaw in classes_for(task):
        if kind == "atoms":
            rng = random.Random(f"{seed}:atoms:{task}:{flaw}")
        else:
            rng = random.Random(f"{seed}:{task}:{flaw}")  # flaw_probe.flaw_probe_items' stream
        seen: set[tuple[str, str]] = set()
        got: list[FlawProbeItem] = []
        while len(got) < per_class:
            if kind == "atoms":
                item = sample_atom(rng, task, flaw, split="probe")
            else:
                item = sample_flaw_item(rng, task, FLAW_PROBE_LEVELS, split="probe", flaw=flaw)
            given, gold = (item.shown, item.right) if task == "code_o" else (item.right, item.shown)
            if (item.program, given) in seen:
                continue
            seen.add((item.program, given))
            try:
                p = t.problem_from(sandbox, item.program, [given], "", "probe", 0)
            except InvalidProblem:
                continue
            if p.outputs[0] == gold:
                got.append(FlawProbeItem(flaw, p, item.wrong, item.level, item.message))
        by_class[flaw] = got
        if progress is not None:
            progress(task, flaw, len(got))
    out: list[FlawProbeItem] = []
    for i in range(per_class):
        out += [by_class[c][i] for c in classes_for(task)]
    return out


def masked_programs(items: Sequence[FlawProbeItem]) -> dict[str, int]:
    """Distinct constant- and name-masked programs per class (how independent a class's items are)."""
    from populora.tasks.masking import program_key

    keys: dict[str, set[str]] = {}
    for i in items:
        keys.setdefault(i.flaw, set()).add(program_key(i.problem.program) or i.problem.program)
    return {c: len(v) for c, v in keys.items()}


def write_flaw_probe(items: Sequence[FlawProbeItem], path: Path) -> None:
    """gzip'd JSON lines (mtime 0, so the same items give the same bytes)."""
    from populora.pretrain.graded_probe import write_jsonl_gz

    write_jsonl_gz(
        (
            {
                "flaw": i.flaw,
                "level": i.level,
                "message": i.message,
                "wrong": i.wrong,
                "problem": i.problem.to_dict(),
            }
            for i in items
        ),
        path,
    )


def load_flaw_probe(task: str, folder: Path | None = None, kind: str = "atoms") -> list[FlawProbeItem]:
    """The items of one task type's `kind` set, in file order (interleaved by class)."""
    from populora.tasks import Problem

    path = flaw_probe_path(task, folder, kind)
    if not path.is_file():
        raise FlawProbeError(
            f"no misconception probe set at {path}; rebuild it with `python -m populora.pretrain.flaw_probe_sets "
            f"--kind {kind} --out {path.parent}`"
        )
    allowed = set(classes_for(task))
    from populora.pretrain.graded_probe import read_jsonl_gz

    out = []
    for n, d in read_jsonl_gz(path):
        if d.get("flaw") not in allowed or d.get("problem", {}).get("task") != task:
            raise FlawProbeError(f"{path} line {n}: not a class-tagged {task} item; rebuild the set")
        out.append(
            FlawProbeItem(
                d["flaw"], Problem.from_dict(d["problem"]), d["wrong"], int(d["level"]), d["message"]
            )
        )
    return out


def flaw_probe_selection(
    per_class: int, types: Sequence[str] = FLAW_TASKS, kind: str = "atoms"
) -> tuple[dict[str, list], dict[str, list[str]], dict[str, list[str]]]:
    """The first `per_class` items of each class of the `kind` sets, for the flawed types among `types`:
    `({task: [Problem]}, {task: [class per item]}, {task: [misconceived answer per item]})`."""
    if not 1 <= per_class <= FLAW_PROBE_PER_CLASS:
        raise FlawProbeError(
            f"per_class must be in [1, {FLAW_PROBE_PER_CLASS}] (the bundled sets hold {FLAW_PROBE_PER_CLASS} "
            f"items a class), got {per_class}"
        )
    problems: dict[str, list] = {}
    tags: dict[str, list[str]] = {}
    wrong: dict[str, list[str]] = {}
    for task in (t for t in types if t in FLAW_TASKS):
        items = load_flaw_probe(task, kind=kind)[: per_class * len(classes_for(task))]
        problems[task] = [i.problem for i in items]
        tags[task] = [i.flaw for i in items]
        wrong[task] = [i.wrong for i in items]
    return problems, tags, wrong


def unflawed_tags(problems: Mapping[str, Sequence]) -> dict[str, list[str]]:
    """Per item of code_o / code_i probe problems: the one class whose misreading changes its answer on the
    item's input, `"several"` when more do, or `UNFLAWED` ("nothing else broke" is read on these)."""
    from populora.pretrain.flaws import changed_by

    out: dict[str, list[str]] = {}
    for task, ps in problems.items():
        if task not in FLAW_TASKS:
            continue
        tags = []
        for p in ps:
            changed = changed_by(p.program, p.inputs[0], p.outputs[0])
            tags.append(UNFLAWED if not changed else changed[0] if len(changed) == 1 else "several")
        out[task] = tags
    return out


def main(argv: list[str] | None = None) -> None:
    import argparse

    from populora.sandbox import Sandbox

    ap = argparse.ArgumentParser(
        description="Build the bundled misconception probe sets (held-out, per class)."
    )
    ap.add_argument("--out", type=Path, default=FLAW_PROBE_DIR)
    ap.add_argument("--per-class", type=int, default=FLAW_PROBE_PER_CLASS)
    ap.add_argument("--seed", type=int, default=FLAW_PROBE_SEED)
    ap.add_argument("--kind", choices=(*FLAW_PROBE_KINDS, "all"), default="all")
    args = ap.parse_args(argv)

    def say(task: str, flaw: str, n: int) -> None:
        print(f"  {task} {flaw}: {n} items", flush=True)

    kinds = FLAW_PROBE_KINDS if args.kind == "all" else (args.kind,)
    with Sandbox(workers=2) as sb:
        for kind in kinds:
            for task in FLAW_TASKS:
                items = build_flaw_probe(task, sb, args.per_class, args.seed, say, kind)
                path = flaw_probe_path(task, args.out, kind)
                write_flaw_probe(items, path)
                print(f"{kind} {task}: {len(items)} items -> {path}", flush=True)
                print(f"  distinct masked programs per class: {masked_programs(items)}", flush=True)


if __name__ == "__main__":
    main()


__all__ = [
    "FLAW_PROBE_DIR",
    "FLAW_PROBE_KINDS",
    "FLAW_PROBE_PER_CLASS",
    "UNFLAWED",
    "FlawProbeError",
    "FlawProbeItem",
    "build_flaw_probe",
    "flaw_probe_path",
    "flaw_probe_selection",
    "load_flaw_probe",
    "masked_programs",
    "unflawed_tags",
    "write_flaw_probe",
]
