"""Orchestration: load benchmarks, generate per member, grade in parallel, collect result rows.

`evaluate_target` runs models; `run_oracle` runs the graders on gold / wrong answers. Both return an
`EvalReport` whose ``to_json()`` is ``{"results": [{"benchmark", "member", "n", "pass@1", ...}], ...}``.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from populora import safe_files
from populora.evaluate.code_grader import CodeGrader, CodeLimits
from populora.evaluate.data import BENCHMARKS, DataError, Item, load_benchmark
from populora.evaluate.extract import extract_code_block, lcb_extract_code, sanitize
from populora.evaluate.lcb import LCBUnavailable
from populora.evaluate.math_grader import MathGrader
from populora.evaluate.oracle import oracle_response
from populora.evaluate.prompts import Prompt, build_prompt
from populora.evaluate.table import best_and_worst, summary, to_markdown

Tick = Callable[[int], None] | None


@dataclass
class EvalOptions:
    benchmarks: list[str] = field(default_factory=lambda: list(BENCHMARKS))
    limit: int | None = None
    data_dir: str | Path | None = None
    lcb_path: str | Path | None = None
    prompt_style: str = "azr"
    max_new_tokens_code: int = 8096  # AZR's budgets (config eval.max_new_tokens_code / _math)
    max_new_tokens_math: int = 16000
    batch_size: int = 8
    workers: int = 2
    code_limits: CodeLimits = field(default_factory=CodeLimits)
    backend: str = "hf"
    apply: str = "merge"
    device: str = "cpu"


@dataclass
class EvalReport:
    rows: list[dict]
    roles: dict[str, str]
    unavailable: dict[str, str] = field(default_factory=dict)
    exceptions: dict[str, list[dict]] = field(default_factory=dict)
    samples: list[dict] = field(default_factory=list)
    meta: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        out = {
            "results": self.rows,
            "summary": summary(self.rows, self.roles),
            "by_role": best_and_worst(self.rows, self.roles),
            "unavailable": self.unavailable,
            "meta": self.meta,
        }
        if self.exceptions:
            out["exceptions"] = self.exceptions
        return out

    def markdown(self) -> str:
        return to_markdown(
            self.rows, self.roles, self.unavailable, self.exceptions, self.meta.get("max_new_tokens")
        )

    def write(self, out_dir: Path | None = None, json_path: Path | None = None) -> list[Path]:
        """Write results.json / results.md / samples.jsonl into ``out_dir`` and/or the JSON to ``json_path``."""
        written = []
        payload = json.dumps(self.to_json(), indent=2) + "\n"
        if out_dir is not None:
            out_dir.mkdir(parents=True, exist_ok=True)
            for name, text in (
                ("results.json", payload),
                ("results.md", self.markdown()),
                ("samples.jsonl", "".join(json.dumps(s) + "\n" for s in self.samples)),
            ):
                tmp = out_dir / f".{name}.tmp"
                # a fresh file (O_EXCL): a link planted under the temp name is not followed (issue 50)
                safe_files.write_bytes_new(tmp, text.encode("utf-8"))
                tmp.replace(out_dir / name)
                written.append(out_dir / name)
        if json_path is not None:
            json_path.parent.mkdir(parents=True, exist_ok=True)
            tmp = json_path.with_name(f".{json_path.name}.tmp")
            safe_files.write_bytes_new(tmp, payload.encode("utf-8"))
            tmp.replace(json_path)
            written.append(json_path)
        return written


def load_items(opts: EvalOptions) -> tuple[dict[str, list[Item]], dict[str, str]]:
    """Items per benchmark; LiveCodeBench without a local copy goes to ``unavailable`` (other gaps raise).

    Raises `DataError` when ``opts.limit`` is below 1 or when no benchmark is left to evaluate (an lcb-only run
    without a local copy): an empty table would read as a result."""
    if opts.limit is not None and opts.limit < 1:
        raise DataError(
            f"--limit must be at least 1 (the first N problems of each benchmark), got {opts.limit}"
        )
    items: dict[str, list[Item]] = {}
    unavailable: dict[str, str] = {}
    for b in opts.benchmarks:
        try:
            items[b] = load_benchmark(b, opts.data_dir, opts.limit, opts.lcb_path)
        except LCBUnavailable as exc:
            if len(opts.benchmarks) == 1:
                raise  # the only benchmark asked for: its own message (what is missing, how to give it)
            unavailable[b] = str(exc).split(";")[0].removeprefix("LiveCodeBench unavailable: ")
    if not items:
        raise DataError(
            "no benchmark has data: " + "; ".join(f"{b}: {why}" for b, why in unavailable.items())
        )
    return items, unavailable


def program_from_response(item: Item, prompt: Prompt, response: str) -> str:
    """The program to test, from a model response (EvalPlus sanitising; LCB's fence extraction)."""
    if item.kind == "lcb":
        return lcb_extract_code(prompt.prefix + response)
    if prompt.direct:
        return sanitize(item.question.strip() + "\n" + response, item.meta["entry_point"])
    return sanitize(extract_code_block(prompt.prefix + response), item.meta["entry_point"])


def grade(
    items: list[Item],
    responses: list[str | None],
    prompts: list[Prompt] | None,
    opts: EvalOptions,
    tick: Tick = None,
    exact: bool = True,
) -> list[tuple[bool, str]]:
    """(correct, detail) per item; code in the sandbox pool, math in math-verify worker processes."""
    out: list[tuple[bool, str]] = [(False, "no response")] * len(items)
    code_idx = [i for i, it in enumerate(items) if it.kind in ("code", "lcb") and responses[i] is not None]
    math_idx = [i for i, it in enumerate(items) if it.kind == "math" and responses[i] is not None]
    if code_idx:
        pairs = []
        for i in code_idx:
            text = responses[i] or ""
            prog = text if prompts is None else program_from_response(items[i], prompts[i], text)
            pairs.append((items[i], prog))
        res = CodeGrader(opts.workers, opts.code_limits).grade(pairs, tick)
        for i, r in zip(code_idx, res, strict=True):
            out[i] = (r.passed, r.detail or r.status)
    if math_idx:
        with MathGrader(
            workers=opts.workers if len(math_idx) > 50 else 1, prompt_style=opts.prompt_style, exact=exact
        ) as mg:
            res = mg.grade_many([(items[i].gold, responses[i] or "") for i in math_idx], tick)
        for i, ok in zip(math_idx, res, strict=True):
            out[i] = (ok, "" if ok else "answer differs from gold")
    return out


def _progress():
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        transient=False,
        disable=os.environ.get("POPULORA_NO_PROGRESS") == "1",
    )


