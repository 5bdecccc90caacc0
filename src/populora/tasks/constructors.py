"""The policy's rule that no program builds a function, a code object or a class from data (issue 50, item 2),
and that none renames what it defines.

Issue 50 reproduced it: a coroutine's `cr_code` gave a code object, `code.replace(co_names=(computed,))` a copy
whose attribute read takes a name from data, `type(fn)` (FunctionType) made it a function, and the program read
`__globals__`, hence `__import__('os')` and the clock. Each link is closed at its root:

- **No code object or frame is reachable.** Every introspection attribute of code objects (`co_*`), frames
  (`f_*`), generators (`gi_*`), coroutines (`cr_*`), async generators (`ag_*`) and tracebacks (`tb_*`) is an
  escape attribute (`CODE_ATTRS`, taken from the real types, plus the names newer Pythons add); a function's
  `__code__` is an underscore attribute already. There is no other route: no allowed module exposes a code
  object, a frame or a traceback, and the reflection modules (`inspect`, `sys`, `dis`, `types`, `gc`) are not
  allowed. So `code.replace` and `copy.replace(code, ...)` have nothing to work on, and the policy need not
  refuse `.replace` (which is `str.replace` in 26 of the AZR seed programs). Generators, coroutines and async
  generators stay allowed: without these attributes they only compute.
- **No constructor of a function or a class is reachable.** `FunctionType(code, globals)` needs a code object,
  which is unreachable, but the constructor is refused too (depth, not luck): no allowed module may expose a
  function, code, frame, generator or traceback type (`dataclasses.FunctionType` is out of its allowed API), and
  the builtin `type` may appear only as `type(x)` with exactly one plain argument (no `*args`, no keywords), as
  the second argument of `isinstance`/`issubclass`, in a comparison or inside an annotation. The *result* of
  `type(x)` is itself a constructor (`type(f)` is FunctionType, `type(C)` is `type`, whose three-argument call
  makes a class from a dict with computed dunder keys and a free-text name), so it may only be compared, have
  its `__name__`/`__qualname__` read, or be passed to `isinstance`, `issubclass`, `str`, `repr`, `print`, `hash`,
  `id`, `format` or an f-string; calling it, storing it, returning it or passing it elsewhere is refused, so
  neither `type(f)(...)` nor `t = type(f); t(...)` nor `g(type(f))` gets through. The metaclasses of allowed
  modules (`abc.ABCMeta`, `enum.EnumType`, `typing.NamedTupleMeta`, ...) may only be a class statement's
  `metaclass=` (or isinstance's second argument), and neither they nor `type` may be a class base (a program
  metaclass would be a `type` under another name). `x.__class__` was refused already; `dataclasses.make_dataclass`
  (a class from a namespace dict) is out of the allowed API.
- **No class builder turns names into code.** `dataclasses.dataclass` pastes field names into the source it
  `exec`s, so a class whose annotations hold a computed key is an `eval` (a functional
  `typing.TypedDict("T", {"x if 0 else 1 // 0": int})` passed to `dataclass(T, init=False, repr=False)` ran its
  key as code when two instances compared).
  So `dataclass` may only decorate a class statement (`@dataclass`, `@dataclass(...)`), whose annotations are
  identifiers (`__annotations__` cannot be bound or named); `typing.TypedDict` may only be a class base (its
  functional form takes any keys, and a TypedDict subclass merges its bases' keys into its own annotations); and
  a class statement's `metaclass=` may only be a metaclass of an allowed module (a function there makes the class
  statement return any object, which the decorator would then receive).
- **No class from the Enum functional API.** `Enum("any text", "a b", type=Exception)` (or a call of any enum
  class without members, the program's own included) makes a class from data with a free-text name, which a
  raised member puts in a reason. An enum class without members (`enum.Enum`, `IntEnum`, `Flag`, ..., and a
  program class deriving from one whose body binds no member to a literal or `auto()`) may only be a class base,
  be looked up with one argument (`Color(1)`), be compared, or be isinstance's second argument; it cannot be
  stored, passed on or have an attribute read (`Enum.__call__`, a classmethod's `cls`), so nothing reaches the
  functional form. An enum class with members cannot be extended (the functional form raises TypeError), so it
  is unrestricted.
- **No stores to `__name__`, `__qualname__`, `__doc__`**, by `X.__name__ = ...`, `del`, `setattr`/`delattr`, or
  `functools.update_wrapper`/`functools.wraps` (which copy them and take attribute names as data): a teacher
  could otherwise write free text into an invalid proposal's reason (`raised <type name>`).

The alternative, refusing `async def`, `await` and `yield` outright, would close only the coroutine spelling and
refuse ordinary generator programs; the rules above refuse nothing the bundled programs use.
"""

