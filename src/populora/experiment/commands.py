"""CLI: `populora experiment ablation|learning|retention|control ...`.

Heavy imports happen inside the commands; a config error prints one line and exits with code 2. Both commands
are resumable: run the same command again after a kill and finished runs are kept.
"""

from __future__ import annotations

from pathlib import Path

import typer

from populora.cli_errors import fail


def register(app: typer.Typer, bench: typer.Typer) -> None:
    exp = typer.Typer(
        help="The paper's experiments at laptop scale: population-size ablation, crossover retention.",
        no_args_is_help=True,
    )
    app.add_typer(exp, name="experiment")

    @exp.command("ablation")
    def ablation(
        out: Path = typer.Option(
            None, "--out", help="Experiment folder (settings.json, runs/, experiment.json, .html)."
        ),
        resume: Path = typer.Option(
            None,
            "--resume",
            help="Continue the experiment in this folder with its own settings: each run from its newest "
            "checkpoint, finished runs kept. Flags given with it must agree with the experiment's.",
        ),
        preset: str = typer.Option(
            None, "--preset", help="Preset every arm starts from (default: tiny-learn)."
        ),
        steps: int = typer.Option(None, "--steps", help="Training steps per run (default: the preset's)."),
        seeds: int = typer.Option(
            None,
            "--seeds",
            help="Seeds per arm (0..S-1); default 3, 1 with --quick. With --resume, a larger S adds seeds.",
        ),
        arms: str = typer.Option(
            None,
            "--arms",
            help="Comma-separated arms: single (AZR's loop), 1T1S, 2T2S, 4T4S, shuffled (2T+2S with shuffled "
            "student rewards), 4T4S-shuffled (default: single,1T1S,2T2S,4T4S,shuffled).",
        ),
        probe_every: int = typer.Option(
            None,
            "--probe-every",
            help="Probe at 0, K, 2K, ..., steps (K must divide --steps) (default: the preset's).",
        ),
        jobs: int = typer.Option(
            None,
            "--jobs",
            help="Runs side by side, each in its own process with cores/J threads (default: cores / the "
            "preset's train.threads). Not a setting: each sitting may choose.",
        ),
        quick: bool = typer.Option(False, "--quick", help="Two steps per run, one seed: a pipeline check."),
        eval_benchmarks: str = typer.Option(
            None, "--eval", help="Also run `populora eval` on every run (e.g. humaneval+,gsm8k)."
        ),
        eval_limit: int = typer.Option(
            None, "--eval-limit", help="First N problems of each benchmark (default: 20)."
        ),
        progress_every: float = typer.Option(
            60.0, "--progress-every", help="Seconds between progress lines (0: only run start/finish lines)."
        ),
        overrides: list[str] = typer.Option([], "--set", help="key=value applied to every arm (repeatable)."),
    ) -> None:
        """Single agent (AZR) vs 1T+1S, 2T+2S, 4T+4S (compute-matched per adapter) and the shuffled-reward
        controls, S seeds each; resumable with --resume OUT."""
        from populora.config import ConfigError
        from populora.experiment.ablation import parse_arms, run_ablation
        from populora.experiment.page import ablation_rows, contrast_rows
        from populora.experiment.settings import ExperimentError
        from populora.train.errors import TrainError

        if (out is None) == (resume is None):
            fail("give --out OUT for a new experiment or --resume OUT to continue one (one of the two)")
        for flag, v in (
            ("--seeds", seeds),
            ("--steps", steps),
            ("--probe-every", probe_every),
            ("--jobs", jobs),
        ):
            if v is not None and v < 1:
                fail(f"{flag} must be >= 1, got {v}")
        try:
            result = run_ablation(
                resume or out,
                preset,
                seeds,
                quick,
                overrides,
                eval_benchmarks,
                eval_limit,
                log=typer.echo,
                steps=steps,
                arms=parse_arms(arms) if arms is not None else None,
                probe_every=probe_every,
                jobs=jobs,
                resume=resume is not None,
                progress_every=progress_every,
            )
        except (ConfigError, ExperimentError, TrainError) as exc:
            fail(str(exc))
        except KeyboardInterrupt as err:  # what was kept and how to go on is printed already
            raise typer.Exit(getattr(err, "exit_code", 130)) from None
        head, rows = ablation_rows(result)
        _print_table(head, rows)
        _print_table(*contrast_rows(result))
        from populora.experiment.claims_view import render_claims

        # the paper's claims (a-f), wrapped to 100 columns; OUT/claims.png has the figures
        typer.echo(render_claims(result["claims"]), nl=False)

    @exp.command("claims")
    def claims_command(
        out: Path = typer.Argument(..., help="The experiment folder `experiment ablation --out` made."),
        json_out: Path = typer.Option(None, "--json", help="Where the JSON goes (default OUT/claims.json)."),
        figure: Path = typer.Option(None, "--figure", help="Where the PNG goes (default OUT/claims.png)."),
        hardest: int = typer.Option(
            None, "--hardest", help="The probe level claim (a) also reads (default: the highest it holds)."
        ),
    ) -> None:
        """The paper's claims (a-f) answered from an ablation's finished runs, each with its interval, its
        control and a verdict; reads an experiment part-way through its sittings too (the seeds every arm
        finished). For (a) and (b) it also says how many seeds per arm a 2- or 5-point difference would need at
        the spread measured."""
        import json

        from populora.experiment.claims import claims
        from populora.experiment.claims_view import claims_figure, render_claims, unfinished_message
        from populora.experiment.settings import ExperimentError

        try:
            result = claims(out, hardest=hardest)
        except ExperimentError as exc:
            fail(str(exc))
        if not result["seeds_used"]:
            fail(unfinished_message(out, result))
        json_out = json_out or out / "claims.json"
        json_out.parent.mkdir(parents=True, exist_ok=True)
        json_out.write_text(json.dumps(result, indent=1) + "\n")
        png = claims_figure(result, figure or out / "claims.png")
        typer.echo(render_claims(result), nl=False)  # wrapped to 100 columns
        typer.echo(f"seeds {result['seeds_used']} of every arm; wrote {json_out} and {png}")

    @exp.command("learning")
    def learning(
        out: Path = typer.Option(..., "--out", help="Experiment folder (runs/seed<S>/, learning.json/.png)."),
        preset: str = typer.Option("tiny-learn", "--preset", help="The preset to test."),
        seeds: int = typer.Option(None, "--seeds", help="Seeds 0..S-1; default 3, 1 with --quick."),
        control: str = typer.Option(
            None,
            "--control",
            help="Also run every seed as a control and report the paired difference: 'shuffled' "
            "(the students' rewards permuted within each step, rl.student_rewards=shuffled).",
        ),
        quick: bool = typer.Option(
            False, "--quick", help="Two steps per run, a small probe: a pipeline check."
        ),
        json_out: Path = typer.Option(None, "--json", help="Also write the JSON here (bench/results/...)."),
        figure: Path = typer.Option(None, "--figure", help="Where the PNG goes (default OUT/learning.png)."),
        overrides: list[str] = typer.Option([], "--set", help="key=value for every seed (repeatable)."),
    ) -> None:
        """Does a preset learn? Students' probe change (bootstrap over seeds and probe items), teachers'
        valid-rate change; with --control shuffled, the part of the change that follows the reward."""
        from populora.config import ConfigError
        from populora.experiment.contrasts import fmt
        from populora.experiment.learning import CONTROLS, run_learning

        seeds = seeds if seeds is not None else (1 if quick else 3)
        if seeds < 1:
            fail("--seeds must be >= 1")
        if control is not None and control not in CONTROLS:
            fail(f"--control {control!r}: unknown control; use one of {', '.join(CONTROLS)}")
        try:
            r = run_learning(
                out, preset, seeds, overrides, json_out, figure, log=typer.echo, control=control, quick=quick
            )
        except ConfigError as exc:
            fail(str(exc))

        def ci(s: dict, k: float = 100.0, sign: str = "+") -> str:
            # A change is signed (+4.48), a level is not (37.81).
            if s["mean"] is None:
                return "-"
            if s["lo"] is None:
                return f"{k * s['mean']:{sign}.2f}"
            return f"{k * s['mean']:{sign}.2f} [{k * s['lo']:{sign}.2f}, {k * s['hi']:{sign}.2f}]"

        typer.echo(
            f"students' mean probe accuracy: {ci(r['student_probe_start'], sign='')} -> "
            f"{ci(r['student_probe_end'], sign='')} %, "
            f"change {ci(r['student_probe_change'])} points (95% CI over {len(r['seeds'])} seeds; "
            f"excludes zero: {r['excludes_zero']})"
        )
        typer.echo(
            f"teachers' valid-proposal rate on fixed prompts: {ci(r['teacher_valid_probe_start'], sign='')} %, "
            f"change {ci(r['teacher_valid_probe_change'])} points; on the run's own prompts (last quarter "
            f"minus first): {ci(r['teacher_valid_rate_change'])} points"
        )
        iv = r["intervals"]
        for arm, a in iv["arms"].items():
            m = a["mean_change"]
            typer.echo(
                f"{arm}: students' probe change {fmt(m)} points (mean member), best of {a['members']} members "
                f"{fmt(a['best_change'])}; 95% bootstrap over {m['resampled']} "
                f"({m['n_seeds']} seeds, {m['n_items']} items; {iv['source']})"
            )
        for name, d in iv["differences"].items():
            how = "paired by seed" if d["paired"] else "unpaired"
            typer.echo(f"{name}: {fmt(d)} points ({how}; bootstrap over {d['resampled']})")
        for task, tv in r["per_task"].items():  # a gain on one task type can hide behind a loss on another
            for arm, a in tv["arms"].items():
                typer.echo(f"{arm}, {task} only: {fmt(a['mean_change'])} points")
            for name, d in tv["differences"].items():
                typer.echo(f"{name}, {task} only: {fmt(d)} points")
        for style, sv in r["style_fixed"].items():  # code_o with its answer style forced: skill, not style
            for arm, a in sv["arms"].items():
                typer.echo(f"{arm}, code_o with the {style} style forced: {fmt(a['mean_change'])} points")
            for name, d in sv["differences"].items():
                typer.echo(f"{name}, code_o with the {style} style forced: {fmt(d)} points")
        for arm, roles in r["games"].items():
            for role, g in roles.items():
                typer.echo(
                    f"{arm}: {role}s won {g['win']}, drew {g['draw']}, lost {g['loss']} of {g['games']} games"
                )

    _register_control(exp)

    @exp.command("retention")
    def retention(
        out: Path = typer.Option(..., "--out", help="Experiment folder."),
        preset: str = typer.Option(
            "tiny-learn", "--preset", help="Preset of the specialists and recoveries."
        ),
        quick: bool = typer.Option(
            False, "--quick", help="Two-step specialists, X1 and X2, one recovery step."
        ),
        specialist_steps: int = typer.Option(None, "--specialist-steps", help="Default 30 (2 with --quick)."),
        recovery_steps: int = typer.Option(None, "--recovery-steps", help="Default 5 (1 with --quick)."),
        operators: str = typer.Option(
            None, "--operators", help="Comma-separated crossovers (default X1-X9)."
        ),
        specialists: str = typer.Option(
            "rl",
            "--specialists",
            help="How the specialists are made: rl (single-task RL runs, then recovery runs) or gold (the "
            "engine's update on gold answers of training problems, >= 10 points above the base; children "
            "scored at birth over --seeds operator seeds, with intervals).",
        ),
        seeds: int = typer.Option(None, "--seeds", help="gold: operator seeds per crossover (default 3)."),
        probe_every: int = typer.Option(
            0,
            "--probe-every",
            help="gold: also score each specialist on its own task every K steps (its gain as it trains).",
        ),
        tasks: str = typer.Option(
            None,
            "--tasks",
            help="gold: the specialists' two task types, comma-separated (default code_o,code_i; any installed "
            "type, e.g. arith,code_o: `populora tasks list`).",
        ),
        overrides: list[str] = typer.Option([], "--set", help="key=value for every run (repeatable)."),
    ) -> None:
        """Two single-task specialists, a child per crossover operator, probed at birth and after recovery
        (rl), or at birth with intervals over probe items and operator seeds (gold)."""
        from populora.config import ConfigError
        from populora.experiment.page import retention_rows
        from populora.experiment.retention import run_retention
        from populora.names import OPERATORS

        ops = [o.strip() for o in operators.split(",") if o.strip()] if operators else None
        for op in ops or []:
            if op not in OPERATORS or not op.startswith("X"):
                fail(f"--operators: {op!r} is not a crossover; use X1..X9")
        if specialists not in ("rl", "gold"):
            fail(f"--specialists {specialists!r}: use rl or gold")
        if seeds is not None and (specialists != "gold" or seeds < 1):
            fail("--seeds N (N >= 1) goes with --specialists gold (the rl form makes one child per operator)")
        if probe_every and (specialists != "gold" or probe_every < 0):
            fail(
                "--probe-every K (K >= 1) goes with --specialists gold; the rl form's runs have their own probe"
            )
        if tasks is not None and specialists != "gold":
            fail("--tasks goes with --specialists gold (the rl form trains the code_o and code_i pair)")
        try:
            if specialists == "gold":
                from populora.experiment.gold_retention import (
                    gold_rows_table,
                    run_gold_retention,
                    specialist_tasks,
                )

                pair = specialist_tasks([t.strip() for t in tasks.split(",") if t.strip()] if tasks else None)

                result = run_gold_retention(
                    out,
                    preset,
                    quick,
                    specialist_steps,
                    ops,
                    seeds,
                    overrides,
                    log=typer.echo,
                    probe_every=probe_every,
                    tasks=pair,
                )
                _print_table(*gold_rows_table(result))
                return
            result = run_retention(
                out, preset, quick, specialist_steps, recovery_steps, ops, overrides, log=typer.echo
            )
        except ConfigError as exc:
            fail(str(exc))
        head, rows = retention_rows(result)
        _print_table(head, rows)


def _register_control(exp: typer.Typer) -> None:
    from populora.experiment.controlled import CONTROLS

    @exp.command(
        "control",
        context_settings={"allow_extra_args": True, "ignore_unknown_options": True, "help_option_names": []},
    )
    def control(
        ctx: typer.Context,
        name: str = typer.Argument(..., help=f"Which control: {', '.join(CONTROLS)}."),
    ) -> None:
        """The controlled experiments of docs/learning.md (`NAME --help` lists each one's options):
        gold (the update on gold answers), rl (RL of one student without teachers), teacher (one teacher
        rewarded for validity alone), trace-share RUN... (what a run's students learned on code_o)."""
        import importlib

        if name not in CONTROLS:
            fail(f"control {name!r}: unknown; use one of {', '.join(CONTROLS)}")
        importlib.import_module(CONTROLS[name]).main(list(ctx.args))


def _print_table(head: list[str], rows: list[list[str]]) -> None:
    import html

    from rich.console import Console
    from rich.table import Table

    table = Table(*head)
    for r in rows:
        table.add_row(*[html.unescape(c) for c in r])
    Console(width=200).print(table)
