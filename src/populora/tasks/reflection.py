"""The policy's checks that keep strings from becoming code (issue 29, item 2): the routes by which a program
could turn a computed string into an attribute walk or an `eval` inside an allowed module.

Each rule closes a class at its root rather than one spelling:

- **Underscore attributes.** `x._name` / `x.__name__` is refused unless `name` is a special method of the
  object protocol (`__init__`, `__eq__`, `__len__`, ... `SAFE_DUNDERS`: they only reach behaviour the program
  could call anyway) or namedtuple's public API (`_replace`, `_asdict`, ...). Private helpers of the standard
  library (`ForwardRef._evaluate`, `Formatter._vformat`) and the reflection dunders (`__args__`,
  `__traceback__`, `__annotations__`) are therefore out of reach. The same rule applies to the names that
  getattr-like calls take, and to dunder names a program binds itself (`__annotations__ = {...}` in a class
  body would feed strings to `dataclasses`' code generator or to `get_type_hints`).
- **Annotations** must be type expressions: names, dotted names, subscripts of those, `X | Y`, `None`,
  `...`; never a string (a forward reference is code that `typing` evaluates later).
- **Subscripts of typing** (`typing.Optional["..."]`, `List["..."]`) take type expressions too; only
  `Literal[...]` (and `Annotated`'s metadata) may hold plain constants.
- **Format strings**: `.format` / `.format_map` need a literal receiver (a computed one could spell any
  attribute walk), and a literal's fields may walk attributes or indexes only through non-underscore names
  that are not escape attributes (`"{0.real}"` is fine, `"{0.__class__}"`, `"{0.tb_frame}"` are not).
"""

from __future__ import annotations

import ast
import string
from collections.abc import Callable, Iterator

#: Special-method names a program may define and use as attributes: the object protocol (comparisons,
#: arithmetic, containers, iteration, context managers, construction). None of them leads to a frame, a
#: module, a code object or a string evaluator.
SAFE_DUNDERS: frozenset[str] = frozenset(
    f"__{n}__"
    for n in (
        "init new del repr str bytes format hash bool len iter next reversed contains getitem setitem "
        "delitem missing call enter exit eq ne lt le gt ge add sub mul matmul truediv floordiv mod divmod "
        "pow lshift rshift and xor or radd rsub rmul rmatmul rtruediv rfloordiv rmod rdivmod rpow rlshift "
        "rrshift rand rxor ror iadd isub imul imatmul itruediv ifloordiv imod ipow ilshift irshift iand "
        "ixor ior neg pos abs invert complex int float index round trunc floor ceil length_hint slots "
        "post_init sizeof copy deepcopy"
    ).split()
)

#: Dunders a program may read but not bind: plain strings about an object.
READ_ONLY_DUNDERS: frozenset[str] = frozenset({"__name__", "__qualname__", "__doc__"})

#: namedtuple's public methods and attributes (documented with a leading underscore to avoid field clashes).
NAMEDTUPLE_API: frozenset[str] = frozenset({"_asdict", "_replace", "_fields", "_make", "_field_defaults"})

#: Methods that read attribute paths out of a string (`"{0.attr[key]}"`): allowed only on a literal receiver.
FORMAT_METHODS: frozenset[str] = frozenset({"format", "format_map"})

#: typing members whose subscripts hold values rather than types.
_VALUE_SUBSCRIPTS = {"Literal"}


def underscore_reason(name: str, deny_attrs: frozenset[str]) -> str | None:
    """Why attribute `name` is refused (reached by `.name`, getattr, attrgetter, a format field), or None."""
    if name in deny_attrs:
        return f"forbidden attribute: {name}"
    if name.startswith("_") and name not in SAFE_DUNDERS | READ_ONLY_DUNDERS | NAMEDTUPLE_API:
        return f"forbidden attribute: {name} (names starting with an underscore are private)"
    return None


def bound_dunder_reason(tree: ast.AST) -> str | None:
    """A dunder name the program binds (assignment, def, parameter, class attribute) that is not a special
    method: `__annotations__`, `__class__`, `__dict__`, `__wrapped__`... each is read by library code as data
    that becomes code or reflection."""
    for node in ast.walk(tree):
        name = None
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store | ast.Del):
            name = node.id
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            name = node.name
        elif isinstance(node, ast.arg):
            name = node.arg
        if name and name.startswith("__") and name.endswith("__") and name not in SAFE_DUNDERS:
            return f"forbidden name: {name} (only special-method dunders may be defined)"
    return None


