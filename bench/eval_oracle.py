"""Grader self-check on gold and wrong answers (see populora.evaluate.bench): `python bench/eval_oracle.py [--quick]`."""

import sys

from populora.evaluate.bench import run

if __name__ == "__main__":
    run(quick="--quick" in sys.argv[1:])
