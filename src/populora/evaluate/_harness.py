"""The candidate side of EvalPlus grading: the code that runs *inside* one sandbox job, next to the candidate.

This module is standard library only. `code_grader.py` sends its source text as the job's program (plus a
JSON payload), and the parent also imports it for `mbpp_inputs`, `decode` and `Opaque`, so both sides share
one definition of the input conversion and of the value encoding.

What a job does (`populora_run`): exec the program (the candidate, or the canonical solution when the
parent computes the expected outputs), call the entry point on every input under its time limit, and return
the *outputs* (encoded, see `encode`) with the per-input times and how the run ended. It never sees an
expected output and compares nothing: the comparison runs in the parent (`evalplus_compare.py`), so a
candidate that patches builtins, returns an object whose ``__eq__`` is always true, or reads the job's
payload gains nothing (issue 13 item 9, issue 14 item 2).

Before a candidate runs, `reliability_guard` disables what evalplus 0.3.1's ``reliability_guard`` disables
(``open``, ``os.getcwd``/``chdir``/``kill``/``remove``/..., ``shutil.rmtree``/``move``, ``subprocess.Popen``,
``exit``/``quit``/``help``, and hides ``resource``/``psutil``/``joblib``/``ipdb``/``tkinter``). The sandbox's OS
layers stay underneath; this only makes the Python-level behaviour match evalplus's verdicts.

Careful when editing: the sandbox imports its lazily-loaded modules for a job whose program text contains
their name, so this file must not name them (the threads module, the pseudo-number generator, ...).
"""

import contextlib as _cl
import io as _io
import json as _json
import math as _math
import signal as _signal
import sys as _sys
import time as _time

# Bound before any candidate code runs.
_perf = _time.perf_counter
_isinstance, _type, _len = isinstance, type, len
MAX_ENCODED_CHARS = 64_000_000  # total size of one job's encoded outputs; more is a failed run, not a crash
# An output with more container elements than this, or whose encoding is longer than BIG_TEXT, travels as a
# digest of its repr (`Digest`): MBPP+ has outputs of 10^8 elements that no pipe should carry.
MAX_NODES = 200_000
BIG_TEXT = 4_000_000


class _Timeout(BaseException):
    pass


def _on_alarm(signum, frame):
    raise _Timeout()


class _Sink(_io.StringIO):
    """evalplus's WriteOnlyStringIO: stdout/stderr are swallowed, reading stdin raises."""

    def read(self, *a, **k):
        raise OSError

    def readline(self, *a, **k):
        raise OSError

    def readlines(self, *a, **k):
        raise OSError

    def readable(self, *a, **k):
        return False


@_cl.contextmanager
def _quiet():
    sink = _Sink()
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


# ------------------------------------------------------------------------------------------ MBPP+ inputs
def _tuplify(v):
    if _isinstance(v, list):
        return tuple(_tuplify(e) for e in v)
    return v


def mbpp_inputs(task, inputs):
    """Per-task conversions of MBPP+ JSON inputs to tuples/sets/complex (evalplus ``mbpp_deserialize_inputs``)."""
    A = {2, 116, 132, 143, 222, 261, 273, 394, 399, 421, 424, 429, 470, 560, 579, 596, 616, 630, 726, 740}
    A |= {744, 809}
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
        return [[[set(x) if _isinstance(x, list) and len(x) else {} for x in inp[0]]] for inp in inputs]
    if task == 124:
        return [(float(inp[0]), complex(inp[1])) for inp in inputs]
    if task in (250, 405, 446, 617, 720, 763, 808):
        return [[tuple(inp[0])] + [inp[1]] for inp in inputs]
    if task in (259, 401, 445):
        return [[tuple(tuple(x) for x in a) for a in inp] for inp in inputs]
    if task == 278:
        return [[tuple(tuple(x) if _isinstance(x, list) else x for x in inp[0])] for inp in inputs]
    if task == 307:
        return [[tuple(inp[0])] + [inp[1], inp[2]] for inp in inputs]
    if task == 722:
        return [[{k: tuple(v) for k, v in inp[0].items()}] + inp[1:] for inp in inputs]
    if task == 252:
        return [[complex(inp[0])] for inp in inputs]
    if task in (580, 615, 791):
        return [_tuplify(inp) for inp in inputs]
    return inputs


