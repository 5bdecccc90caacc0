"""What a vLLM engine leaves behind, found and removed (Linux /proc and /dev/shm; elsewhere next to nothing).

- The scratch adapter folders of runs killed before `close()` (`sweep_stale_scratch`): /dev/shm is RAM.
- vLLM's processes, which outlive their parent (`vllm_children`, `vllm_in_groups`, `end_orphaned_vllm`).
- The /dev/shm segments and semaphores those processes held (`vllm_shm`, `release_shm`, `unlink_orphans`,
  `unlink_new_orphans`), vLLM's rendezvous files and stale ZMQ sockets in the temp dir (`remove_files`,
  `sweep_ipc_sockets`).

`shutdown_llm` runs them when a `VLLMEngine` closes (engine/vllm.py); the distributed engine's driver runs
them after killing its workers (engine/dist_lifecycle.py). Warnings go to the `populora.engine.vllm` logger,
as they did before these helpers moved here; every public name is also importable from `populora.engine.vllm`.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
from pathlib import Path

LOGGER = "populora.engine.vllm"  # the warnings' logger: the engine module's, where these helpers lived

SCRATCH_PREFIX = "populora-vllm-"  # + the owning process's pid + "-" + mkdtemp's suffix


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    return True


def sweep_stale_scratch(root: Path) -> list[Path]:
    """Delete this user's `populora-vllm-<pid>-*` scratch folders under `root` whose process is gone (a run
    killed before `close()`: its adapters would hold /dev/shm, which is RAM, until reboot); return them.
    Folders of live processes, of other users and without a pid in the name are left alone."""
    removed = []
    try:
        entries = list(Path(root).glob(f"{SCRATCH_PREFIX}*"))
    except OSError:
        return removed
    for path in entries:
        pid = path.name[len(SCRATCH_PREFIX) :].split("-", 1)[0]
        try:
            if (
                not pid.isdigit()
                or path.is_symlink()
                or path.stat().st_uid != os.getuid()
                or _alive(int(pid))
            ):
                continue
        except OSError:
            continue
        shutil.rmtree(path, ignore_errors=True)
        removed.append(path)
    return removed


SHM = Path("/dev/shm")
SHUTDOWN_TIMEOUT_S = 20.0  # vLLM's own default grace is 5 s, which a loaded CPU host overruns


def shutdown_llm(
    llm,
    shm: dict[str, int] | None = None,
    pids: dict[int, str] | None = None,
    shm_before: dict[str, int] | None = None,
) -> None:
    """End a `vllm.LLM`'s engine-core subprocess now (otherwise it lives until the process exits), then
    unlink what its processes left in /dev/shm (`shm`, from `vllm_shm()` while they ran): an engine core
    that misses its grace period is killed, and its 160 MiB message queue (`psm_*`) would hold RAM until
    reboot. Its `VLLM::Worker` (in `pids`, from `vllm_children()` at start) may still be ending after the
    engine core is gone, holding its queue: it is given the same grace, then ended, before the unlink.
    Stale ZMQ socket files of vLLM in the temp dir go too (`sweep_ipc_sockets`). With `shm_before` (from
    `shm_entries()` before vLLM started), what the record `shm` missed goes too (`unlink_new_orphans`)."""
    import multiprocessing

    core = getattr(getattr(llm, "llm_engine", None), "engine_core", None)
    if core is not None and hasattr(core, "shutdown"):
        try:  # SIGTERM to VLLM::EngineCore (which ends its VLLM::Worker), then a kill after the timeout
            core.shutdown(timeout=SHUTDOWN_TIMEOUT_S)
        except TypeError:  # an engine-core client without the timeout argument
            core.shutdown()
    multiprocessing.active_children()  # reap the ended engine core so no zombie is left behind
    if pids:
        end_orphaned_vllm(pids, grace_s=SHUTDOWN_TIMEOUT_S)
    if shm:
        release_shm(shm)
    if shm_before is not None:
        unlink_new_orphans(shm_before)
    sweep_ipc_sockets()


def _proc_children(root: int) -> dict[int, str]:
    """Live descendants of process `root` with their command lines (Linux /proc; empty elsewhere)."""
    parent: dict[int, int] = {}
    try:
        entries = [d for d in Path("/proc").iterdir() if d.name.isdigit()]
    except OSError:
        return {}
    for d in entries:
        try:
            parent[int(d.name)] = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
    out: dict[int, str] = {}
    todo = [root]
    while todo:
        p = todo.pop()
        for c in [c for c, pp in parent.items() if pp == p]:
            try:
                out[c] = (Path(f"/proc/{c}/cmdline").read_bytes().split(b"\0", 1)[0]).decode(errors="replace")
            except OSError:
                out[c] = ""
            todo.append(c)
    return out


def shm_holders(pids=None) -> dict[int, set[int]]:
    """Inodes under /dev/shm that processes `pids` (None: every process) have mapped or open, each with the pids
    that hold it. By inode: a POSIX semaphore is made under a temporary name and linked into place, so the maps
    show the temporary name."""
    if pids is None:
        try:
            pids = [int(d.name) for d in Path("/proc").iterdir() if d.name.isdigit()]
        except OSError:
            return {}
    held: dict[int, set[int]] = {}
    for pid in pids:
        d = Path(f"/proc/{pid}")
        try:
            for line in (d / "maps").read_text().splitlines():
                parts = line.split(maxsplit=5)
                if len(parts) == 6 and parts[5].startswith("/dev/shm/"):
                    held.setdefault(int(parts[4]), set()).add(int(pid))
            for fd in (d / "fd").iterdir():
                try:
                    if os.readlink(fd).startswith("/dev/shm/"):
                        held.setdefault(os.stat(fd).st_ino, set()).add(int(pid))
                except OSError:
                    continue
        except (OSError, ValueError):
            continue
    return held


def shm_inodes(pids=None) -> set[int]:
    """Inodes under /dev/shm that processes `pids` (None: every process) have mapped or open."""
    return set(shm_holders(pids))


def process_group(pid: int) -> int | None:
    """The process group of live (not zombie) process `pid`, None if it is gone (Linux /proc)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return None if fields[0] == "Z" else int(fields[2])


