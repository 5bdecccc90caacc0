"""The paper's claims answered from an ablation's runs, each with its interval and its control (issue 31 §3).

`populora experiment claims OUT` (and the end of `experiment ablation`) reads every finished run of the
experiment in OUT, keeps the seeds every arm finished (whole, paired seeds: an experiment part-way through
its sittings can be read too) and answers:

- (a) `probe`: the population's solvers (`4T+4S`, and `1T+1S`) against the single agent's on the probe, the
  mean change and the best member against the best of as many single seeds, overall and on the hardest level
  of the graded probe (contrasts.py: bootstrap over seeds and items, paired by seed);
- (b) `reward`: the population minus its shuffled-reward control, overall and on the hardest level;
- (c) `collapse`: per run, the slope of the valid proposals' mean complexity per feature (per 100 steps), the
  new distinct valid programs per step in the first and last quarter of the run (and, with no rule, the share
  of valid proposals that are new: arms propose different volumes), and for the single agent its self-solve
  rate (first and last quarter, and its slope over the second half: a plateau is near 0);
- (d) `coverage`: the CVT cells filled in the second half of the run; and, as a secondary reading with no rule
  (matched.py), the cells and distinct programs of every arm at an equal number of valid proposals;
- (e) `arms_race`: the teachers' margin per step, (teacher wins - teacher losses) / teacher games, smoothed
  over `WINDOW` steps; the lead changes of its sign and the share of steps each role leads;
- (f) `ratings`: at the last step, the spread (standard deviation) of the living members' TrueSkill mu per
  role, divided by their mean sigma: above 1, the members stand apart by more than their ratings' uncertainty;
  and, with no rule, whether the ratings order the students as the held-out probe does (`rating_vs_probe`: the
  Spearman correlation of mu and probe accuracy at the last probe), since evolution selects by rating.

For (a) and (b), `seeds_needed` says what scale a verdict would need: the seeds per arm that would detect a true
difference of 2 or 5 probe points with 80% power, extrapolated from the per-seed differences measured
(stats.seeds_needed; a lower bound, since the probe's item noise does not shrink with seeds).

Per-run measures get a mean and a 95% t-interval over seeds per arm (measures.mean_ci) and, for the
population against the single agent or its control, the paired per-seed difference. Each claim gets a
`verdict` by the rule written next to it ("shown" / "not shown") once `MIN_SEEDS` whole seeds are in (before,
"pending": one seed's interval resamples items only, not the seed's own noise), or "not finished yet" (its arms
have no seed finished in every arm) or "not run" (the experiment has not those arms).
The figure and the console table are claims_view.py's.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from populora.experiment import settings as exp_settings
from populora.experiment.matched import budget_curve, common_budget, matched_measures
from populora.experiment.measures import as_array, as_list, edge_means, mean_ci, slope
from populora.experiment.run_records import run_records
from populora.experiment.stats import seeds_needed

SINGLE, ONE, POP, CONTROL = "single", "1T+1S", "4T+4S", "4T+4S-shuffled"
WINDOW = 10  # steps the teachers' margin is smoothed over: one evolution period of tiny-learn
LEAD_SHARE = 0.1  # a role "takes the lead" when it leads at least this share of the steps
PRIMARY = "ast_depth"  # the complexity feature a verdict reads (all four are reported)
MIN_SEEDS = 3  # a verdict needs intervals over seeds as well as items: fewer whole seeds read "pending"
COLLAPSE = 0.5  # a solver ending below half the solvers' starting probe accuracy has collapsed (a diagnostic)
# "what scale would be needed": the seeds per arm for (a) and (b) to detect a true difference of these sizes
# (probe accuracy, 2 and 5 points) with POWER, extrapolated from the per-seed spread measured (stats.seeds_needed)
EFFECTS = (0.02, 0.05)
POWER = 0.8


def smooth(y: np.ndarray, window: int = WINDOW) -> np.ndarray:
    """Trailing mean over the last `window` finite values (NaN until the first finite one)."""
    out = np.full(y.shape, np.nan)
    for i in range(len(y)):
        w = y[max(0, i - window + 1) : i + 1]
        w = w[np.isfinite(w)]
        if w.size:
            out[i] = w.mean()
    return out


def per_step(total: np.ndarray) -> np.ndarray:
    """Per-step increments of a cumulative count: [2, 5, 5, 9] -> [2, 3, 0, 4]."""
    return np.diff(np.concatenate([[0.0], total])) if total.size else total


def new_program_share(distinct_total: np.ndarray, valid_total: np.ndarray) -> np.ndarray:
    """Per step, the new distinct valid programs over the valid proposals made (NaN where none was valid).
    A population proposes several times as many programs per step as the single agent, so the raw count of new
    programs compares volumes; this share compares how often a proposal is new. Cumulative inputs:
    distinct [2, 3, 3], valid [2, 4, 4] -> [1.0, 0.5, nan]."""
    new, made = per_step(distinct_total), per_step(valid_total)
    n = min(len(new), len(made))
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(made[:n] > 0, new[:n] / made[:n], np.nan)


def collapsed_solvers(probes: Sequence[dict], roles: dict, frac: float = COLLAPSE) -> int | None:
    """How many solvers (students, or the single agent) end below `frac` of the solvers' mean accuracy at the
    first probe (mean over task types; None without two probes). A shuffled-reward control can lose its
    students this way, and then "population minus control" reads the control's collapse, not a gain."""
    if len(probes) < 2:
        return None
    start = _solver_mean(probes[0]["probe"], roles, None, None)
    if not start:
        return None
    ends = [
        float(np.mean([v for v in accs.values() if v is not None] or [np.nan]))
        for m, accs in probes[-1]["probe"].items()
        if roles.get(m) in ("student", "single", None)
    ]
    return sum(1 for e in ends if np.isfinite(e) and e < frac * start)


