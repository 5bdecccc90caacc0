"""A config from its sources: presets and their `base:` chains, nested `{section: {key: value}}` mappings and
`key=value` overrides are laid, key by key, into one plain mapping, which `Config` validates once (`build`);
pydantic's ValidationError becomes one ConfigError line naming the key, the value and the fix. Also the keys
and their docs (read from the models), and the YAML a run folder keeps (`to_yaml`) with its way back
(`from_dict`).
"""

from __future__ import annotations

import difflib
from functools import cache
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo

from populora.config.errors import SHOW_CHARS, ConfigError, read_yaml, show, yaml_problem
from populora.config.messages import one_line, unknown_key_among
from populora.config.model import Config

PRESET_DIR = Path(__file__).resolve().parent.parent / "presets"

# ---------------------------------------------------------------------------------------------------------
# Keys, types and docs, read from the models


def _sections() -> dict[str, type[BaseModel]]:
    return {name: f.annotation for name, f in Config.model_fields.items()}


@cache
def field_docs() -> dict[str, str]:
    """`{"section.key": doc}` for every field: its docstring (the model's `description`), on one line."""
    return {
        f"{section}.{name}": " ".join((f.description or "").split())
        for section, model in _sections().items()
        for name, f in model.model_fields.items()
    }


def all_keys() -> list[str]:
    return list(field_docs())


def _field(key: str) -> FieldInfo | None:
    section, _, name = key.partition(".")
    model = _sections().get(section)
    return model.model_fields.get(name) if model else None


def unknown_key(key: str) -> ConfigError:
    """The error for a key no section has, with the nearest key (by whole key, else by its last part)."""
    return unknown_key_among(key, all_keys())


def _one_line(err: ValidationError, data: dict) -> ConfigError:
    return one_line(err, data, _field, unknown_key)


# ---------------------------------------------------------------------------------------------------------
# Mappings and overrides into one plain mapping, then one validation


def merge(raw: dict, data: Any, where: str) -> None:
    """Lay a nested `{section: {key: value}}` mapping (a preset, a file, a saved config) over `raw`."""
    if not isinstance(data, dict):
        raise ConfigError(
            f"{where}: expected a mapping of sections (train:, model:, ...), got {type(data).__name__}."
        )
    for section, values in data.items():
        if section == "base":
            continue
        if section not in _sections():
            raise unknown_key(str(section))
        if not isinstance(values, dict):
            raise ConfigError(
                f"{where}: section {show(section)} must be a mapping of keys, got {show(values)}."
            )
        raw.setdefault(section, {}).update(values)


def set_key(raw: dict, key: str, value: Any) -> None:
    """Set `section.key` in `raw` to `value` (checked when `raw` is built); ConfigError on an unknown key."""
    if key not in all_keys():
        raise unknown_key(key)
    section, name = key.split(".", 1)
    raw.setdefault(section, {})[name] = value


def parse_override(text: str) -> tuple[str, Any]:
    """`"rl.lr=1e-4"` -> `("rl.lr", 1e-4)`; values are parsed as YAML scalars (so `1e-4`, `true`, `[a, b]`)."""
    if "=" not in text:
        raise ConfigError(f"--set {show(text)}: expected key=value, e.g. --set train.steps=20.")
    key, raw = text.split("=", 1)
    key = key.strip()
    try:
        value = read_yaml(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw
    return key, value


def build(raw: dict, check: bool = True) -> Config:
    """`Config` from a plain mapping: types, ranges and the checks between keys always; `check` also checks
    what it names on this machine (`model.check_machine`). A bad value raises one ConfigError line."""
    try:
        return Config.model_validate(raw, context={"check": check})
    except ValidationError as err:
        raise _one_line(err, raw) from None


def validate(cfg: Config) -> Config:
    """`cfg` checked again as a whole (after changes made in place), machine checks included; a new Config."""
    return build(to_dict(cfg))


# ---------------------------------------------------------------------------------------------------------
# Presets


def preset_names() -> list[str]:
    return sorted(p.stem for p in PRESET_DIR.glob("*.yaml"))


def preset_path(name: str) -> Path:
    """A preset name (or a path to a YAML file) as a file; ConfigError naming the nearest preset."""
    path = Path(name)
    if path.suffix in (".yaml", ".yml") and path.exists():
        return path
    candidate = PRESET_DIR / f"{name}.yaml"
    if not candidate.exists():
        hint = difflib.get_close_matches(name, preset_names(), n=1) if len(name) <= SHOW_CHARS else []
        extra = f"did you mean {hint[0]!r}? " if hint else ""
        raise ConfigError(
            f"--preset: unknown preset {show(name)}; {extra}available: {', '.join(preset_names())} "
            "(or a path to a .yaml file)."
        )
    return candidate


def _load_preset_into(raw: dict, name: str, seen: tuple[str, ...] = ()) -> None:
    if name in seen:
        raise ConfigError(
            f"preset {name!r}: 'base:' chain loops ({' -> '.join(seen + (name,))}); remove the loop."
        )
    path = preset_path(name)
    try:
        data = read_yaml(path.read_text()) or {}
    except yaml.YAMLError as err:
        raise ConfigError(f"preset {path}: not valid YAML ({yaml_problem(err)}); fix the file.") from None
    if isinstance(data, dict) and data.get("base"):
        _load_preset_into(raw, str(data["base"]), seen + (name,))
    merge(raw, data, str(path))


def load_config(
    preset: str = "tiny", overrides: list[str] | tuple[str, ...] = (), check: bool = True
) -> Config:
    """Build a config from a preset (name or YAML path) plus `key=value` overrides; `check`: see `build`."""
    raw: dict = {}
    _load_preset_into(raw, preset)
    for text in overrides:
        set_key(raw, *parse_override(text))
    return build(raw, check)


def to_dict(cfg: Config) -> dict:
    return cfg.model_dump()


def from_dict(data: dict, check: bool = True) -> Config:
    raw: dict = {}
    merge(raw, data, "config")
    return build(raw, check)


def to_yaml(cfg: Config) -> str:
    """The fully resolved config as YAML, each key preceded by its docstring as a comment."""
    docs = field_docs()
    lines = ["# PopuLoRA run config (fully resolved). Re-run with: populora train --config <this file>"]
    for section, values in to_dict(cfg).items():
        lines.append(f"{section}:")
        for name, value in values.items():
            doc = docs.get(f"{section}.{name}", "")
            if doc:
                lines.append(f"  # {doc}")
            dumped = yaml.safe_dump({name: value}, default_flow_style=True, width=1000).strip()
            lines.append("  " + dumped[1:-1] if dumped.startswith("{") else "  " + dumped)
    return "\n".join(lines) + "\n"
