"""What `populora eval TARGET` evaluates: a run folder, a single PEFT folder, or a folder of PEFT folders.

- Run folder (``config.yaml`` + ``checkpoints/``, docs/run-folder.md): the newest complete checkpoint's
  ``adapters/<member>/`` (``--checkpoint latest|final|STEP`` picks another; ``RUN/checkpoints/step_NNNNNN``,
  ``RUN/checkpoints/latest`` and ``.../final`` work as TARGET too); the base model is ``config.yaml``'s
  ``model.name`` (resolved with
  `populora.engine.resolve_model`: "tiny", "smol", a path or a hub id); roles and ratings from ``state.json``.
- PEFT folder (``adapter_config.json``): one member named after the folder; the base is the adapter's
  ``base_model_name_or_path``.
- A folder whose sub-folders are PEFT folders (e.g. a checkpoint's ``adapters/``): one member per sub-folder.

``--model`` overrides the base in every case. The base model alone is always evaluated too, as member
``base``. ``--members``: ``all`` (default), ``best`` (per role, the highest lower confidence bound
``mu - k sigma`` with the run's ``ratings.lcb_k``: the rule evolution ranks by, `Rating.lcb`; every member when
there are no ratings) or explicit ids. ``populora export --best`` picks the same members.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from populora import safe_files


class TargetError(Exception):
    """TARGET cannot be evaluated as given; the message names the problem and the fix."""


@dataclass
class Member:
    id: str
    role: str  # "teacher" | "student" | "single" | "adapter" | "base"
    adapter: Path | None
    rating: float | None = None  # the LCB mu - k*sigma (k = the run's ratings.lcb_k); None without ratings
    mu: float | None = None
    sigma: float | None = None
    info: dict = field(default_factory=dict)  # the member's state.json entry (lineage, games, ...)


@dataclass
class Target:
    base: str
    members: list[Member] = field(default_factory=list)
    run_dir: Path | None = None
    checkpoint: Path | None = None

    def adapters(self) -> dict[str, Path | None]:
        return {m.id: m.adapter for m in self.members}

    def roles(self) -> dict[str, str]:
        return {m.id: m.role for m in self.members}


def _role_from_id(mid: str) -> str:
    return (
        {"T": "teacher", "S": "student", "A": "single"}.get(mid[:1], "adapter")
        if re.fullmatch(r"[TSA]\d+", mid)
        else "adapter"
    )


def _state_members(state: dict) -> dict[str, dict]:
    raw = state.get("members")
    if raw is None and isinstance(state.get("population"), dict):
        raw = state["population"].get("members")
    out: dict[str, dict] = {}
    if isinstance(raw, dict):
        raw = [{"id": k, **(v if isinstance(v, dict) else {})} for k, v in raw.items()]
    for m in raw or []:
        if isinstance(m, dict) and "id" in m:
            out[str(m["id"])] = m
    return out


def _mu_sigma(info: dict) -> tuple[float | None, float | None]:
    r = info.get("rating") if isinstance(info.get("rating"), dict) else info
    mu, sigma = r.get("mu"), r.get("sigma")
    if mu is None:
        return None, None
    return float(mu), float(sigma or 0.0)


def lcb_k(run_dir: Path | None) -> float:
    """The run's ``ratings.lcb_k`` (config.yaml), else the default: one LCB rule for evolution, eval and export."""
    from populora.config import RatingsConfig

    default = RatingsConfig().lcb_k
    if run_dir is None or not (run_dir / "config.yaml").is_file():
        return default
    import yaml

    try:
        section = (yaml.safe_load(safe_files.read_text(run_dir / "config.yaml")) or {}).get("ratings") or {}
        return float(section.get("lcb_k", default)) if isinstance(section, dict) else default
    except (OSError, yaml.YAMLError, TypeError, ValueError):
        return default  # load_target reads this file too and reports an unreadable one


def _member(sub: Path, info: dict, k: float) -> Member:
    from populora.population.ratings import Rating

    mu, sigma = _mu_sigma(info)
    lcb = Rating(mu, sigma).lcb(k) if mu is not None else None
    return Member(sub.name, str(info.get("role") or _role_from_id(sub.name)), sub, lcb, mu, sigma, info)


def _read_model_name(run_dir: Path) -> str:
    import yaml

    cfg_path = run_dir / "config.yaml"
    try:
        cfg = yaml.safe_load(safe_files.read_text(cfg_path)) or {}  # no link, no FIFO (issue 50)
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise TargetError(f"cannot read {cfg_path}: {exc}") from exc
    name = (cfg.get("model") or {}).get("name") if isinstance(cfg.get("model"), dict) else None
    if not name:
        raise TargetError(f"{cfg_path} has no model.name; pass --model")
    return str(name)


