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


@pytest.fixture(scope="session")
def model_name(tmp_path_factory) -> str:
    """'tiny' when the bundled model resolves, else a random Qwen2 saved to a temp folder."""
    if os.environ.get("POPULORA_TEST_MODEL"):
        return os.environ["POPULORA_TEST_MODEL"]
    from populora.engine import EngineError, resolve_model

    try:
        resolve_model("tiny")
        return "tiny"
    except EngineError:
        from populora.engine.testing import random_model

        model, tok = random_model(seed=0)
        path = Path(tmp_path_factory.mktemp("model"))
        model.save_pretrained(path)
        tok.save_pretrained(path)
        return str(path)