def _is_type_expr(node: ast.AST, value_subscript: Callable[[ast.AST], bool]) -> bool:
    """Names, dotted names, `None`, `...`, `X | Y`, and subscripts of these (strings nowhere)."""
    if isinstance(node, ast.Name):
        return True
    if isinstance(node, ast.Attribute):
        return _is_type_expr(node.value, value_subscript)
    if isinstance(node, ast.Constant):
        return node.value is None or node.value is Ellipsis
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        return _is_type_expr(node.left, value_subscript) and _is_type_expr(node.right, value_subscript)
    if isinstance(node, ast.Tuple | ast.List):
        return all(_is_type_expr(e, value_subscript) for e in node.elts)
    if isinstance(node, ast.Subscript):
        if not _is_type_expr(node.value, value_subscript):
            return False
        elts = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        if value_subscript(node.value):  # Literal["a", 1]: plain constants, no forward references
            return all(_is_plain_constant(e) for e in elts)
        if _base_name(node.value) == "Annotated":  # Annotated[T, metadata...]: a type, then constants
            return _is_type_expr(elts[0], value_subscript) and all(_is_plain_constant(e) for e in elts[1:])
        return _is_type_expr(node.slice, value_subscript)
    return False


def _base_name(node: ast.AST) -> str | None:
    return node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None


def _is_plain_constant(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant):
        return True
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        return _is_plain_constant(node.operand)
    return False


def _annotations(tree: ast.AST) -> Iterator[ast.AST]:
    for node in ast.walk(tree):
        if isinstance(node, ast.arg) and node.annotation is not None:
            yield node.annotation
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.returns is not None:
            yield node.returns
        elif isinstance(node, ast.AnnAssign):
            yield node.annotation


def annotation_reason(tree: ast.AST, typing_names: dict[str, str]) -> str | None:
    """String (forward-reference) annotations and annotations that are not type expressions; subscripts of
    typing members whose slice is not a type expression. `typing_names`: local name -> typing member it is
    bound to (`from typing import Optional as O`), plus `"typing"`-module aliases mapped to `""`."""

    def typing_member(node: ast.AST) -> str | None:
        if isinstance(node, ast.Name) and typing_names.get(node.id):
            return typing_names[node.id]
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and typing_names.get(node.value.id) == ""
        ):
            return node.attr
        return None

    def value_subscript(node: ast.AST) -> bool:
        return typing_member(node) in _VALUE_SUBSCRIPTS or (
            isinstance(node, ast.Name | ast.Attribute)
            and (node.id if isinstance(node, ast.Name) else node.attr) in _VALUE_SUBSCRIPTS
        )

    for ann in _annotations(tree):
        if isinstance(ann, ast.Constant) and isinstance(ann.value, str):
            return "forbidden annotation: a string (forward references are evaluated as code)"
        if not _is_type_expr(ann, value_subscript):
            return f"forbidden annotation: {_short(ann)} (annotations must be type expressions)"
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript) and typing_member(node.value) is not None:
            member = typing_member(node.value)
            ok = _is_type_expr(node, value_subscript)
            if not ok:
                return (
                    f"forbidden subscript of typing.{member}: {_short(node.slice)} (types only, no strings)"
                )
    return None


def format_reason(tree: ast.AST, deny_attrs: frozenset[str]) -> str | None:
    """`.format` / `.format_map` on anything but a string literal, and literal format strings whose fields
    walk into private or escape attributes."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in FORMAT_METHODS:
            recv = node.value
            if not (isinstance(recv, ast.Constant) and isinstance(recv.value, str)):
                return f"forbidden call: .{node.attr} on a computed format string (use a string literal)"
            why = format_fields_reason(recv.value, deny_attrs)
            if why:
                return why
    return None


def format_fields_reason(fmt: str, deny_attrs: frozenset[str]) -> str | None:
    """Why a literal format string's fields are refused (attribute or index walks into private names,
    nested fields in the spec included), or None."""
    try:
        fields = list(_fields(fmt))
    except (ValueError, RecursionError):
        return "forbidden format string: it does not parse"
    for field in fields:
        # "0.a.b[c]": every '.name' and '[key]' after the first part is a walk
        for part in field.replace("[", ".").replace("]", "").split(".")[1:]:
            why = underscore_reason(part, deny_attrs)
            if why:
                return f"forbidden format field {field[:40]!r}: {why}"
    return None


def _fields(fmt: str, depth: int = 0) -> Iterator[str]:
    if depth > 2:
        return
    for _, name, spec, _ in string.Formatter().parse(fmt):
        if name is not None:
            yield name
        if spec:
            yield from _fields(spec, depth + 1)


def _short(node: ast.AST) -> str:
    try:
        return ast.unparse(node)[:40]
    except Exception:
        return type(node).__name__
