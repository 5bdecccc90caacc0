"""Prompt rendering: EvalPlus instruct / direct completion, the AZR math template, chat prompts, stops."""

from populora.engine.testing import byte_tokenizer
from populora.evaluate.data import Item
from populora.evaluate.prompts import EVALPLUS_INSTRUCTION, EVALPLUS_RESPONSE, build_prompt, truncate_at_stop
from populora.evaluate.runner import program_from_response

TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
HE = Item(
    "humaneval+", "HumanEval/0", "code", 'def inc(x):\n    """Add one."""\n', "", {"entry_point": "inc"}
)
GSM = Item("gsm8k", "gsm8k/0", "math", "What is 2+3?", "5")


def test_evalplus_prompt_with_and_without_chat_template():
    plain = byte_tokenizer()
    direct = build_prompt(HE, "azr", plain)
    assert direct.direct and direct.text == HE.question.strip() + "\n" and "\ndef " in direct.stop
    # Direct completion grades prompt + completion, cut at the next top-level statement.
    completion = truncate_at_stop("    return x + 1\n\ndef other():\n    pass\n", direct.stop)
    assert program_from_response(HE, direct, completion).strip().endswith("return x + 1")

    chat = byte_tokenizer()
    chat.chat_template = TEMPLATE
    p = build_prompt(HE, "azr", chat)
    assert not p.direct and p.prefix == "```python\n"
    assert EVALPLUS_INSTRUCTION in p.text and EVALPLUS_RESPONSE in p.text
    assert p.text.endswith("```python\n")  # the assistant turn is pre-filled up to the opened fence
    code = program_from_response(HE, p, "def inc(x):\n    return x + 1\n")
    assert code.strip() == "def inc(x):\n    return x + 1"


def test_math_prompts():
    tok = byte_tokenizer()
    azr = build_prompt(GSM, "azr", tok)
    assert azr.text.startswith("A conversation between User and Assistant")
    assert azr.text.endswith("User: What is 2+3?\nAssistant: <think>")
    assert azr.stop == ["</answer>", "User:"]
    tok.chat_template = TEMPLATE
    chat = build_prompt(GSM, "chat", tok)
    assert "\\boxed{}" in chat.text and chat.text.endswith("<|im_start|>assistant\n")


def test_truncate_at_earliest_stop():
    assert truncate_at_stop("a</answer>b User: c", ["User:", "</answer>"]) == "a"
    assert truncate_at_stop("abc", []) == "abc"
