"""The self-play trainer. One `Trainer.step` is the paper's five phases, top to bottom:

    (1) matchmaking         PFSP over TrueSkill ratings -> one (teacher, student) pair per teacher
    (2) teacher generation  each teacher proposes `tasks.prompts` problems split equally across the task types,
                            each prompt showing K reference problems from the buffers; proposals are parsed and
                            validated in the sandbox; valid ones enter the buffers
    (3) student solve       the matched student answers every valid problem n = `rl.rollouts` times at the
                            training temperature; the sandbox scores every answer
    (4) rewards and update  student: +1 right, -0.5 parsed but wrong, -1 unparsable; teacher: 1 - rho on a
                            valid problem (0 when rho = 0), `rl.invalid_reward` (-1) on an invalid one;
                            REINFORCE++-baseline advantages; ONE mixed batch of every member's rows ->
                            `engine.train_step`; one TrueSkill update per matchup from the solve rate
    (5) evolution           every `evolution.every` steps the bottom gamma of each role by LCB is replaced by
                            children of top-ranked parents made by an operator; the slot's optimiser is reset

Single mode (`population.mode=single`, the AZR baseline) runs the same code with one member `A0` in both roles
of a single matchup: it proposes, estimates learnability with n samples of itself at the training temperature
(reward 1 - s for 0 < s < 1, else 0: the same formula as the teacher's 1 - rho with rho = s), and trains on its
proposals and those solver samples in one batch, whitened per (task x role) (TRR++). Its per-step work is one
matchup's: the same prompts, rollouts, tokens and one update, i.e. what each teacher-student pair does.

Every generation of a phase goes to the engine as one mixed-slot batch (the shared base forward), and every
random draw derives from `train.seed` and the step, so a run resumed from a checkpoint replays the same steps.
Each phase fills its fields of the step's `ProposalTrace`s (train/records.py); rewards are computed once, in
`score`, and read by the update and the metrics. Layers and contracts: docs/architecture.md.
"""

from __future__ import annotations

import hashlib
import random
import sys
import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
import yaml

from populora import tasks
from populora.config import Config, load_config, resume_config, to_dict, to_yaml
from populora.diagnostics.coverage import CoverageArchive
from populora.diagnostics.features import program_features
from populora.engine import EngineError, GenRequest, PolicyEngine, TrainBatch, TrainRow, build, resolve_model
from populora.engine.memory import available_bytes, check_memory, estimate_memory
from populora.names import PHASES, TASKS
from populora.operators import REGISTRY, apply
from populora.population.evolution import plan_evolution
from populora.population.matchmaking import match
from populora.population.members import Population
from populora.population.ratings import RatingSystem
from populora.pretrain.programs import sample_code_f, sample_triplet
from populora.rl.advantages import reinforce_pp_baseline, scope_key
from populora.sandbox import Limits, Sandbox
from populora.tasks.buffers import TaskBuffers
from populora.tasks.rewards import RewardConfig, learnability_reward, student_reward, teacher_reward
from populora.train import checkpoint as ckpt
from populora.train.probe import Prober
from populora.train.progress import StepProgress, summary_line
from populora.train.records import ProposalTrace, StepResult, metrics_record, problem_records, solve_rate
from populora.train.run_folder import RunFolder


class TrainError(RuntimeError):
    """A user-fixable problem starting or resuming a run; the message is one line with the fix."""


