"""`populora bench tiny-model`: what the bundled tiny model can do as teacher and student.

On held-out generated problems (the generator's "heldout" program split, which no corpus or seed set
draws from, with the generator settings the model was pretrained with), in the compact templates:
- teacher: valid-proposal rate (`task.parse_proposal` then `task.validate` in the real sandbox) and the
  number of distinct valid programs / input sets;
- student: format rate (`task.parse_answer`) and accuracy (`task.score` in the real sandbox);
per task type, greedy and at temperature 1. As the alternative a user would otherwise get, trivial
answerers are scored on the same problems (code_o: "the output is the input", code_i: "the input is the
output", code_f: the identity function), and the gold completions' token lengths are reported (what
`max_new_tokens` must allow).
"""

from __future__ import annotations

import json
import random
import statistics
import time
from pathlib import Path

from populora.names import TASKS
from populora.paths import TINY_MODEL_DIR as ASSET_DIR
from populora.pretrain.probe import MAX_NEW_TOKENS
from populora.pretrain.programs import (
    DEFAULT_LEVEL,
    DEFAULT_NAMES,
    MAX_STATEMENTS,
    sample_code_f,
    sample_triplet,
)
from populora.pretrain.tasks_render import TEMPLATE, TasksRenderer

DEFAULT_OUT = Path("bench/results/tiny_model.json")
EVAL_SEED = 20_261_130  # disjoint from the corpus seeds (0.. and seed + 1_000_003)
MAX_NEW = {
    "teacher": {"code_i": 200, "code_o": 200, "code_f": 256},
    "student": dict(MAX_NEW_TOKENS),
}


def generate(
    model,
    tok,
    prompts: list[str],
    max_new_tokens: int,
    temperature: float,
    batch_size: int = 16,
    seed: int = 0,
) -> list[str]:
    """Plain transformers generation (left padding), texts of the new tokens in prompt order."""
    import torch

    torch.manual_seed(seed)
    order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
    texts: list[str] = [""] * len(prompts)
    for s in range(0, len(order), batch_size):
        idx = order[s : s + batch_size]
        enc = tok([prompts[i] for i in idx], return_tensors="pt", padding=True, add_special_tokens=False)
        kw = (
            dict(do_sample=True, temperature=temperature, top_k=0, top_p=1.0)
            if temperature > 0
            else dict(do_sample=False)
        )
        with torch.no_grad():
            out = model.generate(
                **enc,
                max_new_tokens=max_new_tokens,
                pad_token_id=tok.pad_token_id,
                eos_token_id=tok.eos_token_id,
                **kw,
            )
        for j, i in enumerate(idx):
            texts[i] = tok.decode(out[j, enc["input_ids"].shape[1] :], skip_special_tokens=True)
    return texts


def generator_settings(model_dir: Path) -> dict:
    """The program-generator settings a model folder was pretrained with (`pretrain_info.json`), so it is
    measured on problems from its own generator; the generator's defaults when the file says nothing."""
    cfg = {}
    info = Path(model_dir) / "pretrain_info.json"
    if info.exists():
        cfg = json.loads(info.read_text()).get("config", {})
    return {
        "names": cfg.get("names", DEFAULT_NAMES),
        # Folders written before the knob existed were trained with up to 4 statements.
        "max_statements": cfg.get("max_statements", 4 if cfg else MAX_STATEMENTS),
        # Folders written before the level existed used the whole grammar.
        "level": cfg.get("level", "full" if cfg else DEFAULT_LEVEL),
    }


def load_model(model_dir: Path, threads: int):
    """`(model, tokenizer)` as the tiny-model probes generate with: float32 weights (float16 files too), eval
    mode, `threads` torch threads."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(threads)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    return model, AutoTokenizer.from_pretrained(model_dir)


def _problems(
    n: int,
    k_refs: int,
    seed: int,
    names: str = DEFAULT_NAMES,
    max_statements: int = MAX_STATEMENTS,
    level: str = DEFAULT_LEVEL,
):
    """Held-out student problems and teacher prompts' material per task."""
    from populora.tasks import get

    r = TasksRenderer()
    rng = random.Random(seed)
    gen = dict(names=names, max_statements=max_statements, split="heldout", level=level)
    out = {}
    for name in TASKS:
        task = get(name)
        if name == "code_f":
            problems = [
                r.problem_f(p.code, pairs, p.message)
                for p, pairs in (sample_code_f(rng, **gen) for _ in range(n))
            ]
            teacher = [
                (task.teacher_prompt(sample_triplet(rng, **gen).program, template=TEMPLATE), None)
                for _ in range(n)
            ]
            teacher = [(p, p.split("```python\n", 1)[1].split("\n```", 1)[0]) for p, _ in teacher]
        else:
            problems = [r.problem_io(name, sample_triplet(rng, **gen)) for _ in range(n)]
            teacher = [
                (
                    task.teacher_prompt(
                        [r.problem_io(name, sample_triplet(rng, **gen)) for _ in range(k_refs)],
                        template=TEMPLATE,
                    ),
                    None,
                )
                for _ in range(n)
            ]
        out[name] = (problems, teacher)
    return out


