"""The self-contained HTML pages: `write_report(run_dir)` and `write_compare(run_dirs, out)`.

One file, no external resources: figures are PNGs embedded as base64 data URIs, styles are inline, and
there is no JavaScript. Every figure has a sentence under it saying what it shows (with the run's own
numbers where they help). Missing data never fails a page: a section without data says so instead.
"""

from __future__ import annotations

import datetime as _dt
import html
import os
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from populora import safe_files
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
    solver_roles,
)
from populora.diagnostics.features import FEATURE_LABELS, FEATURES
from populora.diagnostics.probe import probe_by_role
from populora.diagnostics.run import Run, load_run
from populora.names import TASKS
from populora.report import hall, plots
from populora.report.games import RESULTS, operator_counts, role_games
from populora.report.text import display, plain_figures

__all__ = ["render_report", "write_report", "render_compare", "write_compare"]

CSS = """
:root { --ink:#212529; --muted:#6c757d; --line:#dee2e6; --bg:#f8f9fa; --accent:#1c7ed6; }
* { box-sizing: border-box; }
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif;
       color: var(--ink); background: var(--bg); margin: 0; line-height: 1.45; }
main { max-width: 980px; margin: 0 auto; padding: 24px 20px 60px; }
h1 { font-size: 1.6rem; margin: 0 0 4px; }
h2 { font-size: 1.15rem; margin: 0 0 8px; }
.sub { color: var(--muted); margin: 0 0 16px; }
.badges span { display: inline-block; background: #e7f5ff; color: #1864ab; border-radius: 12px;
               padding: 2px 10px; margin: 0 6px 6px 0; font-size: .85rem; }
.card { background: #fff; border: 1px solid var(--line); border-radius: 8px; padding: 16px 18px;
        margin: 16px 0; }
.card img { max-width: 100%; height: auto; display: block; margin: 0 auto; }
.cap { color: #495057; font-size: .92rem; margin: 8px 0 0; }
.empty { color: var(--muted); font-style: italic; }
table { border-collapse: collapse; font-size: .9rem; }
td, th { padding: 4px 14px 4px 0; text-align: left; vertical-align: top; }
th { color: var(--muted); font-weight: 600; }
.kv { display: grid; grid-template-columns: repeat(3, max-content minmax(0, 1fr)); gap: 3px 12px;
      font-size: .9rem; margin: 0 0 12px; }
.kv dt { color: var(--muted); }
.kv dd { margin: 0; }
@media (max-width: 760px) { .kv { grid-template-columns: max-content 1fr; } }
pre { background: #f1f3f5; border-radius: 6px; padding: 10px 12px; overflow-x: auto; font-size: .85rem;
      margin: 6px 0; }
.examples { display: grid; grid-template-columns: 1fr 1fr; gap: 0 22px; }
@media (max-width: 760px) { .examples { grid-template-columns: 1fr; } }
.examples h3 { font-size: 1rem; margin: 8px 0 6px; }
.problem { margin: 0 0 14px; }
.feat { color: #495057; font-size: .88rem; }
.notes { background: #fff9db; border: 1px solid #ffe066; border-radius: 8px; padding: 8px 14px; }
details summary { cursor: pointer; color: var(--accent); }
nav a { margin-right: 12px; font-size: .9rem; color: var(--accent); text-decoration: none; }
"""

CONFIG_ROWS = [
    ("mode", "population.mode"),
    ("teachers", "population.teachers"),
    ("students", "population.students"),
    ("model", "model.name"),
    ("LoRA rank", "lora.rank"),
    ("LoRA alpha", "lora.alpha"),
    ("steps (planned)", "train.steps"),
    ("seed", "train.seed"),
    ("learning rate", "rl.lr"),
    ("rollouts n", "rl.rollouts"),
    ("evolution every", "evolution.every"),
    ("evolution gamma", "evolution.gamma"),
    ("operators", "evolution.operators"),
]


def _esc(x: object) -> str:
    # run-folder text is data: shown literally, and encodable whatever bytes its folder name holds
    return html.escape(display(x), quote=True)


