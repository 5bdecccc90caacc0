"""What a run needs before its first step: the engine (a memory preflight, then `populora.engine.build` with
the config's model, slots, LoRA shape and optimiser settings) and the task buffers with their seed problems
(`seeded_buffers`: seed files, each family's seeds, synthetic seeds). Kept apart from the loop (`trainer.py`),
which only uses them."""

from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path
from typing import Any

import torch

from populora import tasks
from populora.config import Config
from populora.engine import EngineError, PolicyEngine, build, resolve_model
from populora.engine.memory import (
    MemoryPlan,
    available_bytes,
    check_memory,
    check_plan,
    check_plan_on_gpu,
    cuda_problem,
    estimate_memory,
    memory_plan,
)
from populora.lora.adapter import AdapterError
from populora.names import TASKS
from populora.pretrain.programs import sample_code_f, sample_triplet
from populora.sandbox import Sandbox
from populora.tasks import registry
from populora.tasks.buffers import TaskBuffers
from populora.train.errors import TrainError
from populora.train.progress import note
from populora.train.seed_files import SeedFileError, resolve_seed_file
from populora.train.targets_check import check_targets, local_model_folder


def derive_seed(*parts: Any) -> int:
    """A 31-bit seed derived from `parts` (e.g. the run's seed, the step and the phase): independent streams
    that a resumed run replays exactly."""
    h = hashlib.blake2b(repr(parts).encode(), digest_size=8).digest()
    return int.from_bytes(h, "little") & 0x7FFFFFFF


def synthetic_seeds(
    n: int, sandbox: Sandbox, seed: int, levels: tuple[int, ...] | None = None, types: tuple[str, ...] = TASKS
) -> list:
    """`n` seed problems per task type from the pretraining program generator, validated in the sandbox.

    AZR seeds its buffers with 256 programs its base model proposed before training; a tiny model proposes
    too few valid ones, so the tiny preset seeds from the generator its base model was pretrained on instead:
    `levels` None is `programs.py`'s generator (the v1 asset's), a tuple of graded levels draws each problem's
    level from it (`graded.sample_graded`, train split), as the model's corpus did (`graded_seed_levels`).
    `types`: the task types to make (default all, in TASKS order: the trainer's seeds do not change).
    """
    rng = random.Random(derive_seed("seeds", seed))
    out = []
    for name in (t for t in TASKS if t in types):
        task = tasks.get(name)
        for _ in range(n):
            try:
                if levels:
                    from populora.pretrain.graded import sample_graded

                    k = task.config.n_inputs if name == "code_f" else 1
                    g = sample_graded(rng, rng.choice(levels), split="train", n_inputs=k)
                    code, inputs, message = g.code, [i for i, _ in g.pairs], g.message
                elif name == "code_f":
                    prog, pairs = sample_code_f(rng, task.config.n_inputs)
                    code, inputs, message = prog.code, [i for i, _ in pairs], prog.message
                else:
                    tr = sample_triplet(rng)
                    code, inputs, message = tr.program, [tr.input], ""
                p = task.problem_from(sandbox, code, inputs, message if name == "code_f" else "", "seed", 0)
            except tasks.InvalidProblem:
                continue  # the generator and the task policy disagree on a rare program: skip it
            out.append(p)
    return out


def graded_seed_levels(model_folder: Path) -> tuple[int, ...] | None:
    """The graded levels a model folder was pretrained on (its `pretrain_info.json` says `level: "1,1,2,..."`),
    so its synthetic seeds come from the same generator and mix; None for any other model."""
    from populora.pretrain.graded import is_graded_level, parse_levels

    info = Path(model_folder) / "pretrain_info.json"
    try:
        level = json.loads(info.read_text()).get("config", {}).get("level", "")
    except (OSError, ValueError):
        return None
    return parse_levels(level) if isinstance(level, str) and is_graded_level(level) else None


def seeded_buffers(cfg: Config, sandbox: Sandbox, guard, quiet: bool = False) -> TaskBuffers:
    """The run's task buffers, seeded: from the seed files (`tasks.seed_io`, `tasks.seed_code_f`), then each
    non-AZR family's seed problems, then (`tasks.seed_synthetic`, AZR) synthetic seeds from the base model's
    own generator, checked in the sandbox. A program equal to a probe program (`guard`, train/probe_guard.py)
    never enters them."""
    tk = cfg.tasks
    try:
        buffers = TaskBuffers.seeded(
            tk.buffer_size,
            seed_io=resolve_seed_file(tk.seed_io, "tasks.seed_io") or None,
            seed_code_f=resolve_seed_file(tk.seed_code_f, "tasks.seed_code_f") or None,
            sandbox=sandbox,
            tasks=registry.buffer_types(tk.families),
        )
    except SeedFileError as err:
        raise TrainError(str(err)) from None
    except OSError as err:
        raise TrainError(f"tasks.seed_io / tasks.seed_code_f: cannot read the seed file ({err}).") from None
    # each non-AZR type's buffer gets its family's seeds (at least `tasks.references`), made in the sandbox
    # behind the policy (tasks/registry.py)
    n = max(tk.seed_synthetic, tk.references, 1)
    for t in registry.buffer_types(tk.families)[len(tasks.TASK_NAMES) :]:
        buffers[t].extend(registry.seed_problems(t, n, sandbox, cfg.train.seed))
    if tk.seed_synthetic and "azr" in tk.families:
        note(f"seeding the buffers ({tk.seed_synthetic} problems per task, checked in the sandbox)", quiet)
        levels = graded_seed_levels(resolve_model(cfg.model.name, cfg.model.revision or None))
        for p in synthetic_seeds(tk.seed_synthetic, sandbox, cfg.train.seed, levels):
            if not guard.collides(p.program):  # the probe's twins never enter the buffers
                buffers.add(p)
    return buffers


