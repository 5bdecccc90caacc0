"""Linear-time extraction of the pieces of model text: fenced blocks and the `<think>`/`<answer>` frame.

Regular expressions with lazy `.*?` over DOTALL text go quadratic on adversarial input (thousands of
unclosed fences); these scanners use `str.find` only, so 1 MB of junk costs one pass. Nothing here raises.

Text holding a lone surrogate (a str that is not valid Unicode: no UTF-8 encoding exists) is a format error in
`answer_region`: the pieces of such a proposal would reach problems.jsonl, whose UTF-8 write would raise
(issue 50), and no tokenizer decodes to one, so only hostile text carries them.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass, field

FENCE = "```"


@dataclass(frozen=True)
class Block:
    lang: str  # lower-cased first word of the info string ("python", "input", "output", "message", "")
    content: str
    # Where the block sits in the scanned text, opening fence to closing fence inclusive (rl.teacher_credit
    # blames the tokens of the block validation rejected); not part of equality.
    start: int = field(default=0, compare=False)
    end: int = field(default=0, compare=False)


def fenced_blocks(text: str) -> list[Block]:
    """All closed ``` blocks in order. The info string is the rest of the opening line; content runs to the
    next fence. An opening fence without a newline after it, or without a closing fence, ends the scan."""
    blocks: list[Block] = []
    pos, n = 0, len(text)
    nl = -1  # cached position of the newline that ends the current opening line
    while pos < n:
        start = text.find(FENCE, pos)
        if start < 0:
            break
        if nl < start + 3:
            nl = text.find("\n", start + 3)
            if nl < 0:
                break
        inner = text.find(FENCE, start + 3, nl)
        if inner >= 0:
            # "```a```" on one line: an inline code span, not a block; resume after it.
            pos = inner + 3
            continue
        end = text.find(FENCE, nl + 1)
        if end < 0:
            break
        words = text[start + 3 : nl].strip().split()
        blocks.append(Block(words[0].lower() if words else "", text[nl + 1 : end], start, end + 3))
        pos = end + 3
    return blocks


def find_blocks(text: str, lang: str) -> list[str]:
    """Contents of the closed blocks whose info word is `lang` (case-insensitive), in order."""
    lang = lang.lower()
    return [b.content for b in fenced_blocks(text) if b.lang == lang]


def clean_code(content: str) -> str:
    """Block content as a program: common indentation removed, blank edges dropped."""
    return textwrap.dedent(content.replace("\r\n", "\n")).strip("\n").rstrip()


def lone_surrogate(text: str) -> bool:
    """True if `text` holds a lone surrogate (U+D800..U+DFFF), i.e. it has no UTF-8 encoding."""
    if text.isascii():
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def answer_region(text: str, *, strict: bool) -> tuple[str | None, str | None]:
    """The part of a completion where answers are looked for: `(region, None)` or `(None, reason)`.

    strict (R1-style templates, prompt ends in `<think>`): the completion must close `</think>` and then,
    after only whitespace, hold `<answer> ... </answer>` (AZR's `answer_conditional` format rule). lenient:
    no frame is required, and without any `<answer>` the region is the whole text. Either way the region is
    the inside of the LAST `<answer>`, as AZR's `extract_answer` takes it (`split("<answer>")[-1]`), and an
    `<answer>` that is never closed is a format error (a cut-off generation).
    """
    if not isinstance(text, str):
        return None, "format: not text"
    if lone_surrogate(text):
        return None, "format: not valid Unicode (a lone surrogate)"
    if strict:
        t = text[len("<think>") :] if text.startswith("<think>") else text
        close = t.find("</think>")
        if close < 0:
            return None, "format: no </think>"
        rest = t[close + len("</think>") :].lstrip()
        if not rest.startswith("<answer>"):
            return None, "format: no <answer> right after </think>"
        if rest.find("</answer>") < 0:
            return None, "format: unclosed <answer>"
    i = text.rfind("<answer>")
    if i < 0:
        if "</answer>" in text:
            return None, "format: </answer> without <answer>"
        return text, None
    j = text.find("</answer>", i)
    if j < 0:
        return None, "format: unclosed <answer>"
    return text[i + len("<answer>") : j], None
