"""Reading a run folder (docs/run-folder.md) into aligned per-step arrays.

`load_run(path)` tolerates everything a live or killed run can leave behind: missing optional files, a
cut last line, duplicated steps after a resume (the last record of a step wins), null values, members
that appear and disappear through evolution. A folder with neither `metrics.jsonl` nor `config.yaml`
is not a run and raises `NotARunError` with a message saying so.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from populora import safe_files
from populora.diagnostics.sinks import read_jsonl

__all__ = ["NotARunError", "Run", "load_run", "ROLE_ORDER"]

ROLE_ORDER = ("teacher", "student", "single")


class NotARunError(ValueError):
    """The folder is not a PopuLoRA run folder."""


def _num(v: Any) -> float:
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) and v == v else np.nan


def _member_sort_key(mid: str) -> tuple[int, int, str]:
    role = {"T": 0, "S": 1, "A": 2}.get(mid[:1], 3)
    digits = "".join(ch for ch in mid[1:] if ch.isdigit())
    return role, int(digits) if digits else 0, mid


def _sampled_records(step: int, line: dict[str, Any], items: dict[str, Any]) -> list[dict[str, Any]]:
    """A probe_items.jsonl line's sampled probe as `Run.probe_items` records (`correct`: the share right)."""
    samples = line.get("samples")
    if not line.get("sampled") or not isinstance(samples, int) or samples < 1:
        return []
    return [
        {
            "step": step,
            "member": member,
            "task": task,
            "item": items[task]["index"][k],
            "id": items[task]["id"][k],
            "correct": count / samples,
            "style": None,
            "answers": "sampled",
            "level": (items[task].get("level") or [None] * len(counts))[k],
        }
        for member, by_task in line["sampled"].items()
        for task, counts in by_task.items()
        for k, count in enumerate(counts)
    ]


