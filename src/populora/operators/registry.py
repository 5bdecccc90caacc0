"""The operator registry: `Operator`, `REGISTRY`, `apply`, the live set, and per-operator input checks.

Every operator is registered with `@operator(name, arity, kind)` on an implementation
`impl(parents, rng, **params) -> (modules, info)`; the registered `fn(parents, seed=0, **params)` validates
the parents and params, derives all randomness from `(name, seed)` (never the global RNG), and returns a
fresh `LoRAAdapter` with the parents' modules and alpha and the first parent's rank (parents of other ranks are
resized to it first, `populora.operators.ranks`; M6 with `rank_range` moves the rank). Defaults are the implementation's keyword-only
defaults; the one-line maths is the first line of its docstring.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field

import torch

from populora import names
from populora.lora.adapter import AdapterError, LoRAAdapter
from populora.operators.linalg import threads
from populora.operators.ranks import to_first_rank


class OperatorError(ValueError):
    """An unknown operator, a wrong number of parents or a bad hyperparameter; the message says the fix."""


@dataclass(frozen=True)
class Operator:
    """One registry entry: `fn(parents, seed=0, **params) -> LoRAAdapter` taking `arity` parents."""

    name: str
    arity: int
    fn: Callable[..., LoRAAdapter]
    defaults: dict = field(default_factory=dict)
    kind: str = "mutation"  # "mutation" | "crossover" | "identity"
    summary: str = ""  # the maths in one line
    dense: bool = False  # needs the dense d x n delta (element-wise maths) rather than factored algebra


REGISTRY: dict[str, Operator] = {}
# The names a reader knows each operator by (model merging, evolution strategies); `populora evolve --list` shows
# them beside the ids. The maths is each implementation's docstring (docs/operators.md).
KNOWN_AS: dict[str, str] = {
    "M1": "SVD jitter+rotation",
    "M2": "noise on some slots",
    "M3": "SVD dropout",
    "M4": "Gaussian noise",
    "M5": "uniform noise on A",
    "M6": "rank mutation",
    "X1": "DARE",
    "X2": "uniform crossover",
    "X3": "SVD splice",
    "X4": "extrapolation",
    "X5": "task arithmetic",
    "X6": "TIES",
    "X7": "DELLA",
    "X8": "SLERP",
    "X9": "Fisher merging",
    "I1": "copy (control)",
    "I2": "copy of parent 1",
}
# The operators the paper's live population uses (M1-M4, X1-X4); evolution's default operator set.
LIVE_OPERATORS = names.LIVE_OPERATORS


class Rng:
    """Independent, reproducible generators per (operator, seed, key): module order never changes the draws."""

    def __init__(self, op: str, seed: int) -> None:
        self.op, self.seed = op, int(seed)

    def gen(self, *key: object) -> torch.Generator:
        h = hashlib.blake2b(repr((self.op, self.seed, *key)).encode(), digest_size=8).digest()
        return torch.Generator().manual_seed(int.from_bytes(h, "little") & (2**63 - 1))


def _all_finite(t: torch.Tensor) -> bool:
    """True iff no NaN/Inf; one reduction (a NaN or Inf poisons the sum), exact check only if the sum overflows."""
    return bool(torch.isfinite(t.sum())) or bool(torch.isfinite(t).all())


def _check_parents(name: str, arity: int, parents: Sequence[LoRAAdapter]) -> list[LoRAAdapter]:
    if isinstance(parents, LoRAAdapter):
        parents = [parents]
    parents = list(parents)
    if len(parents) != arity:
        what = "one parent" if arity == 1 else f"{arity} parents"
        raise OperatorError(f"operator {name} takes {what}, got {len(parents)}.")
    for i, p in enumerate(parents):
        if not isinstance(p, LoRAAdapter):
            raise OperatorError(f"operator {name}: parent {i} is a {type(p).__name__}, not a LoRAAdapter.")
        for mod, (a, b) in p.modules.items():
            if not _all_finite(a) or not _all_finite(b):
                raise AdapterError(
                    f"operator {name}: parent {i} module {mod!r} contains NaN or Inf; "
                    "refusing to breed from a broken adapter."
                )
    for p in parents[1:]:
        parents[0].check_compatible(p, same_rank=False)  # other ranks are resized (populora.operators.ranks)
    return parents


def _child_metadata(name: str, seed: int, params: dict, parents: list[LoRAAdapter], info: dict) -> dict:
    """The child's metadata; `lineage["operator"]` is the operator actually applied (see `applied_operator`).

    An operator that declines its own maths (X4 below its cosine gate) returns `info["applied"] =
    {"operator": ..., "params": ..., "reason": ...}`; the lineage then names that operator and its params (so
    `apply(lineage["operator"], parents, seed=lineage["seed"], **lineage["params"])` rebuilds the child), and
    keeps the asked-for one in `lineage["requested"]` with the reason in `lineage["declined"]`.
    """
    meta: dict = {}
    for key in ("peft_config", "extra_tensors"):  # so save_peft writes a folder like the first parent's
        if key in parents[0].metadata:
            meta[key] = parents[0].metadata[key]
    applied = info.pop("applied", None)
    meta["lineage"] = {
        "operator": applied["operator"] if applied else name,
        "requested": name,
        "seed": seed,
        "params": dict(applied["params"] if applied else params),
        "parents": [p.metadata.get("source") for p in parents],
    }
    if applied:
        meta["lineage"]["declined"] = applied["reason"]
        meta["lineage"]["requested_params"] = dict(params)
    meta["info"] = info
    return meta


def applied_operator(child: LoRAAdapter) -> str:
    """The operator that actually produced `child` (e.g. "X5" when X4 declined to extrapolate).

    Equal to the requested name except when an operator declines; `child.metadata["lineage"]` has the
    details (`requested`, `declined`, `params`). Trainers should log this name in events and lineage.
    """
    lineage = child.metadata.get("lineage") or {}
    if "operator" not in lineage:
        raise OperatorError("this adapter was not made by populora.operators.apply (no lineage metadata).")
    return lineage["operator"]


def operator(name: str, arity: int, kind: str, dense: bool = False):
    """Register `impl(parents, rng, **params) -> (modules, info)` as operator `name`."""

    def deco(impl):
        sig = inspect.signature(impl)
        defaults = {
            k: p.default for k, p in sig.parameters.items() if p.kind is inspect.Parameter.KEYWORD_ONLY
        }
        summary = (impl.__doc__ or "").strip().splitlines()[0]

        @functools.wraps(impl)
        def fn(parents: Sequence[LoRAAdapter], seed: int = 0, **params) -> LoRAAdapter:
            unknown = sorted(set(params) - set(defaults))
            if unknown:
                valid = ", ".join(defaults) or "none"
                raise OperatorError(f"operator {name} has no parameter {unknown[0]!r}; valid: {valid}.")
            with threads(1):  # 2 x slots small reductions: parallel regions cost more than they save
                ps = _check_parents(name, arity, parents)
            merged = {**defaults, **params}
            rng = Rng(name, seed)
            # Mixed ranks: the child takes the first parent's rank; the others are re-expressed at it first.
            with threads(1):
                ps, rank_info = to_first_rank(ps, lambda i: rng.gen("resize", i))
            # factored operators are many small LAPACK calls: one thread is faster (see linalg.threads);
            # dense ones manage threads themselves (big GEMMs parallel, small factorizations single)
            with nullcontext() if dense else threads(1):
                modules, info = impl(ps, rng, **merged)
            info.update(rank_info)
            child = LoRAAdapter(
                modules=modules, alpha=ps[0].alpha, metadata=_child_metadata(name, seed, merged, ps, info)
            )
            return child

        REGISTRY[name] = Operator(
            name=name, arity=arity, fn=fn, defaults=defaults, kind=kind, summary=summary, dense=dense
        )
        return fn

    return deco


def get(name: str) -> Operator:
    key = name.strip().upper()
    if key not in REGISTRY:
        raise OperatorError(f"unknown operator {name!r}; choose one of {', '.join(REGISTRY)}.")
    return REGISTRY[key]


def apply(name: str, parents: Sequence[LoRAAdapter], seed: int = 0, **params) -> LoRAAdapter:
    """Run operator `name` ("M1".."M6", "X1".."X9", "I1", "I2") on `parents`; returns the child adapter.

    The same (name, parents, seed, params) always gives the same child. For X4 and I2 `parents[0]` is the
    better parent (higher rating).
    """
    return get(name).fn(parents, seed=seed, **params)


def check_fraction(op: str, key: str, value: float, lo_open: bool = False, hi_open: bool = False) -> float:
    """Raise OperatorError unless `value` lies in [0, 1] (with open ends as asked)."""
    v = float(value)
    ok = (v > 0 if lo_open else v >= 0) and (v < 1 if hi_open else v <= 1)
    if not ok:
        lo, hi = "(" if lo_open else "[", ")" if hi_open else "]"
        raise OperatorError(f"operator {op}: {key}={value} must lie in {lo}0, 1{hi}.")
    return v


def check_nonneg(op: str, key: str, value: float) -> float:
    v = float(value)
    if not v >= 0:
        raise OperatorError(f"operator {op}: {key}={value} must be >= 0.")
    return v
