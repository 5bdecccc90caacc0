"""The self-play trainer. One `Trainer.step` is the paper's five phases, top to bottom:

    (1) matchmaking         PFSP over TrueSkill ratings -> one (teacher, student) pair per teacher
    (2) teacher generation  each teacher proposes `tasks.prompts` problems split equally across the task types,
                            each prompt showing K reference problems from the buffers; proposals are parsed and
                            validated in the sandbox; valid ones enter the buffers; one whose program is a
                            probe program (constants masked, bound names numbered) is dropped (train/probe_guard.py)
    (3) student solve       the matched student answers every valid problem n = `rl.rollouts` times at the
                            training temperature; the sandbox scores every answer
    (4) rewards and update  student: +1 right, -0.5 parsed but wrong, -1 unparsable; teacher: 1 - rho on a
                            valid problem (0 when rho = 0), `rl.invalid_reward` (-1) on an invalid one;
                            REINFORCE++-baseline advantages; ONE mixed batch of every member's rows ->
                            `engine.train_step`; one zero-sum TrueSkill game per matchup, won by the side
                            that took more of its problems' points (population/ratings.py)
    (5) evolution           every `evolution.every` steps (never after the last step) the bottom gamma of each
                            role by LCB is replaced by children of top-ranked parents made by an operator; the
                            slot's optimiser is reset

Single mode (`population.mode=single`, the AZR baseline) runs the same code with one member `A0` in both roles
of a single matchup: it proposes, estimates learnability with n samples of itself at the training temperature
(reward 1 - s for 0 < s < 1, else 0: the same formula as the teacher's 1 - rho with rho = s), and, as AZR does,
never trains on those estimation samples: its solver trains on problems drawn from the buffers (the step's valid
proposals first, the rest uniformly; `solver_problems`), as many per task type as a student faces in one
matchup, n rollouts each (`population.single_solver=estimation` keeps the older baseline that trains on the
estimation samples instead). It trains on its proposals and solver rollouts in one batch. It differs from the
population only in agent count: the same
whitening scope (`rl.whiten_scope`, batch; TRR++ is `task_role`) and the same loss normalisation per role
(`rl.loss_norm=role`: its proposer rows weigh in its loss as a teacher's rows in a teacher's). Its per-step
work is one matchup's: the same prompts, rollouts, tokens and one update, i.e. what each pair does.

Every generation of a phase goes to the engine as one mixed-slot batch (the shared base forward), and every
random draw derives from `train.seed` and the step, so a run resumed from a checkpoint replays the same steps.
With `train.overlap` (the default) the sandbox validates each proposal, and scores each problem whose rollouts
are all in, on a background thread while the rest of the phase still decodes (train/overlap.py); the results
are the sequential path's.
Each phase fills its fields of the step's `ProposalTrace`s (train/records.py); rewards are computed once, in
`score`, and read by the update and the metrics. Layers and contracts: docs/architecture.md.
"""

from __future__ import annotations

import random
import sys
import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from populora import tasks
from populora.config import Config, to_dict
from populora.diagnostics.coverage import CoverageArchive
from populora.diagnostics.features import program_features
from populora.engine import EngineError, GenRequest, PolicyEngine, TrainBatch, TrainRow, resolve_model
from populora.names import PHASES
from populora.operators import REGISTRY, apply
from populora.population.evolution import crossover_warning, plan_evolution, rank_range_warning
from populora.population.matchmaking import match
from populora.population.members import Population
from populora.population.ratings import RatingSystem, score_game
from populora.rl.advantages import reinforce_pp_baseline, scope_key
from populora.rl.loss import loss_group
from populora.rl.schedule import lr_at
from populora.sandbox import Limits, Sandbox
from populora.tasks import registry
from populora.tasks.base import VALIDATION_DEADLINE, validation_cut
from populora.tasks.buffers import TaskBuffers
from populora.tasks.rewards import RewardConfig, learnability_reward, student_reward, teacher_reward
from populora.train import checkpoint as ckpt
from populora.train.controls import shuffle_student_rewards
from populora.train.credit import blamed_tokens, failure_span, span_advantages
from populora.train.errors import TrainError
from populora.train.hall import HallGames
from populora.train.interrupt import StopRequest, TrainingInterrupted
from populora.train.overlap import SandboxLane, accepts_on_finish
from populora.train.probe import Prober
from populora.train.probe_guard import ProbeGuard
from populora.train.progress import StepProgress, accepts_progress, note, summary_line
from populora.train.records import (
    ProposalTrace,
    StepResult,
    matchup_rhos,
    metrics_record,
    problem_records,
    solve_rate,
)
from populora.train.run_folder import RunFolder
from populora.train.seed_files import SeedFileError, resolve_seed_file
from populora.train.setup import build_engine, derive_seed, graded_seed_levels, preflight, synthetic_seeds
from populora.train.state_files import OPTIMIZER_FILE, RNG_FILE, write_rng, write_tree


