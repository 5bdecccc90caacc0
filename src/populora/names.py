"""The project's fixed names, in one place: task types, step phases, member roles, operators.

This module imports nothing, so every layer (config, tasks, trainer, diagnostics, report) can use it without
creating an import loop. A name written here is the one spelling the run folder, the config and the code use;
tests assert that the registries agree with it (`tests/codebase/test_structure.py`).
"""

TASKS: tuple[str, ...] = ("code_i", "code_o", "code_f")
"""The AZR task types: abduction (find the input), deduction (find the output), induction (find the program)."""

SOLVE_KEYS: tuple[str, ...] = (*TASKS, "all")
"""Keys of a member's `solve_rate` in metrics.jsonl: one per task type plus the pooled rate."""

PHASES: tuple[str, ...] = (
    "matchmaking",
    "teacher",
    "validate",
    "student",
    "score",
    "update",
    "evolution",
    "checkpoint",
)
"""Timed parts of one training step, in order (the keys of `phase_s` in metrics.jsonl)."""

ROLES: tuple[str, ...] = ("teacher", "student", "single")
"""Member roles: a teacher proposes, a student solves, the single-mode member `A0` does both."""

LIVE_OPERATORS: tuple[str, ...] = ("M1", "M2", "M3", "M4", "X1", "X2", "X3", "X4")
"""The operators the paper's live population uses; evolution's default operator set."""

OPERATORS: tuple[str, ...] = (
    *("M1", "M2", "M3", "M4", "M5", "M6"),
    *("X1", "X2", "X3", "X4", "X5", "X6", "X7", "X8", "X9"),
    *("I1", "I2"),
)
"""Every operator in `populora.operators.REGISTRY`, in registry order (mutations, crossovers, identities)."""

# Prompt template sets shipped in populora/tasks/templates (tasks.template; a folder path works too).
TEMPLATE_NAMES: tuple[str, ...] = ("azr", "compact", "azr-short", "compact-prefix")


# The planted misconception classes of the tiny-flaws world (issue 49; their semantics: pretrain/flaws.py).
FLAW_CLASSES: tuple[str, ...] = (
    "range_end_inclusive",
    "slice_end_inclusive",
    "reverse_slice_forwards",
    "sorted_reverse_ignored",
    "mod_as_quotient",
    "floordiv_rounds",
)
