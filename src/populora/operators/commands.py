"""CLI: `populora evolve OP --parent DIR [--parent DIR] --out DIR`, `populora evolve --list`, `populora bench operators`.

Works on PEFT LoRA folders of any model. Heavy imports (torch, peft) happen inside the commands; user errors
(unknown operator, bad --set, missing or incompatible adapters) print one line and exit with code 2.
"""

from __future__ import annotations

import json
from pathlib import Path

import typer

from populora.cli_errors import fail


def parse_set(items: list[str]) -> dict:
    """`k=v` strings -> params; values parsed as JSON (numbers, true/false, null), else kept as strings."""
    params = {}
    for item in items:
        if "=" not in item:
            raise ValueError(f"--set {item!r} is not key=value (e.g. --set sigma=0.2).")
        key, raw = item.split("=", 1)
        key, raw = key.strip(), raw.strip()
        if raw.lower() in ("none", "null"):
            params[key] = None
            continue
        try:
            params[key] = json.loads(raw.lower() if raw.lower() in ("true", "false") else raw)
        except json.JSONDecodeError:
            params[key] = raw
    return params


def check_param_types(operator, params: dict) -> None:
    """Raise ValueError naming the parameter, its type and default when a `--set` value has the wrong type.

    A number parameter (default 0.1) needs a number and a flag (default True) true/false; string-valued ones
    (X1 combine, X3 k, ...) are checked by the operator itself. Unknown names are left to the registry, whose
    message lists the valid ones."""
    for key, value in params.items():
        if key not in operator.defaults:
            continue
        default = operator.defaults[key]
        if isinstance(default, bool):
            if not isinstance(value, bool):
                raise ValueError(
                    f"--set {key}={value!r}: {operator.name}'s parameter {key} is true or false "
                    f"(default {str(default).lower()}), e.g. --set {key}={str(not default).lower()}."
                )
        elif isinstance(default, int | float) and (
            isinstance(value, bool) or not isinstance(value, int | float)
        ):
            kind = "an integer" if isinstance(default, int) else "a number"
            raise ValueError(
                f"--set {key}={value!r}: {operator.name}'s parameter {key} is {kind} (default {default}), "
                f"e.g. --set {key}={default}."
            )


def _list_table():
    """One line per operator (80 columns hold it): name, kind, parents, defaults; the maths is one
    operator's view (`populora evolve OP --list`) or docs/operators.md."""
    from rich.table import Table

    from populora.operators import LIVE_OPERATORS, REGISTRY
    from populora.operators.registry import KNOWN_AS

    table = Table(
        title="PopuLoRA operators: M mutation, X crossover, I identity (* = the live set)",
        caption="† works on the dense ΔW. Maths: populora evolve OP --list, docs/operators.md.",
        box=None,
        pad_edge=False,
    )
    for col in ("op", "known as", "parents", "defaults (--set key=value)"):
        table.add_column(col, no_wrap=col != "defaults (--set key=value)")
    for name, op in REGISTRY.items():
        defaults = " ".join(f"{k}={v}" for k, v in op.defaults.items()) or "-"
        live = "*" if name in LIVE_OPERATORS else ""
        known = KNOWN_AS.get(name, op.kind) + (" †" if op.dense else "")
        table.add_row(name + live, known, str(op.arity), defaults)
    return table


def _describe(operator) -> str:
    """One operator in full: kind, parents, defaults and the maths."""
    from populora.operators import LIVE_OPERATORS
    from populora.operators.registry import KNOWN_AS

    defaults = ", ".join(f"{k}={v}" for k, v in operator.defaults.items()) or "none"
    return "\n".join(
        [
            f"{operator.name}: {operator.kind}"
            + (f", known as {KNOWN_AS[operator.name]}" if operator.name in KNOWN_AS else "")
            + (" (dense ΔW)" if operator.dense else "")
            + (", in the live set" if operator.name in LIVE_OPERATORS else ""),
            f"  parents:  {operator.arity}",
            f"  defaults: {defaults}",
            f"  maths:    {operator.summary}",
        ]
    )


def _retention_table(child, parents, seconds: float):
    from rich.table import Table

    from populora.operators import retention

    rep = retention.retention(child, parents)
    tau = rep.pop("truncation_loss", {}).get("tau")
    title = (
        f"child vs parents ({seconds:.2f} s"
        + (f", truncation loss τ = {tau:.3f}" if tau is not None else "")
        + ")"
    )
    table = Table(title=title)
    for col in ("vs", "rel.Fro", "cos", "norm ratio", "erank c/p", "overlap L/R"):
        table.add_column(col, justify="right" if col != "vs" else "left")
    for who, m in rep.items():
        erank = f"{m['erank_child']:.1f}/{m['erank_parent']:.1f}" if "erank_child" in m else "—"
        overlap = f"{m['overlap_left']:.2f}/{m['overlap_right']:.2f}" if "overlap_left" in m else "—"
        table.add_row(who, f"{m['rel_fro']:.3f}", f"{m['cos']:.3f}", f"{m['norm_ratio']:.3f}", erank, overlap)
    return table


