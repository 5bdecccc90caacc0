"""Orchestration: load benchmarks, generate per member, grade in parallel, collect result rows.

`evaluate_target` runs models; `run_oracle` runs the graders on gold / wrong answers. Both return an
`EvalReport` whose ``to_json()`` is ``{"results": [{"benchmark", "member", "n", "pass@1", ...}], ...}``.

Every generation is a job ``(problem, sample)``: sample 0 is the greedy answer (pass@1, as the paper), samples
1..N are drawn at ``opts.temperature`` for the sampled pass@k (`populora.evaluate.passk`). Answers go to the
`SampleLog` batch by batch, each line stamped with a hash of the settings that decide it (`settings_key`);
an evaluation started again with the same settings reads them back and generates only what is missing
(resume after Ctrl-C). `Eta` says how many generations are queued and, once the first batch is timed, how long
they will take.
"""

from __future__ import annotations

import hashlib
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
from populora.evaluate.passk import default_ks, pass_at_k
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
    samples: int = 0  # sampled answers per problem for pass@k, beside the greedy one (0: greedy only)
    temperature: float = 0.8
    seed: int = 0


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


def _takes(fn, name: str) -> bool:
    import inspect

    try:
        return name in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


def _generate_jobs(
    gen, adapters, jobs, prompts, flat, opts: EvalOptions, texts, tick, record: Callable | None = None
) -> None:
    """Fill ``texts[member][job]`` where it is None: one generation call per (budget, temperature) group.

    A generator that runs members one after another anyway (``mixes_members`` false: merge mode) is called
    once per member; ``record(member, job indices, texts)`` saves the answers as the generator emits them
    (per batch in merge mode), so an interruption keeps every finished one."""
    calls = [adapters] if getattr(gen, "mixes_members", True) else [{m: p} for m, p in adapters.items()]
    for part in calls:
        groups: dict[tuple[int, float], list[int]] = {}
        for j, (i, s) in enumerate(jobs):
            if any(texts[m][j] is None for m in part):
                temp = 0.0 if s == 0 else opts.temperature
                groups.setdefault((token_budget(flat[i], opts), temp), []).append(j)
        for (budget, temp), js in groups.items():

            def emit(member, local, got, js=js):
                fresh = [(js[k], t) for k, t in zip(local, got, strict=True) if texts[member][js[k]] is None]
                for j, t in fresh:
                    texts[member][j] = t
                if record is not None and fresh:
                    record(member, [j for j, _ in fresh], [t for _, t in fresh])

            kw: dict = {"emit": emit} if _takes(gen.generate, "emit") else {}
            if temp > 0:
                kw.update(temperature=temp, seed=opts.seed)
            got = gen.generate(part, [prompts[jobs[j][0]] for j in js], budget, tick, **kw)
            for m in part:  # a generator that does not emit (a caller's): its answers arrive here
                emit(m, list(range(len(js))), got[m])


class GradingError(RuntimeError):
    """Grading failed after generation; the message says where the generations were kept."""


def settings_key(target, adapters: dict, flat: list[Item], opts: EvalOptions) -> str:
    """A short hash of what decides the answers: base, adapters, problems, prompt, budgets, backend, sampling.
    A saved answer is reused on resume only under the same key."""
    doc = {
        "base": str(target.base),
        "adapters": {m: str(p) for m, p in adapters.items()},
        "items": [(it.benchmark, it.id) for it in flat],
        "prompt": opts.prompt_style,
        "budgets": [opts.max_new_tokens_code, opts.max_new_tokens_math],
        "backend": [opts.backend, opts.apply, opts.device],
        "sampling": [opts.samples, opts.temperature if opts.samples else None, opts.seed],
    }
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:16]


def read_partial(path: Path, key: str) -> tuple[dict[tuple, str], int]:
    """(answers saved under settings ``key`` by (member, benchmark, id, sample), lines saved under others)."""
    done: dict[tuple, str] = {}
    other = 0
    try:
        text = safe_files.read_text(path)
    except FileNotFoundError:
        return done, 0
    for line in text.splitlines():
        try:
            rec = json.loads(line)
            k = (rec["member"], rec["benchmark"], rec["id"], int(rec.get("sample", 0)))
            resp = rec["response"]
        except (ValueError, KeyError, TypeError):
            continue  # a line cut by a kill: that answer is generated again
        if rec.get("settings") == key and isinstance(resp, str):
            done[k] = resp
        else:
            other += 1
    return done, other


