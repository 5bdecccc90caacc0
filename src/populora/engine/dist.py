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

This module is the driver: `deal` and `DistributedEngine`'s calls. The worker (the Ray actor) is in
engine/dist_worker.py; Ray's start-up checks, worker deaths and the shutdown steps that `close` runs are
in engine/dist_lifecycle.py. Every name is importable from here as before.
"""

from __future__ import annotations

import logging
import os
import random
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from populora.engine.dist_lifecycle import (
    CLOSE_TIMEOUT_S,
    JOIN_TRIES,
    NAMESPACE,
    PROBE_TIMEOUT_S,
    DistCleanup,
    _died,
    _python_sigterm_handler,
    _restore_sigterm,
    actor_names,
    death_among,
    probe_address,
    ray_init_line,
    require_ray,
)
from populora.engine.dist_worker import (
    LOG_TAIL_LINES,
    DistWorker,
    check_worker_gpu,
    log_tail,
    own_log_files,
    worker_build_kwargs,
    worker_seed,
)
from populora.engine.types import EngineError, Generation, GenRequest, PeftFolderIO, TrainBatch
from populora.lora.adapter import LoRAAdapter

__all__ = [
    "CLOSE_TIMEOUT_S",
    "JOIN_TRIES",
    "LOG_TAIL_LINES",
    "NAMESPACE",
    "PROBE_TIMEOUT_S",
    "DistWorker",
    "DistributedEngine",
    "actor_names",
    "check_worker_gpu",
    "deal",
    "death_among",
    "log_tail",
    "own_log_files",
    "probe_address",
    "ray_init_line",
    "require_ray",
    "worker_build_kwargs",
    "worker_seed",
]


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


class DistributedEngine(DistCleanup, PeftFolderIO):
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
