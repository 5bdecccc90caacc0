"""The caption under each figure of the run report: what the plot shows, then what this run's numbers say.

One function per card, named after it (`captions.rewards(run)`), returning HTML with the run's own text escaped.
"""

from __future__ import annotations

import numpy as np

from populora.diagnostics.dynamics import (
    child_recovery,
    complexity_curves,
    coverage_curve,
    matchup_matrix,
    nanmean,
    operator_usage,
    oscillation_by_type,
    proposer_roles,
    smooth,
)
from populora.diagnostics.features import FEATURE_LABELS, FEATURES
from populora.diagnostics.probe import probe_by_role
from populora.diagnostics.run import Run
from populora.names import TASKS
from populora.report import plots
from populora.report.figure_style import ROLE_LABEL
from populora.report.games import RESULTS, operator_counts, role_games
from populora.report.shell import esc, rate


def rewards(run: Run) -> str:
    parts = []
    for role in run.roles:
        r = smooth(run.role_series(role, "reward"), 3)
        fin = r[np.isfinite(r)]
        if fin.size:
            parts.append(f"{ROLE_LABEL[role]} {fin[0]:+.2f} → {fin[-1]:+.2f}")
    v = run.role_series(proposer_roles(run), "valid_rate")
    vfin = v[np.isfinite(v)]
    tail = f"; the last valid-proposal rate is {vfin[-1]:.0%}" if vfin.size else ""
    return (
        "Mean training reward per role (bold, smoothed) and per member (faint); right, the fraction of each "
        "proposer's problems that passed validation (invalid proposals earn −1). "
        f"Smoothed, first → last step: {esc('; '.join(parts)) or 'no rewards logged'}{tail}."
    )


def invalid(run: Run) -> str:
    labels, early, late = plots.invalid_reasons(run)
    n_bad, n_all = int(early.sum() + late.sum()), len(run.problems)
    top = f" The most common: “{labels[0]}” ({int(early[0] + late[0])})." if labels else ""
    return esc(
        f"Why proposals failed validation (format, determinism, safety, limits), split into the first "
        f"and second half of the run; a shrinking share means the teachers learned the format. "
        f"{n_bad} of {n_all} proposals were invalid.{top}"
    )


def solve(run: Run) -> str:
    osc = oscillation_by_type(run)
    bits = []
    for t in TASKS:
        o = osc[t]
        if o.n_points:
            sw = f", mean swing {o.mean_swing:.2f}" if o.mean_swing is not None else ""
            bits.append(f"{t}: {o.direction_changes} direction changes{sw} (retrace ≥ {o.threshold:.2f})")
    who = (
        "the single agent on its own problems"
        if run.mode == "single"
        else "students on their matched teachers' problems"
    )
    return (
        f"Solve rate of {who} per task type (faint: per step; bold: smoothed; dotted: evolution). "
        "A self-calibrating agent climbs to a plateau; an arms race makes the curves oscillate. "
        "Oscillation of the smoothed curves (a turn counts when the curve retraces more than its noise, "
        f"at least 0.05): {esc('; '.join(bits)) or 'n/a'}."
    )


def _probe_ends(run: Run, which: str = "probe") -> list[str]:
    """Per role: the mean member's first and last probed value, and the best / worst member at the end."""
    parts = []
    for role, curves in probe_by_role(run, which).items():
        c = curves["all"]
        fin = np.flatnonzero(np.isfinite(c.mean))
        if fin.size:
            a, b = fin[0], fin[-1]
            parts.append(
                f"{ROLE_LABEL[role]}: mean {rate(c.mean[a])} at step {int(c.steps[a])} → "
                f"{rate(c.mean[b])} at step {int(c.steps[b])} (best {rate(c.best[b])}, "
                f"worst {rate(c.worst[b])})"
            )
    return parts


def probe(run: Run) -> str:
    return (
        "Greedy accuracy of every member on the fixed held-out probe sets (the first "
        f"{esc(run.cfg('diagnostics.probe_size', '?'))} problems of each task type, never trained on), "
        "at step 0 before any update and every diagnostics.probe_every steps: the mean member (line) and "
        "the best and worst member (band); 'all' is a member's mean over the three types. "
        + "; ".join(_probe_ends(run))
        + "."
    )


