"""The self-play trainer. One `Trainer.step` is the paper's five phases, top to bottom:

    (1) matchmaking         PFSP over TrueSkill ratings -> one (teacher, student) pair per teacher
    (2) teacher generation  each teacher proposes `tasks.prompts` problems split equally across the task types,
                            each prompt showing K reference problems from the buffers; proposals are parsed and
                            validated in the sandbox; valid ones enter the buffers
    (3) student solve       the matched student answers every valid problem n = `rl.rollouts` times at the
                            training temperature; the sandbox scores every answer
    (4) rewards and update  student: the verifier (1 right, 0 wrong); teacher: 1 - rho on a valid problem
                            (0 when rho = 0), `rl.invalid_reward` (-1) on an invalid one; REINFORCE++-baseline
                            advantages; ONE mixed batch of every member's rows -> `engine.train_step`;
                            one TrueSkill update per matchup from the solve rate
    (5) evolution           every `evolution.every` steps the bottom gamma of each role by LCB is replaced by
                            children of top-ranked parents made by an operator; the slot's optimiser is reset

Single mode (`population.mode=single`, the AZR baseline) runs the same code with one member `A0` in both roles
of a single matchup: it proposes, estimates learnability with n samples of itself at the training temperature
(reward 1 - s for 0 < s < 1, else 0: the same formula as the teacher's 1 - rho with rho = s), and trains on its
proposals and those solver samples in one batch, whitened per (task x role) (TRR++). Its per-step work is one
matchup's: the same prompts, rollouts, tokens and one update, i.e. what each teacher-student pair does.

Every generation of a phase goes to the engine as one mixed-slot batch (the shared base forward), and every
random draw derives from `train.seed` and the step, so a run resumed from a checkpoint replays the same steps.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import random
import sys
import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from populora.config import Config, ConfigError, check_memory, from_dict, load_config, to_dict, to_yaml
from populora.population.evolution import plan_evolution
from populora.population.matchmaking import match
from populora.population.members import Population
from populora.population.ratings import RatingSystem
from populora.rl.advantages import reinforce_pp_baseline, scope_key
from populora.train import checkpoint as ckpt
from populora.train.run_folder import RunFolder

PHASES = ("matchmaking", "teacher", "validate", "student", "score", "update", "evolution", "checkpoint")
# Keys that may change when resuming (everything else would change the run's meaning mid-way).
RESUMABLE_OVERRIDES = ("train.steps", "train.checkpoint_every", "train.keep_checkpoints", "train.threads")


class TrainError(RuntimeError):
    """A user-fixable problem starting or resuming a run; the message is one line with the fix."""


@dataclass
class Item:
    """One teacher proposal and everything that happens to it in a step."""

    teacher: str
    student: str
    task: str
    shown_program: str | None = None  # code_f: the program the teacher writes inputs for
    gen: Any = None  # engine Generation
    problem: Any = None  # tasks.Problem when valid
    program: str | None = None  # the parsed program, valid or not
    inputs: list[str] | None = None
    reason: str | None = None  # why it is invalid
    solves: list[bool] = field(default_factory=list)
    formatted: list[bool] = field(default_factory=list)  # per answer: did it parse (else the format penalty)
    answers: list[Any] = field(default_factory=list)  # student Generations
    reward: float = 0.0
    features: dict | None = None

    @property
    def valid(self) -> bool:
        return self.problem is not None

    @property
    def solve_rate(self) -> float | None:
        return sum(self.solves) / len(self.solves) if self.solves else None


@dataclass
class StepResult:
    step: int
    record: dict
    items: list[Item]
    events: list[dict]


def _derive_seed(*parts: Any) -> int:
    h = hashlib.blake2b(repr(parts).encode(), digest_size=8).digest()
    return int.from_bytes(h, "little") & 0x7FFFFFFF


def _mean(xs) -> float | None:
    xs = [x for x in xs if x is not None]
    return sum(xs) / len(xs) if xs else None


def task_schedule(types: list[str], prompts: int) -> list[str]:
    """`prompts` task names split equally across `types` (the remainder goes to the first types)."""
    base, extra = divmod(prompts, len(types))
    return [t for i, t in enumerate(types) for _ in range(base + (1 if i < extra else 0))]


class Trainer:
    """Owns the sandbox, the engine, the population, the buffers and the run folder of one run."""

    def __init__(
        self,
        cfg: Config,
        run_dir: str | Path,
        *,
        engine: Any = None,
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
        self.step_done = 0
        self.sandbox = None
        self.engine = engine
        self._pending_checkpoint_s = 0.0
        self._gen_takes_seed = False

    # ---------------------------------------------------------------------------------------------- setup
    def setup(self) -> None:
        """Start the sandbox (before torch: forking a torch process is slow), then the engine and buffers."""
        from populora.sandbox import Limits, Sandbox

        if self.engine is None:
            preflight(self.cfg)  # fail on a missing model or too many slots before starting anything
        sb = self.cfg.sandbox
        self.sandbox = Sandbox(
            workers=sb.workers, limits=Limits(timeout_s=sb.timeout_s, memory_mb=sb.memory_mb)
        )
        import torch

        from populora import tasks
        from populora.diagnostics.coverage import CoverageArchive

        torch.set_num_threads(self.cfg.train.threads)
        torch.manual_seed(self.cfg.train.seed)
        self.tasks = {name: tasks.get(name) for name in self.cfg.tasks.types}
        self.all_tasks = {name: tasks.get(name) for name in ("code_i", "code_o", "code_f")}
        self.coverage = CoverageArchive()
        if self.engine is None:
            self.engine = build_engine(self.cfg)
        if self.engine.n_slots < self.cfg.n_slots:
            raise TrainError(
                f"the engine has {self.engine.n_slots} slots but the population needs {self.cfg.n_slots}."
            )
        self._gen_takes_seed = "seed" in inspect.signature(self.engine.generate).parameters
        from populora.tasks.buffers import TaskBuffers
        from populora.tasks.rewards import RewardConfig

        tk = self.cfg.tasks
        self.rewards = RewardConfig(invalid_proposal=self.cfg.rl.invalid_reward)
        try:
            self.buffers = TaskBuffers.seeded(
                tk.buffer_size,
                seed_io=tk.seed_io or None,
                seed_code_f=tk.seed_code_f or None,
                sandbox=self.sandbox,
            )
        except OSError as err:
            raise TrainError(
                f"tasks.seed_io / tasks.seed_code_f: cannot read the seed file ({err})."
            ) from None
        if tk.seed_synthetic:
            for p in synthetic_seeds(self.all_tasks, tk.seed_synthetic, self.sandbox, self.cfg.train.seed):
                self.buffers.add(p)

    def _student_reward(self, formatted: bool, correct: bool) -> float:
        from populora.tasks.rewards import student_reward

        return student_reward(formatted, correct, self.rewards)

    def close(self) -> None:
        if self.engine is not None and hasattr(self.engine, "close"):
            self.engine.close()  # the vllm engine holds GPU memory and a scratch folder
        if self.sandbox is not None:
            self.sandbox.close()
            self.sandbox = None
        self.run.close()

    # ---------------------------------------------------------------------------------------------- helpers
    @contextmanager
    def _phase(self, timings: dict, name: str) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            timings[name] = timings.get(name, 0.0) + time.perf_counter() - t0

    def _generate(self, requests: list, step: int, phase: str) -> list:
        if not requests:
            return []
        if self._gen_takes_seed:
            return self.engine.generate(requests, seed=_derive_seed(self.cfg.train.seed, step, phase))
        return self.engine.generate(requests)

    def _request(self, slot: int, prompt: str, max_new_tokens: int):
        from populora.engine import GenRequest

        return GenRequest(
            slot=slot,
            prompt=prompt,
            max_new_tokens=max_new_tokens,
            temperature=self.cfg.rl.temperature,
            top_p=self.cfg.rl.top_p,
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
        cfg, timings, events = self.cfg, {name: 0.0 for name in PHASES}, []
        timings["checkpoint"], self._pending_checkpoint_s = self._pending_checkpoint_s, 0.0
        t_step = time.perf_counter()

        # (1) Matchmaking: PFSP over TrueSkill ratings.
        with self._phase(timings, "matchmaking"):
            pairs = self._pairs()

        # (2) Teacher generation: K references per prompt, one mixed batch over all teachers; then validation.
        with self._phase(timings, "teacher"):
            items = self.propose(pairs, step)
        with self._phase(timings, "validate"):
            self.validate(items, step)

        # (3) Student solve: n rollouts per valid problem at the training temperature, one mixed batch.
        with self._phase(timings, "student"):
            self.solve(items, step)
        with self._phase(timings, "score"):
            self.score(items)

        # (4) Rewards, advantages, ONE mixed batch for every member, rating updates.
        with self._phase(timings, "update"):
            train_metrics = self.update(items)
            matchups = self.rate(pairs, items, step)
        events += [{"step": step, "type": "matchup", **m} for m in matchups]

        # (5) Evolution every k steps: the bottom gamma by LCB replaced by operator children. The step's metrics
        # describe the members that played it, so they are taken before any of them is replaced.
        played = self.pop.ordered()
        with self._phase(timings, "evolution"):
            if not self.single and cfg.evolution.every and step % cfg.evolution.every == 0:
                events += self.evolve(step)

        record = self.metrics_record(
            step, items, train_metrics, matchups, timings, time.perf_counter() - t_step, members=played
        )
        return StepResult(step, record, items, events)

    # (2) ------------------------------------------------------------------------------------------------
    def propose(self, pairs: list[tuple[str, str]], step: int) -> list[Item]:
        cfg = self.cfg
        items, requests = [], []
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
                items.append(Item(teacher, student, name, shown_program=shown))
                requests.append(self._request(slot, prompt, cfg.tasks.teacher_max_new_tokens))
        for item, gen in zip(items, self._generate(requests, step, "teacher"), strict=True):
            item.gen = gen
        return items

    def validate(self, items: list[Item], step: int) -> None:
        from populora.tasks import FormatError, Invalid

        by_task: dict[str, list[tuple[Item, Any]]] = defaultdict(list)
        for item in items:
            task = self.tasks[item.task]
            parsed = task.parse_proposal(
                item.gen.text, program=item.shown_program, template=self.cfg.tasks.template
            )
            if isinstance(parsed, FormatError):
                item.reason = parsed.reason
                continue
            item.program, item.inputs = parsed.program, list(parsed.inputs)
            by_task[item.task].append((item, parsed.with_origin(item.teacher, step)))
        for name, group in by_task.items():
            results = self.tasks[name].validate([p for _, p in group], self.sandbox)
            for (item, _), res in zip(group, results, strict=True):
                if isinstance(res, Invalid):
                    item.reason = res.reason
                else:
                    item.problem = res.with_origin(item.teacher, step)
        from populora.tasks.features import program_features

        for item in items:
            if item.program:
                try:
                    item.features = program_features(item.program)
                except Exception:  # noqa: BLE001 - unparsable programs simply have no features
                    item.features = None
            if item.valid:
                self.buffers.add(item.problem)
        self.coverage.add([it.features for it in items if it.valid])

    # (3) ------------------------------------------------------------------------------------------------
    def solve(self, items: list[Item], step: int) -> None:
        cfg, requests, owners = self.cfg, [], []
        for item in items:
            if not item.valid:
                continue
            prompt = self.tasks[item.task].student_prompt(item.problem, template=cfg.tasks.template)
            slot = self.pop[item.student].slot
            for _ in range(cfg.rl.rollouts):
                requests.append(self._request(slot, prompt, cfg.tasks.student_max_new_tokens))
                owners.append(item)
        for item, gen in zip(owners, self._generate(requests, step, "student"), strict=True):
            item.answers.append(gen)

    def score(self, items: list[Item]) -> None:
        from populora.tasks import FormatError
        from populora.tasks.rewards import learnability_reward, teacher_reward

        proposer_reward = learnability_reward if self.single else teacher_reward
        for item in items:
            if not item.valid:
                item.reward = self.rewards.invalid_proposal
                continue
            task = self.tasks[item.task]
            answers = [task.parse_answer(g.text, template=self.cfg.tasks.template) for g in item.answers]
            item.formatted = [not isinstance(a, FormatError) for a in answers]
            item.solves = [bool(x) for x in task.score(item.problem, answers, self.sandbox)]
            item.reward = proposer_reward(item.solve_rate, True, self.rewards)

    # (4) ------------------------------------------------------------------------------------------------
    def update(self, items: list[Item]) -> dict[str, float]:
        """REINFORCE++-baseline advantages over every row of every member, then ONE `engine.train_step`."""
        from populora.engine import TrainBatch

        rows, _ = self.build_rows(items)
        return self.engine.train_step(TrainBatch(rows)) if rows else {}

    def build_rows(self, items: list[Item]) -> tuple[list, dict]:
        """Training rows of every member with their advantages, plus the inputs of the advantage computation."""
        import torch

        from populora.engine import TrainRow

        scope = self.cfg.effective_whiten_scope
        rows, rewards, lengths, groups, scopes = [], [], [], [], []

        def add(member: str, role: str, task: str, gen, reward: float, group) -> None:
            if not gen.token_ids:
                return  # nothing to train on (an immediate EOS is still one token; an empty budget is not)
            rows.append(
                TrainRow(
                    slot=self.pop[member].slot,
                    prompt_ids=gen.prompt_ids,
                    response_ids=gen.token_ids,
                    advantages=0.0,
                    old_logprobs=gen.logprobs,
                )
            )
            rewards.append(reward)
            lengths.append(len(gen.token_ids))
            groups.append(group)
            scopes.append(scope_key(scope, member=member, role=role, task=task))

        for i, item in enumerate(items):
            # A teacher prompt is sampled once: a group of one keeps its reward (no per-prompt baseline).
            add(item.teacher, "teacher", item.task, item.gen, item.reward, ("teacher", i))
            for gen, ok, fmt in zip(item.answers, item.solves, item.formatted, strict=True):
                # The n rollouts of one student on one problem share the baseline (prompt x slot).
                add(item.student, "student", item.task, gen, self._student_reward(fmt, ok), ("student", i))
        info = {"rewards": rewards, "lengths": lengths, "groups": groups, "scopes": scopes}
        if not rows:
            return [], info
        adv = reinforce_pp_baseline(
            torch.tensor(rewards),
            torch.tensor(lengths),
            groups,
            scopes,
            token_weighted=self.cfg.rl.token_weighted,
        )
        for row, a in zip(rows, adv.tolist(), strict=True):
            row.advantages = float(a)
        return rows, info

    def rate(self, pairs: list[tuple[str, str]], items: list[Item], step: int) -> list[dict]:
        """One TrueSkill update per matchup from the student's solve rate on the teacher's valid problems."""
        out = []
        for teacher, student in pairs:
            mine = [it for it in items if it.teacher == teacher and it.student == student]
            solves = [s for it in mine for s in it.solves]
            rho = sum(solves) / len(solves) if solves else None
            n_valid = sum(it.valid for it in mine)
            entry = {"teacher": teacher, "student": student, "solve_rate": rho, "n_problems": n_valid}
            if not self.single:
                t, s = self.pop[teacher], self.pop[student]
                new_t, new_s, outcome = self.ratings.update(t.rating, s.rating, rho)
                t.set_rating(new_t)
                s.set_rating(new_s)
                t.games += 1
                s.games += 1
                entry["outcome"] = outcome
            out.append(entry)
        return out

    # (5) ------------------------------------------------------------------------------------------------
    def evolve(self, step: int) -> list[dict]:
        from populora.operators import REGISTRY, apply

        arity = {name: op.arity for name, op in REGISTRY.items()}
        events = []
        for r in plan_evolution(self.pop, self.cfg, self.ratings.prior(), self.rng, arity=arity):
            t0 = time.perf_counter()
            parents = [self.engine.get_adapter(self.pop[p].slot) for p in r.parents]
            try:
                child = apply(r.operator, parents=parents, seed=r.seed)
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
            slot = self.pop[r.replaced].slot
            # A child starts with fresh AdamW moments: its parent's moments describe other weights.
            self.engine.set_adapter(slot, child, reset_optimizer=True)
            member = self.pop.replace(r.replaced, r.child_rating, list(r.parents), step, r.operator)
            events.append(
                {
                    "step": step,
                    "type": "evolution",
                    "role": r.role,
                    "operator": r.operator,
                    "parents": list(r.parents),
                    "child": member.id,
                    "replaced": r.replaced,
                    "child_mu": member.mu,
                    "child_sigma": member.sigma,
                    "seed": r.seed,
                    "seconds": time.perf_counter() - t0,
                }
            )
        return events

    # ---------------------------------------------------------------------------------------------- metrics
    def metrics_record(
        self,
        step: int,
        items: list[Item],
        tm: dict,
        matchups: list[dict],
        timings: dict,
        step_s: float,
        members: list | None = None,
    ) -> dict:
        """The metrics.jsonl line of a step (docs/run-folder.md) for `members` (default: the live ones)."""
        gen_tokens = sum(len(it.gen.token_ids) for it in items) + sum(
            len(g.token_ids) for it in items for g in it.answers
        )
        out = {}
        for m in members if members is not None else self.pop.ordered():
            slot = m.slot
            as_teacher = [it for it in items if it.teacher == m.id]
            as_student = [it for it in items if it.student == m.id and it.valid]
            teacher_like, student_like = m.role in ("teacher", "single"), m.role in ("student", "single")
            rewards, lens = [], []
            if teacher_like:
                rewards += [it.reward for it in as_teacher]
                lens += [len(it.gen.token_ids) for it in as_teacher]
            if student_like:
                rewards += [
                    self._student_reward(f, ok)
                    for it in as_student
                    for ok, f in zip(it.solves, it.formatted, strict=True)
                ]
                lens += [len(g.token_ids) for it in as_student for g in it.answers]
            solved_items = as_teacher if m.role == "teacher" else as_student
            solve = {}
            for name in ("code_i", "code_o", "code_f"):
                solves = [s for it in solved_items if it.task == name for s in it.solves]
                solve[name] = sum(solves) / len(solves) if solves else None
            every = [s for it in solved_items for s in it.solves]
            solve["all"] = sum(every) / len(every) if every else None
            n_valid = sum(it.valid for it in as_teacher)
            from populora.diagnostics.complexity import summarize

            out[m.id] = {
                "role": m.role,
                "reward": _mean(rewards),
                "valid_rate": n_valid / len(as_teacher) if teacher_like and as_teacher else None,
                "solve_rate": solve,
                "response_len": _mean(lens),
                "entropy": tm.get(f"entropy/{slot}"),
                "mu": None if self.single else m.mu,
                "sigma": None if self.single else m.sigma,
                "loss": tm.get(f"loss/{slot}"),
                "grad_norm": tm.get(f"grad_norm/{slot}"),
                "complexity": summarize([it.features for it in as_teacher if it.valid])
                if teacher_like
                else None,
                "n_valid": n_valid if teacher_like else None,
                "n_proposed": len(as_teacher) if teacher_like else None,
            }
        gen_s = timings["teacher"] + timings["student"]
        return {
            "step": step,
            "time": time.time(),
            "mode": self.cfg.population.mode,
            "phase_s": {k: round(v, 4) for k, v in timings.items()},
            "step_s": round(step_s, 4),
            "tokens_per_s": gen_tokens / gen_s if gen_s > 0 else None,
            "tokens": gen_tokens,
            "train_tokens": tm.get("tokens"),
            "coverage": self.coverage.coverage,
            "coverage_cells": self.coverage.cells_filled,
            "members": out,
            "matchups": [{k: v for k, v in m.items() if k != "outcome"} for m in matchups],
        }

    def problem_records(self, step: int, items: list[Item]) -> list[dict]:
        out = []
        for it in items:
            p = it.problem
            out.append(
                {
                    "step": step,
                    "proposer": it.teacher,
                    "solver": it.student,
                    "task": it.task,
                    "valid": it.valid,
                    "reason": it.reason,
                    "id": p.id if p is not None else None,
                    "program": p.program if p is not None else it.program,
                    "inputs": list(p.inputs) if p is not None else it.inputs,
                    "outputs": list(p.outputs) if p is not None else None,
                    "message": p.message if p is not None else "",
                    "solve_rate": it.solve_rate,
                    "reward": it.reward,
                    "features": it.features,
                }
            )
        return out

    # ---------------------------------------------------------------------------------------------- checkpoints
    def save(self, step: int) -> Path:
        import torch

        t0 = time.perf_counter()

        def write(d: Path) -> None:
            for m in self.pop.ordered():
                self.engine.save_adapter(m.slot, d / "adapters" / m.id)
            torch.save(self.engine.optimizer_state(), d / "optimizer.pt")
            torch.save(ckpt.rng_state(self.rng), d / "rng.pt")
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
                    "time": time.time(),
                },
            )

        path = ckpt.save_checkpoint(self.run.path, step, write, keep=self.cfg.train.keep_checkpoints)
        rel = path.relative_to(self.run.path).as_posix()
        seconds = time.perf_counter() - t0
        self.run.event(
            {"step": step, "type": "checkpoint", "path": rel, "seconds": round(seconds, 4)}, fsync=True
        )
        self._pending_checkpoint_s = seconds
        return path

    def restore(self) -> int:
        """Load the newest complete checkpoint; repair the logs to it; return its step."""
        import torch

        found = ckpt.latest_checkpoint(self.run.path)
        if found is None:  # killed before the first checkpoint: start over, dropping the partial logs
            self.run.repair(0)
            return 0
        step, path = found
        state = ckpt.read_state(path)
        self.pop = Population.from_dict(state["population"])
        for m in self.pop.ordered():
            self.engine.load_adapter(m.slot, path / "adapters" / m.id)
        self.engine.load_optimizer_state(torch.load(path / "optimizer.pt", weights_only=False))
        ckpt.restore_rng(torch.load(path / "rng.pt", weights_only=False), self.rng)
        from populora.tasks.buffers import TaskBuffers

        self.buffers = TaskBuffers.load(path / "buffers.jsonl")
        self.coverage.load_state_dict(state["coverage"])
        self.run.repair(step)
        rel = path.relative_to(self.run.path).as_posix()
        if not any(
            e.get("type") == "checkpoint" and e.get("step") == step for e in self.run.read("events.jsonl")
        ):
            # killed between the checkpoint's rename and its event line: record it now
            self.run.event({"step": step, "type": "checkpoint", "path": rel, "seconds": None})
        self.run.event({"step": step, "type": "resume", "from": rel}, fsync=True)
        return step

    # ---------------------------------------------------------------------------------------------- loop
    def fit(self, start: int = 0) -> None:
        cfg = self.cfg
        progress = _Progress(cfg.train.steps, start, self.console, self.quiet)
        try:
            for step in range(start + 1, cfg.train.steps + 1):
                res = self.step(step)
                # Logs of a step are written before its checkpoint, so a resume from it never loses them.
                for rec in self.problem_records(step, res.items):
                    self.run.problem(rec)
                for ev in res.events:
                    self.run.event(ev)
                self.run.metric(res.record)
                self.step_done = step
                if step % cfg.train.checkpoint_every == 0 or step == cfg.train.steps:
                    self.save(step)
                progress.advance(summary_line(res.record, res.events, cfg.train.steps))
        finally:
            progress.stop()


# -------------------------------------------------------------------------------------------------- seeds
def synthetic_seeds(all_tasks: dict, n: int, sandbox, seed: int) -> list:
    """`n` seed problems per task type from the pretraining program generator, validated in the sandbox.

    AZR seeds its buffers with 256 programs its base model proposed before training; a tiny model proposes
    too few valid ones, so the tiny preset seeds from the generator its base model was pretrained on instead.
    """
    from populora.pretrain.programs import sample_code_f, sample_triplet
    from populora.tasks import InvalidProblem

    rng = random.Random(_derive_seed("seeds", seed))
    out = []
    for name, task in all_tasks.items():
        for _ in range(n):
            try:
                if name == "code_f":
                    prog, pairs = sample_code_f(rng, task.config.n_inputs)
                    p = task.problem_from(sandbox, prog.code, [i for i, _ in pairs], prog.message, "seed", 0)
                else:
                    tr = sample_triplet(rng)
                    p = task.problem_from(sandbox, tr.program, [tr.input], "", "seed", 0)
            except InvalidProblem:
                continue  # the generator and the task policy disagree on a rare program: skip it
            out.append(p)
    return out


# -------------------------------------------------------------------------------------------------- engine
def preflight(cfg: Config) -> str:
    """Check the model exists and base + slots fit in memory (one clear line if not); return the device."""
    from populora.engine import EngineError, resolve_model

    try:
        folder = resolve_model(cfg.model.name)
    except EngineError as err:
        raise TrainError(f"model.name: {err}") from None
    device = cfg.model.device
    if device == "auto":
        import torch

        device = "cuda" if torch.cuda.is_available() else "cpu"
    base_bytes, slot_bytes = estimate_memory(folder, cfg.lora.rank, cfg.lora.targets)
    if cfg.model.backend == "vllm":  # vLLM holds its own copy of the base and a KV cache
        from populora.engine.vllm import held_bytes

        base_bytes += held_bytes(
            folder,
            device,
            gpu_memory_utilization=cfg.model.vllm_gpu_memory_utilization,
            kv_cache_gb=cfg.model.vllm_kv_cache_gb,
        )
    check_memory(cfg, base_bytes, slot_bytes, available_bytes(device))
    return device


def build_engine(cfg: Config):
    """The engine for a config (after `preflight`)."""
    from populora.engine import EngineError, build

    device = preflight(cfg)
    import torch

    name = cfg.model.dtype if cfg.model.dtype != "auto" else ("bfloat16" if device == "cuda" else "float32")
    m = cfg.model
    vllm_opts = (
        dict(
            vllm_dtype=None if m.vllm_dtype == "model" else m.vllm_dtype,
            gpu_memory_utilization=m.vllm_gpu_memory_utilization,
            kv_cache_gb=m.vllm_kv_cache_gb,
        )
        if m.backend == "vllm"
        else {}
    )
    try:
        return build(
            model=cfg.model.name,
            n_slots=cfg.n_slots,
            rank=cfg.lora.rank,
            alpha=cfg.lora.alpha,
            targets=cfg.lora.targets,
            backend=cfg.model.backend,
            device=device,
            lr=cfg.rl.lr,
            weight_decay=cfg.rl.weight_decay,
            max_grad_norm=cfg.rl.grad_clip or None,
            seed=cfg.train.seed,
            train_threads=cfg.train.threads,
            dtype=getattr(torch, name),
            **vllm_opts,
        )
    except EngineError as err:
        raise TrainError(f"model: {err}") from None
    except ImportError as err:  # e.g. the vllm backend without vllm installed
        raise TrainError(
            f"model.backend={cfg.model.backend}: cannot load it ({err}); install the `gpu` extra or use "
            "--set model.backend=hf."
        ) from None


def estimate_memory(folder: Path, rank: int, targets: list[str]) -> tuple[int, int]:
    """(bytes of the base weights on disk, bytes of one adapter slot with grads and AdamW moments)."""
    base = sum(p.stat().st_size for p in Path(folder).glob("*.safetensors")) or sum(
        p.stat().st_size for p in Path(folder).glob("*.bin")
    )
    try:
        c = json.loads((Path(folder) / "config.json").read_text())
        h, layers = int(c["hidden_size"]), int(c["num_hidden_layers"])
        heads = int(c.get("num_attention_heads", 1))
        kv = int(c.get("num_key_value_heads", heads))
        hd = int(c.get("head_dim") or h // heads)
        inter = int(c.get("intermediate_size", 4 * h))
    except (OSError, KeyError, ValueError, TypeError):
        return base, 0
    dims = {
        "q_proj": (h, heads * hd),
        "k_proj": (h, kv * hd),
        "v_proj": (h, kv * hd),
        "o_proj": (heads * hd, h),
        "gate_proj": (h, inter),
        "up_proj": (h, inter),
        "down_proj": (inter, h),
    }
    per_layer = sum(rank * sum(dims.get(t, (h, h))) for t in targets)
    return base, 4 * 4 * per_layer * layers  # fp32 weights, grads, two AdamW moments


def available_bytes(device: str) -> int:
    if device.startswith("cuda"):
        try:
            import torch

            return int(torch.cuda.mem_get_info()[0])
        except Exception:  # noqa: BLE001
            pass
    from populora.config import available_memory_bytes

    return available_memory_bytes()


# -------------------------------------------------------------------------------------------------- progress
def summary_line(rec: dict, events: list[dict], total: int) -> str:
    ms = rec["members"]

    def avg(role: str, key: str, sub: str | None = None) -> str:
        vals = [(m[key][sub] if sub else m[key]) for m in ms.values() if m["role"] in role]
        v = _mean(vals)
        return "  -  " if v is None else f"{v:+.2f}" if key == "reward" else f"{v:.2f}"

    evo = [f"{e['replaced']}->{e['child']}({e['operator']})" for e in events if e["type"] == "evolution"]
    if rec["mode"] == "single":
        body = (
            f"valid {avg('single', 'valid_rate')}  solve {avg('single', 'solve_rate', 'all')}  "
            f"reward {avg('single', 'reward')}"
        )
    else:
        body = (
            f"T valid {avg('teacher', 'valid_rate')} reward {avg('teacher', 'reward')}  |  "
            f"S solve {avg('student', 'solve_rate', 'all')} reward {avg('student', 'reward')}"
        )
    tail = f"  |  cov {rec['coverage_cells']} cells  |  {rec['step_s']:.1f}s"
    return f"step {rec['step']:>4}/{total}  {body}{tail}" + (f"  |  evolve {' '.join(evo)}" if evo else "")


class _Progress:
    """A rich progress bar on a terminal (plus one printed summary line per step); plain lines otherwise."""

    def __init__(self, total: int, start: int, console, quiet: bool) -> None:
        self.bar = None
        if console is None:
            from rich.console import Console

            console = Console(stderr=False)
        self.console = console
        if not quiet and console.is_terminal:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

            self.bar = Progress(
                TextColumn("[bold]training"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeRemainingColumn(),
                console=console,
                transient=True,
            )
            self.task = self.bar.add_task("train", total=total, completed=start)
            self.bar.start()

    def advance(self, line: str) -> None:
        if self.bar is not None:
            self.bar.console.print(line, highlight=False)
            self.bar.advance(self.task)
        else:
            print(line, flush=True)

    def stop(self) -> None:
        if self.bar is not None:
            self.bar.stop()


# -------------------------------------------------------------------------------------------------- entry point
def train(
    preset: str = "tiny",
    run_dir: str | Path | None = None,
    overrides: list[str] | tuple = (),
    resume: str | Path | None = None,
    quiet: bool = False,
    engine: Any = None,
) -> Path:
    """Run (or resume) training; returns the run folder. Raises ConfigError / TrainError on user errors."""
    if resume is not None:
        run_path = Path(resume)
        cfg_file = run_path / "config.yaml"
        if not cfg_file.is_file():
            raise TrainError(
                f"--resume {run_path}: no config.yaml there; pass a run folder written by `populora train`."
            )
        import yaml

        cfg = from_dict(yaml.safe_load(cfg_file.read_text()))
        for text in overrides:
            key = text.split("=", 1)[0].strip()
            if key not in RESUMABLE_OVERRIDES:
                raise ConfigError(
                    f"--set {key}: cannot change on --resume (only {', '.join(RESUMABLE_OVERRIDES)}); "
                    "start a new run to change it."
                )
        if overrides:
            from populora.config import parse_override, set_value, validate

            for text in overrides:
                set_value(cfg, *parse_override(text))
            validate(cfg)
    else:
        cfg = load_config(preset, overrides)
        run_path = (
            Path(run_dir)
            if run_dir
            else Path("runs") / f"{Path(preset).stem}-{time.strftime('%Y%m%d-%H%M%S')}"
        )
        if (run_path / "metrics.jsonl").exists() or ckpt.list_checkpoints(run_path):
            raise TrainError(
                f"--run-dir {run_path}: already holds a run; continue it with "
                f"`populora train --resume {run_path}` or choose another --run-dir."
            )
    trainer = Trainer(cfg, run_path, engine=engine, quiet=quiet)
    try:
        trainer.setup()
        start = 0
        if resume is not None:
            start = trainer.restore()
        if resume is None or not trainer.run.config_path.exists():
            trainer.run.write_config(to_yaml(cfg))
        elif resume is not None:
            trainer.run.write_config(to_yaml(cfg))  # records a changed train.steps
        if start >= cfg.train.steps:
            print(
                f"nothing to do: {run_path} finished all {cfg.train.steps} steps "
                "(raise train.steps with --set to continue).",
                file=sys.stderr,
            )
        trainer.fit(start)
    finally:
        trainer.close()
    return run_path


__all__ = ["Item", "StepResult", "TrainError", "Trainer", "build_engine", "task_schedule", "train"]
