"""Benchmark and seed data shipped inside the package, and where every reader finds its data root.

Layout (the same as the ``shared/data`` folder of the project's own machines, so a user's copy can replace it)::

    evalplus/HumanEvalPlus-v0.1.10.jsonl.gz, MbppPlus-v0.2.0.jsonl.gz     (+ LICENSE-*)
    math/<name>/test.jsonl.gz        aime24 aime25 amc23 gsm8k math500 minerva_math olympiadbench
    azr_seed/7b_coder_seed_io.jsonl, 7b_coder_code_f_seed_io.jsonl        (+ LICENSE-AbsoluteZeroReasoner)

`resolve_data_dir` picks the root: an explicit ``--data-dir``, else ``POPULORA_DATA_DIR``, else this bundled
copy, so an installed wheel or a clone anywhere evaluates and seeds with nothing else. Readers accept a
file either plain or gzip-compressed (``name`` or ``name.gz``), so an override folder may hold either.
Sources and licences of each file: ``src/populora/data/NOTICE.md``.
"""

from __future__ import annotations

import gzip
import os
from pathlib import Path
from typing import IO

BUNDLED_ROOT = Path(__file__).resolve().parent
ENV_VAR = "POPULORA_DATA_DIR"


class DataDirError(Exception):
    """A data folder given by the user does not exist; the message names it and the fix."""


def bundled_root() -> Path:
    """The copy shipped in the package (read-only is fine: nothing is ever written there)."""
    return BUNDLED_ROOT


def resolve_data_dir(data_dir: str | Path | None = None) -> Path:
    """The data root: the argument, else ``$POPULORA_DATA_DIR``, else the bundled copy."""
    raw = data_dir if data_dir is not None else os.environ.get(ENV_VAR)
    if raw is None or str(raw) == "":
        return BUNDLED_ROOT
    path = Path(raw).expanduser()
    if not path.is_dir():
        src = "--data-dir" if data_dir is not None else ENV_VAR
        raise DataDirError(
            f"data directory {path} (from {src}) does not exist; point it at a folder laid out like the "
            f"bundled one (evalplus/, math/<name>/test.jsonl[.gz], azr_seed/), or unset {ENV_VAR} to use "
            "the copy shipped with populora"
        )
    return path


def find_file(path: str | Path) -> Path | None:
    """``path`` if it exists, else ``path.gz`` if that exists, else None."""
    p = Path(path)
    if p.is_file():
        return p
    gz = p.with_name(p.name + ".gz")
    return gz if gz.is_file() else None


def open_text(path: str | Path) -> IO[str]:
    """Open a data file for reading text, decompressing ``*.gz`` transparently."""
    p = Path(path)
    if p.suffix == ".gz":
        return gzip.open(p, "rt", encoding="utf-8")
    return open(p, encoding="utf-8")