def _fmt(x: object, digits: int = 3) -> str:
    if x is None:
        return "–"
    if isinstance(x, float):
        if not np.isfinite(x):
            return "–"
        return f"{x:.{digits}g}"
    if isinstance(x, list | tuple):
        return ", ".join(map(str, x))
    return str(x)


def _page(title: str, body: str) -> str:
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        '<link rel="icon" href="data:,">'
        f"<title>{_esc(title)}</title><style>{CSS}</style></head>\n<body><main>\n{body}\n</main></body></html>\n"
    )


def _figure_card(
    anchor: str, title: str, make: Callable[[], object], caption: str | Callable[[], str], empty: str
) -> str:
    fig = make()
    head = f'<section class="card" id="{anchor}"><h2>{_esc(title)}</h2>'
    if fig is None:
        return f'{head}<p class="empty">{_esc(empty)}</p></section>\n'
    png = plots.to_png_base64(fig)
    cap = caption() if callable(caption) else caption
    return (
        f'{head}<img alt="{_esc(title)}" src="data:image/png;base64,{png}">'
        f'<p class="cap">{cap}</p></section>\n'
    )


# -- captions (each: what the plot shows, then what this run's numbers say) ------------------------------


def _cap_rewards(run: Run) -> str:
    parts = []
    for role in run.roles:
        r = smooth(run.role_series(role, "reward"), 3)
        fin = r[np.isfinite(r)]
        if fin.size:
            parts.append(f"{plots.ROLE_LABEL[role]} {fin[0]:+.2f} → {fin[-1]:+.2f}")
    v = run.role_series(proposer_roles(run), "valid_rate")
    vfin = v[np.isfinite(v)]
    tail = f"; the last valid-proposal rate is {vfin[-1]:.0%}" if vfin.size else ""
    return (
        "Mean training reward per role (bold, smoothed) and per member (faint); right, the fraction of each "
        "proposer's problems that passed validation (invalid proposals earn −1). "
        f"Smoothed, first → last step: {_esc('; '.join(parts)) or 'no rewards logged'}{tail}."
    )


def _cap_invalid(run: Run) -> str:
    labels, early, late = plots.invalid_reasons(run)
    n_bad, n_all = int(early.sum() + late.sum()), len(run.problems)
    top = f" The most common: “{labels[0]}” ({int(early[0] + late[0])})." if labels else ""
    return _esc(
        f"Why proposals failed validation (format, determinism, safety, limits), split into the first "
        f"and second half of the run; a shrinking share means the teachers learned the format. "
        f"{n_bad} of {n_all} proposals were invalid.{top}"
    )


def _cap_solve(run: Run) -> str:
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
        f"at least 0.05): {_esc('; '.join(bits)) or 'n/a'}."
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
                f"{plots.ROLE_LABEL[role]}: mean {_rate(c.mean[a])} at step {int(c.steps[a])} → "
                f"{_rate(c.mean[b])} at step {int(c.steps[b])} (best {_rate(c.best[b])}, "
                f"worst {_rate(c.worst[b])})"
            )
    return parts


def _cap_probe(run: Run) -> str:
    return (
        "Greedy accuracy of every member on the fixed held-out probe sets (the first "
        f"{_esc(run.cfg('diagnostics.probe_size', '?'))} problems of each task type, never trained on), "
        "at step 0 before any update and every diagnostics.probe_every steps: the mean member (line) and "
        "the best and worst member (band); 'all' is a member's mean over the three types. "
        + "; ".join(_probe_ends(run))
        + "."
    )


def _cap_probe_sampled(run: Run) -> str:
    return (
        "Sampled pass@1 of every member on the same held-out items as the greedy probe: "
        f"{_esc(run.cfg('diagnostics.probe_samples', '?'))} answers per item at temperature "
        f"{_esc(run.cfg('diagnostics.probe_temperature', '?'))}, all drawn from one fixed evaluation seed, so an "
        "unchanged adapter reads the same twice. RL sharpens what a model already samples, so this moves before "
        "the greedy probe does. " + "; ".join(_probe_ends(run, "probe_sampled")) + "."
    )


