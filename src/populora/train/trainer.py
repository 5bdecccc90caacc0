"""The self-play trainer. One `Trainer.step` is the paper's five phases, top to bottom; each phase's machinery
lives in the train/ module named after it, one click from the step:

    (1) match      match.py     PFSP over TrueSkill ratings -> one (teacher, student) pair per teacher
    (2) propose    propose.py   each teacher proposes `tasks.prompts` problems split equally across the task
                                types, each prompt showing K reference problems from the buffers
        validate   validate.py  proposals are parsed and validated in the sandbox; valid ones enter the
                                buffers; one whose program is a probe program is dropped (probe_guard.py)
    (3) solve      solve.py     the matched student answers every valid problem n = `rl.rollouts` times
        score      score.py     the sandbox scores every answer; every reward of the step is computed once:
                                student +1 right, -0.5 parsed but wrong, -1 unparsable; teacher 1 - rho on a
                                valid problem (0 when rho = 0), `rl.invalid_reward` (-1) on an invalid one
    (4) update     update.py    REINFORCE++-baseline advantages; ONE mixed batch of every member's rows
        rate       rate.py      one zero-sum TrueSkill game per matchup, won by the side that took more of its
                                problems' points
    (5) evolve     evolve.py    every `evolution.every` steps (never after the last step) the bottom gamma of
                                each role by LCB is replaced by operator children of top-ranked parents

Checkpoints and resume: save_restore.py. After a step: the probe (probe.py), the hall of fame (hall.py).

Single mode (`population.mode=single`, the AZR baseline) runs the same code with one member `A0` in both roles
of one matchup: it proposes, estimates learnability with n samples of itself (reward 1 - s for 0 < s < 1, else
0: the teacher's 1 - rho with rho = s) and, as AZR does, never trains on those samples: its solver trains on
problems drawn from the buffers (`solver_problems`; `population.single_solver=estimation` keeps the older
baseline that trains on the estimation samples). It differs from the population only in agent count: the same
whitening scope (`rl.whiten_scope`), loss normalisation per role (`rl.loss_norm=role`) and per-step work as
one matchup's (the same prompts, rollouts, tokens and one update).

Every generation of a phase goes to the engine as one mixed-slot batch (the shared base forward), and every
random draw derives from `train.seed` and the step, so a run resumed from a checkpoint replays the same steps.
With `train.overlap` (the default) the sandbox validates each proposal, and scores each problem whose rollouts
are all in, on a background thread while the rest of the phase still decodes (train/overlap.py); the results
are the sequential path's. Each phase fills its fields of the step's `ProposalTrace`s (train/records.py);
rewards are computed once, in `score`, and read by the update and the metrics. Layers and contracts:
docs/architecture.md.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

from populora import tasks
from populora.config import Config, to_dict
from populora.diagnostics.coverage import CoverageArchive
from populora.engine import GenRequest, PolicyEngine, TrainRow
from populora.names import PHASES
from populora.population.evolution import crossover_warning, rank_range_warning
from populora.population.members import Population
from populora.population.ratings import RatingSystem
from populora.sandbox import Limits, Sandbox
from populora.tasks.base import validation_cut
from populora.tasks.rewards import RewardConfig
from populora.train import evolve, match, propose, rate, save_restore, score, solve, update, validate
from populora.train.errors import TrainError
from populora.train.evolve import evolves_at
from populora.train.hall import HallGames
from populora.train.interrupt import StopRequest, TrainingInterrupted
from populora.train.overlap import SandboxLane, accepts_on_finish
from populora.train.probe import Prober
from populora.train.probe_guard import ProbeGuard
from populora.train.progress import StepProgress, accepts_progress, note, summary_line
from populora.train.propose import task_schedule
from populora.train.records import ProposalTrace, StepResult, metrics_record, problem_records
from populora.train.run_folder import RunFolder
from populora.train.score import Ready, scoring_lane
from populora.train.setup import build_engine, derive_seed, preflight, seeded_buffers
from populora.train.validate import validation_lane


class Trainer:
    """Owns the sandbox, the engine, the population, the buffers and the run folder of one run."""

    def __init__(
        self,
        cfg: Config,
        run_dir: str | Path,
        *,
        engine: PolicyEngine | None = None,
        console: Any = None,
        quiet: bool = False,
    ) -> None:
        self.cfg = cfg
        self.single = cfg.population.mode == "single"
        self.run = RunFolder(
            run_dir,
            tensorboard=cfg.log.tensorboard,
            wandb=cfg.log.wandb,
            mlflow=cfg.log.mlflow,
            config=to_dict(cfg),
        )
        self.console = console
        self.quiet = quiet
        self.rng = random.Random(cfg.train.seed)
        self.ratings = RatingSystem.from_config(cfg.ratings)
        self.pop = Population.create(cfg.n_teachers, cfg.n_students, self.ratings.prior(), single=self.single)
        self.rewards = RewardConfig(invalid_proposal=cfg.rl.invalid_reward)
        self.step_done = 0
        self.sandbox: Sandbox | None = None
        self.engine: PolicyEngine | None = engine
        self._pending_checkpoint_s = 0.0  # the last save's seconds, counted in the next step's phase_s
        self.prober = Prober.from_config(cfg)  # the fixed held-out probe (train/probe.py); off when every=0
        self.probe_guard: ProbeGuard | None = None  # proposals equal to a probe program are dropped (setup)
        self.hof = HallGames(cfg)  # unrated games against frozen references (train/hall.py); off when every=0
        self._evolution_pending = False  # the final step skipped its evolution; a longer resume runs it
        self.live: StepProgress | None = None  # the console while `fit` runs (the live phase line)
        self._validating: SandboxLane | None = None  # the step's validation lane (`validate.validation_lane`)
        self.validate_past_deadline = 0  # set by step(): the step's proposals its validation deadlines cut

    # ---------------------------------------------------------------------------------------------- setup
    def setup(self) -> None:
        """Start the sandbox, then the engine and buffers. The sandbox starts before the model loads: its
        workers are spawned from this process, which is cheaper while it does not yet hold the model."""
        cfg = self.cfg
        if self.engine is None:
            preflight(cfg)  # fail on a missing model or too many slots before starting anything
        note(f"starting the sandbox ({cfg.sandbox.workers} workers)", self.quiet)
        limits = Limits(timeout_s=cfg.sandbox.timeout_s, memory_mb=cfg.sandbox.memory_mb)
        self.sandbox = Sandbox(workers=cfg.sandbox.workers, limits=limits)
        torch.set_num_threads(cfg.train.threads)
        torch.manual_seed(cfg.train.seed)
        deadline = cfg.sandbox.score_deadline_s
        budget = cfg.sandbox.validate_deadline_s  # one proposal's validation (issue 50)
        self.tasks = {
            name: tasks.get(name, score_deadline_s=deadline, validate_deadline_s=budget)
            for name in cfg.tasks.types
        }
        self.coverage = CoverageArchive()
        self.score_past_deadline = 0  # set by score(): answers the step's scoring deadlines cut
        if not self.single and (why := crossover_warning(cfg)):
            # a fact of the configuration, not a fault (the bundled presets run 2T+2S): a note, not a warning
            note(why, self.quiet)
        # lora.rank_range with nothing to move a rank (no M6, or no evolution): say so at start
        if why := rank_range_warning(cfg):
            note(f"warning: {why}", self.quiet)
        self.probe_guard = ProbeGuard.from_probe_sets(cfg.diagnostics.probe_set)
        if self.engine is None:
            note(f"loading the model {cfg.model.name!r} ({cfg.model.backend})", self.quiet)
            self.engine = build_engine(cfg)
        if self.engine.n_slots < cfg.n_slots:
            raise TrainError(
                f"the engine has {self.engine.n_slots} slots but the population needs {cfg.n_slots}."
            )
        self.buffers = seeded_buffers(cfg, self.sandbox, self.probe_guard, self.quiet)

    def close(self) -> None:
        try:
            if self.engine is not None:
                self.engine.close()  # the vllm engine holds GPU memory and a scratch folder
        finally:  # a failed engine close must not leave the sandbox's processes behind
            if self.sandbox is not None:
                self.sandbox.close()
                self.sandbox = None
            self.run.close()

    # ---------------------------------------------------------------------------------------------- the step
    def step(self, step: int) -> StepResult:
        """One step: the paper's five phases in order; returns its metrics record, traces and events."""
        cfg, timings, lanes = self.cfg, {name: 0.0 for name in PHASES}, {}
        timings["checkpoint"], self._pending_checkpoint_s = self._pending_checkpoint_s, 0.0
        t_step = time.perf_counter()

        # (1) Matchmaking: PFSP over TrueSkill ratings.
        with self._phase(timings, "matchmaking"):
            pairs = self._pairs()

        # (2) Teacher generation: K references per prompt, one mixed batch over all teachers; then validation.
        # With `train.overlap` a proposal is validated as soon as its row stops decoding (the lane), so the
        # validate phase only waits for what generation did not hide.
        with validation_lane(self, step) as lane:
            lanes["validate"] = lane
            with self._phase(timings, "teacher"):
                traces = self.propose(pairs, step, finished=lane.put if lane else None)
            with self._phase(timings, "validate"):
                if lane:
                    lane.join()
                self.validate(traces, step, checked=lane is not None)
        # proposals made invalid only because a validation deadline passed (the step's or their own budget)
        self.validate_past_deadline = sum(1 for t in traces if validation_cut(t.reason))

        # (3) Student solve: n rollouts per valid problem at the training temperature, one mixed batch; then the
        # sandbox scores every answer and every reward of the step is computed, once. The AZR single agent's
        # rollouts on its own proposals only estimate s; it solves problems drawn from the buffers as well.
        # With `train.overlap` a problem is scored as soon as its n rollouts are in.
        ready = Ready()
        with scoring_lane(self, ready) as lane:
            lanes["score"] = lane
            with self._phase(timings, "student"):
                if self.single and cfg.population.single_solver == "buffer":
                    for trace in traces:
                        trace.estimate = True
                    traces = traces + self.solver_problems(traces)
                self.solve(traces, step, finished=(lambda t, gens: lane.put((t, gens))) if lane else None)
            with self._phase(timings, "score"):
                if lane:
                    lane.join()
                self.score(traces, step, ready=ready if lane else None)

        # (4) Advantages from those rewards, ONE mixed batch for every member, rating updates.
        with self._phase(timings, "update"):
            lr = self.schedule_lr(step)
            train_metrics = self.update(traces)
            matchups = self.rate(pairs, traces, step)
        events = [{"step": step, "type": "matchup", **m} for m in matchups]

        # (5) Evolution every k steps: the bottom gamma by LCB replaced by operator children. The step's metrics
        # describe the members that played it, so they are taken before any of them is replaced.
        played = self.pop.ordered()
        with self._phase(timings, "evolution"):
            if evolves_at(step, cfg):
                events += self.evolve(step)
            self._evolution_pending = evolves_at(step, cfg, final=False) and not evolves_at(step, cfg)

        record = metrics_record(
            step,
            traces,
            train_metrics,
            matchups,
            timings,
            time.perf_counter() - t_step,
            members=played,
            mode=cfg.population.mode,
            coverage=self.coverage,
            dist=self.engine.last_dist_stats() if hasattr(self.engine, "last_dist_stats") else None,
        )
        # answers scored False only because a scoring deadline passed (a problem's or the step's)
        record["score_past_deadline"] = self.score_past_deadline
        record["validate_past_deadline"] = self.validate_past_deadline
        record["lr"] = lr  # every adapter's learning rate in this step's update (rl.lr_schedule)
        # seconds the sandbox validated / scored on the lane's thread, mostly while generation ran (train.overlap)
        record["overlap_s"] = {k: round(v.busy_s, 4) for k, v in lanes.items()} if cfg.train.overlap else None
        return StepResult(step, record, traces, events)

    # ---------------------------------------------------------------------------------------------- the phases
    # Each phase is a function of the trainer in the module named after it; these methods are the names the
    # step, the probe, the hall of fame, the experiments and the tests call (and may patch).
    def _pairs(self) -> list[tuple[str, str]]:
        """(1) The step's (teacher, student) pairs: PFSP over TrueSkill ratings (train/match.py)."""
        return match.pairs(self)

    def propose(
        self, pairs, step: int, per_prompt: int | None = None, *, finished=None
    ) -> list[ProposalTrace]:
        """(2) One trace per teacher proposal, with its teacher's generation (train/propose.py)."""
        return propose.propose(self, pairs, step, per_prompt, finished=finished)

    def validate(self, traces: list[ProposalTrace], step: int, *, checked: bool = False) -> None:
        """(2) Validate every proposal; valid problems enter the buffers and coverage (train/validate.py)."""
        validate.validate(self, traces, step, checked=checked)

    def check_proposals(self, traces: list[ProposalTrace], step: int, until: float | None = None) -> None:
        """(2) Parse and sandbox-validate proposals, touching no run state (train/validate.py)."""
        validate.check_proposals(self, traces, step, until)

    def drop_probe_collisions(self, traces: list[ProposalTrace]) -> None:
        """(2) Take proposals whose program is a probe program out of the game (train/validate.py)."""
        validate.drop_probe_collisions(self, traces)

    def solve(self, traces: list[ProposalTrace], step: int, *, finished=None) -> None:
        """(3) n = `rl.rollouts` answers of the matched student to every valid problem (train/solve.py)."""
        solve.solve(self, traces, step, finished=finished)

    def solver_problems(self, proposals: list[ProposalTrace]) -> list[ProposalTrace]:
        """(3) The single agent's solver problems, from its proposals and the buffers (train/solve.py)."""
        return solve.solver_problems(self, proposals)

    def score(
        self, traces: list[ProposalTrace], step: int = 0, *, batched: bool = True, ready: Ready | None = None
    ) -> None:
        """(3) Every reward of the step, computed once (train/score.py)."""
        score.score(self, traces, step, batched=batched, ready=ready)

    def score_ready(self, batch: list, ready: Ready, joined_at: float | None) -> None:
        """(3) The overlap lane's scoring of problems whose rollouts are all in (train/score.py)."""
        score.score_ready(self, batch, ready, joined_at)

    def schedule_lr(self, step: int) -> float:
        """(4) Set every adapter's learning rate for `step` and return it (train/update.py)."""
        return update.schedule_lr(self, step)

    def update(self, traces: list[ProposalTrace]) -> dict[str, float]:
        """(4) Advantages over every member's rows, then ONE `engine.train_step` (train/update.py)."""
        return update.update(self, traces)

    def build_rows(self, traces: list[ProposalTrace]) -> list[TrainRow]:
        """(4) Training rows of every member, each with its advantage (train/update.py)."""
        return update.build_rows(self, traces)

    def rate(self, pairs: list[tuple[str, str]], traces: list[ProposalTrace], step: int) -> list[dict]:
        """(4) One zero-sum TrueSkill game per matchup (train/rate.py)."""
        return rate.rate(self, pairs, traces, step)

    def evolve(self, step: int) -> list[dict]:
        """(5) Replace the bottom gamma of each role by operator children (train/evolve.py)."""
        return evolve.evolve(self, step)

    def save(self, step: int) -> Path:
        """An atomic checkpoint of everything a resume needs; returns its folder (train/save_restore.py)."""
        return save_restore.save(self, step)

    def restore(self, branched_from: str | None = None) -> int:
        """Load the newest intact checkpoint; returns its step (train/save_restore.py)."""
        return save_restore.restore(self, branched_from)

    # ---------------------------------------------------------------------------------------------- engine calls
    @contextmanager
    def _phase(self, timings: dict, name: str) -> Iterator[None]:
        """Time the block as phase `name` of the step (metrics.jsonl `phase_s`) and show it on the live line."""
        t0 = time.perf_counter()
        if self.live is not None:
            self.live.show(name)
        try:
            yield
        finally:
            timings[name] = timings.get(name, 0.0) + time.perf_counter() - t0
            if self.live is not None:
                self.live.end_phase()

    def _progress(self, method, phase: str) -> dict:
        """`progress=` for an engine call when the live line is on and the engine takes it, else nothing."""
        cb = self.live.callback(phase) if self.live is not None else None
        return {"progress": cb} if cb is not None and accepts_progress(method) else {}

    def _generate(self, requests: list[GenRequest], step: int, phase: str, on_finish=None) -> list:
        """The phase's one `engine.generate`; `on_finish(i, generation)` is called for each request as its row
        stops (engines without `on_finish=` return every row at the end: they are handed over then, in order)."""
        if not requests:
            return []
        seed = derive_seed(self.cfg.train.seed, step, phase)
        kw = self._progress(self.engine.generate, phase)
        if on_finish is None or not accepts_on_finish(self.engine.generate):
            out = self.engine.generate(requests, seed=seed, **kw)
            for i, gen in enumerate(out if on_finish is not None else []):
                on_finish(i, gen)
            return out
        return self.engine.generate(requests, seed=seed, on_finish=on_finish, **kw)

    def _request(self, slot: int, prompt: str, max_new_tokens: int, temperature=None) -> GenRequest:
        """A generation request at `rl.top_p` and `temperature` (default `rl.temperature`, the training one)."""
        rl = self.cfg.rl
        t = rl.temperature if temperature is None else temperature
        return GenRequest(
            slot=slot, prompt=prompt, max_new_tokens=max_new_tokens, temperature=t, top_p=rl.top_p
        )

    def teacher_request(self, slot: int, prompt: str) -> GenRequest:
        """A teacher's generation request: its token budget and `rl.teacher_temperature` (the game's
        proposals and the validity probe's, train/probe.py, are drawn alike)."""
        tk, rl = self.cfg.tasks, self.cfg.rl
        return self._request(slot, prompt, tk.teacher_max_new_tokens, rl.teacher_temperature)

    # ---------------------------------------------------------------------------------------------- loop
    def fit(self, start: int = 0) -> None:
        """Steps `start` + 1 to `train.steps`, each logged, then checkpointed when due; Ctrl-C stops after one."""
        cfg = self.cfg
        progress = self.live = StepProgress(cfg.train.steps, start, self.console, self.quiet)
        saved = self.step_done = start  # the newest step with a checkpoint, the newest step done
        try:
            self.prober.at_start(self, start)  # step 0: probe before any update
            with StopRequest() as stop:  # Ctrl-C: finish the step, checkpoint it, stop (train/interrupt.py)
                for step in range(start + 1, cfg.train.steps + 1):
                    if stop.requested:
                        break
                    saved = self._fit_step(step, progress, saved)
                if stop.requested and self.step_done < cfg.train.steps:
                    if saved != self.step_done:
                        self.save(self.step_done)
                    raise TrainingInterrupted(self.run.path, self.step_done, cfg.train.steps)
        finally:
            progress.stop()
            self.live = None

    def _fit_step(self, step: int, progress: StepProgress, saved: int) -> int:
        """One step of `fit` with its logs and its scheduled checkpoint; returns the newest checkpointed step."""
        cfg = self.cfg
        res = self.step(step)
        self.prober.after_step(self, step, res.record)
        self.hof.after_step(self, step, res.record)
        # Logs of a step are written before its checkpoint, so a resume from it never loses them.
        for rec in problem_records(step, res.traces):
            self.run.problem(rec)
        for ev in res.events:
            self.run.event(ev)
        self.run.metric(res.record)
        self.step_done = step
        if step % cfg.train.checkpoint_every == 0 or step == cfg.train.steps:
            self.save(step)
            saved = step
        progress.advance(summary_line(res.record, res.events, cfg.train.steps))
        return saved


__all__ = ["Ready", "TrainError", "Trainer", "evolves_at", "task_schedule"]
