"""A config from its sources: presets and their `base:` chains, nested `{section: {key: value}}` mappings and
`key=value` overrides are laid, key by key, into one plain mapping, which `Config` validates once (`build`);
pydantic's ValidationError becomes one ConfigError line naming the key, the value and the fix. Also the keys
and their docs (read from the models), and the YAML a run folder keeps (`to_yaml`) with its way back
(`from_dict`).
"""

from __future__ import annotations

import difflib
import typing
from functools import cache
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo

from populora.config.errors import SHOW_CHARS, ConfigError, read_yaml, show, yaml_problem
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
    if len(key) > SHOW_CHARS:  # no config key is this long; skip the (quadratic) close-match search
        return ConfigError(
            f"unknown config key {show(key)}; run `populora train --help-config` for the keys."
        )
    keys = all_keys()
    hint = difflib.get_close_matches(key, keys, n=1, cutoff=0.5)
    if not hint and "." not in key:
        hint = difflib.get_close_matches(key, [k.split(".", 1)[1] for k in keys], n=1)
        hint = [k for k in keys if k.endswith("." + hint[0])][:1] if hint else []
    extra = f"; did you mean {hint[0]!r}?" if hint else "; run `populora train --help-config` for the keys."
    return ConfigError(f"unknown config key {show(key)}{extra}")


# ---------------------------------------------------------------------------------------------------------
# pydantic's errors as one line


_RANGE_ERRORS = {"greater_than", "greater_than_equal", "less_than", "less_than_equal", "finite_number"}


def _describe(tp: Any) -> str:
    """What a field takes, in words: `expected {this}, got ...`."""
    args = typing.get_args(tp)
    if type(None) in args:
        (inner,) = [a for a in args if a is not type(None)]
        return _describe(inner) + " or null"
    if typing.get_origin(tp) is Literal:
        return "one of " + "|".join(str(a) for a in args)
    if tp == int | list[int]:
        return "an integer or a list of integers (comma-separated on the command line)"
    if typing.get_origin(tp) is list:
        return f"a list{' of integers' if args == (int,) else ''} (comma-separated on the command line)"
    return {int: "an integer", float: "a number", bool: "true or false", str: "a string"}.get(tp, str(tp))


def _range(info: FieldInfo) -> str:
    """The field's bounds in words: `>= 1`, `> 0`, `in (0, 1]`."""
    lo = hi = None
    for m in info.metadata:
        for name, bracket in (("ge", "["), ("gt", "(")):
            if getattr(m, name, None) is not None:
                lo = (bracket, getattr(m, name))
        for name, bracket in (("le", "]"), ("lt", ")")):
            if getattr(m, name, None) is not None:
                hi = (bracket, getattr(m, name))
    if lo and hi:
        return f"in {lo[0]}{lo[1]}, {hi[1]}{hi[0]}"
    if lo:
        return f"{'>=' if lo[0] == '[' else '>'} {lo[1]}"
    return f"{'<=' if hi and hi[0] == ']' else '<'} {hi[1] if hi else 'inf'}"


def _number(value: Any) -> str:
    """A bad number as given: `0`, `-5e-05`, `nan` (a YAML 1.1 string like '-5e-5' shown as its number)."""
    if isinstance(value, str):
        try:
            return str(float(value))
        except ValueError:
            pass
    return show(value)


_UNKNOWN = ("extra_forbidden", "no_such_attribute")  # a key no section has: in a mapping, in an assignment


def _one_line(err: ValidationError, data: dict, section: str | None = None) -> ConfigError:
    """The first of `err`'s errors (unknown keys, then wrong types, then the rest) as one ConfigError line;
    `section`: the errors are a section's own (an assignment to one of its fields), located without it."""
    errors = sorted(
        err.errors(),
        key=lambda e: 0 if e["type"] in _UNKNOWN else 2 if e["type"] in _RANGE_ERRORS else 1,
    )
    e = errors[0]
    cause = (e.get("ctx") or {}).get("error")
    if isinstance(cause, ConfigError):  # a model's own check: its message names the key and the fix
        return cause
    loc = ([section] if section else []) + [str(p) for p in e["loc"]]
    key = ".".join(loc[:2])
    if e["type"] in _UNKNOWN:
        return unknown_key(key)
    info = _field(key)
    if info is None:  # a section that is not a mapping (`merge` refuses those first)
        return ConfigError(f"{key}: expected a mapping of keys, got {show(e['input'])}.")
    if e["type"] in _RANGE_ERRORS:
        words = info.json_schema_extra if isinstance(info.json_schema_extra, dict) else {}
        what = f"{words['what']} " if "what" in words else ""
        note = f" ({words['note']})" if "note" in words else ""
        hint = f"; {words['hint']}" if "hint" in words else ""
        return ConfigError(f"{key}: must be {what}{_range(info)}{note}, got {_number(e['input'])}{hint}.")
    if e["type"] == "literal_error" and typing.get_origin(info.annotation) is Literal:
        choices = [str(c) for c in typing.get_args(info.annotation)]
        hint = difflib.get_close_matches(show(e["input"]).strip("'"), choices, n=1)
        extra = f" (did you mean {hint[0]!r}?)" if hint else ""
        return ConfigError(
            f"{key}: {show(e['input'])} is not allowed{extra}; use one of {', '.join(choices)}."
        )
    section, _, name = key.partition(".")
    value = data.get(section, {}).get(name, e["input"]) if isinstance(data.get(section), dict) else e["input"]
    return ConfigError(
        f"{key}: expected {_describe(info.annotation)}, got {show(value)}; set it like `--set {key}=...`."
    )


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


def assignment_error(
    section_model: type[BaseModel], name: str, value: Any, err: ValidationError
) -> ConfigError:
    """`cfg.SECTION.NAME = value` refused by the section's model, as the one line `--set SECTION.NAME=value`
    would give."""
    section = next(s for s, cls in _sections().items() if cls is section_model)
    return _one_line(err, {section: {name: value}}, section)


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
