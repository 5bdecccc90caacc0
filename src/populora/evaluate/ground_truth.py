"""Expected outputs of EvalPlus tasks: the canonical program's outputs and times, computed once and cached.

Each (task, phase) runs the canonical solution in a sandbox job of its own (`_harness.populora_run` with
``trusted``: inputs deep-copied and timed, as evalplus's ``trusted_exec``), in an evaluation pool of its own
(`pools.EvalPool`, uid slots from `pools.GT_SLOT`) that is started only when something is not cached and
closed before this function returns. No candidate ever runs in that pool, nor in a process descended from
one of its workers, so no candidate can find an expected output in its memory (issue 29). Results are kept in memory for the life of the process and, unless disabled, on disk under
``$XDG_CACHE_HOME/populora/evalplus-gt/<key>.json.gz`` where the key hashes the harness source, the task, its
canonical program and its inputs (so an edited data file or harness never reuses a stale entry). The cached
times make the time limits those of the first run on this machine, as with evalplus's own cache.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from populora.evaluate._harness import decode
from populora.evaluate.data import Item
from populora.evaluate.evalplus_compare import NOT_NONE_TASKS

HARNESS_SOURCE = (Path(__file__).with_name("_harness.py")).read_text(encoding="utf-8")
_HARNESS_HASH = hashlib.sha256(HARNESS_SOURCE.encode()).hexdigest()[:16]
GT_TIMEOUT_S = 600.0
_MEMORY: dict[str, GroundTruth] = {}
#: How many ground-truth jobs this process has run (tests check that a second grading reuses the cache).
computed = 0


@dataclass(frozen=True)
class GroundTruth:
    outputs: list[Any] | None
    times: list[float] | None
    error: str | None = None


def task_number(item: Item) -> int:
    task = item.id.rsplit("/", 1)[-1]
    return int(task) if task.isdigit() else -1


def phase_inputs(item: Item, phase: str) -> list:
    return item.meta["base_input" if phase == "base" else "plus_input"]


def job(item: Item, code: str, inputs: list, limits: list[float] | None, budget: float, trusted: bool):
    """(program, call) of one harness run; the payload holds the code, the inputs and the limits only."""
    payload = {
        "code": code,
        "entry_point": item.meta["entry_point"],
        "dataset": item.meta["dataset"],
        "task": task_number(item),
        "inputs": inputs,
        "limits": limits,
        "budget": budget,
        "trusted": trusted,
    }
    return HARNESS_SOURCE + f"\n_PAYLOAD = {json.dumps(json.dumps(payload))}\n", "populora_run(_PAYLOAD)"


def _key(item: Item, phase: str) -> str:
    h = hashlib.sha256()
    for part in (_HARNESS_HASH, item.meta["dataset"], item.id, item.meta["entry_point"], item.gold, phase):
        h.update(part.encode())
        h.update(b"\0")
    h.update(json.dumps(phase_inputs(item, phase)).encode())
    return h.hexdigest()[:32]


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "populora" / "evalplus-gt"


#: How a harness run may end (`_harness.populora_run`: pass/fail/timeout; the LCB checker: pass/error/timeout).
RUN_STATUSES = frozenset({"pass", "fail", "timeout", "error"})


def parse_run(value_repr: str | None) -> dict | None:
    """The harness's JSON text (as the job's ``repr``) -> dict with decoded outputs; None if unreadable or
    malformed. Never raises: a candidate's job writes this text, and the candidate can rewrite it (it may patch
    the json module of its own process, or return a dict keyed by a hashable list subclass, whose encoded key
    decodes to a list), so one bad run must fail its candidate, not the grading (issue 50)."""
    import ast

    if not isinstance(value_repr, str):
        return None
    try:
        return checked_run(json.loads(ast.literal_eval(value_repr)))
    except Exception:  # noqa: BLE001 - SyntaxError, ValueError, TypeError, RecursionError, MemoryError, ...
        return None


def checked_run(run: Any) -> dict | None:
    """A run record (the harness's JSON, parsed) with its fields checked and its outputs decoded: `status` one
    of `RUN_STATUSES`, `detail` text (cut to 300 characters), `outputs` a list, `times` (if there) a list of
    finite numbers; None if any is not so. May raise on a malformed output (the callers catch)."""
    if not isinstance(run, dict) or run.get("status") not in RUN_STATUSES:
        return None
    outputs, times, detail = run.get("outputs"), run.get("times", []), run.get("detail", "")
    if not isinstance(outputs, list) or not isinstance(times, list) or not isinstance(detail, str):
        return None
    if not all(type(t) in (int, float) and math.isfinite(t) for t in times):
        return None
    return {
        "status": run["status"],
        "detail": detail[:300],
        "outputs": [decode(o) for o in outputs],
        "times": times,
    }


def _from_run(item: Item, run: dict | None, why: str) -> GroundTruth:
    if run is None:
        return GroundTruth(None, None, why or "the canonical solution's job returned nothing readable")
    if run["status"] != "pass":
        return GroundTruth(None, None, run.get("detail") or run["status"])
    outs = run["outputs"]
    if item.meta["dataset"] == "mbpp" and item.meta["entry_point"] in NOT_NONE_TASKS:
        outs = [o is not None for o in outs]
    return GroundTruth(outs, [float(t) for t in run["times"]])


def expected_outputs(
    needs: list[tuple[Item, str]], use_disk: bool = True, workers: int = 2
) -> dict[tuple, GroundTruth]:
    """{(item.id, phase): GroundTruth} for every (item, phase) in ``needs``; runs only what is not cached, on
    ``workers`` workers of a pool used for nothing else."""
    global computed
    from populora.evaluate.pools import GT_SLOT, EvalPool
    from populora.sandbox import Limits

    out: dict[tuple, GroundTruth] = {}
    todo: list[tuple[Item, str, str]] = []
    for item, phase in needs:
        key = _key(item, phase)
        if key in _MEMORY:
            out[(item.id, phase)] = _MEMORY[key]
            continue
        path = cache_dir() / f"{key}.json.gz"
        if use_disk and path.is_file():
            try:
                with gzip.open(path, "rt", encoding="utf-8") as fh:
                    run = checked_run(json.load(fh))
                if run is not None:
                    gt = _from_run(item, run, "")
                    _MEMORY[key] = out[(item.id, phase)] = gt
                    continue
            except Exception:  # noqa: BLE001 - OSError, EOFError, ValueError, TypeError, ...
                pass  # a damaged cache entry is recomputed and rewritten
        todo.append((item, phase, key))
    if not todo:
        return out
    lim = Limits(timeout_s=GT_TIMEOUT_S, memory_mb=8192, max_output_chars=80_000_000, cpu_s=GT_TIMEOUT_S)
    jobs = [job(it, it.gold, phase_inputs(it, ph), None, GT_TIMEOUT_S - 5, True) for it, ph, _k in todo]
    with EvalPool(min(workers, len(jobs)), first_slot=GT_SLOT) as pool:
        ran = pool.run_many(jobs, lim)
    for (item, phase, key), res in zip(todo, ran, strict=True):
        computed += 1
        run = parse_run(res.value_repr) if res.status == "ok" else None
        why = "" if res.status == "ok" else f"{res.status}: {res.error_type or ''} {res.error_message or ''}"
        gt = _from_run(item, run, why.strip()[:300])
        _MEMORY[key] = out[(item.id, phase)] = gt
        if use_disk and gt.error is None and run is not None:
            _write_cache(cache_dir() / f"{key}.json.gz", res.value_repr)
    return out


def _write_cache(path: Path, value_repr: str) -> None:
    import ast

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + f".{os.getpid()}.part")
        with gzip.open(tmp, "wt", encoding="utf-8", compresslevel=3) as fh:
            fh.write(ast.literal_eval(value_repr))
        tmp.replace(path)
    except OSError:
        pass  # the cache is an optimisation: a read-only home only costs a recomputation
