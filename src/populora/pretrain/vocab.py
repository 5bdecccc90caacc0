"""The program generator's vocabulary (`populora.pretrain.programs`): the parameter types and how the message
names them, the parameter, result and loop names, the words and letters of string values, the int operators a
trace line shows (`INT_OPS`, `int_op`), and random input values of each type (`random_value`).

The statement grammar (`grammar`) and the samplers (`programs`) draw from these; `programs` re-exports every
name, so `from populora.pretrain.programs import WORDS` keeps working.
"""

from __future__ import annotations

import operator
import random

# ---------------------------------------------------------------------------------------------------
# Types and random values

TYPES = ("int", "str", "list", "strs", "dict")
TYPE_WORDS = {
    "int": "an int",
    "str": "a string",
    "list": "a list of ints",
    "strs": "a list of strings",
    "dict": "a dict",
    "bool": "a bool",
}
PARAM_NAMES = {
    "int": ["n", "a", "b", "x", "k", "num", "m"],
    "str": ["s", "t", "word", "text", "name", "code"],
    "list": ["xs", "nums", "arr", "items", "values", "data"],
    "strs": ["words", "names", "tokens", "parts"],
    "dict": ["d", "counts", "scores", "table"],
}
# names="simple": few names, given out in a fixed order, none shared with loop variables (v, x, e, i, c,
# ch, w, k, g). A small model then writes programs whose names agree without having to copy them from the
# header, which is most of what makes its proposals valid.
SIMPLE_PARAM_NAMES = {
    "int": ["n", "m", "a"],
    "str": ["s", "t", "text"],
    "list": ["xs", "nums", "arr"],
    "strs": ["words", "names", "parts"],
    "dict": ["d", "counts", "table"],
}
SIMPLE_RESULT_NAMES = {
    "int": ["r", "total", "count", "acc", "q"],
    "str": ["out", "res", "buf"],
    "list": ["ys", "vals", "seq"],
    "strs": ["chunks", "pieces", "labels"],
    "dict": ["freq", "mapping", "seen"],
    "bool": ["ok", "flag", "found"],
}
RESULT_NAMES = {
    "int": ["total", "count", "r", "res_n", "acc", "best", "score", "m2", "z", "q"],
    "str": ["out", "res", "u", "w", "msg", "buf", "key"],
    "list": ["ys", "vals", "seq", "evens", "acc_list", "rows", "picked"],
    "strs": ["chunks", "pieces", "labels"],
    "dict": ["freq", "mapping", "index", "seen"],
    "bool": ["ok", "flag", "found"],
}
WORDS = [
    "apple",
    "hello",
    "world",
    "abc",
    "banana",
    "code",
    "xyz",
    "level",
    "moon",
    "data",
    "tree",
    "python",
    "zebra",
    "cat",
    "dog",
    "sun",
    "kiwi",
    "radar",
    "queue",
    "a",
    "bb",
    "noon",
    "star",
]
LETTERS = "abcdexyz"


# The binary int operators a trace line shows (`r = 7 // 2 = 3`), as Python computes them.
INT_OPS = {
    "+": operator.add,
    "-": operator.sub,
    "*": operator.mul,
    "//": operator.floordiv,
    "%": operator.mod,
}


def int_op(op: str, a: int, b: int) -> int | None:
    """`a <op> b` for one of `INT_OPS`; None where Python raises (division by zero)."""
    try:
        return INT_OPS[op](a, b)
    except ZeroDivisionError:
        return None


def random_value(rng: random.Random, typ: str, small: bool = False) -> object:
    # Small values keep inputs and outputs short (digits are single tokens), so answers fit the engine's
    # max_new_tokens and a small model can trace them. `small` (level "easy"): ints 0-9, short strings
    # and lists, so every answer is a few tokens a 4 M model can compute.
    if small:
        if typ == "int":
            return rng.randint(0, 9)
        if typ == "str":
            return (
                rng.choice(WORDS)
                if rng.random() < 0.5
                else "".join(rng.choice(LETTERS) for _ in range(rng.randint(1, 4)))
            )
        if typ == "list":
            return [rng.randint(0, 9) for _ in range(rng.randint(1, 4))]
    if typ == "int":
        return rng.choice([rng.randint(0, 9), rng.randint(0, 9), rng.randint(0, 20), rng.randint(-5, 30)])
    if typ == "str":
        if rng.random() < 0.5:
            return rng.choice(WORDS)
        return "".join(rng.choice(LETTERS) for _ in range(rng.randint(1, 5)))
    if typ == "list":
        hi = rng.choice([9, 9, 9, 20])
        return [rng.randint(0, hi) for _ in range(rng.randint(1, 5))]
    if typ == "strs":
        return [rng.choice(WORDS) for _ in range(rng.randint(1, 3))]
    if typ == "dict":
        keys = rng.sample(["a", "b", "c", "x", "y", "k", "z"], rng.randint(1, 3))
        return {k: rng.randint(0, 9) for k in keys}
    raise ValueError(typ)
