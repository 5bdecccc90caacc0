"""The capability policy: a static AST check that a program only computes (no I/O, no process control, no
reflection escape hatches, no nondeterminism sources), applied before anything reaches the sandbox.

The sandbox (populora.sandbox) is the security boundary; this policy is the *task* rule that keeps proposals
pure, deterministic and self-contained. It is an **allow-list**: a program may import only
the modules in `allow_modules`, use from them only public names that are not themselves modules (so
`collections._sys`, `typing.sys`, `dataclasses.inspect`, `codecs.builtins` are refused) and not listed in
`DENY_MODULE_ATTRS` (`codecs.open`), and use as free names only the builtins in `allow_names` (any name it
binds itself is fine). On top of that the older checks stay: the `deny_modules` names give the clearer
"forbidden import: os" message (and the prompt's banned list), dunder/escape attributes are refused
everywhere, and `getattr`-like calls (`getattr`, `setattr`, `delattr`, `hasattr`, `operator.attrgetter`,
`operator.methodcaller`) need a constant, non-dunder name. Strings never become code
(populora.tasks.reflection), and no program builds a function, a code object or a class from data or renames what it defines
(populora.tasks.constructors: no code-object or frame attribute, `type` and metaclasses only where they
cannot construct, no stores to `__name__`/`__qualname__`/`__doc__`). `allow_modules=None` / `allow_names=None`
switch the allow-lists off (tests that exercise the sandbox's own checks); the reflection and constructor
rules hold either way.
"""

from __future__ import annotations

import ast
import builtins
import importlib
import types
from dataclasses import dataclass
from functools import cache

from populora import pyparse
from populora.tasks.constructors import (
    CODE_ATTRS,
    NAME_DUNDERS,
    constructor_reason,
    is_code_type,
    store_reason,
)
from populora.tasks.reflection import (
    FORMAT_METHODS,
    annotation_reason,
    bound_dunder_reason,
    format_reason,
    underscore_reason,
)

DEFAULT_DENY_MODULES: frozenset[str] = frozenset(
    {
        # required by the issue
        "os",
        "sys",
        "subprocess",
        "socket",
        "shutil",
        "threading",
        "multiprocessing",
        "random",
        "time",
        "datetime",
        # AZR's banned list (paper Fig. 8)
        "logging",
        "pebble",
        "hashlib",
        "hmac",
        "bcrypt",
        "calendar",
        # I/O, processes, networking, interpreter internals, nondeterminism
        "importlib",
        "builtins",
        "ctypes",
        "cffi",
        "signal",
        "resource",
        "pathlib",
        "io",
        "tempfile",
        "pickle",
        "marshal",
        "shelve",
        "dbm",
        "sqlite3",
        "gc",
        "inspect",
        "asyncio",
        "concurrent",
        "_thread",
        "_io",
        "posix",
        "nt",
        "pwd",
        "grp",
        "fcntl",
        "mmap",
        "select",
        "selectors",
        "pty",
        "tty",
        "termios",
        "urllib",
        "http",
        "ftplib",
        "smtplib",
        "poplib",
        "imaplib",
        "telnetlib",
        "socketserver",
        "ssl",
        "xmlrpc",
        "webbrowser",
        "email",
        "requests",
        "secrets",
        "uuid",
        "glob",
        "zipfile",
        "tarfile",
        "gzip",
        "bz2",
        "lzma",
        "zlib",
        "code",
        "codeop",
        "pdb",
        "bdb",
        "trace",
        "traceback",
        "platform",
        "sysconfig",
        "site",
        "runpy",
        "zipimport",
        "pkgutil",
        "atexit",
        "faulthandler",
        "tracemalloc",
        "weakref",
        "copyreg",
        "timeit",
        "sched",
        "queue",
        "fileinput",
        "filecmp",
        "linecache",
        "tokenize",
        "dis",
        "opcode",
        "numpy",
        "torch",
        "pandas",
        "__future__",
    }
)

