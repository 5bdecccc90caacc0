import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from populora.tasks.literals import (
    LiteralError,
    parse_call_args,
    parse_literal,
    render_call_args,
    strict_equal,
)


@pytest.mark.parametrize(
    "text,value",
    [
        ("1", 1),
        ("-2.5", -2.5),
        ("'a'", "a"),
        ("b'x'", b"x"),
        ("True", True),
        ("None", None),
        ("[1, (2, 3), {'a': {4}}]", [1, (2, 3), {"a": {4}}]),
        ("set()", set()),
        ("frozenset({1, 2})", frozenset({1, 2})),
        ("dict(a=1, b=[2])", {"a": 1, "b": [2]}),
        ("tuple([1, 2])", (1, 2)),
        ("(1+2j)", 1 + 2j),
        ("-0.0", -0.0),
        ("{\n 'x': 1,\n}", {"x": 1}),
    ],
)
def test_parse_literal_accepts_plain_data(text, value):
    assert strict_equal(parse_literal(text), value)


@pytest.mark.parametrize(
    "text",
    [
        "__import__('os').system('true')",
        "f(1)",
        "print(1)",
        "x",
        "[1] * 3",
        "'a' + 'b'",
        "lambda: 1",
        "{**{}}",
        "...",
        "nan",
        "float('nan')",
        "1e999",
        "[i for i in range(3)]",
        "set([[]])",
        "{[1]: 2}",
        "dict(**{'a': 1})",
        "set(1, 2)",
        "list(1)",
        "",
        "   ",
        "(",
        "1; 2",
        "\x00",
        "9" * 5000,
        "[" * 500 + "]" * 500,
        "open('/etc/passwd')",
        "0) or (True",
    ],
)
def test_parse_literal_rejects_everything_else(text):
    with pytest.raises(LiteralError):
        parse_literal(text)


def test_strict_equal_is_type_aware():
    assert not strict_equal(True, 1) and not strict_equal(1, True)
    assert not strict_equal(2.0, 2) and not strict_equal([1], (1,))
    assert not strict_equal({1: "a"}, {True: "a"}) and not strict_equal({1, 2}, frozenset({1, 2}))
    assert not strict_equal([1, True], [1, 1])
    assert strict_equal({3, 1, 2}, {1, 2, 3}) and strict_equal({"b": 1, "a": 2}, {"a": 2, "b": 1})
    assert strict_equal([{"k": (1, 2.5)}], [{"k": (1, 2.5)}])
    assert not strict_equal(object(), object())  # non-plain data never compares equal


@pytest.mark.parametrize(
    "text",
    [
        "0) or (True",
        "1), (2",
        "1)\n(2",
        "*[1, 2]",
        "**{'a': 1}",
        "x",
        "__import__('os')",
        "1, f(2)",
        "",
        "1) if 1 else (2",
        "1)[0",
        "a=1, **k",
    ],
)
def test_call_args_reject_injections(text):
    with pytest.raises(LiteralError):
        parse_call_args(text)


def test_call_args_parse_and_render():
    args, kwargs = parse_call_args("'John', {'age': 20}, numbers=[2, 8]")
    assert args == ("John", {"age": 20}) and kwargs == {"numbers": [2, 8]}
    assert render_call_args(args, kwargs) == "'John', {'age': 20}, numbers=[2, 8]"
    assert parse_call_args("1  # a comment") == ((1,), {})


plain = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()
    | st.binary(),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.tuples(inner, inner)
        | st.dictionaries(st.integers() | st.text(max_size=5), inner, max_size=4)
        | st.frozensets(st.integers() | st.text(max_size=5), max_size=4).map(set)
    ),
    max_leaves=20,
)


@settings(max_examples=200, deadline=None)
@given(plain)
def test_repr_of_plain_data_round_trips(v):
    assert strict_equal(parse_literal(repr(v)), v)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=200))
def test_parsers_raise_only_literal_error(text):
    for fn in (parse_literal, parse_call_args):
        try:
            fn(text)
        except LiteralError:
            pass


def test_non_finite_floats_are_not_literals():
    assert math.isinf(float("1e999"))
    with pytest.raises(LiteralError):
        parse_literal("-1e999")


@pytest.mark.parametrize(
    "text",
    [
        "0b" + "1" * 15_000,  # issue 50: parsed, then raised out of validation when written back
        "0o" + "7" * 5_000,
        "0x" + "f" * 4_000,
        "-0x" + "F" * 4_000,
        "[0x" + "f" * 4_000 + "]",
        "(0j, 0b" + "1" * 14_000 + ")",
        "1" * 5_000,  # decimal: the parser's own digit limit
        "1" + "_0" * 5_000,
    ],
)
def test_integers_that_cannot_be_written_back_are_not_literals(text):
    with pytest.raises(LiteralError):
        parse_literal(text)
    with pytest.raises(LiteralError):
        parse_call_args(text)
    # ... while the largest integers accepted (about 4,000 digits, in any base) render and parse back.
    for text in ("0x" + "f" * 3_300, "-0b" + "1" * 13_288, "9" * 4_000):
        args, kwargs = parse_call_args(text)
        assert parse_call_args(render_call_args(args, kwargs)) == (args, kwargs)
