"""The `arith` family, shipped with populora: integer arithmetic problems whose answers the sandbox computes.

One task type, `arith`. The teacher writes an integer expression in an ```expression block: integer literals,
`+ - * // %`, unary minus and parentheses, 3 to 80 characters, at least one operator, literals at most 10**6
(no `**`, no names, no calls: `check_proposal` parses it with `ast` and re-renders it). The problem's program is
`def f():\n    return <expression>\n`; validation runs it in the sandbox (behind the capability policy:
`populora.tasks.guard`), and a proposal whose value is not a plain int (a ZeroDivisionError, say) is invalid.
The student sees the expression and answers the integer in an ```output block; it is right iff that integer
equals the value the sandbox computed. An answer holds at most `MAX_ANSWER_DIGITS` (40) digits, so validation
also refuses a value it cannot write (issue 50: `999999*...` with 8 factors, 48 digits, was a valid problem no
student could answer, and its teacher won with it).

Seeds and probe items come from one generator (`random_expression`), which builds an expression and its value
together; the probe set is 64 items from a fixed stream (`PROBE_SEED`), the seeds come from the run's seed on
another stream and never repeat a probe expression. The tests check every probe value against the sandbox.
"""

from __future__ import annotations

import ast
import random
import re
from collections.abc import Sequence
from typing import Any

from populora.tasks.computed import ExpressionTask, GeneratedFamily
from populora.tasks.literals import LiteralError, parse_literal, strict_equal
from populora.tasks.types import FormatError, Invalid, Problem, Proposal

MAX_CHARS = 80
MAX_LITERAL = 10**6
PROBE_SEED = "arith-probe-v1"
PROBE_SIZE = 64
_OPS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.FloorDiv: "//", ast.Mod: "%"}
MAX_ANSWER_DIGITS = 40  # the longest integer an answer may give (`check_answer`)
_INT = re.compile(rf"-?\d{{1,{MAX_ANSWER_DIGITS}}}")


def _check_node(node: ast.AST) -> str | None:
    if isinstance(node, ast.BinOp):
        if type(node.op) not in _OPS:
            return f"operator {type(node.op).__name__} not allowed"
        return _check_node(node.left) or _check_node(node.right)
    if isinstance(node, ast.UnaryOp):
        return None if isinstance(node.op, ast.USub | ast.UAdd) else "only unary minus/plus"
    if isinstance(node, ast.Constant):
        v = node.value
        if type(v) is not int:
            return "only integer literals"
        return None if abs(v) <= MAX_LITERAL else f"literal larger than {MAX_LITERAL}"
    return f"{type(node).__name__} not allowed"


class ArithTask(ExpressionTask):
    name = "arith"
    max_chars = MAX_CHARS
    teacher_intro = (
        "Write one integer arithmetic expression (integers, + - * // %, parentheses; no **), at most "
        f"{MAX_CHARS} characters, in an ```expression block. A student will compute its value."
    )
    student_intro = "Compute the value of this expression. Answer with the integer in an ```output block."

    def check_proposal(self, text: str) -> str | FormatError:
        tree = self.parse_expression(text)
        if isinstance(tree, FormatError):
            return tree
        unary = tree.body
        while isinstance(unary, ast.UnaryOp):  # a bare number behind signs is not a problem
            unary = unary.operand
        if not isinstance(unary, ast.BinOp):
            return FormatError("expression: needs at least one operator")
        try:
            reason = _check_node(tree.body)
        except RecursionError:
            return FormatError("expression: nested too deeply")
        return FormatError(f"expression: {reason}") if reason else ast.unparse(tree.body)

    def check_answer(self, text: str) -> Any:
        if not _INT.fullmatch(text):
            return FormatError("answer: not an integer")
        return int(text)

    def validate(self, proposals: Sequence[Proposal], sandbox: Any) -> list[Problem | Invalid]:
        """The sandbox's validation (`ComputedAnswerTask.validate`), then the value must be an answer a student
        can write: an integer of at most `MAX_ANSWER_DIGITS` digits (`check_answer` of it gives it back)."""
        results = super().validate(proposals, sandbox)
        return [self._answerable(p, r) for p, r in zip(proposals, results, strict=True)]

    def _answerable(self, proposal: Proposal, result: Problem | Invalid) -> Problem | Invalid:
        if not isinstance(result, Problem):
            return result
        text = result.output
        try:
            ok = strict_equal(self.check_answer(text), parse_literal(text))
        except (LiteralError, ValueError):
            ok = False
        if ok:
            return result
        digits = text.lstrip("-")
        if digits.isdigit():
            return Invalid(
                f"the value has {len(digits)} digits; an answer holds at most {MAX_ANSWER_DIGITS}", proposal
            )
        return Invalid(f"the value {text[:40]} is not an integer an answer can give", proposal)


def random_expression(rng: random.Random, depth: int = 2) -> tuple[str, int]:
    """An expression of nested binary operations over small integers and its value, built together (no
    evaluation); divisions and remainders get a non-zero right side."""
    if depth == 0 or rng.random() < 0.3:
        v = rng.randint(0, 20)
        return str(v), v
    ls, lv = random_expression(rng, depth - 1)
    rs, rv = random_expression(rng, depth - 1)
    op = rng.choice(["+", "-", "*", "//", "%"])
    if op in ("//", "%") and rv == 0:
        rs, rv = "7", 7
    value = {
        "+": lv + rv,
        "-": lv - rv,
        "*": lv * rv,
        "//": lv // rv if rv else 0,
        "%": lv % rv if rv else 0,
    }[op]
    return f"({ls} {op} {rs})", value


class ArithFamily(GeneratedFamily):
    name = "arith"
    task_types = ("arith",)
    description = "integer arithmetic expressions; the sandbox computes each value"
    task_class = ArithTask
    probe_stream = PROBE_SEED
    probe_size = PROBE_SIZE

    def draw(self, rng: random.Random) -> tuple[str, int]:
        return random_expression(rng, depth=rng.choice([1, 2, 3]))


def probe_set() -> tuple[Problem, ...]:
    """The family's fixed probe items."""
    return tuple(ArithFamily().probe_items("arith"))


__all__ = ["ArithFamily", "ArithTask", "probe_set", "random_expression"]