def resolve_base(name: str) -> str:
    """A base-model name as a loadable folder (or hub id): "tiny"/"smol"/paths through the engine's resolver."""
    try:
        from populora.engine import resolve_model

        return str(resolve_model(name))
    except ImportError:
        return name
    except Exception as exc:  # noqa: BLE001 - the engine's EngineError carries the fix
        raise TargetError(str(exc)) from exc


def _is_peft(p: Path) -> bool:
    return (p / "adapter_config.json").is_file()


def _checkpoint_folder(p: Path) -> bool:
    """A run's checkpoint folder given as TARGET (RUN/checkpoints/step_NNNNNN, or .../latest resolved)."""
    return p.parent.name == "checkpoints" and (p / "state.json").is_file() and (p / "adapters").is_dir()


def load_target(
    path: str | Path, model: str | None = None, checkpoint: str | None = None, resolve: bool = True
) -> Target:
    """Resolve TARGET (see module docstring); ``model`` overrides the base; ``checkpoint`` picks a run
    folder's checkpoint (latest, final, a step number; `populora.checkpoint_ref`). ``resolve=False`` keeps the
    base's name as written (no model lookup or download: `populora export` only names it)."""
    from populora.checkpoint_ref import CheckpointRefError, resolve_alias_path, resolve_checkpoint

    try:
        p = resolve_alias_path(Path(path).expanduser())  # RUN/checkpoints/latest -> .../step_NNNNNN
    except CheckpointRefError as exc:
        raise TargetError(str(exc)) from None
    if not p.exists():
        raise TargetError(f"TARGET {p} does not exist; give a run folder or a PEFT adapter folder")
    if not p.is_dir():
        raise TargetError(
            f"TARGET {p} is a file; give a run folder, a PEFT adapter folder (holding adapter_config.json) "
            "or a folder of them"
        )
    members: list[Member] = []
    run_dir = ckpt = None
    is_run = (p / "checkpoints").is_dir() or (p / "config.yaml").is_file()
    if checkpoint is not None and not is_run:
        raise TargetError(
            f"--checkpoint {checkpoint}: {p} is not a run folder; give the run folder as TARGET"
        )
    if is_run or _checkpoint_folder(p):
        run_dir, ckpt = (p, None) if is_run else (p.parent.parent, p)
        try:
            ckpt = ckpt or resolve_checkpoint(p, checkpoint or "latest")
        except CheckpointRefError as exc:
            raise TargetError(f"{exc} (or pass a PEFT folder)") from None
        try:
            state = json.loads(safe_files.read_text(ckpt / "state.json"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError):
            state = {}
        info = _state_members(state)
        k = lcb_k(run_dir)
        for sub in sorted((ckpt / "adapters").iterdir()) if (ckpt / "adapters").is_dir() else []:
            if sub.is_dir() and _is_peft(sub):
                members.append(_member(sub, info.get(sub.name, {}), k))
        base = model or _read_model_name(run_dir)
    elif _is_peft(p):
        members.append(Member(p.name, _role_from_id(p.name), p))
        base = model or json.loads(safe_files.read_text(p / "adapter_config.json")).get(
            "base_model_name_or_path"
        )
    else:
        for sub in sorted(q for q in p.iterdir() if q.is_dir() and _is_peft(q)):
            members.append(Member(sub.name, _role_from_id(sub.name), sub))
        if not members:
            raise TargetError(
                f"{p} is neither a run folder, nor a PEFT folder (adapter_config.json), nor a "
                "folder of PEFT folders"
            )
        base = model or json.loads(safe_files.read_text(members[0].adapter / "adapter_config.json")).get(
            "base_model_name_or_path"
        )
    if not base:
        raise TargetError(f"cannot tell the base model of {p}; pass --model NAME_OR_PATH")
    if not members and run_dir is not None:
        raise TargetError(f"checkpoint {ckpt} has no adapters/<member>/ PEFT folders")
    return Target(resolve_base(str(base)) if resolve else str(base), members, run_dir, ckpt)


def select_members(target: Target, spec: list[str] | None) -> list[Member]:
    """Members for ``--members`` (all | best | ids), always preceded by the base model."""
    wanted = [s.strip() for part in (spec or ["all"]) for s in part.split(",") if s.strip()]
    chosen: list[Member]
    if not wanted or wanted == ["all"]:
        chosen = list(target.members)
    elif wanted == ["best"]:
        chosen = []
        for role in dict.fromkeys(m.role for m in target.members):
            group = [m for m in target.members if m.role == role]
            rated = [m for m in group if m.rating is not None]
            # ties go to the lower id, so the choice is reproducible
            chosen += [min(rated, key=lambda m: (-m.rating, m.id))] if rated else group
    else:
        known = {m.id: m for m in target.members}
        missing = [w for w in wanted if w not in known and w != "base"]
        if missing:
            raise TargetError(
                f"unknown member(s) {', '.join(missing)}; available: {', '.join(known) or '(none)'}"
            )
        chosen = [known[w] for w in wanted if w in known]
    return [Member("base", "base", None)] + chosen
