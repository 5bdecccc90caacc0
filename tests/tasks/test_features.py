import pytest

from populora.diagnostics.features import program_features


def test_paper_example():
    # the paper's collapsed baseline program: "AST depth 5, cyclomatic 1.0, 2 LOC"
    assert program_features("def f(number):\n    return number * 3") == {
        "ast_depth": 5,
        "cyclomatic": 1,
        "loc": 2,
        "n_vars": 1,
        "sloc": 2,
        "control_depth": 1,
    }


def test_hand_counted_program():
    src = '''
import math as m
def f(xs, k=2, *rest, **kw):
    """The docstring is a logical line (an expression statement) but not a source line."""
    total = 0
    for i, x in enumerate(xs):       # for: +1
        if x > k and x < 10:         # if: +1, and: +1
            total += x
        elif x == 0:                 # elif: +1
            continue
    try:
        y = [v for v in xs if v]     # comprehension: +1, its if: +1
    except ValueError as err:        # handler: +1
        y = []
    return total if y else m.floor(total)   # ternary: +1
'''
    f = program_features(src)
    assert f["cyclomatic"] == 9
    # bound: m, xs, k, rest, kw, total, i, x, y, v, err
    assert f["n_vars"] == 11
    # Module > FunctionDef > For > If > If(elif) > Compare > Name
    assert f["ast_depth"] == 7
    assert f["control_depth"] == 4  # def > for > if > elif
    assert f["loc"] == 14 and f["sloc"] == 13  # 13 statements + the docstring; 13 non-docstring lines


def test_depth_of_assignment_and_match():
    assert program_features("x = 1")["ast_depth"] == 3  # Module, Assign, Name
    src = (
        "def f(p):\n    match p:\n        case [a, *rest]:\n            return a\n        case {'k': v, **others}:\n"
        "            return v\n        case _:\n            return None"
    )
    f = program_features(src)
    assert f["cyclomatic"] == 3 and f["n_vars"] == 5  # p, a, rest, v, others


def test_unparsable():
    with pytest.raises(ValueError, match="does not parse"):
        program_features("def f(:")
