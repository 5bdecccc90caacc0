"""LiveCodeBench: official-format loader (compressed private tests, release window) and grader, on a fixture."""

import base64
import json
import pickle
import zlib

import pytest

from populora.evaluate.code_grader import CodeGrader, CodeLimits
from populora.evaluate.lcb import LCBUnavailable, decode_tests, load_lcb
from populora.evaluate.prompts import build_prompt
from populora.evaluate.runner import EvalOptions, grade, run_oracle


def _compress(tests: list[dict]) -> str:
    return base64.b64encode(zlib.compress(pickle.dumps(json.dumps(tests)))).decode()


def _row(qid, date, content, starter, public, private, func=None, solution=None, compress=True):
    row = {
        "question_title": qid,
        "question_content": content,
        "platform": "leetcode" if func else "atcoder",
        "question_id": qid,
        "contest_id": "c1",
        "contest_date": date,
        "starter_code": starter,
        "difficulty": "easy",
        "public_test_cases": json.dumps(public),
        "private_test_cases": _compress(private) if compress else json.dumps(private),
        "metadata": json.dumps({"func_name": func} if func else {}),
    }
    if solution:
        row["solution"] = solution
    return row


FUNC_OK = (
    "class Solution:\n    def addAll(self, k: int, xs: List[int]) -> List[int]:\n"
    "        return tuple(x + k for x in xs)\n"
)
STDIN_OK = (
    "def main():\n    n = int(input())\n    xs = list(map(int, input().split()))\n"
    "    print(sum(xs))\n    print(sum(xs) / n)\n\nif __name__ == '__main__':\n    main()\n"
)


@pytest.fixture()
def lcb_file(tmp_path):
    f = lambda i, o: {"input": i, "output": o, "testtype": "functional"}  # noqa: E731
    s = lambda i, o: {"input": i, "output": o, "testtype": "stdin"}  # noqa: E731
    rows = [
        _row(
            "p-func",
            "2024-06-01T00:00:00",
            "Add k to every element.",
            "class Solution:\n    def addAll(self, k: int, xs: List[int]) -> List[int]:\n        ",
            [f("1\n[1, 2]", "[2, 3]")],
            [f("0\n[]", "[]"), f("-5\n[5]", "[0]")],
            func="addAll",
            solution=FUNC_OK,
        ),
        _row(
            "p-stdin",
            "2023-07-15T00:00:00",
            "Print the sum and the mean.",
            "",
            [s("4\n1 2 3 4\n", "10\n2.5\n")],
            [s("2\n1 2\n", "3\n1.50\n")],
            solution=STDIN_OK,
            compress=False,
        ),
        _row("p-late", "2025-03-01T00:00:00", "Outside release_v5.", "", [s("1\n", "1\n")], []),
        _row("p-early", "2023-04-30T00:00:00", "Before release_v1.", "", [s("1\n", "1\n")], []),
    ]
    path = tmp_path / "test.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_loader_decodes_and_filters_by_window(lcb_file):
    items = load_lcb(lcb_file)
    assert [it.id for it in items] == ["lcb/p-stdin", "lcb/p-func"]  # sorted by date, window applied
    func = items[1]
    assert func.meta["fn_name"] == "addAll" and len(func.meta["tests"]) == 3
    assert decode_tests(_compress([{"input": "1", "output": "2"}])) == [{"input": "1", "output": "2"}]
    assert [it.id for it in load_lcb(lcb_file, release="release_v1")] == ["lcb/p-stdin"]


def test_unavailable_without_path(monkeypatch):
    monkeypatch.delenv("POPULORA_LCB_PATH", raising=False)
    with pytest.raises(LCBUnavailable, match="--lcb-path"):
        load_lcb(None)


