"""DistributedEngine: the PolicyEngine on N Ray actors, data parallel (docs/architecture.md).

Each worker is a Ray actor in its own bundle of one placement group (one GPU per bundle on CUDA, one CPU
otherwise) and holds the frozen base and every slot: an `HFEngine`, or with backend="vllm" a `VLLMEngine`
(its own vLLM for generation on its GPU). The driver holds no model, only the tokenizer; the algorithm
(matchmaking, verification, rewards, ratings, evolution, checkpoints) stays in the one trainer process.

- `generate`: the requests are dealt over the workers so that every worker gets an even share of every
  slot (`deal`); results come back in request order. Worker k samples with a seed derived from the call's
  seed and k (and a vLLM worker's engine generator, used by unseeded requests, from the run seed and k), so
  two workers never draw the same samples for the same prompt. `on_finish(i, generation)`
  is called for each worker's share as that worker returns it (the trainer's `train.overlap` starts on those
  rows while slower workers still decode).
- `train_step`: the rows are dealt the same way. The driver computes every row's aggregation weight over
  the WHOLE batch (`row_weights`: token-mean needs the global token count of each slot), each worker
  backpropagates its share with those weights (`HFEngine.accumulate_gradients`), the LoRA gradients are
  summed with `torch.distributed.all_reduce` (gloo on CPU, NCCL on GPU), and every worker applies the same
  per-slot clip and AdamW step (`HFEngine.apply_gradients`). The loss is a weighted sum over rows, so the
  summed gradient is the 1-process gradient up to float summation order, and since the all-reduced
  gradient is the same bits on every worker, so are the adapters after the step.
- Adapters and optimiser state are written to every worker and read from worker 0. Adapter folders are read
  and written by the driver, so a checkpoint folder need not exist on the workers' nodes.
- A worker that dies (killed, node lost, out of memory) stops the engine: the survivors may be waiting in an
  all-reduce, so they are stopped too, and every call raises one `EngineError` naming the dead worker and
  saying that `populora train --resume RUN_DIR` continues from the last checkpoint.
- No actor is killed before it was asked to let go of what would outlive it (its vLLM engine core with that
  process's shared memory and semaphores, the `/dev/shm` adapter folder): `close()` asks each worker to close
  (at most `close_timeout_s`), then `release()`s whoever did not answer, through a separate "control" thread
  of the actor that runs even while the worker is busy or stuck in a collective (at most `close_timeout_s`
  again), and only then kills them. A stopped engine (dead worker, Ctrl-C, SIGTERM) does the same.

Needs `ray` (the `gpu` and `dev` extras). `dist.workers=1` never imports it.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import random
import signal
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from populora.engine.types import EngineError, Generation, GenRequest, PeftFolderIO, TrainBatch
from populora.lora.adapter import LoRAAdapter


def require_ray():
    try:
        import ray
    except ImportError as e:
        raise EngineError(
            "dist.workers > 1 needs the ray package (`pip install 'populora[gpu]'` or `pip install ray`); "
            "or set dist.workers=1."
        ) from e
    return ray


def deal(sizes: Sequence[int], slots: Sequence[int], workers: int) -> list[list[int]]:
    """Split item indices over `workers`: every slot's items spread evenly, totals balanced.

    Items are taken per slot, largest first, each to the worker with (fewest items of this slot, fewest items,
    least size so far). So per slot and in total, the workers' item counts differ by at most one, and sizes
    (tokens) are balanced greedily. Each share keeps the original index order. Deterministic.
    """
    shares: list[list[int]] = [[] for _ in range(workers)]
    count, load = [0] * workers, [0] * workers
    order = sorted(range(len(sizes)), key=lambda i: (slots[i], -sizes[i], i))
    slot_count: list[int] = []
    current = None
    for i in order:
        if slots[i] != current:
            current, slot_count = slots[i], [0] * workers
        w = min(range(workers), key=lambda k: (slot_count[k], count[k], load[k], k))
        shares[w].append(i)
        slot_count[w] += 1
        count[w] += 1
        load[w] += sizes[i]
    return [sorted(s) for s in shares]


def ray_init_line(err: BaseException, address: str | None) -> str:
    """One line for a failed `ray.init`, naming the fix: Ray's token authentication (on by default from Ray
    2.59 on local clusters; a driver joining a cluster needs the cluster's token), no cluster at the address,
    anything else with its first line."""
    text = " ".join(str(err).split()) or type(err).__name__
    where = f"dist.address={address}" if address else "dist.workers > 1 (a local Ray instance)"
    auth = type(err).__name__ == "AuthenticationError" or any(
        k in text.lower() for k in ("invalidauthtoken", "auth token", "unauthenticated", "authentication")
    )
    if auth:
        return (
            f"{where}: the Ray cluster refused this process's token (Ray token authentication: "
            f"{text[:160]}); give it the cluster's token: run `ray get-auth-token` on the head node and copy "
            "the token to ~/.ray/auth_token here (or export RAY_AUTH_TOKEN=...), the same on every node that "
            "runs `ray start --address=HEAD:6379` (docs/engine.md, Scale-out)."
        )
    if address and any(k in text.lower() for k in ("could not find any running ray", "connect", "timed out")):
        return (
            f"{where}: no Ray cluster reachable there ({text[:160]}); start one with `ray start --head "
            "--port=6379` and pass HEAD_IP:6379 (or dist.address=auto on the head node), or drop "
            "dist.address to let the run start Ray itself."
        )
    return f"{where}: ray.init failed ({type(err).__name__}: {text[:200]}); see docs/engine.md, Scale-out."


PROBE_TIMEOUT_S = 5.0  # a TCP connect to dist.address: a live Ray head answers in milliseconds
# Ray's tries when joining a cluster (`RAY_gcs_server_port_wait_time_s`, unless set): a port that answers TCP but
# is no Ray GCS costs ~40 s a try (measured: 5 s connect, 5 s pubsub, 30 s cluster id), Ray's default 20 ~13 min;
# a live cluster answers the first.
JOIN_TRIES = "1"


def probe_address(address: str | None, timeout_s: float = PROBE_TIMEOUT_S) -> None:
    """Raise `EngineError` (one line, the fix) when `dist.address` names a HOST:PORT (or ray://HOST:PORT) that
    accepts no TCP connection within `timeout_s`: Ray itself retries such an address for minutes without a
    word. "auto", "local" and addresses without a port are left to Ray."""
    import socket
    from urllib.parse import urlsplit

    text = (address or "").strip()
    if not text or text.lower() in ("auto", "local"):
        return
    rest = text.split("://", 1)[1] if "://" in text else text
    try:
        parts = urlsplit("//" + rest)
        host, port = parts.hostname, parts.port
    except ValueError as err:  # a port that is not a number, or out of range
        raise EngineError(
            f"dist.address={text}: not HOST:PORT ({err}); give the Ray head's address, e.g. "
            "dist.address=10.0.0.1:6379, or dist.address=auto on a node of the cluster."
        ) from None
    if not host or port is None:
        return
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return
    except socket.gaierror as err:
        why = f"unknown host: {err.strerror or err}"
    except TimeoutError:
        why = f"no answer within {timeout_s:.0f} s"
    except OSError as err:
        why = (err.strerror or str(err) or type(err).__name__).lower()
    raise EngineError(
        f"dist.address={text}: nothing answers at {host}:{port} ({why}); start the cluster there with "
        f"`ray start --head --port={port}` and pass HEAD_IP:{port} (or dist.address=auto on the head node), "
        "or drop dist.address to let the run start Ray itself."
    )


NAMESPACE = "populora"
CLOSE_TIMEOUT_S = 30.0  # per stage (close, then release): a vLLM engine core takes up to 5 s to stop
_ENGINES_MADE = [0]


def actor_names(workers: int) -> list[str]:
    """Names of the next engine's actors in Ray namespace "populora": `populora-dist-<driver pid>-<rank>`
    (`.<n>` after the pid from this process's second engine on), so `ray list actors` shows whose they are."""
    n = _ENGINES_MADE[0]
    _ENGINES_MADE[0] += 1
    tag = f"{os.getpid()}" if n == 0 else f"{os.getpid()}.{n}"
    return [f"populora-dist-{tag}-{rank}" for rank in range(workers)]


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


class DistributedEngine(PeftFolderIO):
    """The PolicyEngine on `workers` Ray actors; see the module docstring and `populora.engine.build`."""

    def __init__(
        self,
        model: Any,
        tokenizer: Any = None,
        *,
        workers: int = 2,
        address: str | None = None,
        device: str = "cpu",
        seed: int = 0,
        start_timeout_s: float = 600.0,
        close_timeout_s: float = CLOSE_TIMEOUT_S,
        **build_kwargs: Any,
    ) -> None:
        ray = require_ray()
        from ray.util.placement_group import placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        self.workers = int(workers)
        self.device = str(device)
        self.close_timeout_s = float(close_timeout_s)
        self._infos: list[dict] = []
        self._logs: list[dict] = []  # each worker's node, pid and output files (`DistWorker.logs`)
        self._scratch_root = build_kwargs.get("scratch_dir")
        self.seed = int(seed)
        self._rng = random.Random(self.seed)  # seeds for unseeded generate calls
        self._dead: str | None = None
        self._closed = False
        self._started = False  # until the workers are up, a failure is a start-up error, not a lost run
        self._actors: list = []
        self.pg = None
        self._owns_ray = not ray.is_initialized()
        gpu = self.device.startswith("cuda")
        if self._owns_ray:
            opts: dict[str, Any] = dict(
                include_dashboard=False, logging_level=logging.WARNING, log_to_driver=False
            )
            if address:
                opts["address"] = address
            elif not gpu:  # a local CPU instance books one CPU per worker even on a smaller machine
                opts["num_cpus"] = max(os.cpu_count() or 1, self.workers)
            probe_address(address)  # seconds, not Ray's minutes of retrying, for an address nobody answers at
            handler = _python_sigterm_handler()
            tries = os.environ.get("RAY_gcs_server_port_wait_time_s")
            if address and tries is None:  # bound Ray's join loop (a port that answers but is no Ray GCS)
                os.environ["RAY_gcs_server_port_wait_time_s"] = JOIN_TRIES
            try:
                ray.init(**opts)
            except Exception as err:  # noqa: BLE001 - every start-up failure becomes one line with its fix
                if ray.is_initialized():  # half-started: leave nothing running
                    ray.shutdown()
                raise EngineError(ray_init_line(err, address)) from None
            finally:
                _restore_sigterm(handler)
                if address and tries is None:
                    os.environ.pop("RAY_gcs_server_port_wait_time_s", None)
        bundle = {"CPU": 1, "GPU": 1} if gpu else {"CPU": 1}
        have = ray.cluster_resources()
        for res, need in bundle.items():
            if have.get(res, 0) < need * self.workers:
                self._shutdown_ray()
                raise EngineError(
                    f"dist.workers={self.workers} needs {self.workers} x {bundle} but the Ray cluster has "
                    f"{int(have.get(res, 0))} {res}; lower dist.workers, or add nodes (`ray start "
                    "--address=HEAD:6379`) and set dist.address=auto."
                )
        self.pg = placement_group([dict(bundle) for _ in range(self.workers)], strategy="PACK")
        try:
            ray.get(self.pg.ready(), timeout=start_timeout_s)
        except ray.exceptions.GetTimeoutError:
            self.close()
            raise EngineError(
                f"dist.workers={self.workers}: Ray could not place {self.workers} workers of {bundle} "
                f"within {start_timeout_s:.0f}s (cluster: {ray.available_resources()}); free resources or "
                "lower dist.workers."
            ) from None
        if gpu:
            build_kwargs["device"] = "cuda"  # Ray sets CUDA_VISIBLE_DEVICES to the bundle's GPU
        else:
            build_kwargs["device"] = self.device
            # N CPU workers share the threads one process would use (no oversubscription on one machine).
            threads = int(build_kwargs.get("train_threads") or 1)
            build_kwargs["train_threads"] = max(1, threads // self.workers)
        build_kwargs["seed"] = self.seed  # same seed everywhere: identical initial adapters
        if isinstance(model, str | os.PathLike):
            # a local folder travels as an absolute path (workers do not share the driver's cwd); names
            # ("tiny", hub ids) are resolved on each worker's node
            local = Path(model).expanduser()
            model_ref = str(local.resolve()) if local.exists() else str(model)
        else:
            model_ref = ray.put(model)  # an in-memory model: one copy in the object store for all workers
        tok_ref = ray.put(tokenizer) if tokenizer is not None else None
        # "control": a second thread per actor for `release`, beside the default group's one call at a time
        actor_cls = ray.remote(concurrency_groups={"control": 1})(DistWorker)
        self.names = actor_names(self.workers)
        self._actors = [
            actor_cls.options(
                name=self.names[i],
                namespace=NAMESPACE,
                num_cpus=1,
                num_gpus=1 if gpu else 0,
                max_restarts=0,
                scheduling_strategy=PlacementGroupSchedulingStrategy(
                    placement_group=self.pg, placement_group_bundle_index=i
                ),
            ).remote(i, self.workers)
            for i in range(self.workers)
        ]
        try:
            self._logs = self._get([a.logs.remote() for a in self._actors], "start")
            self._get([a.start.remote(model_ref, tok_ref, build_kwargs) for a in self._actors], "start")
            infos = self._get([a.info.remote() for a in self._actors], "info")
            self.tokenizer = self._get([self._actors[0].tokenizer.remote()], "start")[0]
            host, port = self._get([self._actors[0].address.remote()], "start")[0]
            self._get([a.init_group.remote(host, port) for a in self._actors], "start")
        except EngineError:
            self.close()
            raise
        self.info = infos[0]
        self._infos = infos
        self.n_slots = int(self.info["n_slots"])
        self.backend = self.info["backend"]
        self.model_name = self.info["model_name"]
        self.targets = self.info["targets"]
        self._reset_stats()
        self._started = True

    # ------------------------------------------------------------------ calls and failures
    def _get(self, refs: list, what: str, on_ready: Callable[[int, Any], None] | None = None) -> list:
        """Results of `refs` (one per worker, in rank order); the first failure raises at once.

        A worker that died stops the whole engine (the others may be blocked in an all-reduce waiting for
        it); an `EngineError` raised inside a worker is re-raised as is. `on_ready(k, result)` is called as
        each worker's result arrives (in arrival order), before the others are waited for.
        """
        ray = require_ray()
        self._check_alive()
        rank_of = {ref: i for i, ref in enumerate(refs)}
        pending = list(refs)
        values: dict[int, Any] = {}
        try:
            while pending:
                ready, pending = ray.wait(pending, num_returns=1)
                try:
                    value = ray.get(ready[0])
                except ray.exceptions.RayTaskError as err:
                    cause = getattr(err, "cause", None)
                    if isinstance(cause, EngineError):
                        if "vllm" in str(cause).lower():  # e.g. "... See root cause above": in its log
                            self.report_logs([rank_of[ready[0]]])
                        if what == "train":  # the others wait in the all-reduce for this worker
                            self._stop(f"worker {rank_of[ready[0]]} failed in a train step ({cause})")
                        raise EngineError(str(cause)) from None
                    # A peer's death surfaces in the survivors as a collective's error (gloo: "connection
                    # closed by peer"), often before Ray reports the death itself: name the dead worker, the
                    # cause, when there is one.
                    died = death_among(pending, rank_of, what, self.workers)
                    self.report_logs([int(died.split()[1]) if died else rank_of[ready[0]]])
                    self._stop(
                        died or f"worker {rank_of[ready[0]]} of {self.workers} failed in {what}: {cause!r}"
                    )
                    raise EngineError(self._dead) from None
                except ray.exceptions.RayError as err:  # actor died, node lost, out of memory
                    self.report_logs([rank_of[ready[0]]])
                    self._stop(_died(rank_of[ready[0]], self.workers, what, err))
                    raise EngineError(self._dead) from None
                values[rank_of[ready[0]]] = value
                if on_ready is not None:  # outside the try: the caller's own exceptions pass through as is
                    on_ready(rank_of[ready[0]], value)
            return [values[k] for k in range(len(refs))]
        except KeyboardInterrupt:
            self._stop("interrupted")
            raise

    def report_logs(self, ranks: list[int]) -> None:
        """Copy the last lines of workers `ranks`' output to the driver's log (a warning per file), for a worker
        that died or failed unexpectedly, or whose vLLM failed. Ray keeps workers' output out of the driver's console (`log_to_driver=False`: vLLM logs every
        start-up step), so a worker's own account of a failure, vLLM's root cause included, would otherwise
        stay in Ray's session folder on its node. A worker on another node is named with its files there."""
        log = logging.getLogger(__name__)
        here = os.uname().nodename
        for k, where in enumerate(self._logs):
            if k not in ranks:
                continue
            head = f"dist worker {k} of {self.workers} (node {where['node']}, pid {where['pid']})"
            if where["node"] != here:
                log.warning("%s: its output is in %s on that node", head, ", ".join(where["files"]))
                continue
            for path in where["files"]:
                tail = log_tail(path)
                if tail:
                    log.warning("%s, last lines of %s:\n%s", head, path, "\n".join("  " + t for t in tail))

    def _stop(self, why: str) -> None:
        """Mark the engine dead and stop every worker (some may be stuck in a collective)."""
        if not self._started:
            self._dead = f"dist.workers={self.workers}: could not start the workers: {why}."
        else:
            self._dead = (
                f"dist {why}; the run stopped. Continue from the last checkpoint with "
                "`populora train --resume RUN_DIR` (set dist.workers to the workers still available if a "
                "node is gone)."
            )
        self._kill_all()

    def _check_alive(self) -> None:
        if self._dead:
            raise EngineError(self._dead)
        if self._closed:
            raise EngineError("this DistributedEngine is closed; build a new engine.")

    def _all(self, name: str, *args: Any, **kwargs: Any) -> list:
        """`engine.<name>(*args)` on every worker; the results in rank order."""
        return self._get([a.call.remote(name, *args, **kwargs) for a in self._actors], name)

    def _first(self, name: str, *args: Any, **kwargs: Any) -> Any:
        return self._get([self._actors[0].call.remote(name, *args, **kwargs)], name)[0]

    def per_worker(self, name: str, *args: Any, **kwargs: Any) -> list:
        """`engine.<name>(*args)` on every worker, results in rank order (checks and tests: e.g. that all
        workers hold the same adapters: `per_worker("get_adapter", 0)`)."""
        return self._all(name, *args, **kwargs)

    def worker_pids(self) -> list[int]:
        return [int(i["pid"]) for i in self._get([a.info.remote() for a in self._actors], "info")]

    # ------------------------------------------------------------------ generation
    def generate(
        self,
        requests: list[GenRequest],
        seed: int | None = None,
        on_finish: Callable[[int, Generation], None] | None = None,
    ) -> list[Generation]:
        """Sample every request on the workers (each slot's requests spread evenly); results in request order.

        `on_finish(i, generation)` is called once per request, with the object the returned list holds, as
        soon as the worker that sampled it has returned its share (a worker's rows come together, in request
        order; the workers' shares in the order they finish), while the other workers still decode. It
        changes nothing that is sampled."""
        self._check_alive()
        if not requests:
            return []
        for r in requests:
            if not 0 <= int(r.slot) < self.n_slots:
                raise EngineError(
                    f"slot {r.slot!r} out of range; this engine has slots 0..{self.n_slots - 1}."
                )
        seed = self._rng.randrange(2**62) if seed is None else int(seed)
        t0 = time.perf_counter()
        sizes = [len(r.prompt) + int(r.max_new_tokens) for r in requests]
        shares = deal(sizes, [int(r.slot) for r in requests], self.workers)
        refs = [
            a.generate.remote([requests[i] for i in share], worker_seed(seed, k))
            for k, (a, share) in enumerate(zip(self._actors, shares, strict=True))
        ]
        results: list[Generation | None] = [None] * len(requests)
        stats = self._stats["generate"]

        def arrived(k: int, out: tuple[list[Generation], float]) -> None:
            gens, seconds = out
            for i, g in zip(shares[k], gens, strict=True):
                results[i] = g
            stats["rows"][k] += len(shares[k])
            stats["s"][k] += seconds
            if on_finish is not None:
                for i in shares[k]:
                    on_finish(i, results[i])

        self._get(refs, "generate", on_ready=arrived)
        stats["wall_s"] += time.perf_counter() - t0
        return results  # type: ignore[return-value]

    # ------------------------------------------------------------------ training
    def train_step(self, batch: TrainBatch) -> dict[str, float]:
        """One data-parallel optimiser step (same metrics as `HFEngine.train_step`)."""
        from populora.engine.hf import check_rows, train_metrics
        from populora.rl.loss import row_weights

        self._check_alive()
        t0 = time.perf_counter()
        rows = check_rows(batch, self.n_slots)
        if not rows:
            raise EngineError("train_step got no rows with response tokens.")
        weights = row_weights(
            [len(r.response_ids) for r in rows], [r.loss_key for r in rows], self.info["loss_agg"]
        )
        slots = sorted({int(r.slot) for r in rows})
        sizes = [len(r.prompt_ids) + len(r.response_ids) for r in rows]
        shares = deal(sizes, [int(r.slot) for r in rows], self.workers)
        refs = [
            a.train.remote([rows[i] for i in share], [weights[i] for i in share], slots)
            for a, share in zip(self._actors, shares, strict=True)
        ]
        out = self._get(refs, "train")
        sums: dict[str, dict[int, float]] = {}
        stats = self._stats["train"]
        for k, (share, (part, _norms, times)) in enumerate(zip(shares, out, strict=True)):
            for name, per_slot in part.items():
                acc = sums.setdefault(name, {})
                for s, v in per_slot.items():
                    acc[s] = acc.get(s, 0.0) + v
            stats["rows"][k] += len(share)
            stats["tokens"][k] += sum(len(rows[i].response_ids) for i in share)
            stats["s"][k] += times["s"]
            stats["allreduce_s"][k] += times["allreduce_s"]
        stats["wall_s"] += time.perf_counter() - t0
        norms = out[0][1]  # the same on every worker: they clipped the same all-reduced gradients
        return train_metrics(sums, norms, len(rows), self.info["entropy_coef"], self.info["ppo"], t0)

    def logprobs(self, batch: TrainBatch) -> list[list[float]]:
        """Per-token log-probs of each row's response under its slot, computed on the workers, in row order."""
        from populora.engine.hf import check_rows

        self._check_alive()
        check_rows(batch, self.n_slots)
        rows = batch.rows
        sizes = [len(r.prompt_ids) + len(r.response_ids) for r in rows]
        shares = deal(sizes, [int(r.slot) for r in rows], self.workers)
        refs = [
            a.call.remote("logprobs", TrainBatch([rows[i] for i in share]))
            for a, share in zip(self._actors, shares, strict=True)
        ]
        out: list[list[float]] = [[] for _ in rows]
        for share, lps in zip(shares, self._get(refs, "logprobs"), strict=True):
            for i, lp in zip(share, lps, strict=True):
                out[i] = lp
        return out

    # ------------------------------------------------------------------ adapters and optimiser state
    def get_adapter(self, slot: int) -> LoRAAdapter:
        return self._first("get_adapter", slot)

    def set_adapter(self, slot: int, adapter: LoRAAdapter, reset_optimizer: bool = True) -> None:
        ray = require_ray()
        self._all("set_adapter", slot, ray.put(adapter), reset_optimizer=reset_optimizer)

    def reset_slot(self, slot: int, seed: int | None = None) -> None:
        self._all("reset_slot", slot, seed)

    def set_lr(self, slot: int, lr: float) -> None:
        self._all("set_lr", slot, lr)

    def get_lr(self, slot: int) -> float:
        return float(self._first("get_lr", slot))

    def optimizer_state(self) -> dict:
        return self._first("optimizer_state")

    def load_optimizer_state(self, state: dict) -> None:
        ray = require_ray()
        self._all("load_optimizer_state", ray.put(state))

    # ------------------------------------------------------------------ metrics
    def _reset_stats(self) -> None:
        n = self.workers
        self._stats = {
            "generate": {"rows": [0] * n, "s": [0.0] * n, "wall_s": 0.0},
            "train": {
                "rows": [0] * n,
                "tokens": [0] * n,
                "s": [0.0] * n,
                "allreduce_s": [0.0] * n,
                "wall_s": 0.0,
            },
        }

    def last_dist_stats(self) -> dict:
        """Rows and seconds per worker since the previous call (the `dist` entry of metrics.jsonl), then reset.

        `generate.s[k]` / `train.s[k]`: seconds worker k spent on its share; `wall_s`: the driver's wall time
        of the same calls (the difference to the slowest worker is the cost of distribution);
        `train.allreduce_s[k]`: time in the gradient all-reduce (it includes waiting for slower workers).
        """

        def rounded(v: Any) -> Any:
            if isinstance(v, list):
                return [round(x, 4) if isinstance(x, float) else x for x in v]
            return round(v, 4) if isinstance(v, float) else v

        out = {"workers": self.workers}
        for phase, d in self._stats.items():
            out[phase] = {k: rounded(v) for k, v in d.items()}
        self._reset_stats()
        return out

    # ------------------------------------------------------------------ shutdown
    def _wait(self, refs: list, timeout_s: float) -> list:
        """Wait at most `timeout_s` for `refs` (failed ones count as done); return those not done."""
        ray = require_ray()
        if not refs:
            return []
        try:
            _, pending = ray.wait(refs, num_returns=len(refs), timeout=timeout_s)
        except Exception:  # noqa: BLE001 - a dead actor or a Ray shutting down: nothing left to wait for
            return []
        return pending

    def _release_all(self) -> None:
        """Ask every worker to `release()` through its control thread (answered even mid-call or inside a
        stuck all-reduce); wait at most `close_timeout_s`. Workers already dead fail at once."""
        refs = []
        for a in self._actors:
            try:
                refs.append(a.release.options(concurrency_group="control").remote())
            except Exception:  # noqa: BLE001 - an actor handle Ray no longer knows
                pass
        pending = self._wait(refs, self.close_timeout_s)
        if pending:
            logging.getLogger(__name__).warning(
                "dist: %d worker(s) did not release within %.0fs; killing them anyway",
                len(pending),
                self.close_timeout_s,
            )

    def _kill_all(self) -> None:
        """Release, then kill every worker and remove the placement group; then sweep what killed workers
        on this node could not delete themselves (their vLLM scratch folders)."""
        ray = require_ray()
        if self._actors:
            self._release_all()
        for a in self._actors:
            try:
                ray.kill(a, no_restart=True)
            except Exception:  # noqa: BLE001 - already gone
                pass
        if self.pg is not None:
            try:
                from ray.util.placement_group import remove_placement_group

                remove_placement_group(self.pg)
            except Exception:  # noqa: BLE001
                pass
            self.pg = None
        if self._actors and getattr(self, "backend", None) == "vllm":
            self._sweep_local_scratch()

    def _sweep_local_scratch(self) -> None:
        """After the kill: what this engine's workers on this node could not release themselves (a worker
        that died, or one killed before its `release()` finished). First their vLLM processes, which outlive
        them (vLLM's engine core ignores its parent's end); then, once those are gone, the /dev/shm segments
        and semaphores they held, vLLM's rendezvous files and stale socket files in the temp dir, and the
        scratch adapter folders. Only what the workers reported at start-up (pids with their command line,
        /dev/shm entries by inode, file names) or folders named for a dead pid are touched. Workers on other
        nodes are swept there by the next vllm engine's start-up."""
        import tempfile

        from populora.engine.vllm import (
            RELEASE_TIMEOUT_S,
            end_orphaned_vllm,
            release_shm,
            remove_files,
            sweep_ipc_sockets,
            sweep_stale_scratch,
            unlink_new_orphans,
            vllm_in_groups,
        )

        here = [i for i in self._infos if i.get("node") == os.uname().nodename]
        if not here:
            return
        # ray.kill returns before the processes are gone. Ray makes each worker a process-group leader and
        # kills the group; wait for the whole group (vLLM's processes included, even one the record missed),
        # since a process still mapping a /dev/shm entry keeps it from being unlinked.
        groups = {int(i["pid"]) for i in here} - {os.getpgid(0)}
        deadline = time.monotonic() + 10.0
        while time.monotonic() < deadline and (
            any(_alive(int(i["pid"])) for i in here) or _live_in_groups(groups)
        ):
            time.sleep(0.1)
        orphans: dict[int, str] = vllm_in_groups(groups)  # vLLM's processes of the groups, recorded or not
        shm: dict[str, int] = {}
        for i in here:
            orphans.update({int(p): c for p, c in (i.get("vllm_pids") or {}).items()})
            shm.update(i.get("shm") or {})
        end_orphaned_vllm(orphans)
        remove_files([f for i in here for f in i.get("tmp_files") or []])
        if shm:  # retried until nobody holds them: a process that held an entry may take a while to exit
            release_shm(shm)
        befores = [i["shm_before"] for i in here if i.get("shm_before") is not None]
        if befores:  # what the record missed: new since every local worker's vLLM started, held by nobody
            unlink_new_orphans(
                {n: ino for n, ino in befores[0].items() if all(b.get(n) == ino for b in befores)},
                dying_groups=groups,  # a killed worker's process still ending: waited for, not skipped
                timeout_s=RELEASE_TIMEOUT_S,
            )
        root = self._scratch_root or ("/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir())
        sweep_stale_scratch(Path(root))
        sweep_ipc_sockets()

    def _shutdown_ray(self) -> None:
        ray = require_ray()
        if self._owns_ray and ray.is_initialized():
            ray.shutdown()
        self._owns_ray = False

    def close(self) -> None:
        """Stop the workers: each is asked to close (its vLLM engine, its process group; at most
        `close_timeout_s`), whoever did not is asked to release (at most `close_timeout_s` more), then the
        actors, the placement group, and Ray if we started it, are stopped."""
        if self._closed:
            return
        self._closed = True
        ray = require_ray()
        if ray.is_initialized():
            if not self._dead and self._actors:
                try:
                    refs = [a.close.remote() for a in self._actors]
                except Exception:  # noqa: BLE001 - best effort: release and kill follow
                    refs = []
                self._wait(refs, self.close_timeout_s)
            self._kill_all()
            self._actors = []
        self._shutdown_ray()


def death_among(pending: list, rank_of: dict, what: str, workers: int, grace_s: float = 10.0) -> str | None:
    """`"worker K of N died during WHAT (REASON)"` for the first of the `pending` Ray refs whose actor dies
    within `grace_s` seconds (`rank_of` maps a ref to its worker's rank), else None: the others are alive (e.g.
    blocked in a collective) or failed themselves (a task error is not a death)."""
    ray = require_ray()
    deadline = time.monotonic() + grace_s
    waiting = list(pending)
    while waiting:
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        ready, waiting = ray.wait(waiting, num_returns=1, timeout=left)
        if not ready:
            return None
        try:
            ray.get(ready[0])
        except ray.exceptions.RayTaskError:
            continue
        except ray.exceptions.RayError as err:  # actor died, node lost, out of memory
            return _died(rank_of[ready[0]], workers, what, err)
    return None


def _died(rank: int, workers: int, what: str, err: BaseException) -> str:
    """The stop line's cause for a worker whose actor died: the first line of Ray's error (200 characters at
    most), or its type's name when it has no text."""
    text = str(err).strip()
    reason = text.splitlines()[0][:200] if text else type(err).__name__
    return f"worker {rank} of {workers} died during {what} ({reason})"


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


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _live_in_groups(groups: set[int]) -> bool:
    """Whether a live (not zombie) process belongs to one of process groups `groups` (Linux /proc)."""
    from populora.engine.vllm import processes_in_groups

    return bool(processes_in_groups(groups))


def _python_sigterm_handler() -> Any:
    """The SIGTERM handler a Python caller installed (the trainer's: stop and clean up), else None."""
    if threading.current_thread() is not threading.main_thread():
        return None
    h = signal.getsignal(signal.SIGTERM)
    return h if callable(h) else None


def _restore_sigterm(handler: Any) -> None:
    """`ray.init` replaces the process's SIGTERM handler (with `sys.exit`, and at the C level with its crash
    reporter, which aborts): put the caller's back so that SIGTERM still stops the run cleanly."""
    if handler is not None and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, handler)
