"""Benchmark: a tiny-learn step on the old vs the new generation path (phase split, tokens per CPU-second,
the arithmetic limit), then the tiny preset's wall-clock, single agent vs 1T+1S vs 2T+2S vs 4T+4S.

python bench/population.py [--quick]        # same as `populora bench population [--quick]`
"""

import sys

from populora.train.bench import run

if __name__ == "__main__":
    run(quick="--quick" in sys.argv[1:])
