"""Problem buffers, one per task type: seeded with the identity triplet (and optionally the AZR seed files),
capped with FIFO eviction, uniform sampling without replacement, JSONL save/load for checkpoints.

Entries are `Problem`s, so each carries its proposer member id and step. A buffer keeps one copy per problem
id (re-proposing an existing problem adds nothing). AZR truncated its buffers by keeping the *first* 16,384
programs; here the oldest entry is evicted instead.
"""

from __future__ import annotations

import json
import os
import random
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from populora.tasks.literals import parse_call_args
from populora.tasks.types import TASK_NAMES, Problem, known_task

if TYPE_CHECKING:
    from populora.sandbox import Sandbox

IDENTITY_PROGRAM = "def f(a):\n    return a"
IDENTITY_INPUT = '"Hello world"'
# AZR's code_f seed: the identity with 6 hand-written inputs (3 shown, 3 hidden).
IDENTITY_F_INPUTS = (
    '"Hello world"',
    "1",
    "dict(a=1, b=2)",
    "(1.1, 1.2, 1.3)",
    '"[[1, 0, 0], [0, 0, 0], [0, 0, 0]]"',
    "1001101100010001",
)
IDENTITY_F_MESSAGE = "Write a function that returns whatever you input"
DEFAULT_CAPACITY = 16384
SEED_PROPOSER = "seed"


def _identity_output(inp: str) -> str:
    # f is the identity and the input is a checked literal, so repr of the parsed value *is* the output.
    args, _ = parse_call_args(inp)
    return repr(args[0])


def identity_problem(task: str) -> Problem:
    """The zero triplet `def f(a): return a` for `task` (AZR Fig. 5; the 6-input identity for code_f)."""
    if task == "code_f":
        return Problem(
            "code_f",
            IDENTITY_PROGRAM,
            IDENTITY_F_INPUTS,
            tuple(_identity_output(i) for i in IDENTITY_F_INPUTS),
            IDENTITY_F_MESSAGE,
            proposer=SEED_PROPOSER,
            step=0,
        )
    return Problem(
        task,
        IDENTITY_PROGRAM,
        (IDENTITY_INPUT,),
        (_identity_output(IDENTITY_INPUT),),
        proposer=SEED_PROPOSER,
        step=0,
    )


def _indices(n: int, k: int, rng: Any) -> list[int]:
    k = min(k, n)
    if rng is None or isinstance(rng, int):
        rng = random.Random(rng)
    if isinstance(rng, random.Random):
        return rng.sample(range(n), k)
    if hasattr(rng, "choice"):  # numpy Generator / RandomState
        return [int(i) for i in rng.choice(n, size=k, replace=False)]
    raise TypeError(
        f"rng must be random.Random, a numpy Generator, an int seed or None, not {type(rng).__name__}"
    )


class ProblemBuffer:
    """FIFO-capped, de-duplicated (by problem id) list of problems of one task type."""

    def __init__(self, task: str, capacity: int = DEFAULT_CAPACITY, problems: Iterable[Problem] = ()):
        if not known_task(task):
            raise ValueError(f"unknown task {task!r}")
        if capacity < 1:
            raise ValueError(f"buffer capacity must be >= 1, got {capacity}")
        self.task = task
        self.capacity = capacity
        self._items: OrderedDict[str, Problem] = OrderedDict()
        self.extend(problems)

    def add(self, problem: Problem) -> bool:
        """Append `problem` (evicting the oldest when full); False if its id is already in the buffer."""
        if problem.task != self.task:
            raise ValueError(f"a {problem.task} problem cannot go into the {self.task} buffer")
        if problem.id in self._items:
            return False
        self._items[problem.id] = problem
        while len(self._items) > self.capacity:
            self._items.popitem(last=False)
        return True

    def extend(self, problems: Iterable[Problem]) -> int:
        return sum(self.add(p) for p in problems)

    def sample(self, k: int, rng: Any = None) -> list[Problem]:
        """`min(k, len)` distinct problems, uniformly without replacement."""
        items = list(self._items.values())
        return [items[i] for i in _indices(len(items), k, rng)]

    def added_since(self, step: int) -> list[Problem]:
        """Problems whose step is >= `step` (AZR's 'new' items for the solver mix); seeds have step 0."""
        return [p for p in self._items.values() if p.step is not None and p.step >= step]

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[Problem]:
        return iter(list(self._items.values()))

    def __contains__(self, problem: object) -> bool:
        return isinstance(problem, Problem) and problem.id in self._items

    def __repr__(self) -> str:
        return f"ProblemBuffer({self.task!r}, {len(self)}/{self.capacity})"


