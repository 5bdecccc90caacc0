"""The difficulty-stratified probe sets: held-out problems of the graded generator, tagged with their level.

`populora/assets/probe_graded/<task>.jsonl.gz` hold `GRADED_PROBE_SIZE` (260) problems per task type, 52 per
level of `pretrain/graded.py` (levels 1-5), drawn by `graded.probe_items` from the graded generator's "probe"
split: the split is on the program with its literals masked, so no probe program has a constant-variant in any
corpus or seed set drawn from "train". Every problem was validated by its task in the real sandbox. Lines are
`{"level": L, "problem": Problem.to_dict()}`, interleaved by level (1, 2, 3, 4, 5, 1, 2, ...), so the first k
items of a set are spread evenly across the levels whatever k (`diagnostics.probe_size`).

This module owns which items a probe scores and how verdicts are read per level; `train/probe.py` owns the
generation and scoring. The trainer uses these sets with `diagnostics.probe_set: graded` (the default, `fixed`,
keeps the sets of `pretrain/probe.py`, so old configs and runs read the same); its metrics then carry
`probe_levels`, `{member: {task: {level: accuracy}}}`, and each probe_items.jsonl line the level of every item.

Rebuild (only when the graded generator changes): `python -m populora.pretrain.graded_probe`.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path

from populora.pretrain.graded import LEVELS, TASKS

GRADED_PROBE_DIR = Path(__file__).resolve().parents[1] / "assets" / "probe_graded"
GRADED_PROBE_SIZE = 52 * len(LEVELS)  # >= 256 per task type, the same number at every level
GRADED_PROBE_SEED = 30_030  # graded.probe_items' stream; the masked split keeps them out of training
PROBE_SETS = ("fixed", "graded")
# Token budgets above the longest perfect answer in these sets (bundled tokenizer; max 44 / 246 / 261 tokens):
# code_o answers carry a trace first; code_f answers are whole programs of up to 20 lines.
MAX_NEW_TOKENS = {"code_i": 64, "code_o": 256, "code_f": 288}
TEACHER_MAX_NEW_TOKENS = {"code_i": 256, "code_o": 256, "code_f": 384}  # max 245 / 227 / 357


class GradedProbeError(RuntimeError):
    """A graded probe set is missing or malformed; the message says how to rebuild it."""


def graded_probe_path(task: str, folder: Path | None = None) -> Path:
    if task not in TASKS:
        raise GradedProbeError(f"unknown task {task!r}; graded probe sets exist for {', '.join(TASKS)}")
    return Path(folder or GRADED_PROBE_DIR) / f"{task}.jsonl.gz"


def interleave(items: Sequence[tuple[int, object]]) -> list[tuple[int, object]]:
    """(level, item) pairs reordered level by level in turn (1, 2, ..., 5, 1, 2, ...), each level's items in
    their given order: any prefix is as even across the levels as it can be."""
    by_level: dict[int, list] = {}
    for level, item in items:
        by_level.setdefault(level, []).append(item)
    out: list[tuple[int, object]] = []
    for i in range(max((len(v) for v in by_level.values()), default=0)):
        out += [(lv, by_level[lv][i]) for lv in sorted(by_level) if i < len(by_level[lv])]
    return out


def build_graded_probe(
    task: str, sandbox, n: int = GRADED_PROBE_SIZE, seed: int = GRADED_PROBE_SEED
) -> list[tuple[int, object]]:
    """`n` validated probe problems of `task`, evenly across the levels, interleaved by level."""
    from populora.pretrain.graded import probe_items

    return interleave(probe_items(task, n, seed=seed, sandbox=sandbox))


def write_jsonl_gz(records: Iterable[Mapping], path: Path) -> None:
    """gzip'd JSON lines, keys sorted, mtime 0: the same records give the same bytes (the bundled probe sets)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    raw = "".join(json.dumps(r, sort_keys=True) + "\n" for r in records).encode()
    with open(path, "wb") as fh, gzip.GzipFile(fileobj=fh, mode="wb", mtime=0, filename="") as gz:
        gz.write(raw)


def read_jsonl_gz(path: Path) -> Iterator[tuple[int, dict]]:
    """(line number, record) of each non-blank line of a `write_jsonl_gz` file."""
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            if line.strip():
                yield n, json.loads(line)


