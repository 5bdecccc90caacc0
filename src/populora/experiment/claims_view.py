"""How the claims are shown (claims.py answers them): the paper's figures and the console table.

`claims_figure` draws one panel per measure, one line per arm (mean over seeds): probe per arm over steps (all
levels and the hardest), complexity, the share of valid proposals that are new programs and coverage over
steps, coverage against the valid proposals made (arms at an equal budget, matched.py), the single agent's self-solve rate, the teachers' margin and the
population's ratings. `claim_rows` is the table `populora experiment claims` prints: one row per claim, its key
number with its interval, the number seed by seed, and the verdict.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from populora.experiment.claims import CONTROL, POP, PRIMARY, SINGLE, WINDOW, minus, smooth
from populora.experiment.matched import mean_curve_on_grid
from populora.experiment.measures import as_array

SMOOTHED = ("complexity", "new_program_share", "self_solve_rate")  # per-step noise: trailing means


def claims_figure(result: dict, path: Path) -> Path:
    """The paper's figures from `claims(...)`: one panel per measure, one line per arm (mean over seeds)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [
        ("probe", "probe_steps", "solvers' probe accuracy"),
        ("probe_hardest", "probe_steps", f"probe accuracy, level {result['hardest_level']}"),
        ("complexity", "steps", f"proposals' {PRIMARY} (valid)"),
        ("new_program_share", "steps", f"new programs per valid proposal ({WINDOW}-step mean)"),
        ("coverage_cells", "steps", "CVT cells filled"),
        ("self_solve_rate", "steps", f"single agent's self-solve rate ({WINDOW}-step mean)"),
        ("teacher_margin", "steps", f"teachers' margin ({WINDOW}-step mean)"),
    ]
    fig, axes = plt.subplots(3, 3, figsize=(15, 12))
    for ax, (key, xkey, title) in zip(axes.flat, panels, strict=False):
        for i, (arm, curves) in enumerate(result["curves"].items()):  # one colour per arm in every panel
            ys = [as_array(c[key] or []) for c in curves]
            if not ys or not any(np.isfinite(y).any() for y in ys):
                continue
            n = min(len(y) for y in ys)
            y = np.nanmean(np.stack([y[:n] for y in ys]), axis=0) if n else np.array([])
            if key in SMOOTHED:
                y = smooth(y)
            ax.plot(curves[0][xkey][:n], y, f"C{i}", label=arm, marker="o" if xkey == "probe_steps" else None)
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("step")
        if key == "teacher_margin":
            ax.axhline(0, color="grey", lw=0.8)
    axes.flat[0].legend(fontsize=8)
    ax = axes.flat[7]  # coverage against the valid proposals made: arms at an equal budget (matched.py)
    for i, (arm, curves) in enumerate(result["curves"].items()):
        grid, y = mean_curve_on_grid([tuple(c.get("cells_by_valid") or ([], [])) for c in curves])
        if grid.size:
            ax.plot(grid, y, f"C{i}", label=arm)
    ax.set_title("CVT cells filled vs valid proposals made", fontsize=10)
    ax.set_xlabel("valid proposals")
    ax = axes.flat[8]
    pop = (result["curves"].get(POP) or [None])[0]
    if pop:
        for m, mu in pop["mu"].items():
            ax.plot(
                pop["steps"][: len(mu)],
                as_array(mu),
                color="C0" if pop["roles"][m] == "teacher" else "C1",
                lw=1,
            )
        ax.set_title(
            f"{POP} seed {result['seeds_used'][0]}: mu (teachers blue, students orange)", fontsize=10
        )
        ax.set_xlabel("step")
    else:
        ax.axis("off")  # no 4T+4S run finished yet
    fig.suptitle(f"claims: {len(result['seeds_used'])} seed(s) per arm, {result['steps']} steps")
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def claim_rows(result: dict) -> tuple[list[str], list[list[str]]]:
    """The console table: one row per claim, its key number with interval, and the verdict."""

    def pts(ci: dict | None, k: float = 100.0, unit: str = " pts") -> str:
        if not ci or ci.get("mean") is None:
            return "-"
        if ci.get("lo") is None:
            return f"{k * ci['mean']:+.1f}{unit}"
        return f"{k * ci['mean']:+.1f} [{k * ci['lo']:+.1f}, {k * ci['hi']:+.1f}]{unit}"

    def seeds(xs: Sequence | None, k: float = 1.0, digits: int = 1, sign: str = "+") -> str:
        return ", ".join("-" if x is None else f"{k * x:{sign}.{digits}f}" for x in xs or []) or "-"

    a, b, c = result["a_probe"], result["b_reward"], result["c_collapse"]
    d, e, f = result["d_coverage"], result["e_arms_race"], result["f_ratings"]
    race = e["arms"].get(POP) or {}
    collapsed = b.get("collapsed_solvers") or {}  # a control whose students collapse inflates (b)
    matched = d.get("matched") or {}  # (d) at an equal budget: no rule reads it
    per, budget = matched.get("per_seed") or {}, matched.get("valid_proposals")

    def probe_row(label: str, measure: str, claim: dict, key: str) -> list[str]:
        return [label, measure, pts(claim[key]), seeds(claim["per_seed"][key], 100), claim[f"verdict_{key}"]]

    def scale_row(label: str, claim: dict) -> list[str]:
        """The seeds per arm a 2- or 5-point difference would need at the per-seed spread seen."""
        need = claim.get("seeds_needed") or {}
        sizes = " / ".join(f"{100 * e:.0f}" for e in need.get("effects", []))
        counts = " / ".join("-" if n is None else str(n) for n in need.get("overall", []))
        n = sum(x is not None for x in claim["per_seed"]["overall"])
        sd = f"sd {100 * need['sd']:.1f} pts over {n}" if need.get("sd") is not None else "-"
        power = f"{100 * need.get('power', 0):.0f}%"
        return [label, f"seeds per arm for {sizes} pts ({power} power)", counts or "-", sd, "no rule (scale)"]

    rows = [
        probe_row("(a) population > single", f"{POP} - single", a, "overall"),
        probe_row("(a) ... hardest level", f"{POP} - single", a, "hardest"),
        scale_row("(a) ... seeds needed", a),
        probe_row("(b) gain from reward", f"{POP} - shuffled", b, "overall"),
        scale_row("(b) ... seeds needed", b),
        [
            "(b) ... solvers collapsed",
            "solvers ending < half the start",
            ", ".join(f"{arm} {sum(n or 0 for n in ns)}" for arm, ns in collapsed.items()) or "-",
            f"{CONTROL} " + seeds(collapsed.get(CONTROL), digits=0, sign=""),
            "no rule (diagnostic)",
        ],
        [
            "(c) single collapses",
            f"single {PRIMARY} slope /100 steps",
            pts(c["complexity_slope_per_100_steps"][PRIMARY].get(SINGLE), 1.0, ""),
            seeds(c["per_seed"]),
            c["verdict"],
        ],
        [
            "(d) coverage grows",
            f"{POP} cells, 2nd half",
            pts(d["growth_second_half"].get(POP), 1.0, ""),
            seeds(d["per_seed"], digits=0),
            d["verdict"],
        ],
        [
            "(d) ... at equal proposals",
            f"{POP} - single cells at {budget} valid" if budget else "cells at an equal budget",
            pts((matched.get("population_minus_single") or {}).get("cells"), 1.0, ""),
            seeds(minus(per.get(POP) or [], per.get(SINGLE) or []), digits=0),
            "no rule (secondary)",
        ],
        [
            "(e) arms race oscillates",
            f"{POP} seeds taking turns",
            f"{race.get('seeds_taking_turns', 0)}/{race.get('seeds', 0)}",
            "lead changes " + seeds(e["per_seed"], digits=0, sign=""),
            e["verdict"],
        ],
        [
            "(f) ratings differentiate",
            "students' mu spread / sigma",
            pts(f["students"].get(POP), 1.0, ""),
            seeds(f["per_seed"], digits=2),
            f["verdict"],
        ],
        [
            "(f) ... ratings vs probe",
            "students' mu vs probe, rank corr.",
            pts((f.get("rating_vs_probe") or {}).get(POP), 1.0, ""),
            seeds(f.get("rating_vs_probe_per_seed"), digits=2),
            "no rule (diagnostic)",
        ],
    ]
    return ["claim", "measure", "value [95% CI]", "per seed", "verdict"], rows