def _trivial(name: str, problem) -> str:
    if name == "code_o":
        return problem.inputs[0]
    if name == "code_i":
        return problem.outputs[0]
    return "def f(*args):\n    return args[0]"


def run(
    quick: bool = False,
    out: Path | None = None,
    model: Path | None = None,
    n: int | None = None,
    k_refs: int = 2,
    seed: int = EVAL_SEED,
    names: str | None = None,
    max_statements: int | None = None,
    level: str | None = None,
) -> dict:
    """Measure a model folder; generator settings default to the ones it was pretrained with."""
    from populora.sandbox import Sandbox

    gen = generator_settings(Path(model or ASSET_DIR))
    names = names or gen["names"]
    max_statements = max_statements or gen["max_statements"]
    level = level or gen["level"]
    # Sandbox workers start before torch is imported (docs/architecture.md).
    with Sandbox(workers=2) as sb:
        return _run(sb, quick, out, model, n, k_refs, seed, names, max_statements, level)


def _run(sb, quick, out, model_dir, n, k_refs, seed, names, max_statements, level) -> dict:
    import torch
    from rich.console import Console
    from rich.table import Table
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from populora.tasks import Problem, Proposal, get

    torch.set_num_threads(2)
    model_dir = Path(model_dir or ASSET_DIR)
    out = Path(out or DEFAULT_OUT)
    n = n or (8 if quick else 48)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()  # fp16 files too
    tok = AutoTokenizer.from_pretrained(model_dir)
    data = _problems(n, k_refs, seed, names, max_statements, level)
    results: dict = {
        "model": str(model_dir),
        "n_per_cell": n,
        "k_refs": k_refs,
        "template": TEMPLATE,
        "seed": seed,
        "names": names,
        "max_statements": max_statements,
        "level": level,
        "split": "heldout",
        "tasks": {},
    }
    t0 = time.time()
    for name in TASKS:
        task = get(name)
        problems, teacher = data[name]
        row: dict = {}
        # Gold completion lengths (tokens): what max_new_tokens must allow for a perfect answer.
        gold_s = [task.render_answer(task.gold_answer(p), template=TEMPLATE) for p in problems]
        gold_t = [
            task.render_proposal(p.program, list(p.inputs), p.message, template=TEMPLATE) for p in problems
        ]
        for role, golds in (("student", gold_s), ("teacher", gold_t)):
            lens = sorted(len(tok(g, add_special_tokens=False)["input_ids"]) + 1 for g in golds)
            row[f"{role}_gold_tokens_p50"] = lens[len(lens) // 2]
            row[f"{role}_gold_tokens_p95"] = lens[min(len(lens) - 1, int(0.95 * len(lens)))]
        triv = [
            task.score(p, [task.parse_answer(task.render_answer(_trivial(name, p), template=TEMPLATE))], sb)[
                0
            ]
            for p in problems
        ]
        row["trivial_student_accuracy"] = sum(triv) / len(problems)
        gold = [task.score(p, [task.parse_answer(g)], sb)[0] for p, g in zip(problems, gold_s, strict=True)]
        row["gold_student_accuracy"] = sum(gold) / len(problems)  # the pipeline's own check: must be 1.0
        for temp in (0.0, 1.0):
            key = "greedy" if temp == 0 else "t1"
            prompts = [task.student_prompt(p, template=TEMPLATE) for p in problems]
            texts = generate(model, tok, prompts, MAX_NEW["student"][name], temp, seed=seed)
            answers = [task.parse_answer(t) for t in texts]
            correct = [task.score(p, [a], sb)[0] for p, a in zip(problems, answers, strict=True)]
            row[f"student_format_{key}"] = sum(bool(a) for a in answers) / n
            row[f"student_accuracy_{key}"] = sum(correct) / n
            texts = generate(model, tok, [p for p, _ in teacher], MAX_NEW["teacher"][name], temp, seed=seed)
            props = [
                task.parse_proposal(t, program=prog) if name == "code_f" else task.parse_proposal(t)
                for t, (_, prog) in zip(texts, teacher, strict=True)
            ]
            parsed = [p for p in props if isinstance(p, Proposal)]
            valid = [v for v in task.validate(parsed, sb) if isinstance(v, Problem)] if parsed else []
            row[f"teacher_format_{key}"] = len(parsed) / n
            row[f"teacher_valid_{key}"] = len(valid) / n
            row[f"teacher_distinct_valid_{key}"] = len({(v.program, v.inputs) for v in valid})
            if name != "code_f" and valid:
                row[f"teacher_example_{key}"] = {
                    "program": valid[0].program,
                    "input": valid[0].inputs[0],
                    "output": valid[0].outputs[0],
                }
        results["tasks"][name] = row
    results["seconds"] = round(time.time() - t0, 1)
    info = model_dir / "pretrain_info.json"
    if info.exists():
        i = json.loads(info.read_text())
        results["pretrain"] = {
            k: i.get(k)
            for k in (
                "seed",
                "steps",
                "tokens_seen",
                "final_train_loss",
                "val_completion_loss",
                "parameters",
                "train_seconds",
            )
        }
        phases = [*i.get("history", []), i]  # runs continued with --init-from, oldest first
        results["pretrain"]["phases"] = len(phases)
        for k in ("steps", "tokens_seen", "train_seconds"):
            results["pretrain"][f"total_{k}"] = round(sum(p.get(k, 0) for p in phases), 1)
    summary = {}
    for key in ("greedy", "t1"):
        summary[f"teacher_valid_{key}"] = statistics.mean(
            results["tasks"][t][f"teacher_valid_{key}"] for t in TASKS
        )
        summary[f"student_accuracy_{key}"] = statistics.mean(
            results["tasks"][t][f"student_accuracy_{key}"] for t in TASKS
        )
    summary["trivial_student_accuracy"] = statistics.mean(
        results["tasks"][t]["trivial_student_accuracy"] for t in TASKS
    )
    results["summary"] = summary

    table = Table(title=f"tiny model abilities ({n} held-out problems per cell, K={k_refs} refs, compact)")
    for col in (
        "task",
        "teacher valid (greedy)",
        "teacher valid (T=1)",
        "student acc (greedy)",
        "student acc (T=1)",
        "trivial answerer acc",
        "gold tokens s/t p95",
    ):
        table.add_column(col)
    for t in TASKS:
        row = results["tasks"][t]
        table.add_row(
            t,
            f"{row['teacher_valid_greedy']:.0%}",
            f"{row['teacher_valid_t1']:.0%}",
            f"{row['student_accuracy_greedy']:.0%}",
            f"{row['student_accuracy_t1']:.0%}",
            f"{row['trivial_student_accuracy']:.0%}",
            f"{row['student_gold_tokens_p95']}/{row['teacher_gold_tokens_p95']}",
        )
    Console().print(table)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2) + "\n")
    return results


