"""Plain-data literals: parse model text into Python values without `eval`, and compare values by type.

- `parse_literal(text)` accepts Python literal syntax (numbers, strings, bytes, bool, None, lists, tuples,
  dicts, sets, unary minus, complex `a+bj`) plus a small whitelist of constructor calls: `set()`, `dict()`,
  `tuple()`, `list()`, `frozenset()` with at most one literal positional argument, and `dict(k=v, ...)`.
  Values are built from the AST by this module; nothing is evaluated.
- `parse_call_args(text)` treats `text` as the inside of `f(...)` and requires a single plain call whose
  arguments are such literals (so `0) or (True` is rejected: it parses as a BoolOp, not a call).
- `strict_equal(a, b)` is type-aware equality: `True` is not `1`, `2.0` is not `2`, `[1]` is not `(1,)`; sets
  and dict keys compare without order. Signed zeros differ (`-0.0` is not `0.0`, `(-0-0j)` is not `0j`): the
  comparison is on the value `repr` prints, and a program can tell them apart (`1 / x`, `math.copysign`).
  Complex literals are read the way `complex()` reads `repr` (`-5j` is `complex(0.0, -5.0)`), so a value's
  repr always parses back to that value, signs of zeros included.

Every literal these parsers accept can be written back (`render_call_args`): an integer literal of more than
about 4,000 decimal digits (`MAX_INT_BITS`) is refused when parsed, in any base, because Python cannot turn it
into decimal text (its int-to-str limit is 4,300 digits) and a proposal whose input parses but cannot be
rendered used to raise out of validation (issue 50: `0b` followed by 15,000 ones). Nothing here raises
anything but `LiteralError`, whatever the text (NUL bytes, lone surrogates, deep nesting, huge numbers).
"""

from __future__ import annotations

import ast
import math
from typing import Any

from populora import pyparse

_CALLS = {"set": set, "frozenset": frozenset, "tuple": tuple, "list": list, "dict": dict}
PLAIN_TYPES = (bool, int, float, complex, str, bytes, type(None), list, tuple, dict, set, frozenset)
MAX_LITERAL_CHARS = 100_000
# 2**13_288 is about 10**4000: below Python's default int-to-str limit (4,300 digits) with room to spare, so a
# literal that parses can always be written back, whatever `sys.set_int_max_str_digits` says.
MAX_INT_BITS = 13_288


class LiteralError(ValueError):
    """Text that is not a plain-data literal."""


def _build(node: ast.AST, depth: int = 0) -> Any:
    if depth > 100:
        raise LiteralError("literal nested too deeply")
    d = depth + 1
    if isinstance(node, ast.Constant):
        v = node.value
        if v is Ellipsis:
            raise LiteralError("Ellipsis is not plain data")
        if isinstance(v, float) and not math.isfinite(v):
            raise LiteralError("non-finite float")
        if type(v) is int and v.bit_length() > MAX_INT_BITS:
            # `0x` + 5,000 `f`s parses (only decimal literals have a digit limit) but has no decimal repr
            raise LiteralError("integer longer than 4,000 digits")
        return v
    if isinstance(node, ast.List):
        return [_build(e, d) for e in node.elts]
    if isinstance(node, ast.Tuple):
        return tuple(_build(e, d) for e in node.elts)
    if isinstance(node, ast.Set):
        return {_build(e, d) for e in node.elts}
    if isinstance(node, ast.Dict):
        if any(k is None for k in node.keys):
            raise LiteralError("dict unpacking (**) is not a literal")
        return {_build(k, d): _build(v, d) for k, v in zip(node.keys, node.values, strict=True)}
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        v = _build(node.operand, d)
        if type(v) not in (int, float, complex):
            raise LiteralError("unary sign on a non-number")
        if type(v) is complex and v.real == 0 and isinstance(node.operand, ast.Constant):
            # `-5j` as complex() reads repr's output: only the imaginary part is signed (eval gives -0.0-5j)
            return complex(0.0, -v.imag if isinstance(node.op, ast.USub) else v.imag)
        return -v if isinstance(node.op, ast.USub) else +v
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub)):
        # Only the complex-number form `real +/- imagj`, as ast.literal_eval allows.
        left, right = _build(node.left, d), _build(node.right, d)
        if type(left) in (int, float) and type(right) is complex and isinstance(node.right, ast.Constant):
            # Build the parts separately, as complex() does: `(-0-0j)` is complex(-0.0, -0.0), while int
            # arithmetic would lose both signs (-0 is 0, and 0 - 0j has imaginary part +0.0).
            real = -float(_build(node.left.operand, d)) if _is_neg_int(node.left) else float(left)
            imag = right.imag if isinstance(node.op, ast.Add) else -right.imag
            return complex(real, imag)
        raise LiteralError("arithmetic is not a literal")
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _CALLS:
        ctor = _CALLS[node.func.id]
        if len(node.args) > 1 or any(isinstance(a, ast.Starred) for a in node.args):
            raise LiteralError(f"{node.func.id}() takes at most one literal argument")
        if node.keywords and ctor is not dict:
            raise LiteralError(f"{node.func.id}() takes no keyword arguments")
        if any(k.arg is None for k in node.keywords):
            raise LiteralError("** unpacking is not a literal")
        args = [_build(a, d) for a in node.args]
        if args and not isinstance(args[0], (list, tuple, set, frozenset, dict, str, bytes)):
            raise LiteralError(f"{node.func.id}() of a non-collection")
        kwargs = {k.arg: _build(k.value, d) for k in node.keywords}
        return ctor(*args, **kwargs)
    raise LiteralError(f"{type(node).__name__} is not allowed in a literal")


