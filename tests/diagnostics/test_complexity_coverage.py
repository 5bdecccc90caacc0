"""Complexity summaries and the CVT coverage archive on hand-computed numbers."""

import math

import numpy as np
import pytest

from populora.diagnostics.coverage import CENTROIDS_PATH, CoverageArchive, load_centroids
from populora.diagnostics.features import FEATURES, normalise, summarize
from populora.diagnostics.make_centroids import make_centroids

A = {"ast_depth": 5, "cyclomatic": 2, "loc": 4, "n_vars": 2}
B = {"ast_depth": 7, "cyclomatic": 4, "loc": 6, "n_vars": 4}


def test_summarize_mean_std():
    out = summarize([A, B, None])
    assert set(out) == set(FEATURES)
    assert out["ast_depth"] == {"mean": 6.0, "std": 1.0}
    assert out["cyclomatic"] == {"mean": 3.0, "std": 1.0}
    assert summarize([A])["loc"] == {"mean": 4.0, "std": 0.0}
    assert summarize([]) is None and summarize([None, {"ast_depth": 3}]) is None


def test_normalise_log_scaling():
    raw = np.array([[0, 0, 0, 0], [30, 40, 200, 60], [1000, 1000, 1000, 1000], [-3, 1, 1, 1]], float)
    n = normalise(raw)
    assert np.allclose(n[0], 0) and np.allclose(n[1], 1) and np.allclose(n[2], 1)
    assert n[3, 0] == 0.0
    assert math.isclose(n[3, 1], math.log(2) / math.log(41))


def test_shipped_centroids_shape_and_range():
    c = load_centroids()
    assert CENTROIDS_PATH.stat().st_size < 70_000
    assert c.shape == (4096, 4) and c.dtype == np.float32
    assert c.min() >= 0 and c.max() <= 1 and len(np.unique(c, axis=0)) == 4096


def test_make_centroids_is_seeded():
    a = make_centroids(n_cells=16, n_samples=2000, seed=3)
    b = make_centroids(n_cells=16, n_samples=2000, seed=3)
    assert a.shape == (16, 4) and np.array_equal(a, b)


def test_archive_counts_cells_against_bruteforce(tmp_path):
    rng = np.random.default_rng(0)
    feats = [
        dict(zip(FEATURES, map(int, rng.integers(1, [20, 15, 40, 20])), strict=True)) for _ in range(300)
    ]
    arc = CoverageArchive()
    assert arc.coverage == 0.0 and arc.cells_filled == 0 and arc.visit_entropy == 0.0
    arc.add(feats[:150])
    arc.add(feats[150:] + [None])
    # brute-force nearest centroid
    x = normalise(np.array([[f[k] for k in FEATURES] for f in feats], float))
    d = ((x[:, None, :] - load_centroids().astype(float)[None]) ** 2).sum(-1)
    expected = len(set(d.argmin(1).tolist()))
    assert arc.cells_filled == expected and arc.n_programs == 300
    assert math.isclose(arc.coverage, expected / 4096)
    # adding the same programs again changes counts, never coverage
    arc.add(feats)
    assert arc.cells_filled == expected and arc.n_programs == 600
    arc.save(tmp_path / "cov.json")
    back = CoverageArchive.load(tmp_path / "cov.json")
    assert np.array_equal(back.counts, arc.counts) and back.coverage == arc.coverage


def test_archive_identical_programs_one_cell_and_entropy():
    arc = CoverageArchive()
    arc.add([A, A, A])
    assert arc.cells_filled == 1 and arc.visit_entropy == 0.0
    arc.add([{"ast_depth": 25, "cyclomatic": 30, "loc": 150, "n_vars": 50}] * 3)
    assert arc.cells_filled == 2
    assert math.isclose(arc.visit_entropy, math.log(2))


def test_archive_state_mismatch(tmp_path):
    arc = CoverageArchive()
    with pytest.raises(ValueError, match="cells"):
        arc.load_state_dict({"n_cells": 10, "cells": [], "counts": []})
