"""Problem-space coverage: a CVT archive of 4096 cells over the four structural program features.

Each valid program's features are normalised into [0, 1]^4 (`features.normalise`: clipped log scaling
with maxima depth 30, cyclomatic 40, LOC 200, variables 60) and assigned to the nearest of the shipped
centroids (`cvt_centroids_4096x4.npy`, made by `python -m populora.diagnostics.make_centroids`) with a
scipy cKDTree. Coverage is the fraction of cells holding at least one program so far. The archive also
keeps visit counts per cell (for the entropy of the visit distribution) and is saved in checkpoints.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from populora.diagnostics.features import FEATURES, feature_matrix, normalise

__all__ = ["CoverageArchive", "CENTROIDS_PATH", "load_centroids"]

CENTROIDS_PATH = Path(__file__).with_name("cvt_centroids_4096x4.npy")


@functools.lru_cache(maxsize=4)
def load_centroids(path: str | None = None) -> np.ndarray:
    """Load (and cache) a centroid array; default: the shipped 4096 x 4 CVT."""
    p = Path(path) if path else CENTROIDS_PATH
    if not p.exists():
        raise FileNotFoundError(
            f"CVT centroids not found at {p}; regenerate them with "
            "`python -m populora.diagnostics.make_centroids`"
        )
    cents = np.load(p)
    if cents.ndim != 2 or cents.shape[1] != len(FEATURES):
        raise ValueError(f"{p}: expected an (n, {len(FEATURES)}) centroid array, got {cents.shape}")
    return cents


@functools.lru_cache(maxsize=4)
def _tree(path: str | None):
    from scipy.spatial import cKDTree

    return cKDTree(load_centroids(path).astype(np.float64))


class CoverageArchive:
    """Cumulative CVT coverage of the programs seen so far.

    >>> arc = CoverageArchive()
    >>> arc.add([{"ast_depth": 5, "cyclomatic": 2, "loc": 4, "n_vars": 2}])
    >>> arc.cells_filled, round(arc.coverage, 6)
    (1, 0.000244)
    """

    def __init__(self, centroids: str | os.PathLike | None = None) -> None:
        self._path = str(centroids) if centroids is not None else None
        self.centroids = load_centroids(self._path)
        self.counts = np.zeros(len(self.centroids), dtype=np.int64)

    @property
    def n_cells(self) -> int:
        return int(len(self.centroids))

    def cells_of(self, features_list: Iterable[Mapping[str, float] | None]) -> np.ndarray:
        """Cell index of each program (None entries and incomplete feature dicts are dropped)."""
        mat = feature_matrix(features_list)
        if mat.shape[0] == 0:
            return np.zeros(0, dtype=np.int64)
        _, idx = _tree(self._path).query(normalise(mat))
        return np.asarray(idx, dtype=np.int64).reshape(-1)

    def add(self, features_list: Iterable[Mapping[str, float] | None]) -> None:
        """Add programs (feature dicts as in problems.jsonl `features`); None entries are ignored."""
        idx = self.cells_of(features_list)
        if idx.size:
            np.add.at(self.counts, idx, 1)

    @property
    def cells_filled(self) -> int:
        """Number of cells holding at least one program."""
        return int(np.count_nonzero(self.counts))

    @property
    def coverage(self) -> float:
        """Fraction of cells filled (0..1)."""
        return self.cells_filled / self.n_cells

    @property
    def n_programs(self) -> int:
        return int(self.counts.sum())

    @property
    def visit_entropy(self) -> float:
        """Shannon entropy (nats) of the visit distribution over cells; 0 when empty or one cell."""
        total = self.counts.sum()
        if total == 0:
            return 0.0
        p = self.counts[self.counts > 0] / total
        return float(-(p * np.log(p)).sum())

    # -- checkpoint state ---------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """JSON-serialisable state: the occupied cells and their visit counts (sparse)."""
        nz = np.flatnonzero(self.counts)
        return {"n_cells": self.n_cells, "cells": nz.tolist(), "counts": self.counts[nz].tolist()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        if int(state["n_cells"]) != self.n_cells:
            raise ValueError(
                f"coverage state has {state['n_cells']} cells but the archive has {self.n_cells}"
            )
        self.counts[:] = 0
        self.counts[np.asarray(state["cells"], dtype=np.int64)] = np.asarray(state["counts"], dtype=np.int64)

    def save(self, path: str | os.PathLike) -> None:
        """Write the state as JSON atomically (temporary file + rename)."""
        path = Path(path)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(self.state_dict()))
        os.replace(tmp, path)

    @classmethod
    def load(cls, path: str | os.PathLike, centroids: str | os.PathLike | None = None) -> CoverageArchive:
        arc = cls(centroids)
        arc.load_state_dict(json.loads(Path(path).read_text()))
        return arc
