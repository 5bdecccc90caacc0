"""The hall of fame's games during training (docs/hall-of-fame.md): every `hof.every` steps, after the step's
update and evolution, each member plays extra, UNRATED games against frozen reference players (who they are
and which slot each holds: `populora.population.hall`), and the step's metrics.jsonl record gets `hof`.

A round, in the paper's game, with the trainer's own generation, validation and scoring paths:

1. proposals: every member teacher (the single agent as proposer) answers the same fixed teacher prompts
   (`train.probe.teacher_probe_prompts`: references from the probe sets, the same in every run),
   `hof.prompts` per task type, at `rl.teacher_temperature`; a hall teacher whose exam is not made yet (it
   joined last round) answers them too, in the same mixed-slot batch. `Trainer.check_proposals` validates in
   the sandbox and touches no buffer. A hall teacher's valid problems are its exam, made once and kept
   (`hall/<id>/exam.jsonl`): the same problems at every later round.
2. games, one mixed-slot batch, n = `rl.rollouts` answers each at the training temperature: every hall student
   answers each member teacher's valid proposals; every member student answers every hall teacher's exam.
3. one `tasks.score_many` for all answers.
4. snapshots: the best teacher and student by LCB are frozen into the hall (`hall/<id>/adapter/`, a PEFT
   folder of safetensors); a full pool gives up its oldest snapshot (its files stay on disk).

Nothing of a round reaches the run's state: no buffer, coverage, rating, PFSP draw, reward or update, and its
random draws come from seeds of their own (`derive_seed(seed, step, "hof-...")`), so a run's training is the
same with the hall on or off. The hall (entries, slots, exam sizes) is saved in each checkpoint's state.json
and restored with it; the files it names are read back from `RUN_DIR/hall/`.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from populora import safe_files, tasks
from populora.population.hall import BASE, Hall, HallEntry, best_by_lcb, hall_summary, side_record
from populora.train.setup import derive_seed

HALL_DIR = "hall"  # RUN_DIR/hall/<entry id>/{adapter/, exam.jsonl}


class HallGames:
    """The trainer's hall of fame: when a round is due, its games, its snapshots, its checkpoint state."""

    def __init__(self, cfg: Any) -> None:
        h, single = cfg.hof, cfg.population.mode == "single"
        self.cfg, self.every, self.single = cfg, h.every, single
        members = 1 if single else cfg.population.teachers + cfg.population.students
        self.hall = Hall(h.size, first_slot=members, single=single)
        types = len(cfg.tasks.types)
        self.per_type = h.prompts or max(1, cfg.tasks.prompts // (2 * types * (1 + h.size)))
        self.exams: dict[str, list] = {}  # entry id -> its exam's problems
        self._prompts: list | None = None

    @property
    def enabled(self) -> bool:
        return self.every > 0

    def due(self, step: int) -> bool:
        return self.enabled and step % self.every == 0

    # -- files -----------------------------------------------------------------------------------------------
    def folder(self, trainer: Any, entry: str) -> Path:
        return Path(trainer.run.path) / HALL_DIR / entry

    def _write_exam(self, trainer: Any, entry: HallEntry, problems: list) -> None:
        path = self.folder(trainer, entry.id) / "exam.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".exam.{os.getpid()}.tmp")
        # a fresh file (O_EXCL, no link followed), renamed into place: run-folder files are data (issue 50)
        safe_files.write_bytes_new(tmp, "".join(p.to_json() + "\n" for p in problems).encode("utf-8"))
        os.replace(tmp, path)

    def _read_exam(self, trainer: Any, entry: HallEntry) -> list:
        path = self.folder(trainer, entry.id) / "exam.jsonl"
        try:
            lines = safe_files.read_text(path).splitlines()
        except safe_files.RunFileError as err:
            raise ValueError(f"hall exam {err}") from None
        except OSError:
            raise ValueError(f"hall exam {path} is missing") from None
        problems = [tasks.Problem.from_json(line) for line in lines if line.strip()]
        if len(problems) != entry.exam:
            raise ValueError(
                f"hall exam {path} holds {len(problems)} problems, the checkpoint says {entry.exam}"
            )
        return problems

    def _load_slot(self, trainer: Any, entry: HallEntry) -> None:
        """Put the entry's frozen adapter in its slot: the zero update for the base, else its saved folder."""
        engine = trainer.engine
        if entry.id == BASE:
            ad = engine.get_adapter(entry.slot)
            engine.set_adapter(entry.slot, ad.map(lambda _n, a, b: (a, b.new_zeros(b.shape))))
        else:
            engine.load_adapter(entry.slot, self.folder(trainer, entry.id) / "adapter")

    # -- checkpoints -----------------------------------------------------------------------------------------
    def state_dict(self) -> list[dict]:
        return self.hall.state_dict()

    def restore(self, trainer: Any, state: Any) -> None:
        """Load a checkpoint's hall: entries, their adapters into their slots, their exams. A malformed state or
        a missing file raises ValueError (the checkpoint does not fit; the trainer tries an older one)."""
        self.hall.load_state(state if state is not None else [])
        self.exams = {}
        for e in self.hall.entries:
            self._load_slot(trainer, e)
            if e.exam is not None:
                self.exams[e.id] = self._read_exam(trainer, e)

    # -- a round ---------------------------------------------------------------------------------------------
    def after_step(self, trainer: Any, step: int, record: dict) -> None:
        """Play a round when one is due and add its `hof` to the step's record; then take the snapshots."""
        if not self.due(step):
            return
        t0 = time.perf_counter()
        hof = self.play(trainer, step)
        self.snapshot(trainer, step)
        hof["seconds"] = round(time.perf_counter() - t0, 4)
        record["hof"] = hof
        if trainer.live is not None:
            trainer.live.line(hof_line(step, hof))

    def _generate(self, trainer: Any, requests: list, step: int, phase: str) -> list:
        if not requests:
            return []
        if trainer.live is not None:
            trainer.live.show(phase)
        seed = derive_seed(self.cfg.train.seed, step, phase)
        try:
            return trainer.engine.generate(
                requests, seed=seed, **trainer._progress(trainer.engine.generate, phase)
            )
        finally:
            if trainer.live is not None:
                trainer.live.end_phase()

    def play(self, trainer: Any, step: int) -> dict:
        """One round's games; returns the record's `hof` (`hall`, `members`)."""
        from populora.train.probe import teacher_probe_prompts
        from populora.train.records import ProposalTrace

        cfg, hall = self.cfg, self.hall
        if BASE not in hall:
            self._load_slot(trainer, hall.admit_base())
        if self._prompts is None:
            self._prompts = teacher_probe_prompts(
                trainer.tasks, self.per_type, cfg.tasks.references, cfg.tasks.template
            )
        members = trainer.pop.ordered()
        proposers = [m for m in members if m.role in ("teacher", "single")]
        solvers = [m for m in members if m.role in ("student", "single")]
        pending = [e for e in hall.teachers if e.exam is None]

        # (1) proposals of the member teachers and of the hall teachers still without an exam
        players = [(m.id, m.slot) for m in proposers] + [(e.id, e.slot) for e in pending]
        traces, requests = [], []
        for name, prompt, shown in self._prompts:
            for pid, slot in players:
                traces.append(ProposalTrace(pid, "", name, shown_program=shown))
                requests.append(trainer.teacher_request(slot, prompt))
        for trace, gen in zip(traces, self._generate(trainer, requests, step, "hof-teacher"), strict=True):
            trace.gen = gen
        trainer.check_proposals(traces, step)  # the sandbox's verdicts; no buffer, no coverage
        for e in pending:
            exam = [t.problem for t in traces if t.teacher == e.id and t.valid]
            self._write_exam(trainer, e, exam)
            self.exams[e.id], e.exam = exam, len(exam)

        # (2) the games: hall students on member teachers' problems, member students on hall teachers' exams
        games: list[tuple[str, str, str, Any]] = []  # (side, member, entry, problem)
        for t in traces:
            if t.valid and t.teacher not in hall:
                games += [("teacher", t.teacher, h.id, t.problem) for h in hall.students]
        for m in solvers:
            games += [("student", m.id, h.id, p) for h in hall.teachers for p in self.exams[h.id]]
        slot = {m.id: m.slot for m in members} | {e.id: e.slot for e in hall.entries}
        requests = []
        for side, member, entry, p in games:
            prompt = trainer.tasks[p.task].student_prompt(p, template=cfg.tasks.template)
            solver = entry if side == "teacher" else member
            requests += [
                trainer._request(slot[solver], prompt, cfg.tasks.student_max_new_tokens)
            ] * cfg.rl.rollouts
        gens = self._generate(trainer, requests, step, "hof-student")

        # (3) one scoring batch for every answer
        n, items = cfg.rl.rollouts, []
        for i, (_, _, _, p) in enumerate(games):
            task = trainer.tasks[p.task]
            answers = [
                task.parse_answer(g.text, template=cfg.tasks.template) for g in gens[i * n : (i + 1) * n]
            ]
            items.append((task, p, answers))
        until = time.monotonic() + cfg.sandbox.score_step_deadline_s
        scored = tasks.score_many(items, trainer.sandbox, until=until) if items else []

        # the record: per member and side, its valid share and its solve rate against each hall entry
        verdicts: dict[tuple[str, str], dict[str, list[bool]]] = {}
        parsed: dict[str, list[bool]] = {m.id: [] for m in solvers}
        for (side, member, entry, _), (_, _, answers), res in zip(games, items, scored, strict=True):
            verdicts.setdefault((side, member), {}).setdefault(entry, []).extend(bool(x) for x in res.solves)
            if side == "student":
                parsed[member] += [not isinstance(a, tasks.FormatError) for a in answers]
        out: dict[str, dict] = {}
        for m in proposers:
            valid = [t.valid for t in traces if t.teacher == m.id]
            against = verdicts.get(("teacher", m.id), {})
            solves = {h.id: against.get(h.id, []) for h in hall.students}
            out.setdefault(m.id, {})["teacher"] = side_record(valid, solves)
        for m in solvers:
            against = verdicts.get(("student", m.id), {})
            solves = {h.id: against.get(h.id, []) for h in hall.teachers}
            out.setdefault(m.id, {})["student"] = side_record(parsed[m.id], solves)
        return {"hall": hall_summary(hall.entries), "members": out}

    def snapshot(self, trainer: Any, step: int) -> list[HallEntry]:
        """Freeze the best member of each role (by LCB) into the hall; return the new entries."""
        members = trainer.pop.ordered()
        ratings = [(m.id, m.role, None if self.single else m.mu, m.sigma) for m in members]
        new = []
        for role, mid in sorted(best_by_lcb(ratings, self.cfg.ratings.lcb_k).items()):
            entry, evicted = self.hall.admit(mid, role, step)
            if evicted is entry:  # hof.size = 0: the base model only
                continue
            if evicted is not None:
                self.exams.pop(evicted.id, None)
            engine = trainer.engine
            engine.set_adapter(entry.slot, engine.get_adapter(trainer.pop[mid].slot), reset_optimizer=True)
            engine.save_adapter(entry.slot, self.folder(trainer, entry.id) / "adapter")
            new.append(entry)
        return new


def hof_line(step: int, hof: dict) -> str:
    """The console line after a round: the member-mean solve rates against the base model, per side."""

    def mean(side: str) -> str:
        vals = [m[side]["solve"].get(BASE) for m in hof["members"].values() if side in m]
        vals = [v for v in vals if v is not None]
        return f"{sum(vals) / len(vals):.2f}" if vals else "-"

    return (
        f"hall of fame at step {step}: the base model solves the teachers' problems {mean('teacher')}, "
        f"the students solve its exam {mean('student')} ({len(hof['hall'])} in the hall, {hof['seconds']:.1f}s)"
    )


__all__ = ["HALL_DIR", "HallGames", "hof_line"]
