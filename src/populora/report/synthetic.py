"""A synthetic run folder that follows docs/run-folder.md exactly, for tests and report previews.

`write_synthetic_run(dir, mode="population"|"single", ...)` writes config.yaml, metrics.jsonl,
problems.jsonl and events.jsonl with the dynamics the paper describes: in population mode student solve
rates oscillate (code_o fast, code_i/code_f slowly), teachers' programs grow in complexity, coverage keeps
growing, TrueSkill ratings (the real `trueskill` package, banded win/draw/loss) spread out, and every
`evolve_every` steps the weakest member per role is replaced by a child that dips and recovers. In single
mode the agent's solve rate climbs to a plateau, its programs shrink to `return number * 3`, and entropy
collapses. Programs are real Python text; their features are measured by `populora.diagnostics.features`.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from populora.diagnostics.coverage import CoverageArchive
from populora.diagnostics.features import summarize
from populora.diagnostics.sinks import append_jsonl
from populora.names import LIVE_OPERATORS, PHASES, TASKS
from populora.population.ratings import score_game

__all__ = ["write_synthetic_run", "program_features"]

OPERATORS = LIVE_OPERATORS


def program_features(source: str) -> dict[str, int] | None:
    """The program's structural features (`populora.diagnostics.features`), or None when it does not parse."""
    from populora.diagnostics.features import program_features as _pf

    try:
        return _pf(source)
    except ValueError:
        return None


# --------------------------------------------------------------------------------------------------
# program text


def _make_program(rng: np.random.Generator, level: float) -> tuple[str, list[str]]:
    """A random but plausible AZR-style program whose size grows with `level` (0 = trivial), and an input."""
    if level < 0.12:
        k = int(rng.integers(2, 6))
        return f"def f(number):\n    return number * {k}", [str(int(rng.integers(1, 20)))]
    args = ["nums", "k"] if rng.random() < 0.6 else ["text", "k"]
    lines = [f"def f({', '.join(args)}):"]
    body: list[str] = []
    n_blocks = 1 + int(rng.poisson(level * 3))
    acc = "total" if args[0] == "nums" else "out"
    body.append(f"    {acc} = {'0' if acc == 'total' else repr('')}")
    it = "x" if args[0] == "nums" else "ch"
    for b in range(n_blocks):
        kind = rng.choice(["loop", "branch", "comp", "while"], p=[0.4, 0.3, 0.2, 0.1])
        if kind == "loop":
            body.append(f"    for i, {it} in enumerate({args[0]}):")
            if level > 0.4 and rng.random() < 0.7:
                body.append(f"        if i % {int(rng.integers(2, 5))} == 0 and {it}:")
                body.append(f"            {acc} += {it if acc == 'total' else it + '.upper()'}")
                body.append("        else:")
                body.append(
                    f"            {acc} {'-=' if acc == 'total' else '+='} {'k' if acc == 'total' else it}"
                )
            else:
                body.append(f"        {acc} += {it + ' * k' if acc == 'total' else it}")
        elif kind == "branch":
            body.append(f"    if len({args[0]}) > k:")
            body.append(f"        {acc} = {acc + ' * 2' if acc == 'total' else acc + '[::-1]'}")
            if rng.random() < level:
                body.append(f"    elif len({args[0]}) == k:")
                body.append(f"        {acc} = {acc} {'+ k' if acc == 'total' else '+ str(k)'}")
        elif kind == "comp":
            var = f"seen{b}"
            body.append(
                f"    {var} = [{it} for {it} in {args[0]} if {it} {'> k' if acc == 'total' else '!= str(k)'}]"
            )
            body.append(
                f"    {acc} {'+= len(' + var + ')' if acc == 'total' else '+= str(len(' + var + '))'}"
            )
        else:
            body.append(f"    j{b} = k")
            body.append(f"    while j{b} > 0:")
            body.append(f"        j{b} -= 1")
            body.append(f"        {acc} {'+= j' + str(b) if acc == 'total' else '+= str(j' + str(b) + ')'}")
    body.append(f"    return {acc}")
    if args[0] == "nums":
        inp = f"{[int(v) for v in rng.integers(-5, 10, size=int(rng.integers(2, 6)))]}, {int(rng.integers(1, 4))}"
    else:
        word = "".join(rng.choice(list("abcdef"), size=int(rng.integers(3, 7))))
        inp = f"{word!r}, {int(rng.integers(1, 4))}"
    return "\n".join(lines + body), [inp]


# --------------------------------------------------------------------------------------------------
# the run


