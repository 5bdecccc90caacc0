"""Nothing left behind: a 2-worker run of the tiny preset, started as `populora train` starts it (its own Ray,
in its own session like a terminal's foreground job), stopped by Ctrl-C, by SIGTERM or by a worker that dies.

Each case checks that every process of the run (driver, Ray, workers, sandbox) is gone, that no /dev/shm entry
(shared-memory segment, POSIX semaphore `sem.*`, scratch folder) made during the run remains, that the run's
temp dir (TMPDIR) is empty again (but for torch's compile cache), that the exit is one line with the fix, and that the run folder is valid
(`check_run`) and resumes to the end."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from populora.diagnostics.schema import check_run
from populora.diagnostics.sinks import read_jsonl
from populora.train.interrupt import TrainingInterrupted
from populora.train.launch import train

STEPS = 3
SHM = Path("/dev/shm")
SCRATCH = "populora-vllm-"  # the vllm engine's adapter folders: + the owning process's pid
CACHES = ("torchinductor_",)  # torch's compile cache in the temp dir: kept across runs on purpose


def _sets(values: list[str]) -> list[str]:
    return [x for kv in values for x in ("--set", kv)]


def _children(pid: int) -> set[int]:
    """Every live descendant of `pid` (from /proc: Linux)."""
    parent: dict[int, int] = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                stat = (d / "stat").read_text()
            except OSError:
                continue
            parent[int(d.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    out, todo = set(), [pid]
    while todo:
        p = todo.pop()
        kids = [c for c, pp in parent.items() if pp == p]
        out.update(kids)
        todo += kids
    return out


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _alive(pids: set[int]) -> set[int]:
    """The pids still running (zombies count as gone: nothing of them is left but their exit status)."""
    live = set()
    for p in pids:
        try:
            state = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":
            live.add(p)
    return live


class Run:
    """A `populora train` subprocess in its own session, with its own TMPDIR; the state of /dev/shm before."""

    def __init__(self, tmp_path: Path, fast: list[str]) -> None:
        self.dir = tmp_path / "run"
        self.tmp = tmp_path / "tmp"
        self.tmp.mkdir()
        self.shm_before = set(os.listdir(SHM)) if SHM.is_dir() else set()
        sets = [*fast, "dist.workers=2", f"train.steps={STEPS}", "train.checkpoint_every=1"]
        env = {
            **os.environ,
            "OMP_WAIT_POLICY": "PASSIVE",
            "PYTHONUNBUFFERED": "1",
            "TMPDIR": str(self.tmp),  # whatever the run puts in the temp dir must be gone after it
            "RAY_TMPDIR": "/tmp",  # Ray's session logs (kept by Ray on purpose) and its short socket paths
        }
        env.pop("RAY_ADDRESS", None)  # its own Ray, as a user's `populora train`
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "populora.cli",
                "train",
                "--run-dir",
                str(self.dir),
                "--quiet",
                *_sets(sets),
            ],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,  # a process group of its own: Ctrl-C goes to all of it, as in a terminal
        )
        self.pids: set[int] = set()

    def wait_for_checkpoint(self) -> None:
        """Until step 1's checkpoint is logged; then remember every process of the run."""
        deadline = time.time() + 300
        events = self.dir / "events.jsonl"
        while time.time() < deadline and self.proc.poll() is None:
            if events.exists() and '"checkpoint"' in events.read_text():
                break
            time.sleep(0.2)
        assert self.proc.poll() is None, self.proc.stderr.read()[-2000:]
        self.pids = {self.proc.pid} | _children(self.proc.pid)
        workers = [p for p in self.pids if "DistWorker" in _cmdline(p)]
        assert len(workers) == 2, {p: _cmdline(p) for p in self.pids}
        self.workers = sorted(workers)

    def finish(self) -> tuple[int, str]:
        try:
            _, err = self.proc.communicate(timeout=240)
        finally:
            if self.proc.poll() is None:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        return self.proc.returncode, err

    def _orphans_in_shm(self) -> list[str]:
        """New /dev/shm entries that are the run's leftovers. Other programs on the machine may use /dev/shm
        meanwhile, so an entry counts only if nobody alive holds it (a leaked segment or semaphore has lost
        its owners by definition) twice, a second apart, and a `populora-vllm-<pid>-*` folder only if that
        pid was one of the run's."""

        def candidates() -> set[str]:
            held = _held_in_shm()
            out = set()
            for n in set(os.listdir(SHM)) - self.shm_before:
                try:
                    if os.stat(SHM / n).st_ino in held:
                        continue
                except OSError:  # gone meanwhile
                    continue
                if n.startswith(SCRATCH):
                    pid = n[len(SCRATCH) :].split("-", 1)[0]
                    if not (pid.isdigit() and int(pid) in self.pids):
                        continue
                out.add(n)
            return out

        first = candidates()
        if first:
            time.sleep(1.0)
            first &= candidates()
        return sorted(first)

    def leftovers(self) -> list[str]:
        """What the run left behind: live processes, new /dev/shm entries, anything in its TMPDIR."""
        deadline = time.time() + 30  # Ray's own daemons exit a moment after the driver
        while _alive(self.pids) and time.time() < deadline:
            time.sleep(0.2)
        left = [f"process {p}: {_cmdline(p)[:120]}" for p in sorted(_alive(self.pids))]
        if SHM.is_dir():
            left += [f"/dev/shm/{n}" for n in self._orphans_in_shm()]
        left += [f"TMPDIR/{p.name}" for p in sorted(self.tmp.iterdir()) if not p.name.startswith(CACHES)]
        return left


