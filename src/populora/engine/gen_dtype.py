"""Generation in a lower precision than training: the frozen base's weights in `gen_dtype` while `generate` runs.

Why: on a CPU with bfloat16 matrix units (AMX, AVX512-BF16: `lscpu | grep -E 'amx|avx512_bf16'`) bfloat16
matmuls are faster than float32 ones; `python bench/probe_speed.py --dtypes` measures the probe both ways in one
run (1.26x here, docs/engine.md). GPUs generate in bfloat16 as a rule (vLLM does). Training and log-probs keep
the base's own dtype, so the update's maths does not change; the sampler's log-probs (`Generation.logprobs`)
then differ from the trainer's by the rounding, as with vLLM, and `rl.tis_cap` corrects for that where it
matters (PPO clip, TIS).

How: `GenerationWeights.use()` points every floating-point parameter of the base (not the LoRA factors, which stay
float32: the LoRA branch casts its input and adds its output in the base's dtype) at a copy in `gen_dtype`, made
once (the base is frozen, so the copy never goes stale), and points them back on exit, also on an error.
Buffers (the rotary frequencies) are left alone. Swapping `.data` moves no memory: both copies stay resident,
so the base costs its float32 size plus its `gen_dtype` size.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager

import torch
from torch import nn

GEN_DTYPES = ("model", "float32", "bfloat16", "float16")


def resolve_gen_dtype(name: str | torch.dtype | None, base: torch.dtype) -> torch.dtype | None:
    """The dtype to generate in, or None when it is the base's own ("model", None or the same dtype)."""
    if name is None or name == "model":
        return None
    if isinstance(name, str):
        if name not in GEN_DTYPES:
            raise ValueError(f"gen_dtype {name!r}: choose one of {', '.join(GEN_DTYPES)}")
        name = getattr(torch, name)
    return None if name == base else name


class GenerationWeights:
    """The base's parameters in `dtype` while `use()` is active (see the module docstring)."""

    def __init__(self, model: nn.Module, lora_params: Iterable[nn.Parameter], dtype: torch.dtype) -> None:
        self.model, self.dtype = model, dtype
        self._skip = {id(p) for p in lora_params}
        self._copies: list[tuple[nn.Parameter, torch.Tensor]] | None = None

    def _made(self) -> list[tuple[nn.Parameter, torch.Tensor]]:
        if self._copies is None:  # once: the base is frozen (tied weights are one parameter, one copy)
            self._copies = [
                (p, p.detach().to(self.dtype))
                for p in self.model.parameters()
                if id(p) not in self._skip and p.is_floating_point()
            ]
        return self._copies

    @contextmanager
    def use(self) -> Iterator[None]:
        copies = self._made()
        originals = [p.data for p, _ in copies]
        try:
            for p, low in copies:
                p.data = low
            yield
        finally:
            for (p, _), data in zip(copies, originals, strict=True):
                p.data = data
