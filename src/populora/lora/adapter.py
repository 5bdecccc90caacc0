"""`LoRAAdapter`: one adapter's per-module factors, the unit that operators consume and produce.

Convention (docs/architecture.md): for each target module, `A: [r, d_in]`, `B: [d_out, r]`, and the
effective weight update is `delta = (alpha / r) * B @ A` (PEFT's non-rslora scaling).
Module names are the base model's module paths, e.g. `model.layers.0.self_attn.q_proj`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

import torch


class AdapterError(ValueError):
    """A LoRA adapter (or a pair of them) is malformed or incompatible; the message says how to fix it."""


@dataclass
class LoRAAdapter:
    """Per-module LoRA factors `{name: (A [r, d_in], B [d_out, r])}` sharing one rank and one alpha."""

    modules: dict[str, tuple[torch.Tensor, torch.Tensor]]
    alpha: float
    metadata: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.modules:
            raise AdapterError("LoRAAdapter has no modules; pass at least one {name: (A, B)} pair.")
        ranks = set()
        for name, pair in self.modules.items():
            if not isinstance(pair, tuple | list) or len(pair) != 2:
                raise AdapterError(f"module {name!r}: expected a pair (A, B), got {type(pair).__name__}.")
            a, b = pair
            if a.dim() != 2 or b.dim() != 2:
                raise AdapterError(
                    f"module {name!r}: A and B must be 2-D, got shapes {tuple(a.shape)}, {tuple(b.shape)}."
                )
            if a.shape[0] != b.shape[1]:
                raise AdapterError(
                    f"module {name!r}: A is {tuple(a.shape)} (expected [r, d_in]) and B is {tuple(b.shape)} "
                    f"(expected [d_out, r]); their ranks {a.shape[0]} and {b.shape[1]} differ."
                )
            ranks.add(a.shape[0])
        if len(ranks) != 1:
            raise AdapterError(f"all modules must share one rank, found ranks {sorted(ranks)}.")
        if not self.alpha > 0:
            raise AdapterError(f"alpha must be positive, got {self.alpha}.")
        self.modules = {k: (v[0], v[1]) for k, v in self.modules.items()}

    @property
    def rank(self) -> int:
        return next(iter(self.modules.values()))[0].shape[0]

    @property
    def scale(self) -> float:
        """alpha / r: the factor between `B @ A` and the weight update."""
        return self.alpha / self.rank

    def names(self) -> list[str]:
        return list(self.modules)

    def __iter__(self) -> Iterator[str]:
        return iter(self.modules)

    def delta(self, name: str) -> torch.Tensor:
        """The scaled effective update `alpha/r * B @ A` of module `name`, shape [d_out, d_in] (float32)."""
        a, b = self.modules[name]
        return self.scale * (b.float() @ a.float())

    def shapes(self) -> dict[str, tuple[tuple[int, ...], tuple[int, ...]]]:
        return {k: (tuple(a.shape), tuple(b.shape)) for k, (a, b) in self.modules.items()}

    def clone(self) -> LoRAAdapter:
        return LoRAAdapter(
            modules={k: (a.detach().clone(), b.detach().clone()) for k, (a, b) in self.modules.items()},
            alpha=self.alpha,
            metadata=dict(self.metadata),
        )

    def map(self, fn) -> LoRAAdapter:
        """A new adapter with `fn(name, A, B) -> (A', B')` applied to every module."""
        return LoRAAdapter(
            modules={k: tuple(fn(k, a, b)) for k, (a, b) in self.modules.items()}, alpha=self.alpha
        )

    def check_compatible(self, other: LoRAAdapter, what: str = "parents", same_rank: bool = True) -> None:
        """Raise AdapterError unless `other` has the same modules, shapes, rank and alpha (`same_rank=False`:
        any rank, the same module shapes otherwise; the operators resize such parents)."""
        if set(self.modules) != set(other.modules):
            missing = sorted(set(self.modules) ^ set(other.modules))[:4]
            raise AdapterError(
                f"{what} target different modules (e.g. {missing}); use adapters trained on the same targets."
            )
        if same_rank and self.rank != other.rank:
            raise AdapterError(f"{what} have ranks {self.rank} and {other.rank}; operators need equal ranks.")
        outer = {k: (a[1], b[0]) for k, (a, b) in self.shapes().items()}
        if outer != {k: (a[1], b[0]) for k, (a, b) in other.shapes().items()}:
            raise AdapterError(
                f"{what} have different module shapes; were they trained on the same base model?"
            )
        if self.alpha != other.alpha:
            raise AdapterError(
                f"{what} have alpha {self.alpha} and {other.alpha}; operators need equal alpha."
            )

    def state_dict(self) -> dict[str, torch.Tensor]:
        """Flat `{name.lora_A: A, name.lora_B: B}` (not PEFT key names; see `populora.lora.peft_io`)."""
        out = {}
        for k, (a, b) in self.modules.items():
            out[f"{k}.lora_A"] = a
            out[f"{k}.lora_B"] = b
        return out

    @classmethod
    def from_state_dict(cls, sd: Mapping[str, torch.Tensor], alpha: float) -> LoRAAdapter:
        names = sorted({k.rsplit(".", 1)[0] for k in sd})
        return cls(modules={n: (sd[f"{n}.lora_A"], sd[f"{n}.lora_B"]) for n in names}, alpha=alpha)
