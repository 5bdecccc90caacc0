"""Phase (2a), teacher generation (`Trainer.propose`): which prompts each teacher is shown, and the one
mixed-slot `engine.generate` that answers every teacher's prompts at once.

Owns the prompt schedule (`tasks.prompts` prompts per matchup, split equally across `tasks.types`), the draw of
the K reference problems each prompt shows (code_f: the one program whose inputs the teacher writes), and the
`ProposalTrace`s of the step: one per sampled proposal, with its teacher's `gen`. What a proposal means is
validation's (train/validate.py). Every draw comes from the run's rng in trace order, so a resumed run shows
the same references.
"""

from __future__ import annotations

from populora.train.records import ProposalTrace


def task_schedule(types: list[str], prompts: int) -> list[str]:
    """`prompts` task names split equally across `types` (the remainder goes to the first types)."""
    base, extra = divmod(prompts, len(types))
    return [t for i, t in enumerate(types) for _ in range(base + (1 if i < extra else 0))]


def propose(
    tr, pairs: list[tuple[str, str]], step: int, per_prompt: int | None = None, *, finished=None
) -> list[ProposalTrace]:
    """One trace per teacher proposal of trainer `tr`, with the teacher's generation (one mixed batch over all
    teachers).

    Each prompt is sampled `per_prompt` times (default `rl.teacher_group`); consecutive traces share one
    prompt, and `build_rows` gives them one baseline. `finished(trace)` is called with each trace as soon as
    its generation is in (`train.overlap`: the lane validates it meanwhile)."""
    cfg = tr.cfg
    per_prompt = cfg.rl.teacher_group if per_prompt is None else per_prompt
    traces, requests = [], []
    for teacher, student in pairs:
        slot = tr.pop[teacher].slot
        for name in task_schedule(cfg.tasks.types, cfg.tasks.prompts):
            task = tr.tasks[name]
            if name == "code_f":  # the teacher writes inputs + a message for a program from the buffers
                shown = tr.buffers.sample_program(tr.rng).program
                prompt = task.teacher_prompt(shown, template=cfg.tasks.template)
            else:
                shown = None
                refs = tr.buffers[name].sample(cfg.tasks.references, tr.rng)
                prompt = task.teacher_prompt(refs, template=cfg.tasks.template)
            for _ in range(per_prompt):
                traces.append(ProposalTrace(teacher, student, name, shown_program=shown))
                requests.append(tr.teacher_request(slot, prompt))

    def on_finish(i: int, gen) -> None:
        traces[i].gen = gen
        finished(traces[i])

    gens = tr._generate(requests, step, "teacher", on_finish if finished is not None else None)
    for trace, gen in zip(traces, gens, strict=True):
        trace.gen = gen
    return traces


__all__ = ["propose", "task_schedule"]
