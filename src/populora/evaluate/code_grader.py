"""Code grading: EvalPlus (HumanEval+/MBPP+) and LiveCodeBench tests, executed in `populora.sandbox.Sandbox`.

We do not depend on ``evalplus`` at run time: its dependency tree (openai, anthropic, google-generativeai,
datasets, tree-sitter, wget, ...) is far too heavy for a grader, and its executor runs untrusted code in a
plain ``multiprocessing`` child. Its data format and checking rules are re-implemented and checked against
the real package by ``tests/evaluate/test_evalplus_agreement.py``. How an EvalPlus candidate is graded:

1. Expected outputs: the canonical program (``prompt + canonical_solution``) runs once per task and phase in
   a sandbox job of its own, in a pool of its own that is closed before any candidate runs, so no
   candidate's process descends from a worker that has seen an expected output; the outputs and per-input
   times are cached in memory and on disk (`ground_truth.py`), as evalplus caches its ground truth.
2. The candidate runs in a sandbox job that holds only the candidate, the inputs and the time limits
   (`_harness.py`, with evalplus's ``reliability_guard`` applied first). The job returns the outputs. The
   candidates' pool gives every worker its own job uid, so each job has the whole thread allowance
   (`pools.py`).
3. The verdict is computed here, in the grading process (`evalplus_compare.py`), with evalplus's rules. So a
   candidate can neither read the expected outputs nor influence the comparison.

Time limits follow EvalPlus: per input ``max(min_time_limit, factor * gt_time)``, per phase
``min(task_timeout, sum) + 2`` seconds. The defaults are the AZR/paper settings (``--min-time-limit 10
--gt-time-limit-factor 8``); EvalPlus's own defaults are 1 and 4.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence

from populora.evaluate._checkers import LCB_CHECKER
from populora.evaluate.data import Item
from populora.evaluate.items import CodeLimits, CodeResult  # noqa: F401  (re-exported: the grader's API)
from populora.evaluate.pools import EVAL_LAZY_EXTRA, EVAL_PRELOAD_EXTRA, EvalPool  # noqa: F401  (re-exported)


def lcb_job(item: Item, code: str, limits: CodeLimits) -> tuple[str, str]:
    """(program, call) for one LiveCodeBench candidate."""
    from populora.evaluate.ground_truth import HARNESS_SOURCE

    payload = {
        "code": code,
        "inputs": [t["input"] for t in item.meta["tests"]],  # never the expected outputs
        "fn_name": item.meta.get("fn_name"),
        "timeout": limits.lcb_timeout_s,
    }
    program = HARNESS_SOURCE + "\n" + LCB_CHECKER
    return program + f"\n_PAYLOAD = {json.dumps(json.dumps(payload))}\n", "_populora_lcb()"


def _job_timeout(limits: CodeLimits, item: Item) -> float:
    return limits.lcb_timeout_s * (len(item.meta["tests"]) + 1) + 10


def _lines(s: str) -> list[str]:
    return [line.strip() for line in s.strip().split("\n")]


def _decimals(line: str):
    from decimal import Decimal

    try:
        return True, [Decimal(x) for x in line.split()]
    except Exception:  # noqa: BLE001 - not numbers
        return False, []


def lcb_same_stdout(pred: str, gold: str) -> bool:
    """lcb_runner's stdin comparison: stripped lines equal, or equal as `Decimal` numbers."""
    a, b = _lines(pred), _lines(gold)
    if len(a) != len(b):
        return False
    for x, y in zip(a, b, strict=True):
        if x == y:
            continue
        okx, dx = _decimals(x)
        oky, dy = _decimals(y)
        if not (okx and oky and dx == dy):
            return False
    return True


def _lcb_result(item: Item, outcome) -> CodeResult:
    from populora.evaluate.ground_truth import parse_run

    if outcome.status != "ok":
        return CodeResult(False, outcome.status, f"sandbox: {outcome.error_type or ''}".strip())
    run = parse_run(outcome.value_repr)
    if run is None:  # the candidate's job can rewrite its result (issue 50): a failed candidate, not a crash
        return CodeResult(
            False, "fail", "the candidate's job returned no readable run (malformed harness output)"
        )
    tests = item.meta["tests"]
    fn = item.meta.get("fn_name")
    for i, out in enumerate(run["outputs"][: len(tests)]):
        try:
            ok = (
                out == json.loads(tests[i]["output"]) if fn else lcb_same_stdout(str(out), tests[i]["output"])
            )
        except Exception:  # noqa: BLE001 - an unreadable expected output fails the test, never the grader
            ok = False
        if not ok:
            return CodeResult(False, "fail", f"test {i}: wrong answer")
    if run["status"] != "pass":
        return CodeResult(False, run["status"], run.get("detail", ""))
    if len(run["outputs"]) != len(tests):
        return CodeResult(False, "fail", f"{len(run['outputs'])} outputs for {len(tests)} tests")
    return CodeResult(True, "pass", "")


class CodeGrader:
    """Runs candidate programs against benchmark tests in a sandbox pool (parallel, order kept)."""

    def __init__(self, workers: int = 2, limits: CodeLimits | None = None):
        self.workers = max(1, int(workers))
        self.limits = limits or CodeLimits()

    def grade(
        self, pairs: Sequence[tuple[Item, str]], progress: Callable[[int], None] | None = None
    ) -> list[CodeResult]:
        """``pairs`` = [(item, program text), ...] for EvalPlus or LiveCodeBench items."""
        from populora.evaluate import ground_truth as gtm
        from populora.evaluate.evalplus_grading import grade_evalplus, phases

        if not pairs:
            return []
        results: list[CodeResult | None] = [None] * len(pairs)
        ep = [i for i, (item, _c) in enumerate(pairs) if item.kind != "lcb"]
        lcb = [i for i, (item, _c) in enumerate(pairs) if item.kind == "lcb"]
        gts = {}
        if ep:
            # First, in their own pool (started only if something is not cached, closed before candidates run).
            items = {pairs[i][0].id: pairs[i][0] for i in ep}
            needs = [(it, ph) for it in items.values() for ph in phases(self.limits)]
            gts = gtm.expected_outputs(needs, self.limits.gt_cache, self.workers)
        with EvalPool(self.workers) as sb:
            if ep:
                got = grade_evalplus(sb, [pairs[i] for i in ep], gts, self.limits, self.workers, progress)
                for i, r in zip(ep, got, strict=True):
                    results[i] = r
            if lcb:
                self._grade_lcb(sb, pairs, lcb, results, progress)
        return [r for r in results if r is not None]

    def _grade_lcb(self, sb, pairs, idxs, results, progress) -> None:
        from populora.sandbox import Limits

        timeout = max(_job_timeout(self.limits, pairs[i][0]) for i in idxs)
        lim = Limits(timeout_s=timeout, memory_mb=self.limits.memory_mb, max_output_chars=4000, cpu_s=timeout)
        chunk = max(self.workers * 4, 8)
        for s in range(0, len(idxs), chunk):
            part = idxs[s : s + chunk]
            jobs = [lcb_job(pairs[i][0], pairs[i][1], self.limits) for i in part]
            for i, out in zip(part, sb.run_many(jobs, lim), strict=True):
                try:
                    results[i] = _lcb_result(pairs[i][0], out)
                except Exception as exc:  # noqa: BLE001 - one candidate's run never aborts the evaluation
                    results[i] = CodeResult(False, "fail", f"grader error {type(exc).__name__}")
            if progress:
                progress(len(part))
