"""Where the package's bundled files live. Imports only pathlib, so the CLI's command modules can use it
without loading torch."""

from __future__ import annotations

import os
from pathlib import Path

ASSETS_DIR = Path(__file__).resolve().parent / "assets"
"""Bundled data: the tiny model, seed files."""

TINY_MODEL_DIR = ASSETS_DIR / "tiny-coder"
"""The bundled tiny base model (`model.name=tiny`), a standard Hugging Face folder written by `pretrain-tiny`."""

FLAWS_MODEL_DIR = ASSETS_DIR / "tiny-flaws"
"""The bundled planted-misconception model (`model.name=tiny-flaws`, issue 49): asset v2 continued on a corpus
that answers six classes of program feature consistently wrong (docs/tiny-model.md)."""

BUNDLED_MODELS = {"tiny": TINY_MODEL_DIR, "tiny-flaws": FLAWS_MODEL_DIR}
"""Model names that are folders in the package."""

NAMED_MODELS = (*BUNDLED_MODELS, "smol")
"""Model names that are neither a path nor a hub id (`engine.resolve_model`)."""


def model_cache_dir() -> Path:
    """Where converted models live (`model.name=smol` under `smol/`): `$POPULORA_CACHE` or `~/.cache/populora`,
    then `models/`. Here so that code outside the engine (the PEFT writer naming a base) finds it too."""
    return Path(os.environ.get("POPULORA_CACHE", Path.home() / ".cache" / "populora")) / "models"
