"""The capability policy: a static AST check that a program only computes (no I/O, no process control, no
reflection escape hatches, no nondeterminism sources), applied before anything reaches the sandbox.

The sandbox (populora.sandbox) is the security boundary; this policy is the *task* rule that keeps proposals
deterministic and self-contained, and it is stricter than AZR's (its bug B3, README "Tasks"): it checks
`import x`, `import x.y`, `from x import y` and relative imports by dotted prefix, and it also rejects the
dynamic routes around an import check (`__import__`, `importlib`, `exec`/`eval`/`compile`, `open`,
`globals()`/`vars()`, `getattr(obj, "__dunder__")`, and attribute walks such as `__subclasses__`).
The deny-lists are configurable (`CapabilityPolicy(deny_modules=...)`).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

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
)

_REFLECTION_CALLS = {"getattr", "setattr", "delattr", "hasattr"}


@dataclass(frozen=True)
class CapabilityPolicy:
    deny_modules: frozenset[str] = DEFAULT_DENY_MODULES
    deny_names: frozenset[str] = DEFAULT_DENY_NAMES
    deny_attrs: frozenset[str] = DEFAULT_DENY_ATTRS
    allow_relative_imports: bool = False
    max_chars: int = 20_000

    def _module_denied(self, dotted: str) -> bool:
        parts = dotted.split(".")
        return any(".".join(parts[: i + 1]) in self.deny_modules for i in range(len(parts)))

    def check(self, tree: ast.AST) -> str | None:
        """The first violation in `tree` as a short reason (e.g. `"forbidden import: os"`), or None."""
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if self._module_denied(alias.name):
                        return f"forbidden import: {alias.name}"
            elif isinstance(node, ast.ImportFrom):
                if node.level and not self.allow_relative_imports:
                    return "forbidden import: relative import"
                mod = node.module or ""
                if self._module_denied(mod):
                    return f"forbidden import: {mod}"
                for alias in node.names:
                    if mod and self._module_denied(f"{mod}.{alias.name}"):
                        return f"forbidden import: {mod}.{alias.name}"
            elif isinstance(node, ast.Name):
                if node.id in self.deny_names:
                    return f"forbidden name: {node.id}"
            elif isinstance(node, ast.Attribute):
                if node.attr in self.deny_attrs:
                    return f"forbidden attribute: {node.attr}"
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                if node.name in self.deny_names:
                    return f"forbidden name: {node.name}"
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id in _REFLECTION_CALLS
            ):
                # getattr(x, "name") is ordinary code; a computed or dunder name is a way around the checks.
                if len(node.args) < 2 or not (
                    isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str)
                ):
                    return f"forbidden call: {node.func.id} with a computed attribute name"
                name = node.args[1].value
                if name in self.deny_attrs or (name.startswith("__") and name.endswith("__")):
                    return f"forbidden attribute: {name}"
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                # Dunder strings naming escape routes are only useful to reflection; reject them outright.
                v = node.value
                if v.startswith("__") and v.endswith("__") and (v in self.deny_attrs or v in self.deny_names):
                    return f"forbidden attribute: {v}"
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
        tree = ast.parse(source)
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