def lead_changes(margin: np.ndarray) -> int:
    """How often the sign of `margin` switches, ties (0) and NaN skipped: +,+,0,-,+ has 2."""
    signs = [np.sign(v) for v in margin if np.isfinite(v) and v != 0]
    return int(sum(a != b for a, b in zip(signs, signs[1:], strict=False)))


def teacher_margin(rec: dict) -> np.ndarray:
    """Per step, (teacher wins - teacher losses) / teacher games (NaN for a step without games)."""
    roles = rec["roles"]
    out = []
    for g in rec["games"]:
        w = l_ = n = 0
        for member, res in (g.get("games") or {}).items():
            if roles.get(member) != "teacher" or not isinstance(res, dict):
                continue
            w, l_ = w + int(res.get("win", 0)), l_ + int(res.get("loss", 0))
            n += int(res.get("win", 0)) + int(res.get("loss", 0)) + int(res.get("draw", 0))
        out.append((w - l_) / n if n else np.nan)
    return np.array(out, dtype=float)


def rating_skill_agreement(rec: dict) -> float | None:
    """At the run's last probe, the Spearman rank correlation between the students' TrueSkill mu and their
    probe accuracy (mean over task types), over the students alive and rated then. Evolution selects by rating;
    near 1 it keeps the members that solve held-out problems best, near or below 0 winning games has come apart
    from held-out skill. None with fewer than 3 students or no rank order (all equal). mu 1, 2, 3, 4 against
    accuracy 0.1, 0.2, 0.4, 0.3: 1 - 6 * 2 / (4 * 15) = 0.8."""
    from scipy.stats import spearmanr

    probes = [p for p in rec.get("probe") or [] if p.get("probe")]
    if not probes:
        return None
    last = probes[-1]
    steps = list(rec["steps"]["step"])
    if last["step"] not in steps:
        return None
    i = steps.index(last["step"])
    mus, accs = [], []
    for member, acc in last["probe"].items():
        mu = ((rec.get("ratings") or {}).get(member) or {}).get("mu") or []
        vals = [v for v in acc.values() if v is not None]
        if rec["roles"].get(member) == "student" and i < len(mu) and mu[i] is not None and vals:
            mus.append(float(mu[i]))
            accs.append(float(np.mean(vals)))
    if len(mus) < 3 or len(set(mus)) < 2 or len(set(accs)) < 2:
        return None
    return float(spearmanr(mus, accs).statistic)