from __future__ import annotations

import ast
import importlib
import types
from collections.abc import Callable, Iterator
from functools import cache

#: Introspection-attribute prefixes of code objects, frames, generators, coroutines, async generators, tracebacks.
_PREFIXES = ("co_", "f_", "gi_", "cr_", "ag_", "tb_")
_INTROSPECTED = (
    types.CodeType,
    types.FrameType,
    types.GeneratorType,
    types.CoroutineType,
    types.AsyncGeneratorType,
    types.TracebackType,
)
# Names newer (or older) Pythons have that this one may not, so the list does not depend on the interpreter.
_KNOWN = {
    "co_qualname", "co_exceptiontable", "co_linetable", "co_lnotab", "co_positions", "co_lines", "co_branches",
    "f_generator", "f_trace", "f_lasti", "gi_suspended", "cr_suspended", "ag_suspended", "ag_running",
    "cr_origin", "gi_yieldfrom", "cr_await", "ag_await",
}  # fmt: skip

#: Attribute names that lead to a code object or a frame, or read one: refused everywhere (`.name`, getattr,
#: attrgetter, format fields).
CODE_ATTRS: frozenset[str] = frozenset(
    {n for t in _INTROSPECTED for n in dir(t) if n.startswith(_PREFIXES)} | _KNOWN
)

#: Types whose constructor builds code, functions or frames: no allowed module may expose one.
CODE_TYPES: tuple[type, ...] = (
    types.FunctionType,
    types.CodeType,
    types.FrameType,
    types.MethodType,
    types.GeneratorType,
    types.CoroutineType,
    types.AsyncGeneratorType,
    types.TracebackType,
    types.CellType,
)

#: Dunders a program may read but never store: the names that appear in reasons and reprs.
NAME_DUNDERS: frozenset[str] = frozenset({"__name__", "__qualname__", "__doc__"})

#: Where the result of `type(x)` may be passed: builtins that only test it or turn it into text.
_TYPE_SINKS = frozenset({"isinstance", "issubclass", "str", "repr", "print", "hash", "id", "format"})
_TYPE_READS = frozenset({"__name__", "__qualname__"})
_TYPE_TESTS = frozenset({"isinstance", "issubclass"})


def is_code_type(obj: object) -> bool:
    """Whether `obj` is one of `CODE_TYPES` (a constructor of code, functions or frames)."""
    return isinstance(obj, type) and any(obj is t for t in CODE_TYPES)


@cache
def metaclass_members(module: str) -> frozenset[str]:
    """The public names of `module` bound to a metaclass (a subclass of `type`): `abc.ABCMeta`, ..."""
    try:
        mod = importlib.import_module(module)
    except ImportError:
        return frozenset()
    return frozenset(
        n
        for n in dir(mod)
        if not n.startswith("_")
        and isinstance(getattr(mod, n, None), type)
        and issubclass(getattr(mod, n), type)
    )


def store_reason(node: ast.AST) -> str | None:
    """`X.__name__ = ...` / `del X.__doc__` (augmented assignment included)."""
    if (
        isinstance(node, ast.Attribute)
        and isinstance(node.ctx, ast.Store | ast.Del)
        and node.attr in NAME_DUNDERS
    ):
        return f"forbidden store: .{node.attr} (a program may not rename what it defines)"
    return None


def _parents(tree: ast.AST) -> dict[int, ast.AST]:
    return {id(c): p for p in ast.walk(tree) for c in ast.iter_child_nodes(p)}


def _annotation_ids(tree: ast.AST) -> set[int]:
    roots: list[ast.AST] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.arg) and node.annotation is not None:
            roots.append(node.annotation)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.returns is not None:
            roots.append(node.returns)
        elif isinstance(node, ast.AnnAssign):
            roots.append(node.annotation)
    return {id(n) for r in roots for n in ast.walk(r)}


def _test_arg(node: ast.AST, parent: ast.AST | None, parents: dict[int, ast.AST], bound: set[str]) -> bool:
    """`node` is the second argument of isinstance/issubclass (or an element of a tuple there)."""
    if isinstance(parent, ast.Tuple):
        node, parent = parent, parents.get(id(parent))
    return (
        isinstance(parent, ast.Call)
        and isinstance(parent.func, ast.Name)
        and parent.func.id in _TYPE_TESTS
        and parent.func.id not in bound
        and len(parent.args) == 2
        and parent.args[1] is node
    )


