"""`HFEngine`'s training half (engine/hf.py): `HFTraining.train_step`, `logprobs` and what they share.

One mixed batch of rows from any slots, micro-batched by a padded-token budget (`_micro_batches`, or
`pack_groups` where rows share a prompt forward, engine/shared_prompts.py), the lm_head on response positions
only and a chunk at a time, the policy-gradient loss with its optional terms (PPO clip, truncated importance
sampling, entropy bonus, KL to the frozen base), LoRA dropout seeded per step, and per-slot clipping and AdamW
(`accumulate_gradients` + `apply_gradients`, the two halves the distributed engine runs on each worker). Also
the module-level helpers: activation checkpointing (`checkpoint_layers`), row validation (`check_rows`) and
the step's metrics (`train_metrics`). A mixin: every attribute it reads is set by `HFEngine.__init__`. Every
name is also importable from `populora.engine.hf`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import time
from collections import defaultdict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from populora.engine.hf_generate import ProgressFn, torch_threads
from populora.engine.optim import clip_slot_grads
from populora.engine.shared_prompts import pack_groups, shared_prompt_hidden, shares_prompts, split_shared
from populora.engine.types import EngineError, TrainBatch, TrainRow
from populora.rl.kl import kl_per_token
from populora.rl.logprobs import response_logprobs
from populora.rl.loss import policy_loss, row_weights, truncated_is_weights


class HFTraining:
    """`HFEngine`'s training and log-prob methods (see the module docstring)."""

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
