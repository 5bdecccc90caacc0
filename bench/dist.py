"""Benchmark of the distributed engine; same as `populora bench dist [--quick] [--out FILE] [--workers N]`."""

import argparse
from pathlib import Path

from populora.engine.dist_bench import run

if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="fewer, shorter rounds")
    ap.add_argument("--out", type=Path, default=None, help="JSON output (default bench/results/dist.json)")
    ap.add_argument("--workers", type=int, default=2, help="Ray workers to compare with one process")
    args = ap.parse_args()
    run(quick=args.quick, out=args.out, workers=args.workers)
