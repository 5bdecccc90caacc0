"""The run-folder record schema of docs/run-folder.md as code, and a checker for it.

`check_run(run_dir)` returns a list of human-readable violations (empty when the folder follows the
contract); the trainer's tests and the synthetic writer's tests use it so both sides keep to one schema.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from populora.diagnostics.sinks import read_jsonl
from populora.names import PHASES, ROLES, SOLVE_KEYS, TASKS

__all__ = [
    "METRICS_KEYS",
    "MEMBER_KEYS",
    "PROBLEM_KEYS",
    "EVENT_KEYS",
    "PHASES",
    "TASK_KEYS",
    "ROLES",
    "check_metrics_record",
    "check_games",
    "check_probe",
    "check_problem_record",
    "check_event_record",
    "check_run",
]

METRICS_KEYS = (
    "step",
    "time",
    "mode",
    "phase_s",
    "tokens_per_s",
    "tokens",
    "coverage",
    "coverage_cells",
    "members",
    "matchups",
)
# Keys added later are checked when present, never required: a run folder written before them stays valid.
GAME_RESULTS = ("win", "draw", "loss")
MEMBER_KEYS = (
    "role",
    "reward",
    "valid_rate",
    "solve_rate",
    "response_len",
    "entropy",
    "mu",
    "sigma",
    "loss",
    "grad_norm",
    "complexity",
    "n_valid",
    "n_proposed",
)
TASK_KEYS = SOLVE_KEYS
COMPLEXITY_KEYS = ("ast_depth", "cyclomatic", "loc", "n_vars")
MATCHUP_KEYS = ("teacher", "student", "solve_rate", "n_problems")
PROBLEM_KEYS = (
    "step",
    "proposer",
    "solver",
    "task",
    "valid",
    "reason",
    "id",
    "program",
    "inputs",
    "outputs",
    "message",
    "solve_rate",
    "features",
)
EVENT_KEYS = {
    "matchup": (
        "step",
        "type",
        "teacher",
        "student",
        "solve_rate",
        "n_problems",
        "outcome",
        "teacher_points",
        "student_points",
    ),
    "evolution": (
        "step",
        "type",
        "role",
        "operator",
        "planned",
        "parents",
        "child",
        "replaced",
        "child_mu",
        "child_sigma",
        "declined",
        "cos",
        "seconds",
    ),
    "evolution_skipped": ("step", "type", "role", "operator", "parents", "replaced", "reason"),
    "checkpoint": ("step", "type", "path"),
    "resume": ("step", "type", "from"),
    "damaged_checkpoint": ("step", "type", "reason"),
}


def _missing(rec: Mapping[str, Any], keys: tuple[str, ...], where: str) -> list[str]:
    return [f"{where}: missing key {k!r}" for k in keys if k not in rec]


def _is_num(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


PROBE_ONLY_KEYS = ("step", "time", "mode", "probe")


def _task(name: Any) -> bool:
    """An AZR task type, or a task type of an installed family (populora.tasks.registry)."""
    if name in TASKS:
        return True
    from populora.tasks.registry import is_task_type

    return isinstance(name, str) and is_task_type(name)


def check_probe(probe: Any, where: str, key: str = "probe") -> list[str]:
    """Violations in a `probe` (or `probe_valid`) value: {member_id: {task: rate in [0, 1]}}
    (docs/run-folder.md)."""
    if not isinstance(probe, Mapping) or not probe:
        return [f"{where}: {key!r} must be a non-empty object {{member_id: {{task: rate}}}}"]
    errs = []
    for mid, accs in probe.items():
        if not isinstance(accs, Mapping) or not all(_task(t) for t in accs):
            errs.append(f"{where}: {key}[{mid!r}] must map task types {TASKS} to rates")
            continue
        errs += [
            f"{where}: {key}[{mid!r}][{t!r}] must be a number in [0, 1]"
            for t, a in accs.items()
            if not (_is_num(a) and 0 <= a <= 1)
        ]
    return errs


def check_probe_flaws(value: Any, where: str) -> list[str]:
    """Violations in a `probe_flaws` value: {member_id: {task: {class: {"right": rate, "misconceived": rate}}}}
    (docs/run-folder.md)."""
    from populora.names import FLAW_CLASSES as CLASSES

    if not isinstance(value, Mapping) or not value:
        return [
            f"{where}: 'probe_flaws' must be a non-empty object {{member_id: {{task: {{class: rates}}}}}}"
        ]
    errs = []
    for mid, by_task in value.items():
        if not isinstance(by_task, Mapping) or not all(t in ("code_o", "code_i") for t in by_task):
            errs.append(f"{where}: probe_flaws[{mid!r}] must map code_o / code_i to classes")
            continue
        for t, by_class in by_task.items():
            for c, row in by_class.items() if isinstance(by_class, Mapping) else [(None, None)]:
                ok = (
                    c in CLASSES
                    and isinstance(row, Mapping)
                    and all(_is_num(row.get(k)) and 0 <= row[k] <= 1 for k in ("right", "misconceived"))
                )
                if not ok:
                    errs.append(
                        f"{where}: probe_flaws[{mid!r}][{t!r}][{c!r}] must be a planted class with 'right' and "
                        "'misconceived' rates in [0, 1]"
                    )
    return errs


def check_metrics_record(rec: Mapping[str, Any]) -> list[str]:
    """Violations of the metrics.jsonl schema in one record."""
    where = f"metrics step {rec.get('step', '?')}"
    errs = check_probe(rec["probe_valid"], where, "probe_valid") if "probe_valid" in rec else []
    if "probe_sampled" in rec:  # diagnostics.probe_samples: sampled pass@1, {member_id: {task: rate}}
        errs += check_probe(rec["probe_sampled"], where, "probe_sampled")
    if "probe_flaws" in rec:  # diagnostics.probe_flaws: the misconception probe, per class
        errs += check_probe_flaws(rec["probe_flaws"], where)
    if "probe" in rec:
        errs += check_probe(rec["probe"], where)
        if rec.get("step") == 0 and "members" not in rec:  # the step-0 probe, before any update
            return errs + _missing(rec, PROBE_ONLY_KEYS, where)
    errs += _missing(rec, METRICS_KEYS, where)
    if not isinstance(rec.get("step"), int):
        errs.append(f"{where}: 'step' must be an integer")
    if rec.get("mode") not in ("population", "single"):
        errs.append(f"{where}: 'mode' must be 'population' or 'single', not {rec.get('mode')!r}")
    cov = rec.get("coverage")
    if cov is not None and not (_is_num(cov) and 0 <= cov <= 1):
        errs.append(f"{where}: 'coverage' must be in [0, 1] or null")
    if isinstance(rec.get("phase_s"), Mapping):
        errs += [f"{where}: phase_s missing {p!r}" for p in PHASES if p not in rec["phase_s"]]
    members = rec.get("members")
    if not isinstance(members, Mapping) or not members:
        errs.append(f"{where}: 'members' must be a non-empty object")
        members = {}
    for mid, m in members.items():
        mw = f"{where} member {mid}"
        if not isinstance(m, Mapping):
            errs.append(f"{mw}: not an object")
            continue
        errs += _missing(m, MEMBER_KEYS, mw)
        if m.get("role") not in ROLES:
            errs.append(f"{mw}: role must be one of {ROLES}, not {m.get('role')!r}")
        sr = m.get("solve_rate")
        if not isinstance(sr, Mapping):
            errs.append(f"{mw}: 'solve_rate' must be an object with keys {TASK_KEYS}")
        else:
            errs += [f"{mw}: solve_rate missing {t!r}" for t in TASK_KEYS if t not in sr]
        cx = m.get("complexity")
        if cx is not None:
            if not isinstance(cx, Mapping):
                errs.append(f"{mw}: 'complexity' must be an object or null")
            else:
                for k in COMPLEXITY_KEYS:
                    if not (isinstance(cx.get(k), Mapping) and "mean" in cx[k] and "std" in cx[k]):
                        errs.append(f"{mw}: complexity[{k!r}] must be {{'mean', 'std'}}")
        if rec.get("mode") == "single" and (m.get("mu") is not None or m.get("sigma") is not None):
            errs.append(f"{mw}: single mode has null mu/sigma")
    for mu in rec.get("matchups") or []:
        errs += _missing(mu, MATCHUP_KEYS, f"{where} matchup")
    errs += check_games(rec.get("games", {}), where, single=rec.get("mode") == "single")
    for key in ("score_past_deadline", "validate_past_deadline"):  # the phases' deadline counters
        cut = rec.get(key, 0)
        if not (isinstance(cut, int) and not isinstance(cut, bool) and cut >= 0):
            errs.append(f"{where}: {key!r} must be a count >= 0")
    if "hof" in rec:  # the hall of fame's unrated games (docs/hall-of-fame.md)
        from populora.population.hall import check_hof

        errs += check_hof(rec["hof"], where)
    ss = rec.get("self_solve_rate")
    if ss is not None and not (_is_num(ss) and 0 <= ss <= 1):
        errs.append(f"{where}: 'self_solve_rate' must be in [0, 1] or null")
    return errs


def check_games(games: Any, where: str, single: bool = False) -> list[str]:
    """Violations in a `games` value: {member_id: {"win": n, "draw": n, "loss": n}} with counts >= 0 ({} in
    single mode)."""
    if not isinstance(games, Mapping):
        return [f"{where}: 'games' must be an object {{member_id: {{'win', 'draw', 'loss'}}}}"]
    if single and games:
        return [f"{where}: single mode plays no rated games ('games' is {{}})"]
    return [
        f"{where}: games[{mid!r}] must map {GAME_RESULTS} to counts >= 0"
        for mid, g in games.items()
        if not (
            isinstance(g, Mapping)
            and set(g) == set(GAME_RESULTS)
            and all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in g.values())
        )
    ]


def check_problem_record(rec: Mapping[str, Any]) -> list[str]:
    where = f"problem {rec.get('id', '?')} (step {rec.get('step', '?')})"
    errs = _missing(rec, PROBLEM_KEYS, where)
    if not _task(rec.get("task")):
        errs.append(f"{where}: unknown task {rec.get('task')!r}")
    if rec.get("valid") is False and not rec.get("reason"):
        errs.append(f"{where}: an invalid proposal needs a 'reason'")
    feats = rec.get("features")
    if feats is not None and not all(k in feats for k in COMPLEXITY_KEYS):
        errs.append(f"{where}: 'features' needs {COMPLEXITY_KEYS}")
    return errs


GAME_KEYS = ("outcome", "teacher_points", "student_points")  # a matchup's rated game: population mode only


def check_event_record(rec: Mapping[str, Any], single: bool = False) -> list[str]:
    """Violations in one events.jsonl record; `single`: the run is single-agent, whose matchups are not rated
    games (no outcome or points)."""
    kind = rec.get("type")
    if kind not in EVENT_KEYS:
        return [f"event at step {rec.get('step', '?')}: unknown type {kind!r}"]
    keys = EVENT_KEYS[kind]
    if single and kind == "matchup":
        keys = tuple(k for k in keys if k not in GAME_KEYS)
    return _missing(rec, keys, f"{kind} event at step {rec.get('step', '?')}")


def check_run(run_dir: str | Path) -> list[str]:
    """All schema violations in a run folder's config.yaml and three JSONL files (empty list: conforming)."""
    run_dir = Path(run_dir)
    errs = [] if (run_dir / "config.yaml").exists() else ["config.yaml is missing"]
    steps, modes = [], set()
    for rec in read_jsonl(run_dir / "metrics.jsonl", missing_ok=True):
        errs += check_metrics_record(rec)
        steps.append(rec.get("step"))
        modes.add(rec.get("mode"))
    if steps != sorted(steps) or len(set(steps)) != len(steps):
        errs.append("metrics.jsonl: steps must be strictly increasing (repair the file on resume)")
    for rec in read_jsonl(run_dir / "problems.jsonl", missing_ok=True):
        errs += check_problem_record(rec)
    for rec in read_jsonl(run_dir / "events.jsonl", missing_ok=True):
        errs += check_event_record(rec, single=modes == {"single"})
    return errs
