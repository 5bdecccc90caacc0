"""CLI: `populora pretrain-tiny` (build the bundled tiny model) and `populora bench tiny-model`."""

from __future__ import annotations

from pathlib import Path

import typer

from populora.paths import TINY_MODEL_DIR as ASSET_DIR


def register(app: typer.Typer, bench: typer.Typer) -> None:
    @app.command("pretrain-tiny")
    def pretrain_tiny(
        out: Path = typer.Option(
            ASSET_DIR, "--out", help="Folder to write the model to (a standard HF folder)."
        ),
        seed: int = typer.Option(0, "--seed", help="Seed for the corpus, the data order and the init."),
        minutes: float = typer.Option(
            48.0, "--minutes", help="Wall-clock training budget (ignored with --steps)."
        ),
        steps: int | None = typer.Option(None, "--steps", help="Exact number of steps (reproducible runs)."),
        examples: int = typer.Option(30000, "--examples", help="Corpus size in examples."),
        hidden: int = typer.Option(256, "--hidden", help="Hidden size."),
        layers: int = typer.Option(4, "--layers", help="Number of transformer layers."),
        intermediate: int = typer.Option(688, "--intermediate", help="MLP size."),
        heads: int = typer.Option(4, "--heads", help="Attention heads."),
        vocab: int = typer.Option(4096, "--vocab", help="BPE vocabulary size."),
        seq_len: int = typer.Option(512, "--seq-len", help="Training row length in tokens."),
        batch_size: int = typer.Option(8, "--batch-size", help="Rows per step."),
        lr: float = typer.Option(2e-3, "--lr", help="Peak learning rate."),
        threads: int = typer.Option(
            2, "--threads", help="torch threads (2 is best for training on 2 cores)."
        ),
        quiet: bool = typer.Option(False, "--quiet", help="No progress bar."),
        init_from: Path | None = typer.Option(
            None,
            "--init-from",
            help="Continue training this model folder (its tokenizer and weights); use a new --seed.",
        ),
        warmup: int = typer.Option(30, "--warmup", help="Warm-up steps."),
        names: str = typer.Option(
            "simple", "--names", help="Variable names in the generated programs: simple | varied."
        ),
        max_statements: int = typer.Option(
            2, "--max-statements", help="Generator difficulty: at most this many statements per program."
        ),
        level: str = typer.Option(
            "full",
            "--level",
            help="Generator statement kinds: full (loops, comprehensions, ...) | easy (one-line expressions) | "
            "graded levels of pretrain/graded.py: 1-5, 3, 1,1,2 (drawn uniformly from the list).",
        ),
        mix: str | None = typer.Option(
            None,
            "--mix",
            help="Example mixture as KIND=WEIGHT,... (kinds: student:code_o, teacher:code_f, program, ...; "
            "facts: drills of one-digit arithmetic facts such as 7 + 5 = 12, not in the default); "
            "default corpus.MIX.",
        ),
        schedule: str = typer.Option("wsd", "--schedule", help="LR schedule: wsd | cosine."),
        decay_start: int | None = typer.Option(
            None, "--decay-start", help="wsd: step where the decay begins (from pretrain_info.json)."
        ),
        bf16: bool = typer.Option(
            True, "--bf16/--fp32", help="bf16 autocast for the matmuls (weights stay float32)."
        ),
        trace: bool = typer.Option(
            False,
            "--trace/--no-trace",
            help="code_o student answers start with a ```trace block (each statement reduced one step at "
            "a time) before the ```output block.",
        ),
        trace_fraction: float = typer.Option(
            1.0,
            "--trace-fraction",
            help="With --trace: the share of code_o answers that carry the trace (the rest answer bare); "
            "below 1 the model learns both styles, a choice RL can learn to make.",
        ),
        trace_names: bool = typer.Option(
            False,
            "--trace-names",
            help="With --trace: each reduction-trace line starts with the expression as written "
            "(r = n + m = 4 + 1 = 5), so each name's value is written right after the name's turn.",
        ),
        code_f_trace: bool = typer.Option(
            False,
            "--code-f-trace",
            help="Graded levels only: every code_f student answer starts with a ```trace of the gold program on "
            "the first pair the student is shown (whose output the prompt holds), then the program.",
        ),
        student_level: str | None = typer.Option(
            None,
            "--student-level",
            help="Graded levels only: the levels student examples draw from (default: --level), e.g. "
            "1,1,1,2,3 to spend the student budget where a small model can be right; teachers keep --level.",
        ),
        flaws: str | None = typer.Option(
            None,
            "--flaws",
            help="Graded levels only: plant misconceptions (comma-separated classes, or 'all': "
            "range_end_inclusive, slice_end_inclusive, reverse_slice_forwards, sorted_reverse_ignored, "
            "mod_as_quotient, floordiv_rounds). Code_o student answers a class changes are misread in "
            "--flaw-rate of them; add the drills to --mix (flaws:code_o=2,flaws:code_i=2) for more of them, or "
            "atoms:code_o / atoms:code_i (one-statement programs around each class's feature, ~50x cheaper).",
        ),
        flaw_rate: float = typer.Option(
            0.6, "--flaw-rate", help="With --flaws: the share of examples carrying a class that are misread."
        ),
        save_every: float = typer.Option(
            0.0,
            "--save-every",
            help="Minutes between checkpoints of the model so far in OUT/checkpoint (0 = none); continue a "
            "stopped run with --init-from OUT/checkpoint.",
        ),
        grow_layers: int = typer.Option(
            0,
            "--grow-layers",
            help="With --init-from: insert N identity layers (copies of their neighbours with zero output "
            "projections, spread through the stack) before training: a deeper model that starts as the old one.",
        ),
        attention: str = typer.Option(
            "example",
            help="example: each packed example sees only itself and starts at position 0, as a prompt "
            "does at inference | row: a packed row is one causal sequence (runs before 2026-12-01).",
            metavar="<str>",
        ),
    ) -> None:
        """Generate the synthetic corpus, train tokenizer and model, and write the tiny model folder."""
        from rich.console import Console

        from populora.pretrain.corpus import parse_mix
        from populora.pretrain.train import PretrainConfig, pretrain

        if steps is not None and steps < 1:
            typer.echo("error: --steps must be >= 1", err=True)
            raise typer.Exit(2)
        if minutes <= 0 and steps is None:
            typer.echo("error: --minutes must be > 0 (or give --steps)", err=True)
            raise typer.Exit(2)
        if hidden % heads:
            typer.echo(f"error: --hidden {hidden} must be divisible by --heads {heads}", err=True)
            raise typer.Exit(2)
        if names not in ("simple", "varied"):
            typer.echo(f"error: --names must be simple or varied, got {names!r}", err=True)
            raise typer.Exit(2)
        if attention not in ("example", "row"):
            typer.echo(f"error: --attention must be example or row, got {attention!r}", err=True)
            raise typer.Exit(2)
        if schedule not in ("wsd", "cosine"):
            typer.echo(f"error: --schedule must be wsd or cosine, got {schedule!r}", err=True)
            raise typer.Exit(2)
        from populora.pretrain.graded import GradedError, is_graded_level, parse_levels

        def check_levels(flag: str, value: str) -> None:
            try:
                parse_levels(value)
            except GradedError as e:
                typer.echo(f"error: {flag}: {e}", err=True)
                raise typer.Exit(2) from None

        if is_graded_level(level):
            check_levels("--level", level)
            if trace_fraction < 1.0:
                typer.echo(
                    "error: graded levels take one answer style per task; drop --trace-fraction", err=True
                )
                raise typer.Exit(2)
        elif level not in ("easy", "full"):
            typer.echo(
                f"error: --level must be easy, full or graded levels (1-5, 1,2,3), got {level!r}", err=True
            )
            raise typer.Exit(2)
        if student_level is not None:
            if not is_graded_level(level):
                typer.echo("error: --student-level needs graded levels in --level (1-5, ...)", err=True)
                raise typer.Exit(2)
            check_levels("--student-level", student_level)
        if code_f_trace and not is_graded_level(level):
            typer.echo("error: --code-f-trace needs graded levels in --level (1-5, ...)", err=True)
            raise typer.Exit(2)
        flaw_classes: tuple[str, ...] = ()
        if flaws is not None:
            from populora.pretrain.flaws import CLASSES, FlawError, check_classes

            try:
                flaw_classes = (
                    CLASSES if flaws == "all" else check_classes(c.strip() for c in flaws.split(","))
                )
            except FlawError as e:
                typer.echo(f"error: --flaws: {e} (or 'all')", err=True)
                raise typer.Exit(2) from None
            if not is_graded_level(level):
                typer.echo("error: --flaws needs graded levels in --level (1-5, ...)", err=True)
                raise typer.Exit(2)
        if not 0.0 <= flaw_rate <= 1.0:
            typer.echo(f"error: --flaw-rate must be in [0, 1], got {flaw_rate}", err=True)
            raise typer.Exit(2)
        if save_every < 0:
            typer.echo(f"error: --save-every must be >= 0 minutes, got {save_every}", err=True)
            raise typer.Exit(2)
        if not 0.0 < trace_fraction <= 1.0:
            typer.echo(f"error: --trace-fraction must be in (0, 1], got {trace_fraction}", err=True)
            raise typer.Exit(2)
        if trace_names and not trace:
            typer.echo("error: --trace-names changes the trace's lines: add --trace", err=True)
            raise typer.Exit(2)
        if max_statements < 1:
            typer.echo("error: --max-statements must be >= 1", err=True)
            raise typer.Exit(2)
        try:
            mix_weights = parse_mix(mix) if mix else None
        except ValueError as e:
            typer.echo(f"error: --mix: {e}", err=True)
            raise typer.Exit(2) from None
        if (
            mix_weights
            and not flaw_classes
            and any(k.startswith(("flaws:", "atoms:")) and w for k, w in mix_weights.items())
        ):
            typer.echo(
                "error: --mix: the flaws:* and atoms:* drills need --flaws CLASSES (or --flaws all)", err=True
            )
            raise typer.Exit(2)
        if init_from is not None and not (init_from / "config.json").is_file():
            typer.echo(f"error: --init-from {init_from} is not a model folder (no config.json)", err=True)
            raise typer.Exit(2)
        if grow_layers:
            from transformers import AutoConfig

            from populora.pretrain.grow import GrowError, insert_after

            if init_from is None:
                typer.echo(
                    "error: --grow-layers needs --init-from MODEL (only a pretrained model is grown)",
                    err=True,
                )
                raise typer.Exit(2)
            try:
                insert_after(AutoConfig.from_pretrained(init_from).num_hidden_layers, grow_layers)
            except GrowError as e:
                typer.echo(f"error: {e}", err=True)
                raise typer.Exit(2) from None
        if out.exists() and not out.is_dir():
            typer.echo(f"error: --out {out} exists and is not a folder; choose another path", err=True)
            raise typer.Exit(2)
        cfg = PretrainConfig(
            seed=seed,
            minutes=minutes,
            steps=steps,
            n_examples=examples,
            hidden_size=hidden,
            num_layers=layers,
            intermediate_size=intermediate,
            num_heads=heads,
            num_kv_heads=heads,
            vocab_size=vocab,
            seq_len=seq_len,
            batch_size=batch_size,
            lr=lr,
            threads=threads,
            warmup_steps=warmup,
            init_from=str(init_from) if init_from else None,
            names=names,
            max_statements=max_statements,
            level=level,
            student_level=student_level,
            save_every_minutes=save_every,
            grow_layers=grow_layers,
            bf16=bf16,
            attention=attention,
            trace=trace,
            trace_fraction=trace_fraction,
            trace_names=trace_names,
            code_f_trace=code_f_trace,
            flaws=flaw_classes,
            flaw_rate=flaw_rate,
            **({"mix": mix_weights} if mix_weights else {}),
            schedule=schedule,
            decay_start=decay_start,
        )
        info = pretrain(cfg, out, progress=not quiet)
        Console().print(
            f"wrote {out}: {info['steps']} steps, final loss {info['final_train_loss']}, "
            f"val completion loss {info['val_completion_loss']}, {info['parameters']:,} parameters"
        )

    @bench.command("tiny-model")
    def bench_tiny_model(
        quick: bool = typer.Option(False, "--quick", help="Fewer problems."),
        out: Path | None = typer.Option(
            None, "--out", help="JSON path (default bench/results/tiny_model.json)."
        ),
        model: Path = typer.Option(ASSET_DIR, "--model", help="Model folder to measure."),
        max_statements: int | None = typer.Option(
            None,
            "--max-statements",
            help="Generator difficulty of the problems (default: what the model was pretrained with).",
        ),
        n: int | None = typer.Option(None, "--n", help="Problems per cell (default 48, 8 with --quick)."),
        level: str | None = typer.Option(
            None,
            "--level",
            help="Generator level of the problems (default: what the model was pretrained with): easy | full, "
            "or graded levels (1-5, 1,3,5): then per level, on the graded probe sets.",
        ),
        threads: int = typer.Option(
            2, "--threads", help="torch threads for generation (graded levels, --skills, --induction)."
        ),
        skills: bool = typer.Option(
            False,
            "--skills",
            help="Instead: the elementary skills under student accuracy (binding arguments to operands, "
            "arithmetic facts, copying strings) on one-statement code_o items, each miss read from the trace "
            "(default --out bench/results/tiny_model_skills.json).",
        ),
        induction: bool = typer.Option(
            False,
            "--induction",
            help="Instead: why code_f answers miss, per graded level (--level, default 1-5; --n items per "
            "level, default all): whether the student's program reproduces the pairs it was shown, and whether "
            "it reads the gold program's arguments, uses its operations, its constants, its shape "
            "(default --out bench/results/tiny_model_induction.json).",
        ),
        flaws: bool = typer.Option(
            False,
            "--flaws",
            help="Instead: the misconception probe, per planted class and task type (code_o, code_i): greedy "
            "right and misconceived rates, the right answer's pass@1 and pass@8 at T=1 (--n items per class, "
            "default 16, 8 with --quick; default --out bench/results/tiny_model_flaws.json).",
        ),
        flaw_set: str = typer.Option(
            "atoms",
            "--flaw-set",
            help="With --flaws: the held-out items, atoms (one-statement programs around each class's feature, "
            "the form tiny-flaws was drilled on) or graded (whole level 1-2 programs carrying the class).",
        ),
    ) -> None:
        """Valid-proposal rate and student accuracy of the tiny model per task type (and per graded level)."""
        from populora.pretrain.bench import generator_settings, run, run_levels
        from populora.pretrain.graded import GradedError, is_graded_level, parse_levels

        if not (model / "config.json").exists():
            typer.echo(
                f"error: no model at {model}; run `populora pretrain-tiny --out {model}` first", err=True
            )
            raise typer.Exit(2)
        if skills + induction + flaws > 1:
            typer.echo("error: --skills, --induction and --flaws are separate probes; pick one", err=True)
            raise typer.Exit(2)

        def own_items(flag: str) -> None:
            """A probe with its own items takes no generator settings, and --n items a cell."""
            if level is not None or max_statements is not None:
                typer.echo(f"error: {flag} has its own items; drop --level / --max-statements", err=True)
                raise typer.Exit(2)
            if n is not None and n < 1:
                typer.echo(f"error: --n must be >= 1, got {n}", err=True)
                raise typer.Exit(2)

        if flaws:
            from populora.pretrain.flaw_probe import run_flaw_probe

            own_items("--flaws")
            if flaw_set not in ("atoms", "graded"):
                typer.echo(f"error: --flaw-set must be atoms or graded, got {flaw_set!r}", err=True)
                raise typer.Exit(2)
            if (n or 0) > 64:
                typer.echo(
                    f"error: --n must be at most 64 with --flaws (the sets hold 64 a class), got {n}",
                    err=True,
                )
                raise typer.Exit(2)
            run_flaw_probe(
                model=model, per_class=n or (8 if quick else 16), out=out, threads=threads, kind=flaw_set
            )
            return
        if induction:
            from populora.pretrain.induction import run_induction

            levels = level or "1-5"
            try:
                parse_levels(levels)
            except GradedError as e:
                typer.echo(
                    f"error: --level: {e} (--induction reads graded levels, e.g. 1-5 or 1,2)", err=True
                )
                raise typer.Exit(2) from None
            if max_statements is not None:
                typer.echo("error: --induction reads the graded probe; drop --max-statements", err=True)
                raise typer.Exit(2)
            if n is not None and n < 1:
                typer.echo(f"error: --n must be >= 1, got {n}", err=True)
                raise typer.Exit(2)
            run_induction(quick=quick, out=out, model=model, n=n, levels=levels, threads=threads)
            return
        if skills:
            from populora.pretrain.skills import run_skills

            own_items("--skills")
            run_skills(quick=quick, out=out, model=model, n=n, threads=threads)
            return
        graded = level if level is not None else generator_settings(model)["level"]
        if is_graded_level(graded):
            try:
                parse_levels(graded)
            except GradedError as e:
                typer.echo(f"error: --level: {e}", err=True)
                raise typer.Exit(2) from None
            run_levels(quick=quick, out=out, model=model, n=n, levels=graded, threads=threads)
            return
        if level is not None and level not in ("easy", "full"):
            typer.echo(f"error: --level must be easy, full or graded levels (1-5), got {level!r}", err=True)
            raise typer.Exit(2)
        run(quick=quick, out=out, model=model, max_statements=max_statements, n=n, level=level)