def preflight(cfg: Config) -> str:
    """Check the model exists and base + slots fit in memory (one clear line if not); return the device.

    On a GPU the check counts vLLM's share and the activations of the longest micro-batch (`memory_plan`),
    against this process's GPU with one worker, or `model.memory_gb`; with dist.workers > 1 each Ray worker
    checks its own GPU (`build_engine` hands it the plan), so the driver needs no GPU."""
    try:
        folder = resolve_model(cfg.model.name, cfg.model.revision or None)
    except EngineError as err:
        raise TrainError(f"model.name: {err}") from None
    device = cfg.model.device
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda":
        distributed = cfg.dist.workers > 1
        problem = None if distributed else cuda_problem()  # workers check their own GPUs
        if problem:
            raise TrainError(f"model.device=cuda: {problem}.")
        if not distributed:  # the driver, /dev/shm, host RAM for sleep, a C compiler (`populora doctor`)
            from populora.doctor import preflight_problems

            problems = preflight_problems(cfg, folder)
            if problems:
                raise TrainError(
                    f"model.device=cuda: {'; '.join(problems)} (`populora doctor` lists every check)."
                )
        plan = gpu_plan(cfg, folder)
        if cfg.model.memory_gb > 0:
            check_plan(plan, int(cfg.model.memory_gb * 2**30), "model.memory_gb")
        elif not distributed:
            check_plan_on_gpu(plan)
        return device
    base_bytes, slot_bytes = estimate_memory(folder, cfg.lora.max_rank(), cfg.lora.targets)
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


def gpu_plan(cfg: Config, folder) -> MemoryPlan:
    """`memory_plan` in the training dtype (bfloat16 unless model.dtype says otherwise)."""
    return memory_plan(cfg, folder, "bfloat16" if cfg.model.dtype == "auto" else cfg.model.dtype)


def build_engine(cfg: Config) -> PolicyEngine:
    """The engine for a config: its model, slots, LoRA shape and optimiser settings."""
    device = preflight(cfg)
    name = cfg.model.dtype if cfg.model.dtype != "auto" else ("bfloat16" if device == "cuda" else "float32")
    m = cfg.model
    engine_opts = (
        dict(
            vllm_dtype=None if m.vllm_dtype == "model" else m.vllm_dtype,
            gpu_memory_utilization=m.vllm_gpu_memory_utilization,
            kv_cache_gb=m.vllm_kv_cache_gb,
        )
        if m.backend == "vllm"
        else {}
    )
    if device == "cuda" and cfg.dist.workers > 1 and cfg.model.memory_gb <= 0:
        # each Ray worker checks the plan against its own GPU before loading anything
        engine_opts["memory_plan"] = gpu_plan(cfg, resolve_model(cfg.model.name, cfg.model.revision or None))
    if m.backend == "vllm":
        engine_opts["sleep"] = m.vllm_sleep
        engine_opts["seeded"] = m.vllm_seeded  # per-request seeds: reproducible, slower (model.vllm_seeded)
    elif m.gen_dtype != "model":
        engine_opts["gen_dtype"] = m.gen_dtype  # the hf engine's generation dtype (engine/gen_dtype.py)
    folder = local_model_folder(cfg.model.name)  # lora.targets against the model's modules, before loading
    if folder is not None and (miss := check_targets(folder, cfg.lora.targets)):
        raise TrainError(miss)
    try:
        return build(
            model=cfg.model.name,
            n_slots=cfg.n_slots,
            rank=cfg.lora.rank,  # an int or per-member ranks (teachers, then students; cycled)
            max_rank=cfg.lora.max_rank(),
            alpha=cfg.lora.alpha,
            targets=cfg.lora.targets,
            backend=cfg.model.backend,
            device=device,
            lr=cfg.rl.lr,
            weight_decay=cfg.rl.weight_decay,
            max_grad_norm=cfg.rl.grad_clip or None,
            seed=cfg.train.seed,
            train_threads=cfg.train.threads,
            micro_batch_tokens=cfg.rl.micro_batch_tokens,
            activation_checkpointing=cfg.rl.activation_checkpointing,
            share_prompts=cfg.rl.share_prompt_forward,
            tis_cap=cfg.rl.tis_cap,
            kl_coef=cfg.rl.kl_coef,  # the KL to the base, entropy bonus and PPO clip (rl/kl.py, rl/loss.py)
            kl_estimator=cfg.rl.kl_estimator,
            entropy_coef=cfg.rl.entropy_coef,
            loss_agg=cfg.rl.loss_agg,  # how each loss group's tokens are averaged (rl/loss.py row_weights)
            clip_eps=cfg.rl.clip_eps or None,
            lora_dropout=cfg.lora.dropout,
            revision=cfg.model.revision or None,
            trust_remote_code=cfg.model.trust_remote_code,
            dtype=getattr(torch, name),
            workers=cfg.dist.workers,
            address=cfg.dist.address or None,
            **engine_opts,
        )
    except EngineError as err:
        raise TrainError(f"model: {err}") from None
    except AdapterError as err:  # e.g. lora.targets that match no module of a hub model
        raise TrainError(f"lora.targets: {err}") from None
    except ImportError as err:  # e.g. the vllm backend without vllm installed
        raise TrainError(
            f"model.backend={cfg.model.backend}: cannot load it ({err}); install the `gpu` extra or use "
            "--set model.backend=hf."
        ) from None