# Builtins that reach the interpreter itself or the file system. (`input`, `exit`, `help` are left out: they
# only fail inside the sandbox, and `input` is a common variable name in seed programs.)
DEFAULT_DENY_NAMES: frozenset[str] = frozenset(
    {
        "__import__",
        "exec",
        "eval",
        "compile",
        "open",
        "breakpoint",
        "globals",
        "locals",
        "vars",
        "__builtins__",
        "__loader__",
        "__spec__",
    }
)

# Attribute names that lead from any object to modules, frames or code (the classic sandbox escapes).
DEFAULT_DENY_ATTRS: frozenset[str] = frozenset(
    {
        "__subclasses__",
        "__globals__",
        "__builtins__",
        "__code__",
        "__closure__",
        "__bases__",
        "__base__",
        "__mro__",
        "__dict__",
        "__getattribute__",
        "__import__",
        "__loader__",
        "__spec__",
        "__reduce__",
        "__reduce_ex__",
        "__self__",
        "__func__",
        "__traceback__",
        "__frame__",
        "__module__",
        "__class__",
        "__init_subclass__",
        "__setattr__",
        "__delattr__",
        "__getattr__",
        "f_globals",
        "f_locals",
        "f_back",
        "f_builtins",
        "f_code",
        "gi_frame",
        "gi_code",
        "cr_frame",
        "ag_frame",
        "tb_frame",
        "tb_next",
        "co_code",
        "mro",
    }
    # every introspection attribute of code objects, frames, generators, coroutines, async generators and
    # tracebacks (issue 50: `cr_code` + `code.replace` + `type(fn)` built a function from data)
    | CODE_ATTRS
)

_REFLECTION_CALLS = {"getattr", "setattr", "delattr", "hasattr"}
# Take attribute names as strings (attrgetter: dotted), so they are reflection too.
_NAME_TAKING_CALLS = {"attrgetter", "methodcaller"}

#: The standard-library modules a task program may import: pure computation, no I/O, no clocks, no randomness,
#: no interpreter internals. (All are pre-imported by the sandbox, see populora.sandbox.DEFAULT_PRELOAD.)
DEFAULT_ALLOW_MODULES: frozenset[str] = frozenset(
    {
        "abc",
        "array",
        "bisect",
        "cmath",
        "collections",
        "collections.abc",
        "copy",
        "dataclasses",
        "decimal",
        "difflib",
        "enum",
        "fractions",
        "functools",
        "graphlib",
        "heapq",
        "itertools",
        "json",
        "keyword",
        "math",
        "numbers",
        "operator",
        "re",
        "statistics",
        "string",
        "struct",
        "textwrap",
        "typing",
        "unicodedata",
    }
)

#: Public names of allowed modules that still reach the outside world or the interpreter.
DENY_MODULE_ATTRS: dict[str, frozenset[str]] = {
    "json": frozenset({"load", "dump"}),  # take file objects
    "typing": frozenset({"get_type_hints", "ForwardRef"}),  # evaluate strings as code (eval)
    # register() reads a function's annotations through get_type_hints, which evaluates strings (issue 29)
    "functools": frozenset({"singledispatch", "singledispatchmethod"}),
    "string": frozenset({"Formatter"}),  # Formatter().get_field() walks attributes named in a string
}
# Issue 50: update_wrapper/wraps set and get attributes named by data (`assigned=`, `updated=`) and copy
# `__name__`/`__qualname__`/`__doc__`; make_dataclass builds a class from a namespace dict and a free-text name.
DENY_MODULE_ATTRS["functools"] |= {"update_wrapper", "wraps"}
DENY_MODULE_ATTRS["dataclasses"] = frozenset({"make_dataclass"})

