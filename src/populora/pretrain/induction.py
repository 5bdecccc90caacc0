"""`populora bench tiny-model --induction`: why a tiny model's code_f answers miss.

code_f is induction: the student sees the first half of a program's input/output pairs and the message, writes
`f`, and is right iff its `f` gives the hidden half. For each code_f item of the graded probe (per level) the
student's greedy program is set beside the gold one in two ways:

- **behaviour**, in the real sandbox: does it give the outputs of the pairs it was *shown*? A wrong answer that
  does is an item whose shown pairs allow another program (an ambiguous item); one that does not is a failed
  induction (the model wrote a program it did not check against what it saw).
- **structure**, from the two programs' syntax trees: the parameters it reads, the operations it uses
  (operators, comparisons, calls and methods, subscripts and slices, loops and branches), its literal constants,
  and its shape with constants masked and names numbered (`n * 8` and `n * 3` have one shape).

Each wrong program gets one kind, the first that applies (`miss_kind`): it fits the shown pairs, it reads other
arguments, uses other operations, other constants, or puts the same parts together differently.

Pure helpers (`program_features`, `compare`, `miss_kind`, `shown_only`) are tested on hand-made programs; `run_induction`
scores a model on the graded probe and writes JSON.
"""

from __future__ import annotations

import ast
import json
import time
from dataclasses import dataclass
from pathlib import Path

from populora import pyparse
from populora.paths import TINY_MODEL_DIR as ASSET_DIR
from populora.pretrain.tasks_render import TEMPLATE

DEFAULT_INDUCTION_OUT = Path("bench/results/tiny_model_induction.json")
ASPECTS = ("reads", "operations", "constants", "shape")

_SYMBOLS = {
    ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//", ast.Mod: "%", ast.Pow: "**",
    ast.USub: "neg", ast.UAdd: "pos", ast.Not: "not", ast.Invert: "~",
    ast.And: "and", ast.Or: "or",
    ast.Eq: "==", ast.NotEq: "!=", ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=",
    ast.In: "in", ast.NotIn: "not in", ast.Is: "is", ast.IsNot: "is not",
}  # fmt: skip
# statements and expressions that are an operation by themselves (a loop, a branch, a comprehension)
_CONTROL = (ast.For, ast.While, ast.If, ast.IfExp, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)


@dataclass(frozen=True)
class ProgramFeatures:
    """What `compare` reads of a program's `f`: the parameters its body reads, its operations, the reprs of
    its literal constants, and its shape (the body's syntax tree with constants masked, parameters named by
    position and other names by first appearance)."""

    reads: frozenset[str]
    operations: frozenset[str]
    constants: frozenset[str]
    shape: str


def _function(source: str) -> ast.FunctionDef | None:
    try:
        tree = pyparse.parse(source)
    except (SyntaxError, ValueError):
        return None
    fns = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "f"]
    return fns[-1] if fns else None  # the last `f`, the one a call would run


def _operation(node: ast.AST) -> str | None:
    if isinstance(node, ast.BinOp | ast.UnaryOp | ast.BoolOp | ast.AugAssign):  # `t += x` is a `+`
        return _SYMBOLS.get(type(node.op), type(node.op).__name__)
    if isinstance(node, ast.Call):
        func = node.func
        if isinstance(func, ast.Name):
            return f"{func.id}()"
        if isinstance(func, ast.Attribute):
            return f".{func.attr}()"
        return "call"
    if isinstance(node, ast.Subscript):
        return "[:]" if isinstance(node.slice, ast.Slice) else "[]"
    if isinstance(node, _CONTROL):
        return type(node).__name__.lower()
    return None


