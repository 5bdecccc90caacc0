"""Owner-only files for run folders (issue 13, item 2): the sandbox hides the host from jobs, and a run folder
(gold programs in `buffers.jsonl`, adapters, metrics) should also be hidden from the machine's other users.

    from populora.sandbox.private import owner_only, make_private
    with owner_only():                 # everything created inside: dirs 0700, files 0600
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / "buffers.jsonl").write_text(...)
    make_private(run_dir)              # an existing folder (e.g. on --resume): chmod the whole tree

`owner_only` sets the process umask (it is process-wide: threads that create files meanwhile get it too,
which for a trainer writing its own run folder is what is wanted).
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def owner_only() -> Iterator[None]:
    """Create files 0600 and directories 0700 (umask 077) inside the block; the old umask comes back after."""
    old = os.umask(0o077)
    try:
        yield
    finally:
        os.umask(old)


def make_private(path: str | os.PathLike) -> int:
    """Remove group/other permissions from `path` and everything under it (symlinks are not followed);
    return how many entries changed."""
    changed = 0
    root = Path(path)
    entries = [root] if not root.is_dir() else [root, *root.rglob("*")]
    for p in entries:
        st = p.lstat()
        if stat.S_ISLNK(st.st_mode):
            continue
        mode = stat.S_IMODE(st.st_mode)
        if mode & 0o077:
            os.chmod(p, mode & 0o700)
            changed += 1
    return changed
