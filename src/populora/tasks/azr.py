"""The built-in AZR family (code_i abduction, code_o deduction, code_f induction) on the `TaskFamily` interface.

The task objects are the existing `CodeI`/`CodeO`/`CodeF` classes (`populora.tasks.base`), unchanged: this
module only says how the family's other parts are found, so the trainer can treat AZR like any family. The
probe items are the shipped held-out sets (`populora/assets/probe/<task>.jsonl.gz`, the files
`populora.pretrain.probe` builds and loads), the features are the paper's four (the default: the trainer measures
the program as Python), and the seed problem is AZR's zero triplet (`buffers.identity_problem`); the trainer adds
the pretraining generator's synthetic seeds itself (`train.setup.synthetic_seeds`, unchanged). AZR's task
classes apply the capability policy to every program themselves, so they get the run's sandbox.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

from populora.names import TASKS
from populora.tasks.family import TaskFamily
from populora.tasks.types import Problem

PROBE_DIR = Path(__file__).resolve().parents[1] / "assets" / "probe"  # where pretrain/probe.py writes them


class AzrFamily(TaskFamily):
    name = "azr"
    task_types = TASKS
    description = "Absolute Zero code tasks: infer the input, the output, or the function (sandboxed Python)"

    def task(self, task_type: str, **config: Any):
        from populora.tasks import get

        return get(task_type, **config)

    def probe_items(self, task_type: str) -> list[Problem]:
        with gzip.open(PROBE_DIR / f"{task_type}.jsonl.gz", "rt", encoding="utf-8") as fh:
            return [Problem.from_dict(json.loads(line)) for line in fh if line.strip()]

    def seed_problems(self, task_type: str, n: int, sandbox: Any, seed: int) -> list[Problem]:
        """AZR's zero triplet (`def f(a): return a`); the trainer adds the generator's seeds itself."""
        from populora.tasks.buffers import identity_problem

        return [identity_problem(task_type)]


__all__ = ["AzrFamily"]
