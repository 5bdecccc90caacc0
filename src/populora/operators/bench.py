"""`populora bench operators`: time per child of all 17 operators on a Qwen2.5-Coder-7B-shaped adapter, vs PEFT.

What is measured (one run, same process, `torch.set_num_threads(threads)`):
- every operator's wall time to produce one child from synthetic "trained-like" parents (rank 32, q/k/v/o on
  28 layers, hidden 3584, kv dim 512: 112 slots). Parents have an exponentially decaying spectrum and a random
  (non-balanced) gauge, like trained adapters; parent 2 is a sibling of parent 1 (cos ~ 0.8).
- PEFT's `add_weighted_adapter(..., combination_type="svd")` (the merge a user would otherwise pick; it is the
  same maths as X5) on a real `Qwen2ForCausalLM` with the same per-layer shapes but `layers_peft` layers, a
  vocab of 64 and an MLP width of 64 (so no 7B weights are needed; base weights are allocated uninitialised).
  PEFT merges layer by layer, so its 28-layer time is the timed layers x 28 / layers_peft. Our X5 is timed on
  the very same parents and layers, giving the like-for-like ratio; the merged deltas are compared too.
- the dense-delta operators (X1, X6, X7, X9) once more with their pre-issue-12 implementation
  (`bench_legacy.apply_legacy`) on the same parents and layers, for the old / new ratio in the same run;
  both are timed DENSE_REPEATS times, interleaved, and the medians are reported (the runs are in the JSON).
- retention of every child vs its parents (rel. Frobenius distance, cosine, effective rank, overlap, tau), for
  the sibling pair at full shape and for an unrelated pair (2 layers of the same shape).
"""

from __future__ import annotations

import json
import math
import os
import platform
import statistics
import time
from pathlib import Path

import torch

from populora.lora.adapter import LoRAAdapter
from populora.operators.linalg import threads as n_threads

SHAPES = {
    # name: layers, hidden, kv dim (k/v out features), attention heads, kv heads, rank, alpha
    "qwen2.5-coder-7b": {
        "layers": 28,
        "hidden": 3584,
        "kv": 512,
        "heads": 28,
        "kv_heads": 4,
        "rank": 32,
        "alpha": 64,
    },
    "tiny": {"layers": 2, "hidden": 64, "kv": 32, "heads": 4, "kv_heads": 2, "rank": 8, "alpha": 16},
}
GOAL_S, GOAL_DENSE_S = 2.0, 10.0
DENSE_REPEATS = 3  # the dense-delta operators are timed this many times (median reported)
DEFAULT_OUT = Path("bench/results/operators.json")


def slot_shapes(shape: dict, layers: int | None = None) -> dict[str, tuple[int, int]]:
    """{module name: (d_out, d_in)} for q/k/v/o of every layer."""
    h, kv = shape["hidden"], shape["kv"]
    out = {}
    for i in range(layers or shape["layers"]):
        for proj, dims in (("q_proj", (h, h)), ("k_proj", (kv, h)), ("v_proj", (kv, h)), ("o_proj", (h, h))):
            out[f"model.layers.{i}.self_attn.{proj}"] = dims
    return out


def _orth(n: int, k: int, g: torch.Generator) -> torch.Tensor:
    return torch.linalg.qr(torch.randn(n, k, generator=g))[0]


def synthetic_parents(
    shape: dict, layers: int | None = None, seed: int = 0
) -> tuple[LoRAAdapter, LoRAAdapter, LoRAAdapter]:
    """(parent 1, sibling of parent 1, unrelated parent): decaying spectra, random non-balanced gauges."""
    g = torch.Generator().manual_seed(seed)
    r = shape["rank"]
    spec = torch.exp(-torch.arange(r, dtype=torch.float32) / 8) * 0.05

    def factor(u, s, v):
        gauge = torch.linalg.qr(torch.randn(r, r, generator=g))[0] @ torch.diag(
            torch.rand(r, generator=g) + 0.5
        )
        b = (u * s.sqrt()) @ gauge
        a = torch.linalg.solve(gauge, (v * s.sqrt()).T)
        return a.contiguous(), b.contiguous()

    m1, m2, m3 = {}, {}, {}
    for name, (d, n) in slot_shapes(shape, layers).items():
        u, v = _orth(d, r, g), _orth(n, r, g)
        m1[name] = factor(u, spec, v)
        # sibling: 0.8 D1 + 0.6 E, E an independent delta of equal norm, re-truncated to rank r
        ue, ve = _orth(d, r, g), _orth(n, r, g)
        big_u = torch.cat([u * (0.8 * spec), ue * (0.6 * spec)], dim=1)
        big_v = torch.cat([v, ve], dim=1)
        qb, rb = torch.linalg.qr(big_u)
        qa, ra = torch.linalg.qr(big_v)
        uc, s, vch = torch.linalg.svd(rb @ ra.T)
        m2[name] = factor((qb @ uc)[:, :r], s[:r], (qa @ vch.T)[:, :r])
        m3[name] = factor(_orth(d, r, g), spec, _orth(n, r, g))
    alpha = float(shape["alpha"])
    return (
        LoRAAdapter(m1, alpha, {"source": "synthetic-1"}),
        LoRAAdapter(m2, alpha, {"source": "synthetic-2"}),
        LoRAAdapter(m3, alpha, {"source": "synthetic-3"}),
    )


