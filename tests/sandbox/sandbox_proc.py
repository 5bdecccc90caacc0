"""/proc helpers for the sandbox tests (which processes a worker has, whether a pid is alive)."""

from __future__ import annotations


def worker_children(pid: int) -> list[int]:
    """Direct children of a worker (its running job, if any), from /proc."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as fh:
            return [int(x) for x in fh.read().split()]
    except OSError:
        return []


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False
