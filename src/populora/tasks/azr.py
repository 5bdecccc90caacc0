"""The built-in AZR family (code_i abduction, code_o deduction, code_f induction) on the `TaskFamily` interface.

The task objects are the existing `CodeI`/`CodeO`/`CodeF` classes (`populora.tasks.base`), unchanged: this
module only says how the family's other parts are found, so the trainer can treat AZR like any family. The
probe sets are the shipped held-out sets (`populora.pretrain.probe`), the features are the paper's four
(`program_features`), and the seeds come from the pretraining program generator (`train.setup.synthetic_seeds`,
which the trainer keeps calling directly for AZR so a run's seed problems stay exactly what they were).
AZR's task classes apply the capability policy to every program themselves, so they get the run's sandbox.
"""

from __future__ import annotations

from typing import Any

from populora.names import TASKS
from populora.tasks.family import TaskFamily
from populora.tasks.types import Problem


class AzrFamily(TaskFamily):
    name = "azr"
    task_types = TASKS
    description = "Absolute Zero code tasks: infer the input, the output, or the function (sandboxed Python)"

    def task(self, task_type: str, **config: Any):
        from populora.tasks import get

        return get(task_type, **config)

    def probe_items(self, task_type: str) -> list[Problem]:
        from populora.pretrain.probe import load_probe

        return load_probe(task_type)

    def seed_problems(self, task_type: str, n: int, sandbox: Any, seed: int) -> list[Problem]:
        from populora.train.setup import synthetic_seeds

        return [p for p in synthetic_seeds(n, sandbox, seed) if p.task == task_type]


__all__ = ["AzrFamily"]
