"""The sandbox worker's wire formats (runs inside the worker script; standard library only).

- Frames between the pool and the supervisor: a 4-byte big-endian length and UTF-8 JSON (`send_frame`,
  `read_exact`).
- A job as its child reads it from its own job pipe (`pack_job` / `unpack_job`): a fixed header of integers
  and the program, call and working-directory bytes. Nothing else: no job id, no field that could tell one kind
  of call (validation, scoring) from another, and no JSON parser to run in the child.
- A result as the child writes it on its own result pipe: one setup byte (`SETUP_OK`, written before any job
  code runs, or `SETUP_FAILED` followed by a frame), then one frame. The job can write only to its own pipe, so
  at worst it forges its own result, which `sanitize` checks; it cannot fake a setup failure, because the
  setup byte is already in the pipe when its code starts.
"""

import builtins
import json
import os
import struct

# Bound before any job exists, so a job that monkeypatches builtins or modules cannot break the reporting of
# its own outcome (each job is a fresh fork, so nothing it patches reaches the next job).
_len, _write, _pack, _memoryview = builtins.len, os.write, struct.pack, builtins.memoryview
try:
    from _json import make_encoder as _c_make_encoder  # the C encoder: no Python-level lookups while encoding

    _C_ENCODER = _c_make_encoder(
        None, None, json.encoder.encode_basestring_ascii, None, ": ", ", ", False, False, True
    )
except ImportError:  # pragma: no cover - CPython always has _json
    _C_ENCODER = None
_dumps = json.dumps

SETUP_OK = b"K"
SETUP_FAILED = b"F"
# cpu_s (whole seconds), memory_mb, file bytes, nofile, max_output_chars, max_stdout_chars, and the byte lengths
# of program, call and working directory
_JOB_HEADER = struct.Struct(">IIQIIIIII")


def encode(msg: dict) -> str:
    return "".join(_C_ENCODER(msg, 0)) if _C_ENCODER is not None else _dumps(msg)


def send_frame(fd: int, msg: dict) -> None:
    data = encode(msg).encode("ascii")
    view = _memoryview(_pack(">I", _len(data)) + data)
    while view:
        n = _write(fd, view)
        view = view[n:]


def read_exact(fd: int, n: int) -> bytes:
    parts = []
    while n:
        chunk = os.read(fd, n)
        if not chunk:
            raise EOFError
        parts.append(chunk)
        n -= _len(chunk)
    return b"".join(parts)


def pack_job(program: str, call: str, lim: dict, workdir: str) -> bytes:
    """The bytes of one job as its child reads them (limits already checked by `Limits.validate`)."""
    p, c, w = (s.encode("utf-8", "surrogatepass") for s in (program, call, workdir))
    head = _JOB_HEADER.pack(
        lim["cpu_s_int"],
        int(lim["memory_mb"]),
        int(float(lim["file_mb"]) * 1048576),
        int(lim["nofile"]),
        int(lim["max_output_chars"]),
        int(lim["max_stdout_chars"]),
        _len(p),
        _len(c),
        _len(w),
    )
    return head + p + c + w


def unpack_job(fd: int) -> dict:
    """Read one job from the child's job pipe: only program, call and limits (and the working directory)."""
    cpu, mem, fbytes, nofile, max_out, max_stdout, np, nc, nw = _JOB_HEADER.unpack(
        read_exact(fd, _JOB_HEADER.size)
    )
    body = read_exact(fd, np + nc + nw)
    return {
        "program": body[:np].decode("utf-8", "surrogatepass"),
        "call": body[np : np + nc].decode("utf-8", "surrogatepass"),
        "workdir": body[np + nc :].decode("utf-8", "surrogatepass"),
        "limits": {
            "cpu_s": cpu,
            "memory_mb": mem,
            "file_bytes": fbytes,
            "nofile": nofile,
            "max_output_chars": max_out,
            "max_stdout_chars": max_stdout,
        },
    }


_RESULT_FIELDS = {
    "status": str,
    "value_repr": (str, type(None)),
    "error_type": (str, type(None)),
    "error_message": (str, type(None)),
    "plain": bool,
    "stdout": str,
}
_RESULT_STATUSES = ("ok", "error", "memory", "output_limit", "crashed")


def sanitize(result: object, lim: dict) -> dict | None:
    """The child's result as the supervisor may trust it, or None. The job runs in the child's process, so it
    could write anything to its result pipe: only well-formed results within the limits pass."""
    if not isinstance(result, dict) or result.get("status") not in _RESULT_STATUSES:
        return None
    clean = {}
    for key, types_ in _RESULT_FIELDS.items():
        value = result.get(key, False if key == "plain" else "" if key == "stdout" else None)
        if not isinstance(value, types_):
            return None
        clean[key] = value
    if (clean["status"] == "ok") != isinstance(clean["value_repr"], str):
        return None
    if clean["value_repr"] is not None and _len(clean["value_repr"]) > int(lim["max_output_chars"]):
        return None
    clean["stdout"] = clean["stdout"][: int(lim["max_stdout_chars"])]
    for key in ("error_type", "error_message"):
        if clean[key] is not None:
            clean[key] = clean[key][:1000]
    return clean
