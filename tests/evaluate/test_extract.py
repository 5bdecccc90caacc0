"""Answer extraction: AZR math answers, code blocks, EvalPlus-style sanitising, LiveCodeBench fences."""

import pytest

from populora.evaluate.data import last_boxed, math_gold
from populora.evaluate.extract import (
    answer_block,
    extract_azr_answer,
    extract_code_block,
    fenced_blocks,
    lcb_extract_code,
    longest_parsable,
    sanitize,
)


def test_last_boxed_nested_braces_and_fbox():
    assert last_boxed(r"a \boxed{1} b \boxed{\frac{1}{2}} c") == r"\frac{1}{2}"
    assert last_boxed(r"\fbox{7}") == "7"
    assert last_boxed(r"\boxed{\left( 3, \frac{\pi}{2} \right)}") == r"\left( 3, \frac{\pi}{2} \right)"
    assert last_boxed("no box") is None
    assert last_boxed(r"\boxed{unclosed") is None


def test_azr_answer_block_order():
    # Inside <answer>: the last boxed wins over the text.
    assert extract_azr_answer(r"<think>\boxed{9}</think><answer>so \boxed{4} then \boxed{5}</answer>") == "5"
    # <answer> without boxed: the whole block; the closing tag may be missing (it is a stop word).
    assert extract_azr_answer("<think>t</think> <answer> 42 ") == "42"
    # Only the last <answer> block counts.
    assert extract_azr_answer("<answer>1</answer> more <answer>2</answer>") == "2"
    # No <answer>: last boxed anywhere, then the first \[ \], then "".
    assert extract_azr_answer(r"x \boxed{3} y \boxed{8}") == "8"
    assert extract_azr_answer(r"so \[ x = 2 \] and \[ 3 \]") == "x = 2"
    assert extract_azr_answer("I don't know") == ""
    assert answer_block("none") is None


def test_math_gold_fields():
    assert math_gold("gsm8k", {"answer": "She has 3 + 4 = 7\n#### 1,234"}) == "1234"
    assert math_gold("amc23", {"answer": 27.0}) == "27"
    assert math_gold("math500", {"solution": r"so \boxed{\frac{1}{2}}.", "answer": "0.5"}) == r"\frac{1}{2}"
    assert math_gold("olympiadbench", {"final_answer": ["$\\frac{41}{12}$"]}) == "\\frac{41}{12}"
    assert math_gold("aime24", {"answer": "204"}) == "204"


def test_code_block_extraction():
    text = "Here:\n```python\ndef f():\n    return 1\n```\nand\n```\nprint(2)\n```\n```py\ndef g():\n    return 3\n```"
    assert extract_code_block(text).strip() == "def g():\n    return 3"
    assert extract_code_block("```python\ndef h():\n    return 4").strip() == "def h():\n    return 4"
    assert extract_code_block("plain text") == "plain text"
    assert lcb_extract_code("a\n```python\nx = 1\n```\nb\n```\ny = 2\n```") == "y = 2"
    assert lcb_extract_code("no fences") == ""


def test_sanitize_keeps_reachable_definitions_only():
    code = (
        "import math\n"
        "from typing import List\n"
        "HELPER_K = 3\n"
        "def helper(x):\n    return x * HELPER_K\n"
        "def unrelated():\n    return 0\n"
        "def noreturn():\n    pass\n"
        "def solve(xs: List[int]) -> int:\n    return sum(helper(x) for x in xs) + int(math.pi)\n"
        "print(solve([1, 2]))\n"
        "assert solve([1]) == 6\n"
    )
    out = sanitize(code, "solve")
    assert "def solve" in out and "def helper" in out and "HELPER_K = 3" in out
    assert "import math" in out and "from typing import List" in out
    assert "unrelated" not in out and "noreturn" not in out
    assert "print(" not in out and "assert" not in out
    ns: dict = {}
    exec(out, ns)
    assert ns["solve"]([1, 2]) == 12


def test_longest_parsable_span_drops_prose():
    text = "Sure! Here is the code:\ndef f(x):\n    return x + 1\nThis function adds one."
    assert longest_parsable(text).strip() == "def f(x):\n    return x + 1"
    assert sanitize(text, "f").strip() == "def f(x):\n    return x + 1"
    assert sanitize("!!! ???", "f") == ""


# Hostile text (issue 50). Each input below made the old extraction run for minutes (lazy regular expressions
# rescanning to the end from every opening; a longest-span search with one parse per pair of lines); the
# timeout marks only a hang, the asserts check the results.
@pytest.mark.timeout(60)
def test_display_fallback_on_120000_characters_of_openings():
    openings = "\\[" * 60_000  # no closing: the old `\[(.*?)\]` search rescanned the rest from each one
    assert extract_azr_answer(openings) == ""
    assert extract_azr_answer(openings + " 7 \\] \\[ 8 \\]") == ("\\[" * 59_999 + " 7").strip()
    assert extract_azr_answer("x \\[ 5 \\]" + openings) == "5"


@pytest.mark.timeout(60)
def test_fence_scan_on_300000_backticks():
    assert fenced_blocks("```" * 100_000) == []  # no newline after any fence: no block
    ticks = "```" * 100_000
    assert fenced_blocks(ticks + "\nx = 1\n```") == [("", "x = 1\n")]
    assert extract_code_block("```python\ndef f():\n    return 2\n```" + ticks) == "def f():\n    return 2\n"


@pytest.mark.timeout(60)
def test_sanitiser_on_600_lines_of_open_brackets():
    junk = "x = (\n" * 600  # nothing parses: the old search parsed every pair of lines (400 lines took 66 s)
    assert longest_parsable(junk) == "" and sanitize(junk, "f") == ""
    good = "def f(x):\n    return x + 1\n"
    out = sanitize(good + junk[: 6 * 150], "f")  # the answer, then 150 junk lines: found within the bound
    assert out.strip() == good.strip()
    ns: dict = {}
    exec(out, ns)
    assert ns["f"](1) == 2


def test_sanitiser_bound_keeps_the_longest_span_found(monkeypatch):
    from populora.evaluate import extract

    text = "Sure:\ndef f(x):\n    return x\nprose\ny = 2\n"
    want = longest_parsable(text)
    monkeypatch.setattr(extract, "MAX_PARSES", 2)  # the search stops after its second parse
    assert longest_parsable(text) in ("", want)
    monkeypatch.setattr(extract, "MAX_PARSES", 10_000)
    monkeypatch.setattr(extract, "MAX_PARSED_CHARS", 0)  # no parse beyond the first (the whole text)
    assert longest_parsable(text) == ""
