"""Operators benchmark: `python bench/operators.py [--quick] [--shape tiny]` (same as `populora bench operators`)."""

import argparse

from populora.operators.bench import DEFAULT_OUT, run

if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--shape", default="qwen2.5-coder-7b")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    run(quick=args.quick, out=DEFAULT_OUT, shape_name=args.shape, threads=args.threads)
