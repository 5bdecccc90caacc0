"""Our EvalPlus grader against the official ``evalplus`` 0.3.1 on the same samples (test and `bench eval`).

`samples` builds, for each chosen HumanEval+/MBPP+ task: the canonical solution, a wrong one, one that is
right on the base inputs only (a lookup table of the base outputs), and pathological ones from `KINDS`,
rotated over the tasks so each kind meets several. `grade_official` grades them the way
``evalplus.evaluate`` does (``trusted_exec`` for the expected outputs in this process, then
``untrusted_check`` per phase, each in a forked process), `grade_ours` with `CodeGrader`.

`KNOWN_DIFFERENCES` lists the kinds where the two verdicts are expected to differ, each with the reason;
every other sample must agree. A time limit is not a verdict: on a loaded machine evalplus's 1 s floor can
cut a correct program short (its per-test timeout reads as a plain failure), so `settle` grades every
unexplained disagreement again, with both graders, at `GENEROUS` limits; when the verdicts then agree the
sample is listed under ``timeouts`` (which grader was cut short), not as a disagreement. evalplus is imported only here and only when asked for, so the package does
not depend on it (``pip install --no-deps evalplus==0.3.1``; its ``evalplus.data`` package imports
``datasets``, ``wget``, ``tempdir`` and ``appdirs`` for downloads, so its one input-conversion function is
read from its source instead of imported).
"""

from __future__ import annotations

import time
import types
from collections.abc import Sequence
from dataclasses import dataclass

from populora.evaluate.data import Item, load_benchmark

#: Pathological kinds: name -> how to write the candidate from the canonical program (see `_pathological`).
KINDS = (
    "always_eq",
    "opens_file",
    "getcwd",
    "stdlib_imports",
    "numpy",
    "infinite_loop",
    "calls_exit",
    "prints",
    "patches_builtin",
    "thread",
    "huge_alloc",
    "tuple_result",
    "numpy_scalar",
    "mutates_input",
)

#: kind -> why our verdict differs from evalplus 0.3.1's (ours is the intended one).
KNOWN_DIFFERENCES = {
    "always_eq": "evalplus compares inside the candidate's process, so an output whose __eq__ always returns "
    "True passes there; our comparison runs outside on plain data and fails it",
    "find_zero": "evalplus 0.3.1 never marks a passing find_zero input as passed (HumanEval/32 always fails)",
}
#: Kinds that need threads, which the sandbox's evaluation profile grants where seccomp works (reported by
#: `sandbox_allows_threads`; elsewhere these samples are expected to differ).
NEEDS_THREADS = ("thread",)


@dataclass(frozen=True)
class Sample:
    item: Item
    kind: str
    code: str


def _entry(item: Item) -> str:
    return item.meta["entry_point"]


def _wrap(item: Item, body: str, prelude: str = "") -> str:
    """The canonical program with the entry point renamed, and a new entry point written by ``body``."""
    e = _entry(item)
    canon = item.gold.replace(f"def {e}(", f"def _canon_{e}(")
    return f"{prelude}{canon}\n\ndef {e}(*args):\n{body}\n"


def _pathological(item: Item, kind: str) -> str:
    e = _entry(item)
    call = f"_canon_{e}(*args)"
    bodies = {
        "always_eq": "    class _Eq:\n        def __eq__(self, other):\n            return True\n"
        "        __hash__ = None\n    return _Eq()",
        "opens_file": f"    open('scratch.txt', 'w').write('x')\n    return {call}",
        "getcwd": f"    import os\n    os.getcwd()\n    return {call}",
        "stdlib_imports": "    import csv, pathlib, glob, fnmatch, html, ipaddress, xml.etree.ElementTree\n"
        f"    return {call}",
        "numpy": f"    import numpy as np\n    np.zeros(2).sum()\n    return {call}",
        "infinite_loop": "    while True:\n        pass",
        "calls_exit": f"    exit(0)\n    return {call}",
        "prints": f"    print('noise', args)\n    return {call}",
        "patches_builtin": "    import builtins\n    builtins.len = lambda x: 0\n    builtins.sorted = lambda x, **k: x\n"
        "    return None",
        "thread": "    import threading\n    box = []\n    t = threading.Thread(target=lambda: box.append("
        f"{call}))\n    t.start()\n    t.join()\n    return box[0]",
        "huge_alloc": "    x = bytearray(8 * 1024 ** 3)\n    return len(x)",
        "tuple_result": f"    r = {call}\n    return tuple(r) if isinstance(r, list) else r",
        "numpy_scalar": f"    import numpy as np\n    r = {call}\n    return np.float64(r) if type(r) is float else r",
        "mutates_input": f"    r = {call}\n    for a in args:\n        if isinstance(a, list):\n            a.clear()\n"
        "    return r",
    }
    return _wrap(item, bodies[kind])


