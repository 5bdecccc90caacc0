"""Benchmark the sandbox (see populora.sandbox.bench): `python bench/sandbox.py [--quick]`."""

import sys

from populora.sandbox.bench import run

if __name__ == "__main__":
    run(quick="--quick" in sys.argv[1:])