def program_features(source: str) -> ProgramFeatures | None:
    """The features of `source`'s function `f`; None when it does not parse or defines no `f`."""
    fn = _function(source)
    if fn is None:
        return None
    params = [a.arg for a in (*fn.args.posonlyargs, *fn.args.args)]
    reads, ops, constants = set(), set(), set()
    for node in ast.walk(fn):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id in params:
            reads.add(node.id)
        elif isinstance(node, ast.Compare):
            ops.update(_SYMBOLS.get(type(o), type(o).__name__) for o in node.ops)
        elif isinstance(node, ast.Constant):
            constants.add(repr(node.value))
        op = _operation(node)
        if op is not None:
            ops.add(op)
    return ProgramFeatures(frozenset(reads), frozenset(ops), frozenset(constants), _shape(fn, params))


class _Masker(ast.NodeTransformer):
    """Constants to one placeholder; parameters to `p0, p1, ...` by position; other names (locals, and
    builtins) to `v0, v1, ...` by first appearance, except names that are called (`len`, `sorted`)."""

    def __init__(self, params: list[str]) -> None:
        self.names = {p: f"p{i}" for i, p in enumerate(params)}
        self.called: set[int] = set()

    def visit_Call(self, node: ast.Call) -> ast.AST:
        if isinstance(node.func, ast.Name):
            self.called.add(id(node.func))
        return self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> ast.AST:
        return ast.copy_location(ast.Constant(value="K"), node)

    def visit_Name(self, node: ast.Name) -> ast.AST:
        if id(node) in self.called:
            return node
        if node.id not in self.names:
            self.names[node.id] = f"v{sum(1 for v in self.names.values() if v.startswith('v'))}"
        return ast.copy_location(ast.Name(id=self.names[node.id], ctx=node.ctx), node)


def _shape(fn: ast.FunctionDef, params: list[str]) -> str:
    masked = _Masker(params).visit(ast.Module(body=fn.body, type_ignores=[]))  # `fn` is this call's own tree
    return ast.dump(masked, annotate_fields=False)


def compare(answer: ProgramFeatures, gold: ProgramFeatures) -> dict[str, bool]:
    """Which aspects of the answer's `f` equal the gold program's (`ASPECTS`)."""
    return {aspect: getattr(answer, aspect) == getattr(gold, aspect) for aspect in ASPECTS}


MISS_KINDS = ("fits shown", "argument", "operation", "constant", "structure")


def miss_kind(marks: dict[str, bool], fits_shown: bool) -> str:
    """One kind per wrong program (`MISS_KINDS`), the first that applies: it fits the shown pairs (the item is
    ambiguous), it reads other arguments, it uses other operations, other constants, or it differs only in how
    the same parts are put together."""
    if fits_shown:
        return "fits shown"
    for aspect, kind in (("reads", "argument"), ("operations", "operation"), ("constants", "constant")):
        if not marks[aspect]:
            return kind
    return "structure"


def shown_only(problem):
    """`problem` (code_f) with its hidden pairs replaced by the pairs the student was shown, so the task's own
    scorer says whether an answer reproduces what it saw."""
    from populora.tasks import Problem

    given = problem.given
    ins = tuple(i for i, _ in given)
    outs = tuple(o for _, o in given)
    return Problem(
        task="code_f", program=problem.program, inputs=ins * 2, outputs=outs * 2, message=problem.message
    )


def _rate(values: list[bool], of: int) -> float | None:
    return round(sum(values) / of, 3) if of else None


