"""Planted misconceptions: program features a "misconceived reader" of Python gets consistently wrong.

A world where RL with verifiable rewards must show is one where the model samples the right answer often but
prefers one consistent wrong answer, for a reason that generalises across programs (issue 49). Each class here is
such a reason: one feature of the generator's programs, and the wrong semantics a plausible misreading gives it.

| class | the misreading | the truth |
|---|---|---|
| `range_end_inclusive` | `range(a, b)` stops at `b` inclusive | it stops before `b` |
| `slice_end_inclusive` | `s[a:b]` includes index `b` | it ends before `b` |
| `reverse_slice_forwards` | `s[::-1]` is `s` read forwards | it is `s` reversed |
| `sorted_reverse_ignored` | `sorted(x, reverse=True)` is ascending | it is descending |
| `mod_as_quotient` | `a % b` is the quotient (remainder and quotient confused) | it is the remainder |
| `floordiv_rounds` | `a // b` rounds `a / b` to the nearest int (halves up) | it rounds down |

`misread(code, classes)` rewrites a program so that running it gives the misconceived reader's answer: every
node of a class becomes a call to a helper with the wrong semantics (names starting `__flaw_`, which no
generated program uses); line numbers are kept, so a state trace of the misread program is line for line the
trace a misconceived student writes. `run_misread` runs it as the generator runs programs (bounded, plain-data
outputs only). `changed_by(code, input)` lists the classes whose misreading changes the output on that input:
an example "carries" a class only then, since elsewhere the misconception is invisible.

Only the corpus and the misconception probe use this module; nothing here touches a run or the sandbox (the
programs are our own generator's, executed in-process like `programs.run`).
"""

from __future__ import annotations

import ast
import copy
import functools
import random
from collections.abc import Iterable
from dataclasses import dataclass

from populora.names import FLAW_CLASSES

CLASSES: tuple[str, ...] = FLAW_CLASSES  # the names live in populora.names: run-folder checks read them
DESCRIPTIONS: dict[str, str] = {
    "range_end_inclusive": "range(a, b) read as stopping at b inclusive",
    "slice_end_inclusive": "s[a:b] read as including index b",
    "reverse_slice_forwards": "s[::-1] read as s forwards",
    "sorted_reverse_ignored": "sorted(x, reverse=True) read as ascending",
    "mod_as_quotient": "a % b read as the quotient a // b",
    "floordiv_rounds": "a // b read as rounding a / b to the nearest int",
}


class FlawError(ValueError):
    """An unknown class name; the message lists the known ones."""


def check_classes(classes: Iterable[str]) -> tuple[str, ...]:
    out = tuple(classes)
    bad = [c for c in out if c not in CLASSES]
    if bad:
        raise FlawError(f"unknown misconception class {bad[0]!r}; the classes are {', '.join(CLASSES)}")
    return out


# ---------------------------------------------------------------------------------------------------
# The misconceived reader's semantics


def _flaw_range(*args):
    r = range(*args)
    return range(r.start, r.stop + (1 if r.step > 0 else -1), r.step)


def _flaw_slice(value, lower, upper):
    # s[a:b] read as s[a:b+1]; b == -1 then means "to the end" (s[a:0] would be empty)
    return value[lower:None] if upper == -1 else value[lower : upper + 1]


def _flaw_forwards(value):
    return value[::1]


def _both_ints(a, b) -> bool:
    return type(a) is int and type(b) is int and b != 0


def _flaw_mod(a, b):
    # the remainder read as the quotient
    return a // b if _both_ints(a, b) else a % b


def _flaw_floordiv(a, b):
    # a / b rounded to the nearest int, halves up: floor(a / b + 1/2), exactly, in ints
    if not _both_ints(a, b):
        return a // b
    return (2 * a + b) // (2 * b) if b > 0 else (-2 * a - b) // (-2 * b)


HELPERS: dict[str, object] = {
    "__flaw_range": _flaw_range,
    "__flaw_slice": _flaw_slice,
    "__flaw_forwards": _flaw_forwards,
    "__flaw_mod": _flaw_mod,
    "__flaw_floordiv": _flaw_floordiv,
}