def _base_only(item: Item, base_outputs: list) -> str | None:
    """A lookup table of the base inputs' outputs: right on base, wrong (None) on the rest."""
    table = list(zip(item.meta.get("_base_args", []), base_outputs, strict=False))
    try:
        text = repr(table)
        compile(text, "<table>", "eval")
        eval(text, {"inf": float("inf"), "nan": float("nan")})  # noqa: S307 - our own repr of data
    except Exception:  # noqa: BLE001 - outputs that are not literals (regex matches): no such sample
        return None
    e = _entry(item)
    return (
        f"inf, nan = float('inf'), float('nan')\n_T = {text}\n\n"
        f"def {e}(*args):\n    for a, o in _T:\n        if list(a) == list(args):\n            return o\n"
        "    return None\n"
    )


def choose_tasks(n_humaneval: int = 22, n_mbpp: int = 18, data_dir=None) -> list[Item]:
    """The first tasks of each set in file order, plus HumanEval/32 (``find_zero``, a documented evalplus bug)."""
    he = load_benchmark("humaneval+", data_dir)
    chosen = he[:n_humaneval] + [it for it in he[n_humaneval:] if it.id == "HumanEval/32"]
    return chosen + load_benchmark("mbpp+", data_dir, n_mbpp)


def samples(items: Sequence[Item], per_task_kinds: int = 2) -> list[Sample]:
    """canonical, wrong, base-only and `per_task_kinds` rotating pathological samples per task."""
    ev = _official()
    out: list[Sample] = []
    k = 0
    for item in items:
        e = _entry(item)
        out.append(Sample(item, "canonical", item.gold))
        out.append(Sample(item, "wrong", f"def {e}(*args):\n    return None\n"))
        inputs = _inputs(item, "base")
        try:
            base_out = ev.trusted_exec(item.gold, inputs, e)
        except Exception:  # noqa: BLE001
            base_out = None
        if base_out is not None:
            code = _base_only(_with_args(item, inputs), base_out)
            if code is not None:
                out.append(Sample(item, "base_only", code))
        for _ in range(per_task_kinds):
            out.append(Sample(item, KINDS[k % len(KINDS)], _pathological(item, KINDS[k % len(KINDS)])))
            k += 1
    return out


def _with_args(item: Item, inputs: list) -> Item:
    meta = dict(item.meta)
    meta["_base_args"] = [tuple(a) for a in inputs]
    return Item(item.benchmark, item.id, item.kind, item.question, item.gold, meta)


# ----------------------------------------------------------------------------------- official evalplus
_OFFICIAL: types.SimpleNamespace | None = None


def _official() -> types.SimpleNamespace:
    global _OFFICIAL
    if _OFFICIAL is not None:
        return _OFFICIAL
    import ast
    import importlib.util
    from pathlib import Path

    from evalplus.eval import untrusted_check
    from evalplus.eval._special_oracle import MBPP_OUTPUT_NOT_NONE_TASKS
    from evalplus.gen.util import trusted_exec

    # evalplus.data imports datasets/wget/tempdir/appdirs for downloads; take only the one function we need
    # from its source instead of importing the package.
    spec = importlib.util.find_spec("evalplus")
    src_path = Path(spec.origin).parent / "data" / "mbpp.py"
    tree = ast.parse(src_path.read_text(encoding="utf-8"))
    fn = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "mbpp_deserialize_inputs"]
    ns: dict = {}
    exec(compile(ast.Module(body=fn, type_ignores=[]), str(src_path), "exec"), ns)  # noqa: S102
    _OFFICIAL = types.SimpleNamespace(
        untrusted_check=untrusted_check,
        trusted_exec=trusted_exec,
        mbpp_deserialize_inputs=ns["mbpp_deserialize_inputs"],
        not_none=MBPP_OUTPUT_NOT_NONE_TASKS,
    )
    return _OFFICIAL


def _inputs(item: Item, phase: str) -> list:
    raw = item.meta["base_input" if phase == "base" else "plus_input"]
    if item.meta["dataset"] == "mbpp":
        return _official().mbpp_deserialize_inputs(item.id, raw)
    return raw


def official_ground_truth(items: Sequence[Item]) -> dict[tuple[str, str], tuple[list, list]]:
    """evalplus.evaluate's ``get_groundtruth``: (outputs, times) per (task, phase)."""
    ev = _official()
    gt = {}
    for item in items:
        not_none = item.meta["dataset"] == "mbpp" and _entry(item) in ev.not_none
        for phase in ("base", "plus"):
            gt[(item.id, phase)] = ev.trusted_exec(
                item.gold, _inputs(item, phase), _entry(item), record_time=True, output_not_none=not_none
            )
    return gt


def grade_official(
    todo: Sequence[Sample], gt: dict, min_time_limit: float = 1.0, factor: float = 4.0, workers: int = 2
) -> list[tuple[bool, bool]]:
    """evalplus.evaluate's ``check_correctness`` per sample (base, then plus when base passed: the verdict pair
    cannot change otherwise), ``workers`` samples at a time."""
    import concurrent.futures as cf

    def one(s: Sample) -> tuple[bool, bool]:
        ev = _official()
        status = {}
        for phase in ("base", "plus"):
            if phase == "plus" and status["base"] != "pass":
                status["plus"] = "skipped"  # the verdict pair is already (False, False)
                break
            outs, times = gt[(s.item.id, phase)]
            status[phase], _ = ev.untrusted_check(
                s.item.meta["dataset"],
                s.code,
                _inputs(s.item, phase),
                _entry(s.item),
                expected=outs,
                atol=s.item.meta.get("atol", 0) or 0,
                ref_time=times,
                fast_check=True,
                min_time_limit=min_time_limit,
                gt_time_limit_factor=factor,
            )
        return status["base"] == "pass", status["base"] == "pass" and status["plus"] == "pass"

    with cf.ThreadPoolExecutor(workers) as pool:  # each check forks its own process, as evalplus does
        return list(pool.map(one, todo))


