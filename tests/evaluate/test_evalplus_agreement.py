"""Our HumanEval+/MBPP+ verdicts agree with the official evalplus 0.3.1 on every sample but the documented ones.

The same samples (canonical, wrong, base-only-right and pathological kinds, over 41 tasks) are graded by
evalplus's own ``trusted_exec``/``untrusted_check`` and by `CodeGrader`; each verdict is the pair (base
passes, base and plus pass). The only differences allowed are `agreement.KNOWN_DIFFERENCES` (evalplus is
wrong or gamed). numpy and thread samples run in the sandbox's evaluation profile and must agree.
evalplus is a dev dependency installed without its heavy dependencies (``pip install --no-deps``).
"""

from __future__ import annotations

import pytest

pytest.importorskip(
    "evalplus.eval", reason="the dev extra installs evalplus (pip install --no-deps evalplus)"
)

from populora.evaluate import agreement  # noqa: E402


@pytest.fixture(scope="module")
def result():
    return agreement.compare(n_humaneval=22, n_mbpp=18, workers=2)


def test_every_sample_agrees_except_documented_cases(result):
    assert result["n_tasks"] >= 40
    kinds = {r["kind"] for r in result["rows"]}
    assert {"canonical", "wrong", "base_only"} <= kinds and len(kinds & set(agreement.KINDS)) >= 10
    assert result["disagreements"] == []


def test_samples_exercise_both_verdicts(result):
    rows = result["rows"]
    # canonical solutions pass both (HumanEval/32 aside), wrong ones fail, base-only pass base and fail plus
    for r in rows:
        if r["kind"] == "canonical" and r["task"] != "HumanEval/32":
            assert r["populora"] == [True, True], r
        if r["kind"] == "wrong":
            assert r["populora"] == [False, False], r
    base_only = [r for r in rows if r["kind"] == "base_only"]
    assert len(base_only) >= 30 and all(r["populora"] == [True, False] for r in base_only)


def test_documented_differences_are_the_ones_we_expect(result):
    for d in result["expected_differences"]:
        assert d["why"], d
        if d["kind"] == "always_eq":  # evalplus is gamed; we are not
            assert d["evalplus"] == [True, True] and d["populora"] == [False, False]
    assert any(d["task"] == "HumanEval/32" for d in result["expected_differences"])


def test_numpy_and_thread_samples_agree(result):
    import os

    if os.geteuid() == 0:  # where every layer is in force, the evaluation profile grants threads
        assert result["threads_allowed"]
    kinds = {r["kind"] for r in result["rows"]}
    assert {"numpy", "numpy_scalar", "thread"} <= kinds
    if result["threads_allowed"]:
        assert not [
            d for d in result["expected_differences"] if d["kind"] in ("numpy", "numpy_scalar", "thread")
        ]


def test_reference_timeouts_are_told_from_verdicts():
    """A correct program that evalplus's time limit cuts short (a slow first call, as under load) is a timeout
    and leaves the disagreements; a real difference (an always-equal object) stays a disagreement."""
    item = agreement.choose_tasks(1, 0)[0]
    gt = agreement.official_ground_truth([item])
    call = f"_canon_{item.meta['entry_point']}(*args)"
    slow = agreement.Sample(
        item,
        "slow_first_call",
        agreement._wrap(
            item,
            f"    if _SLOW:\n        _SLOW.pop()\n        __import__('time').sleep(1.5)\n    return {call}",
            prelude="_SLOW = [1]\n",
        ),
    )
    # at evalplus's own limits (1 s floor) the first test of each phase times out: a failure in its verdict
    assert agreement.grade_official([slow], gt, workers=1) == [(False, False)]
    assert agreement.settle(slow, gt, (False, False), (True, True)) == (
        (True, True),
        (True, True),
        "evalplus",
    )
    gamed = agreement.Sample(item, "always_eq", agreement._pathological(item, "always_eq"))
    official, ours, who = agreement.settle(gamed, gt, (True, True), (False, False))
    assert who is None and official == (True, True) and ours == (False, False)


def test_compare_reports_timeouts_apart(result):
    for t in result["timeouts"]:  # empty on a quiet machine; under load, settled samples land here
        assert t["timed_out"] in ("evalplus", "populora", "both") and t["verdict"], t
        assert t not in result["disagreements"]
