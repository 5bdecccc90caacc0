"""Our EvalPlus grader vs the official evalplus 0.3.1 (see populora.evaluate.bench_speed): `python bench/eval.py`."""

from populora.evaluate.bench_speed import run

if __name__ == "__main__":
    run()