def misread_source(code: str, classes: Iterable[str]) -> str:
    """The misread program as source that runs on its own (the helpers' definitions first): what the sandbox
    runs to read a *model's* program the misconceived way. `compile_misread` runs only our generated programs
    in this process; a teacher's program never runs outside the sandbox."""
    import inspect

    helpers = [inspect.getsource(fn) for fn in (_both_ints, *HELPERS.values())]
    names = [f"{alias} = {fn.__name__}" for alias, fn in HELPERS.items()]
    return "\n".join([*helpers, *names, ast.unparse(misread(code, classes))]) + "\n"


def _call(name: str, args: list[ast.expr], like: ast.AST) -> ast.Call:
    return ast.copy_location(ast.Call(func=ast.Name(id=name, ctx=ast.Load()), args=args, keywords=[]), like)


def _is_minus_one(node: ast.AST | None) -> bool:
    return (
        isinstance(node, ast.UnaryOp)
        and isinstance(node.op, ast.USub)
        and isinstance(node.operand, ast.Constant)
        and node.operand.value == 1
    ) or (isinstance(node, ast.Constant) and node.value == -1)


class _Misread(ast.NodeTransformer):
    """Rewrite the nodes of the chosen classes into calls to the misconceived helpers."""

    def __init__(self, classes: tuple[str, ...]):
        self.on = set(classes)

    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        if "range_end_inclusive" in self.on and isinstance(node.func, ast.Name) and node.func.id == "range":
            return _call("__flaw_range", node.args, node)
        if "sorted_reverse_ignored" in self.on and any(k.arg == "reverse" for k in node.keywords):
            node.keywords = [k for k in node.keywords if k.arg != "reverse"]
        return node

    def visit_Subscript(self, node: ast.Subscript) -> ast.AST:
        self.generic_visit(node)
        s = node.slice
        if not isinstance(s, ast.Slice) or not isinstance(node.ctx, ast.Load):
            return node
        if (
            "reverse_slice_forwards" in self.on
            and s.lower is None
            and s.upper is None
            and _is_minus_one(s.step)
        ):
            return _call("__flaw_forwards", [node.value], node)
        if "slice_end_inclusive" in self.on and s.upper is not None and s.step is None:
            lower = s.lower if s.lower is not None else ast.Constant(value=None)
            return _call("__flaw_slice", [node.value, lower, s.upper], node)
        return node

    def _binop(self, op: ast.operator) -> str | None:
        if isinstance(op, ast.Mod) and "mod_as_quotient" in self.on:
            return "__flaw_mod"
        if isinstance(op, ast.FloorDiv) and "floordiv_rounds" in self.on:
            return "__flaw_floordiv"
        return None

    def visit_BinOp(self, node: ast.BinOp) -> ast.AST:
        self.generic_visit(node)
        name = self._binop(node.op)
        return _call(name, [node.left, node.right], node) if name else node

    def visit_AugAssign(self, node: ast.AugAssign) -> ast.AST:
        self.generic_visit(node)
        name = self._binop(node.op)
        if not name or not isinstance(node.target, ast.Name):
            return node
        read = ast.Name(id=node.target.id, ctx=ast.Load())
        value = _call(name, [read, node.value], node)
        return ast.copy_location(ast.Assign(targets=[node.target], value=value), node)


def misread_tree(tree: ast.AST, classes: Iterable[str]) -> ast.AST:
    """`tree` (a copy) with every node of `classes` rewritten to the misconceived semantics."""
    out = _Misread(check_classes(classes)).visit(copy.deepcopy(tree))
    return ast.fix_missing_locations(out)


