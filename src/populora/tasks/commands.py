"""CLI of the task families: `populora tasks list` (the installed families), `populora tasks demo [code_i|code_o|code_f]` (a teacher prompt, a validated
proposal, a student prompt and the scoring of rendered answers, including a known reward hack) and
`populora tasks seeds` (how many rows of the AZR seed files are valid, and why the rest are not)."""

from __future__ import annotations

from pathlib import Path

import typer

DEMO_PROGRAM = """def f(words, k):
    counts = {}
    for w in words:
        key = w[:k]
        counts[key] = counts.get(key, 0) + len(w)
    return sorted(counts.items())"""
DEMO_INPUT = "['apple', 'apricot', 'banana', 'blueberry', 'cherry'], 2"
DEMO_F_INPUTS = [
    "['ab', 'ac', 'b'], 1",
    "['hello'], 3",
    "[], 2",
    "['x', 'xy', 'xyz'], 1",
    "['aa', 'ab'], 2",
    "['cat', 'car', 'dog'], 2",
    "['q'], 5",
    "['ab', 'ab'], 1",
    "['abc', 'abd', 'b'], 2",
    "['one', 'two', 'three'], 1",
]
DEMO_MESSAGE = (
    "Group the words by their first k letters and add up the word lengths; list the groups in order."
)


def _demo_answers(name: str, gold: str) -> list[tuple[str, str]]:
    if name == "code_o":
        return [
            ("right", gold),
            ("right value, wrong types (lists, not tuples)", gold.replace("(", "[").replace(")", "]")),
            ("code in the answer (AZR evaluated this in the trainer)", "__import__('os').getcwd()"),
        ]
    if name == "code_i":
        return [
            ("the teacher's input", gold),
            (
                "another input with the same output",
                "['apricot', 'apple', 'banana', 'blueberry', 'cherry'], 2",
            ),
            ("AZR hack B4: always-true injection", "0) or (True"),
        ]
    return [
        (
            "right",
            "def f(words, k):\n    out = {}\n    for w in words:\n        out[w[:k]] = out.get(w[:k], 0) "
            "+ len(w)\n    return sorted(out.items())",
        ),
        (
            "AZR hack B4: an object equal to everything",
            "class Any:\n    def __eq__(self, other):\n        return True\ndef f(words, k):\n    return Any()",
        ),
        (
            "plausible but wrong (counts words)",
            "def f(words, k):\n    out = {}\n    for w in words:\n"
            "        out[w[:k]] = out.get(w[:k], 0) + 1\n"
            "    return sorted(out.items())",
        ),
    ]


