"""Golden run logs: a run folder's metrics.jsonl, problems.jsonl and events.jsonl with the wall-clock fields
taken out, compared byte for byte against a copy committed under tests/train/golden/ (issue 52: a refactor of
the trainer must leave a seeded run's logs exactly as they were).

Only what is genuinely time-dependent is removed (`TIME_KEYS`, at any depth): timestamps, seconds, throughput.
Everything else (rewards, losses, gradient norms, ratings, programs, verdicts, the order of keys and of lines)
must match exactly, floats to the last bit.

The goldens hold on the platform that wrote them (`platform.json`: torch, transformers, the CPU's vector
capability and vendor); elsewhere the same seed can round a matmul differently and every sampled token after it, so a
mismatch there skips instead of failing. Regenerate ONLY when behaviour is meant to change (see
tests/train/golden/README.md): `POPULORA_WRITE_GOLDEN=1 python -m pytest tests/train/test_trainer_golden.py
tests/dist/test_dist_golden.py`.
"""

from __future__ import annotations

import json
import os
import platform
from pathlib import Path

import pytest

GOLDEN = Path(__file__).resolve().parent / "train" / "golden"
# The settings every golden run shares, written out here rather than taken from tests/fast_runs.py: a golden is
# the output of exactly these settings, and a change to what "fast" means elsewhere must not invalidate it.
PINNED = [
    "model.name=tiny",
    "tasks.prompts=3",
    "rl.rollouts=2",
    "tasks.teacher_max_new_tokens=48",
    "tasks.student_max_new_tokens=24",
    "sandbox.workers=1",
    "tasks.references=1",
    "tasks.seed_synthetic=2",
    "train.keep_checkpoints=0",
]
LOGS = ("metrics", "problems", "events")

# Wall-clock fields, removed at any depth: `time` (a record's timestamp), `seconds` (an event's, the hall of
# fame's), `phase_s`, `step_s`, `tokens_per_s`, `overlap_s`, `probe_s` (metrics.jsonl), and the per-worker
# `s`, `wall_s`, `allreduce_s` of the `dist` entry. The `dist` row counts stay: they are deterministic.
TIME_KEYS = frozenset(
    ("time", "seconds", "phase_s", "step_s", "tokens_per_s", "overlap_s", "probe_s")  # the step's, an event's
    + ("s", "wall_s", "allreduce_s")  # a dist worker's
)


def _strip(value):
    if isinstance(value, dict):
        return {k: _strip(v) for k, v in value.items() if k not in TIME_KEYS}
    if isinstance(value, list):
        return [_strip(v) for v in value]
    return value


def normalized(run: Path) -> dict[str, str]:
    """Each log of `run` as text, one JSON line per record, wall-clock fields removed, key order kept."""
    out = {}
    for name in LOGS:
        lines = (run / f"{name}.jsonl").read_text().splitlines()
        out[name] = "".join(json.dumps(_strip(json.loads(line))) + "\n" for line in lines if line.strip())
    return out


def cpu_vendor() -> str:
    """The CPU's vendor (`vendor_id` of /proc/cpuinfo: GenuineIntel, AuthenticAMD), else `platform.processor()`:
    two AVX512 CPUs of different vendors round the same seeded run differently (measured: an AMD EPYC host
    differs from the goldens' in the 7th digit of a loss)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("vendor_id"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def platform_key() -> dict:
    """What the floats of a seeded CPU run depend on besides the code."""
    import torch
    import transformers

    return {
        "machine": platform.machine(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "cpu_vendor": cpu_vendor(),
    }


def check_golden(name: str, run: Path) -> None:
    """Compare `run`'s normalized logs with tests/train/golden/<name>/; with POPULORA_WRITE_GOLDEN=1, write them
    (and platform.json) instead."""
    got, folder = normalized(run), GOLDEN / name
    if os.environ.get("POPULORA_WRITE_GOLDEN") == "1":
        folder.mkdir(parents=True, exist_ok=True)
        for log, text in got.items():
            (folder / f"{log}.jsonl").write_text(text)
        (GOLDEN / "platform.json").write_text(json.dumps(platform_key(), indent=2) + "\n")
        return
    want = {log: (folder / f"{log}.jsonl").read_text() for log in LOGS}
    if got == want:
        return
    made_on = json.loads((GOLDEN / "platform.json").read_text())
    if made_on != platform_key():
        pytest.skip(f"golden logs made on {made_on}, this is {platform_key()}: floats may differ here")
    for log in LOGS:
        for i, (a, b) in enumerate(zip(got[log].splitlines(), want[log].splitlines(), strict=False)):
            if a != b:
                ra, rb = json.loads(a), json.loads(b)
                keys = [k for k in {**rb, **ra} if ra.get(k) != rb.get(k)] if isinstance(ra, dict) else []
                pytest.fail(
                    f"{name}/{log}.jsonl line {i + 1} differs from the golden (keys {keys}):\n{a}\n{b}"
                )
        assert got[log] == want[log], f"{name}/{log}.jsonl: the number of lines differs from the golden"


def require_bundled_model() -> None:
    """Skip where the bundled tiny model is absent: the goldens were made on it."""
    from populora.engine import EngineError, resolve_model

    try:
        resolve_model("tiny")
    except EngineError:
        pytest.skip("the goldens were made on the bundled tiny model, which is absent")
