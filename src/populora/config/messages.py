"""pydantic's validation errors as the one ConfigError line a user reads: the dotted key, the value given, and
the allowed range or choices or the nearest key. Used by `loading` (a whole config, from presets, files and
`--set`) and by the sections themselves (an assignment in code); it knows the models only through the look-ups
it is given, so it sits below both.
"""

from __future__ import annotations

import difflib
import typing
from collections.abc import Callable
from typing import Any, Literal

from pydantic import ValidationError
from pydantic.fields import FieldInfo

from populora.config.errors import SHOW_CHARS, ConfigError, show


def unknown_key_among(key: str, keys: list[str]) -> ConfigError:
    """The error for a key that is not one of `keys`, with the nearest (by whole key, else by its last part)."""
    if len(key) > SHOW_CHARS:  # no config key is this long; skip the (quadratic) close-match search
        return ConfigError(
            f"unknown config key {show(key)}; run `populora train --help-config` for the keys."
        )
    hint = difflib.get_close_matches(key, keys, n=1, cutoff=0.5)
    if not hint and "." not in key:
        hint = difflib.get_close_matches(key, [k.split(".", 1)[1] for k in keys], n=1)
        hint = [k for k in keys if k.endswith("." + hint[0])][:1] if hint else []
    extra = f"; did you mean {hint[0]!r}?" if hint else "; run `populora train --help-config` for the keys."
    return ConfigError(f"unknown config key {show(key)}{extra}")


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


def one_line(
    err: ValidationError,
    data: dict,
    field_of: Callable[[str], FieldInfo | None],
    unknown: Callable[[str], ConfigError],
    section: str | None = None,
) -> ConfigError:
    """The first of `err`'s errors (unknown keys, then wrong types, then the rest) as one ConfigError line.
    `field_of("section.key")`: the field's info; `unknown(key)`: the error for a key with no field; `section`:
    the errors are a section's own (an assignment to one of its fields), located without it."""
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
        return unknown(key)
    info = field_of(key)
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