# ---------------------------------------------------------------------------------------------------
# Per level (issue 30 §3): models pretrained on the graded generator, or any model with `--level 1-5`.

GRADED_OUT = Path("bench/results/tiny_model_levels.json")


def _graded_cells(levels: tuple[int, ...], n: int, k_refs: int) -> dict:
    """`{task: {level: (problems, [(teacher prompt, shown program or None)])}}` from the graded probe sets
    (pretrain/graded_probe.py): the first `n` items of each level are the student problems; teacher prompts show
    `k_refs` other items of the same level (code_f: one program), read from the end of that level's items."""
    from populora.pretrain.graded_probe import load_graded_probe
    from populora.tasks import get

    out: dict = {}
    for name in TASKS:
        task = get(name)
        by_level: dict[int, list] = {}
        for lv, p in load_graded_probe(name):
            by_level.setdefault(lv, []).append(p)
        for lv in levels:
            items = by_level[lv]
            problems = items[:n]
            teacher = []
            for j in range(n):
                if name == "code_f":
                    shown = items[-1 - j % len(items)].program
                    teacher.append((task.teacher_prompt(shown, template=TEMPLATE), shown))
                else:
                    refs = [items[-1 - (j * k_refs + r) % len(items)] for r in range(k_refs)]
                    teacher.append((task.teacher_prompt(refs, template=TEMPLATE), None))
            out.setdefault(name, {})[lv] = (problems, teacher)
    return out


def run_levels(
    quick: bool = False,
    out: Path | None = None,
    model: Path | None = None,
    n: int | None = None,
    levels: str = "1-5",
    k_refs: int = 2,
    seed: int = EVAL_SEED,
    threads: int = 2,
) -> dict:
    """Student accuracy and teacher validity per task and graded level, on the graded probe sets. `quick`: 8
    items per cell and only the two cells the asset targets read (student greedy, teacher T=1)."""
    from populora.pretrain.graded import parse_levels
    from populora.sandbox import Sandbox

    lv = tuple(sorted(set(parse_levels(levels))))
    with Sandbox(workers=2) as sb:
        return _run_levels(
            sb, quick, Path(out or GRADED_OUT), Path(model or ASSET_DIR), n, lv, k_refs, seed, threads
        )


