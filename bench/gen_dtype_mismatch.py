"""How far off-policy generation in another dtype is (`model.gen_dtype`, engine/gen_dtype.py): the sampler's
log-probs with the frozen base generating in float32, bfloat16 and int8, against the trainer's float32 log-probs of
the same tokens, on the teacher and student requests of two recorded `tiny-learn` steps (T = 1, seed 1).

Reported per dtype: the mean, 99th percentile and largest absolute difference in nats, and the share of tokens
whose trainer/sampler probability ratio is above 2 (where `rl.tis_cap` = 2 would truncate).

python bench/gen_dtype_mismatch.py [--steps 2] [--out bench/results/gen_dtype_mismatch.json]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import sys
import tempfile
from pathlib import Path

import torch

from populora.engine import TrainBatch, TrainRow

HERE = Path(__file__).resolve()


def _pipeline_ceiling():
    """bench/pipeline_ceiling.py's `record` (bench/ is not a package)."""
    spec = importlib.util.spec_from_file_location("pipeline_ceiling", HERE.parent / "pipeline_ceiling.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def mismatch(sampler: list[float], trainer: list[float]) -> dict:
    """Differences between the sampler's and the trainer's log-probs of the same tokens."""
    d = sorted(abs(a - b) for a, b in zip(sampler, trainer, strict=True))
    ratio_over_2 = sum(b - a > math.log(2) for a, b in zip(sampler, trainer, strict=True))
    return {
        "tokens": len(d),
        "mean_abs_nats": sum(d) / len(d),
        "p99_abs_nats": d[int(0.99 * len(d))],
        "max_abs_nats": d[-1],
        "share_ratio_over_2": ratio_over_2 / len(d),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=2, help="recorded tiny-learn steps (after one untimed step)")
    ap.add_argument("--out", type=Path, default=None, help="JSON to write (default: print only)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="populora-mismatch-") as tmp:
        tr, meter, recorded, _ = _pipeline_ceiling().record(args.steps, Path(tmp) / "run")
        eng = tr.engine
        reqs = [r for step in recorded for c in step["calls"] for r in c["requests"]]
        rows = {}
        try:
            for name, low in (("float32", None), ("bfloat16", torch.bfloat16), ("int8", "int8")):
                eng.gen_weights = eng.generation_weights(low)
                gens = [g for g in meter.generate_fn(reqs, seed=1) if g.token_ids]
                eng.gen_weights = None
                batch = TrainBatch(
                    [
                        TrainRow(
                            slot=g.slot, prompt_ids=g.prompt_ids, response_ids=g.token_ids, advantages=1.0
                        )
                        for g in gens
                    ]
                )
                trained = eng.logprobs(batch)
                rows[name] = mismatch(
                    [x for g in gens for x in g.logprobs], [x for lp in trained for x in lp]
                )
                print(name, {k: round(v, 7) for k, v in rows[name].items()}, flush=True)
        finally:
            tr.close()
    result = {
        "benchmark": "gen_dtype_mismatch",
        "command": "python bench/gen_dtype_mismatch.py " + " ".join(sys.argv[1:]),
        "what": __doc__.split("\n\n")[0],
        "rows": rows,
    }
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
