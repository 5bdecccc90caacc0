"""Reading job values outside the sandbox: parse a `value_repr` as plain data and compare two of them.

Jobs return `repr()` strings; the caller never `eval`s them (that would run model text in the trainer, the AZR
bug B4). `parse_value` uses `ast.literal_eval`, which accepts only literals, and `same_value` compares parsed
values strictly: types must match (`1`, `1.0` and `True` differ), containers element-wise, NaN equals NaN.
"""

from __future__ import annotations

import ast
import math
from typing import Any

from populora import pyparse

_MISSING = object()


def parse_value(value_repr: str, max_chars: int = 100_000) -> Any:
    """The plain-data value a `value_repr` spells; ValueError if it is not a literal (e.g. `<object at ...>`)."""
    if not isinstance(value_repr, str):
        raise ValueError(f"value_repr must be a str, got {type(value_repr).__name__}")
    if len(value_repr) > max_chars:
        raise ValueError(f"value_repr longer than {max_chars} characters")
    if "..." in value_repr and _has_dots(value_repr):
        # repr writes `...` only for a container that contains itself (`a = [a]` -> `[[...]]`); the real
        # Ellipsis prints as `Ellipsis`. literal_eval would read it as [[Ellipsis]], a different value.
        raise ValueError(f"not a plain-data literal: {value_repr[:80]!r} (recursive container '...')")
    try:
        return pyparse.literal_eval(value_repr)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError) as e:
        if any(w in value_repr for w in ("inf", "nan", "frozenset", "Ellipsis")):  # repr(inf) is 'inf' ...
            try:
                return _eval_with_specials(pyparse.parse(value_repr.strip(), mode="eval").body)
            except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
                pass
        raise ValueError(f"not a plain-data literal: {value_repr[:80]!r} ({type(e).__name__})") from None


def _has_dots(value_repr: str) -> bool:
    """True if the text parses and holds a `...` token (outside strings)."""
    try:
        tree = pyparse.parse(value_repr.strip(), mode="eval")
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return False
    return any(isinstance(n, ast.Constant) and n.value is Ellipsis for n in ast.walk(tree))


_SPECIALS = {"inf": math.inf, "nan": math.nan, "Ellipsis": ...}


def _eval_with_specials(node: ast.AST) -> Any:
    """literal_eval's grammar plus `inf`, `nan`, `Ellipsis` and `frozenset(...)`, as `repr` writes them."""
    if isinstance(node, ast.Name) and node.id in _SPECIALS:
        return _SPECIALS[node.id]
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        v = _eval_with_specials(node.operand)
        if type(v) not in (int, float, complex):
            raise ValueError("bad operand")
        return -v if isinstance(node.op, ast.USub) else +v
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add | ast.Sub):
        a, b = _eval_with_specials(node.left), _eval_with_specials(node.right)
        if type(a) not in (int, float) or type(b) is not complex:
            raise ValueError("bad complex")
        return a + b if isinstance(node.op, ast.Add) else a - b
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "complex":
        if node.keywords or len(node.args) != 2:
            raise ValueError("bad complex")
        return complex(_eval_with_specials(node.args[0]), _eval_with_specials(node.args[1]))
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "frozenset":
        if node.keywords or len(node.args) > 1:
            raise ValueError("bad frozenset")
        inner = _eval_with_specials(node.args[0]) if node.args else set()
        if type(inner) is not set:
            raise ValueError("bad frozenset")
        return frozenset(inner)
    if isinstance(node, ast.Tuple):
        return tuple(_eval_with_specials(e) for e in node.elts)
    if isinstance(node, ast.List):
        return [_eval_with_specials(e) for e in node.elts]
    if isinstance(node, ast.Set):
        return {_eval_with_specials(e) for e in node.elts}
    if isinstance(node, ast.Dict):
        if any(k is None for k in node.keys):
            raise ValueError("dict unpacking")
        return {
            _eval_with_specials(k): _eval_with_specials(v)
            for k, v in zip(node.keys, node.values, strict=True)
        }
    raise ValueError(f"not a literal node: {type(node).__name__}")


def strict_equal(a: Any, b: Any) -> bool:
    """Structural equality that also requires equal types at every level (so `1 != True != 1.0`)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    if isinstance(a, complex):
        return strict_equal(a.real, b.real) and strict_equal(a.imag, b.imag)
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(strict_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        if len(a) != len(b):
            return False
        for k, v in a.items():
            # Match keys strictly too: {1: x} and {True: x} are equal dicts but different values.
            other = next((bk for bk in b if strict_equal(bk, k)), _MISSING)
            if other is _MISSING or not strict_equal(v, b[other]):
                return False
        return True
    if isinstance(a, set | frozenset):
        return len(a) == len(b) and all(any(strict_equal(x, y) for y in b) for x in a)
    return a == b


def same_value(repr_a: str | None, repr_b: str | None) -> bool:
    """True when two value reprs spell the same plain-data value (False if either is not a literal)."""
    if repr_a is None or repr_b is None:
        return False
    if repr_a == repr_b:
        try:
            parse_value(repr_a)
            return True
        except ValueError:
            return False
    try:
        return strict_equal(parse_value(repr_a), parse_value(repr_b))
    except ValueError:
        return False
