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
"""

from __future__ import annotations

import dataclasses
import hashlib
import inspect
import time
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from populora.engine.decode import LeanDecoder
from populora.engine.gen_dtype import GenerationWeights, Int8Linears, resolve_gen_dtype
from populora.engine.optim import SlotAdamW, clip_slot_grads
from populora.engine.sampling import sample_next
from populora.engine.shared_prompts import pack_groups, shared_prompt_hidden, shares_prompts, split_shared
from populora.engine.types import EngineError, Generation, GenRequest, PeftFolderIO, TrainBatch, TrainRow
from populora.lora.adapter import LoRAAdapter
from populora.lora.layers import (
    get_slot_adapter,
    get_slot_rank,
    init_slots,
    inject_multi_lora,
    set_slot_adapter,
    slot_ranks,
)
from populora.rl.kl import KL_ESTIMATORS, kl_per_token
from populora.rl.logprobs import LOGIT_CHUNK_TOKENS, response_logprobs
from populora.rl.loss import LOSS_AGG_MODES, policy_loss, row_weights, truncated_is_weights

# progress(done, total, info): `info` holds "tokens" (generated so far) for generate, "rows" for train_step.
ProgressFn = Callable[[int, int, dict], None]
# on_finish(i, generation): request i (its index in the call's list) has finished decoding.
FinishFn = Callable[[int, Generation], None]
# Report decoding progress every this many decode steps (and whenever rows finish): cheap, yet live.
PROGRESS_EVERY = 16


@contextmanager
def torch_threads(n: int | None) -> Iterator[None]:
    """Run the block with `n` intra-op threads (None: leave as is)."""
    if not n:
        yield
        return
    prev = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(prev)


class HFEngine(PeftFolderIO):
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

    # ------------------------------------------------------------------ generation
    def _eos_ids(self) -> set[int]:
        ids: set[int] = set()
        for src in (self.tokenizer.eos_token_id, getattr(self.model.generation_config, "eos_token_id", None)):
            if src is None:
                continue
            ids.update([src] if isinstance(src, int) else list(src))
        return ids

    def encode(self, prompt: str | Sequence[int]) -> list[int]:
        if isinstance(prompt, str):
            ids = list(self.tokenizer(prompt)["input_ids"])
        else:
            ids = [int(t) for t in prompt]
        if not ids:  # an empty prompt starts from BOS (or EOS, the document separator of packed pretraining)
            start = (
                self.tokenizer.bos_token_id
                if self.tokenizer.bos_token_id is not None
                else self.tokenizer.eos_token_id
            )
            ids = [start]
        return ids

    @torch.no_grad()
    def generate(
        self,
        requests: list[GenRequest],
        seed: int | None = None,
        progress: ProgressFn | None = None,
        on_finish: FinishFn | None = None,
    ) -> list[Generation]:
        """Sample every request (any mix of slots) in KV-cached batches; results in request order.

        `progress(done, total, {"tokens": n})` is called as requests finish, `on_finish(i, generation)` once per
        request when its row stops (see the module docstring); neither changes what is sampled."""
        if not requests:
            return []
        gen = self.generator if seed is None else torch.Generator().manual_seed(seed)
        for r in requests:
            self._check_slot(r.slot)
            if r.max_new_tokens < 0:
                raise EngineError(f"max_new_tokens must be >= 0, got {r.max_new_tokens}")
        prompts = [self.encode(r.prompt) for r in requests]
        # Similar lengths together (less padding); inside a batch rows are sorted by slot (one LoRA run per slot).
        order = sorted(range(len(requests)), key=lambda i: (len(prompts[i]), requests[i].slot))
        results: list[Generation | None] = [None] * len(requests)
        for i in [i for i in order if requests[i].max_new_tokens == 0]:
            results[i] = Generation([], "", [], "length", prompt_ids=prompts[i], slot=requests[i].slot)
            if on_finish is not None:
                on_finish(i, results[i])
        order = [i for i in order if requests[i].max_new_tokens > 0]
        total, finished = len(requests), len(requests) - len(order)
        report = None
        if progress is not None:
            progress(finished, total, {"tokens": 0})
            tokens_before = 0

            def report(done: int, tokens: int) -> None:
                progress(finished + done, total, {"tokens": tokens_before + tokens})

        low = self.gen_weights.use() if self.gen_weights is not None else nullcontext()
        with torch_threads(self.gen_threads), low:
            if self.gen_path not in ("lean", "forward") or (self.gen_path == "lean" and self._lean is None):
                raise EngineError(
                    f"gen_path={self.gen_path!r}: use 'forward', or 'lean' for a model LeanDecoder supports."
                )
            batch_fn = self._generate_batch_lean if self.gen_path == "lean" else self._generate_batch
            for c in range(0, len(order), self.gen_batch_size):
                chunk = sorted(order[c : c + self.gen_batch_size], key=lambda i: (requests[i].slot, i))
                done = None if on_finish is None else (lambda row, g, chunk=chunk: on_finish(chunk[row], g))
                outs = batch_fn([requests[i] for i in chunk], [prompts[i] for i in chunk], gen, report, done)
                for i, out in zip(chunk, outs, strict=True):
                    results[i] = out
                finished += len(chunk)
                if progress is not None:
                    tokens_before += sum(len(o.token_ids) for o in outs)
        return results  # type: ignore[return-value]

    def _generate_batch(
        self,
        reqs: list[GenRequest],
        prompts: list[list[int]],
        gen: torch.Generator,
        report: Callable[[int, int], None] | None = None,
        finish: FinishFn | None = None,
    ) -> list[Generation]:
        from transformers import DynamicCache

        b = len(reqs)
        dev = self.device
        lens = torch.tensor([len(p) for p in prompts])
        width = int(lens.max())
        input_ids = torch.full((b, width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((b, width), dtype=torch.long)
        for i, p in enumerate(prompts):
            input_ids[i, width - len(p) :] = torch.tensor(p)
            mask[i, width - len(p) :] = 1
        position_ids = (mask.cumsum(-1) - 1).clamp(min=0)
        temps = torch.tensor([float(r.temperature) for r in reqs])
        top_p = torch.tensor([float(r.top_p) for r in reqs])
        max_new = torch.tensor([int(r.max_new_tokens) for r in reqs])
        slots = torch.tensor([r.slot for r in reqs])
        tokens: list[list[int]] = [[] for _ in range(b)]
        logps: list[list[float]] = [[] for _ in range(b)]
        reasons = ["length"] * b
        built: list[Generation | None] = [None] * b  # rows handed to `finish` as they stopped
        alive = torch.arange(b)  # original row of each row still in the batch
        eos = torch.tensor(sorted(self.eos_ids)) if self.eos_ids else None
        cache = DynamicCache()
        # next_pos: position of the token fed at the next decode step (the first sampled one sits at len(prompt)).
        step_ids, cur_mask, next_pos = input_ids.to(dev), mask.to(dev), lens - 1
        n_steps = int(max_new.max())
        for step in range(n_steps):
            kw = {self._cache_kw: cache}
            if self._keep_kw:
                kw[self._keep_kw] = 1
            with self.ctx.use(slots[alive]):
                out = self.model(
                    input_ids=step_ids,
                    attention_mask=cur_mask,
                    position_ids=(position_ids.to(dev) if step == 0 else next_pos[:, None].to(dev)),
                    use_cache=True,
                    **kw,
                )
            logits = out.logits[:, -1].float().cpu()
            nxt = sample_next(logits, temps[alive], top_p[alive], gen)
            lp = torch.log_softmax(logits, -1).gather(-1, nxt[:, None]).squeeze(-1)
            done = torch.zeros(len(alive), dtype=torch.bool)
            for j, row in enumerate(alive.tolist()):
                t = int(nxt[j])
                tokens[row].append(t)
                logps[row].append(float(lp[j]))
                if eos is not None and t in self.eos_ids:
                    reasons[row] = "stop"
                    done[j] = True
                elif len(tokens[row]) >= int(max_new[row]):
                    done[j] = True
                if finish is not None and done[j]:
                    built[row] = self._generation(
                        reqs[row], prompts[row], tokens[row], logps[row], reasons[row]
                    )
                    finish(row, built[row])
            if report is not None and (bool(done.any()) or step % PROGRESS_EVERY == 0):
                n_done = b - len(alive) + int(done.sum())
                report(n_done, sum(len(t) for t in tokens))
            if bool(done.all()):
                break
            keep = (~done).nonzero().squeeze(-1)
            if len(keep) < len(alive):
                # Drop finished rows from the batch and the KV cache (rows stay sorted by slot).
                cache.batch_select_indices(keep.to(dev))
                alive, nxt, cur_mask, next_pos = (
                    alive[keep],
                    nxt[keep],
                    cur_mask[keep.to(dev)],
                    next_pos[keep],
                )
            step_ids = nxt[:, None].to(dev)
            cur_mask = torch.cat([cur_mask, torch.ones((len(alive), 1), dtype=cur_mask.dtype, device=dev)], 1)
            next_pos = next_pos + 1
        return self._generations(reqs, prompts, tokens, logps, reasons, built)

    def _generations(self, reqs, prompts, tokens, logps, reasons, built) -> list[Generation]:
        """One `Generation` per request of a finished batch (both decoding paths end here); rows already
        handed to `finish` (`built`) keep their object."""
        return [
            built[i] or self._generation(reqs[i], prompts[i], tokens[i], logps[i], reasons[i])
            for i in range(len(reqs))
        ]

    def _generation(self, req, prompt, tokens, logps, reason) -> Generation:
        return Generation(
            token_ids=tokens,
            text=self.tokenizer.decode(tokens, skip_special_tokens=True),
            logprobs=logps,
            finish_reason=reason,
            prompt_ids=list(prompt),
            slot=req.slot,
        )

    def _generate_batch_lean(
        self,
        reqs: list[GenRequest],
        prompts: list[list[int]],
        gen: torch.Generator,
        report: Callable[[int, int], None] | None = None,
        finish: FinishFn | None = None,
    ) -> list[Generation]:
        """`_generate_batch` on the lean path (engine/decode.py): the same sampling, stopping, pruning and
        random draws, with three savings. (1) Rows with the same prompt and slot (a student's n rollouts of
        one problem) share one prefill: it runs once per distinct (slot, prompt) and its keys/values are
        copied to every row. (2) Each decode step is `LeanDecoder.step` on preallocated key/value buffers.
        (3) Per-token bookkeeping reads each step's tokens and log-probs from Python lists."""
        from transformers import DynamicCache

        b = len(reqs)
        dev = self.device
        lens = torch.tensor([len(p) for p in prompts])
        width = int(lens.max())
        # (1) one prefill row per distinct (slot, prompt); rows stay sorted by slot
        first: dict[tuple, int] = {}
        row_of, uniq = [], []  # row -> its prefill row; prefill row -> its first row
        for i, (r, p) in enumerate(zip(reqs, prompts, strict=True)):
            key = (r.slot, tuple(p))
            if key not in first:
                first[key] = len(uniq)
                uniq.append(i)
            row_of.append(first[key])
        n_u = len(uniq)
        input_ids = torch.full((n_u, width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((n_u, width), dtype=torch.long)
        for j, i in enumerate(uniq):
            p = prompts[i]
            input_ids[j, width - len(p) :] = torch.tensor(p)
            mask[j, width - len(p) :] = 1
        position_ids = (mask.cumsum(-1) - 1).clamp(min=0)
        temps = torch.tensor([float(r.temperature) for r in reqs])
        top_p = torch.tensor([float(r.top_p) for r in reqs])
        max_new = [int(r.max_new_tokens) for r in reqs]
        slots = torch.tensor([r.slot for r in reqs])
        tokens: list[list[int]] = [[] for _ in range(b)]
        logps: list[list[float]] = [[] for _ in range(b)]
        reasons = ["length"] * b
        built: list[Generation | None] = [None] * b  # rows handed to `finish` as they stopped
        eos = self.eos_ids
        n_steps = max(max_new)
        cache = DynamicCache()
        kw = {self._cache_kw: cache}
        if self._keep_kw:
            kw[self._keep_kw] = 1
        with self.ctx.use(slots[torch.tensor(uniq)]), torch_threads(self.prefill_threads):
            out = self.model(
                input_ids=input_ids.to(dev),
                attention_mask=mask.to(dev),
                position_ids=position_ids.to(dev),
                use_cache=True,
                **kw,
            )
        expand = torch.tensor(row_of, device=dev)
        logits = out.logits[:, -1].float().cpu()
        if n_u < b:
            logits = logits[torch.tensor(row_of)]
        # KV buffers start with room for 64 new tokens and double when full (see LeanDecoder.grow)
        full = width + n_steps
        cap = min(full, width + 64)
        bufs = self._lean.start(cache, n_u, width, cap)
        if n_u < b:
            bufs = [buf.index_select(0, expand) for buf in bufs]
        del cache, out
        key_mask = torch.ones((b, full), dtype=torch.bool, device=dev)
        key_mask[:, :width] = mask.to(dev).bool()[expand]
        padded = (lens < width).tolist()
        alive = list(range(b))  # original row of each row still in the batch
        # per live row, refreshed only when rows finish: sampling settings, slots, whether any row is padded
        row_temps, row_top_p, has_pad = temps, top_p, any(padded)
        next_pos = (lens - 1).to(dev)
        step_ids = torch.empty(0, dtype=torch.long)  # the tokens fed at the next step (set after sampling)
        length = width  # cache positions filled (the same for every row: prompts are left-padded)
        with self.ctx.use(slots):
            for step in range(n_steps):
                if step:
                    # (2) the mask is None when no live row has left padding (as transformers passes it)
                    m = key_mask[:, : length + 1] if has_pad else None
                    if length + 1 > cap:
                        cap = min(full, 2 * cap)
                        bufs = self._lean.grow(bufs, length, cap)
                    logits = self._lean.step(step_ids, next_pos, bufs, length, m).float().cpu()
                    length += 1
                nxt = sample_next(logits, row_temps, row_top_p, gen)
                lp = torch.log_softmax(logits, -1).gather(-1, nxt[:, None]).squeeze(-1)
                keep = []
                n_finished = 0
                # (3) one tolist per step instead of a tensor read per row
                for j, (row, t, x) in enumerate(zip(alive, nxt.tolist(), lp.tolist(), strict=True)):
                    tokens[row].append(t)
                    logps[row].append(x)
                    if t in eos:
                        reasons[row] = "stop"
                    elif len(tokens[row]) < max_new[row]:
                        keep.append(j)
                        continue
                    n_finished += 1
                    if finish is not None:
                        built[row] = self._generation(
                            reqs[row], prompts[row], tokens[row], logps[row], reasons[row]
                        )
                        finish(row, built[row])
                if report is not None and (n_finished or step % PROGRESS_EVERY == 0):
                    report(b - len(alive) + n_finished, sum(len(t) for t in tokens))
                if not keep:
                    break
                if len(keep) < len(alive):
                    # Drop finished rows: compact the buffers' live part in place (rows stay sorted by slot).
                    k = torch.tensor(keep, device=dev)
                    n = len(keep)
                    # rows before the first finished one stay where they are: move only the rows after it
                    lo = next(i for i, j in enumerate(keep + [len(alive)]) if i != j)
                    for buf in bufs:
                        if lo < n:
                            buf[lo:n, :, :length] = buf[k[lo:], :, :length]
                    bufs = [buf[:n] for buf in bufs]
                    key_mask = key_mask[k]
                    alive = [alive[j] for j in keep]
                    nxt, next_pos = nxt[keep], next_pos[k]
                    alive_t = torch.tensor(alive)
                    self.ctx.set(slots[alive_t])  # the `use` block restores the caller's slots at the end
                    row_temps, row_top_p = temps[alive_t], top_p[alive_t]
                    has_pad = any(padded[r] for r in alive)
                step_ids = nxt.to(dev)
                next_pos = next_pos + 1
        return self._generations(reqs, prompts, tokens, logps, reasons, built)

    # ------------------------------------------------------------------ training
    def _micro_batches(self, rows: list[TrainRow]) -> list[list[int]]:
        """Row indices grouped so that rows x padded length <= micro_batch_tokens; each group sorted by slot.

        First the fewest groups k that greedy length-sorted packing needs; then each slot's rows (sorted by
        length) are split into k near-equal chunks and group j takes chunk j of every slot, if that fits the
        budget and pads less than 10% more. Balanced groups give every slot a segment of the same size in
        every forward, which the multi-LoRA layers run as a view (no gather/scatter copies).
        """

        def total(i: int) -> int:
            return len(rows[i].prompt_ids) + len(rows[i].response_ids)

        budget = self.micro_batch_tokens
        if budget == 0:  # one batch: every row in one forward
            return [sorted(range(len(rows)), key=lambda i: (rows[i].slot, i))]
        order = sorted(range(len(rows)), key=lambda i: (total(i), i))
        greedy, cur, cur_max = [], [], 0
        for i in order:
            n = total(i)
            if cur and (len(cur) + 1) * max(cur_max, n) > budget:
                greedy.append(cur)
                cur, cur_max = [], 0
            cur.append(i)
            cur_max = max(cur_max, n)
        if cur:
            greedy.append(cur)
        k = len(greedy)
        by_slot: dict[int, list[int]] = defaultdict(list)
        for i in order:
            by_slot[rows[i].slot].append(i)
        balanced: list[list[int]] = [[] for _ in range(k)]
        for members in by_slot.values():
            size, extra = divmod(len(members), k)
            start = 0
            for j in range(k):
                end = start + size + (1 if j < extra else 0)
                balanced[j].extend(members[start:end])
                start = end
        balanced = [g for g in balanced if g]

        def padded(groups: list[list[int]]) -> int:
            return sum(len(g) * max(total(i) for i in g) for g in groups)

        fits = all(len(g) * max(total(i) for i in g) <= budget or len(g) == 1 for g in balanced)
        # Balanced groups mix lengths when slots differ in length; keep them only if that costs < 10% padding.
        groups = balanced if fits and padded(balanced) <= 1.1 * padded(greedy) else greedy
        return [sorted(g, key=lambda i: (rows[i].slot, i)) for g in groups]

    def _shares_prompt_forward(self) -> bool:
        """Whether the update may run each distinct (slot, prompt) once (engine/shared_prompts.py): exact up to
        rounding only without LoRA dropout in this forward and without checkpointed layers."""
        dropout = self.lora_dropout > 0 and torch.is_grad_enabled()
        # architectures the lean decoder knows (engine/decode.py): a standard decoder with a DynamicCache
        known = self._lean is not None
        return self.share_prompts and known and not dropout and not self.activation_checkpointing

    def _batches(self, rows: list[TrainRow]) -> list[list[int]]:
        """The micro-batches of a train step or log-prob pass. Where the prompt forward is shared, the rows
        whose (slot, prompt) recurs go in batches that keep a prompt's rows together (`pack_groups`) and the
        rest in `_micro_batches` of their own: for a row alone with its prompt, two forwards would only add
        per-call cost."""
        if not self._shares_prompt_forward():
            return self._micro_batches(rows)
        shared, alone = split_shared(rows)
        if not shared:
            return self._micro_batches(rows)
        out = [
            [shared[j] for j in g] for g in pack_groups([rows[i] for i in shared], self.micro_batch_tokens)
        ]
        if alone:
            out += [[alone[j] for j in g] for g in self._micro_batches([rows[i] for i in alone])]
        return out

    def _response_hidden(self, rows: list[TrainRow]) -> tuple[torch.Tensor, torch.Tensor, list[int]]:
        """Final hidden states `[N, H]` at the positions that predict each response token (rows concatenated),
        the targets `[N]`, and the response length of each row. The lm_head runs later, in chunks
        (`populora.rl.logprobs`), so the `[N, V]` logits are never held at once."""
        if self._shares_prompt_forward() and shares_prompts(rows):
            return shared_prompt_hidden(
                rows, self._decoder, self.ctx.use, self._cache_kw, self.pad_id, self.device
            )
        b = len(rows)
        seqs = [list(r.prompt_ids) + list(r.response_ids) for r in rows]
        width = max(len(s) for s in seqs)
        ids = torch.full((b, width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((b, width), dtype=torch.long)
        rows_idx, pos_idx, targets, n_resp = [], [], [], []
        for i, (r, s) in enumerate(zip(rows, seqs, strict=True)):
            ids[i, : len(s)] = torch.tensor(s)
            mask[i, : len(s)] = 1
            p, n = len(r.prompt_ids), len(r.response_ids)
            rows_idx += [i] * n
            pos_idx += list(range(p - 1, p + n - 1))
            targets += list(r.response_ids)
            n_resp.append(n)
        with self.ctx.use([r.slot for r in rows]):
            hidden = self._decoder(
                input_ids=ids.to(self.device), attention_mask=mask.to(self.device), use_cache=False
            ).last_hidden_state
        h = hidden[torch.tensor(rows_idx, device=self.device), torch.tensor(pos_idx, device=self.device)]
        return h, torch.tensor(targets, device=self.device), n_resp

    def _response_logprobs(
        self, rows: list[TrainRow], entropy_grad: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, list[int]]:
        """(`logp [N]`, `entropy [N]`, targets `[N]`, response lengths) of `rows`' response tokens, the
        vocabulary projection chunked by `logit_chunk_tokens` (`populora.rl.logprobs.response_logprobs`)."""
        h, targets, n_resp = self._response_hidden(rows)
        logp, ent = response_logprobs(
            h, self._head, targets, chunk_tokens=self.logit_chunk_tokens, entropy_grad=entropy_grad
        )
        return logp, ent, targets, n_resp

    @torch.no_grad()
    def _reference_logprobs(self, rows: list[TrainRow]) -> torch.Tensor:
        """Log-probs `[N]` of `rows`' response tokens under the frozen base (the reference of `kl_coef`): the same
        forward with every row's slot set to -1, which `MultiLoRALinear` runs without a LoRA delta. No dropout
        (the reference is deterministic, and the policy's dropout masks draw from a forked RNG)."""
        base_rows = [dataclasses.replace(r, slot=-1) for r in rows]
        dropout, self.ctx.dropout = self.ctx.dropout, 0.0
        try:
            h, targets, _ = self._response_hidden(base_rows)
        finally:
            self.ctx.dropout = dropout
        logp, _ = response_logprobs(h, self._head, targets, chunk_tokens=self.logit_chunk_tokens)
        return logp

    def _check_rows(self, batch: TrainBatch) -> list[TrainRow]:
        return check_rows(batch, self.n_slots)

    @torch.no_grad()
    def logprobs(self, batch: TrainBatch) -> list[list[float]]:
        """Per-token log-probs of each row's response under its slot (no gradient), in row order."""
        rows = self._check_rows(batch)
        out: dict[int, list[float]] = {}
        index = {id(r): i for i, r in enumerate(batch.rows)}
        with torch_threads(self.train_threads):
            for group in self._batches(rows):
                sub = [rows[i] for i in group]
                logp, _, _, n_resp = self._response_logprobs(sub)
                lp = logp.cpu().tolist()
                k = 0
                for r, n in zip(sub, n_resp, strict=True):
                    out[index[id(r)]] = lp[k : k + n]
                    k += n
        return [out.get(i, []) for i in range(len(batch.rows))]

    def train_step(self, batch: TrainBatch, progress: ProgressFn | None = None) -> dict[str, float]:
        """One optimiser step for every slot that has rows in `batch`; returns metrics.

        `progress(done, total, {"rows": n})` is called before the first and after every micro-batch.

        Per slot s (keys `<name>/<s>`): loss, pg_loss, entropy (token mean), grad_norm (before clipping),
        tokens, rows, adv_mean, and with PPO clip: clip_frac, approx_kl; with kl_coef > 0: kl_ref (the mean KL
        estimate to the frozen base). Totals: loss (sum over slots),
        tokens, rows, slots, time_s.
        """
        t0 = time.perf_counter()
        rows = self._check_rows(batch)
        if not rows:
            raise EngineError("train_step got no rows with response tokens.")
        weights = row_weights([len(r.response_ids) for r in rows], [r.loss_key for r in rows], self.loss_agg)
        sums = self.accumulate_gradients(rows, weights, progress)
        norms = self.apply_gradients(sorted(sums["tokens"]))
        return train_metrics(sums, norms, len(rows), self.entropy_coef, self.clip_eps is not None, t0)

    # The two halves of `train_step`, also used by the distributed engine (`populora.engine.dist`): each
    # worker accumulates the gradients of its share of the rows with the weights of the whole batch, the
    # LoRA gradients are summed across workers, then every worker applies the same step.
    def accumulate_gradients(
        self, rows: list[TrainRow], weights: Sequence[float], progress: ProgressFn | None = None
    ) -> dict[str, dict[int, float]]:
        """Set `.grad` of the LoRA parameters to the gradient of `sum_rows weights[i] * row loss` (no step).

        `rows` must have response tokens (`check_rows`); `weights[i]` is row i's aggregation weight
        (`populora.rl.loss.row_weights` over the whole batch). Returns per-slot sums for `train_metrics`:
        {name: {slot: value}} for pg_loss, entropy_sum, ent_w, clip_sum, adv_sum, kl_sum, tokens, rows (and
        kl_ref_sum, kl_loss with kl_coef > 0).
        """
        acc: dict[str, dict[int, float]] = defaultdict(lambda: defaultdict(float))
        pending: list[tuple[list[TrainRow], list[int], list[str], torch.Tensor]] = []
        for p in self.params:
            p.grad = None
        with torch_threads(self.train_threads), torch.enable_grad(), self._dropout_on():
            groups = self._batches(rows)  # in grad mode: under LoRA dropout the prompt forward is not shared
            if progress is not None:
                progress(0, len(groups), {"rows": 0})
            for n_group, group in enumerate(groups, 1):
                sub = [rows[i] for i in group]
                logp, ent, _, n_resp = self._response_logprobs(sub, entropy_grad=bool(self.entropy_coef))
                adv = torch.tensor([a for r in sub for a in r.advantage_list()], device=logp.device)
                old = None
                uses_sampler = self.clip_eps is not None or self.tis_cap > 0
                if uses_sampler and any(r.old_logprobs is not None for r in sub):
                    # Rows without sampler log-probs count as on-policy (ratio 1).
                    parts, k = [], 0
                    for r, n in zip(sub, n_resp, strict=True):
                        parts.append(
                            torch.tensor([float(x) for x in r.old_logprobs], device=logp.device)
                            if r.old_logprobs is not None
                            else logp[k : k + n].detach()
                        )
                        k += n
                    old = torch.cat(parts)
                sampler, old = old, (old if self.clip_eps is not None else None)
                pg, clipped = policy_loss(logp, adv, old, self.clip_eps, self.clip_eps_high)
                is_w = None
                if self.tis_cap > 0 and sampler is not None:
                    is_w = truncated_is_weights(logp, sampler, self.tis_cap)
                    pg = pg * is_w
                w = torch.cat(
                    [
                        torch.full((n,), float(weights[i]), device=logp.device)
                        for i, n in zip(group, n_resp, strict=True)
                    ]
                )
                loss = (w * pg).sum()
                if self.entropy_coef:
                    loss = loss - self.entropy_coef * (w * ent).sum()
                kl = None
                if self.kl_coef > 0:  # penalty toward the frozen base, weighted as the policy-gradient term
                    kl = kl_per_token(logp, self._reference_logprobs(sub), self.kl_estimator)
                    loss = loss + self.kl_coef * (w * kl).sum()
                loss.backward()
                # Per-row metric sums, left on the device: read once for the whole step below (one sync, not
                # one `float()` per metric and row, which would also stall the next micro-batch's launch).
                with torch.no_grad():
                    names = ["pg_loss", "entropy_sum", "ent_w", "clip_sum", "adv_sum"]
                    cols = [w * pg, ent, w * ent, clipped, adv]
                    if old is not None:
                        names.append("kl_sum")
                        cols.append(old - logp.detach())
                    if is_w is not None:
                        names.append("is_sum")
                        cols.append(is_w)
                    if kl is not None:  # the slot's mean KL to the base, and its term in the slot's loss
                        names += ["kl_ref_sum", "kl_loss"]
                        cols += [kl, self.kl_coef * w * kl]
                    flat = torch.stack([c.detach().float() for c in cols])  # [metric, token]
                    per_row = torch.stack(
                        [part.sum(1) for part in flat.split(n_resp, dim=1)]
                    )  # [row, metric]
                    pending.append((sub, n_resp, names, per_row))
                if progress is not None:
                    progress(n_group, len(groups), {"rows": sum(len(g) for g in groups[:n_group])})
        for sub, n_resp, names, per_row in pending:
            for r, n, values in zip(sub, n_resp, per_row.tolist(), strict=True):
                for name, v in zip(names, values, strict=True):
                    acc[name][r.slot] += v
                acc["tokens"][r.slot] += n
                acc["rows"][r.slot] += 1
        return {name: dict(per_slot) for name, per_slot in acc.items()}

    @contextmanager
    def _dropout_on(self) -> Iterator[None]:
        """LoRA dropout for the block (a train step's forwards), from a seed of (engine seed, salt, every slot's
        optimizer step count): a resumed run, whose optimizer state holds the counts, draws the same masks.
        The global torch RNG is forked, so nothing else's random stream moves, and seeded rather than a private
        generator because activation checkpointing replays a layer under the global RNG state it saved."""
        if not self.lora_dropout:
            yield
            return
        key = f"{self.seed}:{self.dropout_salt}:{self.optimizer.steps.tolist()}".encode()
        seed = int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "little") >> 1
        cuda = self.device.type == "cuda"
        index = (
            (self.device.index if self.device.index is not None else torch.cuda.current_device())
            if cuda
            else None
        )
        with torch.random.fork_rng(devices=[index] if cuda else []):
            torch.default_generator.manual_seed(seed)
            if cuda:
                with torch.cuda.device(index):
                    torch.cuda.manual_seed(seed)
            self.ctx.dropout = self.lora_dropout
            try:
                yield
            finally:
                self.ctx.dropout = 0.0

    def apply_gradients(self, slots: Sequence[int]) -> torch.Tensor:
        """Clip each slot's `.grad` to `max_grad_norm`, take one AdamW step for `slots`, clear the grads.

        Returns every slot's gradient norm before clipping (`[n_slots]`).
        """
        norms = clip_slot_grads(self.params, self.n_slots, self.max_grad_norm)
        self.optimizer.step(slots)
        for p in self.params:
            p.grad = None
        return norms


def decoder_layers(decoder: nn.Module) -> list[nn.Module]:
    """The transformer blocks of a HF decoder (its `GradientCheckpointingLayer`s, else `decoder.layers`)."""
    try:
        from transformers.modeling_layers import GradientCheckpointingLayer
    except ImportError:  # older transformers: every decoder we load keeps its blocks in `.layers`
        GradientCheckpointingLayer = ()  # noqa: N806
    found = [
        m
        for m in decoder.modules()
        if GradientCheckpointingLayer and isinstance(m, GradientCheckpointingLayer)
    ]
    return found or list(getattr(decoder, "layers", []))


def checkpoint_layers(decoder: nn.Module, ctx) -> None:
    """Activation checkpointing: each decoder layer's forward, when gradients are on, keeps only its inputs
    and recomputes its activations in the backward pass (`torch.utils.checkpoint`, non-reentrant).

    Our own wrapper, not HF's `gradient_checkpointing_enable`: that one acts only in train mode (which would
    also turn on the base model's dropout) and its replay would not see the per-row LoRA slots, which the
    `SlotContext` holds only while the forward runs. Here each call snapshots the context and the replay
    runs under that snapshot. Generation and log-probs (no gradients) run the layers as they are. The wrapper
    is an instance attribute, so module names and state-dict keys stay the base model's."""
    layers = decoder_layers(decoder)
    if not layers:
        raise EngineError(
            f"activation_checkpointing: cannot find the decoder layers of {type(decoder).__name__} (no "
            "GradientCheckpointingLayer, no .layers); set rl.activation_checkpointing=false."
        )
    for layer in layers:
        forward = layer.forward

        def run(*args, _forward=forward, **kwargs):
            if not torch.is_grad_enabled():
                return _forward(*args, **kwargs)
            snap = ctx.snapshot()

            def replay(*a, **k):
                with ctx.restored(snap):
                    return _forward(*a, **k)

            return checkpoint(replay, *args, use_reentrant=False, **kwargs)

        layer.forward = run


def check_rows(batch: TrainBatch, n_slots: int) -> list[TrainRow]:
    """Validate a TrainBatch (slots, prompts, log-prob and advantage counts); return its rows that have
    response tokens. Raises `EngineError` naming the bad row."""
    if not isinstance(batch, TrainBatch):
        raise EngineError(f"train_step expects a TrainBatch, got {type(batch).__name__}")
    for r in batch.rows:
        if not isinstance(r.slot, int | torch.Tensor) or not 0 <= int(r.slot) < n_slots:
            raise EngineError(f"slot {r.slot!r} out of range; this engine has slots 0..{n_slots - 1}.")
        if len(r.prompt_ids) < 1:
            raise EngineError(f"row of slot {r.slot} has an empty prompt; give at least one prompt token.")
        if r.old_logprobs is not None and len(r.old_logprobs) != len(r.response_ids):
            raise EngineError(
                f"row of slot {r.slot}: {len(r.old_logprobs)} old_logprobs for "
                f"{len(r.response_ids)} response tokens."
            )
        r.advantage_list()  # raises on a wrong number of advantages
    return [r for r in batch.rows if len(r.response_ids) > 0]


def train_metrics(
    sums: dict[str, dict[int, float]],
    norms: torch.Tensor,
    n_rows: int,
    entropy_coef: float,
    ppo: bool,
    t0: float,
) -> dict[str, float]:
    """`train_step`'s metrics from the per-slot sums of `accumulate_gradients` (summed over workers when
    distributed), the pre-clipping norms and the start time `t0` (`time.perf_counter()`)."""

    def get(name: str, s: int) -> float:
        return sums.get(name, {}).get(s, 0.0)

    slots = sorted(sums["tokens"])
    m: dict[str, float] = {}
    total = 0.0
    for s in slots:
        tok = get("tokens", s)
        slot_loss = get("pg_loss", s) - entropy_coef * get("ent_w", s) + get("kl_loss", s)
        total += slot_loss
        m[f"loss/{s}"] = slot_loss
        m[f"pg_loss/{s}"] = get("pg_loss", s)
        m[f"entropy/{s}"] = get("entropy_sum", s) / tok
        m[f"grad_norm/{s}"] = float(norms[s])
        m[f"tokens/{s}"] = float(tok)
        m[f"rows/{s}"] = float(get("rows", s))
        m[f"adv_mean/{s}"] = get("adv_sum", s) / tok
        if ppo:
            m[f"clip_frac/{s}"] = get("clip_sum", s) / tok
            m[f"approx_kl/{s}"] = get("kl_sum", s) / tok
        if "is_sum" in sums:  # rl.tis_cap: the mean truncated importance weight of the slot's tokens
            m[f"is_weight/{s}"] = get("is_sum", s) / tok
        if "kl_ref_sum" in sums:  # rl.kl_coef > 0: the mean per-token KL estimate to the frozen base
            m[f"kl_ref/{s}"] = get("kl_ref_sum", s) / tok
    m.update(
        {
            "loss": total,
            "tokens": float(sum(sums["tokens"].values())),
            "rows": float(n_rows),
            "slots": float(len(slots)),
            "time_s": time.perf_counter() - t0,
        }
    )
    return m
