"""Parsing and comparing value reprs outside the sandbox (never with eval)."""

from __future__ import annotations

import math

import pytest

from populora.sandbox.values import parse_value, same_value, strict_equal


def test_parse_value_accepts_what_repr_writes() -> None:
    assert parse_value("[1, 'a', (2.5, None), {3: True}]") == [1, "a", (2.5, None), {3: True}]
    assert parse_value("set()") == set() and parse_value("frozenset({1, 2})") == frozenset({1, 2})
    got = parse_value("[inf, -inf, nan, (1+2j), Ellipsis]")
    assert got[0] == math.inf and got[1] == -math.inf and math.isnan(got[2]) and got[3] == 1 + 2j
    assert got[4] is ...
    assert parse_value("(inf+1j)") == complex(math.inf, 1)


@pytest.mark.parametrize(
    "text",
    [
        "<__main__.A object at 0x7f>",
        "__import__('os').system('id')",
        "f(1)",
        "Counter({'a': 1})",
        "[1, 2",
        "frozenset([1])",
        "open('x')",
        "dict(a=1)",
    ],
)
def test_parse_value_rejects_non_literals(text: str) -> None:
    with pytest.raises(ValueError, match="not a plain-data literal"):
        parse_value(text)


def test_strict_equal_distinguishes_types() -> None:
    assert strict_equal([1, (2, "x")], [1, (2, "x")])
    assert not strict_equal(1, True) and not strict_equal(1, 1.0) and not strict_equal([1], (1,))
    assert not strict_equal({1: "a"}, {True: "a"}) and strict_equal({1: "a", 2: "b"}, {2: "b", 1: "a"})
    assert strict_equal({1, 2}, {2, 1}) and not strict_equal({1}, {True}) and not strict_equal({1}, {1, 2})
    assert strict_equal(math.nan, math.nan) and not strict_equal(0.1 + 0.2, 0.3)


def test_same_value_compares_reprs() -> None:
    assert same_value("{'b': 2, 'a': 1}", "{'a': 1, 'b': 2}")
    assert same_value("{'x', 'y'}", "{'y', 'x'}")
    assert not same_value("1", "True") and not same_value("1", "1.0")
    assert not same_value("<A>", "<A>")  # equal text, but not a value we can check
    assert not same_value(None, "1") and same_value("nan", "nan")
