"""Typed run configuration on pydantic v2: one model per section (one docstring per field, bounds as `Field`
constraints), YAML presets, `--set key=value` overrides.

    cfg = load_config(preset="tiny", overrides=["population.teachers=4", "evolution.operators=M1,X2"])
    cfg.population.teachers            # 4
    to_yaml(cfg)                       # the fully resolved config written to RUN_DIR/config.yaml
    Config.model_json_schema()         # the schema of that file

Presets live in `populora/presets/<name>.yaml`; a preset may start with `base: <other preset>` and then only
lists what differs. Every error a user can cause (unknown key, bad value, unknown preset) raises `ConfigError`
with one line that names the field and the fix; the CLI prints it without a traceback.
This package imports nothing heavy (pydantic and PyYAML, no torch): the CLI validates before loading a model.

Modules: `errors` (ConfigError, plain YAML, bounded quotes), `sections` (the section models and their checks),
`model` (`Config`, the checks between sections and of this machine), `loading` (presets, overrides, the run
folder's YAML), `messages` (pydantic's errors as one line, for `loading` and for assignments in code), `resume`
(what `--resume` may change).
"""

from importlib import import_module
from typing import TYPE_CHECKING

# Where each public name lives. The package loads a module on first use of one of its names (PEP 562), so the
# CLI's light paths (`populora --help`, a command module's `ConfigError`) never import pydantic or build the
# models: `errors` needs PyYAML alone.
_HOME = {
    "ConfigError": "errors",
    "SHOW_CHARS": "errors",
    "read_yaml": "errors",
    "show": "errors",
    "yaml_problem": "errors",
    "PRESET_DIR": "loading",
    "all_keys": "loading",
    "build": "loading",
    "field_docs": "loading",
    "from_dict": "loading",
    "load_config": "loading",
    "merge": "loading",
    "parse_override": "loading",
    "preset_names": "loading",
    "preset_path": "loading",
    "set_key": "loading",
    "to_dict": "loading",
    "to_yaml": "loading",
    "unknown_key": "loading",
    "validate": "loading",
    "Config": "model",
    "check_machine": "model",
    "check_model_path": "model",
    "CODE_KEYS": "resume",
    "RESUMABLE_KEYS": "resume",
    "code_settings_problem": "resume",
    "resume_config": "resume",
    "DiagnosticsConfig": "sections",
    "DistConfig": "sections",
    "EvalConfig": "sections",
    "EvolutionConfig": "sections",
    "HofConfig": "sections",
    "LoRAConfig": "sections",
    "LogConfig": "sections",
    "MAX_ROLE_MEMBERS": "sections",
    "MAX_SLOTS": "sections",
    "ModelConfig": "sections",
    "PopulationConfig": "sections",
    "RLConfig": "sections",
    "RatingsConfig": "sections",
    "SandboxConfig": "sections",
    "TasksConfig": "sections",
    "TrainConfig": "sections",
}

if TYPE_CHECKING:  # type checkers and IDEs see the names as plain imports
    from populora.config.errors import SHOW_CHARS, ConfigError, read_yaml, show, yaml_problem
    from populora.config.loading import (
        PRESET_DIR,
        all_keys,
        build,
        field_docs,
        from_dict,
        load_config,
        merge,
        parse_override,
        preset_names,
        preset_path,
        set_key,
        to_dict,
        to_yaml,
        unknown_key,
        validate,
    )
    from populora.config.model import Config, check_machine, check_model_path
    from populora.config.resume import CODE_KEYS, RESUMABLE_KEYS, code_settings_problem, resume_config
    from populora.config.sections import (
        MAX_ROLE_MEMBERS,
        MAX_SLOTS,
        DiagnosticsConfig,
        DistConfig,
        EvalConfig,
        EvolutionConfig,
        HofConfig,
        LogConfig,
        LoRAConfig,
        ModelConfig,
        PopulationConfig,
        RatingsConfig,
        RLConfig,
        SandboxConfig,
        TasksConfig,
        TrainConfig,
    )


def __getattr__(name: str):
    if name not in _HOME:
        raise AttributeError(f"module 'populora.config' has no attribute {name!r}")
    value = getattr(import_module(f"populora.config.{_HOME[name]}"), name)
    globals()[name] = value  # later reads skip this function
    return value


def __dir__() -> list[str]:
    return sorted(__all__)


__all__ = [
    "CODE_KEYS",
    "MAX_ROLE_MEMBERS",
    "MAX_SLOTS",
    "PRESET_DIR",
    "RESUMABLE_KEYS",
    "SHOW_CHARS",
    "Config",
    "ConfigError",
    "DiagnosticsConfig",
    "DistConfig",
    "EvalConfig",
    "EvolutionConfig",
    "HofConfig",
    "LoRAConfig",
    "LogConfig",
    "ModelConfig",
    "PopulationConfig",
    "RLConfig",
    "RatingsConfig",
    "SandboxConfig",
    "TasksConfig",
    "TrainConfig",
    "all_keys",
    "build",
    "check_machine",
    "check_model_path",
    "code_settings_problem",
    "field_docs",
    "from_dict",
    "load_config",
    "merge",
    "parse_override",
    "preset_names",
    "preset_path",
    "read_yaml",
    "resume_config",
    "set_key",
    "show",
    "to_dict",
    "to_yaml",
    "unknown_key",
    "validate",
    "yaml_problem",
]
