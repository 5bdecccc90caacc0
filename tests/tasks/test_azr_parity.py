"""Where the parsers and the `azr` prompts follow AZR's code (LeapLabTHU/Absolute-Zero-Reasoner a82124e): the
answer graded is the last `<answer>` (AZR's `extract_answer`), the code_f teacher sees AZR's
`f(<|YOUR INPUT WILL BE PLUGGED HERE|>)` line under the program; and a code_i answer with no arguments is one
format error whether its block is empty or holds only a comment. The differences kept on purpose are in
docs/paper-choices.md ("Parsing answers: where AZR's parser differs")."""

from populora.tasks import get
from populora.tasks.extract import answer_region
from populora.tasks.types import Answer, FormatError


def _azr(body: str) -> str:
    return f"I think.</think> {body}"  # the prompt ends in `<think>`: the completion starts inside it


def test_azr_template_grades_the_last_answer_as_azr_does():
    t = get("code_o")
    first, last = "<answer>\n```output\n1\n```\n</answer>", "<answer>\n```output\n2\n```\n</answer>"
    parsed = t.parse_answer(_azr(f"{first} wait, no. {last}"), template="azr")
    assert parsed == Answer("2")
    # the same region as without the strict frame (docs/tasks.md: "the last closed <answer>")
    text = _azr(f"{first} {last}")
    assert answer_region(text, strict=True) == answer_region(text, strict=False)
    # the frame is still AZR's: </think>, then at once <answer> ... </answer>
    assert isinstance(t.parse_answer(f"{first} {last}", template="azr"), FormatError)
    assert t.parse_answer(_azr(f"{first} <answer>\n```output\n2"), template="azr") == FormatError(
        "format: unclosed <answer>"
    )


def test_azr_template_takes_the_proposal_from_the_last_answer():
    """The proposal's blocks come from the last <answer>, where span credit (train/credit.py) reads them."""
    t = get("code_i")
    old = "<answer>\n```python\ndef f(a):\n    return a\n```\n```input\n1\n```\n</answer>"
    new = "<answer>\n```python\ndef f(a):\n    return a + 1\n```\n```input\n2\n```\n</answer>"
    p = t.parse_proposal(_azr(f"{old}\n{new}"), template="azr")
    assert p.program == "def f(a):\n    return a + 1" and p.inputs == ("2",)


def test_code_i_answer_without_arguments_is_one_format_error():
    t = get("code_i")
    empty = FormatError("format: input is not a literal argument list (empty argument list)")
    assert t.parse_answer("```input\n\n```") == empty
    assert t.parse_answer("```input\n# no arguments, only a comment\n```") == empty  # was f()
    assert t.parse_answer("<answer># a comment</answer>") == empty  # the whole-answer fallback: the same rule
    # a comment beside real arguments is fine
    assert t.parse_answer("```input\n1, 'a'  # the input\n```") == Answer("1, 'a'  # the input")


def test_azr_code_f_teacher_prompt_has_azrs_plug_line():
    prompt = get("code_f").teacher_prompt("def f(a):\n    return a", template="azr")
    assert "```python\ndef f(a):\n    return a\nf(<|YOUR INPUT WILL BE PLUGGED HERE|>)\n```" in prompt
