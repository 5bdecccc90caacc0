"""The effect of `rl.tis_cap` (truncated importance sampling) on a vLLM run with a bfloat16 sampler and a
float32 trainer, on CPU (issue 32 §5).

Arms, on the tiny preset with `model.backend=vllm`: `bf16/tis0` (the default, no correction) and
`bf16/tis2` (`rl.tis_cap=2`), each over `--seeds` train seeds for `--steps` steps, and `fp32/tis0` (vLLM in
float32, one seed) as the reference for the mismatch that float rounding alone leaves. The same seed gives
both bf16 arms the same first rollouts (vLLM is seeded), so the arms are paired.

Per train step and arm it reports, over every rollout token that has a sampler log-prob:
- `mismatch`: mean |logp_trainer - logp_sampler| (the trainer's forward under the adapters vLLM sampled
  with, before the update), its mean signed value and its max;
- `trunc_share`: the share of tokens whose weight exp(logp_trainer - logp_sampler) exceeds 2 (what a cap of 2
  truncates) and `is_w`: the mean weight min(exp(.), 2) (computed in both arms; beside it the tis2 arm's
  `engine_is_weight`, the engine's own `is_weight/<slot>` averaged over slots);
- the students' solve rate, the mean student and teacher rewards, the mean grad norm over slots.

The trainer's log-probs are read with a bench-only hook: `HFEngine._response_logprobs` is wrapped on the
instance while `accumulate_gradients` runs, so nothing in the engine changes. Resumable: each finished
(arm, seed) run is written to the JSON at once and skipped when the command is run again.

Usage (the vLLM environment, CPU):
  PYTHONPATH=src nice -n 19 .venv-vllm/bin/python bench/tis_effect.py [--steps 12 --seeds 5 --fp32-steps 3]
Recorded with those settings (docs/engine.md, "Truncated importance sampling"): about 17 minutes on 2 busy cores.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CAP = 2.0


def arms(seeds: int, fp32_steps: int) -> list[tuple[str, str, float, int, int | None]]:
    """(arm name, vllm dtype, tis cap, seed, steps override) in run order: the fp32 reference first, short."""
    out = [("fp32/tis0", "float32", 0.0, 0, fp32_steps)]
    for s in range(seeds):
        out += [("bf16/tis0", "bfloat16", 0.0, s, None), ("bf16/tis2", "bfloat16", CAP, s, None)]
    return out


class Mismatch:
    """Collects the trainer's log-probs beside the sampler's for the rows of each train step."""

    def __init__(self, hf) -> None:
        self.hf, self.on, self.diffs, self.missing = hf, False, [], 0
        inner_lp, inner_acc = hf._response_logprobs, hf.accumulate_gradients

        def response_logprobs(rows, *a, **k):
            out = inner_lp(rows, *a, **k)
            if self.on:
                logp, n_resp = out[0].detach().float().cpu().tolist(), out[3]
                i = 0
                for r, n in zip(rows, n_resp, strict=True):
                    for j in range(n):
                        s = r.old_logprobs[j] if r.old_logprobs is not None else float("nan")
                        if math.isfinite(s):
                            self.diffs.append(logp[i + j] - float(s))
                        else:
                            self.missing += 1
                    i += n
            return out

        def accumulate_gradients(*a, **k):
            self.on = True
            try:
                return inner_acc(*a, **k)
            finally:
                self.on = False

        hf._response_logprobs, hf.accumulate_gradients = response_logprobs, accumulate_gradients

    def take(self) -> dict:
        d, miss = self.diffs, self.missing
        self.diffs, self.missing = [], 0
        if not d:
            return {"tokens": 0, "missing": miss}
        w = [min(math.exp(min(x, 20.0)), CAP) for x in d]
        return {
            "tokens": len(d),
            "missing": miss,
            "mismatch": statistics.fmean(abs(x) for x in d),
            "signed": statistics.fmean(d),
            "max_abs": max(abs(x) for x in d),
            "trunc_share": sum(x > math.log(CAP) for x in d) / len(d),
            "is_w": statistics.fmean(w),
            "w_dev": statistics.fmean(abs(x - 1.0) for x in w),  # how far a cap-2 weight moves a token's term
            "low_share": sum(x < -math.log(CAP) for x in d) / len(d),  # weight < 1/2 (not capped)
        }


def run_arm(dtype: str, cap: float, seed: int, steps: int, sets: list[str]) -> list[dict]:
    from populora.config import load_config
    from populora.train.records import solve_rate
    from populora.train.trainer import Trainer

    overrides = [
        "model.backend=vllm",
        f"model.vllm_dtype={dtype}",
        f"rl.tis_cap={cap}",
        f"train.seed={seed}",
        f"train.steps={steps}",
        "train.threads=1",
        *sets,
    ]
    cfg = load_config(preset="tiny", overrides=overrides)
    rows = []
    with tempfile.TemporaryDirectory(prefix="tis-effect-") as tmp:
        trainer = Trainer(cfg, Path(tmp) / "run", quiet=True)
        try:
            trainer.setup()
            hook = Mismatch(trainer.engine.hf)
            for step in range(1, steps + 1):
                t0 = time.perf_counter()
                res = trainer.step(step)
                tm = res.traces
                m = hook.take()
                st = [r for t in tm for r in t.answer_rewards]
                te = [t.reward for t in tm if t.proposed]
                rows.append(
                    {
                        "step": step,
                        **m,
                        "solve_rate": solve_rate(tm),
                        "student_reward": statistics.fmean(st) if st else None,
                        "teacher_reward": statistics.fmean(te) if te else None,
                        "valid_share": statistics.fmean(t.valid for t in tm) if tm else None,
                        **Step.last,
                        "time_s": time.perf_counter() - t0,
                    }
                )
                print(f"    step {step}: {fmt_row(rows[-1])}", flush=True)
        finally:
            trainer.close()
    return rows


class Step:
    """The engine's own metrics of the last train step (grad norm, is_weight), taken by wrapping `update`."""

    last: dict = {}

    @staticmethod
    def install() -> None:
        from populora.train.trainer import Trainer

        inner = Trainer.update

        def update(self, traces):
            m = inner(self, traces)
            norms = [v for k, v in m.items() if k.startswith("grad_norm/")]
            isw = [v for k, v in m.items() if k.startswith("is_weight/")]
            Step.last = {
                "grad_norm": statistics.fmean(norms) if norms else None,
                "engine_is_weight": statistics.fmean(isw) if isw else None,
            }
            return m

        Trainer.update = update