TABLE_WIDTH = 100  # the console listing's width (one table row per claim was about 170 columns)


def render_claims(result: dict, width: int = TABLE_WIDTH) -> str:
    """`claim_rows` for the console, at most `width` columns: one block per claim, its name and verdict on the
    first line and its measure, value and per-seed numbers indented below, long text wrapped. A table of five
    columns at that width cut every cell to a few characters."""
    import html
    import textwrap

    head, rows = claim_rows(result)
    label_width = max(len(h) for h in head[1:4]) + 1
    out = []
    for row in rows:
        claim, measure, value, per_seed, verdict = (html.unescape(c) for c in row)
        out += textwrap.wrap(f"{claim}: {verdict}", width=width, subsequent_indent="    ")
        for name, text in zip(head[1:4], (measure, value, per_seed), strict=True):
            out += textwrap.wrap(
                text,
                width=width,
                initial_indent=f"    {name + ':':<{label_width}} ",
                subsequent_indent=" " * (5 + label_width),
            )
    return "\n".join(out) + "\n"


def unfinished_message(out: Path, result: dict) -> str:
    """The one-line error of `experiment claims` when no seed has finished in every arm: what finished of what,
    and the command that goes on."""
    n = result["settings"]["seeds"]
    finished = result["arms_finished"]
    done = ", ".join(f"{arm} {len(seeds)} of {n}" for arm, seeds in finished.items())
    what = (
        "no run has finished yet"
        if not any(finished.values())
        else "no seed has finished in every arm yet (the claims compare the arms seed by seed)"
    )
    return (
        f"{out}: {what}; seeds finished per arm: {done}; continue with "
        f"`populora experiment ablation --resume {out}`."
    )


__all__ = ["claim_rows", "claims_figure", "render_claims", "unfinished_message"]