def _rows_for(
    member: str,
    role: str,
    items_by_bench: dict[str, list[Item]],
    flat: list[Item],
    graded: list[tuple[bool, str]],
) -> list[dict]:
    rows = []
    index = {id(it): n for n, it in enumerate(flat)}
    for b, items in items_by_bench.items():
        oks = [graded[index[id(it)]][0] for it in items]
        rows.append(
            {
                "benchmark": b,
                "member": member,
                "role": role,
                "n": len(items),
                "n_correct": sum(oks),
                "pass@1": sum(oks) / len(items) if items else None,
            }
        )
    return rows


def run_oracle(mode: str, opts: EvalOptions) -> EvalReport:
    """Graders on gold or wrong answers (member "oracle"); exceptions list the items that break the rule."""
    t0 = time.time()
    items_by_bench, unavailable = load_items(opts)
    flat: list[Item] = []
    responses: list[str | None] = []
    for b, items in list(items_by_bench.items()):
        resp = [oracle_response(it, mode, items) for it in items]
        if all(r is None for r in resp):
            unavailable[b] = "no reference solutions in the data"
            del items_by_bench[b]
            continue
        keep = [(it, r) for it, r in zip(items, resp, strict=True) if r is not None]
        items_by_bench[b] = [it for it, _ in keep]
        flat += [it for it, _ in keep]
        responses += [r for _, r in keep]
    with _progress() as prog:
        task = prog.add_task(f"oracle {mode}: grading", total=len(flat))
        graded = grade(flat, responses, None, opts, lambda n: prog.advance(task, n), exact=(mode != "gold"))
    rows = _rows_for("oracle", "oracle", items_by_bench, flat, graded)
    exceptions: dict[str, list[dict]] = {}
    for it, (ok, detail) in zip(flat, graded, strict=True):
        if ok != (mode == "gold"):
            exceptions.setdefault(it.benchmark, []).append({"id": it.id, "detail": detail[:300]})
    meta = {
        "oracle": mode,
        "seconds": round(time.time() - t0, 1),
        "limit": opts.limit,
        "code_limits": vars(opts.code_limits),
        "code_executor": "populora.sandbox (EvalPlus/LCB rules)",
        "math_grader": "math-verify",
    }
    return EvalReport(rows, {"oracle": "oracle"}, unavailable, exceptions, [], meta)


def token_budget(item, opts: EvalOptions) -> int:
    """The generation budget of one problem: code (HumanEval+, MBPP+, LCB) or math."""
    return opts.max_new_tokens_math if item.kind == "math" else opts.max_new_tokens_code


