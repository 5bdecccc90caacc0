"""Source text of the LiveCodeBench test harness that runs *inside* the sandbox (one job per candidate).

Plain module source (standard library only), run after `_harness.py`'s source (for `encode`) and followed by a
JSON payload (`code_grader.lcb_job`) that holds the candidate and the test *inputs* only; the job returns the
candidate's outputs and the grading process compares them with the expected ones (`code_grader._lcb_result`).

EvalPlus (HumanEval+/MBPP+) grading lives in `_harness.py` (the candidate side, which returns outputs only)
and `evalplus_compare.py` (the verdict, computed in the grading process).

LiveCodeBench semantics (`lcb_runner/evaluation/testing_util.py`), re-implemented: functional tests call
``Solution().<fn_name>`` (or a top-level function) with one JSON value per input line and compare
``list(result) if tuple`` with the JSON output; stdin tests run the program as ``__main__`` with the input on
stdin (``input()``, ``sys.stdin``, ``sys.stdin.buffer`` and ``open(0)``), then compare stripped lines, or the
lines as `Decimal` numbers; a per-test timeout (6 s by default), ``SystemExit`` counts as a normal end, and
grading stops at the first failing test (the job stops at the first error or timeout; the comparison stops
at the first wrong output).
"""

LCB_CHECKER = r"""
import io as _io
import json as _json
import signal as _signal
import sys as _sys
import time as _time

_HEADER = (
    "from string import *\nfrom re import *\nfrom datetime import *\nfrom collections import *\n"
    "from heapq import *\nfrom bisect import *\nfrom copy import *\nfrom math import *\nfrom random import *\n"
    "from statistics import *\nfrom itertools import *\nfrom functools import *\nfrom operator import *\n"
    "from io import *\nfrom sys import *\nfrom json import *\nfrom builtins import *\nfrom typing import *\n"
    "import string, re, datetime, collections, heapq, bisect, copy, math, random, statistics, itertools\n"
    "import functools, operator, io, sys, json\nsys.setrecursionlimit(50000)\n"
)


class _PopuloraTimeout(BaseException):
    pass


def _on_alarm(signum, frame):
    raise _PopuloraTimeout()


def _alarm(seconds):
    _signal.signal(_signal.SIGALRM, _on_alarm)
    _signal.setitimer(_signal.ITIMER_REAL, seconds)


def _run_stdin(code, data, timeout):
    stdin = _io.TextIOWrapper(_io.BytesIO(data.encode()), encoding="utf-8")
    out = _io.StringIO()
    old = (_sys.stdin, _sys.stdout)
    g = {"__name__": "__main__", "open": lambda *a, **k: _io.StringIO(data)}
    _sys.stdin, _sys.stdout = stdin, out
    try:
        _alarm(timeout)
        try:
            exec(code, g)
        except SystemExit:
            pass
        finally:
            _signal.setitimer(_signal.ITIMER_REAL, 0)
    finally:
        _sys.stdin, _sys.stdout = old
    return out.getvalue()


def _populora_lcb():
    # Returns the candidate's outputs (functional: its return values, encoded by `_harness.encode`; stdin: its
    # stdout), stopping at the first error or timeout. The expected outputs are not in this job: the grading
    # process compares (code_grader._lcb_result).
    P = _json.loads(_PAYLOAD)
    inputs, timeout = P["inputs"], P["timeout"]
    res = {"status": "pass", "detail": "", "outputs": []}
    code = P["code"]
    if P["fn_name"]:
        src = _HEADER + "\n\n" + code
        g = {"__name__": "__populora_solution__"}
        try:
            _alarm(timeout)
            try:
                with _io.StringIO() as sink:
                    old = _sys.stdout
                    _sys.stdout = sink
                    try:
                        exec(src, g)
                    finally:
                        _sys.stdout = old
            finally:
                _signal.setitimer(_signal.ITIMER_REAL, 0)
            holder = g["Solution"]() if "class Solution" in code else None
            method = getattr(holder, P["fn_name"]) if holder is not None else g[P["fn_name"]]
        except BaseException as e:
            res.update(status="error", detail="compile: %s: %s" % (type(e).__name__, str(e)[:200]))
            return _json.dumps(res)
    for i, inp in enumerate(inputs):
        try:
            if P["fn_name"]:
                args = [_json.loads(line) for line in inp.split("\n")]
                old = _sys.stdout
                _sys.stdout = _io.StringIO()
                try:
                    _alarm(timeout)
                    try:
                        pred = method(*args)
                    finally:
                        _signal.setitimer(_signal.ITIMER_REAL, 0)
                finally:
                    _sys.stdout = old
                if isinstance(pred, tuple):
                    pred = list(pred)
                res["outputs"].append(encode(pred))
            else:
                res["outputs"].append(_run_stdin(code, inp, timeout))
        except _PopuloraTimeout:
            res.update(status="timeout", detail="test %d: time limit %ss" % (i, timeout))
            break
        except BaseException as e:
            res.update(status="error", detail="test %d: %s: %s" % (i, type(e).__name__, str(e)[:200]))
            break
    return _json.dumps(res)
"""
