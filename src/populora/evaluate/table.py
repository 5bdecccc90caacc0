"""The results table: JSON rows -> per-benchmark columns like the paper's, and Markdown.

Rows are ``{"benchmark", "member", "n", "pass@1", ...}`` with ``pass@1`` a fraction in [0, 1]. Columns: the
base model, every single-agent / stand-alone adapter, and for teachers and students (`role_columns`):

- ``<Role> mean``: the population mean on each benchmark;
- ``<Role> best``: the best member on each benchmark (the paper's "per-benchmark best"; the numbers of one
  column can come from different members);
- ``<Role> best member``: the one adapter with the highest aggregate (``overall``), all its numbers;
- ``<Role> worst``: the one adapter with the lowest aggregate, all its numbers (the paper's "Worst adapter
  (43.6% aggregate)"); a per-benchmark minimum would be an order statistic no adapter achieves.

Ties between adapters go to the lower member id, so the choice is reproducible. `summary` is the JSON form of
the columns, `best_and_worst` names the adapters behind the ``best member`` and ``worst`` columns. Above the
table, the generation protocol: greedy pass@1 and the token budget per kind (code / math).
Summary rows: code average (HumanEval+, MBPP+, LiveCodeBench), math average (the math benchmarks evaluated)
and overall = (code avg + math avg) / 2 (AZR's CAvg/MAvg/overall), each over the benchmarks
measured in that column.

With ``populora eval --samples N`` each row also holds ``sampled`` ({samples, temperature, pass@k: {k: x}}):
a second table lists, per member and benchmark, greedy pass@1 beside the sampled pass@k.
"""

from __future__ import annotations

from statistics import mean

from populora.evaluate.data import BENCHMARKS, CODE_BENCHMARKS, DISPLAY, MATH_BENCHMARKS

POP_ROLES = ("teacher", "student")


def _by_member(rows: list[dict]) -> dict[str, dict[str, float]]:
    by_member: dict[str, dict[str, float]] = {}
    for r in rows:
        if r.get("pass@1") is not None:
            by_member.setdefault(r["member"], {})[r["benchmark"]] = float(r["pass@1"])
    return by_member


def best_and_worst(rows: list[dict], roles: dict[str, str]) -> dict[str, dict]:
    """Per population role: its members, and the adapters with the highest and lowest aggregate (``overall``).

    ``{role: {"members": [...], "best_member": id, "best_overall": x, "worst_member": id, "worst_overall": y}}``
    """
    by_member = _by_member(rows)
    out: dict[str, dict] = {}
    for role in POP_ROLES:
        scored = sorted(
            (m for m in by_member if roles.get(m) == role and averages(by_member[m])["overall"] is not None),
        )
        if not scored:
            continue
        agg = {m: averages(by_member[m])["overall"] for m in scored}
        best = min(scored, key=lambda m: (-agg[m], m))
        worst = min(scored, key=lambda m: (agg[m], m))
        out[role] = {
            "members": scored,
            "best_member": best,
            "best_overall": agg[best],
            "worst_member": worst,
            "worst_overall": agg[worst],
        }
    return out


def columns(rows: list[dict], roles: dict[str, str]) -> dict[str, dict[str, float]]:
    """Column name -> {benchmark: pass@1} (see the module docstring for the role columns)."""
    by_member = _by_member(rows)
    cols: dict[str, dict[str, float]] = {}
    if "base" in by_member:
        cols["Base"] = by_member["base"]
    for m, vals in by_member.items():
        if m != "base" and roles.get(m) not in POP_ROLES:
            cols[m] = vals
    picks = best_and_worst(rows, roles)
    for role in POP_ROLES:
        group = [m for m in by_member if roles.get(m) == role]
        if not group:
            continue
        benches = [b for b in BENCHMARKS if any(b in by_member[m] for m in group)]
        name = role.capitalize()
        cols[f"{name} mean"] = {b: mean(by_member[m][b] for m in group if b in by_member[m]) for b in benches}
        cols[f"{name} best"] = {b: max(by_member[m][b] for m in group if b in by_member[m]) for b in benches}
        if role in picks:
            cols[f"{name} best member"] = dict(by_member[picks[role]["best_member"]])
            cols[f"{name} worst"] = dict(by_member[picks[role]["worst_member"]])
    return cols


def averages(vals: dict[str, float]) -> dict[str, float | None]:
    code = [vals[b] for b in CODE_BENCHMARKS if b in vals]
    math = [vals[b] for b in MATH_BENCHMARKS if b in vals]
    c = mean(code) if code else None
    m = mean(math) if math else None
    overall = (c + m) / 2 if c is not None and m is not None else (c if m is None else m)
    return {"code_avg": c, "math_avg": m, "overall": overall}


def summary(rows: list[dict], roles: dict[str, str]) -> dict:
    """Machine-readable table: {column: {benchmark|code_avg|math_avg|overall: pass@1}}."""
    return {col: {**vals, **averages(vals)} for col, vals in columns(rows, roles).items()}


