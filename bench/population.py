"""Benchmark: wall-clock of the tiny preset, single agent vs 1T+1S vs 2T+2S vs 4T+4S (same work per matchup).

python bench/population.py [--quick]        # same as `populora bench population [--quick]`
"""

import sys

from populora.train.bench import run

if __name__ == "__main__":
    run(quick="--quick" in sys.argv[1:])
