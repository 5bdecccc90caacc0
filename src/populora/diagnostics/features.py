"""Structural features of a program: computed per program, summarised per step, scaled for the CVT archive.

The paper's four features are AST depth, cyclomatic complexity, lines of code and variable count
(`program_features(source)` parses once with `ast`; radon gives the logical lines and the counting rules of
cyclomatic complexity). `summarize` aggregates them into the `complexity` field of a member in metrics.jsonl
(docs/run-folder.md); `feature_matrix` and `normalise` map them into the unit cube of the coverage archive
with clipped log scaling, x~ = clip(log1p(x) / log1p(x_max), 0, 1), so that small programs (where almost all
self-play problems live) get most of the resolution.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping

import numpy as np
from radon.raw import analyze

from populora import pyparse

FEATURES: tuple[str, ...] = ("ast_depth", "cyclomatic", "loc", "n_vars")
"""Feature names, in the column order of the centroid array."""

FEATURE_MAX: dict[str, float] = {"ast_depth": 30.0, "cyclomatic": 40.0, "loc": 200.0, "n_vars": 60.0}
"""Upper end of each feature's range; larger values are clipped to the edge of the cube."""

FEATURE_LABELS: dict[str, str] = {
    "ast_depth": "AST depth",
    "cyclomatic": "cyclomatic complexity",
    "loc": "lines of code",
    "n_vars": "variable count",
}


def feature_matrix(features_list: Iterable[Mapping[str, float] | None]) -> np.ndarray:
    """Stack feature dicts into an (n, 4) float array; None entries and dicts with a missing/None value are dropped."""
    rows = []
    for feats in features_list:
        if not feats:
            continue
        vals = [feats.get(name) for name in FEATURES]
        if any(v is None for v in vals):
            continue
        rows.append([float(v) for v in vals])
    return np.asarray(rows, dtype=np.float64).reshape(-1, len(FEATURES))


def normalise(raw: np.ndarray) -> np.ndarray:
    """Map raw feature rows (n, 4) into the unit cube with clipped log scaling (negative values clip to 0)."""
    x_max = np.array([FEATURE_MAX[name] for name in FEATURES])
    return np.clip(np.log1p(np.maximum(raw, 0.0)) / np.log1p(x_max), 0.0, 1.0)


def summarize(features_list: Iterable[Mapping[str, float] | None]) -> dict[str, dict[str, float]] | None:
    """Return `{feature: {"mean": m, "std": s}}` over the given programs' features, or None if there are none.

    `std` is the population standard deviation (ddof=0), so a single program has std 0. Entries that are
    None (invalid programs) or miss a feature are ignored; None is what metrics.jsonl stores for a member
    with no valid program this step.
    """
    mat = feature_matrix(features_list)
    if mat.shape[0] == 0:
        return None
    means = mat.mean(axis=0)
    stds = mat.std(axis=0)
    return {name: {"mean": float(means[i]), "std": float(stds[i])} for i, name in enumerate(FEATURES)}


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
        tree = pyparse.parse(source)
    except Exception as e:
        raise ValueError(f"program does not parse ({type(e).__name__}); no features") from None
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
