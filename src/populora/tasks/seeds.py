"""Reading AZR seed files (`data/*_seed_io.jsonl`, `*_code_f_seed_io.jsonl`) and re-validating every item.

An AZR row is `{snippet, input, output, imports, ...}` (code_i/code_o) or `{snippet, inputs, outputs, message,
imports, ...}` (code_f). The row's `imports` lines are put at the top of the program when the snippet does not
already contain them. Outputs are recomputed in the sandbox (the stored ones came from AZR's executor, which
truncated long reprs: bug B2); `SeedReport.output_mismatch` counts rows whose stored output differs in value.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from populora.tasks.literals import literal_equal
from populora.tasks.types import Invalid, Problem, Proposal

if TYPE_CHECKING:
    from populora.sandbox import Sandbox

SEED_PROPOSER = "azr_seed"


@dataclass
class SeedReport:
    problems: list[Problem] = field(default_factory=list)
    invalid: list[tuple[int, str]] = field(default_factory=list)  # (1-based line, reason)
    output_mismatch: list[int] = field(default_factory=list)  # lines whose stored output differs
    total: int = 0

    def reasons(self) -> Counter:
        """How many rows failed for each reason (the part before the first colon: 'input 3: raised X' ->
        'raised X')."""
        return Counter(r.split(": ", 1)[1] if r.startswith("input ") else r for _, r in self.invalid)


def _program(row: dict) -> str:
    snippet = str(row.get("snippet", ""))
    imports = [str(i).strip() for i in (row.get("imports") or []) if str(i).strip()]
    missing = [i for i in imports if i not in snippet]
    return "\n".join([*missing, snippet]) if missing else snippet


def read_azr_seed(path: str | Path, task: str) -> list[tuple[Proposal, tuple[str, ...]]]:
    """Rows of an AZR seed file as `(proposal, stored_outputs)`, in file order."""
    rows = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        row = json.loads(line)
        if task == "code_f":
            inputs = tuple(str(x) for x in row.get("inputs", []))
            outputs = tuple(str(x) for x in row.get("outputs", []))
            message = str(row.get("message", ""))
        else:
            inputs, outputs, message = (str(row.get("input", "")),), (str(row.get("output", "")),), ""
        rows.append((Proposal(_program(row), inputs, message, proposer=SEED_PROPOSER, step=0), outputs))
    return rows


def load_azr_seed(path: str | Path, sandbox: Sandbox, task: str = "code_o") -> SeedReport:
    """Validate every row of an AZR seed file with `task`'s rules (code_f: any number >= 2 of inputs)."""
    from populora.tasks import get

    t = get(task)
    rows = read_azr_seed(path, task)
    rep = SeedReport(total=len(rows))
    # problem_from semantics (code_f seeds have 6 or 10 inputs), batched into one sandbox call
    results = t._validate([p for p, _ in rows], sandbox, exact_n=False)
    for n, ((_, stored), res) in enumerate(zip(rows, results, strict=True), start=1):
        if isinstance(res, Invalid):
            rep.invalid.append((n, res.reason))
            continue
        rep.problems.append(res)
        if len(stored) != len(res.outputs) or not all(
            literal_equal(a, b) for a, b in zip(stored, res.outputs, strict=True)
        ):
            rep.output_mismatch.append(n)
    return rep
