"""The distributed engine's worker side (engine/dist.py): `DistWorker`, the Ray actor that holds an engine.

Each worker builds its own engine with every slot (`worker_build_kwargs`: the driver's arguments with a vLLM
engine seed of its own; `check_worker_gpu`: the memory preflight on its GPU), joins the process group, samples
its share of the requests and backpropagates its share of the rows, the LoRA gradients summed across workers
before every worker takes the same step. `worker_seed` gives each worker its own sampling stream. The worker's
output files (`own_log_files`) and their last lines (`log_tail`) are what the driver shows when a worker
fails. Every name is also importable from `populora.engine.dist`.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import time
from typing import Any

from populora.engine.types import EngineError, Generation, GenRequest
from populora.lora.adapter import LoRAAdapter


def worker_seed(seed: int, rank: int) -> int:
    """A 63-bit seed for worker `rank` from the call's `seed` (distinct workers, distinct streams)."""
    digest = hashlib.blake2b(f"populora-dist:{seed}:{rank}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 1


def worker_build_kwargs(build_kwargs: dict, rank: int) -> dict:
    """Worker `rank`'s `build` arguments: the driver's, with a vLLM engine seed of its own. Every worker keeps
    the same `seed` (identical initial adapters), but requests without a seed of their own
    (model.vllm_seeded=false) draw from vLLM's engine generator, so equal engine seeds would give two workers
    the same samples for the same prompt. In [0, 2**31 - 1): vLLM seeds numpy with it."""
    out = dict(build_kwargs)
    if out.get("backend") == "vllm":
        out["vllm_seed"] = worker_seed(int(out.get("seed") or 0), rank) % (2**31 - 1)
    return out


def check_worker_gpu(plan: Any, rank: int) -> None:
    """The memory preflight on worker `rank`'s GPU: an `EngineError` (one line, the keys to change) if the
    plan (`populora.engine.memory.MemoryPlan`) does not fit, or if this worker sees no GPU."""
    from populora.config import ConfigError
    from populora.engine.memory import check_plan_on_gpu, cuda_problem

    problem = cuda_problem()
    if problem:
        raise EngineError(f"dist worker {rank} (node {os.uname().nodename}): {problem}.")
    try:
        check_plan_on_gpu(plan)
    except ConfigError as err:
        raise EngineError(f"dist worker {rank}: {err}") from None


class DistWorker:
    """One data-parallel worker (a Ray actor): an engine with every slot, and its rank in the process group."""

    def __init__(self, rank: int, world: int) -> None:
        self.rank, self.world = rank, world
        self.group = False

    def start(self, model: Any, tokenizer: Any, build_kwargs: dict) -> None:
        """Build the engine (a method, not `__init__`, so that an `EngineError` reaches the driver as is)."""
        import torch

        from populora.engine import build

        threads = build_kwargs.get("train_threads")
        if threads:
            torch.set_num_threads(int(threads))
        build_kwargs = worker_build_kwargs(build_kwargs, self.rank)
        plan = build_kwargs.pop("memory_plan", None)
        if plan is not None and str(build_kwargs.get("device", "")).startswith("cuda"):
            check_worker_gpu(plan, self.rank)  # the driver has no GPU to check: each worker checks its own
        self.engine = build(model=model, tokenizer=tokenizer, **build_kwargs)
        self.hf = getattr(self.engine, "hf", self.engine)  # the vllm engine trains in its HFEngine
        self.hf.dropout_salt = self.rank  # lora.dropout: each worker's rows get their own masks

    def info(self) -> dict:
        return {
            "n_slots": self.hf.n_slots,
            "model_name": self.hf.model_name,
            "targets": self.hf.targets,
            "device": str(self.hf.device),
            "backend": getattr(self.engine, "backend", "hf"),
            "pid": os.getpid(),
            "node": os.uname().nodename,
            # what vLLM's processes hold in /dev/shm: the driver unlinks it should this worker die with them
            "shm": dict(getattr(self.engine, "shm", None) or {}),
            "shm_before": getattr(self.engine, "shm_before", None),  # /dev/shm before its vLLM started
            "vllm_pids": dict(getattr(self.engine, "vllm_pids", None) or {}),
            "tmp_files": list(getattr(self.engine, "tmp_files", None) or []),
            "loss_agg": self.hf.loss_agg,
            "entropy_coef": self.hf.entropy_coef,
            "ppo": self.hf.clip_eps is not None,
        }

    def tokenizer(self):
        return self.engine.tokenizer

    def logs(self) -> dict:
        """Where this worker's output goes (asked before `start`, so a failed start can be shown too)."""
        return {"node": os.uname().nodename, "pid": os.getpid(), "files": own_log_files()}

    def address(self) -> tuple[str, int]:
        """This node's IP and a free TCP port (rank 0 hosts the process group's rendezvous)."""
        import socket

        import ray

        with socket.socket() as s:
            s.bind(("", 0))
            port = s.getsockname()[1]
        return ray.util.get_node_ip_address(), port

    def init_group(self, host: str, port: int) -> float:
        import torch
        import torch.distributed as dist

        backend = "nccl" if self.hf.device.type == "cuda" else "gloo"
        dist.init_process_group(
            backend, init_method=f"tcp://{host}:{port}", rank=self.rank, world_size=self.world
        )
        self.group = True
        probe = torch.ones(1, device=self.hf.device)
        dist.all_reduce(probe)  # fails here, at start-up, if the workers cannot reach each other
        return float(probe)

    def generate(self, requests: list[GenRequest], seed: int) -> tuple[list[Generation], float]:
        t0 = time.perf_counter()
        out = self.engine.generate(requests, seed=seed) if requests else []
        return out, time.perf_counter() - t0

    def train(self, rows: list, weights: list[float], slots: list[int]) -> tuple[dict, Any, dict]:
        """Gradients of this worker's rows (with the whole batch's weights), all-reduced, then one step."""
        import torch
        import torch.distributed as dist

        t0 = time.perf_counter()
        # vLLM's share of the GPU goes to the backward pass where vLLM allows it (model.vllm_sleep), as in the
        # one-process step: sleep, the step, the cached memory handed back, wake (also when the step fails).
        window = self.engine.asleep() if self.engine is not self.hf else contextlib.nullcontext()
        with window:
            sums = self.hf.accumulate_gradients(rows, weights) if rows else {}
            t1 = time.perf_counter()
            params = self.hf.params
            for p in params:
                if p.grad is None:  # no rows here (or none touching this tensor): contribute zeros
                    p.grad = torch.zeros_like(p)
            handles = [dist.all_reduce(p.grad, op=dist.ReduceOp.SUM, async_op=True) for p in params]
            for h in handles:
                h.wait()
            t2 = time.perf_counter()
            norms = self.hf.apply_gradients(slots)
        if self.engine is not self.hf:  # the vllm engine refreshes the slots it saw change
            for s in slots:
                self.engine.set_adapter(s, self.hf.get_adapter(s), reset_optimizer=False)
        t3 = time.perf_counter()
        return sums, norms.cpu(), {"s": t3 - t0, "backward_s": t1 - t0, "allreduce_s": t2 - t1}

    def call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        return getattr(self.engine, name)(*args, **kwargs)

    def adapters(self) -> list[LoRAAdapter]:
        return [self.hf.get_adapter(s) for s in range(self.hf.n_slots)]

    def release(self) -> None:
        """Free what would outlive this process once it is killed (the vllm engine's engine-core process,
        with its shared memory and semaphores, and its scratch adapter folder). Called by the driver in the
        actor's "control" concurrency group, so it runs even while another call is in flight or stuck in an
        all-reduce; the worker is killed right after, so the engine may be left unusable. Idempotent."""
        engine = getattr(self, "engine", None)
        if engine is not None and engine is not getattr(self, "hf", None) and hasattr(engine, "close"):
            engine.close()

    def close(self) -> None:
        if hasattr(getattr(self, "engine", None), "close"):
            self.engine.close()
        if self.group:
            import torch.distributed as dist

            dist.destroy_process_group()
            self.group = False


LOG_TAIL_LINES = 20  # per file of a failed worker, copied to the driver's log


def own_log_files() -> list[str]:
    """This process's stdout and stderr files, where they are files: a Ray worker's, in Ray's session logs
    folder on its node (`worker-*.out` / `.err`); vLLM's engine core, started by the worker, writes there too."""
    files: list[str] = []
    for fd in (1, 2):
        try:
            path = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if os.path.isfile(path) and path not in files:
            files.append(path)
    return files


def log_tail(path: str, lines: int = LOG_TAIL_LINES) -> list[str]:
    """The last `lines` non-blank lines of a text file (read from its last 64 KiB); [] when it cannot be read."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 65536))
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return []
    return [line for line in text.splitlines() if line.strip()][-lines:]