# -------------------------------------------------------------------------------------- value encoding
# JSON with tags, so every plain-data value survives the trip exactly: ints of any size (hex beyond 2**60,
# where decimal repr has a digit limit), floats incl. -0.0/inf/nan, and the containers JSON lacks. Anything
# else (a user class, a regex match, a numpy array) travels as Opaque(type name): it is "not None" but equals
# nothing, which is what evalplus's comparisons make of such values for a fair candidate.
class Opaque:
    """A candidate output that is not plain data (kept by type name only)."""

    __slots__ = ("type_name",)

    def __init__(self, type_name):
        self.type_name = type_name

    def __repr__(self):
        return f"<{self.type_name} object>"


def encode(v, depth=0):
    t = _type(v)
    if depth > 200:
        return {"o": "deeply nested"}
    if v is None or t is bool or t is str:
        return v
    if t is int:
        return v if -(1 << 60) < v < (1 << 60) else {"i": hex(v)}
    if t is float:
        return v if _math.isfinite(v) else {"x": repr(v)}
    if t is list:
        return [encode(e, depth + 1) for e in v]
    if t is tuple:
        return {"t": [encode(e, depth + 1) for e in v]}
    if t is dict:
        return {"d": [[encode(k, depth + 1), encode(e, depth + 1)] for k, e in v.items()]}
    if t is set or t is frozenset:
        return {"s" if t is set else "f": [encode(e, depth + 1) for e in v]}
    if t is complex:
        return {"c": [encode(v.real), encode(v.imag)]}
    if t is bytes:
        return {"b": v.hex()}
    mod = getattr(t, "__module__", "")
    for base in (dict, list, tuple, set, frozenset, str, int, float):
        if _isinstance(v, base) and mod != "numpy":
            # Counter, OrderedDict, defaultdict, namedtuples, str/int subclasses: compared as their base type
            # (Counter({1: 2}) == {1: 2} in evalplus's comparison too).
            return encode(base(v), depth + 1)
    if mod == "numpy" and hasattr(v, "item") and getattr(v, "shape", None) == ():
        return {"n": encode(v.item(), depth + 1)}  # a numpy scalar: see NumpyFloat
    return {"o": "{}.{}".format(mod, getattr(t, "__qualname__", "?"))}


class Digest:
    """A large output kept as (type name, sha256 of its repr): equal exactly when the reprs are equal."""

    __slots__ = ("key",)

    def __init__(self, key):
        self.key = tuple(key)

    def __eq__(self, other):
        return _isinstance(other, Digest) and other.key == self.key

    def __hash__(self):
        return hash(self.key)

    def __repr__(self):
        return f"<{self.key[0]} output, sha256 {self.key[1][:12]}...>"


def _too_many_nodes(v):
    # Counts container elements breadth-first and stops as soon as the limit is passed (cheap on huge data).
    todo, n = [v], 0
    while todo:
        x = todo.pop()
        t = _type(x)
        if t is list or t is tuple or t is set or t is frozenset:
            n += _len(x)
            if n > MAX_NODES:
                return True
            todo.extend(x)
        elif t is dict:
            n += 2 * _len(x)
            if n > MAX_NODES:
                return True
            todo.extend(x.keys())
            todo.extend(x.values())
        elif (t is str or t is bytes) and _len(x) > BIG_TEXT:
            return True
    return False


def digest(v):
    import hashlib

    h = hashlib.sha256()
    t = _type(v)
    if t is list or t is tuple:
        for e in v:  # element by element: never one repr of the whole (it can be gigabytes)
            h.update(repr(e).encode("utf-8", "surrogatepass"))
            h.update(b"\0")
    else:
        h.update(repr(v).encode("utf-8", "surrogatepass"))
    return {"h": [getattr(t, "__qualname__", "?"), h.hexdigest()]}


class NumpyFloat(float):
    """A numpy float scalar: equal to its value, but not of type float (as for evalplus's type check)."""


class NumpyInt(int):
    """A numpy integer or bool scalar: equal to its value, but not of type int/bool."""


def decode(x):
    if _isinstance(x, list):
        return [decode(e) for e in x]
    if not _isinstance(x, dict):
        return x
    ((tag, val),) = x.items()
    if tag == "i":
        return int(val, 16)
    if tag == "x":
        return float(val)
    if tag == "t":
        return tuple(decode(e) for e in val)
    if tag == "d":
        return {decode(k): decode(e) for k, e in val}
    if tag == "s":
        return {decode(e) for e in val}
    if tag == "f":
        return frozenset(decode(e) for e in val)
    if tag == "c":
        return complex(decode(val[0]), decode(val[1]))
    if tag == "b":
        return bytes.fromhex(val)
    if tag == "h":
        return Digest(val)
    if tag == "n":
        v = decode(val)
        return NumpyFloat(v) if _type(v) is float else NumpyInt(v) if _type(v) in (int, bool) else v
    return Opaque(val)


