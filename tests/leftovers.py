"""What a stopped `populora train` subprocess left behind, for the cleanup tests (tests/dist/test_dist_cleanup.py
and, with vLLM workers, tests/vllm_backend/test_vllm_dist_cleanup.py): its processes, its /dev/shm entries
(shared-memory segments, POSIX semaphores `sem.*`, vLLM scratch folders) and its temp dir. Linux (/proc)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

SHM = Path("/dev/shm")
SCRATCH = "populora-vllm-"  # the vllm engine's adapter folders: + the owning process's pid
CACHES = ("torchinductor_",)  # torch's compile cache in the temp dir: kept across runs on purpose


def as_flags(values: list[str]) -> list[str]:
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

    def __init__(self, tmp_path: Path, sets: list[str]) -> None:
        self.dir = tmp_path / "run"
        self.tmp = tmp_path / "tmp"
        self.tmp.mkdir()
        self.shm_before = set(os.listdir(SHM)) if SHM.is_dir() else set()
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
                *as_flags(sets),
            ],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,  # a process group of its own: Ctrl-C goes to all of it, as in a terminal
        )
        self.pids: set[int] = set()
        self.shm_of_run: set[str] = set()

    def wait_for_checkpoint(self, timeout: float = 300) -> None:
        """Until step 1's checkpoint is logged; then remember every process of the run."""
        deadline = time.time() + timeout
        events = self.dir / "events.jsonl"
        while time.time() < deadline and self.proc.poll() is None:
            if events.exists() and '"checkpoint"' in events.read_text():
                break
            time.sleep(0.2)
        assert self.proc.poll() is None, self.proc.stderr.read()[-2000:]
        self.pids = {self.proc.pid} | _children(self.proc.pid)
        mine = _held_in_shm(self.pids)
        self.shm_of_run = {n for n in os.listdir(SHM) if _inode(SHM / n) in mine} if SHM.is_dir() else set()
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
        """The run's /dev/shm entries that remain with nobody alive holding them (a leaked segment or
        semaphore has lost its owners by definition). Other programs on the machine use /dev/shm meanwhile, so
        an entry is the run's only if a process of the run had it mapped or open mid-run (`wait_for_checkpoint`)
        or it is a `populora-vllm-<pid>-*` folder of one of the run's pids; checked twice, a second apart."""

        def candidates() -> set[str]:
            held = _held_in_shm()
            out = set()
            for n in set(os.listdir(SHM)) - self.shm_before:
                try:
                    if os.stat(SHM / n).st_ino in held:
                        continue
                except OSError:  # gone meanwhile
                    continue
                pid = n[len(SCRATCH) :].split("-", 1)[0] if n.startswith(SCRATCH) else ""
                if n in self.shm_of_run or (pid.isdigit() and int(pid) in self.pids):
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


def _inode(path: Path) -> int | None:
    try:
        return os.stat(path).st_ino
    except OSError:
        return None


def _held_in_shm(pids: set[int] | None = None) -> set[int]:
    """Inodes under /dev/shm that a live process (of `pids`, default any) has mapped or open (by inode, as
    the engine's own sweep reads them)."""
    from populora.engine.vllm import shm_inodes

    return shm_inodes(pids)


def own_output(err: str) -> str:
    """`err` less the dead worker's log tails the driver copies in (`DistEngine.report_logs`: a header ending
    "last lines of FILE:", then the file's lines indented by two spaces): what the worker itself logged, vLLM's
    warnings with their tracebacks included, is shown on purpose; populora's own output must stay one line."""
    kept, copying = [], False
    for line in err.splitlines():
        if copying and line.startswith("  "):
            continue
        copying = ", last lines of " in line and line.endswith(":")
        if not copying:
            kept.append(line)
    return "\n".join(kept)


def one_line(err: str, start: str) -> str:
    assert "Traceback" not in own_output(err), err[-3000:]
    lines = [ln for ln in err.splitlines() if ln.startswith(start)]
    assert len(lines) == 1, err[-3000:]
    return lines[0]
