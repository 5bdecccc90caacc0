"""`HFEngine`'s generation half (engine/hf.py): `HFGeneration.generate` and its two decoding loops.

Mixed-slot batches, our own KV-cached decode loop (left padding, per-row temperature/top-p, stop on EOS or
max_new_tokens, finished rows pruned from the batch and the cache), per-token log-probs; "forward" runs every
step through `model.forward`, "lean" shares prompt prefills and decodes on preallocated KV buffers
(engine/decode.py). A mixin: every attribute it reads is set by `HFEngine.__init__`. Also here: the
thread-count block (`torch_threads`) and the progress callback type, which training takes too
(engine/hf_train.py). Every name is also importable from `populora.engine.hf`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext

import torch

from populora.engine.sampling import sample_next
from populora.engine.types import EngineError, Generation, GenRequest

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


class HFGeneration:
    """`HFEngine`'s generation methods (see the module docstring)."""

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