#: The builtins a task program may name (a name the program binds itself is always fine).
DEFAULT_ALLOW_NAMES: frozenset[str] = frozenset(
    {
        "abs", "all", "any", "ascii", "bin", "bool", "bytearray", "bytes", "callable", "chr", "classmethod",
        "complex", "dict", "divmod", "enumerate", "filter", "float", "format", "frozenset", "getattr",
        "hasattr", "hash", "hex", "id", "int", "isinstance", "issubclass", "iter", "len", "list", "map",
        "max", "min", "next", "object", "oct", "ord", "pow", "print", "property", "range", "repr",
        "reversed", "round", "set", "setattr", "delattr", "slice", "sorted", "staticmethod", "str", "sum",
        "super", "tuple", "type", "zip", "aiter", "anext", "memoryview",
        "True", "False", "None", "Ellipsis", "NotImplemented", "__name__",
    }
    | {n for n in dir(builtins) if isinstance(getattr(builtins, n), type) and issubclass(getattr(builtins, n), BaseException)}
)  # fmt: skip


@cache
def _public_api(module: str) -> frozenset[str] | None:
    """The names `from module import name` / `module.name` may use: public (no leading underscore), not a
    module object, not in `DENY_MODULE_ATTRS`. Submodules that are themselves allowed are reached by their
    own dotted name, and constructors of code, functions or frames (`dataclasses.FunctionType`,
    `populora.tasks.constructors.CODE_TYPES`) are never public. None if the module cannot be imported here (then
    nothing from it is allowed)."""
    try:
        mod = importlib.import_module(module)
    except ImportError:
        return None
    deny = DENY_MODULE_ATTRS.get(module, frozenset())
    return frozenset(
        n
        for n in dir(mod)
        if not n.startswith("_")
        and n not in deny
        and not isinstance(getattr(mod, n, None), types.ModuleType)
        and not is_code_type(getattr(mod, n, None))
    )


def bound_names(tree: ast.AST) -> set[str]:
    """Every name the program binds anywhere (assignments, parameters, defs, imports, loop and with targets,
    comprehension and except variables, walrus, match captures, global/nonlocal)."""
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store | ast.Del):
            out.add(node.id)
        elif isinstance(node, ast.arg):
            out.add(node.arg)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            out.add(node.name)
        elif isinstance(node, ast.alias):
            out.add((node.asname or node.name).split(".")[0])
        elif isinstance(node, ast.ExceptHandler) and node.name:
            out.add(node.name)
        elif isinstance(node, ast.MatchAs | ast.MatchStar) and node.name:
            out.add(node.name)
        elif isinstance(node, ast.MatchMapping) and node.rest:
            out.add(node.rest)
        elif isinstance(node, ast.Global | ast.Nonlocal):
            out.update(node.names)
    return out


def _dunder(name: str) -> bool:
    return name.startswith("__") and name.endswith("__")