def _cap_probe_valid(run: Run) -> str:
    return (
        "Valid-proposal rate of every teacher on fixed prompts (diagnostics.probe_proposals per task type, "
        "references from the probe sets), one proposal per prompt at rl.teacher_temperature from one fixed "
        "seed, at the probe's steps. Unlike the per-step valid rate, whose prompts come from the run's own "
        "buffers, only the adapters change between two of these points. "
        + "; ".join(_probe_ends(run, "probe_valid"))
        + "."
    )


def _cap_roles(run: Run) -> str:
    bits = []
    for role in run.roles:
        e = run.role_series(role, "entropy")
        ln = run.role_series(role, "response_len")
        ef, lf = e[np.isfinite(e)], ln[np.isfinite(ln)]
        if ef.size and lf.size:
            bits.append(
                f"{plots.ROLE_LABEL[role].capitalize()}: entropy {ef[0]:.2f} → {ef[-1]:.2f}, "
                f"length {lf[0]:.0f} → {lf[-1]:.0f} tokens"
            )
    return (
        "Mean per-token policy entropy and mean response length of each role's generations. Entropy "
        "collapsing towards zero signals a policy that has stopped exploring. "
        f"{_esc('; '.join(bits))}."
    )


def _cap_ratings(run: Run) -> str:
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
        + _esc(spread)
    )


def _cap_matchups(run: Run) -> str:
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


def _cap_games(run: Run) -> str:
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
                f"{plots.ROLE_LABEL[role]} won {_share(tot['win'], n)}, drew {_share(tot['draw'], n)} and lost "
                f"{_share(tot['loss'], n)} of their {n} games"
            )
    if parts:
        s += "Over the run, " + "; ".join(parts) + "."
    return _esc(s)


def _cap_evolution(run: Run) -> str:
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
    return _esc(s)


def _rate(x: float) -> str:
    return f"{x:.2f}" if np.isfinite(x) else "–"


def _steps(n: float) -> str:
    return f"{n:.0f} step" + ("" if round(n) == 1 else "s")


def _cap_complexity(run: Run) -> str:
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
        f"to trivial programs. First fifth → last fifth of the run: {_esc('; '.join(bits))}."
    )


def _cap_coverage(run: Run) -> str:
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
        f"programs; a plateau means they repeat themselves. Final coverage: {_esc(last)}."
    )


def _cap_phase(run: Run) -> str:
    tps = run.series("tokens_per_s")
    tail = f" Mean throughput {nanmean(tps):.0f} tokens/s." if np.isfinite(tps).any() else ""
    return "Wall-clock seconds per step spent in each phase of the training loop." + _esc(tail)


# -- header, summary, examples --------------------------------------------------------------------------


def _notes(run: Run) -> list[str]:
    notes = []
    p = run.path / "metrics.jsonl"
    if p.exists() and p.stat().st_size and not safe_files.read_bytes(p).endswith(b"\n"):
        notes.append(
            "metrics.jsonl ends with a cut line (the run was killed mid-write, or is still running); "
            "it was skipped."
        )
    notes += [f"{w}." for w in run.warnings]  # corrupt or missing metrics lines (diagnostics.run.load_run)
    if not (run.path / "config.yaml").exists():
        notes.append("config.yaml is missing; the configuration summary is incomplete.")
    if run.n_steps == 0:
        notes.append("No training step has been logged yet.")
    elif run.n_steps == 1:
        notes.append("Only one step is logged; curves are single points.")
    if not run.problems:
        notes.append("problems.jsonl is missing or empty: no example problems, complexity from metrics only.")
    return notes


