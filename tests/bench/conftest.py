"""Fixtures for the tests of the scripts in bench/ (not a package: each is loaded from its file)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

BENCH_DIR = Path(__file__).resolve().parents[2] / "bench"


@pytest.fixture(scope="session")
def bench_script():
    """`bench_script("tis_effect")`: the module of bench/tis_effect.py, loaded once per session."""
    loaded: dict = {}

    def load(name: str):
        if name not in loaded:
            spec = importlib.util.spec_from_file_location(name, BENCH_DIR / f"{name}.py")
            mod = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(mod)
            loaded[name] = mod
        return loaded[name]

    return load