class SampleLog:
    """Answers written while generating (``samples.partial.jsonl`` from the CLI): one line per answer,
    appended and flushed (and fsynced) after every batch, so an interruption, a failure in a later generation
    or in grading loses no answer. The lines have no verdict yet; once `EvalReport.write` has written the
    graded ``samples.jsonl`` the CLI deletes this file. ``keep`` appends to an existing file (resume)."""

    def __init__(
        self,
        path: Path,
        flat: list[Item],
        jobs: list[tuple[int, int]] | None = None,
        key: str = "",
        keep: bool = False,
    ):
        self.path = path
        self.flat = flat
        self.jobs = jobs
        self.key = key
        path.parent.mkdir(parents=True, exist_ok=True)
        if not keep:
            # this evaluation's samples only, never a previous run's; a fresh file, no link followed (issue 50)
            safe_files.write_bytes_new(path, b"")

    def __call__(self, member: str, idxs: list[int], texts: list[str]) -> None:
        lines = []
        for j, t in zip(idxs, texts, strict=True):
            i, s = self.jobs[j] if self.jobs is not None else (j, 0)
            rec = {"member": member, "benchmark": self.flat[i].benchmark, "id": self.flat[i].id}
            if self.jobs is not None:
                rec |= {"sample": s, "settings": self.key}
            lines.append(json.dumps(rec | {"response": t}) + "\n")
        safe_files.append_bytes(self.path, "".join(lines).encode("utf-8"), fsync=True)


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    if seconds < 90:
        return f"{seconds} s"
    if seconds < 5400:
        return f"{round(seconds / 60)} min"
    return f"{seconds // 3600} h {round(seconds % 3600 / 60)} min"


class Eta:
    """Generations queued and their time: the count before the first one, an estimate once the first batch is
    timed (a warning when it is over 10 minutes), then an update at every further 10% at most every 30 s.
    The rate counts model loading (merge mode reloads the base per member), so it errs long, not short."""

    WARN_S = 600.0

    def __init__(self, total: int, say: Callable[[str], None] | None):
        self.total, self.say, self.done = total, say, 0
        self.t0 = time.monotonic()
        self.last_said = None
        self.next_mark = 0.1

    def tick(self, n: int) -> None:
        self.done += n
        if self.say is None or self.done >= self.total or self.done <= 0:
            return
        now = time.monotonic()
        rate = self.done / max(now - self.t0, 1e-6)
        left = (self.total - self.done) / rate
        if self.last_said is None:
            msg = (
                f"measured {rate:.2f} generations/s on the first {self.done}: about {_duration(left)} left "
                f"for {self.total - self.done:,} generations"
            )
            if left > self.WARN_S:
                msg += (
                    " (over 10 minutes: --limit N evaluates the first N problems of each benchmark; Ctrl-C "
                    "stops, keeps every answer, and the same command resumes)"
                )
            self.say(msg)
        elif self.done / self.total >= self.next_mark and now - self.last_said >= 30:
            self.say(f"{self.done:,}/{self.total:,} generations, {rate:.2f}/s: about {_duration(left)} left")
        else:
            return
        self.last_said = now
        while self.next_mark <= self.done / self.total:
            self.next_mark += 0.1


def _sampled_rows(rows, member, items_by_bench, flat, jobs, graded_by_job, opts: EvalOptions) -> None:
    """Add ``sampled`` (samples, temperature, pass@k per k) to each of ``member``'s rows."""
    n = opts.samples
    index = {id(it): k for k, it in enumerate(flat)}
    correct: dict[int, int] = {}
    for j, (i, s) in enumerate(jobs):
        if s > 0:
            correct[i] = correct.get(i, 0) + int(graded_by_job[j][0])
    for row in rows:
        if row["member"] != member:
            continue
        counts = [correct.get(index[id(it)], 0) for it in items_by_bench[row["benchmark"]]]
        row["sampled"] = {
            "samples": n,
            "temperature": opts.temperature,
            "pass@k": {
                str(k): (sum(pass_at_k(n, c, k) for c in counts) / len(counts) if counts else None)
                for k in default_ks(n)
            },
        }