def task_schedule(types: list[str], prompts: int) -> list[str]:
    """`prompts` task names split equally across `types` (the remainder goes to the first types)."""
    base, extra = divmod(prompts, len(types))
    return [t for i, t in enumerate(types) for _ in range(base + (1 if i < extra else 0))]


@dataclass
class Ready:
    """What the overlap lane scored during student generation (`Trainer.score_ready`): per trace (by id) which
    answers parse and their `Scored`, and the answers its deadlines cut."""

    results: dict[int, tuple[list[bool], Any]] = field(default_factory=dict)
    cut: int = 0


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
        self._pending_checkpoint_s = 0.0
        self.prober = Prober.from_config(cfg)  # the fixed held-out probe (train/probe.py); off when every=0
        self.probe_guard: ProbeGuard | None = None  # proposals equal to a probe program are dropped (setup)
        self.hof = HallGames(cfg)  # unrated games against frozen references (train/hall.py); off when every=0
        self._evolution_pending = False  # the final step skipped its evolution; a longer resume runs it
        self.live: StepProgress | None = None  # the console while `fit` runs (the live phase line)
        self._validating: SandboxLane | None = None  # the step's validation lane (`_validation_lane`)
        self.validate_past_deadline = 0  # set by step(): the step's proposals its validation deadlines cut

    # ---------------------------------------------------------------------------------------------- setup
    def setup(self) -> None:
        """Start the sandbox, then the engine and buffers. The sandbox starts before the model loads: its
        workers are spawned from this process, which is cheaper while it does not yet hold the model."""
        if self.engine is None:
            preflight(self.cfg)  # fail on a missing model or too many slots before starting anything
        sb = self.cfg.sandbox
        note(f"starting the sandbox ({sb.workers} workers)", self.quiet)
        self.sandbox = Sandbox(
            workers=sb.workers, limits=Limits(timeout_s=sb.timeout_s, memory_mb=sb.memory_mb)
        )
        torch.set_num_threads(self.cfg.train.threads)
        torch.manual_seed(self.cfg.train.seed)
        deadline = self.cfg.sandbox.score_deadline_s
        budget = self.cfg.sandbox.validate_deadline_s  # one proposal's validation (issue 50)
        self.tasks = {
            name: tasks.get(name, score_deadline_s=deadline, validate_deadline_s=budget)
            for name in self.cfg.tasks.types
        }
        self.coverage = CoverageArchive()
        self.score_past_deadline = 0  # set by score(): answers the step's scoring deadlines cut
        if not self.single and (why := crossover_warning(self.cfg)):
            # a fact of the configuration, not a fault (the bundled presets run 2T+2S): a note, not a warning
            note(why, self.quiet)
        # lora.rank_range with nothing to move a rank (no M6, or no evolution): say so at start
        if why := rank_range_warning(self.cfg):
            note(f"warning: {why}", self.quiet)
        self.probe_guard = ProbeGuard.from_probe_sets(self.cfg.diagnostics.probe_set)
        if self.engine is None:
            note(f"loading the model {self.cfg.model.name!r} ({self.cfg.model.backend})", self.quiet)
            self.engine = build_engine(self.cfg)
        if self.engine.n_slots < self.cfg.n_slots:
            raise TrainError(
                f"the engine has {self.engine.n_slots} slots but the population needs {self.cfg.n_slots}."
            )
        tk = self.cfg.tasks
        try:
            self.buffers = TaskBuffers.seeded(
                tk.buffer_size,
                seed_io=resolve_seed_file(tk.seed_io, "tasks.seed_io") or None,
                seed_code_f=resolve_seed_file(tk.seed_code_f, "tasks.seed_code_f") or None,
                sandbox=self.sandbox,
                tasks=registry.buffer_types(tk.families),
            )
        except SeedFileError as err:
            raise TrainError(str(err)) from None
        except OSError as err:
            raise TrainError(
                f"tasks.seed_io / tasks.seed_code_f: cannot read the seed file ({err})."
            ) from None
        self._seed_family_buffers()
        if tk.seed_synthetic and "azr" in tk.families:
            note(
                f"seeding the buffers ({tk.seed_synthetic} problems per task, checked in the sandbox)",
                self.quiet,
            )
            levels = graded_seed_levels(resolve_model(self.cfg.model.name, self.cfg.model.revision or None))
            for p in synthetic_seeds(tk.seed_synthetic, self.sandbox, self.cfg.train.seed, levels):
                if not self.probe_guard.collides(p.program):  # the probe's twins never enter the buffers
                    self.buffers.add(p)

    def _seed_family_buffers(self) -> None:
        """Fill each non-AZR task type's buffer with its family's seed problems (`tasks.seed_synthetic` of
        them, at least `tasks.references`), made in the sandbox behind the policy (tasks/registry.py)."""
        tk = self.cfg.tasks
        n = max(tk.seed_synthetic, tk.references, 1)
        for t in registry.buffer_types(tk.families)[len(tasks.TASK_NAMES) :]:
            self.buffers[t].extend(registry.seed_problems(t, n, self.sandbox, self.cfg.train.seed))

    def close(self) -> None:
        try:
            if self.engine is not None:
                self.engine.close()  # the vllm engine holds GPU memory and a scratch folder
        finally:  # a failed engine close must not leave the sandbox's processes behind
            if self.sandbox is not None:
                self.sandbox.close()
                self.sandbox = None
            self.run.close()

    # ---------------------------------------------------------------------------------------------- helpers
    @contextmanager
    def _phase(self, timings: dict, name: str) -> Iterator[None]:
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

    @contextmanager
    def _validation_lane(self, lane: SandboxLane | None) -> Iterator[None]:
        """While the block runs, `check_proposals` measures the step's validation deadline from `lane`'s join
        (the end of teacher generation) or, before it, from the batch's start: as scoring does."""
        self._validating = lane
        try:
            yield
        finally:
            self._validating = None

    @contextmanager
    def _lane(self, work) -> Iterator[SandboxLane | None]:
        """A `SandboxLane` running `work` while the block runs (None with `train.overlap` off); stopped on an
        error, so its thread never outlives the step."""
        if not self.cfg.train.overlap:
            yield None
            return
        lane = SandboxLane(work)
        try:
            yield lane
        except BaseException:
            lane.abort()
            raise
        lane.join()  # the phase joined it already; a no-op then

    def _request(
        self, slot: int, prompt: str, max_new_tokens: int, temperature: float | None = None
    ) -> GenRequest:
        return GenRequest(
            slot=slot,
            prompt=prompt,
            max_new_tokens=max_new_tokens,
            temperature=self.cfg.rl.temperature if temperature is None else temperature,
            top_p=self.cfg.rl.top_p,
        )

    def teacher_request(self, slot: int, prompt: str) -> GenRequest:
        """A teacher's generation request: its token budget and `rl.teacher_temperature` (the game's
        proposals and the validity probe's, train/probe.py, are drawn alike)."""
        return self._request(
            slot, prompt, self.cfg.tasks.teacher_max_new_tokens, self.cfg.rl.teacher_temperature
        )

    def _pairs(self) -> list[tuple[str, str]]:
        if self.single:
            return [("A0", "A0")]
        p = self.cfg.population
        ratings = {m.id: m.rating for m in self.pop.members.values()}
        return match(
            [m.id for m in self.pop.teachers],
            [m.id for m in self.pop.students],
            ratings,
            self.ratings,
            self.rng,
            method=p.matchmaking,
            weighting=p.pfsp,
            hard_p=p.pfsp_hard_p,
            balanced=p.balanced,
        )

    # ---------------------------------------------------------------------------------------------- the step
    def step(self, step: int) -> StepResult:
        """One step: the paper's five phases in order; returns its metrics record, traces and events."""
        cfg, timings, events = self.cfg, {name: 0.0 for name in PHASES}, []
        timings["checkpoint"], self._pending_checkpoint_s = self._pending_checkpoint_s, 0.0
        t_step = time.perf_counter()

        # (1) Matchmaking: PFSP over TrueSkill ratings.
        with self._phase(timings, "matchmaking"):
            pairs = self._pairs()

        # (2) Teacher generation: K references per prompt, one mixed batch over all teachers; then validation.
        # With `train.overlap` a proposal is validated as soon as its row stops decoding (train/overlap.py), so
        # the validate phase only waits for what generation did not hide.
        lanes: dict[str, SandboxLane] = {}
        with self._lane(lambda batch: self.check_proposals(batch, step)) as lane, self._validation_lane(lane):
            with self._phase(timings, "teacher"):
                traces = self.propose(pairs, step, finished=lane.put if lane else None)
            with self._phase(timings, "validate"):
                if lane:
                    lanes["validate"] = lane
                    lane.join()
                self.validate(traces, step, checked=lane is not None)
        # proposals made invalid only because a validation deadline passed (the step's or their own budget)
        self.validate_past_deadline = sum(1 for t in traces if validation_cut(t.reason))

        # (3) Student solve: n rollouts per valid problem at the training temperature, one mixed batch; then the
        # sandbox scores every answer and every reward of the step is computed, once. The AZR single agent's
        # rollouts on its own proposals only estimate s; it solves problems drawn from the buffers as well.
        # With `train.overlap` a problem is scored as soon as its n rollouts are in.
        ready = Ready()
        with self._lane(lambda batch: self.score_ready(batch, ready, lanes["score"].joined_at)) as lane:
            with self._phase(timings, "student"):
                if self.single and cfg.population.single_solver == "buffer":
                    for trace in traces:
                        trace.estimate = True
                    traces = traces + self.solver_problems(traces)
                if lane:
                    lanes["score"] = lane
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
        events += [{"step": step, "type": "matchup", **m} for m in matchups]

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

    def schedule_lr(self, step: int) -> float:
        """Set every adapter's learning rate for `step` (`rl.lr_schedule`, `rl.warmup_steps`) and return it.

        A function of the step alone: a resumed run sets the same rates, and a child born at evolution takes
        the run's current rate (its slot's rate is set here every step). A constant schedule without warm-up
        leaves the engine's rates as built (rl.lr)."""
        r = self.cfg.rl
        lr = lr_at(step, self.cfg.train.steps, r.lr, r.lr_schedule, r.warmup_steps)
        if r.lr_schedule != "constant" or r.warmup_steps:
            for slot in range(self.cfg.n_slots):
                self.engine.set_lr(slot, lr)
        return lr

    # (2) ------------------------------------------------------------------------------------------------
    def propose(
        self, pairs: list[tuple[str, str]], step: int, per_prompt: int | None = None, *, finished=None
    ) -> list[ProposalTrace]:
        """One trace per teacher proposal, with the teacher's generation (one mixed batch over all teachers).

        Each prompt is sampled `per_prompt` times (default `rl.teacher_group`); consecutive traces share one
        prompt, and `build_rows` gives them one baseline. `finished(trace)` is called with each trace as soon as
        its generation is in (`train.overlap`: the lane validates it meanwhile)."""
        cfg = self.cfg
        per_prompt = cfg.rl.teacher_group if per_prompt is None else per_prompt
        traces, requests = [], []
        for teacher, student in pairs:
            slot = self.pop[teacher].slot
            for name in task_schedule(cfg.tasks.types, cfg.tasks.prompts):
                task = self.tasks[name]
                if name == "code_f":  # the teacher writes inputs + a message for a program from the buffers
                    shown = self.buffers.sample_program(self.rng).program
                    prompt = task.teacher_prompt(shown, template=cfg.tasks.template)
                else:
                    shown = None
                    refs = self.buffers[name].sample(cfg.tasks.references, self.rng)
                    prompt = task.teacher_prompt(refs, template=cfg.tasks.template)
                for _ in range(per_prompt):
                    traces.append(ProposalTrace(teacher, student, name, shown_program=shown))
                    requests.append(self.teacher_request(slot, prompt))

        def on_finish(i: int, gen) -> None:
            traces[i].gen = gen
            finished(traces[i])

        gens = self._generate(requests, step, "teacher", on_finish if finished is not None else None)
        for trace, gen in zip(traces, gens, strict=True):
            trace.gen = gen
        return traces

    def validate(self, traces: list[ProposalTrace], step: int, *, checked: bool = False) -> None:
        """Parse and validate every proposal in the sandbox; valid problems enter the buffers and coverage.
        `checked`: `check_proposals` already ran on every trace (on the overlap lane, during generation)."""
        if not checked:
            self.check_proposals(traces, step)
        self.drop_probe_collisions(traces)
        for trace in traces:
            if trace.valid:
                self.buffers.add(trace.problem)
        self.coverage.add([t.features for t in traces if t.valid])

    def drop_probe_collisions(self, traces: list[ProposalTrace]) -> None:
        """Take every proposal whose program is a probe program (train/probe_guard.py) out of the game: it
        becomes invalid with reason "probe collision" and `probe_collision` set, which `score`, `build_rows`,
        `rate` and the metrics read as "not played". Not part of `check_proposals`: the validity probe's
        teachers are shown probe programs on purpose and are measured, not trained."""
        if self.probe_guard is None:
            return
        for trace in traces:
            if self.probe_guard.collides(trace.program):
                trace.probe_collision, trace.problem, trace.reason = True, None, "probe collision"

    def check_proposals(self, traces: list[ProposalTrace], step: int, until: float | None = None) -> None:
        """Parse and sandbox-validate proposals, filling `problem`/`reason`/`features`; touches no run state
        (the buffers and coverage are `validate`'s), so a control can measure a teacher without feeding it.
        Each trace's verdict is its own: checking the traces in parts (the overlap lane) gives the same.

        Validation ends by `until` (a `time.monotonic()` value; default: `sandbox.validate_step_deadline_s`
        after this call's start or, on the overlap lane, after the end of teacher generation if that came
        first); proposals it cuts are invalid (`VALIDATION_DEADLINE`), and each proposal has its own budget
        (`sandbox.validate_deadline_s`, `CodeTask.validate`)."""
        if until is None:
            lane = self._validating
            start = lane.joined_at if lane is not None and lane.joined_at is not None else time.monotonic()
            until = start + self.cfg.sandbox.validate_step_deadline_s
        by_task: dict[str, list[tuple[ProposalTrace, Any]]] = defaultdict(list)
        for trace in traces:
            task = self.tasks[trace.task]
            parsed = task.parse_proposal(
                trace.gen.text, program=trace.shown_program, template=self.cfg.tasks.template
            )
            if isinstance(parsed, tasks.FormatError):
                trace.reason = parsed.reason
                continue
            trace.program, trace.inputs = parsed.program, list(parsed.inputs)
            by_task[trace.task].append((trace, parsed.with_origin(trace.teacher, step)))
        for name, group in by_task.items():
            task, proposals = self.tasks[name], [p for _, p in group]
            if isinstance(task, tasks.CodeTask):
                results = task.validate(proposals, self.sandbox, until=until)
            elif time.monotonic() < until:  # another family's validate takes no deadline: checked before it
                results = task.validate(proposals, self.sandbox)
            else:
                results = [tasks.Invalid(VALIDATION_DEADLINE, p) for p in proposals]
            for (trace, _), res in zip(group, results, strict=True):
                if isinstance(res, tasks.Invalid):
                    trace.reason = res.reason
                else:
                    trace.problem = res.with_origin(trace.teacher, step)
        for trace in traces:
            if trace.program:
                if trace.task not in tasks.TASK_NAMES:  # another family may measure its own programs
                    trace.features = registry.features(trace.task, trace.program)
                    if trace.features is not None:
                        continue
                try:
                    trace.features = program_features(trace.program)
                except Exception:  # noqa: BLE001 - unparsable programs simply have no features
                    trace.features = None

    # (3) ------------------------------------------------------------------------------------------------
    def solve(self, traces: list[ProposalTrace], step: int, *, finished=None) -> None:
        """n = `rl.rollouts` answers of the matched student to every valid problem (one mixed batch).
        `finished(trace, answers)` is called as soon as all of a problem's answers are in (`train.overlap`)."""
        cfg, requests, owners = self.cfg, [], []
        for trace in traces:
            if not trace.valid:
                continue
            prompt = self.tasks[trace.task].student_prompt(trace.problem, template=cfg.tasks.template)
            slot = self.pop[trace.student].slot
            for _ in range(cfg.rl.rollouts):
                requests.append(self._request(slot, prompt, cfg.tasks.student_max_new_tokens))
                owners.append(trace)
        got: dict[int, dict[int, Any]] = defaultdict(dict)  # trace -> its answers in so far, by request

        def on_finish(i: int, gen) -> None:
            mine = got[id(owners[i])]
            mine[i] = gen
            if len(mine) == cfg.rl.rollouts:  # a trace's requests are consecutive: sorted = rollout order
                finished(owners[i], [mine[k] for k in sorted(mine)])

        gens = self._generate(requests, step, "student", on_finish if finished is not None else None)
        for trace, gen in zip(owners, gens, strict=True):
            trace.answers.append(gen)

    def solver_problems(self, proposals: list[ProposalTrace]) -> list[ProposalTrace]:
        """The single agent's solver problems (AZR's `max_new` mix, per task type): the step's valid proposals
        first, the rest uniformly from that type's buffer (with repeats only when it holds too few), as many
        as it proposed of that type: a student's problems in one matchup whose teacher posed them all validly.
        AZR's solver trains on the previous step's proposals (its loaders are built before the step); here the
        step's own, as the paper's Algorithm 1 reads."""
        out = []
        for name in self.cfg.tasks.types:
            mine = [t for t in proposals if t.task == name]
            new, seen = [], set()
            for t in mine:
                if t.valid and t.problem.id not in seen:
                    seen.add(t.problem.id)
                    new.append(t.problem)
            k = len(mine)
            chosen = new[:k]
            rest = [p for p in self.buffers[name] if p.id not in seen]
            chosen += [rest[i] for i in self.rng.sample(range(len(rest)), min(k - len(chosen), len(rest)))]
            pool = chosen or list(self.buffers[name])
            while len(chosen) < k:
                chosen.append(self.rng.choice(pool))
            out += [ProposalTrace("A0", "A0", name, problem=p, from_buffer=True) for p in chosen]
        return out

    def score(
        self, traces: list[ProposalTrace], step: int = 0, *, batched: bool = True, ready: Ready | None = None
    ) -> None:
        """Every reward of the step, computed here once: each answer's and each proposal's. Under
        `rl.student_rewards=shuffled` the update's copy of the answer rewards is permuted (train/controls.py).

        Every valid trace's answers are scored in one `tasks.score_many` (one `run_many` per round across all
        problems: the sandbox's workers are never idle while one problem's jobs finish). `batched=False`
        scores one problem after another (the old path, same verdicts; kept for tests and measurements).
        `ready`: what the overlap lane scored during generation (`score_ready`); only the rest is scored here."""
        proposer_reward = learnability_reward if self.single else teacher_reward
        # One deadline for the whole step's scoring (besides each problem's own): a program that is instant
        # on its own input and loops on every answer costs at most this much, whatever the number of problems.
        until = time.monotonic() + self.cfg.sandbox.score_step_deadline_s
        cut_before = self._cuts()
        done = ready.results if ready is not None else {}
        scoring: list[tuple[ProposalTrace, list[bool], tuple]] = []
        for trace in traces:
            if trace.probe_collision:
                trace.reward = 0.0  # out of the game: no row is built from it (build_rows)
                continue
            if not trace.valid:
                trace.reward = self.rewards.invalid_proposal
                continue
            if id(trace) not in done:
                scoring.append((trace, *self._scoring_item(trace, trace.answers)))
        if batched:
            scored = tasks.score_many([item for _, _, item in scoring], self.sandbox, until=until)
        else:
            scored = [t.score_detailed(p, a, self.sandbox, until=until) for _, _, (t, p, a) in scoring]
        for (trace, formatted, _), result in zip(scoring, scored, strict=True):
            done[id(trace)] = (formatted, result)
        for trace in traces:
            if trace.probe_collision or not trace.valid:
                continue
            trace.formatted, result = done[id(trace)]
            trace.solves = [bool(x) for x in result.solves]
            trace.answer_rewards = [
                student_reward(fmt, ok, self.rewards)
                for fmt, ok in zip(trace.formatted, trace.solves, strict=True)
            ]
            trace.reward = proposer_reward(trace.solve_rate, True, self.rewards)
        self.score_past_deadline = self._cuts() - cut_before + (ready.cut if ready is not None else 0)
        if self.cfg.rl.student_rewards == "shuffled":
            # its own stream (seed, step): the same permutation on a resume, and the run's rng draws unchanged
            shuffle_student_rewards(traces, random.Random(derive_seed(self.cfg.train.seed, step, "shuffle")))

    def score_ready(
        self, batch: list[tuple[ProposalTrace, list]], ready: Ready, joined_at: float | None
    ) -> None:
        """The overlap lane's scoring: `(trace, answers)` of problems whose rollouts are all in, in one
        `tasks.score_many`, into `ready` (read by `score`). The step's scoring deadline counts from the end of
        generation (`joined_at`, as `score` counts from its start) or, before it, from this batch's start: scoring
        never ends later than `sandbox.score_step_deadline_s` after generation, as without overlap."""
        until = (joined_at or time.monotonic()) + self.cfg.sandbox.score_step_deadline_s
        items = [(trace, *self._scoring_item(trace, answers)) for trace, answers in batch]
        cut_before = self._cuts()
        scored = tasks.score_many([item for _, _, item in items], self.sandbox, until=until)
        ready.cut += self._cuts() - cut_before
        for (trace, formatted, _), result in zip(items, scored, strict=True):
            ready.results[id(trace)] = (formatted, result)

    def _scoring_item(self, trace: ProposalTrace, answers: list) -> tuple[list[bool], tuple]:
        """Which of a trace's answers parse, and its `(task, problem, parsed answers)` for `score_many`."""
        task = self.tasks[trace.task]
        parsed = [task.parse_answer(g.text, template=self.cfg.tasks.template) for g in answers]
        return [not isinstance(a, tasks.FormatError) for a in parsed], (task, trace.problem, parsed)

    def _cuts(self) -> int:
        """Answers scored False so far because a scoring deadline passed (the tasks' running totals)."""
        return sum(t.past_deadline for t in self.tasks.values())

    # (4) ------------------------------------------------------------------------------------------------
    def update(self, traces: list[ProposalTrace]) -> dict[str, float]:
        """REINFORCE++-baseline advantages over every row of every member, then ONE `engine.train_step`."""
        rows = self.build_rows(traces)
        if not rows:
            return {}
        return self.engine.train_step(TrainBatch(rows), **self._progress(self.engine.train_step, "update"))

    def build_rows(self, traces: list[ProposalTrace]) -> list[TrainRow]:
        """Training rows of every member, each with its REINFORCE++-baseline advantage."""
        scope = self.cfg.effective_whiten_scope
        grouping = self.cfg.rl.loss_norm  # role: the single agent's proposer rows weigh as a teacher's
        rows, rewards, lengths, groups, scopes, owners = [], [], [], [], [], []

        def add(member: str, role: str, task: str, gen, reward: float, group, owner=None) -> None:
            if not gen.token_ids:
                return  # nothing to train on (an immediate EOS is still one token; an empty budget is not)
            owners.append(owner)
            rows.append(
                TrainRow(
                    slot=self.pop[member].slot,
                    prompt_ids=gen.prompt_ids,
                    response_ids=gen.token_ids,
                    advantages=0.0,
                    old_logprobs=gen.logprobs,
                    loss_group=loss_group(grouping, role, task),
                )
            )
            rewards.append(reward)
            lengths.append(len(gen.token_ids))
            groups.append(group)
            scopes.append(scope_key(scope, member=member, role=role, task=task))

        group = self.cfg.rl.teacher_group
        for i, trace in enumerate(traces):
            if trace.probe_collision:
                continue  # out of the game: neither side trains on a probe program
            # The `rl.teacher_group` proposals of one prompt (consecutive traces) share its baseline; at 1, the
            # paper's, a prompt sampled once is a group of one and keeps its reward.
            if trace.proposed:  # a single agent's solver problem from the buffers has no proposal row
                add(
                    trace.teacher,
                    "teacher",
                    trace.task,
                    trace.gen,
                    trace.reward,
                    ("teacher", i // group),
                    trace,
                )
            if trace.estimate:  # AZR: the estimation rollouts set the proposer's reward, never trained on
                continue
            answer_rewards = trace.answer_rewards if trace.train_rewards is None else trace.train_rewards
            for gen, reward in zip(trace.answers, answer_rewards, strict=True):
                # The n rollouts of one student on one problem share the baseline (prompt x slot).
                add(trace.student, "student", trace.task, gen, reward, ("student", i))
        if not rows:
            return []
        adv = reinforce_pp_baseline(
            torch.tensor(rewards),
            torch.tensor(lengths),
            groups,
            scopes,
            token_weighted=self.cfg.rl.token_weighted,
        )
        for row, a in zip(rows, adv.tolist(), strict=True):
            row.advantages = float(a)
        if self.cfg.rl.teacher_credit == "span":
            self._blame_spans(rows, owners)
        return rows

    def _blame_spans(self, rows: list[TrainRow], owners: list) -> None:
        """`rl.teacher_credit=span`: an invalid proposal's advantage only on the block its reason names."""
        n_inputs = tasks.get("code_f").config.n_inputs
        for row, trace in zip(rows, owners, strict=True):
            if trace is None or trace.valid:
                continue
            span = failure_span(trace.task, trace.gen.text, trace.reason, n_inputs)
            if span is None:
                continue
            ids = trace.gen.token_ids
            per_token = span_advantages(
                row.advantages, len(ids), blamed_tokens(self.engine.tokenizer, ids, span)
            )
            if per_token is not None:
                row.advantages = per_token

    def rate(self, pairs: list[tuple[str, str]], traces: list[ProposalTrace], step: int) -> list[dict]:
        """One zero-sum TrueSkill game per matchup, scored problem by problem (population/ratings.py)."""
        out = []
        for teacher, student in pairs:
            mine = [
                tr
                for tr in traces
                if tr.teacher == teacher and tr.student == student and tr.proposed and not tr.probe_collision
            ]
            rho = solve_rate(mine)
            n_valid = sum(tr.valid for tr in mine)
            entry = {"teacher": teacher, "student": student, "solve_rate": rho, "n_problems": n_valid}
            if not self.single:
                t, s = self.pop[teacher], self.pop[student]
                game = score_game(matchup_rhos(mine), self.ratings.draw_margin)
                new_t, new_s = self.ratings.rate_game(t.rating, s.rating, game.outcome)
                t.set_rating(new_t)
                s.set_rating(new_s)
                t.games += 1
                s.games += 1
                entry.update(
                    outcome=game.outcome,
                    teacher_points=game.teacher_points,
                    student_points=game.student_points,
                )
            out.append(entry)
        return out

    # (5) ------------------------------------------------------------------------------------------------
    def evolve(self, step: int) -> list[dict]:
        """Replace the bottom gamma of each role by operator children of top-ranked parents."""
        arity = {name: op.arity for name, op in REGISTRY.items()}
        events = []
        for r in plan_evolution(self.pop, self.cfg, self.ratings.prior(), self.rng, arity=arity):
            t0 = time.perf_counter()
            parents = [self.engine.get_adapter(self.pop[p].slot) for p in r.parents]
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
            slot = self.pop[r.replaced].slot
            # A child starts with fresh AdamW moments: its parent's moments describe other weights.
            self.engine.set_adapter(slot, child, reset_optimizer=True)
            member = self.pop.replace(r.replaced, r.child_rating, list(r.parents), step, applied)
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

    # ---------------------------------------------------------------------------------------------- checkpoints
    def save(self, step: int) -> Path:
        """Write an atomic checkpoint of everything a resume needs (train/checkpoint.py); return its folder."""
        t0 = time.perf_counter()

        def write(d: Path) -> None:
            for m in self.pop.ordered():
                self.engine.save_adapter(m.slot, d / "adapters" / m.id)
            write_tree(d / OPTIMIZER_FILE, self.engine.optimizer_state())  # data, never a pickle
            write_rng(d / RNG_FILE, self.rng)
            self.buffers.save(d / "buffers.jsonl")
            ckpt.write_json(
                d / "state.json",
                {
                    "step": step,
                    "mode": self.cfg.population.mode,
                    "seed": self.cfg.train.seed,
                    "members": self.pop.to_dict()["members"],
                    "population": self.pop.to_dict(),
                    "coverage": self.coverage.state_dict(),
                    "evolution_pending": self._evolution_pending,
                    "hall": self.hof.state_dict(),
                    "time": time.time(),
                },
            )

        try:
            path = ckpt.save_checkpoint(self.run.path, step, write, keep=self.cfg.train.keep_checkpoints)
        except Exception as err:  # noqa: BLE001 - torch and safetensors report a full disk in their own types
            raise ckpt.checkpoint_write_error(err, self.run.path, step) from None
        rel = path.relative_to(self.run.path).as_posix()
        seconds = time.perf_counter() - t0
        self.run.event(
            {"step": step, "type": "checkpoint", "path": rel, "seconds": round(seconds, 4)}, fsync=True
        )
        self._pending_checkpoint_s = seconds
        return path

    def restore(self, branched_from: str | None = None) -> int:
        """Load the newest intact checkpoint; repair the logs to it; return its step. `branched_from` (the
        source run of a branch, train/resume.py) is recorded on the resume event.

        A damaged newer checkpoint (a file that cannot be read back) is reported, renamed `damaged-step_N`
        (kept, never deleted) and the next older one is tried; when none is intact, a TrainError says so."""
        ckpt.clear_leftovers(self.run.path)  # a kill mid-save or mid-prune: its temp folders are garbage
        found = ckpt.list_checkpoints(self.run.path)
        if not found:  # killed before the first checkpoint: start over, dropping the partial logs
            self.run.repair(0)
            return 0
        from populora.lora.peft_io import load_peft

        damaged: list[str] = []
        chosen = None
        like = self.engine.optimizer_state()  # a checkpoint's optimizer state must have this layout
        for candidate in reversed(found):
            try:
                data = ckpt.read_checkpoint(candidate[1], load_peft, TaskBuffers.load, optimizer_like=like)
                self._apply_checkpoint(data)
            except ckpt.CheckpointDamaged as err:
                damaged.append(f"{candidate[1].name}: {err}")
                continue
            chosen = candidate
            break
        if chosen is None:
            raise TrainError(
                f"--resume {self.run.path}: every checkpoint is damaged ({'; '.join(damaged)}); "
                "start a new run with another --run-dir (this folder is left as it is)."
            )
        step, path = chosen
        kept = [ckpt.set_aside(p) for s_, p in reversed(found) if s_ > step]  # newest first, as `damaged`
        for line, moved in zip(damaged, kept, strict=True):
            print(
                f"warning: checkpoint {line}; resuming from {path.name} instead "
                f"(the damaged one is kept as checkpoints/{moved.name}).",
                file=sys.stderr,
                flush=True,
            )
        state = data["state"]
        self.run.repair(step)
        rel = path.relative_to(self.run.path).as_posix()
        if not any(
            e.get("type") == "checkpoint" and e.get("step") == step for e in self.run.read("events.jsonl")
        ):
            # killed between the checkpoint's rename and its event line: record it now
            self.run.event({"step": step, "type": "checkpoint", "path": rel, "seconds": None})
        for line in damaged:
            self.run.event({"step": step, "type": "damaged_checkpoint", "reason": line})
        origin = {"branched_from": branched_from} if branched_from else {}
        self.run.event({"step": step, "type": "resume", "from": rel, **origin}, fsync=True)
        if state.get("evolution_pending") and step < self.cfg.train.steps:
            self._deferred_evolution(step)
        return step

    def _apply_checkpoint(self, data: dict) -> None:
        """Load checkpoint `data` (read and checked by `ckpt.read_checkpoint`) into the engine, RNGs, buffers
        and coverage. A part the engine still refuses (e.g. an adapter of another shape) raises
        CheckpointDamaged; every part is overwritten by the next candidate, so a half-applied one leaves
        nothing behind."""
        try:
            pop = Population.from_dict(data["state"]["population"])
            for m in pop.ordered():
                self.engine.set_adapter(m.slot, data["adapters"][m.id], reset_optimizer=True)
            self.engine.load_optimizer_state(data["optimizer"])
            self.coverage.load_state_dict(data["state"]["coverage"])
            self.hof.restore(self, data["state"].get("hall"))
        except (
            EngineError,
            KeyError,
            TypeError,
            ValueError,
            IndexError,
        ) as err:  # AdapterError: a ValueError
            raise ckpt.CheckpointDamaged(
                f"does not fit this run ({type(err).__name__}: {str(err)[:160]})"
            ) from None
        ckpt.restore_rng(data["rng"], self.rng)  # checked against scratch generators when read
        self.pop = pop
        self.buffers = data["buffers"]

    def _deferred_evolution(self, step: int) -> None:
        """A run extended past its old final step runs the evolution that step skipped, so it continues as an
        uninterrupted run would: the same RNG draws in the same order, the same events. The new population
        is checkpointed at once; events an earlier, killed attempt already logged are not logged twice (the
        replay is deterministic, so they are the same)."""
        events = self.evolve(step)
        logged = any(
            e.get("step") == step and str(e.get("type", "")).startswith("evolution")
            for e in self.run.read("events.jsonl")
        )
        if not logged:
            for ev in events:
                self.run.event(ev)
        self.save(step)

    # ---------------------------------------------------------------------------------------------- loop
    def fit(self, start: int = 0) -> None:
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


def evolves_at(step: int, cfg: Config, final: bool = True) -> bool:
    """Whether phase (5) runs after `step`: every `evolution.every` steps in population mode, but never after
    the final step (`final=False` ignores that rule), whose children would be saved and evaluated without a
    single update (the paper's children need 10-20 steps to recover). A resume that trains past that step
    runs the skipped evolution first (`Trainer.restore`)."""
    every = cfg.evolution.every
    due = cfg.population.mode != "single" and bool(every) and step % every == 0
    return due and (not final or step < cfg.train.steps)


__all__ = ["TrainError", "Trainer", "evolves_at", "task_schedule"]