def write_graded_probe(items: Sequence[tuple[int, object]], path: Path) -> None:
    """gzip'd JSON lines (mtime 0, so the same items give the same bytes)."""
    write_jsonl_gz(({"level": lv, "problem": p.to_dict()} for lv, p in items), path)


def load_graded_probe(task: str, folder: Path | None = None) -> list[tuple[int, object]]:
    """The (level, Problem) items of one task type, in file order."""
    from populora.tasks import Problem

    path = graded_probe_path(task, folder)
    if not path.is_file():
        raise GradedProbeError(
            f"no graded probe set at {path}; rebuild it with `python -m populora.pretrain.graded_probe "
            f"--out {path.parent}`"
        )
    out = []
    for n, d in read_jsonl_gz(path):
        if d.get("level") not in LEVELS or d.get("problem", {}).get("task") != task:
            raise GradedProbeError(f"{path} line {n}: not a level-tagged {task} item; rebuild the set")
        out.append((int(d["level"]), Problem.from_dict(d["problem"])))
    return out


def probe_selection(
    probe_set: str, size: int, types: Sequence[str] = TASKS, levels: Sequence[int] = ()
) -> tuple[dict[str, list], dict[str, list[int]] | None]:
    """The items a probe scores: `({task: [Problem] (the first `size`)}, {task: [level per item]} or None)`.
    `fixed`: `pretrain/probe.py`'s sets (no levels); `graded`: these sets (spread evenly over the levels, or
    only the items of `levels` when given)."""
    if probe_set == "fixed":
        if levels:
            raise GradedProbeError("the fixed probe sets have no levels; pick levels of the graded sets")
        from populora.pretrain.probe import load_probe

        return {t: load_probe(t)[:size] for t in types}, None
    if probe_set != "graded":
        raise GradedProbeError(f"unknown probe set {probe_set!r}; expected one of {', '.join(PROBE_SETS)}")
    keep = set(levels or LEVELS)
    items = {t: [(lv, p) for lv, p in load_graded_probe(t) if lv in keep][:size] for t in types}
    return {t: [p for _, p in v] for t, v in items.items()}, {
        t: [lv for lv, _ in v] for t, v in items.items()
    }


def level_accuracy(
    correct: Mapping[str, Mapping[str, Sequence[int]]], levels: Mapping[str, Sequence[int]]
) -> dict[str, dict[str, dict[str, float]]]:
    """`{member: {task: {level: accuracy}}}` from per-item verdicts `{member: {task: [0/1 per item]}}` and the
    items' levels `{task: [level]}` (levels as strings: JSON keys)."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    for m, by_task in correct.items():
        for t, verdicts in by_task.items():
            if t not in levels:
                continue
            if len(levels[t]) != len(verdicts):
                raise GradedProbeError(f"{t}: {len(verdicts)} verdicts for {len(levels[t])} levelled items")
            groups: dict[int, list[int]] = {}
            for lv, ok in zip(levels[t], verdicts, strict=True):
                groups.setdefault(lv, []).append(int(ok))
            out.setdefault(m, {})[t] = {str(lv): sum(v) / len(v) for lv, v in sorted(groups.items())}
    return out


def main(argv: list[str] | None = None) -> None:
    import argparse

    from populora.sandbox import Sandbox

    ap = argparse.ArgumentParser(description="Build the difficulty-stratified (graded) probe sets.")
    ap.add_argument("--out", type=Path, default=GRADED_PROBE_DIR)
    ap.add_argument("--n", type=int, default=GRADED_PROBE_SIZE)
    ap.add_argument("--seed", type=int, default=GRADED_PROBE_SEED)
    args = ap.parse_args(argv)
    with Sandbox(workers=2) as sb:
        for task in TASKS:
            items = build_graded_probe(task, sb, n=args.n, seed=args.seed)
            write_graded_probe(items, graded_probe_path(task, args.out))
            print(f"{task}: {len(items)} items -> {graded_probe_path(task, args.out)}")


if __name__ == "__main__":
    main()


__all__ = [
    "GRADED_PROBE_DIR",
    "GRADED_PROBE_SEED",
    "GRADED_PROBE_SIZE",
    "MAX_NEW_TOKENS",
    "PROBE_SETS",
    "GradedProbeError",
    "build_graded_probe",
    "interleave",
    "level_accuracy",
    "load_graded_probe",
    "probe_selection",
    "write_graded_probe",
]
