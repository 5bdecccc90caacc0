"""LiveCodeBench (code generation) from a local copy in the official ``code_generation_lite`` jsonl format.

There is no offline copy of LiveCodeBench (release_v5 is ~4.4 GB on the HF hub), so the
benchmark is *unavailable* unless a path is given (``--lcb-path`` or ``POPULORA_LCB_PATH``): a ``.jsonl`` file
or a folder of ``test*.jsonl`` files, one problem per line with the official fields
``question_title, question_content, platform, question_id, contest_id, contest_date, starter_code,
difficulty, public_test_cases, private_test_cases, metadata``.

As ``lcb_runner`` does: test-case fields are JSON strings, ``private_test_cases`` may instead be
base64 → zlib → pickle → JSON; ``metadata.func_name`` marks functional (LeetCode) problems; problems are kept
when ``contest_date`` lies in the release window (release_v5: 2023-05-01 to 2025-01-31, the paper's
"LiveCodeBench v1-5"). An optional ``solution`` field (not in the official data) is used by ``--oracle gold``.
"""

from __future__ import annotations

import base64
import json
import os
import pickle
import zlib
from datetime import datetime
from pathlib import Path

from populora.evaluate.items import DataError, Item

RELEASE_WINDOWS = {
    "release_v1": ("2023-05-01", "2023-09-30"),
    "release_v2": ("2023-05-01", "2023-11-30"),
    "release_v3": ("2023-05-01", "2024-03-31"),
    "release_v4": ("2023-05-01", "2024-08-31"),
    "release_v5": ("2023-05-01", "2025-01-31"),
}
DEFAULT_RELEASE = "release_v5"


class LCBUnavailable(DataError):
    """No local LiveCodeBench copy was given."""


def decode_tests(raw: str | list) -> list[dict]:
    """A test-case field as a list of {"input", "output", "testtype"} (JSON, or base64-zlib-pickle-JSON)."""
    if isinstance(raw, list):
        return raw
    try:
        return json.loads(raw)
    except (json.JSONDecodeError, TypeError):
        # The official lite files compress private tests; the payload is data produced by the benchmark
        # authors (same trust as the jsonl itself), decoded exactly as lcb_runner does.
        blob = zlib.decompress(base64.b64decode(raw.encode("utf-8")))
        return json.loads(pickle.loads(blob))  # noqa: S301


def _date(s: str) -> datetime:
    return datetime.fromisoformat(str(s).replace("Z", "+00:00")).replace(tzinfo=None)


def lcb_path_from_env(path: str | Path | None = None) -> Path | None:
    raw = path if path is not None else os.environ.get("POPULORA_LCB_PATH")
    return Path(raw).expanduser() if raw else None


def _files(path: Path) -> list[Path]:
    if path.is_dir():
        files = sorted(path.glob("test*.jsonl")) or sorted(path.glob("*.jsonl"))
        if not files:
            raise DataError(f"no .jsonl files in LiveCodeBench folder {path}")
        return files
    if path.is_file():
        return [path]
    raise DataError(
        f"LiveCodeBench path {path} does not exist; pass --lcb-path FILE.jsonl or set POPULORA_LCB_PATH"
    )


def problem_to_item(row: dict) -> Item:
    tests = decode_tests(row.get("public_test_cases", "[]")) + decode_tests(
        row.get("private_test_cases", "[]")
    )
    meta_raw = row.get("metadata") or "{}"
    meta = json.loads(meta_raw) if isinstance(meta_raw, str) else dict(meta_raw)
    fn_name = meta.get("func_name")
    info = {
        "tests": [
            {"input": t["input"], "output": t["output"], "testtype": t.get("testtype", "stdin")}
            for t in tests
        ],
        "fn_name": fn_name,
        "starter_code": row.get("starter_code", "") or "",
        "platform": row.get("platform"),
        "difficulty": row.get("difficulty"),
        "contest_date": str(row.get("contest_date")),
        "title": row.get("question_title", ""),
    }
    return Item(
        "lcb",
        f"lcb/{row['question_id']}",
        "lcb",
        row["question_content"],
        row.get("solution", "") or "",
        info,
    )


def load_lcb(
    path: str | Path | None = None,
    release: str = DEFAULT_RELEASE,
    start: str | None = None,
    end: str | None = None,
) -> list[Item]:
    """Problems of the local copy inside the release window, sorted by (date, id). Raises `LCBUnavailable`."""
    p = lcb_path_from_env(path)
    if p is None:
        raise LCBUnavailable(
            "LiveCodeBench unavailable: no local copy (it is HF-hub only, ~4.4 GB); pass "
            "--lcb-path FILE.jsonl or set POPULORA_LCB_PATH (code_generation_lite format)"
        )
    if release not in RELEASE_WINDOWS:
        raise DataError(
            f"unknown LiveCodeBench release {release!r}; choose from {', '.join(RELEASE_WINDOWS)}"
        )
    lo, hi = RELEASE_WINDOWS[release]
    lo_d, hi_d = _date(start or lo), _date(end or hi)
    hi_d = hi_d.replace(hour=23, minute=59, second=59)
    rows = []
    for f in _files(p):
        with open(f, encoding="utf-8") as fh:
            for n, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise DataError(f"{f}:{n}: not valid JSON ({exc.msg})") from exc
                if lo_d <= _date(row["contest_date"]) <= hi_d:
                    rows.append(row)
    rows.sort(key=lambda r: (_date(r["contest_date"]), str(r["question_id"])))
    return [problem_to_item(r) for r in rows]
