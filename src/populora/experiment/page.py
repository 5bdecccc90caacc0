"""experiment.html: the tables and figures of an ablation or a retention experiment, from its JSON.

The page uses the report's page frame, styles and figure helpers (populora.report), so it looks like a run
report; every number on it is in experiment.json.
"""

from __future__ import annotations

import base64
import datetime as _dt
import html
from pathlib import Path

import numpy as np

from populora.diagnostics.features import FEATURE_LABELS, FEATURES
from populora.experiment.contrasts import fmt
from populora.experiment.measures import as_array
from populora.report import plots
from populora.report.html import _page


def _esc(x: object) -> str:
    return html.escape(str(x))


def _num(v: float | None, digits: int = 3) -> str:
    return "–" if v is None else f"{v:.{digits}g}"


def _ci(s: dict | None, digits: int = 3, pct: bool = False) -> str:
    """'m [lo, hi]' (or 'm' with one seed) of a summary entry."""
    if not s or s.get("mean") is None:
        return "–"
    k = 100.0 if pct else 1.0
    f = (lambda v: f"{k * v:.1f}") if pct else (lambda v: _num(v, digits))
    if s.get("lo") is None:
        return f(s["mean"])
    return f"{f(s['mean'])} [{f(s['lo'])}, {f(s['hi'])}]"


def _img(fig, alt: str) -> str:
    if fig is None:
        return f'<p class="empty">No data for {_esc(alt)}.</p>'
    return f'<img alt="{_esc(alt)}" src="data:image/png;base64,{plots.to_png_base64(fig)}">'


