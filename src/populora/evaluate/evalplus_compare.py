"""EvalPlus's verdict on one phase, computed in the grading process from outputs a candidate's job returned.

The rules are evalplus 0.3.1's ``unsafe_execute`` (``evalplus/eval/__init__.py``), applied per input in order:

- ``out == exp``, then the special oracles: MBPP ``are_equivalent`` (anything), ``sum_div`` (or 0),
  ``surface_Area`` (``|out - oracle| <= atol``), ``digit_distance_nums`` (the oracle), the set-equality tasks
  (``set(out) == set(exp)``) and the not-None tasks (the expected output is ``out is not None``);
- HumanEval ``find_zero``: ``|poly(xs, out)| <= atol``;
- once an expected output is a float (or a non-empty list/tuple of floats) the tolerance becomes ``1e-6``
  and stays so for the later inputs; when the output is not exactly equal and the tolerance is not 0: the
  same type, the same length for a list/tuple, and ``numpy.allclose(out, exp, rtol=1e-7, atol)``.

Where evalplus 0.3.1 is wrong we keep our verdict (the agreement test lists these as the only differences):

- ``find_zero``: evalplus never marks a passing input as passed, so it fails *every* HumanEval/32 solution,
  the canonical one included; we pass an input whose root is within ``atol``, as later evalplus releases do;
- broadcasting: ``numpy.allclose`` broadcasts, so a list holding n copies of a float list passes against that
  list; we require the output to have the expected shape.

Candidate outputs that are not plain data arrive as `Opaque` (equal to nothing, "not None"); numpy scalars
arrive as `NumpyFloat`/`NumpyInt`, which compare like their value but are not of type ``float``/``int``,
exactly as the numpy objects behave in evalplus's comparison.
"""

from __future__ import annotations

import math
import reprlib
from typing import Any

from populora.evaluate._harness import Opaque

SET_EQ_TASKS = frozenset(
    {
        "similar_elements",
        "find_char_long",
        "common_in_nested_lists",
        "extract_singly",
        "larg_nnum",
        "intersection_array",
        "find_dissimilar",
        "Diff",
    }
)
NOT_NONE_TASKS = frozenset({"check_str", "text_match_three", "text_starta_endb"})


def surface_area_oracle(base_edge, height):
    slant = math.sqrt((base_edge / 2) ** 2 + height**2)
    return round(base_edge**2 + 4 * (base_edge * slant) / 2)


def digit_distance_oracle(a, b):
    sa, sb = str(a), str(b)
    n = max(len(sa), len(sb))
    return sum(abs(int(x) - int(y)) for x, y in zip(sa.zfill(n), sb.zfill(n), strict=True))


def poly(xs, x):
    return sum(c * math.pow(x, i) for i, c in enumerate(xs))


def is_floats(x: Any) -> bool:
    if isinstance(x, float):
        return True
    if isinstance(x, list | tuple) and x:
        return all(isinstance(i, float) for i in x)
    return False


def allclose(out: Any, exp: Any, rtol: float, atol: float) -> bool:
    """numpy.allclose without broadcasting (see the module docstring)."""
    import numpy as np

    if np.shape(out) != np.shape(exp):
        return False
    return bool(np.allclose(out, exp, rtol=rtol, atol=atol))


def check_output(dataset: str, entry: str, atol: float, inp: list, out: Any, exp: Any) -> tuple[bool, float]:
    """(this input passes, the tolerance for the next inputs). Never raises: an error is a failed input."""
    try:
        exact = out == exp
        if dataset == "mbpp":
            if entry == "are_equivalent":
                exact = True
            elif entry == "sum_div":
                exact = exact or out == 0
            elif entry == "surface_Area":
                exact = exact or abs(out - surface_area_oracle(*inp)) <= atol
            elif entry == "digit_distance_nums":
                exact = exact or out == digit_distance_oracle(*inp)
            elif entry in SET_EQ_TASKS:
                exact = set(out) == set(exp)
            elif entry in NOT_NONE_TASKS:
                exact = out == exp if isinstance(out, bool) else exp == (out is not None)
        if dataset == "humaneval" and entry == "find_zero":
            return bool(abs(poly(*inp, out)) <= atol), atol
        if atol == 0 and is_floats(exp):
            atol = 1e-6
        if not exact and atol != 0:
            ok = type(out) is type(exp)
            if ok and isinstance(exp, list | tuple):
                ok = len(out) == len(exp)
            return bool(ok and allclose(out, exp, 1e-07, atol)), atol
        return bool(exact), atol
    except Exception:  # noqa: BLE001 - e.g. set() of an Opaque, abs() of a str: the input fails
        return False, atol


class _Shown(reprlib.Repr):
    """reprlib with ints that never raise: ``repr`` of an int above 4,300 digits raises ValueError (Python's
    int/str conversion limit), and one such wrong output used to abort the whole evaluation (issue 29)."""

    def __init__(self) -> None:
        super().__init__()
        self.maxstring = self.maxother = 120
        self.maxlong = 60

    def repr_int(self, x, level):
        if x.bit_length() > 3000:  # about 900 digits: too long to show anyway, and never converted
            return f"<int of about {int(x.bit_length() * math.log10(2)) + 1} digits>"
        return super().repr_int(int(x), level)

    def repr_instance(self, x, level):
        if isinstance(x, int) and not isinstance(x, bool):  # int subclasses such as NumpyInt
            return self.repr_int(x, level)
        return super().repr_instance(x, level)  # reprlib shows a failing repr by type and address


_SHOWN = _Shown()


def show(value: Any, limit: int = 120) -> str:
    """A short, bounded description of a candidate's output for a verdict's detail; never raises."""
    if isinstance(value, Opaque):
        return f"a {value.type_name} object"
    try:
        text = _SHOWN.repr(value)
    except Exception:  # noqa: BLE001 - the description must never fail the grading
        text = f"<{type(value).__name__} object>"
    return text[:limit]


def judge_phase(
    dataset: str, entry: str, atol: float, inputs: list, expected: list, run: dict
) -> tuple[str, int, str]:
    """(status, inputs passed, detail) of one phase, from the candidate job's decoded `run`.

    ``run`` has ``status`` (how the job ended), ``outputs`` (one per input it finished), ``detail``."""
    outputs = run["outputs"]
    for i, out in enumerate(outputs):
        if i >= len(expected):
            break
        ok, atol = check_output(dataset, entry, atol, inputs[i], out, expected[i])
        if not ok:
            return "fail", i, f"input {i}: wrong output {show(out)}"
    if run["status"] != "pass":
        return run["status"], len(outputs), run.get("detail", "")
    if len(outputs) != len(expected):
        return "fail", len(outputs), f"{len(outputs)} outputs for {len(expected)} inputs"
    return "pass", len(outputs), ""