def processes_in_groups(groups: set[int]) -> list[int]:
    """The live (not zombie) processes of process groups `groups` (Linux /proc; empty elsewhere)."""
    if not groups:
        return []
    try:
        pids = [int(d.name) for d in Path("/proc").iterdir() if d.name.isdigit()]
    except OSError:
        return []
    return [p for p in pids if process_group(p) in groups]


def vllm_in_groups(groups: set[int]) -> dict[int, str]:
    """vLLM's live processes (`VLLM::...`) in process groups `groups`, with their command lines: those of a
    killed dist worker keep its group after it is gone (its engine core ignores its parent's end)."""
    out: dict[int, str] = {}
    for p in processes_in_groups(groups):
        try:
            cmd = Path(f"/proc/{p}/cmdline").read_bytes().split(b"\0", 1)[0].decode(errors="replace")
        except OSError:
            continue
        if cmd.startswith("VLLM"):
            out[p] = cmd
    return out


def vllm_children(root: int | None = None) -> dict[int, str]:
    """vLLM's processes under process `root` (default: this one): VLLM::EngineCore and its VLLM::Worker."""
    kids = _proc_children(os.getpid() if root is None else root)
    return {p: cmd for p, cmd in kids.items() if cmd.startswith("VLLM")}


def _still_running(pid: int, cmd: str) -> bool:
    """Process `pid` runs and is still the program `cmd` (a zombie, or a pid reused by another, is not). A
    process in the middle of exiting counts as running: its command line reads empty once the kernel has
    dropped its memory, a moment before it becomes a zombie, and an empty line is not another program (a
    kernel thread, whose parent is kthreadd, pid 2, is)."""
    try:
        now = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0", 1)[0].decode(errors="replace")
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        state, ppid = fields[0], int(fields[1])
    except (OSError, IndexError, ValueError):
        return False
    if state == "Z":
        return False
    return now == cmd or (now == "" and ppid != 2)


def _wait_gone(pids: dict[int, str], timeout_s: float) -> dict[int, str]:
    """Wait at most `timeout_s` for `pids` to end; return those still running."""
    import time

    deadline = time.monotonic() + timeout_s
    live = {p: c for p, c in pids.items() if _still_running(p, c)}
    while live and time.monotonic() < deadline:
        time.sleep(0.1)
        live = {p: c for p, c in live.items() if _still_running(p, c)}
    return live