def run_claim_measures(rec: dict) -> dict:
    """Every per-run number the claims read, from one run's raw records (run_records.run_records)."""
    st = rec["steps"]
    steps = as_array(st["step"])
    out: dict = {"complexity_slope": {}}
    for f, ys in (st.get("complexity") or {}).items():
        s = slope(steps, as_array(ys))
        out["complexity_slope"][f] = None if s is None else 100.0 * s
    total = as_array(st.get("distinct_programs_total") or [])
    a, b = edge_means(per_step(total))
    out["new_programs"] = {"start": a, "end": b, "change": None if a is None or b is None else b - a}
    a, b = edge_means(new_program_share(total, as_array(st.get("valid_total") or [])))
    out["new_program_share"] = {"start": a, "end": b, "change": None if a is None or b is None else b - a}
    ss = as_array(st.get("self_solve_rate") or [])
    if np.isfinite(ss).any():
        a, b = edge_means(ss)
        half = len(ss) // 2
        s2 = slope(steps[half:], ss[half:])
        out["self_solve"] = {"start": a, "end": b, "slope_second_half": None if s2 is None else 100.0 * s2}
    cells = as_array(st.get("coverage_cells") or [])
    fin = np.flatnonzero(np.isfinite(cells))
    out["coverage_growth_second_half"] = (
        float(cells[fin[-1]] - cells[fin[len(fin) // 2]]) if fin.size else None
    )
    out["coverage_cells_end"] = float(cells[fin[-1]]) if fin.size else None
    out["collapsed_solvers"] = collapsed_solvers(rec.get("probe") or [], rec["roles"])
    if "teacher" in rec["roles"].values():
        m = smooth(teacher_margin(rec))
        lead = m[np.isfinite(m)]
        out["arms_race"] = {
            "lead_changes": lead_changes(m),
            "teacher_lead_share": float((lead > 0).mean()) if lead.size else None,
            "student_lead_share": float((lead < 0).mean()) if lead.size else None,
        }
    out["rating_skill"] = rating_skill_agreement(rec)
    out["ratings"] = {}
    for role in ("teacher", "student"):
        mus, sigmas = [], []
        for member, r in rec["ratings"].items():
            if rec["roles"].get(member) == role and r["mu"] and r["mu"][-1] is not None:
                mus.append(float(r["mu"][-1]))
                sigmas.append(float(r["sigma"][-1]))
        if len(mus) >= 2:
            out["ratings"][role] = {
                "mu_spread": float(np.std(mus)),
                "mean_sigma": float(np.mean(sigmas)),
                "spread_over_sigma": float(np.std(mus) / np.mean(sigmas)),
            }
    return out


def _get(d: dict, path: Sequence[str]):
    for k in path:
        if not isinstance(d, dict) or d.get(k) is None:
            return None
        d = d[k]
    return d


def finished_runs(out: Path, st: dict) -> dict[str, dict[int, tuple[Path, dict]]]:
    """`{arm: {seed: (run folder, its raw records)}}` of the runs that reached the experiment's last step and
    probed there (the records are read once, here)."""
    done: dict[str, dict[int, tuple[Path, dict]]] = {}
    for arm in st["arms"]:
        for seed in range(st["seeds"]):
            path = out / "runs" / arm / f"seed{seed}"
            rec = run_records(path) if (path / "metrics.jsonl").is_file() else None
            if rec and rec["probe"] and rec["probe"][-1]["step"] == st["steps"]:
                done.setdefault(arm, {})[seed] = (path, rec)
    return done


def _arm_stats(per_run: dict[str, list[dict]], path: Sequence[str]) -> dict:
    return {arm: mean_ci([_get(m, path) for m in runs]) for arm, runs in per_run.items()}


def _paired(per_run: dict[str, list[dict]], a: str, b: str, path: Sequence[str]) -> dict | None:
    if a not in per_run or b not in per_run:
        return None
    xs = [_get(m, path) for m in per_run[a]]
    ys = [_get(m, path) for m in per_run[b]]
    return mean_ci([x - y for x, y in zip(xs, ys, strict=True) if x is not None and y is not None])


def _matched(records: dict[str, list[dict]]) -> dict:
    """Every arm at the same number of valid proposals (matched.py): the budget every run reached, each arm's
    cells and distinct programs then, and the paired 4T+4S - single of each. No verdict reads it."""
    keys = ("cells", "distinct_programs")
    budget = common_budget([r for rs in records.values() for r in rs])
    if budget is None:
        return {"valid_proposals": None}
    per = {a: [matched_measures(r, budget) for r in rs] for a, rs in records.items()}
    return {
        "valid_proposals": budget,
        **{k: _arm_stats(per, (k,)) for k in keys},
        "population_minus_single": {k: _paired(per, POP, SINGLE, (k,)) for k in keys},
        "per_seed": {a: [m["cells"] for m in ms] for a, ms in per.items()},
    }


def _above(ci: dict | None, bar: float = 0.0) -> bool:
    return bool(ci and ci.get("lo") is not None and ci["lo"] > bar)


def _below(ci: dict | None, bar: float = 0.0) -> bool:
    return bool(ci and ci.get("hi") is not None and ci["hi"] < bar)


def highest_level(run_dir: Path) -> int | None:
    """The hardest level on the run's graded probe (its items' largest `level`; None on the fixed probe)."""
    from populora.diagnostics.run import load_run

    levels = [r["level"] for r in load_run(run_dir).probe_items() if r.get("level") is not None]
    return max(levels) if levels else None


def claims(out: Path, hardest: int | None = None) -> dict:
    """The claims of the experiment in OUT (see the module docstring), from its finished runs. `hardest`:
    the probe level claim (a) also reads (default: the highest level the probe holds)."""
    from populora.experiment.contrasts import contrasts

    out = Path(out)
    st = exp_settings.load(out)
    if st is None:
        raise exp_settings.ExperimentError(
            f"{out} holds no experiment (no settings.json); give the folder `experiment ablation --out` made."
        )
    done = finished_runs(out, st)
    arms = [a for a in st["arms"] if a in done]
    seeds = sorted(set.intersection(*(set(done[a]) for a in arms))) if arms else []
    dirs = {a: [done[a][s][0] for s in seeds] for a in arms} if seeds else {}
    records = {a: [done[a][s][1] for s in seeds] for a in dirs}
    per_run = {a: [run_claim_measures(r) for r in rs] for a, rs in records.items()}
    seed_lists = dict.fromkeys(dirs, seeds)
    if hardest is None and dirs:
        hardest = highest_level(next(iter(dirs.values()))[0])
    pairs = [(a, b) for a, b in ((POP, SINGLE), (ONE, SINGLE), (POP, CONTROL)) if a in dirs and b in dirs]
    overall = contrasts(dirs, seed_lists, pairs, single=SINGLE) if dirs else {}
    top = contrasts(dirs, seed_lists, pairs, single=SINGLE, level=hardest) if dirs and hardest else {}
    result: dict = {
        "settings": st,
        "sittings": exp_settings.sittings(out),
        "steps": st["steps"],
        "arms_finished": {a: sorted(done.get(a, {})) for a in st["arms"]},
        "seeds_used": seeds,
        "hardest_level": hardest,
        "window": WINDOW,
        "min_seeds": MIN_SEEDS,
        "per_run": {
            a: [{"seed": s, **m} for s, m in zip(seeds, ms, strict=True)] for a, ms in per_run.items()
        },
    }

    def verdict(ok: bool, *needs: str) -> str:
        """ "shown" / "not shown" by the claim's rule once its arms have whole seeds; else why not."""
        missing = [a for a in needs if a not in dirs]
        if not missing and len(seeds) < MIN_SEEDS:
            return f"pending ({len(seeds)} of {MIN_SEEDS} seeds)"
        if not missing:
            return "shown" if ok else "not shown"
        return "not finished yet" if all(a in st["arms"] for a in missing) else "not run"

    def diff(c: dict, key: str) -> dict | None:
        return (c.get("differences") or {}).get(key)

    def probe_claim(claim: str, a: str, b: str) -> dict:
        """A probe contrast as a claim: a - b overall and on the hardest level, each with its verdict."""
        key = f"{a} - {b}"
        on_all, on_top = diff(overall, key), diff(top, key)
        return {
            "claim": claim,
            "rule": f"the paired {key} interval of the mean probe change above 0 (overall; hardest level apart)",
            "overall": on_all,
            "hardest": on_top,
            "verdict_overall": verdict(_above(on_all), a, b),
            "verdict_hardest": verdict(_above(on_top), a, b),
        }

    # every arm's probe change, the differences and the best member against the best of k single seeds
    result["contrasts"] = {"overall": overall, "hardest": top}
    result["a_probe"] = probe_claim(
        "the population's solvers beat the single agent's on the probe, overall and on the hardest level",
        POP,
        SINGLE,
    )
    result["b_reward"] = probe_claim(
        "the gain comes from the reward (population minus its shuffled-reward control)", POP, CONTROL
    )
    cx = ("complexity_slope", PRIMARY)
    single_slope = _arm_stats(per_run, cx).get(SINGLE)
    single_new = _arm_stats(per_run, ("new_programs", "change")).get(SINGLE)
    pop_minus = _paired(per_run, POP, SINGLE, cx)
    result["c_collapse"] = {
        "claim": "the single agent's proposals collapse (complexity falls, fewer new programs, self-solve rate "
        "rises to a plateau) and the population's do not",
        "rule": f"single's {PRIMARY} slope and its change in new programs per step below 0, and the paired "
        f"4T+4S - single {PRIMARY} slope above 0",
        "complexity_slope_per_100_steps": {
            f: _arm_stats(per_run, ("complexity_slope", f))
            for f in ("ast_depth", "cyclomatic", "loc", "n_vars")
        },
        "new_programs_per_step": {
            k: _arm_stats(per_run, ("new_programs", k)) for k in ("start", "end", "change")
        },
        # secondary, no rule reads it: the share of valid proposals that are new programs (arms' volumes differ)
        "new_program_share": {
            k: _arm_stats(per_run, ("new_program_share", k)) for k in ("start", "end", "change")
        },
        "single_self_solve": {
            k: mean_ci([_get(m, ("self_solve", k)) for m in per_run.get(SINGLE, [])])
            for k in ("start", "end", "slope_second_half")
        },
        "population_minus_single_slope": pop_minus,
        "verdict": verdict(_below(single_slope) and _below(single_new) and _above(pop_minus), POP, SINGLE),
    }
    growth = _arm_stats(per_run, ("coverage_growth_second_half",))
    cov_minus = _paired(per_run, POP, SINGLE, ("coverage_growth_second_half",))
    result["d_coverage"] = {
        "claim": "coverage keeps growing in the population",
        "rule": "4T+4S's cells filled in the second half above 0, and the paired 4T+4S - single above 0",
        "growth_second_half": growth,
        "cells_end": _arm_stats(per_run, ("coverage_cells_end",)),
        "population_minus_single": cov_minus,
        "verdict": verdict(_above(growth.get(POP)) and _above(cov_minus), POP, SINGLE),
        "matched": _matched(records),
    }
    race = {}
    for arm in (a for a in (ONE, POP, CONTROL) if a in per_run):
        runs = per_run[arm]
        turns = [
            (m["arms_race"]["lead_changes"] >= 2)
            and min(m["arms_race"]["teacher_lead_share"] or 0, m["arms_race"]["student_lead_share"] or 0)
            >= LEAD_SHARE
            for m in runs
            if "arms_race" in m
        ]
        race[arm] = {
            "lead_changes": mean_ci([_get(m, ("arms_race", "lead_changes")) for m in runs]),
            "teacher_lead_share": mean_ci([_get(m, ("arms_race", "teacher_lead_share")) for m in runs]),
            "seeds_taking_turns": int(sum(turns)),
            "seeds": len(turns),
        }
    pop_race = race.get(POP)
    result["e_arms_race"] = {
        "claim": "the arms race oscillates: both roles take the lead in turn",
        "rule": f"in at least half of 4T+4S's seeds the teachers' margin (smoothed over {WINDOW} steps) changes "
        f"sign at least twice and each role leads at least {LEAD_SHARE:.0%} of the steps",
        "arms": race,
        "verdict": verdict(
            bool(pop_race and pop_race["seeds"] and 2 * pop_race["seeds_taking_turns"] >= pop_race["seeds"]),
            POP,
        ),
    }
    ratio = ("ratings", "student", "spread_over_sigma")
    result["f_ratings"] = {
        "claim": "members differentiate in rating",
        "rule": "4T+4S's students' mu spread / mean sigma at the last step above 1 (its interval's lower end)",
        "students": _arm_stats(per_run, ratio),
        "teachers": _arm_stats(per_run, ("ratings", "teacher", "spread_over_sigma")),
        "population_minus_control": _paired(per_run, POP, CONTROL, ratio),
        "verdict": verdict(_above(_arm_stats(per_run, ratio).get(POP), 1.0), POP),
        # no rule reads it: whether the ratings evolution selects by rank the students as the probe does
        "rating_vs_probe": _arm_stats(per_run, ("rating_skill",)),
    }
    result["curves"] = {a: [_curves(r, hardest) for r in rs] for a, rs in records.items()}
    _add_per_seed(result, per_run)
    # the raw per-step records of every run read (run_records.py), so the claims can be re-read from this file
    result["records"] = {
        a: [{"seed": s, **r} for s, r in zip(seeds, rs, strict=True)] for a, rs in records.items()
    }
    return result


def _solver_mean(probe: dict, roles: dict, level: int | None, levels: dict | None) -> float | None:
    """Mean probe accuracy of the solvers (students, or the single agent) over task types (and one level)."""
    vals = []
    for member, accs in probe.items():
        if roles.get(member) not in ("student", "single", None):
            continue
        if level is None:
            vals += [v for v in accs.values() if v is not None]
        else:
            found = (by_level.get(str(level)) for by_level in ((levels or {}).get(member) or {}).values())
            vals += [v for v in found if v is not None]  # JSON keeps the level keys as strings
    return float(np.mean(vals)) if vals else None


def probe_change(curve: dict, key: str = "probe") -> float | None:
    """A run's solvers' mean probe accuracy at its last probe minus at its first (None without two probes)."""
    ys = [y for y in curve.get(key) or [] if y is not None]
    return ys[-1] - ys[0] if len(ys) >= 2 else None


def minus(xs: Sequence, ys: Sequence) -> list[float | None]:
    return [None if x is None or y is None else x - y for x, y in zip(xs, ys, strict=False)]


def _sd(xs: Sequence[float | None]) -> float | None:
    """Sample standard deviation of the values given (None with fewer than 2)."""
    v = [x for x in xs if x is not None]
    return float(np.std(v, ddof=1)) if len(v) > 1 else None


def _add_per_seed(result: dict, per_run: dict) -> None:
    """Each claim's key number seed by seed (`per_seed`, in `seeds_used` order), so a reader sees the spread
    an interval summarises: the paired probe differences of (a) and (b) (solvers' mean change) and the
    per-run measure of (c)-(f)."""

    def changes(arm: str, key: str) -> list[float | None]:
        return [probe_change(c, key) for c in result["curves"].get(arm, [])]

    def measure(arm: str, path: tuple) -> list[float | None]:
        return [_get(m, path) for m in per_run.get(arm, [])]

    for name, other in (("a_probe", SINGLE), ("b_reward", CONTROL)):
        per_seed = {
            "overall": minus(changes(POP, "probe"), changes(other, "probe")),
            "hardest": minus(changes(POP, "probe_hardest"), changes(other, "probe_hardest")),
        }
        result[name]["per_seed"] = per_seed
        # no rule reads it: how many seeds per arm an effect of each size would need at the spread seen
        result[name]["seeds_needed"] = {
            "effects": list(EFFECTS),
            "power": POWER,
            "sd": _sd(per_seed["overall"]),  # the spread the counts extrapolate from (overall)
            **{k: [seeds_needed(v, e, power=POWER) for e in EFFECTS] for k, v in per_seed.items()},
        }
    # no rule reads it: solvers that lost over half their probe accuracy, per arm and seed (a control that
    # collapses makes "population minus control" large without any gain)
    result["b_reward"]["collapsed_solvers"] = {arm: measure(arm, ("collapsed_solvers",)) for arm in per_run}
    result["c_collapse"]["per_seed"] = measure(SINGLE, ("complexity_slope", PRIMARY))
    result["d_coverage"]["per_seed"] = measure(POP, ("coverage_growth_second_half",))
    result["e_arms_race"]["per_seed"] = measure(POP, ("arms_race", "lead_changes"))
    result["f_ratings"]["per_seed"] = measure(POP, ("ratings", "student", "spread_over_sigma"))
    result["f_ratings"]["rating_vs_probe_per_seed"] = measure(POP, ("rating_skill",))


def _curves(rec: dict, hardest: int | None) -> dict:
    roles = rec["roles"]
    st = rec["steps"]
    total = as_array(st.get("distinct_programs_total") or [])
    ratings = {
        m: r["mu"] for m, r in rec["ratings"].items() if roles.get(m) in ("teacher", "student") and r["mu"]
    }
    return {
        "probe_steps": [p["step"] for p in rec["probe"]],
        "probe": [_solver_mean(p["probe"], roles, None, None) for p in rec["probe"]],
        "probe_hardest": [
            _solver_mean(p["probe"], roles, hardest, p.get("probe_levels")) if hardest is not None else None
            for p in rec["probe"]
        ],
        "steps": st["step"],
        "complexity": (st.get("complexity") or {}).get(PRIMARY),
        "new_programs": as_list(per_step(total)),
        "new_program_share": as_list(new_program_share(total, as_array(st.get("valid_total") or []))),
        "coverage_cells": st.get("coverage_cells"),
        "cells_by_valid": budget_curve(rec),
        "self_solve_rate": st.get("self_solve_rate"),
        "teacher_margin": as_list(smooth(teacher_margin(rec))),
        "mu": ratings,
        "roles": {m: roles[m] for m in ratings},
    }


__all__ = [
    "claims",
    "finished_runs",
    "lead_changes",
    "run_claim_measures",
    "smooth",
]
