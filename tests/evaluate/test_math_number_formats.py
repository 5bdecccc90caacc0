"""Every gold format in the shipped math sets verifies against equivalent spellings, and not a nearby value.

Golds are classified by how they write their number (integer, decimal, trailing-dot decimal, e-notation,
``a\\times10^{b}``, percentage, numeric fraction). For each set and format, up to `PER_CLASS` golds are
checked: the gold must verify against itself written in >= 2 other equivalent forms, and must not verify
against a nearby wrong value. Before the fix, e-notation golds (58 of Minerva's 272) were read with ``e`` as
Euler's number, ``-1./3`` as -1 and ``62.5%`` as text.
"""

from __future__ import annotations

import re
from decimal import Decimal

import pytest

from populora.evaluate.data import MATH_BENCHMARKS, load_benchmark
from populora.evaluate.math_grader import numbers_as_decimals, verify_answer

PER_CLASS = 12
PLAIN = re.compile(r"-?\d+(?:\.\d+)?")
FRAC = re.compile(r"(-?)\\d?frac\{(\d+)\}\{(\d+)\}")


def fmt_class(gold: str) -> str | None:
    g = gold.strip()
    if re.fullmatch(r"-?\d+", g):
        return "integer"
    if re.fullmatch(r"-?\d*\.\d+", g):
        return "decimal"
    if re.fullmatch(r"-?\d+(?:\.\d*)?[eE][-+]?\d+", g):
        return "e-notation"
    if re.fullmatch(r"-?\d+(?:\.\d*)?\s*\\times\s*10\^\{?-?\d+\}?", g):
        return "times-ten"
    if re.fullmatch(r"-?\d+(?:\.\d+)?\s*\\?%", g):
        return "percent"
    if FRAC.fullmatch(g):
        return "fraction"
    if re.search(r"\d\.(?![\d])", g) and re.fullmatch(r"[-\d./ ]+", g):
        return "trailing-dot"
    return None


def sci(v: Decimal) -> tuple[str, str]:
    """(mantissa, exponent) with an exact mantissa: 4500 -> ("4.5", "3")."""
    sign, digits, exp = v.normalize().as_tuple()
    ds = "".join(map(str, digits)) or "0"
    e = len(ds) - 1 + exp
    mant = ds[0] + ("." + ds[1:] if len(ds) > 1 else "")
    return ("-" if sign else "") + mant, str(e)


def forms(gold: str, cls: str) -> tuple[list[str], str]:
    """(equivalent spellings, a nearby wrong value) of one gold."""
    if cls == "fraction":
        sgn, a, b = FRAC.fullmatch(gold.strip()).groups()
        return [f"{sgn}{a}/{b}", f"{sgn}\\dfrac{{{a}}}{{{b}}}"], f"{sgn}\\frac{{{int(a) + 1}}}{{{b}}}"
    if cls == "trailing-dot":
        plain = numbers_as_decimals(gold)
        return [plain, plain.replace("/", " / ")], re.sub(
            r"\d+", lambda m: str(int(m.group()) + 1), plain, count=1
        )
    v = Decimal(numbers_as_decimals(gold))
    m, e = sci(v)
    out = [f"{m}e{e}", f"{m}\\times10^{{{e}}}", f"{m} \\cdot 10^{e}"]
    if abs(v.adjusted()) < 12:
        out.append(format(v.normalize(), "f"))
    if cls == "percent":
        out = [format(v.normalize(), "f"), format(v.normalize(), "f") + "\\%", f"{m}e{e}"]
    out = [f for f in out if f.replace(" ", "") != gold.replace(" ", "")]
    wrong = v + 1 if v == v.to_integral_value() and abs(v) < 10**6 else v * Decimal("1.05")
    return out, format(wrong.normalize(), "f") if abs(wrong.adjusted()) < 12 else "{}e{}".format(*sci(wrong))


def cases():
    for bench in MATH_BENCHMARKS:
        seen: dict[str, int] = {}
        for it in load_benchmark(bench):
            cls = fmt_class(it.gold)
            if cls is None or seen.get(cls, 0) >= PER_CLASS:
                continue
            seen[cls] = seen.get(cls, 0) + 1
            yield bench, cls, it.gold


CASES = list(cases())


def test_every_number_format_is_covered():
    found = {cls for _b, cls, _g in CASES}
    assert {"integer", "decimal", "e-notation", "percent", "fraction", "trailing-dot"} <= found


@pytest.mark.parametrize(("bench", "cls", "gold"), CASES, ids=[f"{b}-{c}-{g}" for b, c, g in CASES])
def test_gold_matches_equivalent_forms_and_not_a_near_value(bench, cls, gold):
    same, wrong = forms(gold, cls)
    assert len(same) >= 2
    for s in same:
        assert verify_answer(gold, s, exact=False), f"{gold!r} should equal {s!r}"
        assert verify_answer(s, gold, exact=False), f"{s!r} (as gold) should equal {gold!r}"
    assert not verify_answer(gold, wrong, exact=False), f"{gold!r} should differ from {wrong!r}"


@pytest.mark.parametrize(
    ("gold", "pred", "same"),
    [
        ("3e6", r"3\times10^{6}", True),
        ("3e6", "3000000", True),
        ("3e6", "6e3", False),
        ("-1./3", "-0.3333333", True),
        ("-1./3", "-1", False),
        ("62.5%", "62.5", True),
        ("4.5e33", r"4.5 \times 10^{33}", True),
        ("4.5e33", "4.5", False),
    ],
)
def test_reported_misreadings(gold, pred, same):
    assert verify_answer(gold, pred, exact=False) is same
