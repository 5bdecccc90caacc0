"""PolicyEngine: N LoRA adapter slots on one frozen base model that generate and train in shared batches.

`build(...)` makes an engine; `resolve_model(name)` finds a model folder. The hf backend (`hf.py`, default)
generates and trains; the vllm backend (`vllm.py`) only generates, with one `LoRARequest` per slot.
`build(..., workers=N)` with N > 1 spreads either backend over N Ray actors, data parallel (`dist.py`).
Imports `populora.lora` and `populora.rl.loss`; nothing here imports the trainer.
"""

from __future__ import annotations

from typing import Any

from populora.config import LoRAConfig
from populora.engine.models import resolve_model
from populora.engine.types import EngineError, Generation, GenRequest, PolicyEngine, TrainBatch, TrainRow

__all__ = [
    "EngineError",
    "GenRequest",
    "Generation",
    "PolicyEngine",
    "TrainBatch",
    "TrainRow",
    "build",
    "resolve_model",
]

BACKENDS = ("hf", "vllm")


def build(
    model: Any = "tiny",
    n_slots: int = 8,
    rank: int | None = None,
    alpha: float | None = None,
    targets=None,
    backend: str = "hf",
    device: str = "cpu",
    *,
    tokenizer: Any = None,
    dtype: Any = None,
    workers: int = 1,
    address: str | None = None,
    **options: Any,
):
    """Build a PolicyEngine with `n_slots` LoRA slots (rank `rank`, scale `alpha/rank`) on `model`.

    `rank` and `alpha` default to the run config's (`LoRAConfig`), so an engine built here and a training run
    agree unless told otherwise.

    `model`: "tiny", "smol", a local HF folder, a hub id, or an already loaded transformers causal LM (then
    pass `tokenizer=`). `dtype`: of the frozen base when loading by name (default float32 on CPU, bfloat16 on
    CUDA; LoRA factors are always float32). `targets`: None (q/k/v/o projections), "all-linear", a list of module-name suffixes
    or a regex. Options for the hf engine (defaults in brackets): lr [5e-5], weight_decay [0], betas
    [(0.9, 0.999)], eps [1e-8], max_grad_norm [1.0], clip_eps [None = REINFORCE], clip_eps_high [clip_eps],
    entropy_coef [0], loss_agg ["token-mean"], micro_batch_tokens [4096; 0 = one batch], gen_batch_size [64],
    gen_threads [1], train_threads [2], prefill_threads [train_threads; the prompts' prefill on the lean path],
    seed [0], lora_dropout [0], activation_checkpointing [False], share_prompts [True] (engine/shared_prompts.py).
    Loading by name: revision [None] (hub ids: branch, tag or commit), trust_remote_code [False] (also
    passed to vLLM).
    `workers` > 1: a `DistributedEngine` of that many Ray actors (one GPU each on CUDA), each holding the base
    and every slot; `address` joins an existing Ray cluster ("auto", "host:port"), else Ray starts locally.
    """
    defaults = LoRAConfig()
    rank = defaults.rank if rank is None else rank
    alpha = defaults.alpha if alpha is None else alpha
    if backend not in BACKENDS:
        raise EngineError(f"unknown engine backend {backend!r}; choose one of {BACKENDS}.")
    if not isinstance(workers, int) or workers < 1:
        raise EngineError(f"workers must be an integer >= 1, got {workers!r}.")
    if workers > 1:
        from populora.engine.dist import DistributedEngine

        return DistributedEngine(
            model,
            tokenizer,
            workers=workers,
            address=address,
            device=device,
            n_slots=n_slots,
            rank=rank,
            alpha=alpha,
            targets=targets,
            backend=backend,
            dtype=dtype,
            **options,
        )
    if str(device).startswith("cuda"):  # one line, not a traceback from deep inside torch (issue 32)
        from populora.engine.memory import cuda_problem

        problem = cuda_problem()
        if problem:
            raise EngineError(f"device={device!r}: {problem}.")
    if backend == "vllm":  # fail before loading anything
        from populora.engine.vllm import require_vllm

        require_vllm()
    import torch

    # Only loading by name reads these; vLLM runs the folder's own code too when it is trusted.
    revision = options.pop("revision", None) or None
    trust_remote_code = bool(options.pop("trust_remote_code", False))
    if backend == "vllm" and trust_remote_code:
        options["trust_remote_code"] = True

    from populora.engine.models import load_model_and_tokenizer

    # Base weights: float32 on CPU; bfloat16 on GPUs (a 7B base in fp32 would not leave room for activations).
    # LoRA factors and optimiser state are always float32.
    dtype = dtype or (torch.bfloat16 if str(device).startswith("cuda") else torch.float32)
    if isinstance(model, torch.nn.Module):
        if tokenizer is None:
            raise EngineError("build(model=<module>) needs tokenizer=<its tokenizer>.")
        name = getattr(getattr(model, "config", None), "_name_or_path", None) or None
        net, tok = model, tokenizer
    else:
        net, tok, folder = load_model_and_tokenizer(
            model, device=device, dtype=dtype, revision=revision, trust_remote_code=trust_remote_code
        )
        name = str(folder)
        if tokenizer is not None:
            tok = tokenizer
    if backend == "vllm":
        from populora.engine.vllm import VLLMEngine as engine_cls
    else:
        from populora.engine.hf import HFEngine as engine_cls
    return engine_cls(
        net,
        tok,
        n_slots=n_slots,
        rank=rank,
        alpha=alpha,
        targets=targets,
        device=device,
        model_name=name,
        **options,
    )