def _header(run: Run) -> str:
    steps = run.steps
    span = f"steps {steps[0]}–{steps[-1]} ({run.n_steps} logged)" if run.n_steps else "no steps logged"
    badges = [run.mode, span]
    if run.mode != "single":
        nt, ns = len(run.members_with_role("teacher")), len(run.members_with_role("student"))
        badges.append(
            f"{run.cfg('population.teachers', '?')}T+{run.cfg('population.students', '?')}S "
            f"({nt} teachers, {ns} students over the run)"
        )
    model = run.cfg("model.name")
    if model:
        badges.append(f"model {model}")
    times = run.series("time")
    if np.isfinite(times).sum() >= 2:
        badges.append(f"wall {(np.nanmax(times) - np.nanmin(times)) / 60:.1f} min")
    rows = "".join(
        f"<dt>{_esc(k)}</dt><dd>{_esc(_fmt(run.cfg(key)))}</dd>"
        for k, key in CONFIG_ROWS
        if run.cfg(key) is not None
    )
    summary = _summary_rows(run)
    import yaml

    full = yaml.safe_dump(run.config, sort_keys=False) if run.config else "(no config.yaml)"
    nav = "".join(f'<a href="#{a}">{_esc(t)}</a>' for a, t in _SECTIONS)
    notes = _notes(run)
    notes_html = ('<div class="notes">' + "<br>".join(_esc(n) for n in notes) + "</div>") if notes else ""
    return (
        f'<h1>PopuLoRA run report</h1><p class="sub">{_esc(run.path.resolve())} · generated '
        f"{_dt.datetime.now().strftime('%Y-%m-%d %H:%M')}</p>"
        f'<div class="badges">{"".join(f"<span>{_esc(b)}</span>" for b in badges)}</div>{notes_html}'
        f'<section class="card"><h2>Summary</h2><dl class="kv">{summary}</dl>'
        f'<h2>Configuration</h2><dl class="kv">{rows}</dl>'
        f"<details><summary>full config.yaml</summary><pre>{_esc(full)}</pre></details></section>"
        f"<nav>{nav}</nav>"
    )


