"""`populora bench tiny-model --skills`: the elementary skills under a tiny model's student accuracy.

The graded probe says how often the student is right per level; this probe says why it is wrong. It asks
code_o questions (greedy, compact template, traced answers as pretrained) on one-statement programs over the
generator's own values, in families that each need one skill, and reads the cause of a miss from the trace:

- **binding** (`r = n <op> m`, two different digits; + - * // %): the trace line `r = A <op> B = C` shows
  whether the operands were bound to the right arguments (A, B are n, m) and, apart from that, whether the
  arithmetic fact is right (C is A <op> B, whatever A and B are);
- **one argument** (`r = n <op> k`, a digit argument and a digit literal): the same reading on the generator's
  common form; `n <op> m` of two int arguments is rare in the generator (0.15% of its programs, against 2-10%
  for `n <op> k`), so the binding families measure a generalisation and these the trained case;
- **argument** (`total = n` or `total = m` of two digits): return one of two arguments;
- **copy** (`s.upper()`, `s + 'xyz'`, `len(s)` on 2-5 of the generator's letters, several tokens; and
  `s.upper()` on one of the generator's words, one token): whether the input string was copied into the
  trace's first line, and the answer.

Pure helpers (`skill_items`, `read_binary_line`, `classify`) are tested on hand-made texts; `run_skills`
scores a model in the real sandbox and writes JSON.
"""

from __future__ import annotations

import json
import random
import re
import time
from dataclasses import dataclass
from pathlib import Path

from populora.paths import TINY_MODEL_DIR as ASSET_DIR
from populora.pretrain.programs import INT_OPS, LETTERS, WORDS, int_op
from populora.pretrain.tasks_render import TEMPLATE

DEFAULT_SKILLS_OUT = Path("bench/results/tiny_model_skills.json")
SKILLS_SEED = 20_261_206
BINARY_OPS = tuple(INT_OPS)
SUFFIX = "xyz"  # one of the generator's words, so `s + 'xyz'` is in its distribution
# `r = 4 + 1 = 5`, or with the expression as written first: `r = n + m = 4 + 1 = 5` (as the model wrote it,
# which may be `n + n` or `n // 7`)
_BINARY_LINE = re.compile(
    r"^r = (?:([\w']+ \S+ [\w']+) = )?(-?\d+) (\+|-|\*|//|%) (-?\d+) = (-?\d+)\s*$", re.M
)


@dataclass(frozen=True)
class SkillItem:
    """One question: the program, its call arguments as text, the expected output's repr, and what the
    classification needs (`expression`: an operation item's `n <op> m` as the program writes it, and `args`:
    the two digits its operands stand for; `string`: a copy item's input)."""

    family: str
    program: str
    inputs: str
    output: str
    args: tuple[int, int] | None = None
    string: str | None = None
    expression: str | None = None


def skill_items(n: int, seed: int = SKILLS_SEED) -> dict[str, list[SkillItem]]:
    """`n` items per family, the same for the same `n` and `seed`."""
    if n < 1:
        raise ValueError(f"items per family must be >= 1, got {n}")
    rng = random.Random(seed)
    fams: dict[str, list[SkillItem]] = {}

    def operation(
        family: str, params: str, expression: str, inputs: str, op: str, a: int, b: int
    ) -> SkillItem:
        program = f"def f({params}):\n    r = {expression}\n    return r"
        return SkillItem(family, program, inputs, repr(int_op(op, a, b)), args=(a, b), expression=expression)

    for op in BINARY_OPS:
        # a != b so a wrong binding shows in the trace; b >= 1 where it divides
        pairs = [(a, b) for a in range(10) for b in range(10) if a != b and (b or op not in ("//", "%"))]
        fams[f"binding n {op} m"] = [
            operation(f"binding n {op} m", "n, m", f"n {op} m", f"{a}, {b}", op, a, b)
            for a, b in (rng.choice(pairs) for _ in range(n))
        ]
    for op in BINARY_OPS:
        # the generator's common form (`n % 3`, `n * 8`: 2-10% of its programs, where `n op m` of two int
        # arguments is 0.15%): the same operations with one argument, so the fact is read where binding is easy
        fams[f"one argument n {op} k"] = [
            operation(f"one argument n {op} k", "n", f"n {op} {k}", f"{a}", op, a, k)
            for a, k in ((rng.randint(0, 9), rng.randint(1, 9)) for _ in range(n))
        ]
    arg_items = []
    for _ in range(n):
        a, b = rng.sample(range(10), 2)
        name, value = rng.choice((("n", a), ("m", b)))
        arg_items.append(
            SkillItem(
                "argument",
                f"def f(n, m):\n    total = {name}\n    return total",
                f"{a}, {b}",
                repr(value),
                (a, b),
            )
        )
    fams["argument"] = arg_items
    letters = ["".join(rng.choice(LETTERS) for _ in range(rng.randint(2, 5))) for _ in range(n)]
    words = [rng.choice(WORDS) for _ in range(n)]
    copies = {
        "copy letters: s.upper()": ("out = s.upper()", "out", letters, str.upper),
        f"copy letters: s + '{SUFFIX}'": (f"out = s + '{SUFFIX}'", "out", letters, lambda s: s + SUFFIX),
        "copy letters: len(s)": ("r = len(s)", "r", letters, len),
        "copy word: s.upper()": ("out = s.upper()", "out", words, str.upper),
    }
    for fam, (stmt, var, strings, fn) in copies.items():
        fams[fam] = [
            SkillItem(fam, f"def f(s):\n    {stmt}\n    return {var}", repr(s), repr(fn(s)), string=s)
            for s in strings
        ]
    return fams


