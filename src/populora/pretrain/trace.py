"""Execution traces of generated programs: the scratchpad a code_o student writes before its answer.

A small model cannot run `str(n * 8)` in its head from the prompt alone (the bundled model's code_o accuracy
without a scratchpad stays near 12% however long it is pretrained), but it can take one small step at a time
when every step is written down next to the one before. `trace_lines` turns a generated program and an
input into those steps: first each parameter bound to its value, then each statement with its names
replaced by their values and reduced one innermost operation at a time, e.g.

    n = 1
    out = str(1 * 8) = str(8) = '8'

With `names` (`pretrain-tiny --trace-names`) a line first shows the expression as written,
`out = str(n * 8) = str(1 * 8) = str(8) = '8'`, so each name comes right before its value.

`render_trace` wraps them in a ```trace block, written before the ```output block; the task parsers read
the last ```output block only, so a trace changes nothing a reward sees. Only programs from our own
generator are traced (they are executed in-process, like `programs.run`); anything the tracer does not
understand gives no trace rather than a wrong one.

Programs with loops, branches or helpers (the graded generator's levels 2-5, `graded.py`) have no such
reduction trace. `state_trace_lines` gives them one of another kind, so that every code_o answer can carry a
trace (one answer style per task, issue 30): the program is run under `sys.settrace` and after every executed
line of f the names it changed are written as `name = value`, in execution order (a loop shows its variable and
accumulator at each turn). Long runs are cut after `MAX_STATE_LINES` lines with a `...` line, so the trace
stays short; the answer block after it is always the true output. `render_trace(..., general=True)` uses the
reduction trace where it exists and the state trace otherwise.
"""

from __future__ import annotations

import ast
import builtins
import sys

TRACE_LANG = "trace"
MAX_STEPS = 4  # reductions shown per statement; longer chains jump to the value
MAX_LINE = 100  # characters; a longer line is replaced by `name = value`
MAX_STATE_LINES = 16  # state-trace lines after the parameters; the rest of the run becomes one `...` line
MAX_STATE_EVENTS = 4_000  # line events before the state tracer gives up (our programs are bounded far below)

_BUILTINS = {name: getattr(builtins, name) for name in dir(builtins) if not name.startswith("_")}


def _is_literal(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant):
        return True
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return isinstance(node.operand, ast.Constant)
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        return all(_is_literal(e) for e in node.elts)
    if isinstance(node, ast.Dict):
        return all(k is not None and _is_literal(k) for k in node.keys) and all(
            _is_literal(v) for v in node.values
        )
    return False


def _literal(value: object) -> ast.expr:
    return ast.parse(repr(value), mode="eval").body


def _ready(node: ast.AST) -> bool:
    """Whether `node` can be evaluated in one step: its operands are literals (builtin names and
    comprehension bodies aside)."""
    if isinstance(node, (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)):
        return all(_is_literal(g.iter) for g in node.generators)
    if isinstance(node, ast.Call):
        func = node.func
        if isinstance(func, ast.Name):
            head_ok = func.id in _BUILTINS
        elif isinstance(func, ast.Attribute):
            head_ok = _is_literal(func.value)
        else:
            return False
        args = [*node.args, *(k.value for k in node.keywords)]
        return head_ok and all(_is_literal(a) or _is_builtin(a) or _ready_comprehension(a) for a in args)
    if isinstance(node, ast.Subscript):
        s = node.slice
        parts = [s.lower, s.upper, s.step] if isinstance(s, ast.Slice) else [s]
        return _is_literal(node.value) and all(p is None or _is_literal(p) for p in parts)
    if isinstance(node, (ast.BinOp, ast.BoolOp, ast.Compare, ast.UnaryOp, ast.IfExp)):
        return all(_is_literal(c) for c in ast.iter_child_nodes(node) if isinstance(c, ast.expr))
    return False


def _is_builtin(node: ast.AST) -> bool:
    return isinstance(node, ast.Name) and node.id in _BUILTINS


def _ready_comprehension(node: ast.AST) -> bool:
    """A lazy argument its call consumes in the same step: a generator, or `range(...)` of literals."""
    if isinstance(node, ast.Call) and _is_builtin(node.func) and node.func.id == "range":
        return all(_is_literal(a) for a in node.args) and not node.keywords
    return isinstance(node, ast.GeneratorExp) and _ready(node)


