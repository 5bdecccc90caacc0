"""Evaluation prompts: the AZR evaluation prompts (default) and a plain chat prompt.

``azr`` follows what AZR's evaluation scripts run:

- HumanEval+/MBPP+: EvalPlus's default instruct prompt (``evalplus.codegen``): through the tokenizer's chat
  template, the instruction "Please provide a self-contained Python script that solves the following problem
  in a markdown code block:", the task in a fence, and the assistant turn pre-filled with the response prefix
  and an opened ```` ```python ```` fence; extra stop ``"\\n```\\n"``. Without a chat template EvalPlus falls
  back to direct completion of the task prompt (stops ``\\ndef``/``\\nclass``/... for HumanEval,
  ``\\n\"\"\"``/``\\nassert`` for MBPP) and grades ``prompt + completion``; so do we.
- LiveCodeBench: the R1-style wrapper (``User: ... Assistant: <think>``) around a ``# Task:`` statement asking
  for a program in ```` ```python ```` tags, the question, and the starter code or the stdin/stdout format
  (AZR's ``LMStyle.AZR``; its exact wording is not in our references, this is a faithful reconstruction).
- Math: the AZR template: the R1 wrapper ``A conversation between User and Assistant ... User: {problem}
  \\nAssistant: <think>``, stop words ``</answer>`` and ``User:``.

``chat`` is a plain chat prompt through the tokenizer's chat template (or ``User: ...\\nAssistant:`` when the
tokenizer has none): the question plus a one-line format instruction (a markdown code block for code;
"put your final answer within \\boxed{}" for math).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from populora.evaluate.data import Item

PROMPT_STYLES = ("azr", "chat")

R1_WRAPPER = (
    "A conversation between User and Assistant. The user asks a question, and the Assistant solves it. "
    "The assistant first thinks about the reasoning process in the mind and then provides the user with the "
    "answer. The reasoning process and answer are enclosed within <think> </think> and <answer> </answer> "
    "tags, respectively, i.e., <think> reasoning process here </think> <answer> answer here </answer>. "
    "User: {input}\nAssistant: <think>"
)
EVALPLUS_INSTRUCTION = (
    "Please provide a self-contained Python script that solves the following problem in a "
    "markdown code block:"
)
EVALPLUS_RESPONSE = (
    "Below is a Python script with a self-contained function that solves the problem and passes "
    "corresponding tests:"
)
_SPLIT = "-[[]]-populora-split-[[]]-"
DIRECT_STOPS = {
    "humaneval+": ["\ndef ", "\nclass ", "\nimport ", "\nfrom ", "\nassert "],
    "mbpp+": ['\n"""', "\nassert"],
}
EVALPLUS_EOS = ["<|endoftext|>", "<|endofmask|>", "</s>", "\nif __name__", "\ndef main(", "\nprint("]
LCB_TASK = (
    "# Task: You will be given a question (problem specification) and will generate a correct Python "
    "program that matches the specification and passes all tests. The code should be wrapped in "
    "```python``` tags."
)
LCB_WITH_STARTER = (
    "You will use the following starter code to write the solution to the problem and enclose "
    "your code within delimiters."
)
LCB_STDIN = (
    "Read the inputs from stdin solve the problem and write the answer to stdout (do not directly test "
    "on the sample inputs). Enclose your code within delimiters as follows."
)
LCB_SYSTEM = (
    "You are an expert Python programmer. You will be given a question (problem specification) and will "
    "generate a correct Python program that matches the specification and passes all tests. You will "
    "NOT return anything except for the program."
)
MATH_CHAT_SUFFIX = "\nPlease reason step by step, and put your final answer within \\boxed{}."


@dataclass(frozen=True)
class Prompt:
    """A rendered prompt: ``text`` to feed the model, ``stop`` strings that end the answer, ``prefix`` (the part
    of the answer already in the prompt, prepended to the generation before extraction) and ``direct``
    (EvalPlus direct completion: the graded program is ``item.question + completion``)."""

    text: str
    stop: list[str] = field(default_factory=list)
    prefix: str = ""
    direct: bool = False


def has_chat_template(tokenizer) -> bool:
    return bool(getattr(tokenizer, "chat_template", None))


def _chat(tokenizer, messages: list[dict]) -> str:
    if has_chat_template(tokenizer):
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    body = "\n\n".join(m["content"] for m in messages if m["role"] != "assistant")
    return f"User: {body}\nAssistant:"


def _evalplus_azr(item: Item, tokenizer) -> Prompt:
    task = item.question.strip() + "\n"
    if not has_chat_template(tokenizer):
        return Prompt(task, EVALPLUS_EOS + DIRECT_STOPS[item.benchmark], "", direct=True)
    user = f"{EVALPLUS_INSTRUCTION}\n```\n{item.question.strip()}\n```\n"
    assistant = f"{EVALPLUS_RESPONSE}\n```python\n{_SPLIT}\n```\n"
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": user}, {"role": "assistant", "content": assistant}], tokenize=False
    )
    text = text.split(_SPLIT)[0]
    # The prompt already opened the fence; the answer is the code up to the closing fence.
    return Prompt(text, EVALPLUS_EOS + ["\n```\n", "\n```"], "```python\n")


def _lcb_body(item: Item) -> str:
    starter = item.meta.get("starter_code") or ""
    body = f"Question:\n{item.question}\n\n"
    if starter:
        body += f"{LCB_WITH_STARTER}\n```python\n{starter}\n```\n\n"
    else:
        body += f"{LCB_STDIN}\n```python\n# YOUR CODE HERE\n```\n\n"
    return body


def build_prompt(item: Item, style: str, tokenizer) -> Prompt:
    """The prompt for one item under ``style`` ("azr" or "chat")."""
    if style not in PROMPT_STYLES:
        raise ValueError(f"unknown prompt style {style!r}; choose from {', '.join(PROMPT_STYLES)}")
    if item.kind == "code":
        if style == "azr":
            return _evalplus_azr(item, tokenizer)
        user = f"{EVALPLUS_INSTRUCTION}\n```\n{item.question.strip()}\n```\n"
        return Prompt(_chat(tokenizer, [{"role": "user", "content": user}]), [])
    if item.kind == "lcb":
        if style == "azr":
            return Prompt(R1_WRAPPER.format(input=f"{LCB_TASK}\n\n{_lcb_body(item)}"), ["User:"], "<think>")
        messages = [
            {"role": "system", "content": LCB_SYSTEM},
            {
                "role": "user",
                "content": "### " + _lcb_body(item) + "### Answer: (use the provided format "
                "with backticks)\n\n",
            },
        ]
        return Prompt(_chat(tokenizer, messages), [])
    if style == "azr":
        return Prompt(R1_WRAPPER.format(input=item.question), ["</answer>", "User:"], "<think>")
    return Prompt(_chat(tokenizer, [{"role": "user", "content": item.question + MATH_CHAT_SUFFIX}]), [])


def truncate_at_stop(text: str, stops: list[str]) -> str:
    """Cut ``text`` at the earliest stop string (the stop itself removed), as vLLM/EvalPlus do."""
    cut = len(text)
    for s in stops:
        if s:
            i = text.find(s)
            if 0 <= i < cut:
                cut = i
    return text[:cut]
