"""Math grading: math-verify equivalences (gold first), AZR extraction rules, timeouts off the main thread."""

import threading

import pytest

from populora.evaluate.math_grader import MathGrader, grade_response, verify_answer


@pytest.mark.parametrize(
    ("gold", "pred"),
    [
        (r"\frac{1}{2}", "0.5"),
        (r"3\sqrt{13}", r"\sqrt{117}"),
        (r"\left( 3, \frac{\pi}{2} \right)", r"(3, \frac{\pi}{2})"),
        ("27", "27.0"),
        ("1234", "1,234"),
        (r"\frac{41}{12}", r"\dfrac{41}{12}"),
        ("x^2+2x+1", "(x+1)^2"),
        (r"\$18.90", "18.9"),  # currency signs in MATH-500 golds
        (r"\$32,\!348", "32348"),
    ],
)
def test_equivalent_answers(gold, pred):
    assert verify_answer(gold, pred, exact=False)


@pytest.mark.parametrize(
    ("gold", "pred"), [(r"\frac{14}{3}", "4"), ("204", "205"), ("(1,2)", "(2,1)"), ("5", "")]
)
def test_different_answers(gold, pred):
    assert not verify_answer(gold, pred)


def test_response_level_extraction():
    assert grade_response("204", "<think>...</think> <answer> The answer is \\boxed{204} </answer>")
    assert grade_response("204", "<answer>204")  # closing tag cut by the stop word
    assert not grade_response(
        "204", "<think>\\boxed{204}</think><answer>205</answer>"
    )  # the answer block wins
    # AZR prompt: no <answer>/boxed -> empty extraction -> wrong, even if the number is there.
    assert not grade_response("72", "so she earns 72 dollars", prompt_style="azr")
    # Chat prompt: math-verify's own extraction over the whole text.
    assert grade_response("72", "so she earns 72 dollars", prompt_style="chat")


def test_grader_pool_and_thread_safety():
    pairs = [("7", "<answer>7</answer>"), (r"\frac{1}{2}", r"\boxed{0.50}"), ("3", "<answer>4</answer>")]
    with MathGrader(workers=1) as g:  # main thread: inline
        assert g.grade_many(pairs) == [True, True, False]
    result: list = []

    def worker():
        # Off the main thread SIGALRM timeouts are impossible, so the grader must use a process.
        with MathGrader(workers=1) as g:
            result.extend(g.grade_many(pairs))

    t = threading.Thread(target=worker)
    t.start()
    t.join(timeout=120)
    assert result == [True, True, False]
