"""Compare the loss settings of the mixed-type teacher-free control: each setting's `--out` of `populora experiment
control rl` (one base measurement shared through --base-from), real arms paired by seed, items shared.

python bench/loss_settings_compare.py REFERENCE.json OTHER.json [OTHER.json ...] [--out bench/results/X.json]

Prints, per reading (greedy, sampled pass@1 per evaluation temperature) and task type (and all items), each
setting's change over the base and its difference to the reference setting with the crossed seeds x items
interval (points); writes the same as JSON.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from populora.experiment import stats
from populora.experiment.controlled.rl import ci_text
from populora.experiment.controlled.rl_measure import common_seeds, in_points, item_scores, temperature_key


def real_changes(exp: dict, reading: str, types: list[str]) -> tuple[list[int], np.ndarray]:
    """Seeds of the real arm and its per-item change over the base, `[seed, item]`."""
    samples = exp["settings"]["eval_samples"]
    runs = {r["seed"]: r for r in exp["runs"].values() if r["arm"] == "real" and r["end"]}
    seeds = sorted(runs)
    start = item_scores(exp["base"], reading, samples, types)
    return seeds, np.stack([item_scores(runs[s]["end"], reading, samples, types) - start for s in seeds])


def compare(paths: list[Path]) -> dict:
    exps = {p.stem: json.loads(p.read_text()) for p in paths}
    ref_name = paths[0].stem
    ref = exps[ref_name]
    types = list(ref["settings"]["types"])
    readings = ["greedy", *(temperature_key(t) for t in ref["settings"]["eval_temperatures"])]
    out: dict = {"reference": ref_name, "settings": {n: e["settings"]["overrides"] for n, e in exps.items()}}
    for reading in readings:
        for name, ts in [*((t, [t]) for t in types), ("all", types)]:
            row: dict = {}
            ref_seeds, ref_x = real_changes(ref, reading, ts)
            for exp_name, exp in exps.items():
                seeds, x = real_changes(exp, reading, ts)
                entry = {"change": in_points(stats.bootstrap(x)), "seeds": seeds}
                pair = common_seeds((seeds, x), (ref_seeds, ref_x)) if exp_name != ref_name else None
                if pair is not None:
                    entry["minus_reference"] = in_points(stats.difference(*pair, paired=True))
                row[exp_name] = entry
            out.setdefault(reading, {})[name] = row
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="+", type=Path, help="the reference setting's JSON first, then the others")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    if len(args.files) < 2:
        ap.error("give the reference setting's JSON and at least one other")
    res = compare(args.files)
    for reading in [k for k in res if k not in ("reference", "settings")]:
        name = "greedy" if reading == "greedy" else f"pass@1 T={reading}"
        for task, row in res[reading].items():
            cells = [
                f"{exp}: {ci_text(e['change'])}"
                + (f" (vs ref {ci_text(e['minus_reference'])})" if "minus_reference" in e else "")
                for exp, e in row.items()
            ]
            print(f"{name:<12} {task:<7} " + "  |  ".join(cells))
    if args.out:
        args.out.write_text(json.dumps(res, indent=1) + "\n")
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
