"""Scoring never raises on model output (issue 13 item 7); signed zeros under the strict comparison (item 8);
recursive-container reprs are not values (item 13)."""

from __future__ import annotations

import math

import pytest

import populora.tasks as T
from populora.sandbox.values import parse_value
from populora.tasks import Answer, FormatError, Problem
from populora.tasks.literals import LiteralError, parse_literal, render_call_args, strict_equal

HUGE_HEX = "0x" + "f" * 5000  # parses to an int with ~6000 decimal digits: repr() raises ValueError


def test_code_i_answer_whose_value_has_no_repr_is_wrong_not_a_crash():
    t = T.get("code_i")
    p = Problem("code_i", "def f(x):\n    return x", ("1",), ("1",))
    assert isinstance(t.parse_answer(f"```input\n{HUGE_HEX}\n```"), FormatError)
    # as raw text, as an Answer that skipped parsing, and next to a right answer: never raises, scores False
    assert t.score(p, [HUGE_HEX], None) == [False]
    assert t.score(p, [Answer(HUGE_HEX)], None) == [False]


def test_code_i_unscorable_answer_next_to_a_right_one(sandbox):
    t = T.get("code_i")
    p = Problem("code_i", "def f(x):\n    return x * 2", ("21",), ("42",))
    assert t.score(p, [Answer(HUGE_HEX), "21", f"[{HUGE_HEX}]"], sandbox) == [False, True, False]


def test_code_o_and_render_never_raise_on_huge_ints():
    t = T.get("code_o")
    p = Problem("code_o", "def f(x):\n    return x", ("1",), ("1",))
    assert t.score(p, [HUGE_HEX, Answer(HUGE_HEX), "1"], None) == [False, False, True]
    with pytest.raises(LiteralError):
        render_call_args((int(HUGE_HEX, 16),), {})


# ---- item 8: -0.0 vs 0.0 -----------------------------------------------------------------------------------
# Decision: the strict comparison is on the value repr prints, so signed zeros differ. A program can tell them
# apart (1 / x, math.copysign, str), and a code_o student who predicts `0.0` for an output `-0.0` mispredicted
# the printed output. Complex literals read as complex() reads repr, so every repr parses back to its value.


def test_signed_zeros_differ_under_the_strict_comparison():
    assert not strict_equal(-0.0, 0.0) and strict_equal(-0.0, -0.0) and strict_equal(0.0, 0.0)
    assert not strict_equal(complex(-0.0, -0.0), 0j) and not strict_equal(complex(0.0, -0.0), 0j)
    assert not strict_equal([-0.0], [0.0]) and not strict_equal({-0.0}, {0.0})
    assert strict_equal(parse_literal("-0.0"), -0.0) and not strict_equal(parse_literal("0.0"), -0.0)


@pytest.mark.parametrize(
    "value",
    [
        complex(-0.0, -0.0),
        complex(0.0, -0.0),
        complex(-0.0, 0.0),
        -5j,
        5j,
        0j,
        complex(0.0, -5.0),
        complex(-1.5, -2.0),
        1 + 2j,
    ],
)
def test_every_complex_repr_parses_back_to_its_value(value):
    got = parse_literal(repr(value))
    assert got == value
    assert math.copysign(1, got.real) == math.copysign(1, value.real)
    assert math.copysign(1, got.imag) == math.copysign(1, value.imag)
    assert strict_equal(got, value)


def test_code_o_scores_signed_zero_outputs_by_their_repr():
    t = T.get("code_o")
    p = Problem("code_o", "def f(x):\n    return -x", ("0.0",), ("-0.0",))
    assert t.score(p, ["-0.0", "0.0"], None) == [True, False]
    q = Problem("code_o", "def f(x):\n    return -x", ("0j",), ("(-0-0j)",))
    assert t.score(q, ["(-0-0j)", "0j", "-0j"], None) == [True, False, False]


# ---- item 13: parse_value('[[...]]') ------------------------------------------------------------------------


@pytest.mark.parametrize("text", ["[[...]]", "[1, [...]]", "{'a': {...}}", "..."])
def test_recursive_container_reprs_are_rejected(text):
    with pytest.raises(ValueError, match="recursive"):
        parse_value(text)


def test_ellipsis_written_by_repr_and_dots_in_strings_still_parse():
    assert parse_value("[Ellipsis]") == [...]
    assert parse_value("['...', b'...']") == ["...", b"..."]
