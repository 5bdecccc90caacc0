"""What a metrics.jsonl record sends to TensorBoard, W&B and MLflow: few curves, each unbroken across evolution.

metrics.jsonl keeps every number; a tracker gets three kinds of scalar (docs/reading-a-run.md):

    run/...                    the step's own numbers (coverage, tokens_per_s, phase_s/..., step_s, ...)
    role/<role>/<m>_mean|_best the mean and the best over the role's members, m in reward, solve_rate,
                               valid_rate, mu (the best is the highest value)
    member/<lineage>/<m>       one member's reward, solve_rate, valid_rate, mu, sigma, entropy, loss,
                               response_len, and `id` (the number of the member id now in that lineage)

Member ids change at every evolution (T1 is replaced by T4), which would cut every per-id curve. A *lineage*
is a stable name, `teacher-0`, `teacher-1`, ..., `student-0`, ... in the order of the first step's ids; a child
inherits the lineage of the member it replaces (`evolution` events: child, replaced), so `member/teacher-1/...`
runs from T1 to T4 to T6 in one curve. Per-matchup pairs and per-task solve rates stay in the JSONL only.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from typing import Any

ROLE_METRICS = ("reward", "solve_rate", "valid_rate", "mu")
MEMBER_METRICS = ("reward", "solve_rate", "valid_rate", "mu", "sigma", "entropy", "loss", "response_len")
# the step's own numbers, not per member: sent under run/
SKIP_TOP = {"step", "time", "mode", "members", "matchups", "games", "probe", "probe_valid"}


def _num(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
        return None
    return float(v)


def _metric(member: Mapping[str, Any], name: str) -> float | None:
    v = member.get(name)
    if isinstance(v, Mapping):  # solve_rate: {task: rate, ..., "all": rate}
        v = v.get("all")
    return _num(v)


def _id_number(mid: str) -> int:
    m = re.search(r"\d+$", mid)
    return int(m.group()) if m else 0


class Lineages:
    """Member id -> stable lineage name; `start` names the first members, `inherit` follows an evolution."""

    def __init__(self) -> None:
        self.names: dict[str, str] = {}

    def start(self, members: Mapping[str, Mapping[str, Any]]) -> None:
        by_role: dict[str, list[str]] = {}
        for mid, m in members.items():
            by_role.setdefault(str(m.get("role", "member")), []).append(mid)
        for role, ids in by_role.items():
            for k, mid in enumerate(sorted(ids, key=_id_number)):
                self.names.setdefault(mid, f"{role}-{k}")

    def inherit(self, child: str, replaced: str) -> None:
        self.names[child] = self.names.get(replaced, replaced)

    def replay(self, events: Iterable[Mapping[str, Any]]) -> None:
        """Follow the evolution events of a run's events.jsonl (a resumed run rebuilds its lineages)."""
        for e in events:
            if e.get("type") == "evolution" and e.get("child") and e.get("replaced"):
                self.inherit(str(e["child"]), str(e["replaced"]))

    def name(self, mid: str) -> str:
        return self.names.get(mid, mid)  # an id no evolution event explains keeps its own name


def _flatten(obj: Mapping[str, Any], prefix: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for key, val in obj.items():
        name = f"{prefix}/{key}"
        if isinstance(val, Mapping):
            out.update(_flatten(val, name))
        elif (v := _num(val)) is not None:
            out[name] = v
    return out


def tracker_scalars(record: Mapping[str, Any], lineages: Lineages) -> dict[str, float]:
    """The scalars of one step's metrics record for a tracker (see the module docstring)."""
    out = _flatten({k: v for k, v in record.items() if k not in SKIP_TOP}, "run")
    members = record.get("members")
    if not isinstance(members, Mapping):
        return out
    if not lineages.names:
        lineages.start(members)
    by_role: dict[str, list[Mapping[str, Any]]] = {}
    for mid, m in members.items():
        if not isinstance(m, Mapping):
            continue
        by_role.setdefault(str(m.get("role", "member")), []).append(m)
        lin = lineages.name(mid)
        for name in MEMBER_METRICS:
            if (v := _metric(m, name)) is not None:
                out[f"member/{lin}/{name}"] = v
        out[f"member/{lin}/id"] = float(_id_number(mid))
    for role, ms in by_role.items():
        for name in ROLE_METRICS:
            vals = [v for m in ms if (v := _metric(m, name)) is not None]
            if vals:
                out[f"role/{role}/{name}_mean"] = sum(vals) / len(vals)
                out[f"role/{role}/{name}_best"] = max(vals)
    return out


__all__ = ["Lineages", "MEMBER_METRICS", "ROLE_METRICS", "tracker_scalars"]
