"""Sampled pass@1 on held-out items: what RL with verifiable rewards moves first.

RL sharpens: it turns answers the model already samples into the ones it prefers. A greedy probe sees that
only once the right answer becomes the most likely one; the share of sampled answers that are right moves
earlier and with less noise per item. This module scores `samples` answers per member and item at one
temperature, all drawn from ONE fixed evaluation seed (`EVAL_SEED`), so two measurements of an unchanged
adapter are identical and the change between them is the adapter's, not the sampler's.

Used by the self-play probe (`diagnostics.probe_samples`, metrics.jsonl `probe_sampled`, probe_items.jsonl
`sampled`) and by `populora experiment control rl` (its held-out measure). Pure reading: nothing here trains.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any

EVAL_SEED = 424_242  # one sampler seed for every sampled measurement of every run


def sampled_solves(
    engine,
    slots: Mapping[str, int],
    problems: Mapping[str, Sequence],
    sandbox,
    samples: int,
    temperature: float,
    budget: Mapping[str, int],
    template: str = "compact",
    seed: int = EVAL_SEED,
    generate_kwargs: Mapping[str, Any] | None = None,
) -> dict[str, dict[str, list[int]]]:
    """How many of `samples` answers at `temperature` solve each item: `{member: {task: [count per item]}}`.

    One mixed-slot `engine.generate` for every (member, item, sample), then one `tasks.score_many` with every
    problem's answers of all members (the sandbox runs them in parallel)."""
    from populora.engine import GenRequest
    from populora.tasks import get, score_many

    if samples < 1:
        raise ValueError(f"samples must be >= 1, got {samples}")
    if not temperature > 0:
        raise ValueError(
            f"a sampled probe needs a temperature > 0 (0 is the greedy probe), got {temperature}"
        )
    members = list(slots)
    tasks = {t: get(t) for t in problems}
    flat = [(t, i, p) for t in problems for i, p in enumerate(problems[t])]
    requests = [
        GenRequest(
            slot=slots[m],
            prompt=tasks[t].student_prompt(p, template=template),
            max_new_tokens=budget[t],
            temperature=temperature,
        )
        for t, _, p in flat
        for m in members
        for _ in range(samples)
    ]
    out: dict[str, dict[str, list[int]]] = {m: {t: [0] * len(problems[t]) for t in problems} for m in members}
    if not requests:
        return out
    gens = engine.generate(requests, seed=seed, **dict(generate_kwargs or {}))
    per_item = len(members) * samples
    items = []
    for k, (t, _, p) in enumerate(flat):
        texts = [g.text for g in gens[k * per_item : (k + 1) * per_item]]
        items.append((tasks[t], p, [tasks[t].parse_answer(x, template=template) for x in texts]))
    for (t, i, _), scored in zip(flat, score_many(items, sandbox), strict=True):
        for j, m in enumerate(members):
            out[m][t][i] = sum(bool(ok) for ok in scored.solves[j * samples : (j + 1) * samples])
    return out


def pass_at_1(counts: Mapping[str, Mapping[str, Sequence[int]]], samples: int) -> dict[str, dict[str, float]]:
    """Sampled pass@1 per member and task: the mean over items of (solves / samples)."""
    return {
        m: {t: round(statistics.fmean(c) / samples, 6) if c else 0.0 for t, c in per_task.items()}
        for m, per_task in counts.items()
    }


__all__ = ["EVAL_SEED", "pass_at_1", "sampled_solves"]
