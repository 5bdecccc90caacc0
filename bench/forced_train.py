"""`populora train` with a few valid problems forced into every step (run by bench/gpu_check.py's `run_steps`).

A random-weight model never writes a valid proposal, so without help the students of a GPU check's run would
have nothing to solve: no student generation, no scoring, no student rows in the update. This runner patches
the trainer in its own process only (nothing in `populora` changes): in each step the first `--valid N`
code_i/code_o proposals (at most one per teacher, so several students play) get the text of a seed problem from the run's own buffers, rendered as a perfect
teacher writes it (`task.render_proposal`), so they pass the real parser and the real sandbox validation; the
model's tokens, log-probs and the rest of the step stay as sampled. The first answer to each forced problem
gets the gold answer's text (`task.render_answer`), so the scoring sees a solve and the rewards differ. Every
phase of the step then runs on the real path: teacher generation, validation, student generation, scoring,
the update on teacher and student rows, ratings, evolution and checkpoints.

    python bench/forced_train.py --valid 4 -- --preset paper-7b --run-dir RUN --set ...   # `populora train` args
    python bench/forced_train.py --valid 4 -- --resume RUN --set train.steps=2
"""

from __future__ import annotations

import argparse
import sys

FORCED_TASKS = ("code_i", "code_o")  # one input each: any seed problem renders as a valid proposal


def install(n_valid: int) -> None:
    """Patch `Trainer.propose` and `Trainer.solve` in this process (see the module docstring)."""
    from populora.train.trainer import Trainer

    propose, solve = Trainer.propose, Trainer.solve

    def force_proposal(self, trace, step: int) -> None:
        state = self.__dict__.setdefault("_forced", {"step": None, "n": 0, "teachers": set(), "traces": {}})
        if state["step"] != step:
            state.update(step=step, n=0, teachers=set())
        if id(trace) in state["traces"] or state["n"] >= n_valid or trace.task not in FORCED_TASKS:
            return
        if trace.gen is None or trace.teacher in state["teachers"]:  # one per teacher: more students play
            return
        guard = self.probe_guard  # a probe program would be dropped as a collision: never force one
        pool = [p for p in self.buffers[trace.task] if guard is None or not guard.collides(p.program)]
        if not pool:
            return
        p = pool[(step * n_valid + state["n"]) % len(pool)]
        task = self.tasks[trace.task]
        template = self.cfg.tasks.template
        trace.gen.text = task.render_proposal(p.program, list(p.inputs), p.message, template=template)
        state["n"] += 1
        state["teachers"].add(trace.teacher)
        state["traces"][id(trace)] = trace

    def forced_propose(self, pairs, step, per_prompt=None, *, finished=None):
        def put(trace):  # the overlap lane validates as rows finish: force before it sees the text
            force_proposal(self, trace, step)
            finished(trace)

        traces = propose(self, pairs, step, per_prompt, finished=put if finished is not None else None)
        for trace in traces:
            force_proposal(self, trace, step)
        return traces

    def force_answer(self, trace, answers) -> None:
        forced = self.__dict__.get("_forced", {}).get("traces", {})
        if id(trace) not in forced or not trace.valid or not answers:
            return
        task = self.tasks[trace.task]
        answers[0].text = task.render_answer(
            task.gold_answer(trace.problem), template=self.cfg.tasks.template
        )

    def forced_solve(self, traces, step, *, finished=None):
        def put(trace, answers):  # the overlap lane scores as a problem's answers are in
            force_answer(self, trace, answers)
            finished(trace, answers)

        solve(self, traces, step, finished=put if finished is not None else None)
        for trace in traces:
            force_answer(self, trace, trace.answers)

    Trainer.propose, Trainer.solve = forced_propose, forced_solve


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    cut = argv.index("--") if "--" in argv else len(argv)
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--valid", type=int, default=4, help="valid problems forced into each step (0: none)")
    args = ap.parse_args(argv[:cut])
    if args.valid < 0:
        raise SystemExit(f"forced_train: --valid must be >= 0, got {args.valid}.")
    if args.valid:
        install(args.valid)
    from populora.cli import app

    app(["train", *argv[cut + 1 :]], prog_name="populora")


if __name__ == "__main__":  # vLLM's engine core is spawned: the guard keeps it from re-running this
    main()
