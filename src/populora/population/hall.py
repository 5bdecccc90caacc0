"""The hall of fame's bookkeeping: who is in it, which engine slot each entry holds, who joins next, and how
one round's verdicts become the `hof` record of metrics.jsonl. Pure Python, no torch: the games themselves
(generation, the sandbox, files) are `populora.train.hall`'s.

The hall holds frozen reference players (docs/hall-of-fame.md):

- `base`: the base model with no adapter (a zero LoRA update), in the hall from the first round to the end, in
  both roles. Its column of the record is the absolute scale: the same opponent for every step of every run
  on that base model.
- snapshots: after every round the best teacher and the best student by lower confidence bound
  (mu - lcb_k sigma, the ranking evolution uses) are copied in, frozen. Each role keeps its `size` most recent
  snapshots; a new one takes the slot of the oldest. In single mode the one agent is snapshotted once and
  plays both roles.

Entry ids name what they are and are safe folder names: `base`, or `s<step:06d>-<member id>`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

BASE = "base"
ENTRY_RE = re.compile(r"^(base|s\d{6}-[A-Za-z][A-Za-z0-9_-]{0,63})$")
ROLES = ("both", "teacher", "student")


@dataclass
class HallEntry:
    """One frozen reference player."""

    id: str
    role: str  # "both" (the base, single-mode snapshots), "teacher" or "student": which side it plays
    step: int  # the step after which it was frozen (0 for the base)
    member: str | None  # the member it copies (None for the base)
    slot: int  # the engine slot holding its adapter
    exam: int | None = None  # as a teacher: how many valid problems its exam holds; None = not made yet

    @property
    def teaches(self) -> bool:
        return self.role in ("both", "teacher")

    @property
    def studies(self) -> bool:
        return self.role in ("both", "student")


def entry_id(step: int, member: str) -> str:
    return f"s{step:06d}-{member}"


def best_by_lcb(members: Iterable[tuple[str, str, float | None, float | None]], k: float) -> dict[str, str]:
    """`{role: member id}`: per role the member with the highest mu - k * sigma (ties: the smaller id).

    `members` are `(id, role, mu, sigma)`; a member without a rating (the single agent) is its role's only
    candidate."""
    best: dict[str, tuple[float, str]] = {}
    for mid, role, mu, sigma in members:
        lcb = 0.0 if mu is None or sigma is None else mu - k * sigma
        cur = best.get(role)
        if cur is None or lcb > cur[0] or (lcb == cur[0] and mid < cur[1]):
            best[role] = (lcb, mid)
    return {role: mid for role, (_, mid) in best.items()}


class Hall:
    """The entries and their slots. Slots `first_slot ..` are the hall's: the base's first, then `size` per
    snapshot pool (teachers then students; one pool `both` in single mode)."""

    def __init__(self, size: int, first_slot: int, single: bool) -> None:
        self.size, self.first_slot, self.single = size, first_slot, single
        self.entries: list[HallEntry] = []

    @property
    def n_slots(self) -> int:
        return 1 + self.size * (1 if self.single else 2)

    def pool_slots(self, role: str) -> list[int]:
        """The slots snapshots of `role` may take ('both' in single mode)."""
        pools = ["both"] if self.single else ["teacher", "student"]
        i = pools.index(role)
        start = self.first_slot + 1 + i * self.size
        return list(range(start, start + self.size))

    def __contains__(self, entry: str) -> bool:
        return any(e.id == entry for e in self.entries)

    def __getitem__(self, entry: str) -> HallEntry:
        return next(e for e in self.entries if e.id == entry)

    @property
    def teachers(self) -> list[HallEntry]:
        return [e for e in self.entries if e.teaches]

    @property
    def students(self) -> list[HallEntry]:
        return [e for e in self.entries if e.studies]

    def admit_base(self) -> HallEntry:
        """Put the base model in the hall (once); return its entry."""
        if BASE not in self:
            self.entries.insert(0, HallEntry(BASE, "both", 0, None, self.first_slot))
        return self[BASE]

    def admit(self, member: str, role: str, step: int) -> tuple[HallEntry, HallEntry | None]:
        """Freeze `member` (of `role`: 'teacher', 'student', or 'single') at `step`; return the new entry and the
        one it evicted (the oldest snapshot of its pool, when the pool is full), or None. With size 0 nothing
        is kept: the entry is returned as evicted too."""
        pool = "both" if self.single or role == "single" else role
        new = HallEntry(entry_id(step, member), pool, step, member, -1)
        if self.size == 0:
            return new, new
        taken = {e.slot: e for e in self.entries if e.id != BASE and e.role == pool}
        free = [s for s in self.pool_slots(pool) if s not in taken]
        evicted = None
        if free:
            new.slot = free[0]
        else:
            evicted = min(taken.values(), key=lambda e: (e.step, e.id))
            self.entries.remove(evicted)
            new.slot = evicted.slot
        self.entries.append(new)
        return new, evicted

    # -- checkpoints ---------------------------------------------------------------------------------------
    def state_dict(self) -> list[dict[str, Any]]:
        return [asdict(e) for e in self.entries]

    def load_state(self, state: Any) -> None:
        """Replace the entries by a checkpoint's (`state_dict`); a malformed one raises ValueError naming it."""
        if not isinstance(state, list):
            raise ValueError("the hall state is not a list of entries")
        slots = set(range(self.first_slot, self.first_slot + self.n_slots))
        entries, seen = [], set()
        for d in state:
            try:
                e = HallEntry(**d)
            except TypeError:
                raise ValueError(f"hall entry {str(d)[:80]} lacks a field or has an unknown one") from None
            ok = (
                isinstance(e.id, str)
                and ENTRY_RE.match(e.id)
                and e.role in ROLES
                and type(e.step) is int
                and type(e.slot) is int
                and e.slot in slots
                and (e.exam is None or type(e.exam) is int)
            )
            if not ok or e.id in seen or e.slot in {x.slot for x in entries}:
                raise ValueError(f"hall entry {str(d)[:80]} is not an entry of this run's hall")
            seen.add(e.id)
            entries.append(e)
        self.entries = entries


