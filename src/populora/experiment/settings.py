"""An experiment's own settings, kept in `OUT/settings.json`: what `--resume OUT` reads back.

The settings are what makes two sittings one experiment: the preset, steps, seeds, arms, probe interval,
`--quick`, the `--set` overrides and the `--eval` request. They are written before the first run starts; a
later sitting (`--resume OUT`, or the same command with `--out OUT`) takes them from the file, and any flag
the user gives that says something else is refused with one line naming the flag, both values and the fix.
One setting may change: `--resume OUT --seeds N` with N above the saved count extends the experiment by seeds
(each seed's runs are independent of the others, so the finished ones stay valid); the new count is saved and
the change kept in the file's `seeds_added`. Fewer seeds are refused: the claims read every whole seed.
How many runs go side by side (`--jobs`) and their threads are not settings: they change how fast the
experiment goes, not what it measures, so every sitting chooses them afresh.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
import time
from pathlib import Path

SETTINGS_FILE = "settings.json"
SITTINGS_FILE = "sittings.jsonl"
# The keys that define an experiment, in the order the conflict message and the file list them.
KEYS: tuple[str, ...] = (
    "preset",
    "steps",
    "seeds",
    "arms",
    "probe_every",
    "quick",
    "overrides",
    "eval",
    "eval_limit",
)
FLAGS = {
    "preset": "--preset",
    "steps": "--steps",
    "seeds": "--seeds",
    "arms": "--arms",
    "probe_every": "--probe-every",
    "quick": "--quick",
    "overrides": "--set",
    "eval": "--eval",
    "eval_limit": "--eval-limit",
}


class ExperimentError(ValueError):
    """A user error about an experiment folder or its flags; the message is one line naming the fix."""


def load(out: Path) -> dict | None:
    """The settings saved in `out`, None when `out` holds none (a new folder, or one from before the file)."""
    f = Path(out) / SETTINGS_FILE
    if not f.is_file():
        return None
    try:
        data = json.loads(f.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ExperimentError(
            f"{f} cannot be read ({type(err).__name__}); restore it (its settings are also in experiment.json "
            "once written) or start the experiment in another --out."
        ) from None
    if not isinstance(data, dict) or any(k not in data for k in KEYS):
        raise ExperimentError(
            f"{f} is not an experiment's settings file; start the experiment in another --out."
        )
    return data


def save(out: Path, settings: dict) -> None:
    """Write the settings (at the experiment's start, and when seeds are added) atomically: a kill leaves the
    old file or the new."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / f".{SETTINGS_FILE}.{os.getpid()}"
    tmp.write_text(json.dumps(settings, indent=1) + "\n")
    os.replace(tmp, out / SETTINGS_FILE)


def _show(key: str, value) -> str:
    if key == "arms":
        return ",".join(value)
    if key == "overrides":
        return " ".join(f"--set {v}" for v in value) or "(none)"
    return str(value)


def adds_seeds(saved: dict, given: dict) -> bool:
    """Whether `given` raises the saved number of seeds (what `--resume OUT --seeds N` may do)."""
    return "seeds" in given and given["seeds"] > saved["seeds"]


def conflicts(saved: dict, given: dict, resume: bool = False) -> list[str]:
    """`flag value` descriptions of each given setting that differs from the saved one (on `resume`, more
    seeds than saved is an extension, not a conflict)."""
    out = []
    for k in KEYS:
        if k not in given or given[k] == saved[k] or (k == "seeds" and resume and adds_seeds(saved, given)):
            continue
        why = "; seeds can be added, not dropped" if k == "seeds" and given[k] < saved[k] else ""
        out.append(f"{FLAGS[k]} {_show(k, given[k])} (the experiment has {_show(k, saved[k])}{why})")
    return out


def check_resume(out: Path, saved: dict | None, given: dict, resume: bool) -> None:
    """Refuse a sitting whose flags contradict the experiment in `out` (one line). `given` holds the settings
    the user gave explicitly (resume) or all resolved settings (a new-style `--out` run)."""
    if saved is None:
        if resume:
            raise ExperimentError(
                f"--resume {out}: no {SETTINGS_FILE} there, so it is not an experiment this command started; "
                f"pass the --out folder of `populora experiment ablation`, or start one with --out {out}."
            )
        return
    bad = conflicts(saved, given, resume)
    if bad:
        how = "drop those flags to continue it" if resume else f"continue it with --resume {out}"
        if not resume and [k for k in KEYS if k in given and given[k] != saved[k]] == ["seeds"]:
            how += f" (--resume {out} --seeds N adds seeds)"
        raise ExperimentError(
            f"{out} holds an experiment with other settings: {'; '.join(bad)}; {how}, or start a new "
            "experiment in another --out."
        )


def extend_seeds(out: Path, saved: dict, seeds: int) -> dict:
    """The saved settings with `seeds` seeds, written back with the change recorded in `seeds_added`."""
    added = [*saved.get("seeds_added", []), {"time": time.time(), "from": saved["seeds"], "to": seeds}]
    new = {**saved, "seeds": seeds, "seeds_added": added}
    save(out, new)
    return new


def command_line() -> str:
    """The command as the user typed it (for the record: which command made these numbers)."""
    return " ".join(shlex.quote(a) for a in ["populora", *sys.argv[1:]]) if sys.argv else "populora"


def record_sitting(out: Path, resumed: bool, jobs: int, threads: int | None) -> None:
    """One line per sitting in `OUT/sittings.jsonl`: when, with which command, how many runs side by side."""
    line = {
        "time": time.time(),
        "command": command_line(),
        "resume": resumed,
        "jobs": jobs,
        "threads": threads,
    }
    with open(Path(out) / SITTINGS_FILE, "a") as f:
        f.write(json.dumps(line) + "\n")


def sittings(out: Path) -> list[dict]:
    f = Path(out) / SITTINGS_FILE
    if not f.is_file():
        return []
    rows = []
    for line in f.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue  # a line cut by a kill
    return rows


__all__ = [
    "ExperimentError",
    "KEYS",
    "adds_seeds",
    "check_resume",
    "conflicts",
    "extend_seeds",
    "load",
    "record_sitting",
    "save",
    "sittings",
]