def level_row(answers: list, correct: list[bool], fits: list[bool], programs: list[str]) -> dict:
    """One level's row: accuracy, the shares of answers that parse and that fit the shown pairs; among the wrong
    answers with a program, the share that fits the shown pairs, the share right in each of `ASPECTS`, and the
    share of each `miss_kind` (they add up to 1)."""
    n = len(answers)
    wrong = [i for i in range(n) if not correct[i] and answers[i] is not None]
    feats = {i: program_features(answers[i]) for i in wrong}
    wrong = [i for i in wrong if feats[i] is not None]
    marks = {i: compare(feats[i], program_features(programs[i])) for i in wrong}
    row = {
        "n": n,
        "accuracy": _rate(correct, n),
        "program": _rate([a is not None for a in answers], n),
        "fits_shown": _rate(fits, n),
        "wrong_programs": len(wrong),
        "wrong_fits_shown": _rate([fits[i] for i in wrong], len(wrong)),
    }
    for aspect in ASPECTS:
        row[f"wrong_{aspect}_right"] = _rate([marks[i][aspect] for i in wrong], len(wrong))
    kinds = [miss_kind(marks[i], fits[i]) for i in wrong]
    row["wrong_kinds"] = {k: _rate([x == k for x in kinds], len(wrong)) for k in MISS_KINDS}
    return row


def run_induction(
    quick: bool = False,
    out: Path | None = None,
    model: Path | None = None,
    n: int | None = None,
    levels: str = "1-5",
    threads: int = 2,
    seed: int = 20_261_130,
) -> dict:
    """Score `model`'s code_f answers on the graded probe (`n` items per level; all of a level by default, 8
    with `quick`), print a table, write JSON."""
    from rich.console import Console
    from rich.progress import Progress
    from rich.table import Table

    from populora.pretrain.bench import generate, load_model
    from populora.pretrain.graded import parse_levels
    from populora.pretrain.graded_probe import MAX_NEW_TOKENS, load_graded_probe
    from populora.sandbox import Sandbox
    from populora.tasks import Answer, get

    lv = tuple(sorted(set(parse_levels(levels))))
    model_dir = Path(model or ASSET_DIR)
    out = Path(out or DEFAULT_INDUCTION_OUT)
    lm, tok = load_model(model_dir, threads)
    task = get("code_f")
    by_level: dict[int, list] = {}
    for level, p in load_graded_probe("code_f"):
        by_level.setdefault(level, []).append(p)
    results: dict = {
        "model": str(model_dir),
        "task": "code_f",
        "template": TEMPLATE,
        "seed": seed,
        "levels": {},
    }
    t0 = time.time()
    with Sandbox(workers=2) as sb, Progress(transient=True) as bar:
        job = bar.add_task("code_f answers per level", total=len(lv))
        for level in lv:
            problems = by_level[level][: (8 if quick else n) or None]
            prompts = [task.student_prompt(p, template=TEMPLATE) for p in problems]
            texts = generate(lm, tok, prompts, MAX_NEW_TOKENS["code_f"], 0.0, seed=seed)
            parsed = [task.parse_answer(t) for t in texts]
            answers = [a.text if isinstance(a, Answer) else None for a in parsed]
            correct = [bool(task.score(p, [a], sb)[0]) for p, a in zip(problems, parsed, strict=True)]
            fits = [
                bool(task.score(shown_only(p), [a], sb)[0]) for p, a in zip(problems, parsed, strict=True)
            ]
            row = level_row(answers, correct, fits, [p.program for p in problems])
            row["wrong_examples"] = [
                {"gold": p.program, "answer": a, "fits_shown": f}
                for p, a, c, f in zip(problems, answers, correct, fits, strict=True)
                if not c and a is not None
            ][:3]
            results["levels"][str(level)] = row
            bar.advance(job)
    results["seconds"] = round(time.time() - t0, 1)
    table = Table(
        title="why code_f answers miss (graded probe, greedy): the wrong programs by the first thing that differs "
        "from the gold program (fits shown = it reproduces the shown pairs)"
    )
    for col in ["level", "n", "correct", *(f"wrong: {k}" for k in MISS_KINDS)]:
        table.add_column(col)
    for level, row in results["levels"].items():
        kinds = ["" if row["wrong_kinds"][k] is None else f"{row['wrong_kinds'][k]:.0%}" for k in MISS_KINDS]
        table.add_row(level, str(row["n"]), f"{row['accuracy']:.0%}", *kinds)
    Console().print(table)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2) + "\n")
    return results
