"""The hf PolicyEngine: N LoRA slots (`populora.lora.layers`) on one frozen transformers causal LM.

- `generate`: mixed-slot batches, our own KV-cached decode loop (left padding, per-row temperature/top-p,
  stop on EOS or max_new_tokens, finished rows pruned from the batch and the cache), per-token log-probs.
- `train_step`: one mixed batch of rows from any slots, micro-batched by a padded-token budget
  (`micro_batch_tokens`, 0 = one batch) with the gradients accumulated over the micro-batches, token-level
  policy-gradient loss (`populora.rl.loss`), per-slot normalisation, per-slot gradient clipping and ONE
  AdamW step per slot. The lm_head runs only on response positions (the vocabulary projection dominates
  small models), a chunk of tokens at a time (`populora.rl.logprobs`: no full float32 logits). Optional:
  `lora_dropout` (PEFT's, train steps only, seeded per step so a resumed run replays it),
  `activation_checkpointing` (each decoder layer recomputed in the backward pass) and `tis_cap` (truncated
  importance sampling against the sampler's log-probs, `populora.rl.loss.truncated_is_weights`),
  `entropy_coef` (an entropy bonus) and `kl_coef` (a KL penalty to the frozen base, `populora.rl.kl`: one
  extra no-grad forward of the rows with every adapter off).
- Threads: generation and training set their own torch thread counts (docs/engine.md, How it works).
- `gen_dtype`: generate with the frozen base in a lower precision (bfloat16: 3-4x faster matmuls on CPUs with
  AMX; int8 on CPU: its `Linear`s quantized); training and log-probs keep the base's dtype (engine/gen_dtype.py).
- Progress: `generate` and `train_step` take an optional `progress(done, total, info)` callable (the trainer's
  live console line): requests finished / micro-batches done so far, non-decreasing, ending at total.
- Finished rows: `generate` takes an optional `on_finish(i, generation)` callable, called once per request as
  soon as its row stops (request i's `Generation`, the same object the returned list holds), while the other
  rows still decode: the trainer hands finished rows to the sandbox meanwhile (train/overlap.py).

This module holds the engine's construction, its slots, adapters and optimiser state; the generation
methods are in engine/hf_generate.py (`HFGeneration`), the training and log-prob methods with their helpers
in engine/hf_train.py (`HFTraining`). Every name is importable from here as before.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence

import torch
from torch import nn

from populora.engine.decode import LeanDecoder
from populora.engine.gen_dtype import GenerationWeights, Int8Linears, resolve_gen_dtype
from populora.engine.hf_generate import PROGRESS_EVERY, FinishFn, HFGeneration, ProgressFn, torch_threads
from populora.engine.hf_train import HFTraining, check_rows, checkpoint_layers, decoder_layers, train_metrics
from populora.engine.optim import SlotAdamW
from populora.engine.types import EngineError, PeftFolderIO
from populora.lora.adapter import LoRAAdapter
from populora.lora.layers import (
    get_slot_adapter,
    get_slot_rank,
    init_slots,
    inject_multi_lora,
    set_slot_adapter,
    slot_ranks,
)
from populora.rl.kl import KL_ESTIMATORS
from populora.rl.logprobs import LOGIT_CHUNK_TOKENS
from populora.rl.loss import LOSS_AGG_MODES

__all__ = [
    "PROGRESS_EVERY",
    "FinishFn",
    "HFEngine",
    "HFGeneration",
    "HFTraining",
    "ProgressFn",
    "check_rows",
    "checkpoint_layers",
    "decoder_layers",
    "torch_threads",
    "train_metrics",
]


class HFEngine(HFGeneration, HFTraining, PeftFolderIO):
    """N LoRA adapter slots on one frozen HF causal LM; see the module docstring and `populora.engine.build`."""

    backend = "hf"

    def __init__(
        self,
        model: nn.Module,
        tokenizer,
        *,
        n_slots: int = 8,
        rank: int | Sequence[int],
        alpha: float,
        targets=None,
        device: str = "cpu",
        lr: float = 5e-5,
        weight_decay: float = 0.0,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        max_grad_norm: float | None = 1.0,
        clip_eps: float | None = None,
        clip_eps_high: float | None = None,
        entropy_coef: float = 0.0,
        kl_coef: float = 0.0,
        kl_estimator: str = "k3",
        loss_agg: str = "token-mean",
        micro_batch_tokens: int = 4096,
        gen_batch_size: int = 64,
        gen_threads: int | None = 1,
        train_threads: int | None = 2,
        prefill_threads: int | None = None,
        seed: int = 0,
        model_name: str | None = None,
        lora_dropout: float = 0.0,
        activation_checkpointing: bool = False,
        share_prompts: bool = True,
        tis_cap: float = 0.0,
        max_rank: int | None = None,
        gen_dtype: str | torch.dtype | None = None,
    ) -> None:
        if loss_agg not in LOSS_AGG_MODES:
            raise EngineError(f"loss_agg={loss_agg!r}; choose one of {LOSS_AGG_MODES}")
        if not (isinstance(micro_batch_tokens, int) and micro_batch_tokens >= 0):
            raise EngineError(
                f"micro_batch_tokens must be an integer >= 0 (0 = one batch), got {micro_batch_tokens!r}."
            )
        if not 0.0 <= float(lora_dropout) < 1.0:
            raise EngineError(f"lora_dropout must be in [0, 1), got {lora_dropout!r}.")
        self.model = model.to(device).eval()
        self.tokenizer = tokenizer
        self.device = torch.device(device)
        self.model_name = model_name
        self.n_slots, self.alpha = int(n_slots), float(alpha)
        # Mixed ranks (issue 34): `rank` is an int or per-slot ranks (cycled); `self.rank` is the storage width,
        # the largest rank any slot may hold (`max_rank`, default the largest given).
        ranks = slot_ranks(rank, self.n_slots)
        self.rank = int(max_rank) if max_rank else max(ranks)
        self.ctx, self.layers = inject_multi_lora(
            self.model, self.n_slots, ranks, self.alpha, targets, seed=seed, max_rank=self.rank
        )
        self.targets = sorted({n.rsplit(".", 1)[-1] for n in self.layers})
        self.params = [p for layer in self.layers.values() for p in (layer.lora_A, layer.lora_B)]
        for p in self.params:
            p.requires_grad_(True)
        self.optimizer = SlotAdamW(
            self.params, self.n_slots, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay
        )
        self.max_grad_norm = max_grad_norm
        self.clip_eps, self.clip_eps_high, self.entropy_coef = clip_eps, clip_eps_high, float(entropy_coef)
        if not float(kl_coef) >= 0.0:
            raise EngineError(f"kl_coef must be >= 0 (0 = off), got {kl_coef!r}.")
        if kl_estimator not in KL_ESTIMATORS:
            raise EngineError(f"kl_estimator={kl_estimator!r}; choose one of {KL_ESTIMATORS}.")
        # KL to the frozen base (populora.rl.kl): 0 = off, no reference forward at all (the paper's update)
        self.kl_coef, self.kl_estimator = float(kl_coef), kl_estimator
        self.loss_agg = loss_agg
        self.micro_batch_tokens = int(micro_batch_tokens)
        if not float(tis_cap) >= 0.0:
            raise EngineError(f"tis_cap must be >= 0 (0 = off), got {tis_cap!r}.")
        self.tis_cap = float(tis_cap)  # truncated importance sampling against the sampler's log-probs
        # Response tokens per lm_head chunk in training and log-probs (0 = all at once, the old full logits).
        self.logit_chunk_tokens = LOGIT_CHUNK_TOKENS
        self.lora_dropout = float(lora_dropout)
        self.dropout_salt = 0  # the distributed engine sets each worker's rank: other rows, other masks
        self.gen_batch_size = int(gen_batch_size)
        self.gen_threads, self.train_threads = gen_threads, train_threads
        # The prompts' prefill is a forward over hundreds of positions per row, matmuls of the size training runs,
        # so on the lean path it takes the training thread count (None: train_threads); decoding a few rows a
        # token at a time is faster on one thread (docs/engine.md, Threads).
        self.prefill_threads = prefill_threads if prefill_threads is not None else train_threads
        self.seed = seed
        self.generator = torch.Generator().manual_seed(seed)
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        self.eos_ids = self._eos_ids()
        self._decoder = model.get_decoder()
        self._head = model.get_output_embeddings()
        # transformers 5 calls the KV cache argument `cache` (4.x: `past_key_values`, `num_logits_to_keep`).
        params = inspect.signature(model.forward).parameters
        self._cache_kw = "cache" if "cache" in params else "past_key_values"
        self._keep_kw = next((k for k in ("logits_to_keep", "num_logits_to_keep") if k in params), None)
        self.activation_checkpointing = bool(activation_checkpointing)
        # rows of one (slot, prompt) share one forward of the prompt in train steps and log-probs, where exact
        self.share_prompts = bool(share_prompts)
        if self.activation_checkpointing:
            checkpoint_layers(self._decoder, self.ctx)
        # Generation path: "lean" (engine/decode.py: shared prompt prefills, preallocated KV cache, no
        # transformers `forward` per token) where the architecture allows, else "forward" (the original
        # loop, every step through `model.forward`). `populora bench population` times both in one run.
        self._lean = LeanDecoder.for_model(self.model)
        self.gen_path = "lean" if self._lean is not None else "forward"
        # `gen_dtype` (engine/gen_dtype.py): the frozen base in a lower precision while generate runs.
        lora = {id(p) for p in self.params}
        base = next((p.dtype for p in self.model.parameters() if id(p) not in lora), torch.float32)
        try:
            low = resolve_gen_dtype(gen_dtype, base)
        except ValueError as err:
            raise EngineError(
                f"{err} (model.gen_dtype; 'model' generates in the base's own dtype)."
            ) from None
        try:
            self.gen_weights = self.generation_weights(low)
        except ValueError as err:
            raise EngineError(f"{err} (model.gen_dtype).") from None

    def generation_weights(self, low: torch.dtype | str | None) -> GenerationWeights | Int8Linears | None:
        """What `generate` swaps in for the frozen base to generate in `low` (a dtype, "int8", or None: nothing);
        `self.gen_weights` holds the engine's own. Benchmarks set `gen_weights` to others to compare them."""
        if low is None:
            return None
        if low == "int8":  # the lean decoder holds the output head too
            return Int8Linears(self.model, owners=[self._lean] if self._lean is not None else [])
        return GenerationWeights(self.model, self.params, low)

    # ------------------------------------------------------------------ slots and adapters
    def _check_slot(self, slot: int) -> int:
        if not isinstance(slot, int | torch.Tensor) or not 0 <= int(slot) < self.n_slots:
            raise EngineError(f"slot {slot!r} out of range; this engine has slots 0..{self.n_slots - 1}.")
        return int(slot)

    def get_adapter(self, slot: int) -> LoRAAdapter:
        """A copy of slot `slot` as a `LoRAAdapter` (module names = the base model's module paths)."""
        ad = get_slot_adapter(self.layers, self._check_slot(slot))
        ad.metadata.update(
            {"base_model": self.model_name, "target_modules": self.targets, "lora_dropout": self.lora_dropout}
        )
        return ad

    def set_adapter(self, slot: int, adapter: LoRAAdapter, reset_optimizer: bool = True) -> None:
        """Copy `adapter` into slot `slot` (the slot takes its rank); `reset_optimizer` forgets the slot's AdamW
        moments and step (always done when the rank changes: the old moments belong to other components)."""
        slot = self._check_slot(slot)
        old_rank = get_slot_rank(self.layers, slot)
        set_slot_adapter(self.layers, slot, adapter)
        if reset_optimizer or adapter.rank != old_rank:
            self.optimizer.reset(slot)

    def slot_ranks(self) -> list[int]:
        """The rank of the adapter in each slot (mixed ranks: they may differ; all <= `self.rank`)."""
        return list(next(iter(self.layers.values())).slot_ranks)

    def reset_slot(self, slot: int, seed: int | None = None) -> None:
        """Re-initialise slot `slot` (PEFT init: B = 0, i.e. the base model) and its optimiser state."""
        init_slots(self.layers, [self._check_slot(slot)], self.seed if seed is None else seed)
        self.optimizer.reset(slot)

    def set_lr(self, slot: int, lr: float) -> None:
        self.optimizer.set_lr(self._check_slot(slot), lr)

    def get_lr(self, slot: int) -> float:
        return float(self.optimizer.lr[self._check_slot(slot)])

    def optimizer_state(self) -> dict:
        """All slots' AdamW state (moments, step counts, learning rates) for checkpoints (`torch.save`-able)."""
        return self.optimizer.state_dict()

    def load_optimizer_state(self, state: dict) -> None:
        try:
            self.optimizer.load_state_dict(state)
        except (KeyError, ValueError) as e:
            raise EngineError(f"cannot load optimizer state: {e}") from e

    def close(self) -> None:
        """Nothing to release: the model and slots are ordinary tensors, freed with the engine."""