def end_orphaned_vllm(
    pids: dict[int, str], grace_s: float = 10.0, kill_wait_s: float = 10.0
) -> dict[int, str]:
    """End vLLM processes `pids` (from `vllm_children`) that outlived their parent: vLLM's engine core does
    not notice its parent's death and would run on, holding its memory and /dev/shm, until reboot. SIGTERM
    first (they then free their shared memory themselves), SIGKILL after `grace_s`, then wait at most
    `kill_wait_s` for the kernel to tear them down (until then they still map their /dev/shm segments, which
    could not be unlinked). A pid now used by another program (its command line no longer vLLM's) is left
    alone. Returns those still running after all that (none, unless the kernel is stuck)."""
    import signal

    live = {p: c for p, c in pids.items() if _still_running(p, c)}
    for p in live:
        try:
            os.kill(p, signal.SIGTERM)
        except OSError:
            pass
    live = _wait_gone(live, grace_s)
    for p in live:
        try:
            os.kill(p, signal.SIGKILL)
        except OSError:
            pass
    return _wait_gone(live, kill_wait_s)


def vllm_shm(root: int | None = None) -> dict[str, int]:
    """The /dev/shm entries (name -> inode) that the vLLM processes under process `root` (default: this
    one) hold now: VLLM::EngineCore and VLLM::Worker with their shared-memory message queues and semaphores.
    Taken while vLLM runs, so that `unlink_orphans` can remove exactly these once vLLM is gone."""
    if not SHM.is_dir():
        return {}
    held = shm_inodes(vllm_children(root))
    out = {}
    try:
        names = os.listdir(SHM)
    except OSError:
        return {}
    for n in names:
        try:
            st = os.stat(SHM / n, follow_symlinks=False)
        except OSError:
            continue
        if st.st_ino in held and st.st_uid == os.getuid():
            out[n] = st.st_ino
    return out


def _vllm_tmp_files() -> set[Path]:
    """vLLM's rendezvous files in the temp dir (`vllm_dist_<hex>`: torch.distributed's file store)."""
    import tempfile

    try:
        return set(Path(tempfile.gettempdir()).glob("vllm_dist_*"))
    except OSError:
        return set()


def remove_files(paths) -> None:
    """Delete `paths` (files this engine's vLLM made), ignoring those already gone."""
    for f in paths:
        try:
            Path(f).unlink(missing_ok=True)
        except OSError:
            pass


_UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")


def sweep_ipc_sockets(root: str | Path | None = None) -> list[Path]:
    """Delete the stale ZMQ socket files vLLM leaves in its RPC folder (`VLLM_RPC_BASE_PATH`, default the
    temp dir: `ipc://<dir>/<uuid4>`, about 7 per engine) when its processes end without closing them.
    Only this user's sockets named as a uuid4 that no process has bound (/proc/net/unix) are removed: such a
    file is garbage, a connect to it is refused. Linux only (elsewhere: nothing)."""
    import tempfile

    base = Path(root or os.environ.get("VLLM_RPC_BASE_PATH") or tempfile.gettempdir())
    try:
        bound = {
            line.split()[-1] for line in Path("/proc/net/unix").read_text().splitlines()[1:] if "/" in line
        }
        entries = [e for e in base.iterdir() if _UUID.match(e.name)]
    except OSError:
        return []
    removed = []
    for e in entries:
        try:
            st = e.lstat()
        except OSError:
            continue
        if stat.S_ISSOCK(st.st_mode) and st.st_uid == os.getuid() and str(e) not in bound:
            try:
                e.unlink()
                removed.append(e)
            except OSError:
                continue
    return removed


def unlink_orphans(entries: dict[str, int], held: set[int] | None = None) -> list[str]:
    """Unlink those of `entries` (name -> inode under /dev/shm) that still exist as the same file and that no
    live process of this user has mapped or open any more; return their names. Safe to call while others use
    /dev/shm: a name reused since (another inode) or still held is left alone. `held`: the held inodes, when
    the caller has just read them (`shm_holders`) and decides on the same look."""
    left = {n: ino for n, ino in entries.items() if _same_file(SHM / n, ino)}
    if not left:
        return []
    if not Path("/proc").is_dir():
        return []  # who holds what cannot be read: unlink nothing
    if held is None:
        held = shm_inodes()
    removed = []
    for n, ino in left.items():
        if ino in held:
            continue
        try:
            os.unlink(SHM / n)
            removed.append(n)
        except OSError:
            continue
    return removed


# The names Python's multiprocessing gives what vLLM's message queues and locks use: a SharedMemory segment
# (`psm_` + 8 hex digits) and a named semaphore (`sem.mp-` + 8 characters).
_MULTIPROCESSING_SHM = re.compile(r"^(psm_[0-9a-f]{8}|sem\.mp-[a-z0-9_]{8})$")


def shm_entries() -> dict[str, int]:
    """This user's /dev/shm entries now (name -> inode); empty where there is no /dev/shm."""
    out: dict[str, int] = {}
    try:
        names = os.listdir(SHM)
    except OSError:
        return out
    for n in names:
        try:
            st = os.stat(SHM / n, follow_symlinks=False)
        except OSError:
            continue
        if st.st_uid == os.getuid():
            out[n] = st.st_ino
    return out


