"""Grader self-checks with no model: gold answers should score ~100%, deliberately wrong ones ~0%.

Gold responses: the canonical program (HumanEval+/MBPP+: ``prompt + canonical_solution``; LiveCodeBench:
the optional ``solution`` field, else the benchmark is reported unavailable for ``gold``); for math the
benchmark's worked solution where it has one ending in ``\\boxed{}`` (MATH-500, Minerva), otherwise
``<answer>\\boxed{GOLD}</answer>``, graded with the string shortcut off so that math-verify has to parse and
compare both sides.

Wrong responses: a function that returns ``None`` (code; LiveCodeBench stdin programs print nothing); for
math the gold plus one when it is a number, else another problem's (different) gold answer.
"""

from __future__ import annotations

from populora.evaluate.data import Item
from populora.evaluate.math_grader import _norm

ORACLE_MODES = ("gold", "wrong")


def wrong_code(item: Item) -> str:
    if item.kind == "lcb":
        fn = item.meta.get("fn_name")
        if fn:
            return f"class Solution:\n    def {fn}(self, *args):\n        return None\n"
        return "pass\n"
    return f"def {item.meta['entry_point']}(*args, **kwargs):\n    return None\n"


def _number(s: str) -> float | None:
    try:
        return float(s.replace(",", "").strip().strip("$"))
    except ValueError:
        return None


def wrong_math(item: Item, pool: list[Item]) -> str:
    v = _number(item.gold)
    if v is not None:
        return str(int(v) + 1) if v.is_integer() else f"{v + 1:g}"
    for other in pool:
        if _norm(other.gold) != _norm(item.gold) and _number(other.gold) is None:
            return other.gold
    return "\\text{none}"


def oracle_response(item: Item, mode: str, pool: list[Item]) -> str | None:
    """The response text the graders see for ``item`` under ``mode``; None when there is no gold."""
    if mode not in ORACLE_MODES:
        raise ValueError(f"unknown oracle mode {mode!r}; choose gold or wrong")
    if item.kind in ("code", "lcb"):
        if mode == "wrong":
            return wrong_code(item)
        return item.gold or None
    if mode == "gold":
        sol = item.meta.get("solution")
        if sol and "\\boxed" in sol:
            return sol
        return f"<answer>\\boxed{{{item.gold}}}</answer>"
    return f"<answer>\\boxed{{{wrong_math(item, pool)}}}</answer>"
