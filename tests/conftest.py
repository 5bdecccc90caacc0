"""Shared test settings: deterministic, thread-safe CPU runs and the benchmark/seed data root."""

import os
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pytest  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The data root every reader uses: $POPULORA_DATA_DIR if set, else the copy shipped in the package."""
    from populora.data import resolve_data_dir

    return resolve_data_dir()
