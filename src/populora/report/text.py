"""Text from a run folder made safe to show: every string the report takes from a run (member ids, invalid
reasons, problems, folder names) is data, so it must neither be parsed as markup nor fail to encode.

- `plain_figures()`: matplotlib parses `$...$` as mathtext (an invalid reason such as `bad $x^{$` raises
  while drawing) and may hand text to LaTeX; inside the block every text is drawn literally.
- `display(s)`: a string that encodes to UTF-8. A folder name that is not UTF-8 reaches Python as lone
  surrogates (`os.fsdecode`'s surrogateescape), which no UTF-8 writer or font accepts; each undecodable byte
  becomes U+FFFD, the rest is kept.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator


def display(s: object) -> str:
    """`str(s)` with undecodable bytes (surrogate escapes) and stray surrogates replaced by U+FFFD."""
    text = os.fspath(s) if isinstance(s, os.PathLike) else str(s)
    try:
        return text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    except UnicodeEncodeError:  # a surrogate outside the escape range (e.g. "\ud800" in a JSON log)
        return "".join("\ufffd" if "\ud800" <= c <= "\udfff" else c for c in text)


@contextlib.contextmanager
def plain_figures() -> Iterator[None]:
    """Figures created and drawn inside the block show every text literally (no mathtext, no TeX)."""
    import matplotlib

    with matplotlib.rc_context({"text.parse_math": False, "text.usetex": False}):
        yield