def register(app: typer.Typer, bench: typer.Typer) -> None:
    tasks = typer.Typer(
        help="Task families: `list` the installed ones; the AZR family (code_i, code_o, code_f): demo, seeds.",
        no_args_is_help=True,
    )
    app.add_typer(tasks, name="tasks")

    @tasks.command("demo")
    def demo_cmd(
        task: str = typer.Argument("code_o", help="code_i | code_o | code_f"),
        template: str = typer.Option(
            "azr", "--template", "-t", help="Prompt template set: azr | compact | DIR."
        ),
    ) -> None:
        """Print a teacher prompt, the validated proposal, a student prompt and the scores of rendered answers."""
        from rich.console import Console
        from rich.panel import Panel
        from rich.table import Table

        import populora.tasks as T
        from populora.sandbox import Sandbox
        from populora.tasks.buffers import identity_problem
        from populora.tasks.rewards import student_reward

        if task not in T.TASK_NAMES:
            typer.echo(f"error: unknown task {task!r}; use one of {', '.join(T.TASK_NAMES)}", err=True)
            raise typer.Exit(2)
        try:
            T.load_template(template)
        except ValueError as e:
            typer.echo(f"error: {e}", err=True)
            raise typer.Exit(2) from None
        con = Console()
        t = T.get(task)
        with Sandbox(workers=1) as sb:
            if task == "code_f":
                source = T.Problem("code_o", DEMO_PROGRAM, (DEMO_INPUT,), ("None",))
                prompt = t.teacher_prompt([source], template=template)
                completion = t.render_proposal(DEMO_PROGRAM, DEMO_F_INPUTS, DEMO_MESSAGE, template=template)
            else:
                prompt = t.teacher_prompt([identity_problem(task)], template=template)
                completion = t.render_proposal(DEMO_PROGRAM, [DEMO_INPUT], template=template)
            con.print(Panel(prompt, title=f"{task} teacher prompt ({template})", expand=False))
            con.print(Panel(completion, title="a teacher completion", expand=False))
            proposal = t.parse_proposal(completion, program=DEMO_PROGRAM, template=template)
            (problem,) = t.validate([proposal], sb)
            if not isinstance(problem, T.Problem):
                typer.echo(f"error: demo proposal invalid: {problem.reason}", err=True)
                raise typer.Exit(1)
            con.print(
                f"[bold]valid problem[/] id={problem.id} outputs={list(problem.outputs)[:3]}"
                f"{' ...' if len(problem.outputs) > 3 else ''}"
            )
            con.print(
                Panel(
                    t.student_prompt(problem, template=template), title=f"{task} student prompt", expand=False
                )
            )
            table = Table(title=f"{task}: scoring rendered answers")
            for col in ("answer", "parsed", "correct", "reward"):
                table.add_column(col)
            labels, parsed = [], []
            for label, text in _demo_answers(task, t.gold_answer(problem)):
                labels.append(label)
                parsed.append(t.parse_answer(t.render_answer(text, template=template), template=template))
            scores = t.score(problem, parsed, sb)
            for label, a, ok in zip(labels, parsed, scores, strict=True):
                formatted = isinstance(a, T.Answer)
                table.add_row(
                    label, "ok" if formatted else a.reason, str(ok), f"{student_reward(formatted, ok):+.1f}"
                )
            con.print(table)

    @tasks.command("list")
    def list_cmd() -> None:
        """The installed task families (entry-point group `populora.tasks`): name, task types, the package
        that provides it; `tasks.families` selects them by name. A family that failed to load says why."""
        from populora.tasks.registry import installed

        rows = [
            (
                i.name,
                ",".join(i.task_types) or "-",
                i.source,
                i.family.description if i.ok else f"BROKEN: {i.error}",
            )
            for i in installed().values()
        ]
        head = ("family", "task types", "package", "description")
        widths = [max(len(r[k]) for r in [head, *rows]) for k in range(3)]
        for r in [head, *rows]:
            typer.echo("  ".join(c.ljust(w) for c, w in zip(r[:3], widths, strict=True)) + "  " + r[3])

    @tasks.command("seeds")
    def seeds_cmd(
        data_dir: Path = typer.Option(
            None,
            "--data-dir",
            help="Data root holding azr_seed/ (default: $POPULORA_DATA_DIR, else the copy shipped with populora).",
        ),
    ) -> None:
        """Validate every row of the AZR seed files and print how many are valid, and why the rest are not."""
        from rich.console import Console
        from rich.table import Table

        from populora.data import DataDirError, resolve_data_dir
        from populora.sandbox import Sandbox
        from populora.tasks.seeds import load_azr_seed

        try:
            root = resolve_data_dir(data_dir)
        except DataDirError as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(2) from exc
        files = [
            (root / "azr_seed" / "7b_coder_seed_io.jsonl", "code_o"),
            (root / "azr_seed" / "7b_coder_code_f_seed_io.jsonl", "code_f"),
        ]
        missing = [str(f) for f, _ in files if not f.is_file()]
        if missing:
            typer.echo(
                f"error: seed file(s) not found: {', '.join(missing)}; pass --data-dir or set "
                "POPULORA_DATA_DIR",
                err=True,
            )
            raise typer.Exit(2)
        con = Console()
        with Sandbox(workers=2) as sb:
            for path, task in files:
                rep = load_azr_seed(path, sb, task)
                table = Table(
                    title=f"{path.name}: {len(rep.problems)}/{rep.total} valid, "
                    f"{len(rep.output_mismatch)} stored outputs differ from ours"
                )
                table.add_column("reason")
                table.add_column("rows", justify="right")
                for reason, n in rep.reasons().most_common():
                    table.add_row(reason, str(n))
                con.print(table)
