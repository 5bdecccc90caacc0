"""The misconception probe: held-out items per planted class and task type, read greedy and sampled.

Items come from the graded generator's "probe" split (`flaws.sample_flaw_item` with `split="probe"`; the split
is on the constant- and name-masked program, so no item has a masked twin in any corpus), each on a program whose
answer exactly one class's misreading changes; the default probe reads the bundled sets built from them
(`flaw_probe_sets.py`, 64 a class, validated in the sandbox). A model's answer is read three ways:

- **right**: the task's own verifier in the real sandbox says it solves the problem (code_o: the output;
  code_i: an input the program maps to the shown output);
- **misconceived**: it is the misconceived reader's answer (`FlawItem.wrong`, compared as Python literals,
  parsed with `ast.literal_eval`, never run);
- otherwise some other error.

`score_flaw_probe` reports per task type and class: greedy right and misconceived rates, and the right answer's
sampled pass@1 and pass@k at a temperature (fixed seeds, so a rerun reads the same); the targets of issue 49 are
greedy right at most 20% on a planted model, pass@1 at least 25% and pass@8 at least 60%.
"""

from __future__ import annotations

import ast
import random
from collections.abc import Sequence
from pathlib import Path

from populora.pretrain.flaw_probe_sets import FLAW_PROBE_LEVELS, FLAW_PROBE_SEED, FLAW_TASKS, classes_for
from populora.pretrain.flaws import FlawItem, sample_flaw_item

DEFAULT_FLAWS_OUT = Path("bench/results/tiny_model_flaws.json")


def flaw_probe_items(
    task: str,
    per_class: int,
    seed: int = FLAW_PROBE_SEED,
    levels: tuple[int, ...] = FLAW_PROBE_LEVELS,
    split: str = "probe",
) -> dict[str, list[FlawItem]]:
    """`per_class` held-out items per class of `task`, distinct programs; the same for the same arguments
    (a prefix of a longer set: item k does not depend on `per_class`). `split="train"`: items of the kind the
    corpus draws (whether a model learnt a misreading at all, apart from carrying it to new programs)."""
    from populora.tasks.masking import program_key

    out: dict[str, list[FlawItem]] = {}
    for flaw in classes_for(task):
        rng = random.Random(f"{seed}:{task}:{flaw}")
        seen: set[str] = set()
        items: list[FlawItem] = []
        while len(items) < per_class:
            item = sample_flaw_item(rng, task, levels, split=split, flaw=flaw)
            key = program_key(item.program) or item.program
            if key not in seen:
                seen.add(key)
                items.append(item)
        out[flaw] = items
    return out


def _literal(text: str | None) -> object:
    if text is None:
        return None
    try:
        return ast.literal_eval(text.strip())  # "1, 'a'" reads as a tuple, "[1, 2]" as a list
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None


def is_misconceived(item: FlawItem, answer) -> bool:
    """Whether a parsed answer (`tasks.Answer`; a `FormatError` when unparseable) is the misconceived reader's (compared
    as literals; never run)."""
    return answers_wrong(answer, item.wrong)


def answers_wrong(answer, wrong: str) -> bool:
    """Whether a parsed answer is the literal `wrong` (the misconceived reader's answer); never run."""
    got = _literal(getattr(answer, "text", None))  # a FormatError (unparseable) has no text
    return got is not None and got == _literal(wrong)


def _problem(item: FlawItem):
    from populora.tasks import Problem

    if item.task == "code_o":
        return Problem(task="code_o", program=item.program, inputs=(item.shown,), outputs=(item.right,))
    return Problem(task="code_i", program=item.program, inputs=(item.right,), outputs=(item.shown,))


def rates(right: Sequence[Sequence[int]], k: int) -> dict[str, float]:
    """pass@1 (mean right over the samples) and pass@k (any right among the first k) over items, from per-item
    0/1 verdicts."""
    if not right:
        return {"pass@1": 0.0, f"pass@{k}": 0.0}
    return {
        "pass@1": sum(sum(v) / len(v) for v in right) / len(right),
        f"pass@{k}": sum(any(v[:k]) for v in right) / len(right),
    }


def probe_sets(
    task: str, per_class: int, seed: int = FLAW_PROBE_SEED, split: str = "probe", kind: str = "atoms"
) -> dict[str, list]:
    """`{class: [(Problem, misconceived answer)]}`, `per_class` a class: the bundled held-out sets of `kind`
    (`flaw_probe_sets`, validated in the sandbox) for the default probe; graded items drawn afresh for another
    seed, the train split, or more items than the sets hold."""
    from populora.pretrain.flaw_probe_sets import FLAW_PROBE_PER_CLASS, FlawProbeError, load_flaw_probe

    bundled = split == "probe" and seed == FLAW_PROBE_SEED and per_class <= FLAW_PROBE_PER_CLASS
    if kind == "atoms" and not bundled:
        raise FlawProbeError(
            f"the atoms probe reads the bundled held-out sets (probe split, seed {FLAW_PROBE_SEED}, at most "
            f"{FLAW_PROBE_PER_CLASS} a class); for other items use the graded set"
        )
    if bundled:
        out: dict[str, list] = {c: [] for c in classes_for(task)}
        for item in load_flaw_probe(task, kind=kind):
            if len(out[item.flaw]) < per_class:
                out[item.flaw].append((item.problem, item.wrong))
        return out
    return {
        flaw: [(_problem(i), i.wrong) for i in items]
        for flaw, items in flaw_probe_items(task, per_class, seed, split=split).items()
    }