@dataclass
class Run:
    """One run folder's records, sorted by step (one metrics record per step)."""

    path: Path
    config: dict[str, Any]
    metrics: list[dict[str, Any]]
    problems: list[dict[str, Any]]
    events: list[dict[str, Any]]
    label: str = ""
    probes: list[dict[str, Any]] = field(default_factory=list)
    """`{"step", "probe"[, "probe_valid", "probe_sampled", "probe_flaws"]}` of every metrics record that holds a
    `probe` (step 0 included)."""
    # What could not be read (corrupt metrics lines, steps missing from metrics.jsonl): the report shows these.
    warnings: list[str] = field(default_factory=list)
    _roles: dict[str, str] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        for rec in self.metrics:
            for mid, m in (rec.get("members") or {}).items():
                if isinstance(m, dict) and m.get("role"):
                    self._roles.setdefault(mid, m["role"])
        for ev in self.events:
            if ev.get("type") == "evolution" and ev.get("child") and ev.get("role"):
                self._roles.setdefault(ev["child"], ev["role"])
        if not self.label:
            self.label = self.default_label()

    # -- basic facts --------------------------------------------------------------------------------
    @property
    def steps(self) -> np.ndarray:
        return np.array([int(r["step"]) for r in self.metrics], dtype=np.int64)

    @property
    def n_steps(self) -> int:
        return len(self.metrics)

    @property
    def mode(self) -> str:
        for rec in self.metrics:
            if rec.get("mode"):
                return str(rec["mode"])
        mode = self.cfg("population.mode")
        return str(mode) if mode else "population"

    @property
    def members(self) -> list[str]:
        """Every member id that ever appeared, teachers first, then students, in id order."""
        return sorted(self._roles, key=_member_sort_key)

    def role_of(self, member: str) -> str | None:
        return self._roles.get(member)

    def members_with_role(self, *roles: str) -> list[str]:
        return [m for m in self.members if self._roles.get(m) in roles]

    @property
    def roles(self) -> list[str]:
        present = set(self._roles.values())
        return [r for r in ROLE_ORDER if r in present]

    def cfg(self, dotted: str, default: Any = None) -> Any:
        """A config value by dotted key (`population.teachers`), or `default`."""
        node: Any = self.config
        for part in dotted.split("."):
            if not isinstance(node, dict) or part not in node:
                return default
            node = node[part]
        return node

    def default_label(self) -> str:
        name = self.path.name
        if self.mode == "single":
            return f"{name} (single agent)"
        nt = self.cfg("population.teachers") or len(self.members_with_role("teacher")) or "?"
        ns = self.cfg("population.students") or len(self.members_with_role("student")) or "?"
        return f"{name} ({nt}T+{ns}S)"

    # -- series -------------------------------------------------------------------------------------
    def series(self, key: str | Sequence[str]) -> np.ndarray:
        """A top-level (or nested, given a key path) metric per step; NaN where missing or null."""
        path = [key] if isinstance(key, str) else list(key)
        out = np.full(self.n_steps, np.nan)
        for i, rec in enumerate(self.metrics):
            node: Any = rec
            for part in path:
                node = node.get(part) if isinstance(node, dict) else None
            out[i] = _num(node)
        return out

    def member_series(self, member: str, key: str | Sequence[str]) -> np.ndarray:
        """One member's metric per step (NaN while the member does not exist or the value is null)."""
        path = [key] if isinstance(key, str) else list(key)
        return self.series(["members", member, *path])

    def role_series(self, role: str | Sequence[str], key: str | Sequence[str]) -> np.ndarray:
        """Per-step mean of a metric over the members with the given role(s), ignoring nulls."""
        roles = (role,) if isinstance(role, str) else tuple(role)
        mids = self.members_with_role(*roles)
        if not mids:
            return np.full(self.n_steps, np.nan)
        stack = np.vstack([self.member_series(m, key) for m in mids])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN columns are expected (missing data)
            return np.nanmean(stack, axis=0)

    @property
    def probe_steps(self) -> np.ndarray:
        return np.array([int(p["step"]) for p in self.probes], dtype=np.int64)

    def probe_series(self, member: str, task: str, which: str = "probe") -> np.ndarray:
        """One member's probe accuracy on `task` at each of `probe_steps` (NaN where it was not probed);
        `which="probe_valid"`: a teacher's valid-proposal rate on the fixed teacher prompts."""
        return np.array([_num(((p.get(which) or {}).get(member) or {}).get(task)) for p in self.probes])

    def probe_items(self, answers: str = "free") -> list[dict[str, Any]]:
        """Every probe verdict of the run, one record per (probe step, member, task, item), from
        probe_items.jsonl (docs/run-folder.md): `{"step", "member", "task", "item", "id", "correct", "style",
        "answers", "level"}`. `item` is the problem's index in its fixed probe set (the same problem in every run of one
        asset), `id` its problem id, `correct` a bool, `level` its difficulty level on the graded probe (None on
        the fixed probe).

        `answers`: "free" (the greedy answers, the ones metrics.jsonl `probe` counts), "trace" or "bare" (the
        answers with that opening forced, tasks with two styles only) or "all". `style` is the style a free
        answer opened with ("trace", "bare", or None: neither, or a task with one style) and the forced style
        for forced answers. `answers="sampled"` reads the sampled probe (`diagnostics.probe_samples`) instead:
        `correct` is then the share of the item's sampled answers that were right (a float in [0, 1]).
        Only probes that metrics.jsonl logged count (a probe cut by a kill is re-run);
        of lines for the same step the last wins. A run without the file (older runs) gives []."""
        logged = set(self.probe_steps.tolist())
        lines: dict[int, dict[str, Any]] = {}
        for line in read_jsonl(self.path / "probe_items.jsonl", missing_ok=True):
            if isinstance(line.get("step"), int) and line["step"] in logged:
                lines[line["step"]] = line
        out: list[dict[str, Any]] = []
        for step in sorted(lines):
            line = lines[step]
            items, styles = line.get("items") or {}, line.get("style") or {}
            if answers == "sampled":
                out += _sampled_records(step, line, items)
                continue
            for which, by_member in (line.get("answers") or {}).items():
                if answers not in ("all", which):
                    continue
                for member, by_task in by_member.items():
                    for task, verdicts in by_task.items():
                        index, ids = items[task]["index"], items[task]["id"]
                        levels = items[task].get("level")  # graded probe only
                        seen = (styles.get(member) or {}).get(task)
                        for k, ok in enumerate(verdicts):
                            style = (seen[k] if seen else None) if which == "free" else which
                            out.append(
                                {
                                    "step": step,
                                    "member": member,
                                    "task": task,
                                    "item": index[k],
                                    "id": ids[k],
                                    "correct": bool(ok),
                                    "style": style,
                                    "answers": which,
                                    "level": levels[k] if levels else None,
                                }
                            )
        return out

    def events_of(self, kind: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e.get("type") == kind]


