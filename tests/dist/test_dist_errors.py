"""Start-up failures of the distributed engine are one line with the fix (issue 32): Ray's token
authentication, no cluster at dist.address, a worker without a usable GPU."""

from __future__ import annotations

import pytest
import torch

from populora.engine import EngineError
from populora.engine.dist import check_worker_gpu, ray_init_line
from populora.engine.memory import MemoryPlan


def test_token_authentication_failure_names_the_token_fix():
    ray = pytest.importorskip("ray")
    err = ray.exceptions.AuthenticationError("InvalidAuthToken: the token in the request does not match")
    line = ray_init_line(err, "10.0.0.1:6379")
    assert line.startswith("dist.address=10.0.0.1:6379: the Ray cluster refused this process's token")
    assert "ray get-auth-token" in line and "RAY_AUTH_TOKEN" in line and "\n" not in line
    # the same when Ray reports it as a plain RuntimeError from its RPC layer
    assert "ray get-auth-token" in ray_init_line(RuntimeError("Status: InvalidAuthToken\n  details"), "h:1")


def test_no_cluster_and_other_failures():
    line = ray_init_line(ConnectionError("Could not find any running Ray instance at h:6379."), "h:6379")
    assert "no Ray cluster reachable" in line and "ray start --head" in line
    other = ray_init_line(ValueError("bad\nthing"), None)
    assert other.startswith(
        "dist.workers > 1 (a local Ray instance): ray.init failed (ValueError: bad thing)"
    )


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_a_worker_without_a_gpu_says_so_in_one_line():
    plan = MemoryPlan(base=1, slots=1, n_slots=1, activations=1, tokens=1, checkpointing=True)
    with pytest.raises(EngineError) as err:
        check_worker_gpu(plan, 3)
    assert str(err.value).startswith("dist worker 3 (node ") and "CPU-only build" in str(err.value)
    assert "\n" not in str(err.value)


def test_a_peers_collective_error_is_blamed_on_the_worker_that_died(ray_address):
    """When a worker is killed, its peers fail in the collective (gloo: "connection closed by peer"), often
    before Ray reports the death: `death_among` finds the death among the refs still pending; a task's own
    error is not a death, and a live worker ends the wait at the grace."""
    import os
    import signal

    import ray

    from populora.engine.dist import death_among

    @ray.remote(num_cpus=0)
    class Worker:
        def pid(self) -> int:
            return os.getpid()

        def wait(self, seconds: float) -> None:
            import time

            time.sleep(seconds)

        def fail(self) -> None:
            raise RuntimeError("connection closed by peer")

    a, b, c = Worker.remote(), Worker.remote(), Worker.remote()
    pid_of_b = ray.get(b.pid.remote())  # before its long task: an actor runs its calls in order
    failing, doomed, alive = a.fail.remote(), b.wait.remote(60), c.wait.remote(60)
    rank_of = {failing: 0, doomed: 1, alive: 2}
    os.kill(pid_of_b, signal.SIGKILL)
    line = death_among([failing, doomed, alive], rank_of, "train", 3)
    assert line is not None and line.startswith("worker 1 of 3 died during train (")
    assert death_among([failing, alive], rank_of, "train", 3, grace_s=1.0) is None
    for actor in (a, b, c):
        ray.kill(actor)