def score_flaw_probe(
    model_dir: Path,
    per_class: int = 16,
    samples: int = 8,
    temperature: float = 1.0,
    threads: int = 2,
    tasks: Sequence[str] = FLAW_TASKS,
    seed: int = FLAW_PROBE_SEED,
    progress: bool = True,
    split: str = "probe",
    kind: str = "atoms",
) -> dict:
    """Score a model folder on the probe: `{task: {class: {n, greedy_right, greedy_misconceived, pass@1,
    pass@<samples>, sampled_misconceived}}}` plus the settings."""
    from rich.progress import Progress

    from populora.pretrain.bench import generate, load_model
    from populora.pretrain.graded_probe import MAX_NEW_TOKENS
    from populora.pretrain.tasks_render import TEMPLATE
    from populora.sandbox import Sandbox
    from populora.tasks import get

    lm, tok = load_model(Path(model_dir), threads)
    result: dict = {
        "model": str(model_dir),
        "per_class": per_class,
        "samples": samples,
        "temperature": temperature,
        "seed": seed,
        "levels": list(FLAW_PROBE_LEVELS),
        "split": split,
        "set": kind,
        "tasks": {},
    }
    with Sandbox(workers=2) as sb, Progress(transient=True, disable=not progress) as bar:
        for task in tasks:
            t = get(task)
            sets = probe_sets(task, per_class, seed, split, kind)
            job = bar.add_task(f"misconception probe {task}", total=len(sets))
            for flaw, pairs in sets.items():
                problems = [p for p, _ in pairs]
                items = [w for _, w in pairs]
                prompts = [t.student_prompt(p, template=TEMPLATE) for p in problems]
                greedy = generate(lm, tok, prompts, MAX_NEW_TOKENS[task], 0.0, seed=seed)
                sampled = generate(
                    lm,
                    tok,
                    [p for p in prompts for _ in range(samples)],
                    MAX_NEW_TOKENS[task],
                    temperature,
                    seed=seed,
                )
                g_answers = [t.parse_answer(x) for x in greedy]
                s_answers = [t.parse_answer(x) for x in sampled]
                g_right = [int(t.score(p, [a], sb)[0]) for p, a in zip(problems, g_answers, strict=True)]
                s_right = [
                    [int(v) for v in t.score(p, s_answers[i * samples : (i + 1) * samples], sb)]
                    for i, p in enumerate(problems)
                ]
                s_wrong = [
                    answers_wrong(a, items[i])
                    for i in range(len(items))
                    for a in s_answers[i * samples : (i + 1) * samples]
                ]
                row = {
                    "n": len(items),
                    "greedy_right": sum(g_right) / len(items),
                    "greedy_misconceived": sum(
                        answers_wrong(a, w) for w, a in zip(items, g_answers, strict=True)
                    )
                    / len(items),
                    **rates(s_right, samples),
                    "sampled_misconceived": sum(s_wrong) / len(s_wrong),
                }
                result["tasks"].setdefault(task, {})[flaw] = row
                bar.advance(job)
    return result


def flaw_table(result: dict):
    """A rich table of `score_flaw_probe`'s result, one row per task type and class."""
    from rich.table import Table

    k = result["samples"]
    table = Table(
        title=f"misconception probe ({result.get('set', 'graded')} set): {result['model']} "
        f"({result['per_class']} items a class, T={result['temperature']})"
    )
    for col in (
        "task",
        "class",
        "n",
        "greedy right",
        "greedy misconceived",
        "pass@1",
        f"pass@{k}",
        "sampled misconceived",
    ):
        table.add_column(col, justify="left" if col in ("task", "class") else "right", no_wrap=True)
    for task, rows in result["tasks"].items():
        for flaw, row in rows.items():
            table.add_row(
                task,
                flaw,
                str(row["n"]),
                *(
                    f"{100 * row[key]:.0f}%"
                    for key in (
                        "greedy_right",
                        "greedy_misconceived",
                        "pass@1",
                        f"pass@{k}",
                        "sampled_misconceived",
                    )
                ),
            )
    return table


def run_flaw_probe(
    model: Path, per_class: int = 16, out: Path | None = None, threads: int = 2, kind: str = "atoms"
) -> dict:
    """`populora bench tiny-model --flaws`: score, print the table, write JSON (with the seconds taken)."""
    import json
    import time

    from rich.console import Console

    t0 = time.time()
    result = score_flaw_probe(Path(model), per_class=per_class, threads=threads, kind=kind)
    result["seconds"] = round(time.time() - t0, 1)
    Console(width=150).print(flaw_table(result))  # whole class names, whatever the terminal
    out = Path(out or DEFAULT_FLAWS_OUT)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    return result
