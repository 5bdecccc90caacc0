"""The code base's structure: no import loops between packages, one module of fixed names that imports
nothing, and the config's vocabulary agreeing with the registries it names."""

from __future__ import annotations

import ast
from pathlib import Path

import populora

SRC = Path(populora.__file__).parent


def _unit(module: str) -> str:
    """The package a module belongs to: `populora.train.trainer` -> `populora.train`; a top-level module
    (`populora.config`) is its own unit."""
    parts = module.split(".")
    return ".".join(parts[:2])


def _module_name(path: Path) -> str:
    rel = path.relative_to(SRC.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path) -> set[str]:
    """Every populora module `path` imports, at the top or inside a function (a lazy import still loops)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    own = _module_name(path)
    package = own if path.name == "__init__.py" else own.rsplit(".", 1)[0]
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            out.add(mod)
            out |= {f"{mod}.{a.name}" for a in node.names}  # `from populora import tasks`
    return {m for m in out if m == "populora" or m.startswith("populora.")}


def package_graph() -> dict[str, set[str]]:
    modules = {_module_name(p) for p in SRC.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for path in SRC.rglob("*.py"):
        src = _unit(_module_name(path))
        for mod in _imports(path):
            while mod not in modules and "." in mod:  # `populora.tasks.get` -> `populora.tasks`
                mod = mod.rsplit(".", 1)[0]
            dst = _unit(mod)
            if dst != src and dst != "populora":
                graph.setdefault(src, set()).add(dst)
    return graph


def module_graph(package: str) -> dict[str, set[str]]:
    """Module -> modules of the same package it imports (to find loops inside one package)."""
    graph: dict[str, set[str]] = {}
    for path in (SRC / package.split(".", 1)[1]).glob("*.py"):
        src = _module_name(path)
        for mod in _imports(path):
            if mod.startswith(package + ".") and mod.count(".") == package.count(".") + 1 and mod != src:
                if (SRC.parent / (mod.replace(".", "/") + ".py")).exists():
                    graph.setdefault(src, set()).add(mod)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(n: str) -> list[str] | None:
        state[n] = 1
        stack.append(n)
        for m in sorted(graph.get(n, ())):
            if state.get(m) == 1:
                return stack[stack.index(m) :] + [m]
            if m not in state and (found := visit(m)):
                return found
        stack.pop()
        state[n] = 2
        return None

    for n in sorted(graph):
        if n not in state and (found := visit(n)):
            return found
    return None


def test_no_package_imports_another_in_a_loop():
    cycle = find_cycle(package_graph())
    assert cycle is None, "import loop between packages: " + " -> ".join(cycle)


def test_no_module_imports_another_of_its_package_in_a_loop():
    packages = sorted({_unit(_module_name(p)) for p in SRC.rglob("*.py") if p.parent != SRC})
    for package in packages:
        cycle = find_cycle(module_graph(package))
        assert cycle is None, f"import loop inside {package}: " + " -> ".join(cycle)


def test_the_cycle_finder_finds_a_loop():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": {"c"}}) is None


def test_names_imports_nothing():
    tree = ast.parse((SRC / "names.py").read_text())
    imports = [n for n in ast.walk(tree) if isinstance(n, ast.Import | ast.ImportFrom)]
    assert [ast.unparse(n) for n in imports if ast.unparse(n) != "from __future__ import annotations"] == []


def test_nothing_imports_the_trainer_or_the_cli():
    graph = package_graph()
    users = sorted(src for src, dsts in graph.items() if dsts & {"populora.train", "populora.cli"})
    # The CLI loads each package's commands.py by path, not by import; the experiments sit on top of the
    # trainer (they run trainings) and nothing imports them.
    assert users == ["populora.experiment"], users
    assert not [src for src, dsts in graph.items() if "populora.experiment" in dsts]


MAX_LINES = 700  # issue 52: a room a maintainer can read in one sitting; split along a seam past it


def test_no_source_file_is_over_700_lines():
    root = SRC.parent.parent
    files = [*SRC.rglob("*.py"), *(root / "bench").glob("*.py")]
    long = {str(p.relative_to(root)): n for p in files if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, f"over {MAX_LINES} lines (split each along a seam, docs/architecture.md): {long}"
