"""`bench/gpu_check.sh` is meant for a GPU machine; with `--shrink` it runs the same path here on a tiny config of
the same family. In this environment vLLM is not installed: the vLLM checks must say so and every other check
(the preflight, the engine, a generation at the KV-pressure check's CPU size, the maximum-length train step on the
hf backend, the sandbox, step 1 of a `paper-7b`-shaped run with the students playing and its `--resume`, 8 slots
vs 1) must still run and pass. The vLLM lane runs it with vLLM (tests/vllm_backend/test_vllm_gpu_check.py).

What needs a GPU is simulated: torch.cuda's memory calls faked over a scripted device (the train step's peak
after vLLM sleeps), and `vllm_check` told it is on CUDA (a vLLM preset without vLLM fails there)."""

import importlib.util
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from populora.engine.memory import PROMPT_TOKENS

REPO = Path(__file__).resolve().parents[2]
SHRUNK = [
    "--shrink",
    "--device",
    "cpu",
    "--rows",
    "8",
    "--prompt-len",
    "12",
    "--new-tokens",
    "6",
    "--repeats",
    "1",
]
GIB = 2**30
HAS_VLLM = importlib.util.find_spec("vllm") is not None


@pytest.mark.skipif(HAS_VLLM, reason="vLLM is here: the vLLM lane's test")
def test_gpu_check_runs_shrunk_on_cpu_without_vllm(tmp_path):
    out = tmp_path / "gpu_check.json"
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    env = {**os.environ, "PY": sys.executable, "GPU_CHECK_TIMEOUT": "1500", "TMPDIR": str(scratch)}
    res = subprocess.run(
        ["bash", str(REPO / "bench" / "gpu_check.sh"), *SHRUNK, "--out", str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=1560,
    )
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    r = json.loads(out.read_text())
    assert r["shrunk"] is True and r["complete"] is True and r["passed"] is True and r["vllm"] is None
    status = {k: v["status"] for k, v in r["checks"].items()}
    assert status == {
        "vllm_import": "skipped: vLLM not installed (ModuleNotFoundError: No module named 'vllm'); a CPU: "
        "the hf backend runs",
        "model": "pass",
        "preflight": "pass",
        "engine_build": "pass",
        "vllm_colocated": "skipped: vLLM not installed",
        "kv_pressure": "pass",
        "train_max_row": "pass",
        "adapter_refresh": "skipped: vLLM not installed",
        "sleep_wake_greedy": "skipped: the HF backend has no sleep mode (vLLM's; checked on the vLLM lane)",
        "sandbox": "pass",
        "run_2_steps": "pass",
        "resume": "pass",
        "hf_slots": "pass",
    }
    c = r["checks"]
    # the row: the preflight's prompt bound + the response (--new-tokens 6, raised to the config's floor of 8)
    assert c["train_max_row"]["row_tokens"] == PROMPT_TOKENS + 8
    assert c["train_max_row"]["estimate"]["checkpointing"] is True  # paper-7b's settings, not the defaults
    assert c["kv_pressure"]["whole_rows"] == c["kv_pressure"]["rows"] == 4
    # the students played in both steps: valid problems (forced), answers generated, scored and trained on
    for name, steps in (("run_2_steps", 1), ("resume", 2)):
        run = c[name]
        assert run["backend"] == "hf" and run["workers"] == 1 and len(run["steps"]) == steps
        played = run["students"]
        assert played["valid_problems"] >= 1 and played["generated"] >= 1, played
        assert played["scored"] >= 1 and played["trained"] >= 1, played
        assert run["steps"][-1]["phase_s"]["student"] > 0
    assert c["resume"]["evolutions"] >= 1  # the evolution deferred from step 1 ran on resuming
    assert c["sandbox"]["wrong"] == 0 and c["sandbox"]["preset_workers"] == 16
    assert c["hf_slots"]["one_slot"]["train_tokens"] == c["hf_slots"]["eight_slots"]["train_tokens"] == 8 * 6
    for name, check in c.items():  # one line per check on stdout; expected and measured seconds when it ran
        assert any(line.split()[1:2] == [name] for line in res.stdout.splitlines()), name
        if check["status"] == "pass":
            assert check["expected_s"] > 0 and check["measured_s"] >= 0, name
            assert any(line.startswith("...") and f" {name} " in line for line in res.stdout.splitlines())
    assert not list(scratch.glob("populora-gpu-check-*"))  # the random model and the run are gone


def test_gpu_check_refuses_the_7b_shape_without_a_gpu():
    res = subprocess.run(
        [sys.executable, str(REPO / "bench" / "gpu_check.py"), "--device", "cpu"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode != 0 and "--shrink" in res.stderr


def run_check(tmp_path, *args: str) -> tuple[subprocess.CompletedProcess, dict]:
    """`bench/gpu_check.py` shrunk with `args`; its process and its JSON result."""
    out = tmp_path / "gpu_check.json"
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "OMP_WAIT_POLICY": "PASSIVE"}
    cmd = [sys.executable, str(REPO / "bench" / "gpu_check.py"), *SHRUNK, *args, "--out", str(out)]
    res = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    return res, json.loads(out.read_text())


def test_gpu_check_fails_a_failed_check_with_exit_1(tmp_path):
    """A check that fails (here: the run, given a dist.workers the config rejects) is a FAIL line, `passed`
    false and exit status 1, nothing is left to resume, and the other parts are unaffected."""
    res, r = run_check(tmp_path, "--only", "run", "--workers", "-1")
    assert res.returncode == 1 and r["passed"] is False, res.stdout[-2000:] + res.stderr[-2000:]
    assert r["checks"]["run_2_steps"]["status"] == "fail"
    assert r["checks"]["resume"]["status"].startswith("skipped: nothing to resume")
    assert "FAIL    run_2_steps" in res.stdout


def test_a_refused_preflight_is_a_fail_line_and_the_step_is_still_measured(tmp_path):
    """`--set` reaches the run config: a memory budget the preflight refuses makes `preflight` FAIL with the
    preflight's own one-line message (the keys to change), and the train step still runs, to show what was
    refused."""
    res, r = run_check(tmp_path, "--only", "engine", "--set", "model.memory_gb=0.001")
    assert res.returncode == 1 and r["passed"] is False, res.stdout[-2000:] + res.stderr[-2000:]
    pre = r["checks"]["preflight"]
    assert pre["status"] == "fail" and "model.memory_gb" in pre["line"], pre["line"]
    assert r["checks"]["train_max_row"]["status"] == "pass"


# ---------------------------------------------------------------------------------------------------------
# the random model is removed on any exit: a real SIGTERM, to the wrapper and to Python itself


def _wait_for_model(root: Path, proc: subprocess.Popen, timeout_s: float = 300) -> Path:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = list(root.rglob("model/*.safetensors"))
        if found:
            return found[0]
        if proc.poll() is not None:
            raise AssertionError(f"the check ended before writing its model: {proc.communicate()}")
        time.sleep(0.2)
    proc.kill()
    raise AssertionError("no model written in time")


@pytest.mark.parametrize("how", ["wrapper", "python"])
def test_sigterm_removes_the_random_model(tmp_path, how):
    """SIGTERM as `timeout` or a scheduler sends it, once the random model is on disk: the check stops with
    status 143 and leaves nothing in the temporary folder (before: the wrapper exec'd `timeout`, Python had no
    handler, and the model stayed, 15 GB at 7B)."""
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    env = {
        **os.environ,
        "TMPDIR": str(scratch),
        "PYTHONPATH": str(REPO / "src"),
        "OMP_WAIT_POLICY": "PASSIVE",
    }
    if how == "wrapper":
        cmd = ["bash", str(REPO / "bench" / "gpu_check.sh"), "--python", sys.executable]
    else:
        cmd = [sys.executable, str(REPO / "bench" / "gpu_check.py")]
    out = tmp_path / "gpu_check.json"
    proc = subprocess.Popen(
        [*cmd, *SHRUNK, "--only", "engine", "--out", str(out)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    model = _wait_for_model(scratch, proc)
    proc.send_signal(signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 143, stdout[-2000:] + stderr[-2000:]
    assert not model.exists() and not list(scratch.glob("populora-gpu-check-*")), list(scratch.rglob("*"))
    if how == "wrapper":  # and the wrapper says which interpreter it chose
        assert f"gpu_check.sh: interpreter {sys.executable}" in stdout


# ---------------------------------------------------------------------------------------------------------
# simulations of what needs a GPU


class FakeDevice:
    """torch.cuda's memory calls over a scripted device: `used` bytes by every process. `to(used)` moves it and
    waits until the poller (`DevicePeak`) has read the new state twice, so no phase goes unseen."""

    total = 80 * GIB

    def __init__(self, used: int) -> None:
        self.used, self.reads = used, 0
        self.cond = threading.Condition()

    def mem_get_info(self, *_):
        with self.cond:
            self.reads += 1
            self.cond.notify_all()
            return self.total - self.used, self.total

    def to(self, used: int) -> None:
        with self.cond:
            self.used, start = used, self.reads
            assert self.cond.wait_for(lambda: self.reads >= start + 2, timeout=120), "the poller never read"


TRAINER, VLLM, RESIDUE, ACTIVATIONS = 16 * GIB, 40 * GIB, GIB // 2, 5 * GIB


class FakeSleepingEngine:
    """The vLLM engine's train step as the simulation sees it: awake, vLLM holds its share next to the
    trainer (56 GiB); `sleep` frees it but a residue; the step adds its activations and frees them; `wake`
    brings vLLM's share back. The step calls `self.sleep` / `self.wake` as the real engine does."""

    sleep_mode, n_slots = True, 8
    tokenizer = range(1000)

    def __init__(self, dev: FakeDevice) -> None:
        self.dev = dev

    def sleep(self) -> None:
        self.dev.to(self.dev.used)  # the awake state is seen before vLLM lets go of it
        self.dev.to(TRAINER + RESIDUE)

    def wake(self) -> None:
        self.dev.to(TRAINER + VLLM)

    def train_step(self, batch) -> dict:
        self.sleep()
        self.dev.to(TRAINER + RESIDUE + ACTIVATIONS)
        self.dev.to(TRAINER + RESIDUE)
        self.wake()
        return {"loss/0": 0.5, "tokens": batch.n_tokens}

    def generate(self, requests, seed=None):
        from populora.engine.types import Generation

        return [
            Generation(
                [5] * r.max_new_tokens,
                "",
                [0.0] * r.max_new_tokens,
                "length",
                prompt_ids=r.prompt,
                slot=r.slot,
            )
            for r in requests
        ]


def test_the_train_step_peak_starts_after_vllm_sleeps(bench_script, monkeypatch, tmp_path):
    """The issue's simulation: with the peak not reset after vLLM's sleep, `train_max_row` compared the memory
    held before the sleep (trainer + vLLM's share, 56 GiB) with the 22 GiB train-step estimate and failed on
    every GPU. The step's own peak (trainer + vLLM's residue + activations, 21.5 GiB) is what it must compare;
    the awake and wake-up peaks are kept apart."""
    import torch

    from populora.config import load_config

    gc_mod = bench_script("gpu_check")
    dev = FakeDevice(TRAINER + VLLM)
    monkeypatch.setattr(torch.cuda, "mem_get_info", dev.mem_get_info)
    for name in ("reset_peak_memory_stats", "synchronize", "empty_cache"):
        monkeypatch.setattr(torch.cuda, name, lambda *a, **k: None)
    for name in ("max_memory_allocated", "max_memory_reserved", "memory_reserved", "memory_allocated"):
        monkeypatch.setattr(torch.cuda, name, lambda *a, **k: TRAINER)
    checks = gc_mod.Checks(tmp_path / "c.json", {"settings": {}}, 600, True)
    cfg = load_config("paper-7b", [])
    args = SimpleNamespace(
        prompt_len=8, new_tokens=4, rows=8, kv_prompt_len=16, kv_new_tokens=4, kv_rows=2, kv_max_rows=8
    )
    plan = {"training_peak_bytes": 22 * GIB, "sampling_peak_bytes": 60 * GIB}
    eng = FakeSleepingEngine(dev)
    gc_mod._engine_checks(checks, eng, cfg, args, "cuda", None, 0, 1.0, plan, 60 * GIB, 22 * GIB)
    row = checks.res["checks"]["train_max_row"]
    assert row["status"] == "pass", row["line"]
    assert row["device_peak_bytes"] == TRAINER + RESIDUE + ACTIVATIONS
    assert row["device_peak_at_wake_bytes"] == TRAINER + VLLM
    assert row["device_peak_before_sleep_bytes"] == TRAINER + VLLM
    assert "sleep" not in eng.__dict__ and "wake" not in eng.__dict__  # the engine's own methods again


def test_a_vllm_preset_fails_on_cuda_when_vllm_cannot_be_imported(bench_script, monkeypatch, tmp_path):
    """On CUDA, paper-7b (backend vLLM) without an importable vLLM is a FAIL naming the interpreter and the
    two fixes, not a skip that lets the check exit 0 on the hf backend; on a CPU it stays a skip, and
    `--set model.backend=hf` asks for no vLLM at all."""
    gc_mod = bench_script("gpu_check")
    monkeypatch.setattr(gc_mod, "import_vllm", lambda: (None, "ModuleNotFoundError: No module named 'vllm'"))
    args = SimpleNamespace(sets=[])

    def verdict(gpu: bool, sets=()):
        checks = gc_mod.Checks(tmp_path / "c.json", {"settings": {}}, 600, gpu)
        args.sets = list(sets)
        version = gc_mod.vllm_check(checks, args, gpu)
        return version, checks.res["checks"]["vllm_import"]

    version, c = verdict(True)
    assert version is None and c["status"] == "fail", c
    assert sys.executable in c["line"] and "--python" in c["line"] and "model.backend=hf" in c["line"]
    assert verdict(False)[1]["status"].startswith("skipped: vLLM not installed")
    assert verdict(True, ["model.backend=hf"])[1]["status"] == "skipped: model.backend=hf: vLLM not used"
    monkeypatch.setattr(gc_mod, "import_vllm", lambda: ("0.32.0", None))
    version, c = verdict(True)
    assert version == "0.32.0" and c["status"] == "pass" and sys.executable in c["line"]


def test_a_run_past_its_timeout_is_stopped_with_sigterm_first(bench_script, tmp_path):
    """The run check's child gets SIGTERM (its trainer then closes vLLM and the sandbox) before any SIGKILL, and a
    timeout is reported as None, not as an exit status."""
    steps = bench_script("gpu_check_steps")
    flag = tmp_path / "closed"
    code = (
        "import signal, sys, time\n"
        f"def stop(*_):\n    open({str(flag)!r}, 'w').write('closed')\n    sys.exit(143)\n"
        "signal.signal(signal.SIGTERM, stop)\nprint('started', flush=True)\ntime.sleep(300)\n"
    )
    rc, out = steps.run_process([sys.executable, "-c", code], 15, dict(os.environ), tmp_path / "run.log")
    assert rc is None and "started" in out and flag.read_text() == "closed"