def grade_ours(todo: Sequence[Sample], min_time_limit: float = 1.0, factor: float = 4.0, workers: int = 2):
    from populora.evaluate.code_grader import CodeGrader, CodeLimits

    limits = CodeLimits(min_time_limit=min_time_limit, gt_time_limit_factor=factor)
    got = CodeGrader(workers, limits).grade([(s.item, s.code) for s in todo])
    return [(bool(r.base_passed), r.passed) for r in got]


#: (min_time_limit s, factor x canonical time) for the second grading of a disagreement: far above any
#: correct program's time here, so what remains is a verdict.
GENEROUS = (20.0, 50.0)


def settle(s: Sample, gt: dict, official: tuple, ours: tuple) -> tuple[tuple, tuple, str | None]:
    """Grade a disagreeing sample again with both graders at `GENEROUS` limits, one at a time.

    Returns (evalplus verdict, our verdict, who_timed_out): the verdicts are the generous ones, and
    ``who_timed_out`` names the grader whose first verdict the time limit made ("evalplus", "populora" or
    "both") when the generous verdicts agree, else None (a real difference in verdicts)."""
    lo, factor = GENEROUS
    official2 = grade_official([s], gt, min_time_limit=lo, factor=factor, workers=1)[0]
    ours2 = grade_ours([s], min_time_limit=lo, factor=factor, workers=1)[0]
    if official2 != ours2:
        return official2, ours2, None
    who = [
        name
        for name, first, second in (("evalplus", official, official2), ("populora", ours, ours2))
        if first != second
    ]
    return official2, ours2, "both" if len(who) == 2 else who[0]


def expected_difference(s: Sample, threads_ok: bool) -> str | None:
    """Why this sample's verdicts may differ (a documented evalplus bug or a missing sandbox capability)."""
    if s.kind in KNOWN_DIFFERENCES:
        return KNOWN_DIFFERENCES[s.kind]
    if _entry(s.item) == "find_zero" and s.item.meta["dataset"] == "humaneval":
        return KNOWN_DIFFERENCES["find_zero"]
    if s.kind in NEEDS_THREADS and not threads_ok:
        return "the sandbox's evaluation profile cannot grant threads on this machine (no seccomp filter)"
    return None


def sandbox_allows_threads() -> bool:
    from populora.sandbox import LAZY_MODULES, Sandbox

    prog = "import threading\ndef f():\n    t = threading.Thread(target=lambda: None)\n    t.start()\n    t.join()\n"
    with Sandbox(workers=1, lazy=LAZY_MODULES, profile="eval") as sb:
        return sb.run(prog + "    return 1\n", "f()").status == "ok"


def compare(n_humaneval: int = 22, n_mbpp: int = 18, workers: int = 2, data_dir=None) -> dict:
    """Grade one sample set with both; {rows, disagreements (unexpected), expected, timings}.

    Each verdict is the pair (base tests pass, base and plus pass)."""
    items = choose_tasks(n_humaneval, n_mbpp, data_dir)
    todo = samples(items)
    t0 = time.perf_counter()
    gt = official_ground_truth(items)
    t_gt = time.perf_counter() - t0
    official = grade_official(todo, gt, workers=workers)
    t_official = time.perf_counter() - t0
    t1 = time.perf_counter()
    ours = grade_ours(todo, workers=workers)
    t_ours = time.perf_counter() - t1
    threads_ok = sandbox_allows_threads()
    rows, unexpected, expected, timeouts = [], [], [], []
    for s, a, b in zip(todo, official, ours, strict=True):
        row = {"task": s.item.id, "kind": s.kind, "evalplus": list(a), "populora": list(b)}
        why = expected_difference(s, threads_ok) if a != b else None
        if a != b and why is None:
            a2, b2, who = settle(s, gt, a, b)
            if who is not None:  # a time limit made the first verdict: the generous ones agree
                timeouts.append({**row, "timed_out": who, "verdict": list(a2)})
                row = {**row, "evalplus": list(a2), "populora": list(b2)}
        rows.append(row)
        if list(row["evalplus"]) != list(row["populora"]):
            (expected if why else unexpected).append({**row, "why": why} if why else row)
    return {
        "n_tasks": len(items),
        "n_samples": len(todo),
        "rows": rows,
        "disagreements": unexpected,
        "expected_differences": expected,
        "timeouts": timeouts,
        "threads_allowed": threads_ok,
        "seconds": {"evalplus": t_official, "evalplus_ground_truth": t_gt, "populora": t_ours},
    }