def _is_neg_int(node: ast.AST) -> bool:
    """`-<int>` as repr writes an integral real part (`(-0-0j)`): its sign must survive the int."""
    return (
        isinstance(node, ast.UnaryOp)
        and isinstance(node.op, ast.USub)
        and isinstance(node.operand, ast.Constant)
        and type(node.operand.value) is int
    )


def _parse_expr(text: str) -> ast.expr:
    if not isinstance(text, str):
        raise LiteralError("not text")
    if len(text) > MAX_LITERAL_CHARS:
        raise LiteralError(f"literal longer than {MAX_LITERAL_CHARS} characters")
    try:
        return pyparse.parse(text.strip(), mode="eval").body
    except Exception as e:  # SyntaxError, ValueError (null bytes, huge ints), RecursionError, MemoryError
        raise LiteralError(f"not a Python expression ({type(e).__name__})") from None


def parse_literal(text: str) -> Any:
    """The plain-data value written in `text`; raises `LiteralError` for anything else (never evaluates)."""
    node = _parse_expr(text)
    try:
        return _build(node)
    except LiteralError:
        raise
    except Exception as e:  # unhashable set members / dict keys, int-str conversion limits, recursion
        raise LiteralError(f"bad literal ({type(e).__name__})") from None


def parse_call_args(text: str) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """Parse `text` as the argument list of `f(...)`: `(args, kwargs)` of plain values, or `LiteralError`."""
    if not isinstance(text, str) or not text.strip():
        raise LiteralError("empty argument list")
    if len(text) > MAX_LITERAL_CHARS:
        raise LiteralError(f"argument list longer than {MAX_LITERAL_CHARS} characters")
    node = _parse_expr(f"f({text.strip()}\n)")
    # `0) or (True` parses to BoolOp(f(0), True): anything but one bare call to f is an injection attempt.
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "f"):
        raise LiteralError("not a plain argument list")
    try:
        args = []
        for a in node.args:
            if isinstance(a, ast.Starred):
                raise LiteralError("*-unpacking is not allowed in an argument list")
            args.append(_build(a))
        kwargs: dict[str, Any] = {}
        for k in node.keywords:
            if k.arg is None:
                raise LiteralError("**-unpacking is not allowed in an argument list")
            kwargs[k.arg] = _build(k.value)
    except LiteralError:
        raise
    except Exception as e:
        raise LiteralError(f"bad literal ({type(e).__name__})") from None
    return tuple(args), kwargs


def render_call_args(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    """The canonical argument-list text for parsed values (what is sent to the sandbox, never the raw text)."""
    parts = [_safe_repr(a) for a in args] + [f"{k}={_safe_repr(v)}" for k, v in kwargs.items()]
    return ", ".join(parts)


def _safe_repr(v: Any) -> str:
    # repr of plain data is a literal except for frozenset, whose repr `frozenset({1})` is also accepted.
    try:
        return repr(v)
    except Exception as e:  # an int beyond Python's int-to-str digit limit (e.g. `0x` + 5000 `f`s), recursion
        raise LiteralError(f"value cannot be written back as a literal ({type(e).__name__})") from None


def canonical(v: Any, depth: int = 0) -> Any:
    """A hashable, type-tagged form of a plain value: equal iff the values are equal *with* equal types."""
    if depth > 200:
        raise LiteralError("value nested too deeply")
    t = type(v)
    if t in (list, tuple):
        return (t.__name__, tuple(canonical(x, depth + 1) for x in v))
    if t in (set, frozenset):
        return (t.__name__, frozenset(canonical(x, depth + 1) for x in v))
    if t is dict:
        return ("dict", frozenset((canonical(k, depth + 1), canonical(x, depth + 1)) for k, x in v.items()))
    if t is float:  # signed zeros differ (repr differs); -0.0 == 0.0 in Python would hide it
        return ("float", v, math.copysign(1.0, v))
    if t is complex:
        return ("complex", canonical(v.real, depth + 1), canonical(v.imag, depth + 1))
    if t in PLAIN_TYPES:
        return (t.__name__, v)
    raise LiteralError(f"{t.__name__} is not plain data")


def strict_equal(a: Any, b: Any) -> bool:
    """Type-aware equality of plain values (`True != 1`, `2.0 != 2`, `[1] != (1,)`); False on non-plain data."""
    try:
        return canonical(a) == canonical(b)
    except Exception:
        return False


def is_plain(v: Any) -> bool:
    try:
        canonical(v)
        return True
    except Exception:
        return False


def literal_equal(text_a: str, text_b: str) -> bool:
    """strict_equal of two literal texts; False if either does not parse."""
    try:
        return strict_equal(parse_literal(text_a), parse_literal(text_b))
    except LiteralError:
        return False