def fmt(x, spec=".4f") -> str:
    return "-" if x is None else format(x, spec)


def fmt_row(r: dict) -> str:
    return (
        f"tok={r.get('tokens', 0)} |dlogp|={fmt(r.get('mismatch'), '.2e')} max={fmt(r.get('max_abs'), '.2e')} "
        f"trunc>2={fmt(r.get('trunc_share'))} "
        f"is_w={fmt(r.get('is_w'))} eng_is_w={fmt(r.get('engine_is_weight'))} solve={fmt(r['solve_rate'], '.3f')} "
        f"gnorm={fmt(r.get('grad_norm'))} {r['time_s']:.0f}s"
    )


def summarize(results: dict) -> list[dict]:
    """Per arm: the per-seed means over steps, then the mean and [min, max] over seeds."""
    by_arm: dict[str, list[dict]] = {}
    for key, rows in results.items():
        by_arm.setdefault(key.split("@")[0], []).append(rows)
    out = []
    for arm, runs in by_arm.items():
        row = {"arm": arm, "seeds": len(runs), "steps": min(len(r) for r in runs)}
        for name in (
            "mismatch",
            "max_abs",
            "signed",
            "trunc_share",
            "low_share",
            "is_w",
            "w_dev",
            "solve_rate",
            "student_reward",
            "teacher_reward",
            "grad_norm",
            "engine_is_weight",
        ):
            per_seed = []
            for r in runs:
                vals = [x[name] for x in r if x.get(name) is not None]
                if vals:
                    per_seed.append(max(vals) if name == "max_abs" else statistics.fmean(vals))
            row[name] = (
                {"mean": statistics.fmean(per_seed), "min": min(per_seed), "max": max(per_seed)}
                if per_seed
                else None
            )
        out.append(row)
    return out


