"""Grading HumanEval+ candidates (issue 29 §3): no expected output reachable from a candidate, one huge output
fails only its input, and each concurrent candidate has its own thread allowance.

Real HumanEval+ tasks from the shipped data, the real sandbox. Before these fixes the expected outputs were
computed on the candidates' own workers (a candidate that computes nothing passed the base tests of a task by
reading them from its worker's memory), ``repr`` of a 5,000-digit wrong output raised ValueError out of
`CodeGrader.grade`, and all candidates' jobs shared one uid, so one that held the uid's threads made a
concurrent, innocent one fail with "can't start new thread".
"""

from __future__ import annotations

import pytest

from populora.evaluate import ground_truth as gtm
from populora.evaluate.code_grader import CodeGrader, CodeLimits
from populora.evaluate.data import load_benchmark
from populora.evaluate.evalplus_compare import show
from populora.evaluate.pools import GT_SLOT, EvalPool, job_uid

NO_CACHE = CodeLimits(gt_cache=False)

# A candidate that computes nothing: it looks for the harness's result text ('{"status": "pass", "times":
# [...], ..., "outputs": [...]}') in every place a job can reach -- its stack up to the worker's main loop,
# every gc-tracked object, and raw memory through ctypes and /proc/self/maps (open() is disabled, io.open
# is not) -- and answers with the outputs of a run with as many outputs as it has inputs.
THIEF = r"""
import sys, gc, json

_FOUND = []


def _runs_in(text):
    dec = json.JSONDecoder()
    key = '{"status": "pass", "times": ['
    out = []
    start = text.find(key)
    while start != -1 and len(out) < 10000:
        try:
            val, _end = dec.raw_decode(text, start)
            if isinstance(val, dict) and isinstance(val.get("outputs"), list):
                out.append(val)
        except ValueError:
            pass
        start = text.find(key, start + 1)
    return out


def _take(v, texts):
    if isinstance(v, str):
        if '"outputs": [' in v:
            texts.append(v)
    elif isinstance(v, (bytes, bytearray)):
        if b'"outputs": [' in v:
            texts.append(bytes(v).decode("utf-8", "replace").replace('\\"', '"'))
    elif isinstance(v, dict):
        for x in list(v.values()):
            if isinstance(x, (str, bytes, bytearray)):
                _take(x, texts)


def _memory(texts):
    try:
        import ctypes, io
        with io.open("/proc/self/maps") as fh:
            maps = fh.read().splitlines()
        for line in maps:
            parts = line.split()
            if len(parts) < 2 or not parts[1].startswith("rw"):
                continue
            a, b = (int(x, 16) for x in parts[0].split("-"))
            if b - a > (512 << 20):
                continue
            try:
                blob = ctypes.string_at(a, b - a)
            except Exception:
                continue
            if b'"outputs": [' in blob:
                texts.append(blob.decode("utf-8", "replace").replace('\\"', '"'))
    except Exception:
        pass


def _steal():
    texts = []
    f = sys._getframe()
    while f is not None:
        for v in list(f.f_locals.values()) + list(f.f_globals.values()):
            _take(v, texts)
        f = f.f_back
    for o in gc.get_objects():
        _take(o, texts)
        if isinstance(o, list):
            for x in o[:100]:
                _take(x, texts)
    _memory(texts)
    return [r for t in texts for r in _runs_in(t)]


def ENTRY(*args):
    caller = sys._getframe(1)
    inputs, i = caller.f_locals["inputs"], caller.f_locals["i"]
    decode = caller.f_globals["decode"]
    if not _FOUND:
        _FOUND.append([r for r in _steal() if len(r["outputs"]) == len(inputs)])
    for run in _FOUND[0]:
        outs = [decode(o) for o in run["outputs"]]
        if any(o is not None for o in outs):
            return outs[i]
    return None
"""


@pytest.fixture(scope="module")
def tasks(shared_data):
    items = {it.id: it for it in load_benchmark("humaneval+", shared_data, limit=10)}
    # Base input counts 7, 6 and 5, plus counts 999, 898 and 1000: a thief can tell their runs apart.
    return [items[k] for k in ("HumanEval/0", "HumanEval/3", "HumanEval/8")]


