"""The smol presets (issue 18): `smol` uses the short AZR-style prompts, `smol-azr` the paper's; the short
template's proposals and answers parse back exactly, and its teacher prompts are much shorter."""

import random

import pytest

from populora import tasks
from populora.config import load_config
from populora.tasks.buffers import TaskBuffers

PROGRAM = "def f(x):\n    return x * 3"


def test_presets():
    smol, azr = load_config("smol"), load_config("smol-azr")
    assert smol.tasks.template == "compact-prefix" and azr.tasks.template == "azr"
    assert smol.model.name == azr.model.name == "smol"
    # Same algorithm and sampling: only the prompts and budgets differ.
    assert (smol.rl, smol.population, smol.evolution, smol.lora) == (
        azr.rl,
        azr.population,
        azr.evolution,
        azr.lora,
    )


@pytest.mark.parametrize("name", ["code_i", "code_o", "code_f"])
def test_azr_short_round_trip(name):
    task = tasks.get(name)
    inputs = [str(i) for i in range(task.config.n_inputs)] if name == "code_f" else ["4"]
    text = task.render_proposal(PROGRAM, inputs, message="times three", template="azr-short")
    parsed = task.parse_proposal(text, program=PROGRAM, template="azr-short")
    assert not isinstance(parsed, tasks.FormatError), parsed
    assert list(parsed.inputs) == inputs
    gold = PROGRAM if name == "code_f" else "12"
    answer = task.parse_answer(task.render_answer(gold, template="azr-short"), template="azr-short")
    assert not isinstance(answer, tasks.FormatError), answer


def test_azr_short_prompts_are_shorter():
    buffers = TaskBuffers(64)
    for name in ("code_i", "code_o"):
        task = tasks.get(name)
        refs = buffers[name].sample(2, random.Random(0))
        short, full = (
            task.teacher_prompt(refs, template="azr-short"),
            task.teacher_prompt(refs, template="azr"),
        )
        assert short.startswith("<|im_start|>system") and len(short) < 0.6 * len(full)
