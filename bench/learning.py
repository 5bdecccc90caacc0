"""Benchmark: does `tiny-learn` learn? Ten seeds (as recorded); the students' probe change, the teachers'
valid-rate change on fixed prompts (`probe_valid`) and on the run's own prompts, with 95% CIs, into
bench/results/learning.json and docs/img/learning.png.

python bench/learning.py [--seeds 10] [--out runs/learning]
# same as: populora experiment learning --out runs/learning --json bench/results/learning.json \
#          --figure docs/img/learning.png
"""

import sys

from populora.cli import app

if __name__ == "__main__":
    args = sys.argv[1:]
    out = args[args.index("--out") + 1] if "--out" in args else "runs/learning"
    seeds = args[args.index("--seeds") + 1] if "--seeds" in args else "10"
    app(
        [
            "experiment",
            "learning",
            "--out",
            out,
            "--seeds",
            seeds,
            "--json",
            "bench/results/learning.json",
            "--figure",
            "docs/img/learning.png",
        ]
    )