class TaskBuffers:
    """One `ProblemBuffer` per task type; `buffers["code_o"]`."""

    def __init__(self, capacity: int = DEFAULT_CAPACITY, tasks: Sequence[str] = TASK_NAMES):
        self.capacity = capacity
        self.buffers = {t: ProblemBuffer(t, capacity) for t in tasks}

    def __getitem__(self, task: str) -> ProblemBuffer:
        try:
            return self.buffers[task]
        except KeyError:
            raise KeyError(f"no buffer for task {task!r}; have {', '.join(self.buffers)}") from None

    def __iter__(self) -> Iterator[str]:
        return iter(self.buffers)

    def __len__(self) -> int:
        return sum(len(b) for b in self.buffers.values())

    def add(self, problem: Problem) -> bool:
        return self[problem.task].add(problem)

    def extend(self, problems: Iterable[Problem]) -> int:
        return sum(self.add(p) for p in problems)

    def sizes(self) -> dict[str, int]:
        return {t: len(b) for t, b in self.buffers.items()}

    def sample_program(self, rng: Any = None) -> Problem:
        """One problem drawn uniformly from the code_i and code_o buffers together: the program a code_f
        teacher writes inputs for (AZR §1.3). Falls back to the code_f buffer if both are empty."""
        pool = [p for t in ("code_i", "code_o") if t in self.buffers for p in self.buffers[t]]
        if not pool and "code_f" in self.buffers:
            pool = list(self.buffers["code_f"])
        if not pool:
            raise ValueError("all buffers are empty; seed them first (TaskBuffers.seeded())")
        return pool[_indices(len(pool), 1, rng)[0]]

    @classmethod
    def seeded(
        cls,
        capacity: int = DEFAULT_CAPACITY,
        *,
        seed_io: str | Path | None = None,
        seed_code_f: str | Path | None = None,
        sandbox: Sandbox | None = None,
        tasks: Sequence[str] = TASK_NAMES,
    ) -> TaskBuffers:
        """Buffers holding the identity triplet of each task, plus (optionally) the valid items of AZR seed
        files, re-validated in `sandbox`: `seed_io` (`*_seed_io.jsonl`) fills code_i and code_o,
        `seed_code_f` (`*_code_f_seed_io.jsonl`) fills code_f."""
        from populora.tasks.seeds import load_azr_seed

        buf = cls(capacity, tasks)
        for t in tasks:
            if t in TASK_NAMES:  # another family's buffer is filled with its own seed problems (the trainer)
                buf[t].add(identity_problem(t))
        if (seed_io or seed_code_f) and sandbox is None:
            raise ValueError("seeding from AZR files re-validates every item: pass a Sandbox")
        if seed_io:
            rep = load_azr_seed(seed_io, sandbox, task="code_o")
            for t in ("code_i", "code_o"):
                if t in buf.buffers:
                    buf[t].extend(p.retask(t) for p in rep.problems)
        if seed_code_f and "code_f" in buf.buffers:
            buf["code_f"].extend(load_azr_seed(seed_code_f, sandbox, task="code_f").problems)
        return buf

    # ------------------------------------------------------------------ checkpoints
    def save(self, path: str | Path) -> None:
        """Write every problem as one JSON line (with its task), atomically (temporary name, then rename)."""
        path = Path(path)
        tmp = path.with_name(path.name + ".tmp")
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(
                json.dumps({"_buffers": {"capacity": self.capacity, "tasks": list(self.buffers)}}) + "\n"
            )
            for b in self.buffers.values():
                for p in b:
                    fh.write(p.to_json() + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)

    @classmethod
    def load(cls, path: str | Path, capacity: int | None = None) -> TaskBuffers:
        """Read a file written by `save` (order, and so FIFO age, is kept). A last line cut by a kill is
        skipped; any other bad line raises ValueError naming the line."""
        path = Path(path)
        lines = path.read_text(encoding="utf-8").splitlines()
        meta: dict[str, Any] = {}
        if lines and lines[0].startswith('{"_buffers"'):
            meta = json.loads(lines[0])["_buffers"]
            lines = lines[1:]
        buf = cls(capacity or meta.get("capacity", DEFAULT_CAPACITY), meta.get("tasks", TASK_NAMES))
        for n, line in enumerate(lines):
            if not line.strip():
                continue
            try:
                p = Problem.from_json(line)
            except Exception as e:
                if n == len(lines) - 1:
                    break  # a partial last line from an interrupted write
                raise ValueError(f"{path}: line {n + 2} is not a problem ({e})") from None
            buf[p.task].add(p)
        return buf
