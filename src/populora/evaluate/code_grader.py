"""Code grading: EvalPlus (HumanEval+/MBPP+) and LiveCodeBench tests, executed in `populora.sandbox.Sandbox`.

We do not install ``evalplus``: its dependency tree (openai, anthropic, google-generativeai, datasets,
tree-sitter, wget, ...) is far too heavy for a grader, and its executor runs untrusted code in a plain
``multiprocessing`` child. Instead its data format and its checking rules are re-implemented (`_checkers.py`
lists them and the one deliberate difference) and every candidate runs as one job in our sandbox: a fresh
forked process, unprivileged, in an empty private directory, without network, under wall-clock and memory
limits. The ground truth is recomputed inside the same job from the canonical solution (EvalPlus caches it
in a ~1 GB pickle instead), so the time limits are measured on the same machine under the same load.

Time limits follow EvalPlus: per input ``max(min_time_limit, factor * gt_time)``. The defaults are the
AZR/paper settings (``--min-time-limit 10 --gt-time-limit-factor 8``), EvalPlus's own defaults are 1 and 4.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from populora.evaluate._checkers import EVALPLUS_CHECKER, LCB_CHECKER
from populora.evaluate.data import Item


@dataclass(frozen=True)
class CodeResult:
    """How one candidate fared. ``passed`` is the pass@1 bit (EvalPlus: base AND plus tests pass)."""

    passed: bool
    status: str  # "pass" | "fail" | "timeout" | "error" | "gt_error" | sandbox status
    detail: str = ""
    base_passed: bool | None = None


@dataclass(frozen=True)
class CodeLimits:
    min_time_limit: float = 10.0
    gt_time_limit_factor: float = 8.0
    task_timeout: float = 60.0  # EVALPLUS_TIMEOUT_PER_TASK
    lcb_timeout_s: float = 6.0  # lcb_runner's default per-test timeout
    memory_mb: int = 4096  # EvalPlus's EVALPLUS_MAX_MEMORY_BYTES default (4 GiB)
    plus: bool = True  # run the plus tests (False: base tests only, "HumanEval" rather than "HumanEval+")


def evalplus_job(item: Item, solution: str, limits: CodeLimits) -> tuple[str, str]:
    """(program, call) for one EvalPlus candidate."""
    m = item.meta
    task = item.id.rsplit("/", 1)[-1]
    payload = {
        "candidate": solution,
        "canonical": item.gold,
        "entry_point": m["entry_point"],
        "dataset": m["dataset"],
        "task": int(task) if task.isdigit() else -1,
        "atol": m.get("atol", 0) or 0,
        "base_input": m["base_input"],
        "plus_input": m["plus_input"] if limits.plus else [],
        "plus": limits.plus,
        "min_time_limit": limits.min_time_limit,
        "gt_time_limit_factor": limits.gt_time_limit_factor,
        "task_timeout": limits.task_timeout,
    }
    return EVALPLUS_CHECKER + f"\n_PAYLOAD = {json.dumps(json.dumps(payload))}\n", "_populora_evalplus()"


def lcb_job(item: Item, code: str, limits: CodeLimits) -> tuple[str, str]:
    """(program, call) for one LiveCodeBench candidate."""
    payload = {
        "code": code,
        "tests": item.meta["tests"],
        "fn_name": item.meta.get("fn_name"),
        "timeout": limits.lcb_timeout_s,
    }
    return LCB_CHECKER + f"\n_PAYLOAD = {json.dumps(json.dumps(payload))}\n", "_populora_lcb()"


def _job_timeout(limits: CodeLimits, item: Item) -> float:
    if item.kind == "lcb":
        return limits.lcb_timeout_s * (len(item.meta["tests"]) + 1) + 10
    # ground truth (generous) + two phases of at most task_timeout + 1 each.
    return 2 * (limits.task_timeout + 2) + 120


def _parse(outcome) -> dict | None:
    import ast

    if outcome.status != "ok" or outcome.value_repr is None:
        return None
    try:
        value = ast.literal_eval(outcome.value_repr)
    except (ValueError, SyntaxError):
        return None
    return value if isinstance(value, dict) else None


def _evalplus_result(outcome) -> CodeResult:
    v = _parse(outcome)
    if v is None:
        return CodeResult(
            False,
            outcome.status,
            f"sandbox: {outcome.error_type or ''} {(outcome.error_message or '')[:200]}".strip(),
        )
    if v.get("gt_error"):
        return CodeResult(False, "gt_error", f"canonical solution failed: {v['gt_error']}")
    base_ok = v["base"] == "pass"
    plus_ok = v["plus"] == "pass" if v["plus"] is not None or v["n_plus"] else True
    status = "pass" if base_ok and plus_ok else (v["plus"] if base_ok else v["base"]) or "fail"
    return CodeResult(base_ok and plus_ok, status, v.get("detail", ""), base_ok)


def _lcb_result(outcome) -> CodeResult:
    v = _parse(outcome)
    if v is None:
        return CodeResult(False, outcome.status, f"sandbox: {outcome.error_type or ''}".strip())
    return CodeResult(v["status"] == "pass" and v["passed"] == v["n"], v["status"], v.get("detail", ""))


class CodeGrader:
    """Runs candidate programs against benchmark tests in a sandbox pool (parallel, order kept)."""

    def __init__(self, workers: int = 2, limits: CodeLimits | None = None):
        self.workers = max(1, int(workers))
        self.limits = limits or CodeLimits()

    def grade(
        self, pairs: Sequence[tuple[Item, str]], progress: Callable[[int], None] | None = None
    ) -> list[CodeResult]:
        """``pairs`` = [(item, program text), ...] for EvalPlus or LiveCodeBench items."""
        from populora.sandbox import DEFAULT_PRELOAD, Limits, Sandbox

        results: list[CodeResult | None] = [None] * len(pairs)
        # Jobs are grouped by time budget (EvalPlus vs LCB) and sent in chunks so that progress advances.
        groups: dict[float, list[int]] = {}
        for i, (item, _code) in enumerate(pairs):
            groups.setdefault(_job_timeout(self.limits, item), []).append(i)
        preload = tuple(dict.fromkeys((*DEFAULT_PRELOAD, "signal")))
        with Sandbox(workers=self.workers, preload=preload) as sb:
            for timeout, idxs in groups.items():
                lim = Limits(
                    timeout_s=timeout, memory_mb=self.limits.memory_mb, max_output_chars=4000, cpu_s=timeout
                )
                chunk = max(self.workers * 4, 8)
                for s in range(0, len(idxs), chunk):
                    part = idxs[s : s + chunk]
                    jobs = []
                    for i in part:
                        item, code = pairs[i]
                        job = lcb_job if item.kind == "lcb" else evalplus_job
                        jobs.append(job(item, code, self.limits))
                    for i, out in zip(part, sb.run_many(jobs, limits=lim), strict=True):
                        item = pairs[i][0]
                        results[i] = _lcb_result(out) if item.kind == "lcb" else _evalplus_result(out)
                    if progress:
                        progress(len(part))
        return [r for r in results if r is not None]
