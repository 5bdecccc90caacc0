"""Programs compared up to their constants: an AST dump with every literal number and string masked.

Two programs that differ only in constants (`total = 2 * 3` and `total = 2 * 8`) are the same exercise for a
student. The probe guard (train/probe_guard.py) keeps such twins of probe programs out of training, and the
graded generator (pretrain/graded.py) splits probe from training programs on this key, so no probe program has
a masked twin in training. Names, operators and structure are kept; formatting and comments never matter.
"""

from __future__ import annotations

import ast

from populora import pyparse

MASK = "<const>"


class _MaskConstants(ast.NodeTransformer):
    """Every literal number or string (a signed number counts as one literal) becomes MASK."""

    def visit_Constant(self, node: ast.Constant) -> ast.AST:
        v = node.value
        if isinstance(v, bool) or v is None or v is Ellipsis:
            return node  # True / False / None / ... are structure, not data
        return ast.copy_location(ast.Constant(MASK), node)

    def visit_UnaryOp(self, node: ast.UnaryOp) -> ast.AST:
        if isinstance(node.op, ast.USub | ast.UAdd) and isinstance(node.operand, ast.Constant):
            v = node.operand.value
            if isinstance(v, int | float | complex) and not isinstance(v, bool):
                return ast.copy_location(ast.Constant(MASK), node)
        return self.generic_visit(node)


def program_key(program: str, masked: bool = True) -> str | None:
    """A canonical form of `program`: its AST dump, constants masked when `masked`; None when it does not parse
    or is too deep to walk. Never raises, whatever the program (a model may have written it): `return x + x + ...`
    with 1,000 terms parses but overflowed the recursive walk (issue 50)."""
    try:
        tree = pyparse.parse(program)
        if masked:
            tree = _MaskConstants().visit(tree)
        return ast.dump(tree, annotate_fields=False, include_attributes=False)
    except Exception:  # noqa: BLE001 - SyntaxError, ValueError (NUL byte), RecursionError, MemoryError
        return None


__all__ = ["MASK", "program_key"]