def _type_result_ok(call: ast.Call, parents: dict[int, ast.AST], bound: set[str]) -> bool:
    """The value of `type(x)` goes only where it cannot be called (see the module docstring)."""
    parent = parents.get(id(call))
    if isinstance(parent, ast.Compare | ast.FormattedValue):
        return True
    if isinstance(parent, ast.Attribute):
        return parent.value is call and parent.attr in _TYPE_READS and isinstance(parent.ctx, ast.Load)
    if _test_arg(call, parent, parents, bound):
        return True
    return (
        isinstance(parent, ast.Call)
        and call in parent.args
        and isinstance(parent.func, ast.Name)
        and parent.func.id in _TYPE_SINKS
        and parent.func.id not in bound
    )


def _metaclass_uses(tree: ast.AST, modules: dict[str, str]) -> Iterator[tuple[ast.AST, str]]:
    """Every expression that names a metaclass of an allowed module (`ABCMeta`, `abc.ABCMeta`), with its name."""
    return _member_uses(tree, modules, lambda m, n: n in metaclass_members(m))


#: Members that build code from names: where each may appear ("decorator": directly in a class statement's
#: decorator list, called or not; "base": a class statement's base).
_CODE_BUILDERS: dict[tuple[str, str], str] = {
    ("dataclasses", "dataclass"): "decorator",
    ("typing", "TypedDict"): "base",
}


def _member_uses(
    tree: ast.AST, modules: dict[str, str], wanted: Callable[[str, str], bool]
) -> Iterator[tuple[ast.AST, str]]:
    """Every expression naming `module.member` for which `wanted(module, member)` (`from m import X as Y`'s `Y`,
    `m.X` through any alias of `m`), with its dotted name."""
    local: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                if wanted(node.module, alias.name):
                    local[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id in local and isinstance(node.ctx, ast.Load):
            yield node, local[node.id]
        elif (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in modules
            and wanted(modules[node.value.id], node.attr)
        ):
            yield node, f"{modules[node.value.id]}.{node.attr}"


@cache
def memberless_enums(module: str) -> frozenset[str]:
    """The public names of `module` bound to an enum class without members (`enum.Enum`, `enum.IntFlag`, ...):
    the ones whose call with names makes a new class."""
    import enum

    try:
        mod = importlib.import_module(module)
    except ImportError:
        return frozenset()
    out = set()
    for n in dir(mod):
        o = getattr(mod, n, None)
        if not n.startswith("_") and isinstance(o, type) and issubclass(o, enum.Enum) and not o.__members__:
            out.add(n)
    return frozenset(out)


def _binds_a_member(cls: ast.ClassDef) -> bool:
    """Whether a class body binds an enum member for sure: a public name to a literal or `auto()` (anything else
    may be a descriptor, which Enum does not make a member)."""

    def literal(v: ast.AST | None) -> bool:
        if isinstance(v, ast.Constant):
            return True
        if isinstance(v, ast.UnaryOp):
            return literal(v.operand)
        if isinstance(v, ast.Tuple):
            return all(literal(e) for e in v.elts)
        return (
            isinstance(v, ast.Call)
            and not v.args
            and (
                isinstance(v.func, ast.Name)
                and v.func.id == "auto"
                or getattr(v.func, "attr", None) == "auto"
            )
        )

    for stmt in cls.body:
        targets = (
            stmt.targets
            if isinstance(stmt, ast.Assign)
            else [stmt.target]
            if isinstance(stmt, ast.AnnAssign)
            else []
        )
        if any(isinstance(t, ast.Name) and not t.id.startswith("_") for t in targets) and literal(
            getattr(stmt, "value", None)
        ):
            return True
    return False


def _enum_reason(
    tree: ast.AST,
    modules: dict[str, str],
    parents: dict[int, ast.AST],
    annotations: set[int],
    bound: set[str],
) -> str | None:
    """Uses of an enum class without members other than those the module docstring allows."""
    uses = list(_member_uses(tree, modules, lambda m, n: n in memberless_enums(m)))
    enum_nodes = {id(n) for n, _ in uses}
    classes = [n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)]
    program: set[str] = set()
    while True:  # the program's own enum classes, by name, until no class is added
        grown = {
            c.name
            for c in classes
            if c.name not in program
            and any(id(b) in enum_nodes or isinstance(b, ast.Name) and b.id in program for b in c.bases)
        }
        if not grown:
            break
        program |= grown
    memberless = {c.name for c in classes if c.name in program and not _binds_a_member(c)}
    refs: list[tuple[ast.AST, str]] = uses
    refs += [
        (n, n.id)
        for n in ast.walk(tree)
        if isinstance(n, ast.Name) and n.id in memberless and isinstance(n.ctx, ast.Load)
    ]
    for node, name in refs:
        if id(node) in annotations:
            continue
        parent = parents.get(id(node))
        if isinstance(parent, ast.ClassDef) and node in parent.bases:
            continue
        if isinstance(parent, ast.Compare) or _test_arg(node, parent, parents, bound):
            continue
        if (
            isinstance(parent, ast.Call)
            and parent.func is node
            and len(parent.args) == 1
            and not parent.keywords
            and not isinstance(parent.args[0], ast.Starred)
        ):
            continue
        return (
            f"forbidden use of {name} other than as a base, a lookup X(value) or a test "
            "(an enum without members called with names makes a class from data)"
        )
    return None


