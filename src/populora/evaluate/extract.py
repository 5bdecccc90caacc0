"""Answer extraction from model text: AZR math answers, fenced code blocks, EvalPlus-style sanitising.

Math (AZR ``extract_azr_answer``): the text of the last ``<answer>`` block (a missing
``</answer>`` is fine: it is a stop word, so generation ends before it); if that holds a ``\\boxed{}``, its
last one. Otherwise the last ``\\boxed{}`` anywhere, otherwise the first ``\\[ ... \\]``, otherwise "".

Code: the last fenced ```` ```python ```` block (or the last fenced block), then EvalPlus's sanitiser
semantics re-implemented with `ast` instead of tree-sitter: the longest run of lines that parses, keeping
imports, top-level classes, functions that contain a ``return``, and assignments, restricted to the names
reachable from the entry point.

Bounded on hostile text (issue 50): the ``\\[ ... \\]`` fallback and the fence scanner use `str.find`
(linear; the regular expressions they replace were quadratic, 60,000 characters of ``\\[`` took 21 s), and
the longest-parsable-span search, quadratic in lines with a parse per try, stops after `MAX_PARSES` parses or
`MAX_PARSED_CHARS` characters parsed in all, keeping the longest span found so far (200 lines of ``x = (``
took 12 s in the grading process; a fair answer parses at once or within a few dozen tries).
"""

from __future__ import annotations

import ast
import re

from populora import pyparse
from populora.evaluate.data import last_boxed

# The longest-span search parses at most this many spans, of at most this many characters in all; past either it
# returns the longest span found so far (see the module docstring).
MAX_PARSES = 1_000
MAX_PARSED_CHARS = 1_000_000

_ANSWER_OPEN = re.compile(r"<answer>", re.IGNORECASE)
_ANSWER_CLOSE = re.compile(r"</answer>", re.IGNORECASE)


def answer_block(text: str) -> str | None:
    """Text inside the last ``<answer>`` (up to ``</answer>`` or the end); None without an opening tag."""
    opens = list(_ANSWER_OPEN.finditer(text))
    if not opens:
        return None
    rest = text[opens[-1].end() :]
    close = _ANSWER_CLOSE.search(rest)
    return (rest[: close.start()] if close else rest).strip()


def extract_azr_answer(text: str) -> str:
    """AZR's math answer extraction (see module docstring). Never raises."""
    block = answer_block(text)
    if block is not None:
        if "\\boxed" in block or "\\fbox" in block:
            boxed = last_boxed(block)
            if boxed is not None:
                return boxed.strip()
        return block
    boxed = last_boxed(text)
    if boxed is not None:
        return boxed.strip()
    return _first_display(text)


def _first_display(text: str) -> str:
    """The inside of the first ``\\[ ... \\]`` (the old lazy-regex search's match), stripped, or "".
    Linear: if the first opening has no closing after it, no later opening has one either."""
    start = text.find("\\[")
    if start < 0:
        return ""
    end = text.find("\\]", start + 2)
    return text[start + 2 : end].strip() if end >= 0 else ""


_LANG = re.compile(r"[A-Za-z0-9_+-]*")


def fenced_blocks(text: str) -> list[tuple[str, str]]:
    """All ```` ```lang ... ``` ```` blocks as (lang, body); an unterminated last block runs to the end.

    The blocks ``re.finditer(r"```([A-Za-z0-9_+-]*)[^\\n]*\\n(.*?)(?:```|\\Z)", text, re.DOTALL)`` gives, found
    with `str.find` in one pass (that expression rescans to the end from every fence with no newline after
    it: quadratic)."""
    out: list[tuple[str, str]] = []
    pos = 0
    while True:
        start = text.find("```", pos)
        if start < 0:
            break
        nl = text.find("\n", start + 3)
        if nl < 0:  # no newline after this fence, hence none after any later one: nothing more matches
            break
        lang = _LANG.match(text, start + 3, nl).group(0).lower()
        end = text.find("```", nl + 1)
        if end < 0:
            out.append((lang, text[nl + 1 :]))
            break
        out.append((lang, text[nl + 1 : end]))
        pos = end + 3
    return out