def _pct(v: float | None) -> str:
    return "–" if v is None else f"{100 * v:.1f}"


def to_markdown(
    rows: list[dict],
    roles: dict[str, str],
    unavailable: dict[str, str] | None = None,
    exceptions: dict[str, list[dict]] | None = None,
    max_new_tokens: dict | int | None = None,
) -> str:
    """Markdown: the paper-style table, then one line per member with n and the counts."""
    unavailable = unavailable or {}
    benches = [b for b in BENCHMARKS if any(r["benchmark"] == b for r in rows) or b in unavailable]
    members = list(dict.fromkeys(r["member"] for r in rows))
    out: list[str] = []
    if members == ["oracle"]:
        n = {r["benchmark"]: r for r in rows}
        out.append("| benchmark | n | pass@1 (%) | exceptions |")
        out.append("|---|---:|---:|---|")
        for b in benches:
            if b in unavailable:
                out.append(f"| {DISPLAY[b]} | – | n/a | {unavailable[b]} |")
                continue
            ex = (exceptions or {}).get(b, [])
            ids = ", ".join(e["id"] for e in ex[:6]) + (" …" if len(ex) > 6 else "")
            out.append(
                f"| {DISPLAY[b]} | {n[b]['n']} | {_pct(n[b]['pass@1'])} | {len(ex)}{': ' + ids if ids else ''} |"
            )
        return "\n".join(out) + "\n"
    cols = columns(rows, roles)
    names = list(cols)
    picks = best_and_worst(rows, roles)
    heads = []
    for c in names:
        role = c.split(" ", 1)[0].lower()
        if c.endswith(" best member") and role in picks:
            heads.append(f"{c} ({picks[role]['best_member']})")
        elif c.endswith(" worst") and role in picks:
            heads.append(f"{c} ({picks[role]['worst_member']})")
        else:
            heads.append(c)
    if max_new_tokens is not None:
        budget = (
            f"code {max_new_tokens.get('code')}, math {max_new_tokens.get('math')}"
            if isinstance(max_new_tokens, dict)
            else str(max_new_tokens)
        )
        out.append(f"Greedy pass@1 (%); generation budget (max new tokens): {budget}.")
        out.append("")
    out.append("| benchmark | " + " | ".join(heads) + " |")
    out.append("|---|" + "---:|" * len(names))
    for b in benches:
        if b in unavailable:
            out.append(f"| {DISPLAY[b]} | " + " | ".join("n/a" for _ in names) + " |")
            continue
        out.append(f"| {DISPLAY[b]} | " + " | ".join(_pct(cols[c].get(b)) for c in names) + " |")
    avgs = {c: averages(v) for c, v in cols.items()}
    for key, label in (("code_avg", "Code avg"), ("math_avg", "Math avg"), ("overall", "Overall")):
        out.append(f"| **{label}** | " + " | ".join(_pct(avgs[c][key]) for c in names) + " |")
    if picks:
        out.append("")
        out.append(
            "Per role: *mean* and *best* per benchmark (best may mix members); *best member* and *worst* are "
            "the adapters with the highest and lowest overall score (ties: the lower id)."
        )
    out.append("")
    out.append("Per member (pass@1 %, n problems):")
    out.append("")
    out.append("| member | role | " + " | ".join(DISPLAY[b] for b in benches if b not in unavailable) + " |")
    out.append("|---|---|" + "---:|" * len([b for b in benches if b not in unavailable]))
    cell = {(r["member"], r["benchmark"]): r for r in rows}
    for m in members:
        vals = []
        for b in benches:
            if b in unavailable:
                continue
            r = cell.get((m, b))
            vals.append("–" if r is None else f"{_pct(r['pass@1'])} ({r['n']})")
        out.append(f"| {m} | {roles.get(m, '')} | " + " | ".join(vals) + " |")
    sampled = [r for r in rows if r.get("sampled")]
    if sampled:
        first = sampled[0]["sampled"]
        ks = list(first["pass@k"])
        out.append("")
        out.append(
            f"Sampled pass@k (%): {first['samples']} samples per problem at temperature {first['temperature']:g}, "
            "unbiased estimator 1 - C(n-c, k) / C(n, k) (Chen et al. 2021); greedy pass@1 beside it:"
        )
        out.append("")
        out.append("| member | benchmark | greedy pass@1 | " + " | ".join(f"pass@{k}" for k in ks) + " |")
        out.append("|---|---|---:|" + "---:|" * len(ks))
        for r in sampled:
            vals = " | ".join(_pct(r["sampled"]["pass@k"].get(k)) for k in ks)
            out.append(f"| {r['member']} | {DISPLAY[r['benchmark']]} | {_pct(r['pass@1'])} | {vals} |")
    if unavailable:
        out.append("")
        for b, why in unavailable.items():
            out.append(f"- {DISPLAY[b]}: unavailable ({why})")
    return "\n".join(out) + "\n"