def _dedupe_by_step(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    by_step: dict[int, dict[str, Any]] = {}
    for rec in records:
        try:
            by_step[int(rec["step"])] = rec  # a step re-run after a resume replaces the earlier one
        except (KeyError, TypeError, ValueError):
            continue
    return [by_step[s] for s in sorted(by_step)]


def load_run(path: str | Path, label: str | None = None) -> Run:
    """Load a run folder; raise `NotARunError` if it is not one."""
    path = Path(path)
    if not path.exists():
        raise NotARunError(f"{path} does not exist")
    if not path.is_dir():
        raise NotARunError(f"{path} is not a folder; pass a run folder written by `populora train`")
    metrics_p, config_p = path / "metrics.jsonl", path / "config.yaml"
    if not metrics_p.exists() and not config_p.exists():
        raise NotARunError(
            f"{path} is not a run folder (no metrics.jsonl or config.yaml); "
            "pass the --run-dir of a `populora train` run"
        )
    config: dict[str, Any] = {}
    if config_p.exists():
        import yaml

        try:
            loaded = yaml.safe_load(safe_files.read_text(config_p))  # no link, no FIFO (issue 50)
        except yaml.YAMLError as exc:
            raise NotARunError(f"{config_p} is not valid YAML: {exc}") from exc
        config = loaded if isinstance(loaded, dict) else {}
    with warnings.catch_warnings(record=True) as caught:
        # corrupt middle lines: the report shows what is readable and says what it skipped (Run.warnings)
        warnings.simplefilter("always", UserWarning)
        records = _dedupe_by_step(read_jsonl(metrics_p, missing_ok=True))
        problems = [p for p in read_jsonl(path / "problems.jsonl", missing_ok=True) if "step" in p]
        events = [e for e in read_jsonl(path / "events.jsonl", missing_ok=True) if "step" in e]
    # The step-0 probe record (no `members`: nothing was trained yet) is a probe, not a step.
    metrics = [r for r in records if "members" in r or "probe" not in r]
    probes = [
        {
            "step": int(r["step"]),
            **{
                k: r[k]
                for k in ("probe", "probe_valid", "probe_sampled", "probe_flaws")
                if isinstance(r.get(k), dict)
            },
        }
        for r in records
        if isinstance(r.get("probe"), dict)
    ]
    notes = [str(w.message) for w in caught if issubclass(w.category, UserWarning)]
    notes += _missing_steps(metrics_p, metrics)
    events.sort(key=lambda e: e["step"])
    return Run(
        path=path,
        config=config,
        metrics=metrics,
        problems=problems,
        events=events,
        label=label or "",
        probes=probes,
        warnings=notes,
    )


def _missing_steps(metrics_p: Path, metrics: list[dict[str, Any]]) -> list[str]:
    """A warning if steps are missing from the middle of metrics.jsonl (a deleted or lost line).

    The trainer writes one line per step, so any gap between the first and the last logged step is a line
    that was deleted or lost; the curves would silently join across it.
    """
    steps = [int(r["step"]) for r in metrics]
    if len(steps) < 2:
        return []
    have = set(steps)
    gaps = [s for s in range(steps[0], steps[-1] + 1) if s not in have]
    if not gaps:
        return []
    shown = ", ".join(map(str, gaps[:10])) + (f" and {len(gaps) - 10} more" if len(gaps) > 10 else "")
    return [f"{metrics_p}: no line for step(s) {shown} (deleted or lost); curves skip them"]
