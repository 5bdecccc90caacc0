"""Structural features of a program, for diagnostics (paper: AST depth, cyclomatic complexity, lines of code,
variable count; reference/operators.md §7). Parse once with `ast`; radon for logical lines; cyclomatic
complexity with radon's counting rules over the whole file. `program_features(source)` raises `ValueError` for source that does not parse.
"""

from __future__ import annotations

import ast

# Singleton context/operator nodes hang under every Name/BinOp/Compare and would add +1 everywhere.
_SKIP = (ast.expr_context, ast.boolop, ast.operator, ast.unaryop, ast.cmpop)
_CONTROL = (
    ast.If,
    ast.For,
    ast.AsyncFor,
    ast.While,
    ast.Try,
    ast.With,
    ast.AsyncWith,
    ast.FunctionDef,
    ast.AsyncFunctionDef,
    ast.ClassDef,
    ast.Match,
)
if hasattr(ast, "TryStar"):
    _CONTROL = (*_CONTROL, ast.TryStar)


def ast_depth(tree: ast.AST) -> int:
    """Number of nodes on the longest root-to-leaf path of the AST, the `Module` root counting 1, skipping the
    context/operator singletons (`Load`, `Store`, `Add`, `And`, `Eq`, ...). Iterative (no recursion limit).

    Examples: `x = 1` -> 3 (Module, Assign, Name); `def f(x):\\n    return x * 3` -> 5 (Module, FunctionDef,
    Return, BinOp, Name), the value the paper reports for that program.
    """
    best = 0
    stack = [(tree, 1)]
    while stack:
        node, d = stack.pop()
        best = max(best, d)
        for child in ast.iter_child_nodes(node):
            if not isinstance(child, _SKIP):
                stack.append((child, d + 1))
    return best


def control_depth(tree: ast.AST) -> int:
    """Deepest nesting of block statements (if/for/while/try/with/def/class/match); 0 for straight-line code."""
    best = 0
    stack = [(tree, 0)]
    while stack:
        node, d = stack.pop()
        best = max(best, d)
        for child in ast.iter_child_nodes(node):
            stack.append((child, d + 1 if isinstance(child, _CONTROL) else d))
    return best


def bound_names(tree: ast.AST) -> set[str]:
    """Distinct identifiers bound anywhere (scope-insensitive): assignment/for/with/comprehension/walrus
    targets and `del` (Name in Store/Del context), every parameter (positional-only, regular, *args,
    keyword-only, **kwargs, lambda parameters), `except ... as e`, import aliases (the asname, or the first
    dotted component), match captures (`case x`, `*rest`, `**rest`), and `global`/`nonlocal` names.
    Function and class names are not counted."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            names.add(node.id)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for a in node.names:
                if a.name != "*":
                    names.add(a.asname or a.name.split(".")[0])
        elif isinstance(node, (ast.MatchAs, ast.MatchStar)) and node.name:
            names.add(node.name)
        elif isinstance(node, ast.MatchMapping) and node.rest:
            names.add(node.rest)
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            names.update(node.names)
    return names


def decision_points(tree: ast.AST) -> int:
    """Decision points by radon's rules: +1 per if/elif/ternary, per for/while (+1 more with an `else`), per
    `except` handler (+1 for a try's `else`), per extra operand of `and`/`or`, per comprehension `for` and
    each of its `if`s, per assert, per non-wildcard `case`. Lambdas and nested scopes are walked too."""
    n = 0
    for node in ast.walk(tree):
        if isinstance(node, (ast.If, ast.IfExp, ast.Assert)):
            n += 1
        elif isinstance(node, (ast.For, ast.AsyncFor, ast.While)):
            n += 1 + bool(node.orelse)
        elif isinstance(node, ast.Try) or (hasattr(ast, "TryStar") and isinstance(node, ast.TryStar)):
            n += len(node.handlers) + bool(node.orelse)
        elif isinstance(node, ast.BoolOp):
            n += len(node.values) - 1
        elif isinstance(node, ast.comprehension):
            n += 1 + len(node.ifs)
        elif isinstance(node, ast.Match):
            n += sum(
                1
                for c in node.cases
                if not (isinstance(c.pattern, ast.MatchAs) and c.pattern.pattern is None)
            )
    return n


def program_features(source: str) -> dict[str, int]:
    """The four structural features of a program, plus two extras. Raises `ValueError` if it does not parse.

    - `ast_depth`: nodes on the longest root-to-leaf AST path, Module = 1, context/operator singletons skipped
      (see `ast_depth`).
    - `cyclomatic`: 1 + every decision point in the file, counted with radon's rules (`decision_points`).
      For a program with one function `f` this equals radon's `cc_visit` complexity of `f`; radon's own
      `total_complexity` drops decisions inside nested functions and classes, so it is not used.
      Straight-line code scores 1.
    - `loc`: logical lines of code, radon `analyze(source).lloc`: one per statement (a compound statement's
      header counts one, a docstring counts as its expression statement); comments and blank lines excluded.
    - `n_vars`: number of distinct bound identifiers (see `bound_names`).
    - extras: `sloc` (radon source lines: non-blank, non-comment, non-docstring) and `control_depth` (block
      nesting, see `control_depth`).
    """
    try:
        tree = ast.parse(source)
    except Exception as e:
        raise ValueError(f"program does not parse ({type(e).__name__}); no features") from None
    from radon.raw import analyze

    raw = analyze(source)
    cc = 1 + decision_points(tree)
    return {
        "ast_depth": ast_depth(tree),
        "cyclomatic": int(cc),
        "loc": int(raw.lloc),
        "n_vars": len(bound_names(tree)),
        "sloc": int(raw.sloc),
        "control_depth": control_depth(tree),
    }
