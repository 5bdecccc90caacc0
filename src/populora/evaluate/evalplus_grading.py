"""Grading HumanEval+/MBPP+ candidates: expected outputs first, candidate jobs next, verdicts last.

See `code_grader.py` for the design. Phases follow evalplus: the base inputs, then (for candidates that pass
them, and unless ``CodeLimits.plus`` is off) the plus inputs, each in a fresh job like evalplus's fresh process
per phase. A candidate job holds the candidate, the inputs and the time limits, never an expected output.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from populora.evaluate import ground_truth as gtm
from populora.evaluate.data import Item
from populora.evaluate.evalplus_compare import judge_phase
from populora.evaluate.items import CodeLimits, CodeResult


def _phase_limits(gt: gtm.GroundTruth, limits: CodeLimits) -> tuple[list[float], float]:
    per = [max(limits.min_time_limit, limits.gt_time_limit_factor * t) for t in gt.times or []]
    # evalplus: the phase's process gets min(EVALPLUS_TIMEOUT_PER_TASK, sum) + 1, +1 without fast check.
    return per, min(limits.task_timeout, sum(per)) + 2.0


def phases(limits: CodeLimits) -> list[str]:
    return ["base", "plus"] if limits.plus else ["base"]


def _run_phase(sb, batch, phase, gts, limits, workers, progress):
    """Run one phase's candidate jobs for ``batch`` = [(index, item, code)]; {index: (status, detail)}."""
    from populora.sandbox import Limits

    verdicts: dict[int, tuple[str, str]] = {}
    runnable = []
    for i, item, code in batch:
        gt = gts[(item.id, phase)]
        if gt.error is not None:
            verdicts[i] = ("gt_error", f"canonical solution failed ({phase}): {gt.error}")
        else:
            runnable.append((i, item, code, gt))
    chunk = max(workers * 4, 8)
    for s in range(0, len(runnable), chunk):
        part = runnable[s : s + chunk]
        jobs, lims = [], []
        for _i, item, code, gt in part:
            per, budget = _phase_limits(gt, limits)
            jobs.append(gtm.job(item, code, gtm.phase_inputs(item, phase), per, budget, False))
            lims.append(budget)
        # One sandbox deadline for the chunk: the longest phase budget, plus the same again for encoding the
        # outputs (the harness's budget counts only the program's own time), plus start-up slack.
        wall = 2 * max(lims) + 10.0
        lim = Limits(timeout_s=wall, memory_mb=limits.memory_mb, max_output_chars=80_000_000, cpu_s=wall)
        for (i, item, _code, gt), out in zip(part, sb.run_many(jobs, lim), strict=True):
            try:
                verdicts[i] = _verdict(item, phase, gt, out)
            except Exception as exc:  # noqa: BLE001 - one candidate's run never aborts the evaluation
                verdicts[i] = ("fail", f"{phase}: grader error {type(exc).__name__}")
        if progress and phase == "base":
            progress(len(part))
    if progress and phase == "base" and len(runnable) < len(batch):
        progress(len(batch) - len(runnable))
    return verdicts


def _verdict(item: Item, phase: str, gt: gtm.GroundTruth, out) -> tuple[str, str]:
    """(status, detail) of one candidate's phase from its job's outcome `out`. A run the candidate's job did
    not return in the harness's form (it can rewrite it: issue 50) is a failed candidate with that reason."""
    if out.status != "ok":
        status = "timeout" if out.status == "timeout" else "fail"
        msg = f"{out.error_type or ''} {(out.error_message or '')[:200]}".strip()
        return status, f"{phase}: sandbox {out.status} {msg}".strip()
    run = gtm.parse_run(out.value_repr)
    if run is None:
        return "fail", f"{phase}: the candidate's job returned no readable run (malformed harness output)"
    inputs = gtm.phase_inputs(item, phase)
    if item.meta["dataset"] == "mbpp":
        from populora.evaluate._harness import mbpp_inputs

        inputs = mbpp_inputs(gtm.task_number(item), inputs)
    atol = item.meta.get("atol", 0) or 0
    try:
        status, _n, detail = judge_phase(
            item.meta["dataset"], item.meta["entry_point"], atol, inputs, gt.outputs, run
        )
    except Exception as exc:  # noqa: BLE001 - one candidate's outputs never abort the evaluation
        status, detail = "error", f"grader error {type(exc).__name__}: {str(exc)[:200]}"
    return status, f"{phase}: {detail}" if detail else ""


def grade_evalplus(
    sb,
    pairs: Sequence[tuple[Item, str]],
    gts: dict[tuple, gtm.GroundTruth],
    limits: CodeLimits,
    workers: int,
    progress: Callable[[int], None] | None = None,
) -> list[CodeResult]:
    """Verdicts of ``pairs`` = [(item, candidate program)], run on ``sb`` (the candidates' `EvalPool`), against
    ``gts`` (`ground_truth.expected_outputs`, computed in another pool)."""
    base = _run_phase(
        sb, [(i, it, c) for i, (it, c) in enumerate(pairs)], "base", gts, limits, workers, progress
    )
    plus: dict[int, tuple[str, str]] = {}
    if limits.plus:
        todo = [(i, it, c) for i, (it, c) in enumerate(pairs) if base[i][0] == "pass"]
        plus = _run_phase(sb, todo, "plus", gts, limits, workers, None)
    results = []
    for i in range(len(pairs)):
        b_status, b_detail = base[i]
        if b_status != "pass":
            results.append(CodeResult(False, b_status, b_detail, False))
            continue
        p_status, p_detail = plus.get(i, ("pass", ""))
        results.append(CodeResult(p_status == "pass", p_status, p_detail, True))
    return results