def _held_in_shm() -> set[int]:
    """Inodes under /dev/shm that a live process has mapped or open. By inode, not name: glibc creates a
    named semaphore under a temporary name and links it into place, so maps show the temporary name."""
    held = set()
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            for line in (d / "maps").read_text().splitlines():
                parts = line.split(maxsplit=5)
                if len(parts) == 6 and parts[5].startswith("/dev/shm/"):
                    held.add(int(parts[4]))
            for fd in (d / "fd").iterdir():
                try:
                    if os.readlink(fd).startswith("/dev/shm/"):
                        held.add(os.stat(fd).st_ino)
                except OSError:
                    continue
        except OSError:
            continue
    return held


def _one_line(err: str, start: str) -> str:
    assert "Traceback" not in err, err[-3000:]
    lines = [ln for ln in err.splitlines() if ln.startswith(start)]
    assert len(lines) == 1, err[-3000:]
    return lines[0]


def _resumes_to_the_end(run: Path, ray_address: str) -> None:
    done = [m["step"] for m in read_jsonl(run / "metrics.jsonl")]
    assert done and done[-1] < STEPS
    assert check_run(run) == []
    train(resume=run, quiet=True)  # joins the test session's Ray (`ray_address`)
    assert [m["step"] for m in read_jsonl(run / "metrics.jsonl")] == list(range(1, STEPS + 1))
    assert check_run(run) == []


@pytest.fixture
def run(tmp_path, fast, ray_address):  # noqa: ARG001 - the test session's Ray starts before the snapshot
    r = Run(tmp_path, fast)
    yield r
    if r.proc.poll() is None:
        os.killpg(r.proc.pid, signal.SIGKILL)
        r.proc.wait()


def test_stop_messages_name_the_signal_the_checkpoint_and_the_exit_code(tmp_path):
    term = TrainingInterrupted(tmp_path / "r", None, signal_name="SIGTERM", newest=4)
    assert str(term) == (
        "terminated (SIGTERM): stopped at once; the newest checkpoint checkpoints/step_000004 is kept and the "
        f"steps after it are re-run; continue with `populora train --resume {tmp_path / 'r'}`"
    )
    assert term.exit_code == 143 and isinstance(term, KeyboardInterrupt)
    early = TrainingInterrupted(tmp_path / "r", None)
    assert str(early).startswith("interrupted: stopped at once, before the first checkpoint")
    assert early.exit_code == 130


def test_ctrl_c_finishes_the_step_and_leaves_nothing_behind(run, ray_address):
    run.wait_for_checkpoint()
    os.killpg(run.proc.pid, signal.SIGINT)  # a terminal's Ctrl-C: the whole foreground group
    rc, err = run.finish()
    assert rc == 130, err[-3000:]
    line = _one_line(err, "interrupted:")
    assert "saved after step" in line and f"--resume {run.dir}" in line
    assert run.leftovers() == []
    _resumes_to_the_end(run.dir, ray_address)


def test_sigterm_stops_at_once_and_leaves_nothing_behind(run, ray_address):
    run.wait_for_checkpoint()
    os.kill(run.proc.pid, signal.SIGTERM)  # `kill PID`, a scheduler's stop: the driver only
    rc, err = run.finish()
    assert rc == 143, err[-3000:]
    line = _one_line(err, "terminated (SIGTERM):")
    assert "newest checkpoint checkpoints/step_" in line and f"--resume {run.dir}" in line
    assert run.leftovers() == []
    _resumes_to_the_end(run.dir, ray_address)


def test_a_dead_worker_stops_the_others_and_leaves_nothing_behind(run, ray_address):
    run.wait_for_checkpoint()
    os.kill(run.workers[-1], signal.SIGKILL)  # out of memory, a crash: the process is simply gone
    rc, err = run.finish()
    assert rc == 2, err[-3000:]
    line = _one_line(err, "error:")
    assert "dist worker" in line and "died" in line and f"--resume {run.dir}" in line
    assert run.leftovers() == []
    _resumes_to_the_end(run.dir, ray_address)
