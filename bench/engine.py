"""Benchmark of the multi-LoRA engine; same as `populora bench engine [--quick] [--out FILE]`."""

import argparse
from pathlib import Path

from populora.engine.bench import run

if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="tiny model only, small batches")
    ap.add_argument("--out", type=Path, default=None, help="JSON output (default bench/results/engine.json)")
    args = ap.parse_args()
    run(quick=args.quick, out=args.out)
