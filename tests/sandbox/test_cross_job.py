"""Issue 29: a job sees nothing of any other job, by any means (frames, the garbage collector, a ctypes scan of
its whole address space), on the real sandbox.

Each earlier job plants unique random markers in its program text, its call text and its result. The markers
share a prefix (`QZMK`) that the spying job never holds as one string: it searches memory with a regular
expression whose source (`Q[Z]MK`) does not contain the prefix, so it cannot find its own needle.
"""

from __future__ import annotations

import ast
import os

import pytest

from populora.sandbox import Limits, Sandbox


def _marker() -> str:
    return "QZMK" + os.urandom(12).hex()


def _planting_job(prog_m: str, call_m: str, result_m: str) -> tuple[str, str]:
    """A job whose program text holds `prog_m`, whose call text holds `call_m`, and whose value is `result_m`
    (built at run time, so the result marker appears in no text the caller sent)."""
    tail = result_m[4:]
    program = f"KEEP = {prog_m!r}\ndef f(x):\n    return 'QZ' + 'MK' + bytes.fromhex({tail.encode().hex()!r}).decode()\n"
    return program, f"f({call_m!r})"


#: Walks every frame up from the job's own, every object the garbage collector tracks and every object that
#: refers to the job's own module, and returns every marker-like string it can see (other than its own).
SPY_PYTHON = r"""
import sys, gc, re
PAT = re.compile('Q[Z]MK[0-9a-f]{24}')
def _strings(obj, out, depth=0):
    if depth > 4:
        return
    t = type(obj)
    if t is str:
        out.update(PAT.findall(obj))
    elif t is bytes:
        out.update(m.decode() for m in re.findall(b'Q[Z]MK[0-9a-f]{24}', obj))
    elif t in (list, tuple, set, frozenset):
        for x in list(obj)[:10000]:
            _strings(x, out, depth + 1)
    elif t is dict:
        for k, v in list(obj.items())[:10000]:
            _strings(k, out, depth + 1)
            _strings(v, out, depth + 1)
def spy():
    found = set()
    f = sys._getframe()
    while f is not None:
        _strings(dict(f.f_locals), found)
        _strings(dict(f.f_globals), found)
        _strings(f.f_code.co_consts, found)
        f = f.f_back
    for o in gc.get_objects():
        _strings(o, found)
    for o in gc.get_referrers(sys.modules['__main__'].__dict__):
        _strings(o, found)
    for mod in list(sys.modules.values()):
        _strings(getattr(mod, '__dict__', {}), found)
    return sorted(found)
"""

#: Reads every readable, writable mapping of its own address space with ctypes (the heap, anonymous memory,
#: the stack, the data of every library) and returns every marker-like string in it.
SPY_CTYPES = r"""
import ctypes, re
BPAT = re.compile(b'Q[Z]MK([0-9a-f]{24})')
def spy():
    found, regions = set(), []
    with open('/proc/self/maps') as fh:
        for line in fh:
            parts = line.split()
            lo, hi = (int(x, 16) for x in parts[0].split('-'))
            name = parts[5] if len(parts) > 5 else ''
            if parts[1].startswith('rw') and name not in ('[vvar]', '[vsyscall]', '[vvar_vclock]'):
                regions.append((lo, hi))
    scanned = 0
    for lo, hi in regions:
        for a in range(lo, hi, 1 << 22):
            chunk = ctypes.string_at(a, min(1 << 22, hi - a))
            scanned += len(chunk)
            for m in BPAT.finditer(chunk):
                found.add('QZMK' + m.group(1).decode())
            del chunk
    return scanned, sorted(found)
"""


@pytest.fixture(scope="module")
def one_worker():
    with Sandbox(
        workers=1,
        limits=Limits(timeout_s=10, memory_mb=512, max_output_chars=100_000),
        preload=("ctypes", "gc", "re"),
    ) as sb:
        yield sb


def _plant_then_spy(sb: Sandbox, spy: str) -> tuple[list[str], object]:
    markers = [_marker() for _ in range(3)]
    planted = sb.run(*_planting_job(*markers))
    assert planted.status == "ok" and planted.value_repr == repr(markers[2]), planted
    out = sb.run(spy, "spy()")
    assert out.status == "ok", out
    return markers, ast.literal_eval(out.value_repr)


def test_ctypes_is_usable_in_a_job(one_worker: Sandbox) -> None:
    """The premise of the heap scan: a job can import ctypes and read its own memory."""
    out = one_worker.run("import ctypes\n", "ctypes.string_at(id(b'abc') + 32, 3)")
    assert (out.status, out.value_repr) == ("ok", "b'abc'"), out


def test_frames_and_the_collector_show_nothing_of_an_earlier_job(one_worker: Sandbox) -> None:
    for _ in range(2):  # the second round spies after a job that itself spied
        markers, found = _plant_then_spy(one_worker, SPY_PYTHON)
        assert not set(markers) & set(found), f"earlier job's markers reachable: {found}"


def test_a_ctypes_scan_of_the_whole_address_space_finds_nothing_of_an_earlier_job(
    one_worker: Sandbox,
) -> None:
    markers, (scanned, found) = _plant_then_spy(one_worker, SPY_CTYPES)
    assert scanned > 1 << 20  # it did read its heap (megabytes of it)
    assert not set(markers) & set(found), f"earlier job's markers in memory: {found}"


def test_the_spy_itself_works_on_its_own_job(one_worker: Sandbox) -> None:
    """Control: the same scans do find markers of the job running them, so a clean result above means
    something."""
    mine = _marker()
    prog = SPY_CTYPES + f"MINE = {mine!r}\n"
    out = one_worker.run(prog, "spy()")
    assert mine in ast.literal_eval(out.value_repr)[1], out
    out = one_worker.run(SPY_PYTHON + f"MINE = {mine!r}\n", "spy()")
    assert mine in ast.literal_eval(out.value_repr), out


COPIER = (
    SPY_PYTHON.replace("def spy():", "def spy_py():")
    + SPY_CTYPES.replace("def spy():", "def spy_mem():")
    + "def f(x):\n    seen = set(spy_py()) | set(spy_mem()[1])\n    return sorted(seen)[0] if seen else None\n"
)
HONEST = "import os\ndef f(x):\n    return 'QZ' + 'MK' + os.urandom(12).hex()\n"


@pytest.mark.parametrize("workers", [1, 2])
def test_a_code_f_copier_cannot_produce_an_earlier_jobs_answer(workers: int) -> None:
    """The reward hack of the issue: a copier scored right after an honest job answers with the honest job's
    (unguessable) result. It must never get it, whichever worker each lands on."""
    with Sandbox(
        workers=workers, limits=Limits(timeout_s=10, memory_mb=512), preload=("ctypes", "gc", "re", "os")
    ) as sb:
        outs = sb.run_many([(HONEST, "f(0)"), (COPIER, "f(0)")] * 4)
    honest = {o.value_repr for o in outs[0::2]}
    copied = [o.value_repr for o in outs[1::2] if o.value_repr in honest]
    assert not copied, f"copiers reproduced honest answers: {copied}"
    assert all(o.status == "ok" for o in outs), outs
