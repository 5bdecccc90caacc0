"""Phase (5), evolution (`Trainer.evolve`, `evolves_at`): the weakest members replaced by operator children.

Owns when evolution runs (every `evolution.every` steps in population mode, never after the final step) and
applying the plan that population/evolution.py draws from the run's rng: for each replaced member, the
operator's child of its parents' adapters (operators/) goes into the member's slot with fresh AdamW moments, the
population records the child's lineage, and the step's events say what happened (or why a child was skipped).
A run extended past a final step that skipped its evolution runs it on resume (`deferred_evolution`), so it
continues as an uninterrupted run would.
"""

from __future__ import annotations

import time

from populora.config import Config
from populora.operators import REGISTRY, apply
from populora.population.evolution import plan_evolution


def evolves_at(step: int, cfg: Config, final: bool = True) -> bool:
    """Whether phase (5) runs after `step`: every `evolution.every` steps in population mode, but never after
    the final step (`final=False` ignores that rule), whose children would be saved and evaluated without a
    single update (the paper's children need 10-20 steps to recover). A resume that trains past that step
    runs the skipped evolution first (`Trainer.restore`)."""
    every = cfg.evolution.every
    due = cfg.population.mode != "single" and bool(every) and step % every == 0
    return due and (not final or step < cfg.train.steps)


def evolve(tr, step: int) -> list[dict]:
    """Replace the bottom gamma of each role by operator children of top-ranked parents."""
    arity = {name: op.arity for name, op in REGISTRY.items()}
    events = []
    for r in plan_evolution(tr.pop, tr.cfg, tr.ratings.prior(), tr.rng, arity=arity):
        t0 = time.perf_counter()
        parents = [tr.engine.get_adapter(tr.pop[p].slot) for p in r.parents]
        try:
            child = apply(r.operator, parents=parents, seed=r.seed, **r.params)  # M6: lora.rank_range
        except ValueError as err:  # e.g. a parent diverged to NaN: keep the member, log why, train on
            events.append(
                {
                    "step": step,
                    "type": "evolution_skipped",
                    "role": r.role,
                    "operator": r.operator,
                    "parents": list(r.parents),
                    "replaced": r.replaced,
                    "reason": str(err),
                }
            )
            continue
        # THE one place the applied operator is read: an operator may decline its recipe and apply another
        # (X4 falls back to averaging when its parents disagree); the child's lineage metadata names the
        # one applied (what `operators.applied_operator(child)` returns), and the population's lineage and
        # the event record that one, never the planned name; `planned` keeps the draw.
        lineage = child.metadata.get("lineage") or {}
        applied = lineage.get("operator") or r.operator
        slot = tr.pop[r.replaced].slot
        # A child starts with fresh AdamW moments: its parent's moments describe other weights.
        tr.engine.set_adapter(slot, child, reset_optimizer=True)
        member = tr.pop.replace(r.replaced, r.child_rating, list(r.parents), step, applied)
        events.append(
            {
                "step": step,
                "type": "evolution",
                "role": r.role,
                "operator": applied,
                "planned": r.operator,
                "parents": list(r.parents),
                "child": member.id,
                "replaced": r.replaced,
                "child_mu": member.mu,
                "child_sigma": member.sigma,
                "seed": r.seed,
                # what the operator did: why it declined its recipe (X4 below its cosine gate falls back to
                # X5) or null, and X4's cos(D1, D2) (null for operators that do not measure it)
                "declined": lineage.get("declined"),
                "cos": (child.metadata.get("info") or {}).get("cos"),
                "seconds": time.perf_counter() - t0,
            }
        )
    return events


def deferred_evolution(tr, step: int) -> None:
    """A run extended past its old final step runs the evolution that step skipped, so it continues as an
    uninterrupted run would: the same RNG draws in the same order, the same events. The new population
    is checkpointed at once; events an earlier, killed attempt already logged are not logged twice (the
    replay is deterministic, so they are the same)."""
    events = tr.evolve(step)
    logged = any(
        e.get("step") == step and str(e.get("type", "")).startswith("evolution")
        for e in tr.run.read("events.jsonl")
    )
    if not logged:
        for ev in events:
            tr.run.event(ev)
    tr.save(step)


__all__ = ["deferred_evolution", "evolve", "evolves_at"]
