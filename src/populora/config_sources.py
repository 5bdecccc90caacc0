"""Where a run's config comes from, and which layer set each key.

Layers, the later one wins:

1. the models' defaults (`populora.config`);
2. a preset (`--preset NAME` or a YAML path; its `base:` chain first; default `tiny`);
3. a user file (`--config FILE.yaml`): a preset's structure, only the keys it changes; its base is its own
   `base:` (a preset name, or a YAML path relative to the file), else `--preset`, else `tiny`;
4. `key=value` overrides: `--set key=value`, or bare `key=value` after the command (torchtune / Hydra style).

`resolve()` returns the validated `Config` and, per key, the layer that set it (`--help-config` and
`populora config show` print both). `read_run_config(RUN_DIR)` reads a run's saved config.yaml.
Imports nothing heavy: the CLI reports every config error before torch loads.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import yaml

from populora import safe_files
from populora.config import (
    PRESET_DIR,
    Config,
    ConfigError,
    all_keys,
    build,
    merge,
    parse_override,
    preset_path,
    read_yaml,
    resume_config,
    set_key,
    show,
    yaml_problem,
)

DEFAULT_PRESET = "tiny"
DEFAULT = "default"
SET = "--set"


@dataclass
class Resolved:
    """A resolved config: `cfg`, `origin` ("section.key" -> `DEFAULT`, "preset NAME", "config FILE" or `SET`)
    and `label`, the layers in one phrase (e.g. "preset tiny + config my.yaml")."""

    cfg: Config
    origin: dict[str, str]
    label: str


def bare_overrides(args: list[str] | tuple[str, ...] | None) -> list[str]:
    """Bare arguments after the command (`train.steps=5`) as `--set` overrides; anything that is not
    `key=value` is a one-line ConfigError naming the form."""
    out = []
    for arg in args or ():
        if "=" not in arg or not arg.split("=", 1)[0].strip():
            raise ConfigError(
                f"unexpected argument {show(arg)}; config overrides are KEY=VALUE, e.g. `train.steps=5` "
                "(or `--set train.steps=5`)."
            )
        out.append(arg)
    return out


def _read_mapping(path: Path, what: str, run_file: bool = False) -> dict:
    """`path` as a YAML mapping; `run_file`: a run folder's file, read as data (`populora.safe_files`: no link
    followed, no FIFO waited on)."""
    try:
        data = read_yaml(safe_files.read_text(path) if run_file else path.read_text())
    except safe_files.RunFileError as err:
        raise ConfigError(f"{what}: {err}.") from None
    except yaml.YAMLError as err:
        raise ConfigError(f"{what} {path}: not valid YAML ({yaml_problem(err)}); fix the file.") from None
    except (OSError, UnicodeDecodeError) as err:
        raise ConfigError(f"{what} {path}: cannot be read ({type(err).__name__}); check the path.") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(
            f"{what} {path}: expected a mapping of sections (train:, model:, ...), got {type(data).__name__}."
        )
    return data


def _base_path(name: str, relative_to: Path | None) -> Path:
    """A `base:` entry as a file: a YAML path relative to the file naming it, else a preset (or a cwd path)."""
    if relative_to is not None and Path(name).suffix in (".yaml", ".yml"):
        near = relative_to / name
        if near.is_file():
            return near
    return preset_path(name)


def _chain(name: str, relative_to: Path | None = None, seen: tuple[Path, ...] = ()) -> list[tuple[str, dict]]:
    """`[(label, mapping), ...]` of preset `name` and its `base:` chain, the deepest base first."""
    path = _base_path(name, relative_to)
    key = path.resolve()
    if key in seen:
        raise ConfigError(f"preset {name!r}: 'base:' chain loops back to {path}; remove the loop.")
    data = _read_mapping(path, "preset")
    bundled = path.parent.resolve() == PRESET_DIR.resolve()
    base = data.get("base")
    below = _chain(str(base), path.parent, seen + (key,)) if base else []
    return below + [(f"preset {path.stem if bundled else path}", data)]


def _layers(preset: str | None, config_file: str | Path | None) -> list[tuple[str, dict]]:
    if config_file is None:
        return _chain(preset or DEFAULT_PRESET)
    path = Path(config_file).expanduser()
    if not path.is_file():
        raise ConfigError(
            f"--config {show(str(config_file))}: no such file; give a YAML file shaped like a preset "
            "(train:, model:, ... and optionally `base: tiny`), e.g. the output of `populora config show`."
        )
    data = _read_mapping(path, "--config")
    own_base = data.get("base")
    if own_base and preset and str(own_base) != preset:
        raise ConfigError(
            f"--config {path} names `base: {own_base}` but --preset {preset} was given; drop one of them."
        )
    below = _chain(str(own_base), path.parent) if own_base else _chain(preset or DEFAULT_PRESET)
    return below + [(f"config {path}", data)]


def resolve(
    preset: str | None = None,
    config_file: str | Path | None = None,
    overrides: list[str] | tuple[str, ...] = (),
    check: bool = True,
) -> Resolved:
    """Build the config from its layers (module docstring), validated (ConfigError on a bad value); `check`
    also checks what it names on this machine (`populora.config.build`)."""
    raw: dict = {}
    origin = dict.fromkeys(all_keys(), DEFAULT)
    layers = _layers(preset, config_file)
    for label, data in layers:
        merge(raw, data, label)
        for section, values in data.items():
            if section != "base" and isinstance(values, dict):
                origin.update(dict.fromkeys((f"{section}.{name}" for name in values), label))
    for text in overrides:
        key, value = parse_override(text)
        set_key(raw, key, value)
        origin[key] = SET
    cfg = build(raw, check)
    label = " + ".join(lbl for lbl, _ in layers) + (" + --set" if overrides else "")
    return Resolved(cfg, origin, label)


def read_run_config(run_dir: str | Path, overrides: list[str] | tuple[str, ...] = ()) -> Resolved:
    """The config a run folder's `--resume` would use: its config.yaml plus overrides of the resumable keys."""
    path = Path(run_dir) / "config.yaml"
    if not os.path.lexists(path):
        raise ConfigError(f"{run_dir}: no config.yaml there; give a run folder written by `populora train`.")
    saved = _read_mapping(path, "run config", run_file=True)
    cfg = resume_config(saved, overrides, run_dir)  # settings that run code: from `overrides` only
    origin = dict.fromkeys(all_keys(), DEFAULT)
    for section, values in saved.items():
        if isinstance(values, dict):
            origin.update(dict.fromkeys((f"{section}.{name}" for name in values), f"run {run_dir}"))
    for text in overrides:
        origin[parse_override(text)[0]] = SET
    return Resolved(cfg, origin, f"run {run_dir}" + (" + --set" if overrides else ""))


__all__ = ["DEFAULT_PRESET", "Resolved", "bare_overrides", "read_run_config", "resolve"]
