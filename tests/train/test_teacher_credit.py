"""`rl.teacher_credit=span`: an invalid proposal's advantage on the block its validation reason names, 0 elsewhere.

Hand-made texts for the spans; the byte tokenizer of the tiny random model (one token per ASCII character) for
the token mapping; the trainer's own `build_rows` against its sequence-credit rows.
"""

import pytest
from test_fidelity import _trainer

from populora.config import ConfigError, load_config
from populora.engine import Generation
from populora.engine.testing import byte_tokenizer
from populora.train.credit import blamed_tokens, failure_span, span_advantages
from populora.train.records import ProposalTrace

CODE_F = "```input\n'a'\n```\n```input\nb'\n```\n```input\n'c'\n```\n```message\nletters\n```"
CODE_O = "```python\ndef f(x):\n    return x +\n```\n```input\n3\n```"


def _blamed(task: str, text: str, reason: str, n: int = 3) -> str | None:
    span = failure_span(task, text, reason, n_inputs=n)
    return None if span is None else text[span[0] : span[1]]


def test_a_bad_input_blames_its_own_block():
    assert _blamed("code_f", CODE_F, "input 1: not a Python expression (SyntaxError)") == "```input\nb'\n```"
    # code_f reads the LAST n input blocks: with n = 2, input 0 is the second block
    assert _blamed("code_f", CODE_F, "input 0: raised TypeError", n=2) == "```input\nb'\n```"
    assert _blamed("code_o", CODE_O, "input 0: raised TypeError") == "```input\n3\n```"


def test_a_bad_program_blames_the_program_block():
    assert (
        _blamed("code_o", CODE_O, "syntax error (SyntaxError)") == "```python\ndef f(x):\n    return x +\n```"
    )
    assert _blamed("code_i", CODE_O, "forbidden name: out (not an allowed builtin)").startswith("```python")


def test_missing_inputs_blame_what_follows_the_last_good_block():
    text = "```input\n'a'\n```\n```input\n'b\n\n\n"  # the second block never closes
    assert _blamed("code_f", text, "format: 1 ```input blocks, need 3") == "\n```input\n'b\n\n\n"


def test_reasons_that_name_no_block_keep_sequence_credit():
    assert _blamed("code_f", CODE_F, "nondeterministic (different results when re-run)") is None
    assert _blamed("code_f", CODE_F, "format: no ```message block") is None
    assert _blamed("code_o", CODE_O, "format: unparsable (ValueError)") is None
    assert _blamed("code_o", CODE_O, "input 4: raised TypeError") is None  # no such block
    assert _blamed("code_o", CODE_O, None) is None


def test_blocks_are_read_inside_the_answer_frame():
    text = "<think>```input\nx\n```</think><answer>```python\ndef f(a):\n    return a\n```\n```input\n(\n```</answer>"
    assert _blamed("code_i", text, "input 0: not a Python expression (SyntaxError)") == "```input\n(\n```"


def test_span_advantages_by_hand():
    assert span_advantages(-2.0, 4, range(1, 3)) == [0.0, -2.0, -2.0, 0.0]
    assert span_advantages(-2.0, 2, range(2, 2)) is None  # nothing overlaps: the caller keeps its scalar
    assert span_advantages(0.0, 2, range(0, 2)) is None


def test_blamed_tokens_are_the_ones_overlapping_the_span():
    tok = byte_tokenizer()  # one token per ASCII character
    ids = tok("abcdefghijkl")["input_ids"]
    assert blamed_tokens(tok, ids, (5, 9)) == range(5, 9)
    assert blamed_tokens(tok, ids, (0, 12)) == range(0, 12)
    assert blamed_tokens(tok, ids, (11, 40)) == range(11, 12)


def test_the_validators_own_reasons_name_a_block():
    # The reasons are matched as text; pin the wording the real tasks produce (no sandbox run is needed:
    # these fail before execution).
    from populora import tasks

    code_o = tasks.get("code_o")
    bad_program = code_o.parse_proposal(CODE_O, template="compact")
    (invalid,) = code_o.validate([bad_program], sandbox=None)
    assert _blamed("code_o", CODE_O, invalid.reason).startswith("```python")
    text = "```python\ndef f(x):\n    return x\n```\n```input\n'ab\n```"
    (invalid,) = code_o.validate([code_o.parse_proposal(text, template="compact")], sandbox=None)
    assert _blamed("code_o", text, invalid.reason) == "```input\n'ab\n```"
    code_f = tasks.get("code_f")
    n = code_f.config.n_inputs
    inputs = ["'a'"] * (n - 1) + ["b'"]
    text = "\n".join(f"```input\n{s}\n```" for s in inputs) + "\n```message\nletters\n```"
    proposal = code_f.parse_proposal(text, program="def f(s):\n    return s", template="compact")
    (invalid,) = code_f.validate([proposal], sandbox=None)
    assert _blamed("code_f", text, invalid.reason, n=n) == "```input\nb'\n```"


def _trace(tok, task: str, text: str, reason: str | None) -> ProposalTrace:
    ids = tok(text)["input_ids"]
    gen = Generation(ids, tok.decode(ids, skip_special_tokens=True), [-1.0] * len(ids), "stop", [1, 2, 3], 0)
    tr = ProposalTrace("T0", "S0", task, gen=gen)
    tr.reason = reason
    if reason is None:
        tr.problem = object()  # valid
        tr.reward = 0.0
    else:
        tr.reward = -1.0
    return tr


def test_build_rows_moves_only_the_invalid_proposals_advantage_onto_its_span(tmp_path):
    tok = byte_tokenizer()
    good = "```python\ndef f(x):\n    return x\n```\n```input\n1\n```"

    def traces():
        return [
            _trace(tok, "code_o", CODE_O, "syntax error (SyntaxError)"),
            _trace(tok, "code_o", good, None),
            _trace(tok, "code_o", CODE_O, "format: unparsable (ValueError)"),  # names no block
        ]

    seq = _trainer(tmp_path, "seq", [], n_slots=4).build_rows(traces())
    span = _trainer(tmp_path, "span", ["rl.teacher_credit=span"], n_slots=4).build_rows(traces())
    a = seq[0].advantages
    assert a < 0
    program = len("```python\ndef f(x):\n    return x +\n```")
    assert span[0].advantages == pytest.approx([a] * program + [0.0] * (len(CODE_O) - program))
    assert span[1].advantages == pytest.approx(seq[1].advantages)  # valid: unchanged scalar
    assert span[2].advantages == pytest.approx(seq[2].advantages)  # no block named: sequence credit


def test_teacher_credit_is_checked():
    with pytest.raises(ConfigError, match="teacher_credit"):
        load_config("tiny", ["rl.teacher_credit=tokens"])


def test_the_validity_control_negates_per_token_advantages(tmp_path):
    from populora.experiment.teacher_controls import validity_rows

    tok = byte_tokenizer()
    good = "```python\ndef f(x):\n    return x\n```\n```input\n1\n```"
    tr = _trainer(tmp_path, "span", ["rl.teacher_credit=span"], n_slots=4)
    bad = _trace(tok, "code_o", CODE_O, "input 0: raised TypeError")
    signed = validity_rows(tr, [bad, _trace(tok, "code_o", good, None)], 1.0)
    negated = validity_rows(tr, [bad, _trace(tok, "code_o", good, None)], -1.0)
    blamed = [a for a in signed[0].advantages if a]
    assert len(blamed) == len("```input\n3\n```") and all(a < 0 for a in blamed)
    assert negated[0].advantages == pytest.approx([-a for a in signed[0].advantages])
    assert negated[1].advantages == pytest.approx(-signed[1].advantages)
