"""Keeping the probe out of training: a proposal whose program is a probe program is dropped (issue 28 §4).

The probe (train/probe.py) is only a held-out measure while no member trains on its programs. The teachers
write programs from the same small grammar as the probe sets, so they can hit one: exactly, or with other
constants (`total = 2 * 3` for the probe's `total = 2 * 8`), which for a student is the same exercise. The guard
compares a proposal's program with every program of the shipped probe sets (all task types, all items, not only
the probed subset) after parsing both with `ast` and replacing every literal number and string by one
placeholder (names, operators and structure kept; formatting and comments never matter). A match makes the trace
a *probe collision* (`ProposalTrace.probe_collision`): the trainer treats it as out of the game (no reward, no
training row, no buffer entry, no rating, no student rollouts) and counts it per task type in metrics.jsonl
(`probe_collisions`). The synthetic seed problems pass the same guard before they enter the buffers.
"""

from __future__ import annotations

from collections.abc import Iterable

from populora.tasks.masking import MASK, program_key  # noqa: F401 - re-exported


class ProbeGuard:
    """The masked keys of a set of probe programs; `collides(program)` says whether a program is one of them."""

    def __init__(self, programs: Iterable[str]) -> None:
        self.keys = {k for k in (program_key(p) for p in programs) if k is not None}

    @classmethod
    def from_probe_sets(cls, probe_set: str = "fixed") -> ProbeGuard:
        """The guard over every problem of the shipped probe sets the run probes with, all task types:
        `fixed` (pretrain/probe.py) or `graded` (pretrain/graded_probe.py, `diagnostics.probe_set`)."""
        if probe_set == "graded":
            from populora.pretrain.graded import TASKS
            from populora.pretrain.graded_probe import load_graded_probe

            return cls(p.program for t in TASKS for _, p in load_graded_probe(t))
        from populora.pretrain.probe import load_probes

        return cls(p.program for problems in load_probes().values() for p in problems)

    def collides(self, program: str | None) -> bool:
        if not program:
            return False
        key = program_key(program)
        return key is not None and key in self.keys


__all__ = ["MASK", "ProbeGuard", "program_key"]
