"""Per-thread reusable buffers for the block kernels of the dense-delta operators (X1, X6, X7, X9).

A fresh multi-megabyte tensor per temporary costs more than the arithmetic on it: glibc hands large freed
blocks back to the kernel, so every new one is paid again in page faults (measured: one DELLA block of 1M
entries takes 19.6 ms with fresh temporaries, 6.5 ms when memory is kept). The kernels therefore write their
temporaries into named buffers that each thread keeps while a merge runs; `release()` drops the calling
thread's buffers when the merge is done (pool threads drop theirs when they exit).
"""

from __future__ import annotations

import math
import threading

import torch

_LOCAL = threading.local()


def buffer(
    name: str, shape: tuple[int, ...], dtype: torch.dtype, device: torch.device | str = "cpu"
) -> torch.Tensor:
    """A tensor of `shape` for the calling thread, reusing the memory of the last request under `name`.

    Contents are undefined. Two names never share memory, so a kernel may hold several buffers at once.
    """
    store = getattr(_LOCAL, "store", None)
    if store is None:
        store = _LOCAL.store = {}
    numel = math.prod(shape)
    key = (name, dtype, torch.device(device))
    buf = store.get(key)
    if buf is None or buf.numel() < numel:
        buf = store[key] = torch.empty(numel, dtype=dtype, device=device)
    return buf[:numel].view(shape)


def release() -> None:
    """Drop the calling thread's buffers."""
    _LOCAL.store = {}
