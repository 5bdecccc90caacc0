"""The distributed engine's life-cycle around its calls (engine/dist.py): Ray's start, a worker's death,
and the clean-up after the workers are stopped.

- Start: `require_ray`, `probe_address` (a `dist.address` nobody answers at fails in seconds), `ray_init_line`
  (a failed `ray.init` as one line with its fix), `actor_names`, and the caller's SIGTERM handler kept across
  `ray.init` (`_python_sigterm_handler`, `_restore_sigterm`).
- Death: `death_among` finds the worker whose actor died when a survivor fails in a collective; `_died`
  words the cause.
- Clean-up: `DistCleanup`, the driver's shutdown steps (a mixin of `DistributedEngine`, which sets every
  attribute it reads): release each worker through its "control" thread, kill the actors and the placement
  group, then sweep what killed workers on this node left behind (their vLLM processes, /dev/shm entries,
  temp files and scratch folders, with engine/vllm_cleanup.py's helpers), and shut Ray down if the engine
  started it. Its warnings go to the `populora.engine.dist` logger, as before these steps moved here.

Every public name is also importable from `populora.engine.dist`.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

from populora.engine.types import EngineError

LOGGER = "populora.engine.dist"  # the warnings' logger: the engine module's, where these steps lived


def require_ray():
    try:
        import ray
    except ImportError as e:
        raise EngineError(
            "dist.workers > 1 needs the ray package (`pip install 'populora[gpu]'` or `pip install ray`); "
            "or set dist.workers=1."
        ) from e
    return ray


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


class DistCleanup:
    """`DistributedEngine`'s shutdown steps (see the module docstring); `close` (engine/dist.py) runs them."""

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
            logging.getLogger(LOGGER).warning(
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
