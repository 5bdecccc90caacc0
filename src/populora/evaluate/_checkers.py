"""Source text of the test harnesses that run *inside* the sandbox (one job per candidate program).

They are plain module source (standard library only: the sandbox job cannot import third-party packages)
that `code_grader.py` prefixes to a JSON payload. Each defines one entry call returning a small dict.

EvalPlus semantics (evalplus 0.3.1 `evalplus/eval/__init__.py`, `evaluate.py`, `gen/util`), re-implemented:

- ground truth: the canonical program (``prompt + canonical_solution``) runs on a deep copy of every input,
  timing each call; tasks whose outputs are not comparable (MBPP ``check_str`` and co.) record
  ``out is not None`` instead of the value;
- per-input time limit ``max(min_time_limit, gt_time_limit_factor * gt_time)``, per-phase budget
  ``min(60, sum(limits)) + 1`` seconds; base and plus phases each exec the candidate afresh (EvalPlus uses a
  new process per phase) and stop at the first failing input (EvalPlus's default fast check);
- comparison: ``out == expected``, then the special oracles (MBPP set-equality tasks, not-None tasks,
  ``are_equivalent``, ``sum_div``, ``surface_Area``, ``digit_distance_nums``; HumanEval ``find_zero`` checks
  ``|poly(x)| <= atol``), then for float outputs (``atol`` forced to 1e-6 once a float output is seen) the
  same type and length and ``allclose(rtol=1e-7, atol)``; numpy's ``allclose`` is replaced by an equivalent
  pure-Python one because numpy is not importable in the sandbox;
- MBPP+ inputs are stored as JSON and converted back to tuples/sets/complex per task, as
  ``mbpp_deserialize_inputs`` does;
- one deliberate difference: evalplus 0.3.1 forgets to mark a passing ``find_zero`` input as passed, so it
  fails *every* HumanEval/32 solution (even the canonical one fails it); we count it as passed,
  like later evalplus releases.

LiveCodeBench semantics (`lcb_runner/evaluation/testing_util.py`), re-implemented: functional tests call
``Solution().<fn_name>`` (or a top-level function) with one JSON value per input line and compare
``list(result) if tuple`` with the JSON output; stdin tests run the program as ``__main__`` with the input on
stdin (``input()``, ``sys.stdin``, ``sys.stdin.buffer`` and ``open(0)``), then compare stripped lines, or the
lines as `Decimal` numbers; a per-test timeout (6 s by default), ``SystemExit`` counts as a normal end, and
grading stops at the first failing test.
"""