def read_binary_line(text: str) -> tuple[int, str, int, int] | None:
    """The first `r = A <op> B = C` line of a trace, as (A, op, B, C); None if there is none."""
    m = _BINARY_LINE.search(text)
    return (int(m[2]), m[3], int(m[4]), int(m[5])) if m else None


def written_expression(text: str) -> str | None:
    """The expression written before the values on that line (`n + m` in `r = n + m = 4 + 1 = 5`), None if the
    line has none (a trace without names) or there is no such line."""
    m = _BINARY_LINE.search(text)
    return m[1] if m else None


def classify(item: SkillItem, text: str) -> dict:
    """What the answer `text` shows about the skill `item` asks for (booleans; None where unreadable)."""
    if item.expression is not None:
        line = read_binary_line(text)
        if line is None:
            return {"bound": None, "fact": None, "written": None}
        a, op, b, c = line
        written = written_expression(text)
        return {
            "bound": (a, b) == item.args,
            "fact": c == int_op(op, a, b),
            # with a named trace: whether the program's expression was copied as it is
            "written": None if written is None else written == item.expression,
        }
    if item.string is not None:
        return {"copied": f"s = {item.string!r}\n" in text}
    return {}


def skills_table(results: dict):
    """The console table of `run_skills`'s results; a "names copied" column where a model wrote its traces'
    expressions as written (`--trace-names`)."""
    from rich.table import Table

    fams = results["families"]
    named = any(row.get("written") is not None for row in fams.values())
    keys = ["accuracy", *(["written"] if named else []), "bound", "fact", "copied"]
    heads = {
        "accuracy": "correct",
        "written": "names copied",
        "bound": "operands bound",
        "fact": "fact right",
        "copied": "input copied",
    }
    table = Table(
        title=f"tiny model's elementary skills ({results['n_per_family']} code_o items per family, greedy, traced)"
    )
    for col in ["family", *(heads[k] for k in keys)]:
        table.add_column(col)
    for fam, row in fams.items():
        table.add_row(fam, *("" if row.get(k) is None else f"{row[k]:.0%}" for k in keys))
    return table


def _rate(values: list) -> float | None:
    known = [v for v in values if v is not None]
    return round(sum(known) / len(known), 3) if known else None


def run_skills(
    quick: bool = False,
    out: Path | None = None,
    model: Path | None = None,
    n: int | None = None,
    threads: int = 2,
    seed: int = SKILLS_SEED,
) -> dict:
    """Score `model` on every skill family (`n` items each; 40, or 8 with `quick`), print a table, write JSON."""
    from rich.console import Console
    from rich.progress import Progress

    from populora.pretrain.bench import generate, load_model
    from populora.pretrain.graded_probe import MAX_NEW_TOKENS
    from populora.sandbox import Sandbox
    from populora.tasks import Problem, get

    n = n or (8 if quick else 40)
    model_dir = Path(model or ASSET_DIR)
    out = Path(out or DEFAULT_SKILLS_OUT)
    lm, tok = load_model(model_dir, threads)
    task = get("code_o")
    fams = skill_items(n, seed)
    results: dict = {
        "model": str(model_dir),
        "task": "code_o",
        "n_per_family": n,
        "seed": seed,
        "template": TEMPLATE,
        "families": {},
    }
    t0 = time.time()
    with Sandbox(workers=2) as sb, Progress(transient=True) as bar:
        job = bar.add_task("skills", total=len(fams))
        for fam, items in fams.items():
            problems = [
                Problem(task="code_o", program=i.program, inputs=(i.inputs,), outputs=(i.output,))
                for i in items
            ]
            prompts = [task.student_prompt(p, template=TEMPLATE) for p in problems]
            texts = generate(lm, tok, prompts, MAX_NEW_TOKENS["code_o"], 0.0, seed=seed)
            correct = [
                bool(task.score(p, [task.parse_answer(t)], sb)[0])
                for p, t in zip(problems, texts, strict=True)
            ]
            marks = [classify(i, t) for i, t in zip(items, texts, strict=True)]
            row = {"n": n, "accuracy": round(sum(correct) / n, 3)}
            if "bound" in marks[0]:  # how many answers had a readable `r = A <op> B = C` line
                row["line_read"] = round(sum(m["bound"] is not None for m in marks) / n, 3)
            for key in marks[0]:
                row[key] = _rate([m[key] for m in marks])
            row["wrong_examples"] = [
                {"input": i.inputs, "expected": i.output, "answer": t}
                for i, t, c in zip(items, texts, correct, strict=True)
                if not c
            ][:3]
            results["families"][fam] = row
            bar.advance(job)
    results["seconds"] = round(time.time() - t0, 1)
    Console().print(skills_table(results))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2) + "\n")
    return results
