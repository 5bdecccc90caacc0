"""Response prefixes (template.json "prefixes"): the prompt ends with the opening of the answer's first block,
the parsers put it back, and `render_proposal` / `render_answer` give what the model writes after the prompt."""

import json

import pytest

from populora import tasks as T
from populora.tasks.templates import load_template
from populora.tasks.types import FormatError, Problem


def _problem(task: str) -> Problem:
    if task == "code_f":
        return Problem(
            task="code_f",
            program="def f(x):\n    return x + 1",
            inputs=tuple(str(i) for i in range(10)),
            outputs=tuple(str(i + 1) for i in range(10)),
            message="adds one",
        )
    return Problem(task=task, program="def f(x):\n    return x + 1", inputs=("3",), outputs=("4",))


@pytest.mark.parametrize("task", ["code_i", "code_o", "code_f"])
def test_prompts_end_with_the_prefix_and_parsers_restore_it(task):
    t = T.get(task)
    ts = load_template("compact-prefix")
    p = _problem(task)
    teacher = t.teacher_prompt([p] if task != "code_f" else p, template="compact-prefix")
    assert teacher.endswith(ts.prefixes[f"teacher_{task}"])
    student = t.student_prompt(p, template="compact-prefix")
    assert student.endswith(ts.prefixes[f"student_{task}"])
    # what a perfect model writes after the prompt: the answer without its opening
    answer = t.render_answer(t.gold_answer(p), template="compact-prefix")
    assert not answer.startswith("```")
    parsed = t.parse_answer(answer, template="compact-prefix")
    assert not isinstance(parsed, FormatError)
    # the same text parsed without the template lacks its opening fence
    assert isinstance(t.parse_answer(answer, template=None), FormatError)


def test_proposal_round_trip_through_the_prefix():
    t = T.get("code_o")
    text = t.render_proposal("def f(x):\n    return x * 2", ["5"], template="compact-prefix")
    assert text.startswith("def f(x)")  # "```python\n" was written by the prompt
    prop = t.parse_proposal(text, template="compact-prefix")
    assert prop.program == "def f(x):\n    return x * 2" and prop.inputs == ("5",)
    # templates without prefixes are unchanged
    assert t.render_proposal("def f(x):\n    return x", ["1"], template="compact").startswith("```python")


def test_bad_prefixes_are_named(tmp_path):
    import shutil

    from populora.tasks.templates import TEMPLATE_ROOT

    d = tmp_path / "mine"
    shutil.copytree(TEMPLATE_ROOT / "compact", d)
    (d / "template.json").write_text(json.dumps({"prefixes": {"teacher_code_x": "```python\n"}}))
    with pytest.raises(ValueError, match="prefixes.*teacher_code_i"):
        load_template(str(d))
