"""The run report's cards that are not figures: the header (title, badges, notes on what is missing, the
summary and the configuration), the held-out evaluation table, and the example problems (early and late
programs of one run, or matched steps across the runs of a comparison).
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Sequence

import numpy as np

from populora import safe_files
from populora.diagnostics.dynamics import coverage_curve, nanmean, solver_roles
from populora.diagnostics.run import Run
from populora.report.shell import esc, fmt

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


def header(run: Run) -> str:
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
        f"<dt>{esc(k)}</dt><dd>{esc(fmt(run.cfg(key)))}</dd>"
        for k, key in CONFIG_ROWS
        if run.cfg(key) is not None
    )
    summary = _summary_rows(run)
    import yaml

    full = yaml.safe_dump(run.config, sort_keys=False) if run.config else "(no config.yaml)"
    nav = "".join(f'<a href="#{a}">{esc(t)}</a>' for a, t in _SECTIONS)
    notes = _notes(run)
    notes_html = ('<div class="notes">' + "<br>".join(esc(n) for n in notes) + "</div>") if notes else ""
    return (
        f'<h1>PopuLoRA run report</h1><p class="sub">{esc(run.path.resolve())} · generated '
        f"{_dt.datetime.now().strftime('%Y-%m-%d %H:%M')}</p>"
        f'<div class="badges">{"".join(f"<span>{esc(b)}</span>" for b in badges)}</div>{notes_html}'
        f'<section class="card"><h2>Summary</h2><dl class="kv">{summary}</dl>'
        f'<h2>Configuration</h2><dl class="kv">{rows}</dl>'
        f"<details><summary>full config.yaml</summary><pre>{esc(full)}</pre></details></section>"
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
            ("coverage", f"{100 * cov[i]:.2f}% ({fmt(cells[i] if np.isfinite(cells[i]) else None)} cells)")
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
    return "".join(f"<dt>{esc(k)}</dt><dd>{esc(v)}</dd>" for k, v in rows)


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
        f"AST depth {fmt(f.get('ast_depth'))}, cyclomatic {fmt(f.get('cyclomatic'))}, "
        f"{fmt(f.get('loc'))} LOC, {fmt(f.get('n_vars'))} variables"
    )
    return (
        f'<div class="problem"><div>{head}</div><pre>{esc(p["program"])}</pre>'
        f'<div class="feat">{esc(feat)}</div></div>'
    )


def compare_examples(runs: Sequence[Run]) -> str:
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
            head = f"<b>{esc(r.label)}</b> · step {step} · {esc(p.get('task', '?'))} · {esc(p.get('proposer', '?'))}"
            cells.append(_problem_block(p, head))
        rows.append(f'<h3>{title} (step ≈ {target})</h3><div class="examples">{"".join(cells)}</div>')
        if first == last:
            break
    return (
        '<section class="card" id="examples"><h2>Example problems at matched steps</h2><p class="cap">'
        "One valid proposer program from each run near the same early and late step, with its structural "
        f"metrics (as in the paper's appendix).</p>{''.join(rows)}</section>\n"
    )


def examples(run: Run) -> str:
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
                f"AST depth {fmt(f.get('ast_depth'))}, cyclomatic {fmt(f.get('cyclomatic'))}, "
                f"{fmt(f.get('loc'))} LOC, {fmt(f.get('n_vars'))} variables"
            )
            sr = p.get("solve_rate")
            who = str(p.get("proposer", "?"))
            if p.get("solver") and p.get("solver") != p.get("proposer"):
                who += f" → {p['solver']}"
            sr_s = f" · solve rate {sr:.2f}" if isinstance(sr, int | float) else ""
            inputs = p.get("inputs") or []
            more = " …" if len(inputs) > 3 else ""
            inp = (
                f'<div class="feat">inputs: <code>{esc(" | ".join(map(str, inputs[:3])))}</code>{more}</div>'
                if inputs
                else ""
            )
            blocks.append(
                f'<div class="problem"><div><b>{esc(p.get("task", "?"))}</b> · {esc(who)}{esc(sr_s)}</div>'
                f'<pre>{esc(p["program"])}</pre><div class="feat">{esc(feat)}</div>{inp}</div>'
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


def evaluation(run: Run) -> str:
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

    head = "".join(f"<th>{esc(c)}</th>" for c in cols)
    body = "".join(
        f"<tr><td>{'<b>' if k in tail else ''}{esc(names.get(k, k))}{'</b>' if k in tail else ''}</td>"
        + "".join(f"<td>{cell(summ[c].get(k))}</td>" for c in cols)
        + "</tr>"
        for k in rows_keys
    )
    return (
        '<section class="card" id="eval"><h2>Held-out evaluation</h2>'
        f'<table><tr><th>benchmark</th>{head}</tr>{body}</table><p class="cap">Greedy pass@1 (%) from '
        "<code>populora eval</code> (eval/results.md has the per-member details).</p></section>\n"
    )