def _seed_band(curves: list[dict], key: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
    """(steps, mean over seeds, lo, hi) of one curve key, on the steps all seeds share."""
    if not curves:
        return None
    steps = curves[0]["steps"]
    ys = [as_array(c[key]) for c in curves if c["steps"] == steps]
    if not ys:
        return None
    y = np.vstack(ys)
    with np.errstate(invalid="ignore"):
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            m = np.nanmean(y, axis=0)
            if y.shape[0] > 1:
                from scipy import stats

                half = stats.t.ppf(0.975, y.shape[0] - 1) * np.nanstd(y, axis=0, ddof=1) / np.sqrt(y.shape[0])
            else:
                half = np.zeros_like(m)
    return np.array(steps), m, m - half, m + half


def _roles_of(arm_runs: list[dict]) -> tuple[str, str]:
    roles = set()
    for r in arm_runs:
        roles |= set(r["curves"]["probe"])
    return ("single", "single") if "single" in roles else ("teacher", "student")


def probe_arms_figure(results: dict):
    """Probe accuracy ('all') over steps per arm: proposers left, solvers right; mean member with the 95% CI
    over seeds (band), best member dashed, worst member dotted."""
    fig, axes = plots._fig(size=(9.0, 3.6), ncols=2, sharey=True)
    drawn = False
    for i, (arm, data) in enumerate(results.items()):
        color = plots.RUN_COLORS[i % len(plots.RUN_COLORS)]
        runs = data["runs"]
        for ax, role in zip(axes[0], _roles_of(runs), strict=True):
            curves = [r["curves"]["probe"][role]["all"] for r in runs if role in r["curves"]["probe"]]
            band = _seed_band(curves, "mean")
            if band is None:
                continue
            st, m, lo, hi = band
            ax.fill_between(st, lo, hi, color=color, alpha=0.15, linewidth=0)
            drawn |= plots._plot_line(ax, st, m, color=color, linewidth=2.0, marker="o", ms=3, label=arm)
            for key, ls in (("best", "--"), ("worst", ":")):
                b = _seed_band(curves, key)
                if b is not None:
                    plots._plot_line(ax, b[0], b[1], color=color, linewidth=1.0, linestyle=ls)
    axes[0, 0].set_title("proposers (teachers / single agent): probe accuracy", fontsize=10)
    axes[0, 1].set_title("solvers (students / single agent): probe accuracy", fontsize=10)
    for ax in axes[0]:
        ax.set_xlabel("step")
    plots._legend(axes[0, 1], loc="best")
    return fig if drawn else None


def _curve_figure(results: dict, get, title: str, size=(9.0, 3.0)):
    fig, axes = plots._fig(size=size)
    ax, drawn = axes[0, 0], False
    for i, (arm, data) in enumerate(results.items()):
        color = plots.RUN_COLORS[i % len(plots.RUN_COLORS)]
        band = _seed_band([get(r["curves"]) for r in data["runs"]], "y")
        if band is None:
            continue
        st, m, lo, hi = band
        ax.fill_between(st, lo, hi, color=color, alpha=0.12, linewidth=0)
        drawn |= plots._plot_line(ax, st, m, color=color, linewidth=2.0, label=arm)
    ax.set_title(title, fontsize=10)
    ax.set_xlabel("step")
    plots._legend(ax, loc="best")
    return fig if drawn else None


def complexity_arms_figure(results: dict):
    fig, axes = plots._fig(size=(9.0, 4.8), ncols=2, nrows=2)
    drawn = False
    for i, (arm, data) in enumerate(results.items()):
        color = plots.RUN_COLORS[i % len(plots.RUN_COLORS)]
        for ax, f in zip(axes.flat, FEATURES, strict=True):
            cs = [
                {"steps": r["curves"]["complexity"][f]["steps"], "y": r["curves"]["complexity"][f]["mean"]}
                for r in data["runs"]
                if f in r["curves"]["complexity"]
            ]
            band = _seed_band(cs, "y")
            if band is not None:
                drawn |= plots._plot_line(ax, band[0], band[1], color=color, linewidth=1.8, label=arm)
            ax.set_title(FEATURE_LABELS[f], fontsize=10)
    plots._legend(axes[0, 0], loc="best")
    return fig if drawn else None


def _table(head: list[str], rows: list[list[str]]) -> str:
    th = "".join(f"<th>{_esc(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table><tr>{th}</tr>{body}</table>"


def ablation_rows(result: dict) -> tuple[list[str], list[list[str]]]:
    """The main table (also printed by the CLI and copied into the README)."""
    head = [
        "arm",
        "seeds",
        "s / step",
        "solver probe: step 0 → end (mean member)",
        "solver probe change, mean member [bootstrap CI]",
        "proposer valid rate start → end",
        "proposer valid, fixed prompts: step 0 → end",
        "AST-depth slope / step",
        "coverage cells (end; 2nd-half growth)",
        "solve-rate direction changes",
        "rating spread T / S",
    ]
    rows = []
    boot = (result.get("contrasts") or {}).get("arms", {})
    for arm, data in result["results"].items():
        s = data["summary"]
        proposer, role = _roles_of(data["runs"])
        change = boot.get(arm, {}).get("mean_change")
        pre = f"probe.{role}.all"
        vpre = f"probe_valid.{proposer}.all.mean"
        rows.append(
            [
                _esc(arm),
                str(len(data["runs"])),
                _ci(s.get("step_s"), 3),
                f"{_ci(s.get(pre + '.mean.start'), 2, True)} → {_ci(s.get(pre + '.mean.end'), 2, True)}",
                fmt(change) if change else _ci(s.get(f"{pre}.mean.change"), 2, True),
                f"{_ci(s.get('valid_rate.start'), 2)} → {_ci(s.get('valid_rate.end'), 2)}",
                f"{_ci(s.get(vpre + '.start'), 2, True)} → {_ci(s.get(vpre + '.end'), 2, True)}",
                _ci(s.get("complexity.ast_depth.slope"), 2),
                f"{_ci(s.get('coverage.cells_end'), 3)}; {_ci(s.get('coverage.growth_second_half'), 3)}",
                _ci(s.get("oscillation.all"), 2),
                f"{_ci(s.get('rating_spread.teacher'), 2)} / {_ci(s.get('rating_spread.student'), 2)}",
            ]
        )
    return head, rows


def contrast_rows(result: dict) -> tuple[list[str], list[list[str]]]:
    """Arm differences and best member vs the best of k single seeds, each with its bootstrap interval."""
    c = result.get("contrasts") or {}
    head = ["contrast", "probe change difference, points [95% CI]", "resampled", "seeds", "items"]
    rows = []
    for name, d in c.get("differences", {}).items():
        pairing = "paired by seed" if d.get("paired") else "unpaired"
        rows.append(
            [
                _esc(f"{name} (mean member)"),
                fmt(d),
                f"{d['resampled']}, {pairing}",
                _esc(d["n_seeds"]),
                str(d["n_items"]),
            ]
        )
    for arm, d in c.get("best_vs_single", {}).items():
        label = f"{arm} best member - best of {d['k']} single seeds"
        rows.append([_esc(label), fmt(d), d["resampled"], _esc(d["n_seeds"]), str(d["n_items"])])
    return head, rows


def _probe_table(result: dict) -> str:
    head = ["arm", "role", "task", "best: start → end", "mean: start → end", "worst: start → end"]
    rows = []
    for arm, data in result["results"].items():
        s = data["summary"]
        roles = sorted({k.split(".")[1] for k in s if k.startswith("probe.")})
        for role in roles:
            for key in ("all", "code_i", "code_o", "code_f"):
                pre = f"probe.{role}.{key}"
                cells = [
                    f"{_ci(s.get(f'{pre}.{st}.start'), 2, True)} → {_ci(s.get(f'{pre}.{st}.end'), 2, True)}"
                    for st in ("best", "mean", "worst")
                ]
                rows.append([_esc(arm), role, key, *cells])
    return _table(head, rows)


def _eval_table(ev: dict) -> str:
    benches = sorted({b for rows in ev["table"].values() for cols in rows.values() for b in cols})
    rows = []
    for arm, arm_rows in ev["table"].items():
        for key, cols in arm_rows.items():
            rows.append(
                [_esc(arm), _esc(key), *[_num(100 * cols[b], 3) if b in cols else "–" for b in benches]]
            )
    errs = "".join(f"<li>{_esc(k)}: {_esc(v)}</li>" for k, v in ev.get("errors", {}).items())
    return (
        _table(["arm", "row", *benches], rows)
        + f'<p class="cap">Greedy pass@1 (%) on the first {ev["limit"]} problems of each benchmark, mean '
        f"over seeds.</p>" + (f"<ul>{errs}</ul>" if errs else "")
    )


def _claims_card(claims: dict | None, png: Path | None) -> str:
    """The paper's claims (a-f) with their verdicts, as `experiment claims` prints them, and their figure."""
    if not claims or not claims.get("seeds_used"):
        return ""
    from populora.experiment.claims_view import claim_rows

    head, rows = claim_rows(claims)
    img = ""
    if png is not None and png.is_file():  # drawn from the curves, which experiment.json does not repeat
        data = base64.b64encode(png.read_bytes()).decode("ascii")
        img = f'<img alt="the claims per arm over steps" src="data:image/png;base64,{data}">'
    return (
        '<section class="card"><h2>The paper\'s claims</h2>'
        + _table(head, [[_esc(c) for c in r] for r in rows])
        + f'<p class="cap">Seeds {_esc(claims["seeds_used"])} of every arm. Each verdict follows the rule fixed '
        'before the data (docs/learning.md, "Answering the paper\'s claims"); intervals are 95%, over seeds '
        'and probe items (a, b) or over seeds (c-f). Rows marked "no rule" are readings that no verdict uses. '
        "Every number is under <code>claims</code> in experiment.json.</p>" + img + "</section>"
    )


def write_ablation_page(result: dict, path: Path, claims_png: Path | None = None) -> Path:
    """experiment.html of an ablation; `claims_png`: the claims figure to show with the claims' table."""
    res = result["results"]
    head, rows = ablation_rows(result)
    quick = " (--quick: a pipeline check, too short to show learning)" if result.get("quick") else ""
    body = (
        f"<h1>Population-size ablation{_esc(quick)}</h1>"
        f'<p class="sub">preset {_esc(result["preset"])} · seeds {_esc(result["seeds"])} · overrides '
        f"{_esc(' '.join(result['overrides']) or 'none')} · generated "
        f"{_dt.datetime.now().strftime('%Y-%m-%d %H:%M')}</p>"
        + _claims_card(result.get("claims"), claims_png)
        + '<section class="card"><h2>Summary (mean [95% CI over seeds])</h2>'
        + _table(head, rows)
        + '<p class="cap">Probe: greedy accuracy (%) on the fixed held-out probe, mean over the three task '
        "types; change = last probe minus step 0, per seed. Valid rate: first and last quarter of the steps. "
        "AST-depth slope: least-squares slope of the mean AST depth of valid proposer programs per step "
        "(negative = the self-calibration collapse to simpler programs). Coverage: CVT cells (of 4,096) "
        "filled by the end and added in the second half. Direction changes: turns of the smoothed solver "
        "solve rate beyond its noise. Rating spread: std of TrueSkill mu over each role's members at the "
        "end.</p></section>"
        '<section class="card"><h2>Arm differences</h2>'
        + _table(*contrast_rows(result))
        + '<p class="cap">Probe change (last probe minus step 0, points) of one arm minus another, with a '
        "percentile bootstrap over seeds and probe items together (over seeds only where per-item probe results "
        "were not logged); arms that ran the same seeds are paired by seed. A best member is compared with the "
        "expected best of as many single-agent seeds, never with the single mean: the best of k noisy members "
        f"beats the mean with no effect at all. Source: {_esc((result.get('contrasts') or {}).get('source', '-'))}."
        "</p></section>"
        '<section class="card"><h2>Fixed probe over training</h2>'
        + _img(probe_arms_figure(res), "probe per arm")
        + '<p class="cap">Mean member (line, 95% CI over seeds as band), best member (dashed), worst member '
        "(dotted).</p>" + _probe_table(result) + "</section>"
        '<section class="card"><h2>Problem complexity</h2>'
        + _img(complexity_arms_figure(res), "complexity per arm")
        + "</section>"
        '<section class="card"><h2>Coverage</h2>'
        + _img(
            _curve_figure(
                res,
                lambda c: {"steps": c["coverage"]["steps"], "y": c["coverage"]["cells"]},
                "CVT cells filled by valid proposer programs (mean over seeds)",
            ),
            "coverage",
        )
        + "</section>"
        '<section class="card"><h2>Solver solve rate</h2>'
        + _img(
            _curve_figure(
                res,
                lambda c: {"steps": c["solve_rate"]["steps"], "y": c["solve_rate"]["all"]},
                "solve rate of the solvers on their matched proposers' problems (mean over seeds)",
            ),
            "solve rate",
        )
        + "</section>"
        + (
            '<section class="card"><h2>Held-out benchmarks</h2>' + _eval_table(result["eval"]) + "</section>"
            if result.get("eval")
            else ""
        )
    )
    path.write_text(_page("PopuLoRA ablation", body), encoding="utf-8")
    return path


def retention_rows(result: dict) -> tuple[list[str], list[list[str]]]:
    """One row per parent and child: probe accuracy per task at birth and after recovery, and the share of
    each specialist parent's skill kept (child / parent on the parent's own task)."""
    tasks = result["specialist_tasks"]
    head = ["adapter"]
    for t in ("code_i", "code_o", "code_f"):
        head += [f"{t} birth", f"{t} +{result['recovery_steps']} steps"]
    head += [f"kept of {t} specialist (birth / after)" for t in tasks]
    rows = []
    for name, row in result["rows"].items():
        cells = [_esc(name)]
        for t in ("code_i", "code_o", "code_f"):
            cells += [_num(_pct(row["birth"].get(t)), 3), _num(_pct((row.get("after") or {}).get(t)), 3)]
        for t in tasks:
            k = row.get("kept", {}).get(t) or {}
            cells.append(f"{_num(_pct(k.get('birth')), 3)} / {_num(_pct(k.get('after')), 3)}")
        rows.append(cells)
    return head, rows


def _pct(v: float | None) -> float | None:
    return None if v is None else 100.0 * v


def write_retention_page(result: dict, path: Path) -> Path:
    head, rows = retention_rows(result)
    quick = " (--quick)" if result.get("quick") else ""
    body = (
        f"<h1>Crossover retention{_esc(quick)}</h1>"
        f'<p class="sub">preset {_esc(result["preset"])} · specialists trained {result["specialist_steps"]} '
        f"steps on {_esc(', '.join(result['specialist_tasks']))} · recovery {result['recovery_steps']} steps "
        f"· generated {_dt.datetime.now().strftime('%Y-%m-%d %H:%M')}</p>"
        '<section class="card"><h2>Probe accuracy (%) per task type</h2>'
        + _table(head, rows)
        + '<p class="cap">Parents: the two single-task specialists at the end of their training (and the '
        "base model). Children: each crossover operator applied to (code_o specialist, code_i specialist), "
        "probed greedy on the fixed held-out probe at birth and after the recovery steps of mixed-task "
        "training. Kept = child accuracy / specialist accuracy on that specialist's task (100% = all of "
        "the skill retained).</p></section>"
    )
    path.write_text(_page("PopuLoRA retention", body), encoding="utf-8")
    return path
