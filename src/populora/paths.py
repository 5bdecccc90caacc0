"""Where the package's bundled files live. Imports only pathlib, so the CLI's command modules can use it
without loading torch."""

from __future__ import annotations

from pathlib import Path

ASSETS_DIR = Path(__file__).resolve().parent / "assets"
"""Bundled data: the tiny model, seed files."""

TINY_MODEL_DIR = ASSETS_DIR / "tiny-coder"
"""The bundled tiny base model (`model.name=tiny`), a standard Hugging Face folder written by `pretrain-tiny`."""
