"""Parsing Python text that a model (or a benchmark file) wrote, without compiler warnings on the console.

`ast.parse` of text such as `x = 1if y else 2` or `'\\d'` emits a SyntaxWarning ("invalid decimal literal";
"invalid escape sequence", a DeprecationWarning before Python 3.12) to stderr under the file name `<unknown>`;
a training run parses thousands of proposals and answers, so users saw such lines between its progress lines.
`parse` is `ast.parse` under a file name of its own, `FILENAME`, and a warnings filter for that name alone
(installed once, at import) drops them: thread-safe (the overlap lane parses on its own thread, where
`warnings.catch_warnings` would race), and leaving every other warning, the user's own `ast.parse` calls'
included, as it was. Errors still raise SyntaxError.
"""

from __future__ import annotations

import ast
import re
import warnings
from typing import Any

FILENAME = "<populora: parsed text>"

# The compiler reports a warning with the module name taken from the file name (FILENAME as given: no ".py").
# Python 3.11 reports an invalid escape sequence as a DeprecationWarning, 3.12 on as a SyntaxWarning.
for _category in (SyntaxWarning, DeprecationWarning):
    warnings.filterwarnings("ignore", category=_category, module=re.escape(FILENAME))


def parse(text: str, mode: str = "exec") -> ast.AST:
    """`ast.parse(text, mode=mode)` without SyntaxWarnings on stderr (see the module docstring)."""
    return ast.parse(text, filename=FILENAME, mode=mode)


def literal_eval(text: str) -> Any:
    """`ast.literal_eval(text)` without SyntaxWarnings on stderr (the same leading-space rule as the original)."""
    return ast.literal_eval(parse(text.lstrip(" \t"), mode="eval"))