def probe_sampled(run: Run) -> str:
    return (
        "Sampled pass@1 of every member on the same held-out items as the greedy probe: "
        f"{esc(run.cfg('diagnostics.probe_samples', '?'))} answers per item at temperature "
        f"{esc(run.cfg('diagnostics.probe_temperature', '?'))}, all drawn from one fixed evaluation seed, so an "
        "unchanged adapter reads the same twice. RL sharpens what a model already samples, so this moves before "
        "the greedy probe does. " + "; ".join(_probe_ends(run, "probe_sampled")) + "."
    )


def probe_flaws(run: Run) -> str:
    from populora.diagnostics.probe import flaw_curves

    ends = []
    for task, by_class in flaw_curves(run).items():
        for c, (_, y) in by_class.items():
            fin = np.flatnonzero(np.isfinite(y))
            if fin.size:
                ends.append(f"{task} {esc(c)} {rate(y[fin[0]])} → {rate(y[fin[-1]])}")
    return (
        "The misconception probe: the solvers' greedy answers to the first "
        f"{esc(run.cfg('diagnostics.probe_flaws', '?'))} held-out items of each planted class (the bundled "
        "misconception sets), right (solid) and the misconceived reader's answer (dotted), mean over the solver "
        "members; a class counts as repaired when the right rate passes 50% (dashed). On the tiny-flaws model "
        "the base answers these consistently wrong though it samples the right answer often. Right rate, first "
        "probe → last: " + "; ".join(ends) + "."
    )


def probe_valid(run: Run) -> str:
    return (
        "Valid-proposal rate of every teacher on fixed prompts (diagnostics.probe_proposals per task type, "
        "references from the probe sets), one proposal per prompt at rl.teacher_temperature from one fixed "
        "seed, at the probe's steps. Unlike the per-step valid rate, whose prompts come from the run's own "
        "buffers, only the adapters change between two of these points. "
        + "; ".join(_probe_ends(run, "probe_valid"))
        + "."
    )


def roles(run: Run) -> str:
    bits = []
    for role in run.roles:
        e = run.role_series(role, "entropy")
        ln = run.role_series(role, "response_len")
        ef, lf = e[np.isfinite(e)], ln[np.isfinite(ln)]
        if ef.size and lf.size:
            bits.append(
                f"{ROLE_LABEL[role].capitalize()}: entropy {ef[0]:.2f} → {ef[-1]:.2f}, "
                f"length {lf[0]:.0f} → {lf[-1]:.0f} tokens"
            )
    return (
        "Mean per-token policy entropy and mean response length of each role's generations. Entropy "
        "collapsing towards zero signals a policy that has stopped exploring. "
        f"{esc('; '.join(bits))}."
    )


def ratings(run: Run) -> str:
    final = []
    for m in run.members:
        mu = run.member_series(m, "mu")
        if np.isfinite(mu[-1:]).any():
            final.append((float(mu[-1]), m))
    final.sort(reverse=True)
    spread = (
        f" At the last step μ ranges from {final[-1][0]:.1f} ({final[-1][1]}) to {final[0][0]:.1f} ({final[0][1]})."
        if final
        else ""
    )
    return (
        "TrueSkill rating μ of every member over time (band: μ ± σ; dashed: the prior 25). Dotted lines mark "
        "evolution events, labelled operator→child; a child starts from its parents' μ with a widened σ."
        + esc(spread)
    )


def matchups(run: Run) -> str:
    students, teachers, mat, cnt = matchup_matrix(run)
    played = int((cnt > 0).sum())
    counts = " (in brackets)" if len(students) <= 10 and len(teachers) <= 10 else ""
    return (
        "Solve rate of each student (row) on each teacher's problems (column), pooled over all their "
        f"matchups and weighted by problem count{counts}; blank: never matched. Non-uniform rows mean "
        f"students specialise against particular teachers. {played} of {len(students) * len(teachers)} pairs "
        "were played."
    )


def _share(n: int, total: int) -> str:
    return f"{n} ({100 * n / total:.0f}%)" if total else str(n)


