"""`ConfigError`, config YAML as plain data (no aliases) and values quoted in messages at a bounded length.

A config is small plain data (issue 29): aliases (`*name`, `<<: *name`), which let a few hundred bytes stand
for a structure whose repr runs to hundreds of MB, are refused, and a message quotes any value through `show`,
at most SHOW_CHARS characters.
"""

from __future__ import annotations

import reprlib
from typing import Any

import yaml


class ConfigError(ValueError):
    """A user-fixable configuration problem; `str(err)` is one line naming the field and the fix."""


SHOW_CHARS = 200
_SHOW = reprlib.Repr()
_SHOW.maxlevel, _SHOW.maxstring, _SHOW.maxother = 3, SHOW_CHARS, SHOW_CHARS
_SHOW.maxlist = _SHOW.maxtuple = _SHOW.maxdict = _SHOW.maxset = 8


class _PlainYamlLoader(yaml.SafeLoader):
    """`yaml.SafeLoader` that refuses aliases."""

    def compose_node(self, parent, index):  # noqa: ANN001, ANN201 - PyYAML's signature
        if self.check_event(yaml.AliasEvent):
            raise yaml.composer.ComposerError(
                None,
                None,
                "aliases (*name) are not allowed in a config; write the value out",
                self.peek_event().start_mark,
            )
        return super().compose_node(parent, index)


def read_yaml(text: str) -> Any:
    """Parse config YAML (plain data, no aliases); raises `yaml.YAMLError`."""
    return yaml.load(text, Loader=_PlainYamlLoader)  # noqa: S506 - a SafeLoader subclass


def show(value: Any) -> str:
    """`repr(value)` for a message: nested and long values abbreviated, at most SHOW_CHARS characters."""
    text = _SHOW.repr(value)
    return text if len(text) <= SHOW_CHARS else text[: SHOW_CHARS - 1] + "…"


def yaml_problem(err: yaml.YAMLError) -> str:
    """The first line of a YAML error (what is wrong), cut to SHOW_CHARS characters."""
    lines = str(err).strip().splitlines()
    first = lines[0] if lines else type(err).__name__
    return first if len(first) <= SHOW_CHARS else first[: SHOW_CHARS - 1] + "…"