def has_feature(code: str, flaw: str) -> bool:
    """Whether the program has a node the misreading `flaw` rewrites (whether it changes an output depends on
    the input: `changed_by`)."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return False
    return ast.dump(misread_tree(tree, (flaw,))) != ast.dump(tree)


def misread(code: str, classes: Iterable[str]) -> ast.Module:
    return misread_tree(ast.parse(code), classes)


@functools.lru_cache(maxsize=256)
def _compiled(code: str, classes: tuple[str, ...]):
    namespace: dict[str, object] = dict(HELPERS)
    exec(compile(misread(code, classes), "<misread>", "exec"), namespace)  # noqa: S102 - our own generated code
    return namespace["f"]


def compile_misread(code: str, classes: Iterable[str]):
    """The misread program's `f` (helpers in its globals); cached, as the corpus asks for the same program's
    misreadings on many inputs."""
    return _compiled(code, tuple(classes))


def run_misread(code: str, input_text: str, classes: Iterable[str]) -> str | None:
    """The misconceived reader's output repr for `f(*input)`, as `graded.run_bounded` gives the true one."""
    from populora.pretrain.graded import run_bounded

    classes = check_classes(classes)  # a wrong name is the caller's error, not a program that fails
    try:
        fn = compile_misread(code, classes)
    except Exception:
        return None
    return run_bounded(fn, input_text)


def changed_by(code: str, input_text: str, output: str | None = None) -> tuple[str, ...]:
    """The classes whose misreading, alone, changes `f(*input)` (and still gives an output)."""
    from populora.pretrain.graded import run_bounded

    if output is None:
        output = run_bounded(_compiled(code, ()), input_text)
    out = []
    for c in CLASSES:
        wrong = run_misread(code, input_text, (c,))
        if wrong is not None and output is not None and wrong != output:
            out.append(c)
    return tuple(out)


# ---------------------------------------------------------------------------------------------------
# Items: one program, one class, the right answer and the misconceived one


@dataclass(frozen=True)
class FlawItem:
    """A code_o or code_i question on a program that carries exactly one class on it.

    code_o: `shown` is the input; `right` the true output, `wrong` the misconceived reader's output.
    code_i: `shown` is an output; `right` an input that gives it, `wrong` an input that gives it only under the
    misreading (the answer a misconceived student writes, wrong when run)."""

    task: str
    flaw: str
    program: str
    shown: str
    right: str
    wrong: str
    level: int
    message: str = ""


_GUESSABLE = ("True", "False")  # a bool answer is right or misconceived half the time by chance: no reading


def code_o_item(program: str, level: int, message: str, pairs, flaw: str | None = None) -> FlawItem | None:
    """From a program and its (input, output) pairs: the first input on which exactly one class changes the
    output (that class, when `flaw` is given), the output not a bool."""
    for text, out in pairs:
        if out in _GUESSABLE:
            continue
        changed = changed_by(program, text, out)
        if len(changed) == 1 and (flaw is None or changed[0] == flaw):
            wrong = run_misread(program, text, changed)
            return FlawItem("code_o", changed[0], program, text, out, wrong, level, message)
    return None


