"""Multi-slot LoRA layers: N adapters stacked over one frozen base linear, selected per batch row.

`MultiLoRALinear` wraps an `nn.Linear` and holds `lora_A [N, r, d_in]` and `lora_B [N, d_out, r]`; row `i`
of a batch gets `base(x_i) + alpha/r * B[s_i] A[s_i] x_i` where `s_i` is its slot (`-1` = base only).
All layers of one model share a `SlotContext` that carries the per-row slots, so one forward pass (also
inside a KV-cached decode loop) serves rows of different adapters, and autograd sends each slot only the
gradient of its own rows. This is the maths of PEFT's LoRA (`lora_B(lora_A(dropout(x))) * scaling`) with
the adapters stacked instead of kept in a dict. Dropout (`SlotContext.dropout`, PEFT's `lora_dropout`) is 0
unless the engine turns it on for a train step.

Exact evaluation paths (same result up to float rounding; `SlotContext.mode`):
- "bmm" (default): rows are grouped into segments of consecutive equal slots (the engine sorts rows by
  slot, so one segment per slot), padded to one length, and all slots run in two batched matmuls
  `[n_seg, len*T, d_in] @ A[slots]^T @ B[slots]^T`. With equal segments (the usual training batch) the
  grouping is a view of `x`: no copies of weights or activations.
- "runs": two plain matmuls per segment on views of `x` (more, smaller ops; "auto" picks it when padding
  the segments to one length would add more than 25% rows).
- "gather": `A[idx]`, `B[idx]` gathered per row and applied with `bmm` (copies `r x d` per row).
A batch of a single slot always takes two plain matmuls.

Mixed ranks (issue 34): slots may hold adapters of different ranks. Storage is padded to the largest rank
`rank` (the layer's width); a slot of rank `r_s` uses the first `r_s` components, the rest of its A rows and
B columns stay exactly zero (their gradients are exactly zero, so AdamW never moves them), and its update is
scaled by its own `alpha / r_s`. The single-slot and "runs" paths slice each slot to its rank (views);
"bmm" runs at the largest rank among the batch's slots. With every slot at the full width the code paths are
the uniform-rank ones, bit for bit.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

import torch
from torch import nn

from populora.lora.adapter import AdapterError, LoRAAdapter

DEFAULT_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj")
# `lora.targets` names (issue 34): "attention" = the paper's q/k/v/o projections, "all-linear" = every linear
# layer of the decoder (attention and MLP), the output head excepted (PEFT's "all-linear").
TARGET_NAMES = ("attention", "all-linear")


def resolve_targets(targets: Iterable[str] | str | None):
    """`lora.targets` as `find_targets` takes it: "attention" (or None) -> the q/k/v/o tuple, "all-linear" stays,
    a one-element list of either name is that name, other lists / regex strings pass through."""
    if targets is None:
        return DEFAULT_TARGETS
    if not isinstance(targets, str):
        targets = list(targets)
        if len(targets) == 1 and targets[0] in TARGET_NAMES:
            targets = targets[0]
    if targets == "attention":
        return DEFAULT_TARGETS
    return targets


def slot_ranks(rank: int | Iterable[int], n_slots: int) -> list[int]:
    """Per-slot ranks: an int for every slot, or a list cycled over the slots (slot i gets rank[i % len])."""
    ranks = [int(rank)] if isinstance(rank, int | float) else [int(r) for r in rank]
    if not ranks or min(ranks) < 1:
        raise AdapterError(f"LoRA ranks must be >= 1 (an int or a non-empty list), got {rank!r}.")
    return [ranks[i % len(ranks)] for i in range(n_slots)]


class SlotContext:
    """The per-row slot indices of the batch being run, shared by every `MultiLoRALinear` of a model.

    `idx is None` means "no adapter at all" (pure base model). Setting the slots also precomputes, once per
    batch, the segment plan every layer uses (runs of equal slots, gather/scatter indices). Not thread-safe:
    one model runs one batch at a time.
    """

    MODES = ("auto", "bmm", "runs", "gather")

    def __init__(self) -> None:
        self.mode = "auto"  # "auto": "bmm", or "runs" when padding segments would add > 25% rows
        self._state: tuple = (None, [], False, None)
        self._device_cache: dict = {}
        # Dropout probability on every LoRA input right now (PEFT's lora_dropout). The engine sets it only
        # inside a train step, so generation and log-probs never drop.
        self.dropout = 0.0

    @property
    def idx(self) -> torch.Tensor | None:
        return self._state[0]

    @property
    def runs(self) -> list[tuple[int, int, int]]:
        """(slot, start, end) runs of consecutive equal slots."""
        return self._state[1]

    @property
    def has_base_rows(self) -> bool:
        return self._state[2]

    def set(self, slots: torch.Tensor | Iterable[int] | None) -> None:
        self._device_cache = {}
        if slots is None:
            self._state = (None, [], False, None)
            return
        idx = torch.as_tensor(
            slots if isinstance(slots, torch.Tensor) else list(slots), dtype=torch.long
        ).cpu()
        if idx.dim() != 1:
            raise ValueError(f"slot indices must be 1-D (one per batch row), got shape {tuple(idx.shape)}")
        values = idx.tolist()
        runs: list[tuple[int, int, int]] = []
        start = 0
        for i in range(1, len(values) + 1):
            if i == len(values) or values[i] != values[start]:
                runs.append((values[start], start, i))
                start = i
        self._state = (idx, runs, any(v < 0 for v in values), _segment_plan(runs, len(values)))

    def plan(self, device: torch.device) -> dict:
        """The segment plan with its index tensors on `device` (cached per batch)."""
        key = str(device)
        if key not in self._device_cache:
            plan = dict(self._state[3])
            for k in ("slot_idx", "gather", "scatter"):
                if plan.get(k) is not None:
                    plan[k] = plan[k].to(device)
            self._device_cache[key] = plan
        return self._device_cache[key]

    def snapshot(self) -> tuple:
        """Everything a forward reads from the context (slots, segment plan, dropout), for `restored`."""
        return (self._state, self._device_cache, self.dropout)

    @contextmanager
    def restored(self, snap: tuple) -> Iterator[None]:
        """Run the block with a `snapshot` in force: activation checkpointing recomputes a layer in the backward
        pass, after the forward's `use` block has ended, and must see the slots that forward saw."""
        prev = self.snapshot()
        self._state, self._device_cache, self.dropout = snap
        try:
            yield
        finally:
            self._state, self._device_cache, self.dropout = prev

    @contextmanager
    def use(self, slots: torch.Tensor | Iterable[int] | None) -> Iterator[None]:
        """Run the model with these per-row slots inside the block; restores the previous state after."""
        prev = (self._state, self._device_cache)
        self.set(slots)
        try:
            yield
        finally:
            self._state, self._device_cache = prev