def _subset(ad: LoRAAdapter, layers: int) -> LoRAAdapter:
    keep = {f"model.layers.{i}." for i in range(layers)}
    return LoRAAdapter({k: v for k, v in ad.modules.items() if any(k.startswith(p) for p in keep)}, ad.alpha)


def _timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def time_peft_svd(shape: dict, p1: LoRAAdapter, p2: LoRAAdapter, layers: int) -> dict:
    """Time PEFT's svd `add_weighted_adapter` on a `layers`-layer Qwen2 with the shape's per-layer dims."""
    import peft
    from peft import LoraConfig, get_peft_model
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from populora.lora.peft_io import quiet_peft_deprecation

    cfg = Qwen2Config(
        hidden_size=shape["hidden"],
        num_attention_heads=shape["heads"],
        num_key_value_heads=shape["kv_heads"],
        num_hidden_layers=layers,
        intermediate_size=64,
        vocab_size=64,
        max_position_embeddings=128,
        tie_word_embeddings=False,
    )
    with torch.device("meta"):
        model = Qwen2ForCausalLM(cfg)
    model = model.to_empty(device="cpu")  # uninitialised base weights: PEFT's merge never reads them
    lcfg = LoraConfig(r=p1.rank, lora_alpha=p1.alpha, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"])
    with quiet_peft_deprecation():
        pm = get_peft_model(model, lcfg, adapter_name="p1")
        pm.add_adapter("p2", lcfg)
    with torch.no_grad():
        for name, mod in pm.base_model.model.named_modules():
            if hasattr(mod, "lora_A") and "p1" in getattr(mod, "lora_A", {}):
                for ad_name, src in (("p1", p1), ("p2", p2)):
                    a, b = src.modules[name]
                    mod.lora_A[ad_name].weight.copy_(a)
                    mod.lora_B[ad_name].weight.copy_(b)
    _, secs = _timed(
        lambda: pm.base_model.add_weighted_adapter(["p1", "p2"], [0.5, 0.5], "merged", combination_type="svd")
    )
    merged = {}
    for name, mod in pm.base_model.model.named_modules():
        if hasattr(mod, "lora_A") and "merged" in getattr(mod, "lora_A", {}):
            merged[name] = (
                mod.lora_A["merged"].weight.detach().clone(),
                mod.lora_B["merged"].weight.detach().clone(),
            )
    return {
        "seconds": secs,
        "layers": layers,
        "peft_version": peft.__version__,
        "merged": LoRAAdapter(merged, alpha=float(pm.peft_config["merged"].lora_alpha)),
    }


def peft_linear_error(p1: LoRAAdapter, p2: LoRAAdapter) -> float:
    """Relative error of PEFT's factor-space `linear` merge (weights 0.5/0.5) vs the true average delta.

    PEFT scales A_k and B_k by sqrt(w_k s_k) and sums the factors (lora/model.py); reproduced here on our
    factors so the gauge pitfall (A, B are defined only up to an invertible r x r map) is measured here.
    """
    from populora.operators.retention import distances, midpoint

    s = p1.scale
    mods = {}
    for name in p1.modules:
        a1, b1 = p1.modules[name]
        a2, b2 = p2.modules[name]
        w = math.sqrt(0.5 * s)
        mods[name] = (w * a1 + w * a2, w * b1 + w * b2)
    merged = LoRAAdapter(mods, alpha=float(p1.rank))  # scale 1: the weights already carry it
    return distances(merged, midpoint(p1, p2))["rel_fro"]


def _fmt(v, f: str = ".2f") -> str:
    return "—" if v is None else format(v, f)


def run(
    quick: bool = False,
    out: Path | None = DEFAULT_OUT,
    shape_name: str = "qwen2.5-coder-7b",
    threads: int = 2,
    ops: list[str] | None = None,
    peft_layers: int | None = None,
    dense_layers: int | None = 4,
    legacy: bool = True,
) -> dict:
    """Time and score all operators; print a table; write JSON to `out` (None: don't write).

    Factored operators are timed on all layers (4 with `quick`). Dense-delta operators (X1, X6, X7, X9) and
    PEFT's merge are timed on `dense_layers` / `peft_layers` layers and scaled to the full depth: every layer
    has the same shapes and these paths are strictly per slot, so the time is linear in the layer count.
    """
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        return _run(quick, out, shape_name, threads, ops, peft_layers, dense_layers, legacy)
    finally:  # the thread count is process-wide: leave it as we found it (tests share the process)
        torch.set_num_threads(before)


def _run(
    quick: bool,
    out: Path | None,
    shape_name: str,
    threads: int,
    ops: list[str] | None,
    peft_layers: int | None,
    dense_layers: int | None,
    legacy: bool = True,
) -> dict:
    from rich.console import Console
    from rich.table import Table

    from populora.operators import REGISTRY, apply, retention
    from populora.operators.bench_legacy import MERGES as LEGACY
    from populora.operators.bench_legacy import apply_legacy

    load_start = os.getloadavg()[0]  # the box is shared: record how busy it was
    console = Console(width=150)
    shape = dict(SHAPES[shape_name])
    layers = min(4, shape["layers"]) if quick else shape["layers"]
    peft_layers = peft_layers or 1
    ops = ops or list(REGISTRY)
    console.print(
        f"[bold]operators bench[/]: shape {shape_name} (rank {shape['rank']}, {layers} of "
        f"{shape['layers']} layers timed), {threads} threads"
    )
    # warm-up: the first linalg calls pay lazy library initialisation, which is no operator's cost
    w1, w2, _ = synthetic_parents(SHAPES["tiny"], 1, seed=1)
    for name in ops:
        apply(name, [w1] if REGISTRY[name].arity == 1 else [w1, w2], seed=0)
    with n_threads(1):  # many small QRs (see linalg.threads)
        p1, p2, p3 = synthetic_parents(shape, layers)
    dense_layers = min(dense_layers or layers, layers)
    d1, d2 = _subset(p1, dense_layers), _subset(p2, dense_layers)

    results: dict[str, dict] = {}
    for name in ops:
        op = REGISTRY[name]
        timed_layers = dense_layers if op.dense else layers
        scale_to_full = shape["layers"] / timed_layers
        parents = ([p1] if op.arity == 1 else [p1, p2]) if not op.dense else [d1, d2]
        # dense operators: the median of DENSE_REPEATS runs, new and old interleaved, so that the shared box's
        # load swings (+-10% between consecutive runs here) hit both alike
        runs, old_runs = [], []
        for _ in range(DENSE_REPEATS if op.dense else 1):
            child, secs = _timed(lambda op=op, parents=parents: apply(op.name, parents, seed=0))
            runs.append(secs)
            if legacy and name in LEGACY:  # the old implementation, same parents, same layers, same process
                old_runs.append(
                    _timed(lambda name=name, parents=parents: apply_legacy(name, parents, seed=0))[1]
                )
        secs = statistics.median(runs)
        old_secs = statistics.median(old_runs) if old_runs else None
        ret = retention.retention(child, parents)
        unrel = (
            retention.distances(
                apply(op.name, [p1] if op.arity == 1 else [_subset(p1, 2), _subset(p3, 2)], seed=0),
                _subset(p1, 2),
            )
            if op.arity == 2
            else None
        )
        full_secs = secs * scale_to_full
        goal = GOAL_DENSE_S if op.dense else GOAL_S
        results[name] = {
            "kind": op.kind,
            "dense": op.dense,
            "summary": op.summary,
            "defaults": op.defaults,
            "layers_timed": timed_layers,
            "seconds_timed": secs,
            "seconds_per_child_runs": [x * scale_to_full for x in runs],
            "seconds_per_child": full_secs,
            "seconds_per_child_old": old_secs * scale_to_full if old_secs is not None else None,
            "speedup_vs_old": old_secs / secs if old_secs is not None and secs > 0 else None,
            "goal_s": goal,
            "meets_goal": full_secs < goal,
            "retention": {
                "rel_fro_p1": ret["parent1"]["rel_fro"],
                "cos_p1": ret["parent1"]["cos"],
                "rel_fro_p2": ret.get("parent2", {}).get("rel_fro"),
                "cos_p2": ret.get("parent2", {}).get("cos"),
                "norm_ratio_p1": ret["parent1"]["norm_ratio"],
                "erank_child": ret["parent1"]["erank_child"],
                "erank_p1": ret["parent1"]["erank_parent"],
                "overlap_left_p1": ret["parent1"]["overlap_left"],
                "tau": ret.get("truncation_loss", {}).get("tau"),
                "unrelated_rel_fro_p1": unrel["rel_fro"] if unrel else None,
                "unrelated_cos_p1": unrel["cos"] if unrel else None,
            },
        }
        was = f" (old implementation {old_secs * scale_to_full:.2f} s)" if old_secs is not None else ""
        spread = (
            f" (runs {min(runs) * scale_to_full:.2f}-{max(runs) * scale_to_full:.2f})"
            if len(runs) > 1
            else ""
        )
        console.print(
            f"  {name}: {full_secs:.2f} s{' (extrapolated)' if scale_to_full != 1 else ''}{spread}{was}"
        )

    # PEFT's svd merge vs our X5 on the same layers (like-for-like), then scaled to the full depth
    q1, q2 = _subset(p1, peft_layers), _subset(p2, peft_layers)
    console.print(f"  PEFT add_weighted_adapter(svd) on {peft_layers} layer(s) ...")
    peft_res = time_peft_svd(shape, q1, q2, peft_layers)
    x5, x5_secs = _timed(lambda: apply("X5", [q1, q2], seed=0))
    peft_vs_x5 = retention.distances(peft_res["merged"], x5)
    peft_full = peft_res["seconds"] * shape["layers"] / peft_layers
    peft = {
        "what": "peft LoraModel.add_weighted_adapter(['p1','p2'], [0.5, 0.5], combination_type='svd') "
        "(defaults: full torch.linalg.svd per module) on a Qwen2 with the shape's per-layer dims",
        "peft_version": peft_res["peft_version"],
        "layers_timed": peft_layers,
        "seconds_timed": peft_res["seconds"],
        "seconds_per_child": peft_full,
        "x5_seconds_same_layers": x5_secs,
        "ratio_peft_over_x5": peft_res["seconds"] / x5_secs,
        "merged_delta_rel_diff_vs_x5": peft_vs_x5["rel_fro"],
        "peft_linear_factor_space_rel_error": peft_linear_error(p1, p2),
    }
    for r in results.values():
        r["peft_svd_over_this"] = peft_full / r["seconds_per_child"] if r["seconds_per_child"] > 0 else None

    table = Table(
        title=f"Operators at {shape_name} shape (rank {shape['rank']}, {shape['layers']} layers, "
        f"{threads} threads); parents: siblings (cos {retention.distances(p2, p1)['cos']:.2f})"
    )
    for col in (
        "op",
        "s/child",
        "old s/child",
        "old ÷ new",
        "goal",
        "PEFT svd ×",
        "ρF p1",
        "cos p1",
        "cos p2",
        "erank c/p1",
        "τ",
        "cos unrel.",
    ):
        table.add_column(col, justify="right" if col != "op" else "left")
    for name, r in results.items():
        rt = r["retention"]
        table.add_row(
            name,
            _fmt(r["seconds_per_child"]),
            _fmt(r["seconds_per_child_old"]),
            _fmt(r["speedup_vs_old"], ".1f"),
            ("<10 ΔW" if r["dense"] else "<2") + (" ✓" if r["meets_goal"] else " ✗"),
            _fmt(r["peft_svd_over_this"], ".1f"),
            _fmt(rt["rel_fro_p1"]),
            _fmt(rt["cos_p1"], ".3f"),
            _fmt(rt["cos_p2"], ".3f"),
            f"{rt['erank_child']:.1f}/{rt['erank_p1']:.1f}",
            _fmt(rt["tau"], ".3f"),
            _fmt(rt["unrelated_cos_p1"], ".3f"),
        )
    console.print(table)
    console.print(
        f"PEFT svd merge: {peft_full:.1f} s per child at {shape['layers']} layers "
        f"({peft_res['seconds']:.1f} s for {peft_layers} layer(s)); our X5 on the same layers "
        f"{x5_secs:.3f} s -> PEFT/X5 = {peft['ratio_peft_over_x5']:.0f}x; merged deltas differ by "
        f"{peft['merged_delta_rel_diff_vs_x5']:.1e} (rel. Frobenius). PEFT's factor-space 'linear' merge "
        f"is off by {peft['peft_linear_factor_space_rel_error']:.2f} from the true average."
    )

    report = {
        "bench": "operators",
        "shape": shape_name,
        **{k: shape[k] for k in ("rank", "alpha", "hidden", "kv")},
        "layers": shape["layers"],
        "layers_timed": layers,
        "dense_layers_timed": dense_layers,
        "quick": quick,
        "threads": threads,
        "torch": torch.__version__,
        "cpu_count": os.cpu_count(),
        "loadavg_1min_start_end": [load_start, os.getloadavg()[0]],
        "legacy_compared": bool(legacy),
        "machine": platform.machine(),
        "goal_s": GOAL_S,
        "goal_dense_s": GOAL_DENSE_S,
        "parents_cos": retention.distances(p2, p1)["cos"],
        "operators": results,
        "peft_svd": peft,
    }
    if out is not None:
        out = Path(out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(report, indent=2, default=str) + "\n")
        console.print(f"wrote {out}")
    return report


def markdown(report: dict) -> tuple[str, str]:
    """(operator table, retention table) in Markdown from a bench report (for docs/operators.md)."""
    from populora.operators import LIVE_OPERATORS

    peft = report["peft_svd"]
    ops = report["operators"]
    head = (
        "| op | kind | maths (one line) | s / child | old impl. s / child | old ÷ new | goal | PEFT svd ÷ this |\n"
        "|---|---|---|---|---|---|---|---|\n"
    )
    rows = []
    for name, r in ops.items():
        live = " (live)" if name in LIVE_OPERATORS else ""
        goal = ("< 10 s, dense ΔW" if r["dense"] else "< 2 s") + (" ✓" if r["meets_goal"] else " ✗")
        ratio = r.get("peft_svd_over_this")
        rows.append(
            f"| {name}{live} | {r['kind']} | {r['summary'].replace('|', '∣').replace('<', '&lt;')} | "
            f"{r['seconds_per_child']:.2f} | {_fmt(r.get('seconds_per_child_old'))} | "
            f"{_fmt(r.get('speedup_vs_old'), '.1f')} | {goal} | {_fmt(ratio, '.0f')}× |"
        )
    op_table = head + "\n".join(rows)
    ret_head = (
        "| op | ρF vs P1 | cos vs P1 | cos vs P2 | ‖D‖ ratio | erank child / P1 | top-k overlap (U) | τ | "
        "cos vs P1, unrelated parents |\n|---|---|---|---|---|---|---|---|---|\n"
    )
    ret_rows = []
    for name, r in ops.items():
        rt = r["retention"]
        ret_rows.append(
            f"| {name} | {_fmt(rt['rel_fro_p1'])} | {_fmt(rt['cos_p1'], '.3f')} | "
            f"{_fmt(rt['cos_p2'], '.3f')} | {_fmt(rt['norm_ratio_p1'])} | "
            f"{rt['erank_child']:.1f} / {rt['erank_p1']:.1f} | {_fmt(rt['overlap_left_p1'])} | "
            f"{_fmt(rt['tau'], '.3f')} | {_fmt(rt['unrelated_cos_p1'], '.3f')} |"
        )
    note = (
        f'\n\nPEFT `add_weighted_adapter(combination_type="svd")`: {peft["seconds_per_child"]:.0f} s per child '
        f"({peft['seconds_timed']:.1f} s for {peft['layers_timed']} layer(s) × {report['layers']}); our X5 "
        f"(the same maths) on the same layer(s): {peft['x5_seconds_same_layers']:.2f} s, "
        f"**{peft['ratio_peft_over_x5']:.0f}× faster**; merged deltas agree to "
        f"{peft['merged_delta_rel_diff_vs_x5']:.0e}."
    )
    return op_table + note, ret_head + "\n".join(ret_rows)