EVALPLUS_CHECKER = r"""
import contextlib as _cl
import copy as _copy
import io as _io
import json as _json
import math as _math
import signal as _signal
import time as _time


class _PopuloraTimeout(BaseException):
    pass


def _on_alarm(signum, frame):
    raise _PopuloraTimeout()


class _Sink(_io.StringIO):
    def read(self, *a, **k):
        raise IOError

    def readline(self, *a, **k):
        raise IOError

    def readlines(self, *a, **k):
        raise IOError

    def readable(self, *a, **k):
        return False


@_cl.contextmanager
def _quiet():
    sink = _Sink()
    import sys as _sys
    old = (_sys.stdout, _sys.stderr, _sys.stdin)
    _sys.stdout = _sys.stderr = _sys.stdin = sink
    try:
        yield
    finally:
        _sys.stdout, _sys.stderr, _sys.stdin = old


@_cl.contextmanager
def _limit(seconds):
    _signal.signal(_signal.SIGALRM, _on_alarm)
    _signal.setitimer(_signal.ITIMER_REAL, max(seconds, 1e-3))
    try:
        yield
    finally:
        _signal.setitimer(_signal.ITIMER_REAL, 0)


_SET_EQ = {"similar_elements", "find_char_long", "common_in_nested_lists", "extract_singly", "larg_nnum",
           "intersection_array", "find_dissimilar", "Diff"}
_NOT_NONE = {"check_str", "text_match_three", "text_starta_endb"}


def _surface_area_oracle(base_edge, height):
    slant = _math.sqrt((base_edge / 2) ** 2 + height ** 2)
    return round(base_edge ** 2 + 4 * (base_edge * slant) / 2)


def _digit_distance_oracle(a, b):
    sa, sb = str(a), str(b)
    n = max(len(sa), len(sb))
    return sum(abs(int(x) - int(y)) for x, y in zip(sa.zfill(n), sb.zfill(n)))


def _poly(xs, x):
    return sum(c * _math.pow(x, i) for i, c in enumerate(xs))


def _is_floats(x):
    if isinstance(x, float):
        return True
    if isinstance(x, (list, tuple)) and x:
        return all(isinstance(i, float) for i in x)
    return False


def _flat(v, out):
    if isinstance(v, (list, tuple)):
        for e in v:
            _flat(e, out)
    else:
        out.append(v)
    return out


def _shape(v):
    if isinstance(v, (list, tuple)):
        return (len(v),) + (_shape(v[0]) if v else ())
    return ()


def _allclose(a, b, rtol, atol):
    # numpy.allclose for equal-shaped (nested) sequences of real numbers; anything else is a mismatch.
    if _shape(a) != _shape(b):
        if _shape(a) != () and _shape(b) != ():
            return False
    fa, fb = _flat(a, []), _flat(b, [])
    if len(fa) == 1 and len(fb) > 1:
        fa = fa * len(fb)
    if len(fb) == 1 and len(fa) > 1:
        fb = fb * len(fa)
    if len(fa) != len(fb):
        return False
    for x, y in zip(fa, fb):
        if not isinstance(x, (int, float)) or not isinstance(y, (int, float)):
            return False
        x, y = float(x), float(y)
        if _math.isnan(x) or _math.isnan(y):
            return False
        if _math.isinf(x) or _math.isinf(y):
            if x != y:
                return False
            continue
        if abs(x - y) > atol + rtol * abs(y):
            return False
    return True


def _tuplify(v):
    if isinstance(v, list):
        return tuple(_tuplify(e) for e in v)
    return v


def _mbpp_inputs(task, inputs):
    # Per-task conversions of MBPP+ JSON inputs (evalplus mbpp_deserialize_inputs).
    A = {2, 116, 132, 143, 222, 261, 273, 394, 399, 421, 424, 429, 470, 560, 579, 596, 616, 630, 726, 740,
         744, 809}
    B = {63, 64, 70, 94, 120, 237, 272, 299, 400, 409, 417, 438, 473, 614, 780}
    if task in A:
        return [[tuple(a) for a in inp] for inp in inputs]
    if task in B:
        return [[[tuple(x) for x in a] for a in inp] for inp in inputs]
    if task in (75, 413, 444, 753):
        return [[[tuple(x) for x in inp[0]]] + [inp[1]] for inp in inputs]
    if task in (106, 750):
        return [[inp[0]] + [tuple(inp[1])] for inp in inputs]
    if task == 115:
        return [[[set(x) if isinstance(x, list) and len(x) else {} for x in inp[0]]] for inp in inputs]
    if task == 124:
        return [(float(inp[0]), complex(inp[1])) for inp in inputs]
    if task in (250, 405, 446, 617, 720, 763, 808):
        return [[tuple(inp[0])] + [inp[1]] for inp in inputs]
    if task in (259, 401, 445):
        return [[tuple(tuple(x) for x in a) for a in inp] for inp in inputs]
    if task == 278:
        return [[tuple(tuple(x) if isinstance(x, list) else x for x in inp[0])] for inp in inputs]
    if task == 307:
        return [[tuple(inp[0])] + [inp[1], inp[2]] for inp in inputs]
    if task == 722:
        return [[{k: tuple(v) for k, v in inp[0].items()}] + inp[1:] for inp in inputs]
    if task == 252:
        return [[complex(inp[0])] for inp in inputs]
    if task in (580, 615, 791):
        return [_tuplify(inp) for inp in inputs]
    return inputs


def _load(code, entry, budget):
    g = {"__name__": "__populora_solution__"}
    with _quiet():
        with _limit(budget):
            exec(code, g)
    return g[entry]


def _ground_truth(P, inputs):
    fn = _load(P["canonical"], P["entry_point"], 600)
    outs, times = [], []
    for inp in inputs:
        inp = _copy.deepcopy(inp)
        with _quiet():
            t0 = _time.perf_counter()
            out = fn(*inp)
            times.append(_time.perf_counter() - t0)
        outs.append(out)
    if P["entry_point"] in _NOT_NONE and P["dataset"] == "mbpp":
        outs = [o is not None for o in outs]
    return outs, times


def _check_phase(P, inputs, expected, times):
    limits = [max(P["min_time_limit"], P["gt_time_limit_factor"] * t) for t in times]
    budget = min(P["task_timeout"], sum(limits)) + 1.0
    entry, dataset, atol = P["entry_point"], P["dataset"], P["atol"]
    start = _time.perf_counter()
    try:
        fn = _load(P["candidate"], entry, budget)
    except _PopuloraTimeout:
        return "timeout", 0, "timeout while defining the solution"
    except BaseException as e:
        return "fail", 0, "%s: %s" % (type(e).__name__, str(e)[:200])
    for i, inp in enumerate(inputs):
        left = budget - (_time.perf_counter() - start)
        if left <= 0:
            return "timeout", i, "phase budget exceeded"
        lim = min(limits[i], left)
        try:
            with _quiet():
                with _limit(lim):
                    out = fn(*inp)
            exp = expected[i]
            exact = out == exp
            if dataset == "mbpp":
                if entry == "are_equivalent":
                    exact = True
                elif entry == "sum_div":
                    exact = exact or out == 0
                elif entry == "surface_Area":
                    exact = exact or abs(out - _surface_area_oracle(*inp)) <= atol
                elif entry == "digit_distance_nums":
                    exact = exact or out == _digit_distance_oracle(*inp)
                elif entry in _SET_EQ:
                    exact = set(out) == set(exp)
                elif entry in _NOT_NONE:
                    exact = out == exp if isinstance(out, bool) else exp == (out is not None)
            if dataset == "humaneval" and entry == "find_zero":
                ok = abs(_poly(*inp, out)) <= atol
                if not ok:
                    return "fail", i, "input %d: |poly(x)| > atol" % i
                continue
            if atol == 0 and _is_floats(exp):
                atol = 1e-6
            if not exact and atol != 0:
                ok = type(out) == type(exp)
                if ok and isinstance(exp, (list, tuple)):
                    ok = len(out) == len(exp)
                ok = ok and _allclose(out, exp, 1e-07, atol)
            else:
                ok = bool(exact)
        except _PopuloraTimeout:
            why = "time limit %.3fs" % limits[i] if lim == limits[i] else "phase budget %.1fs" % budget
            return "timeout", i, "input %d: %s" % (i, why)
        except BaseException as e:
            return "fail", i, "input %d: %s: %s" % (i, type(e).__name__, str(e)[:200])
        if not ok:
            return "fail", i, "input %d: wrong output" % i
    return "pass", len(inputs), ""


def _populora_evalplus():
    P = _json.loads(_PAYLOAD)
    res = {"base": None, "plus": None, "n_base": len(P["base_input"]), "n_plus": len(P["plus_input"]),
           "gt_error": None, "detail": ""}
    phases = [("base", P["base_input"])] + ([("plus", P["plus_input"])] if P["plus"] else [])
    for name, raw in phases:
        inputs = _mbpp_inputs(P["task"], raw) if P["dataset"] == "mbpp" else raw
        try:
            expected, times = _ground_truth(P, inputs)
        except BaseException as e:
            res["gt_error"] = "%s: %s" % (type(e).__name__, str(e)[:200])
            return res
        status, _n, detail = _check_phase(P, inputs, expected, times)
        res[name] = status
        if status != "pass":
            res["detail"] = "%s: %s" % (name, detail)
            break
    return res
"""