# -- the record --------------------------------------------------------------------------------------------
def rate(verdicts: Sequence[bool]) -> float | None:
    """The share of True in `verdicts`; None when there is none (no game was possible)."""
    return sum(verdicts) / len(verdicts) if verdicts else None


def side_record(valid: Sequence[bool], solves: Mapping[str, Sequence[bool]]) -> dict[str, Any]:
    """One member's side of a round: `valid` is the share of its valid proposals (as a teacher) or of its
    parsed answers (as a student); `solve[entry]` the share of accepted answers in the games against that hall
    entry (a teacher's: what the hall student solved of its problems; a student's: what it solved of the hall
    teacher's exam); None where no problem was played."""
    return {"valid": rate(valid), "n": len(valid), "solve": {h: rate(v) for h, v in solves.items()}}


def hall_summary(entries: Iterable[HallEntry]) -> dict[str, dict[str, Any]]:
    """The record's `hall`: every entry that played this round."""
    return {e.id: {"role": e.role, "step": e.step, "member": e.member, "exam": e.exam} for e in entries}


def check_hof(hof: Any, where: str) -> list[str]:
    """Violations in a metrics record's `hof` value (docs/run-folder.md)."""
    if not isinstance(hof, Mapping) or not isinstance(hof.get("hall"), Mapping):
        return [f"{where}: 'hof' must be an object with 'hall' and 'members'"]
    errs = []
    for hid, e in hof["hall"].items():
        if not (ENTRY_RE.match(str(hid)) and isinstance(e, Mapping) and e.get("role") in ROLES):
            errs.append(f"{where}: hof.hall[{hid!r}] must be an entry with a role in {ROLES}")
    members = hof.get("members")
    if not isinstance(members, Mapping):
        return errs + [f"{where}: hof.members must be an object"]
    for mid, sides in members.items():
        if not isinstance(sides, Mapping) or not sides or not set(sides) <= {"teacher", "student"}:
            errs.append(f"{where}: hof.members[{mid!r}] must map 'teacher'/'student' to its games")
            continue
        for side, rec in sides.items():
            vals = (
                [rec.get("valid"), *(rec.get("solve") or {}).values()] if isinstance(rec, Mapping) else [1.5]
            )
            if not isinstance(rec, Mapping) or any(
                v is not None and not (isinstance(v, int | float) and 0 <= v <= 1) for v in vals
            ):
                errs.append(f"{where}: hof.members[{mid!r}][{side!r}] rates must be in [0, 1] or null")
            elif not set(rec.get("solve") or {}) <= set(hof["hall"]):
                errs.append(f"{where}: hof.members[{mid!r}][{side!r}] plays an entry not in hof.hall")
    return errs


__all__ = [
    "BASE",
    "Hall",
    "HallEntry",
    "best_by_lcb",
    "check_hof",
    "entry_id",
    "hall_summary",
    "rate",
    "side_record",
]
