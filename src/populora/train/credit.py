"""Span credit for invalid proposals (`rl.teacher_credit=span`): the part validation rejected gets the blame.

With the paper's sequence credit every token of an invalid proposal carries its negative advantage. On the
bundled model most invalid proposals are one bad token among a hundred (a string input missing its opening
quote, one of code_f's ten inputs), so the penalty lands mostly on tokens that were fine, and only the
REINFORCE average over many proposals tells the bad one apart (docs/learning.md, "Span credit").

Validation already names the culprit (`"input 3: not a Python expression (SyntaxError)"`, `"syntax error
(SyntaxError)"`): `failure_span` turns that reason into the character span of the block it names, and
`span_advantages` keeps the advantage on the tokens overlapping it, 0 elsewhere. A reason that names no block
(the shown program's nondeterminism, a missing message, an unparsable frame) keeps sequence credit. Valid
proposals and the students are untouched.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from populora.tasks.extract import fenced_blocks

_INPUT_K = re.compile(r"input (\d+):")
_MISSING_INPUTS = re.compile(r"format: \d+ ```input blocks")
# Reasons about the proposal's own program (tasks/policy.py parse_program and the policy's checks).
_PROGRAM_REASONS = ("syntax error", "forbidden", "empty program", "program ", "no top-level", "f takes")


def failure_span(task: str, text: str, reason: str | None, n_inputs: int = 10) -> tuple[int, int] | None:
    """The `(start, end)` characters of `text` that `reason` blames, or None when it names no block.

    Blocks are read after the last `<answer>` when the completion has one (the azr frame); code_f's inputs are
    the last `n_inputs` input blocks, as its parser reads them."""
    if not reason:
        return None
    offset = max(text.rfind("<answer>"), 0)
    blocks = [b for b in fenced_blocks(text[offset:])]
    inputs = [b for b in blocks if b.lang == "input"]
    if m := _INPUT_K.match(reason):
        k = int(m.group(1)) + (len(inputs) - n_inputs if task == "code_f" else 0)
        return (offset + inputs[k].start, offset + inputs[k].end) if 0 <= k < len(inputs) else None
    if task == "code_f":
        if _MISSING_INPUTS.match(reason) and inputs:
            return offset + inputs[-1].end, len(text)  # the blocks stop being well-formed after the last one
        return None  # code_f's program is the shown one, not the teacher's
    if reason.startswith(_PROGRAM_REASONS):
        progs = [b for b in blocks if b.lang in ("python", "py", "python3", "")]
        return (offset + progs[0].start, offset + progs[0].end) if progs else None
    return None


def token_char_ends(tokenizer, token_ids: Sequence[int]) -> list[int]:
    """End character of each token in the decoded text (decoding every prefix, as `Generation.text` is decoded;
    a token that ends inside a multi-byte character is given the end reached so far)."""
    ends, best = [], 0
    for i in range(len(token_ids)):
        best = max(best, len(tokenizer.decode(list(token_ids[: i + 1]), skip_special_tokens=True)))
        ends.append(best)
    return ends


def span_advantages(advantage: float, ends: Sequence[int], span: tuple[int, int]) -> list[float] | None:
    """Per-token advantages: `advantage` on the tokens overlapping `span`, 0 elsewhere; None if none overlaps."""
    lo, hi = span
    out, start = [], 0
    for end in ends:
        out.append(float(advantage) if end > lo and start < hi else 0.0)
        start = end
    return out if any(out) else None


__all__ = ["failure_span", "span_advantages", "token_char_ends"]
