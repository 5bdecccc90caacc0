"""Opening a file of a run folder as data: never through a symbolic link, only a regular file (issue 50).

A run folder may come from someone else (a download, a shared disk, a colleague's tarball), so its files are
input like any other. Two tricks turn a plain `open(RUN/events.jsonl)` against its user:

* a symbolic link: `events.jsonl -> ~/.ssh/authorized_keys` makes the trainer append there, a dangling one
  creates a file outside the folder, and `adapter_model.safetensors -> ~/.ssh/id_ed25519` makes `export`
  copy a private key into a folder meant for the Hub;
* a FIFO (or a device): `open()` of a FIFO blocks until a writer appears, so `rng.json` as a FIFO hangs
  `--resume` and `events.jsonl` as one hangs `report`, forever.

Every run-folder file the trainer, report, eval, export and compare read or write goes through `open_fd`:
`O_NOFOLLOW` (the last component is never a link: ELOOP instead), `O_NONBLOCK` (a FIFO opens at once
instead of waiting), then `fstat` on the open descriptor must say regular file, else `RunFileError`. The
check is on the descriptor, not the name, so nothing can be swapped between the check and the read.
Folders above the file are not checked: the run folder itself may be a link the user made (`runs/latest`).

`RunFileError` is an `OSError` (callers that already turn an unreadable file into one line keep doing so)
whose message names the file, what it is, and the fix. Imports only the standard library.
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
import tempfile
from pathlib import Path

__all__ = [
    "RunFileError",
    "append_bytes",
    "check_regular",
    "copy_regular",
    "open_fd",
    "read_bytes",
    "read_text",
    "replace_lines",
    "write_bytes_new",
]


class RunFileError(OSError):
    """A run-folder file that is a link, a FIFO, a device or a folder where a file belongs; the message names
    the file, what it is and the fix (an OSError, so `except OSError` callers report it as unreadable)."""

    def __str__(self) -> str:
        return self.strerror or super().__str__()  # the message alone, no "[Errno 22]"


def _kind(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a regular file"


def _refuse(path: str | os.PathLike, what: str) -> RunFileError:
    err = RunFileError(
        errno.EINVAL,
        f"{path} is {what}, not a regular file; a run folder holds its own files as data "
        "(replace it with the real file, or remove it)",
    )
    err.filename = str(path)
    return err


def open_fd(path: str | os.PathLike, flags: int = os.O_RDONLY, mode: int = 0o600) -> int:
    """An fd for `path` opened with `flags` plus O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, checked to be a regular
    file (then set back to blocking); `RunFileError` for a link, FIFO, device or folder. Other OSErrors
    (missing file, no permission) pass through unchanged."""
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, mode)
    except OSError as err:
        if err.errno == errno.ELOOP:  # O_NOFOLLOW on a link (dangling or not)
            raise _refuse(path, "a symbolic link") from None
        if err.errno == errno.ENXIO:  # O_WRONLY | O_NONBLOCK on a FIFO with no reader
            raise _refuse(path, "a FIFO (named pipe)") from None
        if err.errno == errno.EISDIR:
            raise _refuse(path, "a folder") from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise _refuse(path, _kind(st.st_mode))
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_bytes(path: str | os.PathLike) -> bytes:
    """The whole content of regular file `path` (never through a link, never blocking on a FIFO)."""
    fd = open_fd(path)
    with os.fdopen(fd, "rb") as fh:
        return fh.read()


def read_text(path: str | os.PathLike, encoding: str = "utf-8", errors: str = "strict") -> str:
    """`read_bytes(path)` decoded (UnicodeDecodeError as usual for bad bytes unless `errors` says otherwise)."""
    return read_bytes(path).decode(encoding, errors)


def append_bytes(path: str | os.PathLike, data: bytes, fsync: bool = False, mode: int = 0o644) -> None:
    """Append `data` to `path` (created if missing) with one O_APPEND write, so a line lands whole at the
    end even with several writers; a link (dangling or not) or a FIFO is refused, nothing is created."""
    fd = open_fd(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, mode)
    try:
        view = memoryview(data)
        while view:  # a regular-file write is complete in practice; loop for the pathological short write
            n = os.write(fd, view)
            view = view[n:]
        if fsync:
            os.fsync(fd)
    finally:
        os.close(fd)


def write_bytes_new(path: str | os.PathLike, data: bytes, fsync: bool = False, mode: int = 0o600) -> None:
    """Write `data` to `path`, replacing whatever was there (a stale temp file, a link planted under a temp
    name): the name is unlinked first and the file created with O_EXCL, so nothing outside is written."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    fd = open_fd(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
        fh.flush()
        if fsync:
            os.fsync(fh.fileno())


def copy_regular(src: str | os.PathLike, dest: str | os.PathLike, mode: int = 0o644) -> None:
    """Copy regular file `src` (never through a link, never a FIFO) to a new regular file `dest` (O_EXCL:
    nothing there is followed or overwritten), streaming: an adapter can be hundreds of MB."""
    import shutil

    fd = open_fd(src)
    with os.fdopen(fd, "rb") as fin:
        out = open_fd(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
        with os.fdopen(out, "wb") as fout:
            shutil.copyfileobj(fin, fout, 1 << 20)


def check_regular(path: str | os.PathLike, missing_ok: bool = True) -> bool:
    """True when `path` is a regular file (not through a link), False when it is missing and `missing_ok`;
    `RunFileError` for anything else (a link, FIFO, device or folder). Opens nothing."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        if missing_ok:
            return False
        raise
    if not stat.S_ISREG(st.st_mode):
        raise _refuse(Path(path), _kind(st.st_mode))
    return True


def replace_lines(path: str | os.PathLike, lines: list[bytes]) -> None:
    """Rewrite a log as `lines` (each without its newline) atomically: a new file beside it, fsynced, renamed
    over it; a rename replaces a link itself, never what it points to. Used where corrupt lines are dropped."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(b"".join(line + b"\n" for line in lines))
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