def _derive_seed(*parts: Any) -> int:
    h = hashlib.blake2b(repr(parts).encode(), digest_size=8).digest()
    return int.from_bytes(h, "little") & 0x7FFFFFFF


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

    # ---------------------------------------------------------------------------------------------- setup
    def setup(self) -> None:
        """Start the sandbox, then the engine and buffers. The sandbox starts before the model loads: its
        workers are spawned from this process, which is cheaper while it does not yet hold the model."""
        if self.engine is None:
            preflight(self.cfg)  # fail on a missing model or too many slots before starting anything
        sb = self.cfg.sandbox
        self.sandbox = Sandbox(
            workers=sb.workers, limits=Limits(timeout_s=sb.timeout_s, memory_mb=sb.memory_mb)
        )
        torch.set_num_threads(self.cfg.train.threads)
        torch.manual_seed(self.cfg.train.seed)
        self.tasks = {name: tasks.get(name) for name in self.cfg.tasks.types}
        self.coverage = CoverageArchive()
        if self.engine is None:
            self.engine = build_engine(self.cfg)
        if self.engine.n_slots < self.cfg.n_slots:
            raise TrainError(
                f"the engine has {self.engine.n_slots} slots but the population needs {self.cfg.n_slots}."
            )
        tk = self.cfg.tasks
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
            for p in synthetic_seeds(tk.seed_synthetic, self.sandbox, self.cfg.train.seed):
                self.buffers.add(p)

    def close(self) -> None:
        if self.engine is not None:
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

    def _generate(self, requests: list[GenRequest], step: int, phase: str) -> list:
        if not requests:
            return []
        return self.engine.generate(requests, seed=_derive_seed(self.cfg.train.seed, step, phase))

    def _request(self, slot: int, prompt: str, max_new_tokens: int) -> GenRequest:
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
        """One step: the paper's five phases in order; returns its metrics record, traces and events."""
        cfg, timings, events = self.cfg, {name: 0.0 for name in PHASES}, []
        timings["checkpoint"], self._pending_checkpoint_s = self._pending_checkpoint_s, 0.0
        t_step = time.perf_counter()

        # (1) Matchmaking: PFSP over TrueSkill ratings.
        with self._phase(timings, "matchmaking"):
            pairs = self._pairs()

        # (2) Teacher generation: K references per prompt, one mixed batch over all teachers; then validation.
        with self._phase(timings, "teacher"):
            traces = self.propose(pairs, step)
        with self._phase(timings, "validate"):
            self.validate(traces, step)

        # (3) Student solve: n rollouts per valid problem at the training temperature, one mixed batch; then the
        # sandbox scores every answer and every reward of the step is computed, once.
        with self._phase(timings, "student"):
            self.solve(traces, step)
        with self._phase(timings, "score"):
            self.score(traces)

        # (4) Advantages from those rewards, ONE mixed batch for every member, rating updates.
        with self._phase(timings, "update"):
            train_metrics = self.update(traces)
            matchups = self.rate(pairs, traces, step)
        events += [{"step": step, "type": "matchup", **m} for m in matchups]

        # (5) Evolution every k steps: the bottom gamma by LCB replaced by operator children. The step's metrics
        # describe the members that played it, so they are taken before any of them is replaced.
        played = self.pop.ordered()
        with self._phase(timings, "evolution"):
            if not self.single and cfg.evolution.every and step % cfg.evolution.every == 0:
                events += self.evolve(step)

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
        )
        return StepResult(step, record, traces, events)

    # (2) ------------------------------------------------------------------------------------------------
    def propose(self, pairs: list[tuple[str, str]], step: int) -> list[ProposalTrace]:
        """One trace per teacher prompt, with the teacher's generation (one mixed batch over all teachers)."""
        cfg = self.cfg
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
                traces.append(ProposalTrace(teacher, student, name, shown_program=shown))
                requests.append(self._request(slot, prompt, cfg.tasks.teacher_max_new_tokens))
        for trace, gen in zip(traces, self._generate(requests, step, "teacher"), strict=True):
            trace.gen = gen
        return traces

    def validate(self, traces: list[ProposalTrace], step: int) -> None:
        """Parse and validate every proposal in the sandbox; valid problems enter the buffers and coverage."""
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
            results = self.tasks[name].validate([p for _, p in group], self.sandbox)
            for (trace, _), res in zip(group, results, strict=True):
                if isinstance(res, tasks.Invalid):
                    trace.reason = res.reason
                else:
                    trace.problem = res.with_origin(trace.teacher, step)
        for trace in traces:
            if trace.program:
                try:
                    trace.features = program_features(trace.program)
                except Exception:  # noqa: BLE001 - unparsable programs simply have no features
                    trace.features = None
            if trace.valid:
                self.buffers.add(trace.problem)
        self.coverage.add([t.features for t in traces if t.valid])

    # (3) ------------------------------------------------------------------------------------------------
    def solve(self, traces: list[ProposalTrace], step: int) -> None:
        """n = `rl.rollouts` answers of the matched student to every valid problem (one mixed batch)."""
        cfg, requests, owners = self.cfg, [], []
        for trace in traces:
            if not trace.valid:
                continue
            prompt = self.tasks[trace.task].student_prompt(trace.problem, template=cfg.tasks.template)
            slot = self.pop[trace.student].slot
            for _ in range(cfg.rl.rollouts):
                requests.append(self._request(slot, prompt, cfg.tasks.student_max_new_tokens))
                owners.append(trace)
        for trace, gen in zip(owners, self._generate(requests, step, "student"), strict=True):
            trace.answers.append(gen)

    def score(self, traces: list[ProposalTrace]) -> None:
        """Every reward of the step, computed here once: each answer's and each proposal's."""
        proposer_reward = learnability_reward if self.single else teacher_reward
        for trace in traces:
            if not trace.valid:
                trace.reward = self.rewards.invalid_proposal
                continue
            task = self.tasks[trace.task]
            answers = [task.parse_answer(g.text, template=self.cfg.tasks.template) for g in trace.answers]
            trace.formatted = [not isinstance(a, tasks.FormatError) for a in answers]
            trace.solves = [bool(x) for x in task.score(trace.problem, answers, self.sandbox)]
            trace.answer_rewards = [
                student_reward(fmt, ok, self.rewards)
                for fmt, ok in zip(trace.formatted, trace.solves, strict=True)
            ]
            trace.reward = proposer_reward(trace.solve_rate, True, self.rewards)

    # (4) ------------------------------------------------------------------------------------------------
    def update(self, traces: list[ProposalTrace]) -> dict[str, float]:
        """REINFORCE++-baseline advantages over every row of every member, then ONE `engine.train_step`."""
        rows = self.build_rows(traces)
        return self.engine.train_step(TrainBatch(rows)) if rows else {}

    def build_rows(self, traces: list[ProposalTrace]) -> list[TrainRow]:
        """Training rows of every member, each with its REINFORCE++-baseline advantage."""
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

        for i, trace in enumerate(traces):
            # A teacher prompt is sampled once: a group of one keeps its reward (no per-prompt baseline).
            add(trace.teacher, "teacher", trace.task, trace.gen, trace.reward, ("teacher", i))
            for gen, reward in zip(trace.answers, trace.answer_rewards, strict=True):
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
        return rows

    def rate(self, pairs: list[tuple[str, str]], traces: list[ProposalTrace], step: int) -> list[dict]:
        """One TrueSkill update per matchup from the student's solve rate on the teacher's valid problems."""
        out = []
        for teacher, student in pairs:
            mine = [tr for tr in traces if tr.teacher == teacher and tr.student == student]
            rho = solve_rate(mine)
            n_valid = sum(tr.valid for tr in mine)
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
        """Replace the bottom gamma of each role by operator children of top-ranked parents."""
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

    # ---------------------------------------------------------------------------------------------- checkpoints
    def save(self, step: int) -> Path:
        """Write an atomic checkpoint of everything a resume needs (train/checkpoint.py); return its folder."""
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
        progress = StepProgress(cfg.train.steps, start, self.console, self.quiet)
        try:
            self.prober.at_start(self, start)  # step 0: probe before any update
            for step in range(start + 1, cfg.train.steps + 1):
                res = self.step(step)
                self.prober.after_step(self, step, res.record)
                # Logs of a step are written before its checkpoint, so a resume from it never loses them.
                for rec in problem_records(step, res.traces):
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
def synthetic_seeds(n: int, sandbox: Sandbox, seed: int) -> list:
    """`n` seed problems per task type from the pretraining program generator, validated in the sandbox.

    AZR seeds its buffers with 256 programs its base model proposed before training; a tiny model proposes
    too few valid ones, so the tiny preset seeds from the generator its base model was pretrained on instead.
    """
    rng = random.Random(_derive_seed("seeds", seed))
    out = []
    for name in TASKS:
        task = tasks.get(name)
        for _ in range(n):
            try:
                if name == "code_f":
                    prog, pairs = sample_code_f(rng, task.config.n_inputs)
                    p = task.problem_from(sandbox, prog.code, [i for i, _ in pairs], prog.message, "seed", 0)
                else:
                    tr = sample_triplet(rng)
                    p = task.problem_from(sandbox, tr.program, [tr.input], "", "seed", 0)
            except tasks.InvalidProblem:
                continue  # the generator and the task policy disagree on a rare program: skip it
            out.append(p)
    return out


