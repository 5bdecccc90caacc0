"""Benchmark of the multi-LoRA engine; same as `populora bench engine [--quick]`."""

import sys

from populora.engine.bench import run

if __name__ == "__main__":
    run(quick="--quick" in sys.argv[1:])