def paired(results: dict) -> dict:
    """Per seed, the tis2 arm's mean over steps minus the tis0 arm's (same seed, so the same first rollouts):
    [min, max] over seeds of the difference in solve rate, rewards and grad norm."""
    out = {}
    for name in ("solve_rate", "student_reward", "teacher_reward", "grad_norm", "mismatch"):
        diffs = []
        for key, rows in results.items():
            if not key.startswith("bf16/tis2@"):
                continue
            base = results.get(key.replace("tis2", "tis0"))
            if base is None:
                continue
            a = [x[name] for x in rows if x.get(name) is not None]
            b = [x[name] for x in base if x.get(name) is not None]
            if a and b:
                diffs.append(statistics.fmean(a) - statistics.fmean(b))
        if diffs:
            out[name] = {
                "mean": statistics.fmean(diffs),
                "min": min(diffs),
                "max": max(diffs),
                "n": len(diffs),
            }
    # the first step whose rollouts differ between the arms (token count or solve rate; None: never)
    out["first_divergent_step"] = {
        key.split("@")[1]: next(
            (
                x["step"]
                for x, y in zip(results[key.replace("tis2", "tis0")], rows, strict=False)
                if (x["tokens"], x["solve_rate"]) != (y["tokens"], y["solve_rate"])
            ),
            None,
        )
        for key, rows in results.items()
        if key.startswith("bf16/tis2@") and key.replace("tis2", "tis0") in results
    }
    return out


def table(summary: list[dict]) -> str:
    cols = [
        "mismatch",
        "max_abs",
        "trunc_share",
        "is_w",
        "w_dev",
        "solve_rate",
        "student_reward",
        "teacher_reward",
        "grad_norm",
    ]
    lines = ["arm        seeds steps " + " ".join(f"{c:>28}" for c in cols)]
    for r in summary:
        cells = []
        for c in cols:
            v = r[c]
            spec = ".2e" if c in ("mismatch", "max_abs", "w_dev") else ".4f"
            cells.append(
                f"{'-':>28}"
                if v is None
                else f"{v['mean']:{spec}} [{v['min']:{spec}},{v['max']:{spec}}]".rjust(28)
            )
        lines.append(f"{r['arm']:<10} {r['seeds']:>5} {r['steps']:>5} " + " ".join(cells))
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=12, help="train steps per bf16 run")
    ap.add_argument("--seeds", type=int, default=5, help="train seeds per bf16 arm")
    ap.add_argument("--fp32-steps", type=int, default=3, help="steps of the float32 reference run (seed 0)")
    ap.add_argument("--set", dest="sets", action="append", default=[], help="extra config override KEY=VALUE")
    ap.add_argument("--only", default="", help="run only this arm (e.g. fp32/tis0) and stop")
    ap.add_argument("--out", default=str(REPO / "bench/results/tis_effect.json"))
    args = ap.parse_args()
    out = Path(args.out)
    command = "PYTHONPATH=src nice -n 19 .venv-vllm/bin/python " + shlex.join(
        ["bench/tis_effect.py", *sys.argv[1:]]
    )
    data = json.loads(out.read_text()) if out.exists() else {}
    settings = {"steps": args.steps, "seeds": args.seeds, "fp32_steps": args.fp32_steps, "sets": args.sets}
    if data.get("settings") != settings:
        data = {"settings": settings, "runs": {}}  # other settings: start over
    data["command"] = command
    Step.install()
    for arm, dtype, cap, seed, steps in arms(args.seeds, args.fp32_steps):
        key = f"{arm}@{seed}"
        if key in data["runs"] or (args.only and arm != args.only):
            continue
        print(f"{key}: vLLM {dtype}, tis_cap={cap}", flush=True)
        t0 = time.perf_counter()
        data["runs"][key] = run_arm(dtype, cap, seed, steps or args.steps, args.sets)
        print(f"  {key} done in {time.perf_counter() - t0:.0f}s", flush=True)
        data["summary"] = summarize(data["runs"])
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(data, indent=1) + "\n")
    data["summary"] = summarize(data["runs"])
    data["paired_tis2_minus_tis0"] = paired(data["runs"])
    data["torch_threads"] = 1
    import torch
    import vllm

    data["versions"] = {"vllm": vllm.__version__, "torch": torch.__version__}
    out.write_text(json.dumps(data, indent=1) + "\n")
    print(table(data["summary"]))
    print("paired, per seed, tis2 minus tis0 (mean over steps): mean [min, max] over seeds")
    for name, v in data["paired_tis2_minus_tis0"].items():
        if name == "first_divergent_step":
            print(f"  first step whose rollouts differ, per seed: {v}")
            continue
        print(f"  {name:<15} {v['mean']:+.4g} [{v['min']:+.4g}, {v['max']:+.4g}]  ({v['n']} seeds)")
    print(f"wrote {out}")


if __name__ == "__main__":  # vLLM's engine core is started with spawn: the module must import cleanly
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    main()