def _segment_plan(runs: list[tuple[int, int, int]], n_rows: int) -> dict:
    """Index plan for the "bmm" path: LoRA segments (runs with a slot >= 0) padded to one length.

    - `equal`: every row is in a segment and all segments have the same length, so `x` reshapes to
      `[n_seg, len, ...]` as a view (no copies).
    - otherwise `gather[n_seg * max_len]` picks rows of `x` (index `n_rows` = an appended zero row) and
      `scatter[n_rows]` picks each row's result back (index `n_seg * max_len` = an appended zero row, for
      base-only rows).
    """
    segs = [(s, a, b) for s, a, b in runs if s >= 0]
    if not segs:
        return {"n_seg": 0, "pad_heavy": False}
    lens = [b - a for _, a, b in segs]
    max_len = max(lens)
    slot_ids = [s for s, _, _ in segs]
    plan = {
        "n_seg": len(segs),
        "max_len": max_len,
        "slot_list": slot_ids,
        "slot_idx": torch.tensor(slot_ids, dtype=torch.long),
        "equal": len(segs) == len(runs) and min(lens) == max_len,
        "gather": None,
        "scatter": None,
        "pad_heavy": len(segs) * max_len > 1.25 * sum(lens),
    }
    if not plan["equal"]:
        gather = torch.full((len(segs) * max_len,), n_rows, dtype=torch.long)
        scatter = torch.full((n_rows,), len(segs) * max_len, dtype=torch.long)
        for k, (_, a, b) in enumerate(segs):
            gather[k * max_len : k * max_len + (b - a)] = torch.arange(a, b)
            scatter[a:b] = torch.arange(k * max_len, k * max_len + (b - a))
        plan["gather"], plan["scatter"] = gather, scatter
    return plan