class _Substitute(ast.NodeTransformer):
    """Replace the names bound in `env` by their values, except names a comprehension binds itself."""

    def __init__(self, env: dict[str, object]):
        self.env = env
        self.bound: set[str] = set()

    def visit_Name(self, node: ast.Name) -> ast.AST:
        if node.id in self.env and node.id not in self.bound:
            return ast.copy_location(_literal(self.env[node.id]), node)
        return node

    def _comprehension(self, node: ast.AST) -> ast.AST:
        # A generator's iterable is evaluated outside the comprehension's own names.
        for gen in node.generators:
            gen.iter = self.visit(gen.iter)
        saved = set(self.bound)
        self.bound |= {n.id for g in node.generators for n in ast.walk(g.target) if isinstance(n, ast.Name)}
        for gen in node.generators:
            gen.ifs = [self.visit(c) for c in gen.ifs]
        for field in ("elt", "key", "value"):
            if getattr(node, field, None) is not None:
                setattr(node, field, self.visit(getattr(node, field)))
        self.bound = saved
        return node

    visit_ListComp = visit_SetComp = visit_GeneratorExp = visit_DictComp = _comprehension


class _ReduceOne(ast.NodeTransformer):
    """Evaluate the first ready node in evaluation order (left to right, innermost first), under the misreadings
    `flaws` when given (`flaws.py`: the trace a misconceived student writes)."""

    def __init__(self, flaws: tuple[str, ...] = ()):
        self.done = False
        self.flaws = flaws

    def generic_visit(self, node: ast.AST) -> ast.AST:
        if self.done:
            return node
        if not isinstance(node, (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp, ast.Lambda)):
            node = super().generic_visit(node)
        if not self.done and isinstance(node, ast.expr) and not _is_literal(node) and _ready(node):
            if _ready_comprehension(node):
                return node  # a lazy argument is consumed by its call, in the same step
            value = _eval(node, {}, self.flaws)
            self.done = True
            return ast.copy_location(_literal(value), node)
        return node


def reduction_steps(
    expr: ast.expr, env: dict[str, object], value: object, names: bool = False, flaws: tuple[str, ...] = ()
) -> list[str]:
    """The expression with its names replaced, then after each one-operation reduction, ending in the value's
    repr. Falls back to just the value when a step does not go as planned. `names`: start with the expression
    as written when it has names (`n + m = 4 + 1 = 5`), so each value is written right after its name's turn."""
    written = ast.unparse(expr)
    node = _Substitute(env).visit(ast.fix_missing_locations(ast.parse(written, mode="eval").body))
    steps = [ast.unparse(node)]
    final = repr(value)
    for _ in range(MAX_STEPS + 1):
        if _is_literal(node):
            break
        reducer = _ReduceOne(flaws)
        node = reducer.visit(node)
        if not reducer.done:
            return [final]
        steps.append(ast.unparse(node))
    if steps[-1] != final:
        if _is_literal(node):
            return [final]  # a reduction disagreed with the real run: show no working
        steps.append(final)  # too many steps: jump to the value
    if names and written != steps[0] and steps != [final]:
        steps.insert(0, written)
    return steps


def trace_lines(
    program: str, input_text: str, names: bool = False, flaws: tuple[str, ...] = ()
) -> list[str] | None:
    """The trace of `f(*input)` for a generated straight-line program, or None when it has statements this
    tracer does not show (loops, if/else, helpers) or anything fails. `flaws`: evaluated under those
    misreadings (`flaws.py`)."""
    try:
        fn_def = ast.parse(program).body[0]
        args = eval(f"({input_text},)", {"__builtins__": {}})  # noqa: S307 - literal text we generated
        if not isinstance(fn_def, ast.FunctionDef) or len(args) != len(fn_def.args.args):
            return None
        env: dict[str, object] = {a.arg: v for a, v in zip(fn_def.args.args, args, strict=True)}
        lines = [f"{name} = {value!r}" for name, value in env.items()]
        for stmt in fn_def.body:
            if isinstance(stmt, ast.Return):
                if stmt.value is None or isinstance(stmt.value, ast.Name):
                    return lines
                value = _eval(stmt.value, env, flaws)
                lines.append("return " + " = ".join(reduction_steps(stmt.value, env, value, names, flaws)))
                return lines
            if not (
                isinstance(stmt, ast.Assign)
                and len(stmt.targets) == 1
                and isinstance(stmt.targets[0], ast.Name)
            ):
                return None
            name = stmt.targets[0].id
            value = _eval(stmt.value, env, flaws)
            steps = reduction_steps(stmt.value, env, value, names, flaws)
            line = f"{name} = " + " = ".join(steps)
            lines.append(line if len(line) <= MAX_LINE else f"{name} = {value!r}")
            env[name] = value
        return None  # no return statement
    except Exception:
        return None