def _generate_by_kind(
    gen, adapters, flat, prompts, opts: EvalOptions, tick, record: Callable | None = None
) -> dict[str, list[str]]:
    """One generation call per distinct budget (code and math differ), answers put back in item order.

    A generator that runs members one after another anyway (``mixes_members`` false: merge mode) is called
    once per member, so ``record(member, item indices, texts)`` can save each member's answers as soon as
    they exist."""
    texts: dict[str, list[str]] = {m: [""] * len(flat) for m in adapters}
    groups: dict[int, list[int]] = {}
    for i, it in enumerate(flat):
        groups.setdefault(token_budget(it, opts), []).append(i)
    calls = [adapters] if getattr(gen, "mixes_members", True) else [{m: p} for m, p in adapters.items()]
    for part in calls:
        for budget, idxs in groups.items():
            got = gen.generate(part, [prompts[i] for i in idxs], budget, tick)
            for m in part:
                for i, t in zip(idxs, got[m], strict=True):
                    texts[m][i] = t
                if record is not None:
                    record(m, idxs, got[m])
    return texts


class GradingError(RuntimeError):
    """Grading failed after generation; the message says where the generations were kept."""


class SampleLog:
    """Answers written while generating (``samples.partial.jsonl`` from the CLI): one line per answer,
    appended and flushed (and fsynced) after every generation call, so a failure in a later generation or in
    grading loses no answer. The lines have no verdict yet; once `EvalReport.write` has written the graded
    ``samples.jsonl`` the CLI deletes this file."""

    def __init__(self, path: Path, flat: list[Item]):
        self.path = path
        self.flat = flat
        path.parent.mkdir(parents=True, exist_ok=True)
        # this evaluation's samples only, never a previous run's; a fresh file, no link followed (issue 50)
        safe_files.write_bytes_new(path, b"")

    def __call__(self, member: str, idxs: list[int], texts: list[str]) -> None:
        lines = "".join(
            json.dumps(
                {"member": member, "benchmark": self.flat[i].benchmark, "id": self.flat[i].id, "response": t}
            )
            + "\n"
            for i, t in zip(idxs, texts, strict=True)
        )
        safe_files.append_bytes(self.path, lines.encode("utf-8"), fsync=True)


def evaluate_target(
    target, members, opts: EvalOptions, generator=None, samples_path: Path | None = None
) -> EvalReport:
    """Generate with every member (base included) and grade; ``generator`` defaults to `make_generator`.

    With ``samples_path`` every answer is appended there as soon as it is generated (`SampleLog`), and a
    grading failure raises `GradingError` naming that file."""
    from populora.evaluate.generate import make_generator

    t0 = time.time()
    items_by_bench, unavailable = load_items(opts)
    flat = [it for items in items_by_bench.values() for it in items]
    gen = generator or make_generator(target.base, opts.backend, opts.apply, opts.device, opts.batch_size)
    prompts = [build_prompt(it, opts.prompt_style, gen.tokenizer) for it in flat]
    adapters = {m.id: m.adapter for m in members}
    roles = {m.id: m.role for m in members}
    rows: list[dict] = []
    samples: list[dict] = []
    record = SampleLog(Path(samples_path), flat) if samples_path is not None else None
    with _progress() as prog:
        task = prog.add_task(
            f"generate ({len(adapters)} members × {len(flat)} prompts)", total=len(adapters) * len(flat)
        )
        try:
            texts = _generate_by_kind(
                gen, adapters, flat, prompts, opts, lambda n: prog.advance(task, n), record
            )
        finally:
            if generator is None and hasattr(gen, "close"):
                gen.close()  # ours: stop vLLM's engine-core process before grading (a caller's stays open)
        gtask = prog.add_task("grade", total=len(adapters) * len(flat))
        for m in adapters:
            try:
                graded = grade(flat, texts[m], prompts, opts, lambda n: prog.advance(gtask, n))
            except Exception as exc:
                if record is None:
                    raise
                raise GradingError(
                    f"grading {m} failed ({type(exc).__name__}: {str(exc)[:300]}); every generation is kept "
                    f"in {record.path}"
                ) from exc
            rows += _rows_for(m, roles[m], items_by_bench, flat, graded)
            samples += [
                {
                    "member": m,
                    "benchmark": it.benchmark,
                    "id": it.id,
                    "response": t,
                    "correct": ok,
                    "detail": d,
                }
                for it, t, (ok, d) in zip(flat, texts[m], graded, strict=True)
            ]
    meta = {
        "base": str(target.base),
        "checkpoint": str(target.checkpoint) if target.checkpoint else None,
        "backend": opts.backend,
        "apply": opts.apply,
        "prompt_style": opts.prompt_style,
        "max_new_tokens": {"code": opts.max_new_tokens_code, "math": opts.max_new_tokens_math},
        "limit": opts.limit,
        "decoding": "greedy",
        "seconds": round(time.time() - t0, 1),
        "code_limits": vars(opts.code_limits),
        "code_executor": "populora.sandbox (EvalPlus/LCB rules)",
        "math_grader": "math-verify",
    }
    return EvalReport(rows, roles, unavailable, {}, samples, meta)


__all__ = [
    "DataError",
    "EvalOptions",
    "EvalReport",
    "GradingError",
    "SampleLog",
    "evaluate_target",
    "grade",
    "load_items",
    "program_from_response",
    "run_oracle",
]
