"""The one way a command reports a user error: `fail(msg)` prints `error: MSG` to stderr and exits with code 2.

Every command module (`<pkg>/commands.py`, `config_cli.py`) imports it, so the message format and the exit
code are spelt once. Light: imports only typer, never another populora module, so any command module may use it.
"""

from __future__ import annotations

from typing import NoReturn

import typer

USER_ERROR = 2
"""The exit code of a user error (a bad flag, config value or path): click's own code for a usage error."""


def fail(msg: object, code: int = USER_ERROR) -> NoReturn:
    """Print `error: MSG` on stderr and stop the command with exit code `code` (2 unless a caller says)."""
    typer.echo(f"error: {msg}", err=True)
    raise typer.Exit(code)