def extract_code_block(text: str) -> str:
    """The last ```` ```python ```` block, else the last fenced block, else the whole text."""
    blocks = fenced_blocks(text)
    py = [b for lang, b in blocks if lang in ("python", "py", "python3")]
    if py:
        return py[-1]
    if blocks:
        return blocks[-1][1]
    return text


def lcb_extract_code(text: str) -> str:
    """LiveCodeBench's extraction: the body between the last pair of lines starting with ```` ``` ````."""
    lines = text.split("\n")
    idx = [i for i, line in enumerate(lines) if line.startswith("```")]
    if len(idx) < 2:
        return ""
    return "\n".join(lines[idx[-2] + 1 : idx[-1]])


def _parses(code: str) -> bool:
    try:
        pyparse.parse(code)
        return True
    except Exception:  # noqa: BLE001 - SyntaxError, ValueError (NUL), RecursionError, MemoryError, ...
        return False


def longest_parsable(code: str) -> str:
    """The longest contiguous run of lines (by non-blank lines) that parses, as EvalPlus's `code_extract`;
    after `MAX_PARSES` parses or `MAX_PARSED_CHARS` parsed characters, the longest one found so far."""
    if _parses(code):
        return code
    lines = code.split("\n")
    nonblank, offset = [0], [0]  # non-blank lines and characters (with newlines) before each line
    for line in lines:
        nonblank.append(nonblank[-1] + (1 if line.strip() else 0))
        offset.append(offset[-1] + len(line) + 1)
    best, best_len = (0, -1), 0
    parses, parsed = 1, len(code)
    for i in range(len(lines)):
        # Try long spans first and stop once no longer span can beat the best one found.
        for j in range(len(lines) - 1, i, -1):
            length = nonblank[j + 1] - nonblank[i]
            if length <= best_len:
                break
            if parses >= MAX_PARSES or parsed >= MAX_PARSED_CHARS:
                return "\n".join(lines[best[0] : best[1] + 1]) if best_len > 0 else ""
            parses, parsed = parses + 1, parsed + offset[j + 1] - offset[i]
            if _parses("\n".join(lines[i : j + 1])):
                best, best_len = (i, j), length
                break
    if best_len == 0:
        return ""
    return "\n".join(lines[best[0] : best[1] + 1])


def _names_in(node: ast.AST) -> set[str]:
    return (
        {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
        | {n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)}
        | {
            n.name
            for n in ast.walk(node)
            if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
        }
    )


def _has_return(node: ast.AST) -> bool:
    return any(isinstance(n, ast.Return) for n in ast.walk(node))


def sanitize(code: str, entry_point: str | None = None) -> str:
    """EvalPlus ``sanitize`` semantics with `ast` (see module docstring); falls back to the parsable span."""
    span = longest_parsable(code)
    try:
        tree = pyparse.parse(span)
    except Exception:  # noqa: BLE001 - SyntaxError, ValueError (NUL), RecursionError, MemoryError, ...
        return span
    lines = span.split("\n")

    def source(node: ast.AST) -> str:
        start = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
        return "\n".join(lines[start - 1 : node.end_lineno])

    imports: list[ast.AST] = []
    defs: list[tuple[str, ast.AST]] = []
    seen: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            imports.append(node)
        elif isinstance(node, ast.ClassDef):
            if node.name not in seen:
                defs.append((node.name, node))
                seen.add(node.name)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            if node.name not in seen and _has_return(node):
                defs.append((node.name, node))
                seen.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            first = targets[0]
            name = first.id if isinstance(first, ast.Name) else None
            if name is None and isinstance(first, ast.Tuple | ast.List):
                elts = [e for e in first.elts if isinstance(e, ast.Name)]
                name = elts[0].id if elts else None
            if name and name not in seen:
                defs.append((name, node))
                seen.add(name)
    keep = {n for n, _ in defs}
    if entry_point:
        deps = {n: _names_in(node) for n, node in defs}
        reach, queue = {entry_point}, [entry_point]
        while queue:
            for nxt in deps.get(queue.pop(), ()):
                if nxt not in reach:
                    reach.add(nxt)
                    queue.append(nxt)
        keep = reach
    out = [source(n) for n in imports] + [source(node) for name, node in defs if name in keep]
    result = "\n".join(out).strip()
    return result if result else span
