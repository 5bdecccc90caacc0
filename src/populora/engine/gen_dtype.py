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

`int8` (CPU only): every `nn.Linear` of the frozen base (the LoRA layers' own base `Linear`, the MLP's, the output
head) is swapped for an int8 copy while `generate` runs: PyTorch's dynamic quantization (torch.ao), weights int8
per output channel, activations quantized on the fly, integer matmuls (fbgemm / x86; qnnpack on ARM). At the 8-16
rows of a decode step these matmuls ran 2.9-3.7x faster than float32 here (no faster at one row); the graded probe
took 1.58x less CPU with 94.8% of its verdicts unchanged, and a `tiny-learn` step ran 1.22x faster than in
float32, 1.56x the old path's (docs/engine.md). Embeddings, norms, attention and the LoRA factors stay float32.
`Int8Linears.use()` swaps modules, not `.data`: a quantized `Linear` is a different module, made once.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager

import torch
from torch import nn

GEN_DTYPES = ("model", "float32", "bfloat16", "float16", "int8")


def resolve_gen_dtype(name: str | torch.dtype | None, base: torch.dtype) -> torch.dtype | str | None:
    """The dtype to generate in ("int8": the quantized `Linear`s of `Int8Linears`), or None when it is the
    base's own ("model", None or the same dtype)."""
    if name is None or name == "model":
        return None
    if name == "int8":
        return name
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


class Int8Linears:
    """The base's `nn.Linear` modules as int8 dynamically quantized copies while `use()` is active (see the
    module docstring). `owners` are extra objects holding a base `Linear` as an attribute (the lean decoder's
    output head); a module of the model is found wherever it is a child."""

    dtype = "int8"

    def __init__(self, model: nn.Module, owners: Iterable[object] = ()) -> None:
        if any(p.device.type != "cpu" for p in model.parameters()):
            raise ValueError(
                "gen_dtype 'int8' is CPU-only (PyTorch's dynamic quantization); on a GPU use bfloat16"
            )
        check_int8_engines(torch.backends.quantized.supported_engines)
        copies: dict[int, nn.Module] = {}
        self._swaps: list[tuple[object, str, nn.Module, nn.Module]] = []  # (owner, attribute, float, int8)
        holders = [(m, name, child) for m in model.modules() for name, child in m.named_children()]
        holders += [(o, name, v) for o in owners for name, v in vars(o).items() if isinstance(v, nn.Module)]
        for owner, name, child in holders:
            if type(child) is not nn.Linear:
                continue
            if id(child) not in copies:  # a Linear held twice (the lean decoder's head) gets one copy
                copies[id(child)] = _quantized(child)
            self._swaps.append((owner, name, child, copies[id(child)]))

    def __len__(self) -> int:
        return len({id(fp) for _, _, fp, _ in self._swaps})

    @contextmanager
    def use(self) -> Iterator[None]:
        try:
            for owner, name, _, low in self._swaps:
                setattr(owner, name, low)
            yield
        finally:
            for owner, name, fp, _ in self._swaps:
                setattr(owner, name, fp)


def check_int8_engines(supported: list[str]) -> None:
    """Raise when none of PyTorch's quantized engines that run dynamic int8 `Linear`s is in `supported`."""
    if not any(e in supported for e in ("x86", "fbgemm", "qnnpack")):
        raise ValueError(
            f"gen_dtype 'int8': this PyTorch build has no int8 matmul engine (it has {supported}); "
            "use bfloat16 or model"
        )


def _quantized(linear: nn.Linear) -> nn.Module:
    """An int8 copy of `linear`: weights per output channel, activations quantized per call."""
    import warnings

    try:  # deprecated upstream in favour of the torchao package; a later torch may drop it
        from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic
    except ImportError as err:
        raise ValueError(
            f"gen_dtype 'int8' needs torch.ao.quantization, which this torch ({torch.__version__}) cannot import "
            f"({err}); use bfloat16 or model"
        ) from None

    dtype = linear.weight.dtype
    if dtype != torch.float32:  # the int8 kernels read float32: quantize a float32 copy, cast around it
        fp32 = nn.Linear(linear.in_features, linear.out_features, linear.bias is not None)
        fp32.load_state_dict({k: v.float() for k, v in linear.state_dict().items()})
        linear = fp32
    spec = {nn.Linear: per_channel_dynamic_qconfig}
    with warnings.catch_warnings():  # torch.ao's quantization warns that it is moving to the torchao package
        warnings.simplefilter("ignore")
        q = quantize_dynamic(nn.Sequential(linear), spec, torch.qint8)[0]
    return q if dtype == torch.float32 else _CastAround(q, dtype)


class _CastAround(nn.Module):
    """An int8 `Linear` in a base of another float dtype (bfloat16 training): float32 in, the base's dtype out."""

    def __init__(self, q: nn.Module, dtype: torch.dtype) -> None:
        super().__init__()
        self.q, self.dtype = q, dtype
        self.in_features, self.out_features = q.in_features, q.out_features  # read by MultiLoRALinear

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.q(x.float()).to(self.dtype)