def _builder_reason(tree: ast.AST, modules: dict[str, str], parents: dict[int, ast.AST]) -> str | None:
    """`dataclass` outside a class decorator, `TypedDict` other than as a class base, a `metaclass=` that is not
    an allowed module's metaclass."""
    for node, name in _member_uses(tree, modules, lambda m, n: (m, n) in _CODE_BUILDERS):
        where = _CODE_BUILDERS[tuple(name.rsplit(".", 1))]  # type: ignore[index]
        parent = parents.get(id(node))
        if where == "decorator":
            if isinstance(parent, ast.Call) and parent.func is node:
                node, parent = parent, parents.get(id(parent))
            if isinstance(parent, ast.ClassDef) and node in parent.decorator_list:
                continue
            return f"forbidden use of {name} other than as a class decorator (it turns names into code)"
        if not (isinstance(parent, ast.ClassDef) and node in parent.bases):
            return f"forbidden use of {name} other than as a class base (its functional form takes any keys)"
    allowed = {id(n) for n, _ in _metaclass_uses(tree, modules)}
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            for kw in node.keywords:
                if kw.arg is None or kw.arg == "metaclass" and id(kw.value) not in allowed:
                    return "forbidden metaclass: only an allowed module's (abc.ABCMeta, enum.EnumType, ...)"
    return None


def constructor_reason(tree: ast.AST, bound: set[str], modules: dict[str, str]) -> str | None:
    """Why `tree` may reach a constructor of classes or functions by `type` or a metaclass, or None.
    `bound`: the names the program binds (its own `type` is not the builtin); `modules`: local name -> module."""
    parents = _parents(tree)
    annotations = _annotation_ids(tree)
    if "type" not in bound:
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Name) and node.id == "type") or id(node) in annotations:
                continue
            parent = parents.get(id(node))
            if isinstance(parent, ast.Call) and parent.func is node:
                if len(parent.args) != 1 or parent.keywords or isinstance(parent.args[0], ast.Starred):
                    return "forbidden call: type() with more than one argument (write a class statement)"
                if not _type_result_ok(parent, parents, bound):
                    return (
                        "forbidden use of type(x): compare it, read its __name__ or pass it to isinstance "
                        "(a type is a constructor: type(f) builds functions, type(C) classes)"
                    )
            elif not (isinstance(parent, ast.Compare) or _test_arg(node, parent, parents, bound)):
                return "forbidden use of type other than type(x) (type is the class constructor)"
    for node, name in _metaclass_uses(tree, modules):
        if id(node) in annotations:
            continue
        parent = parents.get(id(node))
        if isinstance(parent, ast.keyword) and parent.arg == "metaclass":
            if isinstance(parents.get(id(parent)), ast.ClassDef):
                continue
        if _test_arg(node, parent, parents, bound) or isinstance(parent, ast.Compare):
            continue
        return f"forbidden use of {name} other than as metaclass= (a metaclass is a class constructor)"
    return _builder_reason(tree, modules, parents) or _enum_reason(tree, modules, parents, annotations, bound)


__all__ = [
    "CODE_ATTRS",
    "CODE_TYPES",
    "NAME_DUNDERS",
    "constructor_reason",
    "is_code_type",
    "memberless_enums",
    "metaclass_members",
    "store_reason",
]
