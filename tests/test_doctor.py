"""`populora doctor` (issue 51): each check's verdict on mocked versions and sizes (the probes replaced: this
machine has no GPU), the real command on this CPU machine, and the same checks in a GPU run's preflight."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from populora import doctor
from populora.config import load_config

GIB = 2**30
H100 = ("NVIDIA H100 80GB HBM3", 80 * 10**9)


@pytest.fixture
def gpu_machine(monkeypatch):
    """A machine where every probe passes: one H100, driver 580, torch and vLLM built for CUDA 13.0."""
    monkeypatch.setattr(doctor, "probe_gpus", lambda: [H100])
    monkeypatch.setattr(doctor, "probe_smi_gpus", lambda: [H100])
    monkeypatch.setattr(doctor, "probe_driver", lambda: "580.65.06")
    monkeypatch.setattr(doctor, "probe_torch", lambda: ("2.13.0", "13.0"))
    monkeypatch.setattr(doctor, "probe_vllm_cuda", lambda: None)
    monkeypatch.setattr(doctor, "probe_module", lambda name: ("0.32.0" if name == "vllm" else "2.60.0", ""))
    monkeypatch.setattr(doctor, "probe_nccl", lambda: ("2.27.3", ""))
    monkeypatch.setattr(doctor, "probe_shm", lambda path="/dev/shm": 32 * GIB)
    monkeypatch.setattr(doctor, "probe_ram", lambda: (1000 * GIB, 1024 * GIB))
    monkeypatch.setattr(doctor, "probe_compiler", lambda: "/usr/bin/cc")
    monkeypatch.setattr(doctor, "probe_python_h", lambda: "/usr/include/python3.11/Python.h")
    monkeypatch.delenv("POPULORA_SCRATCH_DIR", raising=False)
    return monkeypatch


def _gpu_cfg(*sets: str):
    """The tiny model as a GPU run with vLLM (its plan is computed in a second on the CPU)."""
    return load_config(preset="tiny", overrides=["model.device=cuda", "model.backend=vllm", *sets])


def _failed(lines):
    return [ln for ln in lines if ln.status == doctor.FAIL]


def test_a_machine_that_has_everything_can_go(gpu_machine):
    lines = doctor.run_checks(_gpu_cfg())
    assert not _failed(lines), doctor.report(lines)
    names = [ln.name for ln in lines]
    for name in ("nvidia driver", "gpus", "memory plan", "memory settings", "adapter folder", "host ram"):
        assert name in names
    assert {"c compiler", "Python.h", "vllm", "ray", "nccl"} <= set(names)
    assert doctor.report(lines).endswith("the run can go")


def test_an_old_driver_for_a_cuda_13_torch_is_one_failing_line_naming_both_fixes(gpu_machine):
    gpu_machine.setattr(doctor, "probe_driver", lambda: "535.0")
    failed = _failed(doctor.run_checks(_gpu_cfg()))
    assert [ln.name for ln in failed] == ["nvidia driver"]
    text = failed[0].text()
    assert "driver 535.0" in text and "CUDA 13.0" in text and "CUDA 12.2" in text
    assert "NVIDIA driver >= 580" in text  # fix 1: a newer driver
    assert "download.pytorch.org/whl/cu129" in text and "vLLM's cu129 wheel" in text  # fix 2: matching wheels
    assert "\n" not in text
    # vLLM built for another CUDA than torch: its build is checked too
    gpu_machine.setattr(doctor, "probe_driver", lambda: "575.51.03")
    gpu_machine.setattr(doctor, "probe_vllm_cuda", lambda: "13.0")
    gpu_machine.setattr(doctor, "probe_torch", lambda: ("2.13.0", "12.9"))
    failed = _failed(doctor.run_checks(_gpu_cfg()))
    assert [ln.name for ln in failed] == ["nvidia driver"] and "vLLM's CUDA 13.0" in failed[0].text()


def test_driver_problem_hand_numbers():
    assert doctor.driver_problem("580.65.06", "13.0") is None
    assert doctor.driver_problem("535.104.05", "12.8") is None  # 12.x runs on >= 525 (minor-version compat)
    assert doctor.driver_problem(None, "13.0") is None and doctor.driver_problem("535.0", None) is None
    assert doctor.driver_cuda("535.104.05") == "12.2" and doctor.driver_cuda("570.86") == "12.8"
    msg = doctor.driver_problem("470.2", "12.1")
    assert "driver >= 525" in msg and "whl/cu118" in msg


def test_a_small_dev_shm_fails_with_the_fallback_folder(gpu_machine):
    gpu_machine.setattr(doctor, "probe_shm", lambda path="/dev/shm": 64 * 10**6)  # Docker's default
    failed = _failed(doctor.run_checks(_gpu_cfg()))
    assert [ln.name for ln in failed] == ["adapter folder"]
    assert "--shm-size" in failed[0].fix and "POPULORA_SCRATCH_DIR" in failed[0].fix
    # the fallback: the check follows the folder the vLLM engine would write to
    gpu_machine.setenv("POPULORA_SCRATCH_DIR", "/tmp")
    assert doctor.scratch_root() == ("/tmp", "POPULORA_SCRATCH_DIR")


def test_paper_7b_sizes_without_a_download(tmp_path):
    """The 7B shape is known: 8 slots of rank 32 on q/k/v/o write 323 MB of bf16 adapters per engine, and
    level-1 sleep pins the bf16 base and those adapters (~14.5 GiB) per worker."""
    cfg = load_config(preset="paper-7b", overrides=["dist.workers=8"])
    sizes = doctor.model_sizes(cfg, tmp_path)
    assert sizes.base == 15_231_233_024 and "known shape" in sizes.source
    assert doctor.adapter_bytes(cfg, sizes.slot) == 8 * 28 * 32 * (2 * 3584 + 2 * (3584 + 512) + 2 * 3584) * 2
    assert round(doctor.adapter_bytes(cfg, sizes.slot) / 1e6) == 323
    cfg.model.vllm_sleep = True
    need = doctor.needs_of(cfg, 8)
    line = doctor.check_ram(cfg, need, sizes, (100 * GIB, 128 * GIB))
    assert line.status == doctor.FAIL and "8 workers x 14.5 GiB" in line.needs
    assert "model.vllm_sleep=false" in line.fix
    assert doctor.check_ram(cfg, need, sizes, (200 * GIB, 256 * GIB)).status == doctor.OK
    shm = doctor.check_shm(cfg, need, sizes, 64 * 10**6, ("/dev/shm", "default"))
    assert shm.status == doctor.FAIL and "8 engines x 308 MiB" in shm.needs


def test_missing_build_tools_and_vllm_fail_in_the_preflight(gpu_machine):
    from populora.engine import resolve_model

    cfg = _gpu_cfg()
    assert doctor.preflight_problems(cfg, resolve_model("tiny")) == []
    gpu_machine.setattr(doctor, "probe_compiler", lambda: None)
    gpu_machine.setattr(doctor, "probe_python_h", lambda: None)
    problems = doctor.preflight_problems(cfg, resolve_model("tiny"))
    assert len(problems) == 2 and "build-essential" in problems[0] and "-dev" in problems[1]
    gpu_machine.setattr(doctor, "probe_module", lambda name: (None, "ImportError: libcudart.so.13"))
    failed = _failed(doctor.run_checks(cfg))
    assert {"c compiler", "Python.h", "vllm"} == {ln.name for ln in failed}
    assert "libcudart.so.13" in next(ln for ln in failed if ln.name == "vllm").has


def test_a_cpu_preset_needs_no_gpu_line(gpu_machine):
    gpu_machine.setattr(doctor, "probe_gpus", lambda: [])
    gpu_machine.setattr(doctor, "probe_driver", lambda: None)
    gpu_machine.setattr(doctor, "probe_torch", lambda: ("2.13.0+cpu", None))
    gpu_machine.setattr(doctor, "probe_compiler", lambda: None)
    lines = doctor.run_checks(load_config(preset="tiny"))
    assert not _failed(lines)
    by = {ln.name: ln for ln in lines}
    for name in ("nvidia driver", "gpus", "c compiler", "vllm", "ray", "nccl"):
        assert by[name].status == doctor.INFO and "not needed" in by[name].needs


def test_the_gpu_preflight_fails_on_the_doctor_line(gpu_machine):
    """`train.setup.preflight` of a GPU run stops on a doctor check before loading anything (torch made to see
    a GPU; the check fails before the GPU is asked anything)."""
    import torch

    from populora.train.errors import TrainError
    from populora.train.setup import preflight

    gpu_machine.setattr(torch.cuda, "is_available", lambda: True)
    gpu_machine.setattr(doctor, "probe_shm", lambda path="/dev/shm": 1 * 2**20)
    with pytest.raises(TrainError) as err:
        preflight(_gpu_cfg())
    msg = str(err.value)
    assert msg.startswith("model.device=cuda: adapter folder:") and "POPULORA_SCRATCH_DIR" in msg
    assert "populora doctor" in msg and "\n" not in msg


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "populora.cli", "doctor", *args], capture_output=True, text=True, timeout=300
    )


def test_the_command_on_this_machine(tmp_path):
    """The real probes: the tiny preset can go here (exit 0); asked for a GPU, the gpu line fails (exit 1)."""
    import torch

    out = tmp_path / "doctor.json"
    res = _cli("--preset", "tiny", "--json", str(out))
    assert res.returncode == 0, res.stdout + res.stderr
    assert res.stdout.strip().endswith("the run can go")
    data = json.loads(out.read_text())
    assert data["ok"] is True and {c["name"] for c in data["checks"]} >= {"nvidia driver", "host ram"}
    if torch.cuda.is_available():
        return
    res = _cli("--set", "model.device=cuda")
    assert res.returncode == 1
    assert any(line.startswith("FAIL  gpus: 0 visible") for line in res.stdout.splitlines())
    res = _cli("--set", "model.nope=1")
    assert res.returncode == 2 and "model.nope" in res.stderr
