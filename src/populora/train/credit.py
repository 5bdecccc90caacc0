"""Span credit for invalid proposals (`rl.teacher_credit=span`): the part validation rejected gets the blame.

With the paper's sequence credit every token of an invalid proposal carries its negative advantage. On the
bundled model most invalid proposals are one bad token among a hundred (a string input missing its opening
quote, one of code_f's ten inputs), so the penalty lands mostly on tokens that were fine, and only the
REINFORCE average over many proposals tells the bad one apart (docs/learning.md, "Span credit").

Validation already names the culprit (`"input 3: not a Python expression (SyntaxError)"`, `"syntax error
(SyntaxError)"`): `failure_span` turns that reason into the character span of the block it names, `blamed_tokens`
finds the tokens overlapping it and `span_advantages` keeps the advantage there, 0 elsewhere. A reason that names no block
(the shown program's nondeterminism, a missing message, an unparsable frame) keeps sequence credit. Valid
proposals and the students are untouched.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Sequence

from populora import tasks
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
    blocks = fenced_blocks(text[offset:])
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


def blamed_tokens(tokenizer, token_ids: Sequence[int], span: tuple[int, int]) -> range:
    """The tokens whose decoded characters overlap `span` (decoded as `Generation.text` is).

    A bisection over prefix decodes: O(log n) decodes per proposal, not one per token (a 1,024-token proposal
    would otherwise cost a million decoded tokens in every step's update)."""
    n = len(token_ids)

    def end(i: int) -> int:  # characters decoded once token i is in
        return len(tokenizer.decode(list(token_ids[: i + 1]), skip_special_tokens=True))

    first = bisect.bisect_right(range(n), span[0], key=end)  # the first token ending past the span's start
    after = min(n, bisect.bisect_left(range(n), span[1], key=end) + 1)  # past the token reaching its end
    return range(first, max(first, after))


def span_advantages(advantage: float, n_tokens: int, tokens: range) -> list[float] | None:
    """Per-token advantages: `advantage` on `tokens`, 0 elsewhere; None if that leaves nothing to train on."""
    out = [float(advantage) if i in tokens else 0.0 for i in range(n_tokens)]
    return out if any(out) else None


def blame_spans(rows: list, owners: list, tokenizer) -> None:
    """Give each invalid proposal's row (`owners[i]` is row i's trace, None for a student row) its advantage
    only on the block its reason names; a row whose reason names no block keeps sequence credit."""
    n_inputs = tasks.get("code_f").config.n_inputs
    for row, trace in zip(rows, owners, strict=True):
        if trace is None or trace.valid:
            continue
        span = failure_span(trace.task, trace.gen.text, trace.reason, n_inputs)
        if span is None:
            continue
        ids = trace.gen.token_ids
        per_token = span_advantages(row.advantages, len(ids), blamed_tokens(tokenizer, ids, span))
        if per_token is not None:
            row.advantages = per_token


__all__ = ["blame_spans", "blamed_tokens", "failure_span", "span_advantages"]