def evaluate_target(
    target,
    members,
    opts: EvalOptions,
    generator=None,
    samples_path: Path | None = None,
    say: Callable[[str], None] | None = None,
    resume: bool | None = None,
) -> EvalReport:
    """Generate with every member (base included) and grade; ``generator`` defaults to `make_generator`.

    With ``samples_path`` every answer is appended there as soon as it is generated (`SampleLog`), answers
    already there under the same settings are reused (``resume`` None: when there are any; True: they must
    exist, else `DataError`; False: start over), and a grading failure raises `GradingError` naming that
    file. ``say`` gets the count, the time estimate and the resume lines."""
    from populora.evaluate.generate import make_generator

    t0 = time.time()
    items_by_bench, unavailable = load_items(opts)
    flat = [it for items in items_by_bench.values() for it in items]
    jobs = [(i, s) for s in range(1 + max(0, opts.samples)) for i in range(len(flat))]
    adapters = {m.id: m.adapter for m in members}
    roles = {m.id: m.role for m in members}
    texts: dict[str, list[str | None]] = {m: [None] * len(jobs) for m in adapters}
    record = None
    if samples_path is not None:
        key = settings_key(target, adapters, flat, opts)
        done, other = read_partial(Path(samples_path), key) if resume is not False else ({}, 0)
        reused = 0
        for m in adapters:
            for j, (i, s) in enumerate(jobs):
                t = done.get((m, flat[i].benchmark, flat[i].id, s))
                if t is not None:
                    texts[m][j] = t
                    reused += 1
        if resume and not reused:
            raise DataError(
                f"--resume: {samples_path} holds no answers of this evaluation"
                + (" (its answers were made with other settings)" if other else "")
                + "; run without --resume to start"
            )
        if say is not None and reused:
            say(f"resuming: {reused:,} answers are already in {samples_path}; generating the rest")
        elif say is not None and other:
            say(f"starting over: {samples_path} holds answers made with other settings; they are replaced")
        record = SampleLog(Path(samples_path), flat, jobs, key, keep=bool(reused))
    gen = generator or make_generator(target.base, opts.backend, opts.apply, opts.device, opts.batch_size)
    prompts = [build_prompt(it, opts.prompt_style, gen.tokenizer) for it in flat]
    todo = sum(t is None for m in adapters for t in texts[m])
    kinds = "greedy" + (f" + {opts.samples} sampled at T={opts.temperature:g}" if opts.samples else "")
    if say is not None:
        say(
            f"{len(adapters)} members x {len(flat):,} problems x {1 + opts.samples} ({kinds}) = "
            f"{len(adapters) * len(jobs):,} generations"
            + (f", {todo:,} to generate" if todo != len(adapters) * len(jobs) else "")
            + f" (up to {opts.max_new_tokens_code} / {opts.max_new_tokens_math} new tokens for code / math); "
            "time estimated after the first batch"
        )
    eta = Eta(todo, say)
    rows: list[dict] = []
    samples: list[dict] = []
    with _progress() as prog:
        task = prog.add_task(
            f"generate ({len(adapters)} members × {len(jobs)} prompts)", total=len(adapters) * len(jobs)
        )
        prog.advance(task, len(adapters) * len(jobs) - todo)

        def tick(n: int) -> None:
            prog.advance(task, n)
            eta.tick(n)

        try:
            _generate_jobs(gen, adapters, jobs, prompts, flat, opts, texts, tick, record)
        finally:
            if generator is None and hasattr(gen, "close"):
                gen.close()  # ours: stop vLLM's engine-core process before grading (a caller's stays open)
        gtask = prog.add_task("grade", total=len(adapters) * len(jobs))
        job_items = [flat[i] for i, _ in jobs]
        job_prompts = [prompts[i] for i, _ in jobs]
        for m in adapters:
            try:
                graded = grade(job_items, texts[m], job_prompts, opts, lambda n: prog.advance(gtask, n))
            except Exception as exc:
                if record is None:
                    raise
                raise GradingError(
                    f"grading {m} failed ({type(exc).__name__}: {str(exc)[:300]}); every generation is kept "
                    f"in {record.path}"
                ) from exc
            greedy = graded[: len(flat)]
            member_rows = _rows_for(m, roles[m], items_by_bench, flat, greedy)
            if opts.samples:
                _sampled_rows(member_rows, m, items_by_bench, flat, jobs, graded, opts)
            rows += member_rows
            samples += [
                {
                    "member": m,
                    "benchmark": flat[i].benchmark,
                    "id": flat[i].id,
                    **({"sample": s} if opts.samples else {}),
                    "response": t,
                    "correct": ok,
                    "detail": d,
                }
                for (i, s), t, (ok, d) in zip(jobs, texts[m], graded, strict=True)
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
    if opts.samples:
        meta["sampled"] = {
            "samples": opts.samples,
            "temperature": opts.temperature,
            "seed": opts.seed,
            "ks": default_ks(opts.samples),
            "estimator": "unbiased pass@k, 1 - C(n-c, k) / C(n, k) (Chen et al. 2021)",
        }
    return EvalReport(rows, roles, unavailable, {}, samples, meta)


__all__ = [
    "DataError",
    "EvalOptions",
    "EvalReport",
    "GradingError",
    "Eta",
    "SampleLog",
    "evaluate_target",
    "grade",
    "load_items",
    "program_from_response",
    "run_oracle",
]