def _eval(expr: ast.expr, env: dict[str, object], flaws: tuple[str, ...] = ()) -> object:
    if flaws:
        from populora.pretrain.flaws import HELPERS, misread_tree

        expr = misread_tree(ast.Expression(body=expr), flaws).body
        env = {**HELPERS, **env}
    code = compile(ast.fix_missing_locations(ast.Expression(body=expr)), "<trace>", "eval")
    return eval(code, {"__builtins__": _BUILTINS, **env})  # noqa: S307 - our own generated code


def state_trace_lines(program: str, input_text: str, flaws: tuple[str, ...] = ()) -> list[str] | None:
    """The state trace of `f(*input)`: the parameters, then `name = value` for each name of f that an executed
    line changed, in order, cut after `MAX_STATE_LINES` lines (then a `...` line); None when the run fails.
    Only f's own frame is shown (helpers and comprehensions run inside one line of f)."""
    try:
        tree = ast.parse(program)
        fn_def = tree.body[0]
        args = eval(f"({input_text},)", {"__builtins__": {}})  # noqa: S307 - literal text we generated
        if not isinstance(fn_def, ast.FunctionDef) or len(args) != len(fn_def.args.args):
            return None
        params = [a.arg for a in fn_def.args.args]
        namespace: dict[str, object] = {"__builtins__": _BUILTINS}
        if flaws:
            from populora.pretrain.flaws import HELPERS, misread_tree

            tree = misread_tree(tree, flaws)
            namespace.update(HELPERS)
        exec(compile(tree, "<trace>", "exec"), namespace)  # noqa: S102 - our own generated code
        fn = namespace["f"]
    except Exception:
        return None
    lines = [f"{name} = {value!r}" for name, value in zip(params, args, strict=True)]
    shown: list[str] = []
    last: dict[str, str] = {name: repr(value) for name, value in zip(params, args, strict=True)}
    state = {"events": 0, "cut": False}

    def snapshot(frame) -> None:
        for name, value in frame.f_locals.items():
            if callable(value) or name.startswith("."):
                continue  # helper functions defined in f; comprehension internals
            text = repr(value)
            if last.get(name) != text:
                last[name] = text
                if len(shown) >= MAX_STATE_LINES:
                    state["cut"] = True
                    continue
                line = f"{name} = {text}"
                if len(line) <= MAX_LINE:
                    shown.append(line)

    def local(frame, event, arg):
        state["events"] += 1
        if state["events"] > MAX_STATE_EVENTS:
            raise RuntimeError("state trace too long")
        if event in ("line", "return"):
            snapshot(frame)
        return local

    def tracer(frame, event, arg):
        # Only f's own frame is traced line by line; helpers and comprehensions run inside one of its lines.
        return local if frame.f_code is fn.__code__ else None

    old = sys.gettrace()
    sys.settrace(tracer)
    try:
        fn(*args)
    except Exception:
        return None
    finally:
        sys.settrace(old)
    return lines + shown + (["..."] if state["cut"] else [])


def render_trace(
    program: str, input_text: str, general: bool = False, names: bool = False, flaws: tuple[str, ...] = ()
) -> str:
    """ "```trace\\n...\\n```\\n" to put before the answer block, or "" when the program has no trace.
    `general`: fall back to the state trace (`state_trace_lines`) for programs the reduction trace does not
    cover (loops, branches, helpers), so every program that runs gets a trace. `flaws`: the trace a student
    with those misconceptions writes (`flaws.py`)."""
    lines = trace_lines(program, input_text, names, flaws)
    if lines is None and general:
        lines = state_trace_lines(program, input_text, flaws)
    return f"```{TRACE_LANG}\n" + "\n".join(lines) + "\n```\n" if lines else ""
