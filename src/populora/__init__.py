"""PopuLoRA: population-based asymmetric self-play RL post-training with evolving LoRA adapters.

Sub-packages (layers and contracts: docs/architecture.md): sandbox, tasks, lora, engine, rl, population, operators,
train, diagnostics, report, evaluate. Importing the top-level package is cheap (no torch).
"""

import os as _os

# OpenMP's active spin-wait makes shared 2-core machines 6-200x slower (docs/development.md); this must be
# set before torch is first imported, so we set a default here, where every entry point passes first.
_os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

__version__ = "0.1.0"