# ------------------------------------------------------------------------------------------- the job
def reliability_guard(code):
    """What evalplus 0.3.1 disables before running a candidate (its ``reliability_guard``), minus the rlimits
    (the sandbox sets those). Modules that are not loaded yet are patched only when the code names them."""
    import builtins
    import os

    builtins.exit = None
    builtins.quit = None
    for name in (
        "kill",
        "system",
        "putenv",
        "remove",
        "removedirs",
        "rmdir",
        "fchdir",
        "setuid",
        "fork",
        "forkpty",
        "killpg",
        "rename",
        "renames",
        "truncate",
        "replace",
        "unlink",
        "fchmod",
        "fchown",
        "chmod",
        "chown",
        "chroot",
        "lchflags",
        "lchmod",
        "lchown",
        "getcwd",
        "chdir",
    ):
        setattr(os, name, None)
    builtins.open = None
    if "shutil" in code or "shutil" in _sys.modules:
        import shutil

        shutil.rmtree = shutil.move = shutil.chown = None
    if "subprocess" in code or "subprocess" in _sys.modules:
        try:
            import subprocess

            subprocess.Popen = None
        except ImportError:
            pass
    builtins.help = None
    for name in ("ipdb", "joblib", "resource", "psutil", "tkinter"):
        _sys.modules[name] = None


def _prepare(P):
    # numpy is allowed as in evalplus: the sandbox's evaluation profile makes it importable (and preloads it)
    # and its BLAS is kept to one thread (evalplus sets OMP_NUM_THREADS=1 too).
    import os

    for key in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[key] = "1"
    if "numpy" in P["code"]:
        # Loaded before the guard (its import reads files and the working directory), as in evalplus's
        # process, where numpy is already imported when the candidate runs.
        try:
            import numpy  # noqa: F401
        except ImportError:
            pass


def populora_run(payload):
    """Run one program on one phase's inputs; return the JSON text of what happened (outputs, no verdict)."""
    P = _json.loads(payload)
    res = {"status": "pass", "times": [], "index": None, "detail": ""}
    texts = []
    inputs = P["inputs"]
    if P["dataset"] == "mbpp":
        inputs = mbpp_inputs(P["task"], inputs)
    trusted = P["trusted"]
    code, entry = P["code"], P["entry_point"]
    limits, budget = P["limits"], P["budget"]
    _prepare(P)
    if not trusted:
        reliability_guard(code)
    # The phase budget counts the program's own time (definition and calls), not our encoding of outputs.
    spent = 0.0
    start = _perf()
    g = {}
    try:
        with _quiet():
            with _limit(budget):
                exec(code, g)
        fn = g[entry]
        spent = _perf() - start
    except _Timeout:
        res.update(status="timeout", detail="timeout while defining the solution")
        return _finish(res, texts)
    except BaseException as e:
        res.update(status="fail", detail=f"{_type(e).__name__}: {str(e)[:200]}")
        return _finish(res, texts)
    size = 0
    for i, inp in enumerate(inputs):
        left = budget - spent
        if left <= 0:
            res.update(status="timeout", index=i, detail=f"input {i}: phase budget {budget:.1f}s exceeded")
            break
        lim = left if limits is None else min(limits[i], left)
        if trusted:
            import copy

            inp = copy.deepcopy(inp)  # evalplus's trusted_exec
        try:
            with _quiet():
                with _limit(lim):
                    t0 = _perf()
                    out = fn(*inp)
                    dt = _perf() - t0
            spent += dt
            enc = digest(out) if _too_many_nodes(out) else encode(out)
        except _Timeout:
            why = (
                f"time limit {lim:.3f}s"
                if limits is None or lim == limits[i]
                else f"phase budget {budget:.1f}s"
            )
            res.update(status="timeout", index=i, detail=f"input {i}: {why}")
            break
        except BaseException as e:
            res.update(status="fail", index=i, detail=f"input {i}: {_type(e).__name__}: {str(e)[:200]}")
            break
        text = _json.dumps(enc)
        if _len(text) > BIG_TEXT and not (_type(enc) is dict and "h" in enc):
            text = _json.dumps(digest(out))
        size += _len(text)
        if size > MAX_ENCODED_CHARS:
            res.update(status="fail", index=i, detail=f"input {i}: outputs larger than {size} characters")
            break
        texts.append(text)
        res["times"].append(dt)
    return _finish(res, texts)


def _finish(res, texts):
    # The outputs are already JSON text: splice them in rather than encode them twice.
    return _json.dumps(res)[:-1] + ', "outputs": [' + ", ".join(texts) + "]}"
