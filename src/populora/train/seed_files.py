"""Where a `tasks.seed_io` / `tasks.seed_code_f` value points: a path, or a name relative to the data root.

Presets name the AZR seed files data-relatively (`azr_seed/7b_coder_seed_io.jsonl`), so the same value works
wherever the data lives. A value is looked up, first match wins:

1. as a path (absolute, or relative to the working directory), so `--set tasks.seed_io=my/seeds.jsonl` works;
2. under the data root: `populora.data.resolve_data_dir()` when the package bundles its data (an explicit
   `POPULORA_DATA_DIR`, else the copy shipped in the package), else `$POPULORA_DATA_DIR`.

'' means no seed file (the identity triplet). A name found nowhere is one line naming the key and the fixes.
"""

from __future__ import annotations

import os
from pathlib import Path


class SeedFileError(FileNotFoundError):
    """A seed file named in the config was not found; the message names the key, where it looked and the fix."""


def _data_roots() -> list[Path]:
    roots: list[Path] = []
    try:  # the package's data resolver, where it exists (explicit POPULORA_DATA_DIR first, then bundled)
        from populora.data import resolve_data_dir  # type: ignore[import-not-found]

        roots.append(Path(resolve_data_dir()))
    except ImportError:
        pass
    except Exception:  # noqa: BLE001 - e.g. a POPULORA_DATA_DIR that does not exist: reported below
        pass
    env = os.environ.get("POPULORA_DATA_DIR")
    if env:
        roots.append(Path(env).expanduser())
    return list(dict.fromkeys(roots))


def resolve_seed_file(value: str, key: str) -> str:
    """The path to read for config `key` (e.g. 'tasks.seed_io') set to `value`; '' stays ''."""
    if not value:
        return ""
    given = Path(value).expanduser()
    if given.is_file():
        return str(given)
    roots = _data_roots()
    for root in roots:
        if (root / value).is_file():
            return str(root / value)
    where = ", ".join(str(r) for r in roots) or "no data root (POPULORA_DATA_DIR is unset)"
    raise SeedFileError(
        f"{key}={value}: no such file, neither as a path nor under the data root ({where}); set "
        "POPULORA_DATA_DIR to the folder holding azr_seed/, pass a path, or --set "
        f"{key}='' to seed with the identity triplet."
    )