@dataclass(frozen=True)
class CapabilityPolicy:
    deny_modules: frozenset[str] = DEFAULT_DENY_MODULES
    deny_names: frozenset[str] = DEFAULT_DENY_NAMES
    deny_attrs: frozenset[str] = DEFAULT_DENY_ATTRS
    allow_modules: frozenset[str] | None = DEFAULT_ALLOW_MODULES
    allow_names: frozenset[str] | None = DEFAULT_ALLOW_NAMES
    allow_relative_imports: bool = False
    max_chars: int = 20_000

    def _module_denied(self, dotted: str) -> bool:
        parts = dotted.split(".")
        return any(".".join(parts[: i + 1]) in self.deny_modules for i in range(len(parts)))

    def _import_reason(self, dotted: str) -> str | None:
        if self._module_denied(dotted):
            return f"forbidden import: {dotted}"
        if self.allow_modules is not None and dotted not in self.allow_modules:
            return f"forbidden import: {dotted} (not an allowed module)"
        return None

    def _member_reason(self, module: str, name: str) -> str | None:
        """`module.name` or `from module import name`; None when allowed."""
        if self.allow_modules is None:
            return None
        if f"{module}.{name}" in self.allow_modules:
            return None  # an allowed submodule (collections.abc)
        api = _public_api(module)
        if api is None or name not in api:
            return f"forbidden attribute: {module}.{name} (not in the module's allowed names)"
        return None

    def _name_arg_reason(self, call: str, node: ast.Call) -> str | None:
        """getattr-like calls: every attribute name they take must be a constant string that is not a dunder
        or an escape attribute (attrgetter's dotted names are checked part by part)."""
        args = (
            node.args[1:2] if call in _REFLECTION_CALLS else node.args[: None if call == "attrgetter" else 1]
        )
        if call in _REFLECTION_CALLS and len(node.args) < 2:
            return f"forbidden call: {call} with a computed attribute name"
        if not args or node.keywords and call != "methodcaller":
            return f"forbidden call: {call} with a computed attribute name"
        for a in args:
            if not (isinstance(a, ast.Constant) and isinstance(a.value, str)):
                return f"forbidden call: {call} with a computed attribute name"
            for part in a.value.split(".") if call == "attrgetter" else (a.value,):
                why = underscore_reason(part, self.deny_attrs)
                if why:
                    return why
                if call in ("setattr", "delattr") and part in NAME_DUNDERS:
                    return f"forbidden store: .{part} (a program may not rename what it defines)"
                if part in FORMAT_METHODS:  # the receiver is unknown here: it may be a computed string
                    return f"forbidden call: {call} of {part} (call .{part} on a string literal)"
        return None

    def check(self, tree: ast.AST) -> str | None:
        """The first violation in `tree` as a short reason (e.g. `"forbidden import: os"`), or None."""
        modules: dict[str, str] = {}  # local name -> module it is bound to by an import
        name_calls: dict[str, str] = {}  # local name -> attrgetter/methodcaller imported from operator
        typing_names: dict[str, str] = {}  # local name -> typing member ("" for the typing module itself)
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    why = self._import_reason(alias.name)
                    if why:
                        return why
                    if alias.asname:
                        modules[alias.asname] = alias.name
                    else:
                        modules[alias.name.split(".")[0]] = alias.name.split(".")[0]
                    if alias.name == "typing":
                        typing_names[alias.asname or "typing"] = ""
            elif isinstance(node, ast.ImportFrom):
                if node.level and not self.allow_relative_imports:
                    return "forbidden import: relative import"
                mod = node.module or ""
                why = self._import_reason(mod)
                if why:
                    return why
                for alias in node.names:
                    if alias.name == "*":
                        return f"forbidden import: from {mod} import *"
                    if mod and self._module_denied(f"{mod}.{alias.name}"):
                        return f"forbidden import: {mod}.{alias.name}"
                    why = self._member_reason(mod, alias.name)
                    if why:
                        return why
                    if f"{mod}.{alias.name}" in (self.allow_modules or ()):
                        modules[alias.asname or alias.name] = f"{mod}.{alias.name}"
                    if mod == "operator" and alias.name in _NAME_TAKING_CALLS:
                        name_calls[alias.asname or alias.name] = alias.name
                    if mod == "typing":
                        typing_names[alias.asname or alias.name] = alias.name
        bound = bound_names(tree) if self.allow_names is not None else set()
        # The builtin generics take the same rule as typing's (`list["..."]` holds a forward reference too).
        all_bound = bound or bound_names(tree)
        for g in ("list", "dict", "tuple", "set", "frozenset", "type"):
            if g not in all_bound:
                typing_names.setdefault(g, g)
        # Routes from a string to code or to an attribute walk (populora.tasks.reflection, issue 29).
        for why in (
            bound_dunder_reason(tree),
            annotation_reason(tree, typing_names),
            format_reason(tree, self.deny_attrs),
            # `type`, the result of `type(x)` and metaclasses build classes and functions (issue 50)
            constructor_reason(tree, all_bound, modules),
        ):
            if why:
                return why
        # Nodes used directly as `X.attr` or `X(...)`: a module, getattr or attrgetter used any other way
        # (`c = collections; c._sys`, `g = getattr`) would hide what it reaches from the checks below.
        attr_bases = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
        callees = {id(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Name):
                if node.id in self.deny_names:
                    return f"forbidden name: {node.id}"
                if isinstance(node.ctx, ast.Load):
                    if node.id in modules and id(node) not in attr_bases:
                        return f"forbidden use of module {modules[node.id]} as a value"
                    if (
                        node.id in _REFLECTION_CALLS and node.id not in bound or node.id in name_calls
                    ) and id(node) not in callees:
                        return f"forbidden use of {node.id} other than in a direct call"
                if (
                    self.allow_names is not None
                    and isinstance(node.ctx, ast.Load)
                    and node.id not in bound
                    and node.id not in self.allow_names
                ):
                    return f"forbidden name: {node.id} (not an allowed builtin)"
            elif isinstance(node, ast.Attribute):
                is_module = isinstance(node.value, ast.Name) and node.value.id in modules
                # A module's members are checked against its public API below; any other object's
                # private and reflection attributes are refused here.
                if is_module and node.attr in self.deny_attrs:
                    return f"forbidden attribute: {node.attr}"
                why = None if is_module else underscore_reason(node.attr, self.deny_attrs)
                if why:
                    return why
                why = store_reason(node)
                if why:
                    return why
                if (
                    node.attr in _NAME_TAKING_CALLS
                    and isinstance(node.value, ast.Name)
                    and modules.get(node.value.id) == "operator"
                    and id(node) not in callees
                ):
                    return f"forbidden use of operator.{node.attr} other than in a direct call"
                if isinstance(node.value, ast.Name) and node.value.id in modules:
                    why = self._member_reason(modules[node.value.id], node.attr)
                    if why:
                        return why
                elif (
                    isinstance(node.value, ast.Attribute)
                    and isinstance(node.value.value, ast.Name)
                    and node.value.value.id in modules
                    and f"{modules[node.value.value.id]}.{node.value.attr}" in (self.allow_modules or ())
                ):  # collections.abc.X
                    why = self._member_reason(f"{modules[node.value.value.id]}.{node.value.attr}", node.attr)
                    if why:
                        return why
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                if node.name in self.deny_names:
                    return f"forbidden name: {node.name}"
            elif isinstance(node, ast.Call):
                call = None
                if isinstance(node.func, ast.Name) and node.func.id in _REFLECTION_CALLS:
                    call = node.func.id
                elif isinstance(node.func, ast.Name) and node.func.id in name_calls:
                    call = name_calls[node.func.id]
                elif (
                    isinstance(node.func, ast.Attribute)
                    and node.func.attr in _NAME_TAKING_CALLS
                    and isinstance(node.func.value, ast.Name)
                    and modules.get(node.func.value.id) == "operator"
                ):
                    call = node.func.attr
                if call:
                    why = self._name_arg_reason(call, node)
                    if why:
                        return why
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                # Strings naming escape routes are only useful to reflection (getattr on a computed name,
                # str.format's "{0.__class__}"): reject them, also inside a longer string.
                v = node.value
                if "__" in v and any(a in v for a in self.deny_attrs | self.deny_names if _dunder(a)):
                    return f"forbidden attribute: {v[:40]}"
        return None


DEFAULT_POLICY = CapabilityPolicy()


def parse_program(
    source: str, policy: CapabilityPolicy = DEFAULT_POLICY, *, require_params: bool = False
) -> tuple[ast.Module | None, str | None]:
    """Parse `source` and apply the policy: `(tree, None)` if allowed, else `(None, reason)`. Never raises.

    The program must define a top-level function `f` (classes, helpers and nested functions are allowed:
    AZR's single-def rule, bug B5, is not reproduced). `require_params` additionally asks for >= 1 parameter.
    """
    if not isinstance(source, str) or not source.strip():
        return None, "empty program"
    if len(source) > policy.max_chars:
        return None, f"program longer than {policy.max_chars} characters"
    try:
        tree = pyparse.parse(source)
    except Exception as e:  # SyntaxError, ValueError (null bytes), RecursionError/MemoryError (deep nesting)
        return None, f"syntax error ({type(e).__name__})"
    fdefs = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "f"]
    if not fdefs:
        return None, "no top-level function f"
    if require_params:
        a = fdefs[-1].args
        if not (a.posonlyargs or a.args or a.kwonlyargs or a.vararg or a.kwarg):
            return None, "f takes no parameters"
    try:
        reason = policy.check(tree)
    except RecursionError:
        return None, "program nested too deeply"
    if reason:
        return None, reason
    return tree, None