def _check_out(out: Path, parents: list[Path], force: bool) -> None:
    """Refuse to replace a parent (or a folder holding one) always, and any other existing folder without --force.

    `save_peft` replaces the whole --out folder, so writing over a parent's folder, or over a folder that
    contains a parent, would delete that parent.
    """
    dest = out.expanduser().resolve()
    for p in parents:
        src = p.expanduser().resolve()
        if dest == src or dest in src.parents:
            fail(f"--out {out} would overwrite the parent {p}; write the child to a new folder.")
    if dest.exists() and not dest.is_dir():
        fail(f"--out {out} is a file; pass a folder path for the child.")
    if dest.is_dir() and any(dest.iterdir()) and not force:
        fail(
            f"--out {out} already exists and is not empty; choose a new folder or pass --force to replace it."
        )


def register(app: typer.Typer, bench: typer.Typer) -> None:
    @app.command("evolve")
    def evolve(
        op: str = typer.Argument(None, help="Operator: M1-M6 (one parent), X1-X9 (two), I1, I2. See --list."),
        parent: list[Path] = typer.Option(
            None,
            "--parent",
            "-p",
            help="PEFT LoRA folder (repeat for crossovers; for X4 and I2 the first is the better parent).",
        ),
        out: Path = typer.Option(None, "--out", "-o", help="Folder for the child (PEFT format)."),
        seed: int = typer.Option(0, "--seed", help="Random seed: the same seed gives the same child."),
        sets: list[str] = typer.Option(
            None, "--set", help="Operator parameter key=value (repeatable), e.g. --set sigma=0.2."
        ),
        list_ops: bool = typer.Option(
            False, "--list", help="List operators, parents and defaults; with OP, that operator's maths."
        ),
        force: bool = typer.Option(
            False,
            "--force",
            help="Replace an existing --out folder (never a parent, nor a folder holding one).",
        ),
    ) -> None:
        """Breed a child LoRA adapter from PEFT folders with one of the 17 weight-space operators."""
        from rich.console import Console

        console = Console()
        if list_ops:
            if op:
                from populora.operators import OperatorError, get

                try:
                    typer.echo(_describe(get(op)))
                except OperatorError as e:
                    fail(str(e))
                return
            console.print(_list_table())
            return
        if not op:
            fail("give an operator (e.g. `populora evolve M1 --parent DIR --out DIR`) or --list.")
        if not parent:
            fail("give the parent adapter folder(s) with --parent DIR.")
        if out is None:
            fail("give the child's folder with --out DIR.")
        from populora.checkpoint_ref import CheckpointRefError, resolve_alias_path

        try:  # RUN/checkpoints/latest/adapters/T0 (or .../final/...) -> the checkpoint it names
            parent = [resolve_alias_path(p) for p in parent]
        except CheckpointRefError as e:
            fail(str(e))
        _check_out(out, parent, force)
        import time

        from populora.lora.adapter import AdapterError
        from populora.lora.peft_io import load_peft, save_peft
        from populora.operators import OperatorError, apply, get

        try:
            operator = get(op)
            params = parse_set(sets or [])
            check_param_types(operator, params)
            if len(parent) != operator.arity:
                fail(f"{operator.name} takes {operator.arity} parent(s) (--parent DIR), got {len(parent)}.")
            parents = [load_peft(p) for p in parent]
            t0 = time.perf_counter()
            child = apply(operator.name, parents, seed=seed, **params)
            secs = time.perf_counter() - t0
            save_peft(child, out)
        except (AdapterError, OperatorError, ValueError) as e:
            fail(str(e))
            return
        console.print(f"[bold]{operator.name}[/] ({operator.summary})")
        lineage = child.metadata.get("lineage", {})
        if lineage.get("operator", operator.name) != operator.name:  # e.g. X4 below its cosine gate
            console.print(f"{operator.name} declined ({lineage['declined']}); applied {lineage['operator']}.")
        console.print(
            f"wrote {out}: {len(child.modules)} modules, rank {child.rank}, alpha {child.alpha:g}, seed {seed}"
        )
        console.print(_retention_table(child, parents, secs))

    @bench.command("operators")
    def bench_operators(
        shape: str = typer.Option("qwen2.5-coder-7b", "--shape", help="qwen2.5-coder-7b or tiny."),
        quick: bool = typer.Option(False, "--quick", help="Time 4 layers and extrapolate to the full depth."),
        out: Path = typer.Option(None, "--out", help="JSON path (default bench/results/operators.json)."),
        threads: int = typer.Option(2, "--threads", help="torch threads."),
    ) -> None:
        """Time per child of every operator at a 7B adapter shape, vs PEFT's svd merge; retention table."""
        from populora.operators.bench import DEFAULT_OUT, SHAPES, run

        if shape not in SHAPES:
            fail(f"unknown shape {shape!r}; choose one of {', '.join(SHAPES)}.")
        run(quick=quick, out=out or DEFAULT_OUT, shape_name=shape, threads=threads)
