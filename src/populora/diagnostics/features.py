"""The four structural features of a teacher program and how they are scaled for the CVT archive.

Only names, ranges and the normalisation live here (no parsing): the per-program values come from
`populora.tasks.features.program_features(source)`. Ranges follow reference/operators.md §6: a feature
x is mapped to the unit interval with clipped log scaling, x~ = clip(log1p(x) / log1p(x_max), 0, 1), so
that small programs (where almost all self-play problems live) get most of the resolution.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np

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
