"""The update's forward with each distinct prompt run once (issue 30 §4): rows that share a slot and a prompt
(a student's n rollouts of one problem) share one forward of the prompt, whose keys/values are copied to every
row before its response runs on top of them.

Without it, a train step's forward runs `prompt + response` for every row: in a `tiny-learn` 4T+4S step about
62% of the positions are prompts, and rows of 37 distinct prompts make 80 rows, so the prompts' forward (and
backward) runs about twice over (`bench/results/shared_prompts.json`). With it the step runs

1. one forward of every distinct (slot, prompt), right-padded, with a KV cache; the hidden state at each
   prompt's last position predicts its rows' first response token;
2. the cache copied to the rows (`index_select`, so gradients from every row flow back into the one prompt
   forward), then one forward of every row's response but its last token, at positions after its prompt,
   masked to its own prompt's positions.

The hidden states are those of the plain forward up to float rounding (the same sums in another order); the
gradients too (tests/engine/test_shared_prompts.py). The engine uses it where that holds: not under LoRA
dropout (each row would no longer draw its own mask over its prompt) nor with activation checkpointing (its
checkpointed layers do not return a cache), and only when some rows do share a prompt.

`prompt_groups` and `pack_groups` are the pure parts (which rows share, and micro-batches that keep a prompt's
rows together under the token budget); `shared_prompt_hidden` runs the two forwards.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from populora.engine.types import TrainRow


def prompt_groups(rows: Sequence[TrainRow]) -> tuple[list[int], list[int]]:
    """(`first`, `group_of`): the index of the first row of every distinct (slot, prompt), in row order, and
    for every row the position of its prompt in `first`."""
    seen: dict[tuple, int] = {}
    first: list[int] = []
    group_of: list[int] = []
    for i, r in enumerate(rows):
        key = (r.slot, tuple(r.prompt_ids))
        if key not in seen:
            seen[key] = len(first)
            first.append(i)
        group_of.append(seen[key])
    return first, group_of


def shares_prompts(rows: Sequence[TrainRow]) -> bool:
    """Whether at least two rows have the same slot and prompt (else the plain forward is as cheap)."""
    first, _ = prompt_groups(rows)
    return len(first) < len(rows)


def split_shared(rows: Sequence[TrainRow]) -> tuple[list[int], list[int]]:
    """(`shared`, `alone`): the indices of the rows whose (slot, prompt) another row has too, and the rest."""
    _, group_of = prompt_groups(rows)
    count: dict[int, int] = {}
    for g in group_of:
        count[g] = count.get(g, 0) + 1
    shared = [i for i, g in enumerate(group_of) if count[g] > 1]
    alone = [i for i, g in enumerate(group_of) if count[g] == 1]
    return shared, alone


def shared_cost(prompt_lens: Sequence[int], response_lens: Sequence[int]) -> int:
    """Padded positions of one shared forward: distinct prompts x the longest, plus rows x the longest
    response but one (each row's first response token is predicted by its prompt's last position)."""
    if not response_lens:
        return 0
    return len(prompt_lens) * max(prompt_lens, default=0) + len(response_lens) * (max(response_lens) - 1)


def pack_groups(rows: Sequence[TrainRow], budget: int) -> list[list[int]]:
    """Row indices in micro-batches whose `shared_cost` stays within `budget` padded positions (0 = one
    batch), keeping a prompt's rows together: prompts sorted by length are added greedily; a prompt whose
    rows alone exceed the budget is split into chunks of rows that fit (at least one row each). Each batch
    is sorted by (slot, row) as the multi-LoRA layers prefer."""
    if not rows:
        return []
    if budget <= 0:
        return [sorted(range(len(rows)), key=lambda i: (rows[i].slot, i))]
    first, group_of = prompt_groups(rows)
    members: list[list[int]] = [[] for _ in first]
    for i, g in enumerate(group_of):
        members[g].append(i)

    def cost(batch: list[list[int]]) -> int:
        plens = [len(rows[m[0]].prompt_ids) for m in batch]
        rlens = [len(rows[i].response_ids) for m in batch for i in m]
        return shared_cost(plens, rlens)

    # Whole prompts first, chunks of an over-budget prompt's rows as prompts of their own.
    units: list[list[int]] = []
    for m in members:
        if cost([m]) <= budget:
            units.append(m)
            continue
        chunk: list[int] = []
        for i in sorted(m, key=lambda i: (len(rows[i].response_ids), i)):
            if chunk and cost([chunk + [i]]) > budget:
                units.append(chunk)
                chunk = []
            chunk.append(i)
        units.append(chunk)
    units.sort(key=lambda m: (max(len(rows[i].response_ids) for i in m), len(rows[m[0]].prompt_ids), m[0]))
    batches: list[list[list[int]]] = []
    cur: list[list[int]] = []
    for u in units:
        if cur and cost(cur + [u]) > budget:
            batches.append(cur)
            cur = []
        cur.append(u)
    if cur:
        batches.append(cur)
    return [sorted((i for u in b for i in u), key=lambda i: (rows[i].slot, i)) for b in batches]


def shared_prompt_hidden(
    rows: Sequence[TrainRow],
    decoder: torch.nn.Module,
    use_slots: Callable,
    cache_kw: str,
    pad_id: int,
    device: torch.device,
) -> tuple[torch.Tensor, torch.Tensor, list[int]]:
    """Final hidden states `[N, H]` at the positions that predict each response token (rows concatenated in
    order), the targets `[N]` and each row's response length: what the engine's plain forward returns, with
    each distinct (slot, prompt) run once. `decoder` is the model's decoder (no lm_head), `use_slots(slots)`
    the multi-LoRA context for per-row slots, `cache_kw` its forward's KV-cache argument."""
    from transformers import DynamicCache

    first, group_of = prompt_groups(rows)
    n_u, b = len(first), len(rows)
    plen = [len(rows[i].prompt_ids) for i in first]
    width = max(plen)
    ids = torch.full((n_u, width), pad_id, dtype=torch.long)
    mask = torch.zeros((n_u, width), dtype=torch.long)
    for j, i in enumerate(first):
        ids[j, : plen[j]] = torch.tensor(list(rows[i].prompt_ids))
        mask[j, : plen[j]] = 1
    cache = DynamicCache()
    with use_slots([rows[i].slot for i in first]):
        out = decoder(
            input_ids=ids.to(device), attention_mask=mask.to(device), use_cache=True, **{cache_kw: cache}
        )
    expand = torch.tensor(group_of)
    last = out.last_hidden_state[torch.arange(n_u), torch.tensor(plen) - 1]  # [U, H]: predicts token 0
    del out
    n_resp = [len(r.response_ids) for r in rows]
    targets = torch.tensor([t for r in rows for t in r.response_ids], device=device)
    first_h = last.index_select(0, expand.to(device))  # [B, H]
    rest = max(n_resp) - 1
    if rest == 0:  # one-token responses: the prompts' last positions predict everything
        return first_h, targets, n_resp
    cache.reorder_cache(expand.to(device))  # index_select per layer: every row's copy keeps its gradient path
    cids = torch.full((b, rest), pad_id, dtype=torch.long)
    cmask = torch.zeros((b, rest), dtype=torch.long)
    pos = torch.zeros((b, rest), dtype=torch.long)
    for i, r in enumerate(rows):
        n = len(r.response_ids) - 1
        if n:
            cids[i, :n] = torch.tensor(list(r.response_ids[:-1]))
            cmask[i, :n] = 1
        pos[i] = len(r.prompt_ids) + torch.arange(rest)  # right after the row's own prompt, padding or not
    full_mask = torch.cat([mask.index_select(0, expand), cmask], dim=1)
    with use_slots([r.slot for r in rows]):
        hc = decoder(
            input_ids=cids.to(device),
            attention_mask=full_mask.to(device),
            position_ids=pos.to(device),
            use_cache=True,
            **{cache_kw: cache},
        ).last_hidden_state  # [B, rest, H]: position j predicts response token j + 1
    seq = torch.cat([first_h.unsqueeze(1), hc], dim=1)  # [B, 1 + rest, H]
    rows_idx = torch.tensor([i for i, n in enumerate(n_resp) for _ in range(n)], device=device)
    tok_idx = torch.tensor([k for n in n_resp for k in range(n)], device=device)
    return seq[rows_idx, tok_idx], targets, n_resp