LCB_CHECKER = r"""
import io as _io
import json as _json
import signal as _signal
import sys as _sys
import time as _time
from decimal import Decimal as _Decimal

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


def _lines(s):
    return [line.strip() for line in s.strip().split("\n")]


def _decimals(line):
    try:
        return True, [_Decimal(x) for x in line.split()]
    except Exception:
        return False, []


def _same_stdout(pred, gold):
    a, b = _lines(pred), _lines(gold)
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if x == y:
            continue
        okx, dx = _decimals(x)
        oky, dy = _decimals(y)
        if not (okx and oky and dx == dy):
            return False
    return True


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
    P = _json.loads(_PAYLOAD)
    tests, timeout = P["tests"], P["timeout"]
    res = {"passed": 0, "n": len(tests), "status": "pass", "detail": ""}
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
            return res
    for i, t in enumerate(tests):
        try:
            if P["fn_name"]:
                args = [_json.loads(line) for line in t["input"].split("\n")]
                gold = _json.loads(t["output"])
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
                ok = pred == gold
            else:
                ok = _same_stdout(_run_stdin(code, t["input"], timeout), t["output"])
        except _PopuloraTimeout:
            res.update(status="timeout", detail="test %d: time limit %ss" % (i, timeout))
            return res
        except BaseException as e:
            res.update(status="error", detail="test %d: %s: %s" % (i, type(e).__name__, str(e)[:200]))
            return res
        if not ok:
            res.update(status="fail", detail="test %d: wrong answer" % i)
            return res
        res["passed"] += 1
    return res
"""