def games(run: Run) -> str:
    s = (
        "One zero-sum TrueSkill game per matchup, scored problem by problem: the teacher takes a problem its "
        "student solves in under half of its rollouts (but at least once), the student one it solves more "
        "often or that was invalid; a problem no rollout solved is the teacher's when the student solved some other "
        "problem of the batch, else the student's (a forfeit); the side with 0.5 + "
        "ratings.draw_margin of the points wins, else it is a draw (docs/paper-choices.md). "
    )
    _, by_role = role_games(run)
    parts = []
    for role in ("teacher", "student"):
        if role in by_role:
            tot = {k: int(by_role[role][k][-1]) for k in RESULTS}
            n = sum(tot.values())
            parts.append(
                f"{ROLE_LABEL[role]} won {_share(tot['win'], n)}, drew {_share(tot['draw'], n)} and lost "
                f"{_share(tot['loss'], n)} of their {n} games"
            )
    if parts:
        s += "Over the run, " + "; ".join(parts) + "."
    return esc(s)


def evolution(run: Run) -> str:
    recs = child_recovery(run)
    scored = [r for r in recs if r.parent_level is not None]
    done = [r.steps for r in scored if r.steps is not None]
    usage = operator_usage(run)
    s = (
        f"Left: children produced by each operator ({sum(usage.values())} in all; orange: mutations, blue: "
        "crossovers). Right: each child's reward minus its parents' mean reward at birth (the live "
        "retention test); the child has recovered when its curve reaches the dashed zero line. "
    )
    observed = [r for r in scored if r.observed > 0]
    unseen = len(scored) - len(observed)
    if observed:
        med = f", after a median of {_steps(np.median(done))}" if done else ""
        s += f"{len(done)} of {len(observed)} children recovered{med}"
        censored = [r for r in observed if r.steps is None]
        if censored:
            s += f" ({len(censored)} not yet, observed for at most {_steps(max(r.observed for r in censored))})"
        s += "."
    if unseen:
        s += f" {unseen} born at the last logged step {'is' if unseen == 1 else 'are'} not observed yet."
    ops = operator_counts(run)
    if ops.applied:
        s += " Applied: " + ", ".join(f"{op} {n}" for op, n in sorted(ops.applied.items())) + "."
    if ops.x4_planned:
        cos = (
            f"; cos(D1, D2) ranged from {min(ops.x4_cos):.2f} to {max(ops.x4_cos):.2f}" if ops.x4_cos else ""
        )
        s += (
            f" X4 was drawn {ops.x4_planned} times: it extrapolated {ops.x4_extrapolated} times and fell back to "
            f"averaging (X5, parents below its cosine gate) {ops.x4_fell_back} times{cos}."
        )
    return esc(s)


def _steps(n: float) -> str:
    return f"{n:.0f} step" + ("" if round(n) == 1 else "s")


def complexity(run: Run) -> str:
    curves = complexity_curves(run)
    bits = []
    for f in FEATURES:
        st, mean, _ = curves[f]
        fin = mean[np.isfinite(mean)]
        if fin.size:
            k = max(1, fin.size // 5)
            bits.append(f"{FEATURE_LABELS[f]} {fin[:k].mean():.1f} → {fin[-k:].mean():.1f}")
    who = "the single agent's" if run.mode == "single" else "the teachers'"
    faint = ", faint: each teacher's own mean" if len(run.members_with_role(*proposer_roles(run))) > 1 else ""
    return (
        f"The four structural metrics of {who} valid programs per step (bold: mean, band: ± "
        f"one standard deviation{faint}). Rising curves mean harder problems; falling curves are the self-calibration collapse "
        f"to trivial programs. First fifth → last fifth of the run: {esc('; '.join(bits))}."
    )


def coverage(run: Run) -> str:
    steps, cov, cells = coverage_curve(run)
    fin = np.isfinite(cov)
    last = (
        f"{100 * cov[fin][-1]:.2f}% ({int(cells[fin][-1]) if np.isfinite(cells[fin][-1]) else '?'} cells)"
        if fin.any()
        else "n/a"
    )
    return (
        "Cumulative share of the 4,096 cells of a CVT archive over the four structural features that hold "
        "at least one valid program. A curve that keeps rising means the teachers keep finding new kinds of "
        f"programs; a plateau means they repeat themselves. Final coverage: {esc(last)}."
    )


def phase(run: Run) -> str:
    tps = run.series("tokens_per_s")
    tail = f" Mean throughput {nanmean(tps):.0f} tokens/s." if np.isfinite(tps).any() else ""
    return "Wall-clock seconds per step spent in each phase of the training loop." + esc(tail)