def test_a_candidate_cannot_find_the_expected_outputs(tasks, monkeypatch):
    thieves = [(it, THIEF.replace("ENTRY", it.meta["entry_point"])) for it in tasks]
    # Several rounds: what a worker's memory still holds varies from run to run (the old grader leaked in
    # about half of the rounds with one or two workers).
    for rnd, workers in enumerate((1, 2, 1, 2)):
        # Expected outputs computed afresh in this very grading (nothing from the memory or disk cache).
        monkeypatch.setattr(gtm, "_MEMORY", {})
        before = gtm.computed
        golds = [(it, it.gold) for it in tasks] if rnd == 0 else []
        res = CodeGrader(workers=workers, limits=NO_CACHE).grade(thieves + golds)
        assert gtm.computed - before == 2 * len(tasks)
        assert [r.base_passed for r in res[: len(tasks)]] == [False] * len(tasks), [r.detail for r in res]
        assert [r.passed for r in res[len(tasks) :]] == [True] * len(golds)  # the grading itself works


def test_expected_outputs_and_candidates_never_share_a_uid():
    with EvalPool(2) as cand, EvalPool(2, first_slot=GT_SLOT) as gt:
        uids = cand.uids + gt.uids
        outs = cand.run_many([("import os", "os.getuid()")] * 2, None) + gt.run_many(
            [("import os", "os.getuid()")] * 2, None
        )
    assert len(set(uids)) == 4 and uids[0] == job_uid(0) and uids[2] == job_uid(GT_SLOT)
    if cand.sandboxes[0].isolation.get("uid_drop"):
        # which worker of a pool takes which job is the pool's choice (a free worker may take both): each job
        # ran under one of its own pool's uids, never the other pool's
        seen = [int(o.value_repr) for o in outs]
        assert set(seen[:2]) <= set(uids[:2]) and set(seen[2:]) <= set(uids[2:]), (seen, uids)


def test_an_output_above_the_int_digit_limit_fails_only_its_candidate(tasks):
    huge = "def has_close_elements(numbers, threshold):\n    return 10 ** 5000\n"
    res = CodeGrader(workers=2).grade([(tasks[0], huge), (tasks[1], tasks[1].gold)])
    assert [r.passed for r in res] == [False, True]
    assert res[0].status == "fail" and "about 5001 digits" in res[0].detail


def test_show_is_bounded_and_never_raises():
    assert show(10**5000) == "<int of about 5001 digits>"
    assert show(-(10**900)).startswith("-1000") and len(show(-(10**900))) <= 120
    assert show([1, 10**5000]) == "[1, <int of about 5001 digits>]"
    assert len(show("x" * 10**6)) <= 120 and show(True) == "True"

    class Broken:
        def __repr__(self):
            raise RuntimeError("no")

    assert "Broken" in show(Broken())


HOG = """
import threading, time
_held = []
try:
    while True:
        t = threading.Thread(target=time.sleep, args=(30,), daemon=True)
        t.start()
        _held.append(t)
except RuntimeError:
    pass
time.sleep(8)  # holds every thread it could start while the other candidate runs


def has_close_elements(numbers, threshold):
    return None
"""

# Right, and uses a few threads: once after the hog has had time to take its own (a job has 64).
INNOCENT = """
import threading, time
time.sleep(3)


def _check(numbers, threshold, out):
    out.append(any(abs(a - b) < threshold for i, a in enumerate(numbers) for b in numbers[i + 1 :]))


_workers = [threading.Thread(target=_check, args=([1.0, 2.0], 0.5, [])) for _ in range(8)]
for _t in _workers:
    _t.start()
for _t in _workers:
    _t.join()


def truncate_number(number):
    out = []
    t = threading.Thread(target=lambda: out.append(number % 1.0))
    t.start()
    t.join()
    return out[0]
"""


def test_a_thread_hog_does_not_starve_a_concurrent_candidate(shared_data):
    items = {it.id: it for it in load_benchmark("humaneval+", shared_data, limit=3)}
    hog, innocent = items["HumanEval/0"], items["HumanEval/2"]
    res = CodeGrader(workers=2).grade([(hog, HOG), (innocent, INNOCENT)])
    assert res[0].passed is False
    assert res[1].passed is True, res[1].detail
