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