def test_grader_functional_and_stdin(lcb_file):
    stdin_item, func_item = load_lcb(lcb_file)
    pairs = [
        (func_item, FUNC_OK),
        (
            func_item,
            "class Solution:\n    def addAll(self, k, xs):\n        return [x + k + 1 for x in xs]\n",
        ),
        (stdin_item, STDIN_OK),
        # sys.stdin.buffer and open(0), printing 1.5000 (equal as Decimal to 1.50) and trailing spaces.
        (
            stdin_item,
            "import sys\ndata = sys.stdin.buffer.read().split()\nxs = list(map(int, data[1:]))\n"
            "print(sum(xs), ' ')\nprint('%.4f' % (sum(xs) / len(xs)))\n",
        ),
        (stdin_item, "data = open(0).read().split()\nprint(sum(map(int, data[1:])))\nprint(1)\n"),
        (stdin_item, "while True:\n    pass\n"),
        (stdin_item, "import sys\nsys.exit(0)\n"),
    ]
    res = CodeGrader(workers=2, limits=CodeLimits(lcb_timeout_s=1.0)).grade(pairs)
    assert [r.passed for r in res] == [True, False, True, True, False, False, False]
    assert res[5].status == "timeout"


def test_model_response_extraction_and_oracle(lcb_file, monkeypatch):
    stdin_item, func_item = load_lcb(lcb_file)
    opts = EvalOptions(benchmarks=["lcb"], lcb_path=lcb_file, code_limits=CodeLimits(lcb_timeout_s=2.0))
    prompts = [build_prompt(it, "azr", None) for it in (stdin_item, func_item)]
    assert prompts[0].text.endswith("Assistant: <think>") and "stdin" in prompts[0].text
    assert "class Solution" in prompts[1].text
    responses = [
        f"reasoning </think> <answer>\n```python\n{STDIN_OK}```\n</answer>",
        "<answer>no code</answer>",
    ]
    graded = grade([stdin_item, func_item], responses, prompts, opts)
    assert [ok for ok, _ in graded] == [True, False]
    gold = run_oracle("gold", opts)
    wrong = run_oracle("wrong", opts)
    assert gold.rows[0]["pass@1"] == 1.0 and wrong.rows[0]["pass@1"] == 0.0


def test_candidate_cannot_see_or_fool_the_expected_outputs(lcb_file):
    from populora.evaluate.code_grader import lcb_job

    stdin_item, func_item = load_lcb(lcb_file)
    always_eq = (
        "class Yes(list):\n    def __eq__(self, other):\n        return True\n    __hash__ = None\n"
        "class Solution:\n    def addAll(self, k, xs):\n        return Yes()\n"
    )
    res = CodeGrader(workers=2, limits=CodeLimits(lcb_timeout_s=1.0)).grade([(func_item, always_eq)])
    assert res[0].passed is False  # compared outside the job, on plain data
    for item in (stdin_item, func_item):
        program, _call = lcb_job(item, "pass", CodeLimits())
        payload = json.loads(json.loads(program.rsplit("_PAYLOAD = ", 1)[1]))
        assert set(payload) == {"code", "inputs", "fn_name", "timeout"}
        assert payload["inputs"] == [t["input"] for t in item.meta["tests"]]


def test_a_malformed_run_fails_its_candidate_and_no_other(lcb_file):
    # Issue 50: the key of this dict travels as a list, and decoding it raised TypeError out of the grader.
    stdin_item, func_item = load_lcb(lcb_file)
    cheat = (
        "class L(list):\n    __hash__ = lambda self: 1\n"
        "class Solution:\n    def addAll(self, k, xs):\n        return {L(xs): k}\n"
    )
    patched = "import json\njson.dumps = lambda *a, **k: '{\"status\": 1}'\n" + FUNC_OK
    res = CodeGrader(workers=2, limits=CodeLimits(lcb_timeout_s=1.0)).grade(
        [(func_item, cheat), (func_item, FUNC_OK), (func_item, patched)]
    )
    assert [r.passed for r in res] == [False, True, False]
    assert all(r.status == "fail" and "no readable run" in r.detail for r in (res[0], res[2]))