def _run_levels(sb, quick, out, model_dir, n, levels, k_refs, seed, threads) -> dict:
    from rich.console import Console
    from rich.table import Table

    from populora.pretrain.graded_probe import MAX_NEW_TOKENS as STUDENT_NEW
    from populora.pretrain.graded_probe import TEACHER_MAX_NEW_TOKENS as TEACHER_NEW
    from populora.tasks import Problem, Proposal, get

    n = n or (8 if quick else 16)
    model, tok = load_model(model_dir, threads)
    cells = _graded_cells(levels, n, k_refs)
    cols = (
        [("student", 0.0), ("teacher", 1.0)]
        if quick
        else [("student", 0.0), ("student", 1.0), ("teacher", 0.0), ("teacher", 1.0)]
    )
    results: dict = {
        "model": str(model_dir),
        "probe": "graded (pretrain/graded_probe.py)",
        "n_per_cell": n,
        "k_refs": k_refs,
        "template": TEMPLATE,
        "seed": seed,
        "levels": {},
    }
    t0 = time.time()
    for name in TASKS:
        task = get(name)
        for lv in levels:
            problems, teacher = cells[name][lv]
            row: dict = {}
            for role, temp in cols:
                key = "greedy" if temp == 0 else "t1"
                if role == "student":
                    prompts = [task.student_prompt(p, template=TEMPLATE) for p in problems]
                    texts = generate(model, tok, prompts, STUDENT_NEW[name], temp, seed=seed)
                    answers = [task.parse_answer(t) for t in texts]
                    correct = [task.score(p, [a], sb)[0] for p, a in zip(problems, answers, strict=True)]
                    row[f"student_format_{key}"] = sum(bool(a) for a in answers) / n
                    row[f"student_accuracy_{key}"] = sum(correct) / n
                    if name == "code_o":
                        row[f"student_traced_{key}"] = sum(t.startswith("```trace") for t in texts) / n
                else:
                    texts = generate(model, tok, [p for p, _ in teacher], TEACHER_NEW[name], temp, seed=seed)
                    props = [
                        task.parse_proposal(t, program=prog) if name == "code_f" else task.parse_proposal(t)
                        for t, (_, prog) in zip(texts, teacher, strict=True)
                    ]
                    parsed = [p for p in props if isinstance(p, Proposal)]
                    valid = [v for v in task.validate(parsed, sb) if isinstance(v, Problem)] if parsed else []
                    row[f"teacher_format_{key}"] = len(parsed) / n
                    row[f"teacher_valid_{key}"] = len(valid) / n
            results["levels"].setdefault(name, {})[str(lv)] = row
    results["seconds"] = round(time.time() - t0, 1)
    results["targets"] = level_targets(results["levels"])
    table = Table(title=f"tiny model per level ({n} graded probe items per cell, K={k_refs} refs, compact)")
    heads = {
        "student_accuracy_greedy": "student greedy",
        "student_accuracy_t1": "student T=1",
        "teacher_valid_greedy": "teacher valid greedy",
        "teacher_valid_t1": "teacher valid T=1",
    }
    keys = [k for k in heads if any(k in r for t in results["levels"].values() for r in t.values())]
    for col in ["task", "level", *(heads[k] for k in keys)]:
        table.add_column(col)
    for name, by_level in results["levels"].items():
        for lv, row in by_level.items():
            table.add_row(name, lv, *(f"{row[k]:.0%}" for k in keys))
    Console().print(table)
    Console().print(f"targets (issue 30 §2): {results['targets']}")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2) + "\n")
    return results


def level_targets(levels: dict) -> dict:
    """Issue 30 §2's per-task checks from a per-level table: student greedy >= 60% at the lowest level and
    <= 25% at the highest; teacher valid at T=1 (mean over levels) >= 60% code_i/code_o, >= 40% code_f."""
    out = {}
    for name, by_level in levels.items():
        lo, hi = min(by_level, key=int), max(by_level, key=int)
        row = {}
        if "student_accuracy_greedy" in by_level[lo]:
            row["easiest_student_ge_60"] = by_level[lo]["student_accuracy_greedy"] >= 0.6
            row["hardest_student_le_25"] = by_level[hi]["student_accuracy_greedy"] <= 0.25
        t1 = [r["teacher_valid_t1"] for r in by_level.values() if "teacher_valid_t1" in r]
        if t1:
            row["teacher_valid_t1_mean"] = round(sum(t1) / len(t1), 3)
            row["teacher_valid_ok"] = row["teacher_valid_t1_mean"] >= (0.4 if name == "code_f" else 0.6)
        out[name] = row
    return out