def _summary_rows(run: Run) -> str:
    rows: list[tuple[str, str]] = []
    n_valid = sum(1 for p in run.problems if p.get("valid"))
    if run.problems:
        rows.append(
            (
                "problems proposed (valid)",
                f"{len(run.problems)} ({n_valid}, {n_valid / len(run.problems):.0%})",
            )
        )
    sr = run.role_series(solver_roles(run), ["solve_rate", "all"])
    if np.isfinite(sr).any():
        k = max(1, run.n_steps // 10)
        rows.append(("solve rate, last 10% of steps", f"{nanmean(sr[-k:]):.2f}"))
    _, cov, cells = coverage_curve(run)
    if np.isfinite(cov).any():
        i = int(np.flatnonzero(np.isfinite(cov))[-1])
        rows.append(
            ("coverage", f"{100 * cov[i]:.2f}% ({_fmt(cells[i] if np.isfinite(cells[i]) else None)} cells)")
        )
    evo = run.events_of("evolution")
    if run.mode != "single":
        rows.append(("evolution events", str(len(evo))))
        best = []
        for role in ("teacher", "student"):
            cands = [
                (float(run.member_series(m, "mu")[-1]), m)
                for m in run.members_with_role(role)
                if run.n_steps and np.isfinite(run.member_series(m, "mu")[-1])
            ]
            if cands:
                mu, m = max(cands)
                best.append(f"{m} (μ {mu:.1f})")
        if best:
            rows.append(("top rated at the end", ", ".join(best)))
    resumes = run.events_of("resume")
    if resumes:
        rows.append(("resumed", ", ".join(f"step {e['step']}" for e in resumes)))
    return "".join(f"<dt>{_esc(k)}</dt><dd>{_esc(v)}</dd>" for k, v in rows)


def _pick_examples(run: Run, which: str, n: int = 2) -> list[dict]:
    valid = [p for p in run.problems if p.get("valid") and p.get("program")]
    if not valid:
        return []
    steps = sorted({int(p["step"]) for p in valid})
    target = steps[0] if which == "early" else steps[-1]
    pool = [p for p in valid if int(p["step"]) == target]
    out, seen_tasks = [], set()
    for p in pool:  # prefer different task types, like the paper's appendix
        if p.get("task") not in seen_tasks:
            out.append(p)
            seen_tasks.add(p.get("task"))
        if len(out) == n:
            break
    return out


def _problem_block(p: dict, head: str) -> str:
    f = p.get("features") or {}
    feat = (
        f"AST depth {_fmt(f.get('ast_depth'))}, cyclomatic {_fmt(f.get('cyclomatic'))}, "
        f"{_fmt(f.get('loc'))} LOC, {_fmt(f.get('n_vars'))} variables"
    )
    return (
        f'<div class="problem"><div>{head}</div><pre>{_esc(p["program"])}</pre>'
        f'<div class="feat">{_esc(feat)}</div></div>'
    )


def _compare_examples(runs: Sequence[Run]) -> str:
    """One program per run at matched early and late steps (the paper's baseline-vs-population pairs)."""
    valid = {id(r): [p for p in r.problems if p.get("valid") and p.get("program")] for r in runs}
    have = [r for r in runs if valid[id(r)]]
    if not have:
        return ""
    first = max(min(int(p["step"]) for p in valid[id(r)]) for r in have)
    last = min(max(int(p["step"]) for p in valid[id(r)]) for r in have)
    rows = []
    for title, target in (("Early", first), ("Late", last)):
        cells = []
        for r in have:
            pool = valid[id(r)]
            step = min({int(p["step"]) for p in pool}, key=lambda s: (abs(s - target), s))
            p = next(p for p in pool if int(p["step"]) == step)
            head = f"<b>{_esc(r.label)}</b> · step {step} · {_esc(p.get('task', '?'))} · {_esc(p.get('proposer', '?'))}"
            cells.append(_problem_block(p, head))
        rows.append(f'<h3>{title} (step ≈ {target})</h3><div class="examples">{"".join(cells)}</div>')
        if first == last:
            break
    return (
        '<section class="card" id="examples"><h2>Example problems at matched steps</h2><p class="cap">'
        "One valid proposer program from each run near the same early and late step, with its structural "
        f"metrics (as in the paper's appendix).</p>{''.join(rows)}</section>\n"
    )


def _examples(run: Run) -> str:
    early, late = _pick_examples(run, "early"), _pick_examples(run, "late")
    if not early:
        return (
            '<section class="card" id="examples"><h2>Example problems</h2>'
            '<p class="empty">No valid problem with program text in problems.jsonl.</p></section>\n'
        )
    cols = []
    for title, items in (("Early", early), ("Late", late)):
        blocks = [f"<h3>{title}: step {items[0]['step']}</h3>"]
        for p in items:
            f = p.get("features") or {}
            feat = (
                f"AST depth {_fmt(f.get('ast_depth'))}, cyclomatic {_fmt(f.get('cyclomatic'))}, "
                f"{_fmt(f.get('loc'))} LOC, {_fmt(f.get('n_vars'))} variables"
            )
            sr = p.get("solve_rate")
            who = str(p.get("proposer", "?"))
            if p.get("solver") and p.get("solver") != p.get("proposer"):
                who += f" → {p['solver']}"
            sr_s = f" · solve rate {sr:.2f}" if isinstance(sr, int | float) else ""
            inputs = p.get("inputs") or []
            more = " …" if len(inputs) > 3 else ""
            inp = (
                f'<div class="feat">inputs: <code>{_esc(" | ".join(map(str, inputs[:3])))}</code>{more}</div>'
                if inputs
                else ""
            )
            blocks.append(
                f'<div class="problem"><div><b>{_esc(p.get("task", "?"))}</b> · {_esc(who)}{_esc(sr_s)}</div>'
                f'<pre>{_esc(p["program"])}</pre><div class="feat">{_esc(feat)}</div>{inp}</div>'
            )
        cols.append(f"<div>{''.join(blocks)}</div>")
    return (
        '<section class="card" id="examples"><h2>Example problems</h2><p class="cap">Valid teacher '
        "programs from the first and the last step that produced any, with their structural metrics (as in "
        f'the paper\'s appendix).</p><div class="examples">{"".join(cols)}</div></section>\n'
    )


_SECTIONS = [
    ("rewards", "Rewards"),
    ("invalid", "Invalid"),
    ("solve", "Solve rates"),
    ("roles", "Entropy & length"),
    ("ratings", "Ratings"),
    ("matchups", "Matchups"),
    ("evolution", "Evolution"),
    ("complexity", "Complexity"),
    ("coverage", "Coverage"),
    ("examples", "Examples"),
    ("timing", "Timing"),
]


def _evaluation(run: Run) -> str:
    """The held-out benchmark table from `populora eval RUN_DIR` (RUN_DIR/eval/results.json), if present."""
    import json

    path = run.path / "eval" / "results.json"
    if not path.exists():
        return ""
    try:
        summ = json.loads(safe_files.read_text(path)).get("summary") or {}  # no link, no FIFO (issue 50)
    except (json.JSONDecodeError, OSError, UnicodeDecodeError, AttributeError):
        return (
            '<section class="card" id="eval"><h2>Held-out evaluation</h2><p class="empty">eval/results.json '
            "is unreadable; re-run `populora eval RUN_DIR`.</p></section>\n"
        )
    cols = [c for c, v in summ.items() if isinstance(v, dict)]
    if not cols:
        return ""
    tail = ("code_avg", "math_avg", "overall")
    rows_keys = list(dict.fromkeys(k for c in cols for k in summ[c] if k not in tail))
    rows_keys += [k for k in tail if any(summ[c].get(k) is not None for c in cols)]
    names = {"code_avg": "code average", "math_avg": "math average", "overall": "overall"}

    def cell(v: object) -> str:
        return f"{100 * v:.1f}" if isinstance(v, int | float) else "–"

    head = "".join(f"<th>{_esc(c)}</th>" for c in cols)
    body = "".join(
        f"<tr><td>{'<b>' if k in tail else ''}{_esc(names.get(k, k))}{'</b>' if k in tail else ''}</td>"
        + "".join(f"<td>{cell(summ[c].get(k))}</td>" for c in cols)
        + "</tr>"
        for k in rows_keys
    )
    return (
        '<section class="card" id="eval"><h2>Held-out evaluation</h2>'
        f'<table><tr><th>benchmark</th>{head}</tr>{body}</table><p class="cap">Greedy pass@1 (%) from '
        "<code>populora eval</code> (eval/results.md has the per-member details).</p></section>\n"
    )


def _any_matchup(run: Run) -> bool:
    return any(rec.get("matchups") for rec in run.metrics) or bool(run.events_of("matchup"))


def render_report(run: Run) -> str:
    """The report page of one run, as an HTML string."""
    run.label = display(run.label)
    with plain_figures():  # reasons, ids and folder names are drawn literally (never as mathtext)
        return _render_report(run)


def _render_report(run: Run) -> str:
    single = run.mode == "single"
    cards = [
        _figure_card(
            "rewards",
            "Rewards and valid proposals",
            lambda: plots.rewards_figure(run),
            lambda: _cap_rewards(run),
            "No rewards logged.",
        ),
        _figure_card(
            "invalid",
            "Invalid proposals by reason",
            lambda: plots.invalid_figure(run),
            lambda: _cap_invalid(run),
            "No invalid proposal logged.",
        ),
        _figure_card(
            "solve",
            "Solve rate per task type",
            lambda: plots.solve_rate_figure(run),
            lambda: _cap_solve(run),
            "No valid problem yet, so nothing to solve."
            if run.problems and not any(p.get("valid") for p in run.problems)
            else "No solve rates logged.",
        ),
        _figure_card(
            "probe",
            "Fixed probe: held-out accuracy",
            lambda: plots.probe_figure(run),
            lambda: _cap_probe(run),
            "No probe logged (enable it with --set diagnostics.probe_every=N).",
        ),
        _figure_card(
            "probe_sampled",
            "Fixed probe: sampled pass@1",
            lambda: plots.probe_figure(run, "probe_sampled"),
            lambda: _cap_probe_sampled(run),
            "No sampled probe logged (add it to the probe with --set diagnostics.probe_samples=8).",
        ),
        _figure_card(
            "probe_valid",
            "Fixed probe: teachers' valid proposals",
            lambda: plots.probe_figure(run, "probe_valid"),
            lambda: _cap_probe_valid(run),
            "No teacher validity probe logged (it runs with the probe: --set diagnostics.probe_every=N, "
            "diagnostics.probe_proposals > 0).",
        ),
        _figure_card(
            "hof",
            "Hall of fame: games against frozen references",
            lambda: hall.hof_figure(run),
            lambda: _esc(hall.hof_caption(run)),
            "No hall of fame logged (enable it with --set hof.every=N).",
        ),
        _figure_card(
            "roles",
            "Policy entropy and response length",
            lambda: plots.role_metric_figure(run),
            lambda: _cap_roles(run),
            "No entropy or response length logged.",
        ),
        _figure_card(
            "ratings",
            "TrueSkill ratings",
            lambda: plots.ratings_figure(run),
            lambda: _cap_ratings(run),
            "A single-agent run has no ratings." if single else "No ratings logged.",
        ),
        _figure_card(
            "games",
            "Games won, drawn and lost",
            lambda: plots.games_figure(run),
            lambda: _cap_games(run),
            "A single-agent run plays no rated games."
            if single
            else "No games logged (runs before the games key have none).",
        ),
        _figure_card(
            "matchups",
            "Student × teacher solve rates",
            lambda: plots.matchup_figure(run),
            lambda: _cap_matchups(run),
            "A single-agent run has no matchups."
            if single
            else (
                "No matchup has produced a valid problem yet." if _any_matchup(run) else "No matchups logged."
            ),
        ),
        _figure_card(
            "evolution",
            "Evolution: operator usage and child recovery",
            lambda: plots.evolution_figure(run),
            lambda: _cap_evolution(run),
            "A single-agent run does not evolve." if single else "No evolution event yet.",
        ),
        _figure_card(
            "complexity",
            "Problem complexity",
            lambda: plots.complexity_figure(run),
            lambda: _cap_complexity(run),
            "No valid program features logged.",
        ),
        _figure_card(
            "coverage",
            "Problem-space coverage",
            lambda: plots.coverage_figure(run),
            lambda: _cap_coverage(run),
            "No cell filled yet: no valid program so far."
            if np.isfinite(run.series("coverage")).any() or run.problems
            else "No coverage logged.",
        ),
        _examples(run),
        _figure_card(
            "timing",
            "Time per step by phase",
            lambda: plots.phase_time_figure(run),
            lambda: _cap_phase(run),
            "No phase timings logged.",
        ),
    ]
    return _page(f"PopuLoRA report: {run.path.name}", _header(run) + _evaluation(run) + "".join(cards))


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(display(text), encoding="utf-8")
    os.replace(tmp, path)


def write_report(run_dir: str | Path, out: str | Path | None = None) -> Path:
    """Write `RUN_DIR/report.html` (or `out`) for a run folder and return its path."""
    run = load_run(run_dir)
    path = Path(out) if out else run.path / "report.html"
    _atomic_write(path, render_report(run))
    return path


def render_compare(runs: Sequence[Run]) -> str:
    """A page overlaying several runs on the same axes."""
    for run in runs:
        run.label = display(run.label)
    with plain_figures():
        return _render_compare(runs)


def _render_compare(runs: Sequence[Run]) -> str:
    rows = []
    for run, color in zip(runs, plots._run_styles(runs), strict=True):
        _, cov, _ = coverage_curve(run)
        sr = run.role_series(solver_roles(run), ["solve_rate", "all"])
        k = max(1, run.n_steps // 10)
        cov_s = f"{100 * cov[np.isfinite(cov)][-1]:.2f}%" if np.isfinite(cov).any() else "–"
        osc = oscillation_by_type(run)
        turns = " / ".join(str(osc[t].direction_changes) if osc[t].n_points else "–" for t in TASKS)
        vr = run.role_series(proposer_roles(run), "valid_rate")
        rows.append(
            f'<tr><td><span style="color:{color}">■</span> {_esc(run.label)}</td>'
            f"<td>{_esc(run.mode)}</td><td>{run.n_steps}</td><td>{_esc(_rate(nanmean(sr[-k:])))}</td>"
            f"<td>{_esc(turns)}</td><td>{_esc(_rate(nanmean(vr[-k:])))}</td>"
            f"<td>{_esc(cov_s)}</td><td>{len(run.events_of('evolution'))}</td></tr>"
        )
    table = (
        "<table><tr><th>run</th><th>mode</th><th>steps</th><th>solve rate (last 10%)</th>"
        "<th>direction changes i / o / f</th><th>valid rate (last 10%)</th>"
        f"<th>coverage</th><th>evolution events</th></tr>{''.join(rows)}</table>"
        '<p class="cap">Direction changes: turns of the smoothed solve-rate curve per task type that '
        "retrace more than the curve's noise (at least 0.05), a count of the oscillation the paper "
        "attributes to the arms race.</p>"
    )
    cards = [
        _figure_card(
            "solve",
            "Solve rate",
            lambda: plots.compare_solve_figure(runs),
            "Smoothed solve rate of each run's solvers (students, or the single agent on its own "
            "problems), overall and per task type. A plateau near 1 is the self-calibration fixed point; "
            "oscillation is the arms race.",
            "No solve rates logged.",
        ),
        _figure_card(
            "probe",
            "Fixed probe: held-out accuracy",
            lambda: plots.compare_probe_figure(runs),
            "Greedy accuracy on the fixed held-out probe sets of each run's solvers (students, or the single "
            "agent): the mean member (solid, with dots at the probed steps) and the best member (dashed); "
            "step 0 is the base model before any update.",
            "No run logged a probe (enable it with --set diagnostics.probe_every=N).",
        ),
        _figure_card(
            "probe_valid",
            "Fixed probe: teachers' valid proposals",
            lambda: plots.compare_probe_figure(runs, "probe_valid"),
            "Valid-proposal rate of each run's proposers (teachers, or the single agent) on the fixed teacher "
            "prompts (references from the probe sets, one fixed sampling seed): the mean member (solid) and the "
            "best member (dashed). Unlike the per-step valid rate, only the adapters change between points.",
            "No run logged a teacher validity probe (it runs with the probe: --set diagnostics.probe_every=N).",
        ),
        _figure_card(
            "complexity",
            "Problem complexity",
            lambda: plots.compare_complexity_figure(runs),
            "Mean of the four structural metrics of each run's valid proposer programs per step (smoothed).",
            "No program features logged.",
        ),
        _figure_card(
            "coverage",
            "Problem-space coverage",
            lambda: plots.compare_coverage_figure(runs),
            "Cumulative share of the 4,096 CVT cells filled by each run's valid programs.",
            "No coverage logged.",
        ),
        _figure_card(
            "valid",
            "Valid proposals",
            lambda: plots.compare_valid_figure(runs),
            "Smoothed share of each run's proposals that passed validation (teachers, or the single agent).",
            "No valid rates logged.",
        ),
        _figure_card(
            "entropy",
            "Policy entropy",
            lambda: plots.compare_metric_figure(runs, "entropy", "entropy"),
            "Mean per-token entropy of proposers (left) and solvers (right) per run (smoothed).",
            "No entropy logged.",
        ),
        _figure_card(
            "length",
            "Response length",
            lambda: plots.compare_metric_figure(runs, "response_len", "response length"),
            "Mean response length in tokens of proposers (left) and solvers (right) per run.",
            "No response length logged.",
        ),
        _figure_card(
            "reward",
            "Reward",
            lambda: plots.compare_metric_figure(runs, "reward", "reward"),
            "Mean training reward of proposers and solvers per run (the single agent's reward mixes "
            "both roles, so compare shapes rather than levels).",
            "No rewards logged.",
        ),
        _compare_examples(runs),
    ]
    head = (
        f'<h1>PopuLoRA run comparison</h1><p class="sub">{len(runs)} runs · generated '
        f'{_dt.datetime.now().strftime("%Y-%m-%d %H:%M")}</p><section class="card">{table}</section>'
    )
    return _page("PopuLoRA comparison", head + "".join(cards))


def write_compare(run_dirs: Sequence[str | Path], out: str | Path) -> Path:
    """Write the comparison page of several run folders to `out` and return its path."""
    runs = [load_run(d) for d in run_dirs]
    labels = [r.label for r in runs]
    for r in runs:  # two runs with the same folder name still need distinct legend entries
        if labels.count(r.label) > 1:
            r.label = f"{r.label} [{r.path.parent.name}/{r.path.name}]"
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    _atomic_write(out, render_compare(runs))
    return out