def _config(mode: str, steps: int, teachers: int, students: int, evolve_every: int, seed: int) -> dict:
    return {
        "model": {"name": "tiny"},
        "lora": {"rank": 8, "alpha": 16},
        "population": {
            "mode": mode,
            "teachers": teachers if mode == "population" else 1,
            "students": students if mode == "population" else 1,
        },
        "train": {"steps": steps, "seed": seed, "checkpoint_every": 10},
        "evolution": {"every": evolve_every, "gamma": 0.25, "operators": list(OPERATORS)},
        "rl": {"lr": 5e-5, "rollouts": 4},
        "log": {"tensorboard": False},
        "synthetic": True,
    }


def write_synthetic_run(
    run_dir: str | Path,
    mode: str = "population",
    steps: int = 40,
    teachers: int = 3,
    students: int = 3,
    evolve_every: int = 10,
    problems_per_teacher: int = 6,
    rollouts: int = 4,
    seed: int = 0,
    first_step: int = 1,
    cut_last_line: bool = False,
) -> Path:
    """Write a complete synthetic run folder and return its path.

    `cut_last_line=True` appends half a metrics record at the end, as a kill mid-write would.
    `evolve_every=0` disables evolution.
    """
    import trueskill
    import yaml

    if mode not in ("population", "single"):
        raise ValueError(f"mode must be 'population' or 'single', not {mode!r}")
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    (run_dir / "config.yaml").write_text(
        yaml.safe_dump(_config(mode, steps, teachers, students, evolve_every, seed), sort_keys=False)
    )
    env = trueskill.TrueSkill(draw_probability=0.2, tau=0.28)
    archive = CoverageArchive()

    if mode == "population":
        tids = [f"T{i}" for i in range(teachers)]
        sids = [f"S{i}" for i in range(students)]
    else:
        tids, sids = ["A0"], ["A0"]
    # latent per-member state: skill offset (students), difficulty offset (teachers), child dip
    offset = {m: float(rng.normal(0, 0.08)) for m in {*tids, *sids}}
    born = dict.fromkeys({*tids, *sids}, first_step - 1)
    dip = dict.fromkeys({*tids, *sids}, 0.0)
    rating = {m: env.create_rating() for m in {*tids, *sids}}
    next_id = {"teacher": teachers, "student": students}
    phase = {t: float(rng.uniform(0, 2 * math.pi)) for t in TASKS}
    period = {"code_o": 7.0, "code_i": 19.0, "code_f": 23.0}

    for k in range(steps):
        step = first_step + k
        frac = k / max(1, steps - 1)
        members: dict[str, dict[str, Any]] = {}
        matchups = []
        games: dict[str, dict[str, int]] = {}
        feats_by_member: dict[str, list] = {m: [] for m in tids}
        solved: dict[str, dict[str, list[float]]] = {m: {t: [] for t in TASKS} for m in sids}
        teacher_solved: dict[str, dict[str, list[float]]] = {m: {t: [] for t in TASKS} for m in tids}
        t_rewards: dict[str, list[float]] = {m: [] for m in tids}
        n_valid = dict.fromkeys(tids, 0)

        if mode == "population":  # each teacher meets a different student while there are enough
            order = list(rng.permutation(len(sids)))
            pairs = [(t, sids[order[i % len(sids)]]) for i, t in enumerate(tids)]
        else:
            pairs = [("A0", "A0")]
        for t, s in pairs:
            pair_rates, rhos = [], []
            for j in range(problems_per_teacher):
                task = TASKS[j % 3]
                if mode == "population":
                    level = 0.25 + 0.6 * frac + offset[t] + float(rng.normal(0, 0.12))
                    valid_p = 0.55 + 0.35 * frac - dip[t]
                    cyc = 0.5 + 0.3 * math.sin(2 * math.pi * step / period[task] + phase[task])
                    p_solve = cyc + offset[s] - dip[s] + float(rng.normal(0, 0.05))
                else:
                    level = 0.6 * math.exp(-k / 12) + float(rng.normal(0, 0.05))
                    valid_p = 0.5 + 0.45 * (1 - math.exp(-k / 6))
                    p_solve = 0.97 - 0.55 * math.exp(-k / 8)
                p_solve = min(1.0, max(0.0, p_solve))
                program, inputs = _make_program(rng, max(0.0, level))
                valid = bool(rng.random() < valid_p)
                rec: dict[str, Any] = {
                    "step": step,
                    "proposer": t,
                    "solver": s,
                    "task": task,
                    "valid": valid,
                    "reason": None,
                    "id": f"{seed:x}{step:05d}{t}{j:02d}",
                    "program": program,
                    "inputs": inputs if task != "code_f" else inputs * 3,
                    "outputs": ["…"] * (1 if task != "code_f" else 3),
                    "message": "" if task != "code_f" else "Combine the numbers.",
                    "solve_rate": None,
                    "features": None,
                }
                if valid:
                    feats = program_features(program)
                    rho = float(rng.binomial(rollouts, p_solve)) / rollouts
                    rec.update(solve_rate=rho, features=feats)
                    feats_by_member[t].append(feats)
                    solved[s][task].append(rho)
                    teacher_solved[t][task].append(rho)
                    pair_rates.append(rho)
                    rhos.append(rho)
                    n_valid[t] += 1
                    if mode == "population":
                        t_rewards[t].append(0.0 if rho == 0 else 1.0 - rho)
                    else:  # AZR learnability reward
                        t_rewards[t].append(1.0 - rho if 0 < rho < 1 else 0.0)
                else:
                    rec["reason"] = str(
                        rng.choice(
                            [
                                "format: no <answer> block",
                                "nondeterministic",
                                "forbidden import: os",
                                "timeout",
                            ]
                        )
                    )
                    rhos.append(None)
                    if rec["reason"].startswith("format"):
                        rec["program"] = None
                    t_rewards[t].append(-1.0)
                append_jsonl(run_dir / "problems.jsonl", rec)
            if mode == "population":
                sr = float(np.mean(pair_rates)) if pair_rates else None
                game = score_game(rhos)  # one zero-sum game, as populora.population.ratings scores a matchup
                matchups.append({"teacher": t, "student": s, "solve_rate": sr, "n_problems": len(pair_rates)})
                append_jsonl(
                    run_dir / "events.jsonl",
                    {
                        "step": step,
                        "type": "matchup",
                        "teacher": t,
                        "student": s,
                        "solve_rate": sr,
                        "n_problems": len(pair_rates),
                        "outcome": game.outcome,
                        "teacher_points": game.teacher_points,
                        "student_points": game.student_points,
                    },
                )
                for mid, role in ((t, "teacher"), (s, "student")):
                    games.setdefault(mid, {"win": 0, "draw": 0, "loss": 0})[game.result(role)] += 1
                if game.outcome == "student":
                    rating[s], rating[t] = trueskill.rate_1vs1(rating[s], rating[t], env=env)
                elif game.outcome == "teacher":
                    rating[t], rating[s] = trueskill.rate_1vs1(rating[t], rating[s], env=env)
                else:
                    rating[s], rating[t] = trueskill.rate_1vs1(rating[s], rating[t], drawn=True, env=env)

        archive.add([f for fl in feats_by_member.values() for f in fl])
        for m in dict.fromkeys([*tids, *sids]):
            role = "single" if mode == "single" else ("teacher" if m in tids else "student")
            sol = solved.get(m)
            sr_by = {t: (float(np.mean(v)) if v else None) for t, v in sol.items()} if sol else None
            all_sr = [x for v in (sol or {}).values() for x in v]
            if sr_by is not None:
                sr_by["all"] = float(np.mean(all_sr)) if all_sr else None
            if role == "teacher":  # a teacher's solve_rate: its matched student's, on its problems
                sr_by = {t: (float(np.mean(v)) if v else None) for t, v in teacher_solved[m].items()}
                mine = [x for v in teacher_solved[m].values() for x in v]
                sr_by["all"] = float(np.mean(mine)) if mine else None
            ent_base = 1.1 if role == "teacher" else 0.8
            if role == "single":
                entropy = 1.2 * math.exp(-k / 10) + 0.08
                resp = 60 - 30 * frac
            else:
                entropy = ent_base - 0.15 * frac + 0.3 * dip[m]
                resp = (70 if role == "teacher" else 40) * (1 + 1.5 * frac)
            reward: float | None
            if role == "teacher":
                reward = float(np.mean(t_rewards[m])) if t_rewards[m] else None
            elif role == "student":
                reward = sr_by["all"]
            else:
                parts = t_rewards[m] + all_sr
                reward = float(np.mean(parts)) if parts else None
            is_teacher = role in ("teacher", "single")
            r = rating.get(m)
            members[m] = {
                "role": role,
                "reward": reward,
                "valid_rate": (n_valid[m] / problems_per_teacher) if is_teacher else None,
                "solve_rate": sr_by
                if sr_by is not None
                else {t: None for t in ("code_i", "code_o", "code_f", "all")},
                "response_len": float(resp + rng.normal(0, 4)),
                "entropy": float(max(0.01, entropy + rng.normal(0, 0.04))),
                "mu": None if mode == "single" else float(r.mu),
                "sigma": None if mode == "single" else float(r.sigma),
                "loss": float(rng.normal(0, 0.02)),
                "grad_norm": float(abs(rng.normal(0.3, 0.1))),
                "complexity": summarize(feats_by_member[m]) if is_teacher else None,
                "n_valid": n_valid[m] if is_teacher else None,
                "n_proposed": problems_per_teacher if is_teacher else None,
            }
        phase_s = {
            p: float(abs(rng.normal(v, v / 10)))
            for p, v in zip(PHASES, (0.01, 1.2, 0.1, 2.3, 0.1, 1.5, 0.0, 0.0), strict=True)
        }
        evolve = mode == "population" and evolve_every > 0 and k > 0 and (k + 1) % evolve_every == 0
        record = {
            "step": step,
            "time": 1_733_000_000.0 + 6.0 * k,
            "mode": mode,
            "phase_s": phase_s,
            "tokens_per_s": float(800 + rng.normal(0, 40)),
            "tokens": int(4096 + rng.integers(-200, 200)),
            "coverage": archive.coverage,
            "coverage_cells": archive.cells_filled,
            "members": members,
            "matchups": matchups,
            "games": {}
            if mode == "single"
            else {m: games.get(m, {"win": 0, "draw": 0, "loss": 0}) for m in members},
            "self_solve_rate": None,
        }
        if evolve:
            record["phase_s"]["evolution"] = 0.4
        for m in dip:  # children recover from their birth dip
            dip[m] *= 0.7
        if evolve:
            for role, ids in (("teacher", tids), ("student", sids)):
                ranked = sorted(ids, key=lambda m: rating[m].mu - 2 * rating[m].sigma)
                loser = ranked[0]
                # crossovers need two parents other than the member being replaced
                op = str(rng.choice(OPERATORS if len(ranked) > 2 else OPERATORS[:4]))
                parents = ranked[::-1][: 2 if op.startswith("X") else 1]
                child = f"{role[0].upper()}{next_id[role]}"
                next_id[role] += 1
                offset[child] = float(np.mean([offset[p] for p in parents])) + float(rng.normal(0.02, 0.03))
                dip[child] = 0.25
                born[child] = step
                mu = float(np.mean([rating[p].mu for p in parents]))
                sigma = max(float(np.mean([rating[p].sigma for p in parents])), env.sigma / 2)
                rating[child] = env.create_rating(mu=mu, sigma=sigma)
                ids[ids.index(loser)] = child
                # X4's parents' cosine (here from their offsets): below 0.5 it averages instead (X5)
                cos = 0.9 - 8.0 * abs(offset[parents[0]] - offset[parents[-1]]) if op == "X4" else None
                applied = "X5" if cos is not None and cos < 0.5 else op
                append_jsonl(
                    run_dir / "events.jsonl",
                    {
                        "step": step,
                        "type": "evolution",
                        "role": role,
                        "operator": applied,
                        "planned": op,
                        "parents": list(parents),
                        "child": child,
                        "replaced": loser,
                        "child_mu": mu,
                        "child_sigma": sigma,
                        "declined": None if applied == op else f"cos(D1, D2) = {cos:.3f} < cos_gate = 0.5",
                        "cos": cos,
                        "seconds": 0.4,
                    },
                )
        append_jsonl(run_dir / "metrics.jsonl", record)
        if (k + 1) % 10 == 0:
            append_jsonl(
                run_dir / "events.jsonl",
                {"step": step, "type": "checkpoint", "path": f"checkpoints/step_{step:06d}"},
            )
    if cut_last_line:
        with open(run_dir / "metrics.jsonl", "a") as fh:
            fh.write(
                f'{{"step": {first_step + steps}, "time": 1733000999.0, "mode": "{mode}", "members": {{"T0": {{"ro'
            )
    return run_dir


def main(argv: list[str] | None = None) -> None:
    """`python -m populora.report.synthetic DIR [--mode single] [--steps N]`: write a synthetic run folder."""
    import argparse

    ap = argparse.ArgumentParser(description="Write a synthetic PopuLoRA run folder (docs/run-folder.md).")
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("--mode", choices=("population", "single"), default="population")
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--teachers", type=int, default=3)
    ap.add_argument("--students", type=int, default=3)
    ap.add_argument("--evolve-every", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    if a.run_dir.exists() and any(a.run_dir.iterdir()):
        ap.error(f"{a.run_dir} is not empty; pass a new folder")
    write_synthetic_run(
        a.run_dir,
        mode=a.mode,
        steps=a.steps,
        teachers=a.teachers,
        students=a.students,
        evolve_every=a.evolve_every,
        seed=a.seed,
    )
    print(f"wrote {a.run_dir}")


if __name__ == "__main__":
    main()