class MultiLoRALinear(nn.Module):
    """A frozen `nn.Linear` plus `n_slots` LoRA adapters stored at width `rank`; slot s has rank
    `slot_ranks[s]` <= `rank` (default: all `rank`) and scale `alpha / slot_ranks[s]`."""

    def __init__(
        self,
        base_layer: nn.Linear,
        n_slots: int,
        rank: int,
        alpha: float,
        ctx: SlotContext,
        dtype: torch.dtype = torch.float32,
        slot_ranks: list[int] | None = None,
    ) -> None:
        super().__init__()
        if not isinstance(base_layer, nn.Linear):
            raise TypeError(f"MultiLoRALinear wraps nn.Linear, got {type(base_layer).__name__}")
        self.base_layer = base_layer
        self.ctx = ctx
        self.n_slots, self.rank, self.alpha = n_slots, rank, float(alpha)
        self.scaling = self.alpha / rank
        dev = base_layer.weight.device
        self.lora_A = nn.Parameter(
            torch.zeros(n_slots, rank, base_layer.in_features, device=dev, dtype=dtype)
        )
        self.lora_B = nn.Parameter(
            torch.zeros(n_slots, base_layer.out_features, rank, device=dev, dtype=dtype)
        )
        self.slot_ranks = [rank] * n_slots
        self._scales: dict = {}
        self.uniform = True
        for s, r in enumerate(slot_ranks or []):
            self.set_slot_rank(s, r)

    def set_slot_rank(self, slot: int, r: int) -> None:
        """Slot `slot` now holds a rank-`r` adapter (`r` <= the storage width); the caller writes its factors."""
        if not 1 <= int(r) <= self.rank:
            raise AdapterError(
                f"slot rank {r} is outside 1..{self.rank} (the engine's largest rank); build the engine with "
                f"a larger rank (lora.rank / lora.rank_range)."
            )
        self.slot_ranks[slot] = int(r)
        self._scales = {}
        # Uniform: every slot at the storage width, the uniform-rank code paths exactly.
        self.uniform = all(x == self.rank for x in self.slot_ranks)

    def slot_scale(self, device: torch.device) -> torch.Tensor:
        """`alpha / r_s` per slot as a float32 tensor on `device` (cached until a slot's rank changes)."""
        key = str(device)
        if key not in self._scales:
            self._scales[key] = torch.tensor(
                [self.alpha / r for r in self.slot_ranks], dtype=torch.float32, device=device
            )
        return self._scales[key]

    @property
    def in_features(self) -> int:
        return self.base_layer.in_features

    @property
    def out_features(self) -> int:
        return self.base_layer.out_features

    @torch.no_grad()
    def reset_slot(self, slot: int, generator: torch.Generator | None = None) -> None:
        """PEFT's default init: A ~ kaiming_uniform(a=sqrt(5)) = U(-1/sqrt(d_in), 1/sqrt(d_in)), B = 0."""
        bound = 1.0 / math.sqrt(self.in_features)
        r = self.slot_ranks[slot]  # draw only the slot's own rows: a rank-r slot starts as a rank-r engine's
        a = torch.rand((r, self.in_features), generator=generator, dtype=torch.float32) * (2 * bound) - bound
        self.lora_A[slot].zero_()
        self.lora_A[slot, :r].copy_(a)
        self.lora_B[slot].zero_()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.base_layer(x)
        ctx = self.ctx
        idx = ctx.idx
        if idx is None:
            return y
        if x.shape[0] != idx.shape[0]:
            raise RuntimeError(f"batch has {x.shape[0]} rows but {idx.shape[0]} slot indices were set")
        xa = x.to(self.lora_A.dtype)
        if ctx.dropout:  # PEFT's lora_dropout: on the LoRA branch's input only, the base sees x unchanged
            xa = nn.functional.dropout(xa, ctx.dropout, training=True)
        mode = ctx.mode
        runs = ctx.runs
        if not self.uniform:
            return self._mixed_forward(x, xa, y)
        if len(runs) == 1 and mode != "gather":  # one slot for the whole batch: two plain matmuls
            slot = runs[0][0]
            if slot < 0:
                return y
            delta = (xa @ self.lora_A[slot].transpose(0, 1)) @ self.lora_B[slot].transpose(0, 1)
        elif mode == "bmm" or (mode == "auto" and not ctx.plan(x.device)["pad_heavy"]):
            delta = self._bmm_delta(xa, ctx.plan(x.device))
        elif mode == "auto":  # segments of very different lengths: padding would waste more than it saves
            delta = self._runs_delta(xa, runs)
        elif mode == "runs":
            delta = self._runs_delta(xa, runs)
        elif mode == "gather":
            delta = self._gather_delta(xa, idx.to(x.device), ctx.has_base_rows)
        else:
            raise ValueError(f"unknown SlotContext.mode {mode!r}; choose one of {SlotContext.MODES}")
        return torch.add(y, delta.to(y.dtype), alpha=self.scaling)

    def _mixed_forward(self, x: torch.Tensor, xa: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """The forward when slots have different ranks: each slot's `x A_s^T` is scaled by its own alpha / r_s
        (on the r-wide hidden, cheaper than on the output), then multiplied by B_s."""
        ctx = self.ctx
        runs, mode = ctx.runs, ctx.mode
        ranks = self.slot_ranks
        if mode == "gather":
            idx = ctx.idx.to(x.device)
            safe = idx.clamp(min=0)
            shape = xa.shape
            x3 = xa.reshape(shape[0], -1, shape[-1])
            h = (
                torch.bmm(x3, self.lora_A[safe].transpose(1, 2))
                * self.slot_scale(x.device)[safe][:, None, None]
            )
            delta = torch.bmm(h, self.lora_B[safe].transpose(1, 2))
            if ctx.has_base_rows:
                delta = delta * (idx >= 0).to(delta.dtype)[:, None, None]
            return y + delta.reshape(*shape[:-1], self.out_features).to(y.dtype)
        plan = ctx.plan(x.device)
        if len(runs) == 1 or mode == "runs" or (mode == "auto" and plan["pad_heavy"]):
            # Two plain matmuls per run on the slot's own rank (views of the factors: no padded flops).
            a_list, b_list = self.lora_A.unbind(0), self.lora_B.unbind(0)
            parts = []
            for slot, a, b in runs:
                xs = xa[a:b]
                if slot < 0:
                    parts.append(xs.new_zeros(*xs.shape[:-1], self.out_features))
                    continue
                r = ranks[slot]
                h = (xs @ a_list[slot][:r].transpose(0, 1)) * (self.alpha / r)
                parts.append(h @ b_list[slot][:, :r].transpose(0, 1))
            return y + torch.cat(parts, 0).to(y.dtype)
        if plan["n_seg"] == 0:
            return y
        # bmm at the largest rank among this batch's slots; smaller slots' extra columns are exact zeros.
        width = max(ranks[s] for s in plan["slot_list"])
        if plan["slot_list"] == list(range(self.n_slots)):  # every slot, in order: views, no weight copies
            a_sel, b_sel = self.lora_A[:, :width], self.lora_B[:, :, :width]
            scale = self.slot_scale(x.device)[:, None, None]
        else:
            sel = plan["slot_idx"]
            a_sel, b_sel = self.lora_A[sel, :width], self.lora_B[sel, :, :width]
            scale = self.slot_scale(x.device)[sel][:, None, None]
        shape = xa.shape
        b, d_in = shape[0], shape[-1]
        x3 = xa.reshape(b, -1, d_in)
        t = x3.shape[1]
        n_seg, max_len = plan["n_seg"], plan["max_len"]
        if plan["equal"]:
            xs = x3.reshape(n_seg, max_len * t, d_in)
        else:
            xs = torch.cat([x3, x3.new_zeros(1, t, d_in)])[plan["gather"]].reshape(n_seg, max_len * t, d_in)
        d = torch.bmm(torch.bmm(xs, a_sel.transpose(1, 2)) * scale, b_sel.transpose(1, 2))
        if plan["equal"]:
            return y + d.reshape(*shape[:-1], self.out_features).to(y.dtype)
        d = d.reshape(n_seg * max_len, t, self.out_features)
        d = torch.cat([d, d.new_zeros(1, t, self.out_features)])[plan["scatter"]]
        return y + d.reshape(*shape[:-1], self.out_features).to(y.dtype)

    def _bmm_delta(self, xa: torch.Tensor, plan: dict) -> torch.Tensor:
        """All slots' segments in two batched matmuls: `[n_seg, len*T, d_in] @ A[slots]^T @ B[slots]^T`."""
        shape = xa.shape
        b, d_in = shape[0], shape[-1]
        if plan["n_seg"] == 0:
            return xa.new_zeros(*shape[:-1], self.out_features)
        x3 = xa.reshape(b, -1, d_in)
        t = x3.shape[1]
        n_seg, max_len = plan["n_seg"], plan["max_len"]
        if plan["slot_list"] == list(range(self.n_slots)):
            a_sel, b_sel = self.lora_A, self.lora_B  # every slot, in order: no weight copies
        else:
            a_sel, b_sel = self.lora_A[plan["slot_idx"]], self.lora_B[plan["slot_idx"]]
        if plan["equal"]:
            xs = x3.reshape(n_seg, max_len * t, d_in)
        else:
            xs = torch.cat([x3, x3.new_zeros(1, t, d_in)])[plan["gather"]].reshape(n_seg, max_len * t, d_in)
        h = torch.bmm(xs, a_sel.transpose(1, 2))
        d = torch.bmm(h, b_sel.transpose(1, 2))  # [n_seg, max_len * t, d_out]
        if plan["equal"]:
            return d.reshape(*shape[:-1], self.out_features)
        d = d.reshape(n_seg * max_len, t, self.out_features)
        d = torch.cat([d, d.new_zeros(1, t, self.out_features)])[plan["scatter"]]
        return d.reshape(*shape[:-1], self.out_features)

    def _runs_delta(self, xa: torch.Tensor, runs: list[tuple[int, int, int]]) -> torch.Tensor:
        """Two plain matmuls per run of equal slots, on views of `x`."""
        # One unbind per factor: its backward stacks the per-slot grads once.
        a_list, b_list = self.lora_A.unbind(0), self.lora_B.unbind(0)
        parts = []
        for slot, a, b in runs:
            xs = xa[a:b]
            if slot < 0:
                parts.append(xs.new_zeros(*xs.shape[:-1], self.out_features))
            else:
                parts.append((xs @ a_list[slot].transpose(0, 1)) @ b_list[slot].transpose(0, 1))
        return torch.cat(parts, 0)

    def _gather_delta(self, xa: torch.Tensor, idx: torch.Tensor, has_base_rows: bool) -> torch.Tensor:
        """Per-row gathered factors and `bmm` (copies `r x d` weights per row)."""
        safe = idx.clamp(min=0)
        shape = xa.shape
        x3 = xa.reshape(shape[0], -1, shape[-1])  # [b, T, d_in]
        h = torch.bmm(x3, self.lora_A[safe].transpose(1, 2))  # [b, T, r]
        delta = torch.bmm(h, self.lora_B[safe].transpose(1, 2))  # [b, T, d_out]
        if has_base_rows:
            delta = delta * (idx >= 0).to(delta.dtype)[:, None, None]
        return delta.reshape(*shape[:-1], self.out_features)

    def extra_repr(self) -> str:
        mixed = "" if self.uniform else f", slot_ranks={self.slot_ranks}"
        return f"n_slots={self.n_slots}, rank={self.rank}, alpha={self.alpha}{mixed}"


def _matches(name: str, targets: Iterable[str] | str) -> bool:
    if isinstance(targets, str):  # a regex over the full module name, as in PEFT
        return re.fullmatch(targets, name) is not None
    last = name.rsplit(".", 1)[-1]
    return any(last == t or name == t or name.endswith("." + t) for t in targets)


def find_targets(model: nn.Module, targets: Iterable[str] | str | None = None) -> list[str]:
    """Names of the `nn.Linear` modules of `model` that LoRA should wrap (default: q, k, v, o projections).

    `targets`: None or "attention" (q/k/v/o), "all-linear" (every linear except the output head), a list of
    module-name suffixes (PEFT's list semantics) or a regex string matched against the full name.
    """
    targets = resolve_targets(targets)
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    names = []
    for name, mod in model.named_modules():
        if not isinstance(mod, nn.Linear) or mod is head:
            continue
        if targets == "all-linear" or _matches(name, targets):
            names.append(name)
    if not names:
        raise AdapterError(
            f"no nn.Linear module of {type(model).__name__} matches targets {targets!r}; "
            "use names like 'q_proj' (see model.named_modules())."
        )
    return names


def inject_multi_lora(
    model: nn.Module,
    n_slots: int,
    rank: int | Iterable[int],
    alpha: float,
    targets: Iterable[str] | str | None = None,
    seed: int = 0,
    dtype: torch.dtype = torch.float32,
    max_rank: int | None = None,
) -> tuple[SlotContext, dict[str, MultiLoRALinear]]:
    """Freeze `model` and replace its target linears by `MultiLoRALinear`s sharing one `SlotContext`.

    Returns the context and `{module name: layer}` where names are the base model's original module paths
    (the names `LoRAAdapter` uses). Every slot starts with PEFT's init (B = 0, so each slot equals the base);
    slot `s` of module `k` draws A from a generator seeded with `(seed, s)`, so it does not depend on
    the number of slots. `rank`: one int, or per-slot ranks (a list cycled over the slots); `max_rank`: the
    storage width (default the largest rank; larger when slots may later grow, e.g. mutation M6).
    """
    ranks = slot_ranks(rank, max(n_slots, 1))
    width = max(ranks) if max_rank is None else int(max_rank)
    if n_slots < 1 or width < max(ranks):
        raise ValueError(
            f"n_slots must be >= 1 and max_rank >= every rank, got n_slots={n_slots}, ranks={sorted(set(ranks))}, "
            f"max_rank={max_rank}"
        )
    for p in model.parameters():
        p.requires_grad_(False)
    ctx = SlotContext()
    layers: dict[str, MultiLoRALinear] = {}
    for name in find_targets(model, targets):
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        layer = MultiLoRALinear(
            getattr(parent, child), n_slots, width, alpha, ctx, dtype=dtype, slot_ranks=ranks
        )
        setattr(parent, child, layer)
        layers[name] = layer
    init_slots(layers, range(n_slots), seed)
    return ctx, layers


def init_slots(layers: dict[str, MultiLoRALinear], slots: Iterable[int], seed: int) -> None:
    """Re-initialise `slots` (PEFT init, B = 0) deterministically from `seed`."""
    for slot in slots:
        g = torch.Generator().manual_seed(int(seed) * 1_000_003 + int(slot))
        for layer in layers.values():  # dict order = module order, so the draw order is fixed
            layer.reset_slot(slot, g)


def get_slot_adapter(layers: dict[str, MultiLoRALinear], slot: int) -> LoRAAdapter:
    """A detached CPU copy of slot `slot` as a `LoRAAdapter` (A [r, d_in], B [d_out, r] per module, r = the
    slot's own rank)."""
    first = next(iter(layers.values()))
    r = first.slot_ranks[slot]
    return LoRAAdapter(
        modules={
            k: (
                m.lora_A[slot, :r].detach().to("cpu", copy=True),
                m.lora_B[slot, :, :r].detach().to("cpu", copy=True),
            )
            for k, m in layers.items()
        },
        alpha=first.alpha,
    )


def get_slot_rank(layers: dict[str, MultiLoRALinear], slot: int) -> int:
    return next(iter(layers.values())).slot_ranks[slot]


@torch.no_grad()
def set_slot_adapter(layers: dict[str, MultiLoRALinear], slot: int, adapter: LoRAAdapter) -> None:
    """Copy `adapter` into slot `slot`, which takes the adapter's rank (any rank up to the engine's storage
    width; the unused components are zeroed). Raises `AdapterError` on target, rank or shape mismatch.

    An adapter with another alpha is accepted: B is rescaled by `adapter.alpha /
    engine alpha` so the effective update `alpha/r * B A` is preserved exactly.
    """
    first = next(iter(layers.values()))
    want, got = set(layers), set(adapter.modules)
    if want != got:
        missing, extra = sorted(want - got), sorted(got - want)
        raise AdapterError(
            f"adapter targets do not match the engine's: missing {missing[:4]}{'...' if len(missing) > 4 else ''}, "
            f"unexpected {extra[:4]}{'...' if len(extra) > 4 else ''}; build the engine with the adapter's targets."
        )
    r = adapter.rank
    if r > first.rank:
        raise AdapterError(
            f"adapter rank {r} > the engine's largest rank {first.rank}; build the engine with "
            f"rank={r} (lora.rank, or lora.rank_range up to {r}) or convert the adapter."
        )
    for name, layer in layers.items():
        a, b = adapter.modules[name]
        if (a.shape[1], b.shape[0]) != (layer.in_features, layer.out_features):
            raise AdapterError(
                f"module {name!r}: adapter A {tuple(a.shape)}, B {tuple(b.shape)} but the base model needs "
                f"A [r, {layer.in_features}], B [{layer.out_features}, r]; was it trained on another base model?"
            )
        if not (torch.isfinite(a).all() and torch.isfinite(b).all()):
            raise AdapterError(f"module {name!r}: adapter weights contain NaN or inf.")
    ratio = float(adapter.alpha) / first.alpha
    for name, layer in layers.items():
        a, b = adapter.modules[name]
        layer.set_slot_rank(slot, r)
        if r < layer.rank:  # the padded components stay exactly zero (zero gradients: they never train)
            layer.lora_A[slot].zero_()
            layer.lora_B[slot].zero_()
        layer.lora_A[slot, :r].copy_(a.to(layer.lora_A.dtype))
        layer.lora_B[slot, :, :r].copy_(
            (b.float() * ratio).to(layer.lora_B.dtype) if ratio != 1.0 else b.to(layer.lora_B.dtype)
        )