def unlink_new_orphans(
    before: dict[str, int], dying_groups: set[int] | None = None, timeout_s: float = 0.0
) -> list[str]:
    """The second line behind `release_shm`: unlink this user's multiprocessing segments and semaphores
    (`psm_*`, `sem.mp-*`) that appeared since `before` (`shm_entries()` taken before vLLM started) and that
    no live process holds; return their names. Once in CI a vLLM worker killed mid-run left one engine's two
    message queues (400 MiB of RAM) and its semaphore behind although the sweep ran (not reproduced
    locally); whatever the record `vllm_shm` misses goes here, with a warning naming it. An entry still
    held, one that existed before, or one with another kind of name is left alone.

    With `dying_groups` (the process groups of killed workers), an entry still held by a process of those
    groups is waited for, at most `timeout_s`: such a process is on its way out (vLLM's processes notice
    their parent's end within a second or so) and unmaps the entry when it ends. What such a process still
    holds at the end is named, with its holders, in a warning."""
    import logging
    import time

    log = logging.getLogger(LOGGER)
    deadline = time.monotonic() + timeout_s
    removed: list[str] = []
    while True:
        new = {
            n: ino
            for n, ino in shm_entries().items()
            if before.get(n) != ino and _MULTIPROCESSING_SHM.match(n)
        }
        # one look at who holds what decides both the unlink and the wait: with two looks, a holder that let
        # go in between would leave its entry behind
        holders = shm_holders() if new else {}
        removed += unlink_orphans(new, held=set(holders)) if new else []
        # a holder whose group no longer reads (it ended, or is a zombie, since the look) counts as dying:
        # it held the entry at the look but has let go now, so the next look frees the entry. Deciding it
        # "not of a dying group" left a killed worker's entry behind when its holder ended in that moment.
        dying = {
            n: sorted(p for p in holders.get(ino, ()) if process_group(p) in dying_groups | {None})
            for n, ino in new.items()
            if dying_groups and n not in removed
        }
        dying = {n: ps for n, ps in dying.items() if ps}
        if not dying or time.monotonic() >= deadline:
            break
        time.sleep(0.2)
    if removed:  # the record missed them: say so, it is how a gap in `vllm_shm` shows
        log.warning(
            "vLLM: unlinked %d /dev/shm entr%s left behind that the start-up record missed: %s",
            len(removed),
            "y" if len(removed) == 1 else "ies",
            ", ".join(sorted(removed)),
        )
    if dying:
        log.warning(
            "vLLM: %d /dev/shm entr%s still held after %.0fs by a killed worker's processes, left in place: %s",
            len(dying),
            "y" if len(dying) == 1 else "ies",
            timeout_s,
            "; ".join(f"{n} (pids {', '.join(map(str, ps))})" for n, ps in sorted(dying.items())),
        )
    return removed


# A process that held an entry may take a while to exit and unmap it on a loaded host.
RELEASE_TIMEOUT_S = 30.0


def release_shm(entries: dict[str, int], timeout_s: float = RELEASE_TIMEOUT_S) -> list[str]:
    """Unlink `entries` (name -> inode under /dev/shm, from `vllm_shm()`) as soon as nobody holds them,
    retrying until every one is gone or `timeout_s` passes: a one-shot `unlink_orphans` right after vLLM's
    processes were told to end can race with their exit (a worker still tearing down maps its queue for a
    moment) and leak hundreds of MiB of RAM until reboot. Returns the names still there at the end (held
    by a live process: left alone, with a warning naming them)."""
    import logging
    import time

    deadline = time.monotonic() + timeout_s
    left = dict(entries)
    while True:
        unlink_orphans(left)
        left = {n: ino for n, ino in left.items() if _same_file(SHM / n, ino)}
        if not left or time.monotonic() >= deadline:
            break
        time.sleep(0.2)
    if left:
        logging.getLogger(LOGGER).warning(
            "vLLM: %d /dev/shm entr%s still held after %.0fs, left in place: %s",
            len(left),
            "y" if len(left) == 1 else "ies",
            timeout_s,
            ", ".join(sorted(left)),
        )
    return sorted(left)


def _same_file(path: Path, ino: int) -> bool:
    try:
        st = os.stat(path, follow_symlinks=False)
    except OSError:
        return False
    return st.st_ino == ino and st.st_uid == os.getuid()