def _neighbours(value: object) -> list[object]:
    """Small edits of one argument, the kind a misreading shifts an answer by (off by one, a reversal, one
    element more or less)."""
    if isinstance(value, bool):
        return []
    if isinstance(value, int):
        return [value + d for d in (1, -1, 2, -2, 3, -3)] + [-value, 2 * value, value // 2]
    if isinstance(value, str):
        return [value[:-1], value[1:], value[::-1], value + value[-1:], value[:1] + value]
    if isinstance(value, list):
        out: list[object] = [value[:-1], value[1:], value[::-1], sorted(value), value + value[-1:]]
        if all(type(v) is int for v in value):
            out += [[v + d for v in value] for d in (1, -1)]
            out += [value[:i] + [value[i] + d] + value[i + 1 :] for i in range(len(value)) for d in (1, -1)]
        return out
    return []


def code_i_item(program: str, level: int, message: str, pairs, flaw: str | None = None) -> FlawItem | None:
    """From a program and its (input, output) pairs: an output y = f(x*) (x* is the right answer) and an input
    x, a small edit of x*, that the misreading maps to y while f(x) != y (the misconceived answer), where exactly
    one class changes f(x); y not a bool."""
    from populora.pretrain import programs as P
    from populora.pretrain.graded import MAX_INPUT_CHARS, run_bounded

    fn = _compiled(program, ())
    for right, y in pairs:
        if y in _GUESSABLE:
            continue
        args = eval(f"({right},)", {"__builtins__": {}})  # noqa: S307 - literal text we generated
        for i, arg in enumerate(args):
            for edit in _neighbours(arg):
                text = P.input_text([*args[:i], edit, *args[i + 1 :]])
                if text == right or len(text) > MAX_INPUT_CHARS:
                    continue
                out = run_bounded(fn, text)
                if out is None or out == y:
                    continue
                if flaw is not None and run_misread(program, text, (flaw,)) != y:
                    continue  # the wanted misreading does not give y: skip the other classes' runs
                changed = changed_by(program, text, out)
                if len(changed) != 1 or (flaw is not None and changed[0] != flaw):
                    continue
                if run_misread(program, text, changed) == y:
                    return FlawItem("code_i", changed[0], program, y, right, text, level, message)
    return None


def sample_flaw_item(
    rng: random.Random,
    task: str,
    levels: tuple[int, ...],
    split: str = "train",
    flaw: str | None = None,
    n_inputs: int = 4,
    max_tries: int = 400,
) -> FlawItem:
    """A graded program from `split` at one of `levels` that carries a class (`flaw`, or any) on some input,
    as a `task` item; redraws until one does (`max_tries` programs, then FlawError)."""
    from populora.pretrain.graded import sample_graded

    if task not in ("code_o", "code_i"):
        raise FlawError(f"misconception items are code_o or code_i, not {task!r}")
    if flaw is not None:
        check_classes([flaw])
    make = code_o_item if task == "code_o" else code_i_item
    for _ in range(max_tries):
        accept = functools.partial(has_feature, flaw=flaw) if flaw else None
        g = sample_graded(rng, rng.choice(levels), split=split, n_inputs=n_inputs, accept=accept)
        item = make(g.code, g.level, g.message, g.pairs, flaw)
        if item is not None:
            return item
    raise FlawError(f"no {task} program carrying {flaw or 'a class'} in {max_tries} draws at levels {levels}")


# Classes whose misreading has a natural code_i form (an input the misreading maps onto the shown output).
# `sorted(x, reverse=True)` has none: what it returns is descending, which the misreading never produces.
CODE_I_CLASSES: tuple[str, ...] = tuple(c for c in CLASSES if c != "sorted_reverse_ignored")


def task_classes(task: str, classes: Iterable[str] = CLASSES) -> tuple[str, ...]:
    """Those of `classes` that `task` has a natural form for (code_i: `CODE_I_CLASSES`); FlawError if none."""
    allowed = CODE_I_CLASSES if task == "code_i" else CLASSES
    out = tuple(c for c in check_classes(classes) if c in allowed)
    if not out:
        raise FlawError(f"none of the classes has a {task} form; {task} takes {', '.join(allowed)}")
    return out


class FlawDrill:
    """A class-balanced stream of items for the corpus: each draw picks a class uniformly from `classes` (those
    the task has a natural form for), then draws graded programs from the "train" split until one carries it (a
    rare class costs more draws: up to 0.3 s an item measured here). Deterministic for a given `rng`."""

    def __init__(
        self, rng: random.Random, task: str, levels: tuple[int, ...], classes: Iterable[str] = CLASSES
    ):
        self.classes = task_classes(task, classes)
        self.rng, self.task, self.levels = rng, task, levels
        self.queues: dict[str, list[FlawItem]] = {c: [] for c in self.classes}

    def _fill(self, want: str) -> None:
        from populora.pretrain.graded import sample_graded

        g = sample_graded(
            self.rng,
            self.rng.choice(self.levels),
            split="train",
            n_inputs=4,
            accept=functools.partial(has_feature, flaw=want),
        )
        make = code_o_item if self.task == "code_o" else code_i_item
        item = make(g.code, g.level, g.message, g.pairs, want)
        if item is not None:
            self.queues[want].append(item)

    def next(self) -> FlawItem:
        c = self.rng.choice(self.classes)
        while not self.queues[c]:
            self._fill(c)
        return self.queues[c].pop(0)
