"""CLI: `populora config show` (the resolved config as YAML, nothing started) and the `--help-config` listing.

    populora config show                          # the default preset (tiny), resolved
    populora config show --preset paper-7b --set train.steps=50
    populora config show --config my.yaml         # a user file over its base preset
    populora config show runs/mine                # the config a run (and its --resume) uses

Both resolve the config through `populora.config_sources` (the same path `populora train` takes), so what they
print is what a run would use. Light: imports only the config modules, never torch.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from populora.cli_errors import fail
from populora.config import ConfigError

if TYPE_CHECKING:
    from populora.config_sources import Resolved

# The config models (pydantic) and the config sources load inside the functions: `populora --help` imports
# this module and should not pay for building them.


def print_config_help(resolved: Resolved) -> None:
    """Every key with its resolved value, the layer it came from and its meaning (`train --help-config`)."""
    from populora.config import field_docs, to_dict

    values = to_dict(resolved.cfg)
    typer.echo(
        f"config keys resolved from {resolved.label}; each value's source in brackets "
        "([default] = the config model's default, used by no layer)"
    )
    for key, doc in field_docs().items():
        section, name = key.split(".", 1)
        typer.echo(f"{key} = {values[section][name]!r}  [{resolved.origin[key]}]\n    {doc}")


def _show_yaml(resolved: Resolved) -> str:
    """`to_yaml` (each key under its docstring) with a header naming the layers and the keys they set."""
    from populora.config import to_yaml
    from populora.config_sources import DEFAULT

    changed = [k for k, src in resolved.origin.items() if src != DEFAULT]
    head = [
        f"# resolved from: {resolved.label}",
        # the re-run command is the next line's (to_yaml's), one command for config show and config.yaml alike
        f"# {len(changed)} of {len(resolved.origin)} keys set there, the rest are defaults",
    ]
    return "\n".join(head) + "\n" + to_yaml(resolved.cfg)


def register(app: typer.Typer, bench: typer.Typer) -> None:  # noqa: ARG001 - the command-module signature
    config_app = typer.Typer(
        help="Inspect configs: `populora config show` prints a resolved config without starting anything.",
        no_args_is_help=True,
    )
    app.add_typer(config_app, name="config")

    @config_app.command("show")
    def show_cmd(
        args: list[str] = typer.Argument(
            None,
            metavar="[RUN_DIR] [KEY=VALUE]...",
            help="A run folder (print its config, as --resume would use it) and/or key=value overrides.",
        ),
        preset: str = typer.Option(
            None,
            "--preset",
            "-p",
            help="Preset name (tiny, smol, paper-7b, ...) or a YAML file; default tiny.",
        ),
        config_file: Path = typer.Option(
            None, "--config", "-c", help="A YAML file shaped like a preset (optionally `base: PRESET`)."
        ),
        set_: list[str] = typer.Option([], "--set", "-s", help="Override a config key (repeatable)."),
        sources: bool = typer.Option(
            False, "--sources", help="List key = value [source] and each key's meaning instead of YAML."
        ),
    ) -> None:
        """Print the fully resolved config as YAML (each key under its meaning); starts nothing."""
        from populora.config_sources import bare_overrides, read_run_config, resolve

        args = list(args or [])
        run_dirs = [a for a in args if "=" not in a or Path(a).is_dir()]
        try:
            overrides = list(set_) + bare_overrides([a for a in args if a not in run_dirs])
            if len(run_dirs) > 1 or (run_dirs and not Path(run_dirs[0]).is_dir()):
                what = run_dirs[1] if len(run_dirs) > 1 else run_dirs[0]
                raise ConfigError(
                    f"unexpected argument {what!r}; give at most one run folder (an existing folder holding "
                    "config.yaml) and KEY=VALUE overrides."
                )
            if run_dirs:
                if preset is not None or config_file is not None:
                    raise ConfigError(
                        f"{run_dirs[0]}: a run's config is fixed; drop --preset/--config (only the keys "
                        "--resume may change can be overridden)."
                    )
                resolved = read_run_config(run_dirs[0], overrides)
            else:
                resolved = resolve(preset, config_file, overrides)
        except ConfigError as err:
            fail(str(err))
            return
        if sources:
            print_config_help(resolved)
        else:
            typer.echo(_show_yaml(resolved), nl=False)