# -------------------------------------------------------------------------------------------------- engine
def preflight(cfg: Config) -> str:
    """Check the model exists and base + slots fit in memory (one clear line if not); return the device."""
    try:
        folder = resolve_model(cfg.model.name)
    except EngineError as err:
        raise TrainError(f"model.name: {err}") from None
    device = cfg.model.device
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    base_bytes, slot_bytes = estimate_memory(folder, cfg.lora.rank, cfg.lora.targets)
    check_memory(cfg, base_bytes, slot_bytes, available_bytes(device))
    return device


def build_engine(cfg: Config) -> PolicyEngine:
    """The engine for a config: its model, slots, LoRA shape and optimiser settings."""
    device = preflight(cfg)
    name = cfg.model.dtype if cfg.model.dtype != "auto" else ("bfloat16" if device == "cuda" else "float32")
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
        )
    except EngineError as err:
        raise TrainError(f"model: {err}") from None
    except ImportError as err:  # e.g. the vllm backend without vllm installed
        raise TrainError(
            f"model.backend={cfg.model.backend}: cannot load it ({err}); install the `gpu` extra or use "
            "--set model.backend=hf."
        ) from None


# -------------------------------------------------------------------------------------------------- entry point
def train(
    preset: str = "tiny",
    run_dir: str | Path | None = None,
    overrides: list[str] | tuple = (),
    resume: str | Path | None = None,
    quiet: bool = False,
    engine: PolicyEngine | None = None,
) -> Path:
    """Run (or resume) training; returns the run folder. Raises ConfigError / TrainError on user errors."""
    if resume is not None:
        run_path = Path(resume)
        cfg_file = run_path / "config.yaml"
        if not cfg_file.is_file():
            raise TrainError(
                f"--resume {run_path}: no config.yaml there; pass a run folder written by `populora train`."
            )
        cfg = resume_config(yaml.safe_load(cfg_file.read_text()), overrides)
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
        start = trainer.restore() if resume is not None else 0
        trainer.run.write_config(to_yaml(cfg))  # on resume: records a changed train.steps
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


__all__ = ["TrainError", "Trainer", "build_engine", "preflight", "synthetic_seeds", "task_schedule", "train"]
