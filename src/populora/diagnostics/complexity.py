"""Problem complexity per step: mean and spread of the four structural features of valid programs.

The per-program features (`ast_depth`, `cyclomatic`, `loc`, `n_vars`) come from
`populora.tasks.features.program_features(source)`; this module only aggregates them into the
`complexity` field of a member in metrics.jsonl (docs/run-folder.md).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from populora.diagnostics.features import FEATURES, feature_matrix

__all__ = ["FEATURES", "summarize"]


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
