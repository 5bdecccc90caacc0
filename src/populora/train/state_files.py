"""A checkpoint's RNG and optimizer state as data, never as code (issue 29).

    rng.json                 python / numpy / torch generator states as numbers (and hex for torch's bytes)
    optimizer.safetensors    every tensor of the optimizer state, plus its structure as JSON in the metadata

Pickle (`torch.save`) runs code on load: a crafted `rng.pt` in a run folder would execute as the trainer's user
on resume. These two files hold only numbers, strings and tensors. Run folders written before this change hold
`rng.pt` / `optimizer.pt`; they are read with `torch.load(weights_only=True)` (torch's restricted unpickler)
and an allow-list of the numpy types a saved numpy RNG state needs, nothing else.

Whatever the source, a state is checked before anything uses it: `check_rng` applies it to scratch generators
and `misfit` compares an optimizer state with the running engine's (same keys, same tensor shapes), so a file
that loads but does not fit is reported as such instead of failing later mid-step.
"""

from __future__ import annotations

import json
import math
import pickle
import random
from pathlib import Path
from typing import Any

import numpy as np
import torch

from populora import safe_files

RNG_FILE, OPTIMIZER_FILE = "rng.json", "optimizer.safetensors"
LEGACY_RNG_FILE, LEGACY_OPTIMIZER_FILE = "rng.pt", "optimizer.pt"  # pickles, written before issue 29
_TREE_KEY = "populora.tree"  # the safetensors metadata entry holding the state's structure


class StateFileError(ValueError):
    """A state file that does not hold what it should; the message says what is wrong."""


# ---------------------------------------------------------------------------------------------- RNG
def rng_state(py_rng: random.Random) -> dict:
    """Python (the trainer's `random.Random`), numpy-global and torch RNG states."""
    return {"python": py_rng.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}


def rng_to_json(state: dict) -> dict:
    version, internal, gauss = state["python"]
    key, keys, pos, has_gauss, cached = state["numpy"]
    return {
        "python": {"version": version, "state": list(internal), "gauss_next": gauss},
        "numpy": {
            "key": key,
            "state": [int(k) for k in keys],
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "cached_gaussian": float(cached),
        },
        "torch": bytes(state["torch"].numpy().tobytes()).hex(),
    }


def rng_from_json(obj: Any) -> dict:
    """The state `rng_to_json` wrote, checked (`check_rng`)."""
    try:
        py, npy = obj["python"], obj["numpy"]
        state = {
            "python": (py["version"], tuple(_ints(py["state"], "python.state")), py["gauss_next"]),
            "numpy": (
                npy["key"],
                np.asarray(_ints(npy["state"], "numpy.state"), dtype=np.uint32),
                npy["pos"],
                npy["has_gauss"],
                npy["cached_gaussian"],
            ),
            "torch": torch.frombuffer(bytearray.fromhex(obj["torch"]), dtype=torch.uint8),
        }
    except (KeyError, TypeError, ValueError, OverflowError) as err:
        raise StateFileError(f"not an RNG state ({type(err).__name__}: {str(err)[:120]})") from None
    return check_rng(state)


def _ints(xs: Any, what: str) -> list[int]:
    if not isinstance(xs, list) or not all(type(x) is int and 0 <= x < 2**32 for x in xs):
        raise StateFileError(f"{what} is not a list of 32-bit unsigned integers")
    return xs


def check_rng(state: Any) -> dict:
    """`state` if it is an RNG state this process can restore; StateFileError otherwise. Each part is applied
    to a scratch generator, so a wrong length, type or value is caught here, before the trainer's own."""
    if not isinstance(state, dict) or set(state) != {"python", "numpy", "torch"}:
        raise StateFileError("RNG state must have exactly the keys python, numpy, torch")
    py, npy, tch = state["python"], state["numpy"], state["torch"]
    try:
        if not (isinstance(py, tuple) and len(py) == 3 and isinstance(py[1], tuple)):
            raise TypeError("python state is not (version, tuple, gauss_next)")
        if py[2] is not None and not (isinstance(py[2], float) and math.isfinite(py[2])):
            raise TypeError("python gauss_next is not a finite float or None")
        random.Random().setstate(py)
        if not (isinstance(npy, tuple) and len(npy) == 5 and isinstance(npy[1], np.ndarray)):
            raise TypeError("numpy state is not (key, array, pos, has_gauss, cached_gaussian)")
        if npy[1].dtype != np.uint32 or npy[1].shape != (624,):
            raise ValueError("numpy state array is not 624 uint32 words")
        np.random.RandomState().set_state(npy)
        if not (isinstance(tch, torch.Tensor) and tch.dtype == torch.uint8 and tch.dim() == 1):
            raise TypeError("torch state is not a 1-D uint8 tensor")
        torch.Generator().set_state(tch)
    except (TypeError, ValueError, RuntimeError, OverflowError) as err:
        raise StateFileError(f"RNG state does not fit ({str(err).splitlines()[0][:160]})") from None
    return state


def restore_rng(state: dict, py_rng: random.Random) -> None:
    py_rng.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])


def write_rng(path: Path, py_rng: random.Random) -> None:
    Path(path).write_text(json.dumps(rng_to_json(rng_state(py_rng))) + "\n")


def read_rng(path: Path) -> dict:
    # never through a link, never blocking on a FIFO: a FIFO here hung --resume (issue 50)
    return rng_from_json(json.loads(safe_files.read_text(path)))


# ---------------------------------------------------------------------------------------------- optimizer
def write_tree(path: Path, tree: Any) -> None:
    """Write a nest of dicts (str keys), lists, tuples, tensors and JSON scalars as one safetensors file."""
    from safetensors.torch import save_file

    tensors: dict[str, torch.Tensor] = {}

    def enc(x: Any) -> Any:
        if isinstance(x, torch.Tensor):
            name = f"t{len(tensors)}"
            tensors[name] = (
                x.detach().to("cpu").contiguous().clone()
            )  # own storage: safetensors refuses shared
            return {"tensor": name}
        if isinstance(x, dict):
            if not all(isinstance(k, str) for k in x):
                raise TypeError("optimizer state: dict keys must be strings")
            return {"dict": {k: enc(v) for k, v in x.items()}}
        if isinstance(x, list | tuple):
            return {"list" if isinstance(x, list) else "tuple": [enc(v) for v in x]}
        if x is None or isinstance(x, bool | int | float | str):
            return {"value": x}
        raise TypeError(f"optimizer state: cannot store a {type(x).__name__}")

    skeleton = enc(tree)
    save_file(tensors, str(path), metadata={_TREE_KEY: json.dumps(skeleton)})


def read_tree(path: Path) -> Any:
    """What `write_tree` wrote."""
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as f:
        meta = f.metadata() or {}
        if _TREE_KEY not in meta:
            raise StateFileError(f"no {_TREE_KEY} entry in the metadata")
        skeleton = json.loads(meta[_TREE_KEY])
        names = set(f.keys())
        used: set[str] = set()

        def dec(node: Any) -> Any:
            if not isinstance(node, dict) or len(node) != 1:
                raise StateFileError("structure entry is not a one-key tag")
            ((tag, val),) = node.items()
            if tag == "tensor" and isinstance(val, str) and val in names and val not in used:
                used.add(val)
                return f.get_tensor(val)
            if tag == "dict" and isinstance(val, dict):
                return {k: dec(v) for k, v in val.items()}
            if tag in ("list", "tuple") and isinstance(val, list):
                out = [dec(v) for v in val]
                return out if tag == "list" else tuple(out)
            if tag == "value" and (val is None or isinstance(val, bool | int | float | str)):
                return val
            raise StateFileError(f"unknown or malformed structure entry {tag!r}")

        tree = dec(skeleton)
    if used != names:
        raise StateFileError(f"{len(names - used)} tensors are not part of the structure")
    return tree


def misfit(state: Any, like: Any, where: str = "optimizer") -> str | None:
    """Why `state` cannot replace `like` (the running engine's own state), or None when it fits: the same
    dict keys, list lengths and scalar kinds, and tensors of the same shape and kind (float or integer)."""
    if isinstance(like, torch.Tensor):
        if not isinstance(state, torch.Tensor):
            return f"{where} is a {type(state).__name__}, expected a tensor"
        if tuple(state.shape) != tuple(like.shape) or state.is_floating_point() != like.is_floating_point():
            return f"{where} has shape {tuple(state.shape)} {state.dtype}, expected {tuple(like.shape)} {like.dtype}"
        return None
    if isinstance(like, dict):
        if not isinstance(state, dict) or set(state) != set(like):
            return f"{where} keys differ from this engine's"
        for k in like:
            bad = misfit(state[k], like[k], f"{where}.{k}")
            if bad:
                return bad
        return None
    if isinstance(like, list | tuple):
        if not isinstance(state, list | tuple) or len(state) != len(like):
            return f"{where} has another length than this engine's"
        for i, (s, lk) in enumerate(zip(state, like, strict=True)):
            bad = misfit(s, lk, f"{where}[{i}]")
            if bad:
                return bad
        return None

    def kind(x: Any) -> str:
        if isinstance(x, bool) or x is None or isinstance(x, str):
            return type(x).__name__
        return "number" if isinstance(x, int | float) else "other"

    if kind(state) != kind(like) or (kind(like) == "number" and not math.isfinite(state)):
        return f"{where} is {str(state)[:40]!r}, expected a value like {str(like)[:40]!r}"
    return None


def read_legacy(path: Path) -> Any:
    """An `rng.pt` / `optimizer.pt` of an older run folder, through torch's restricted unpickler: tensors,
    containers and scalars, plus the numpy types of a saved numpy RNG state. Anything else (a pickle that
    would call a function) is refused by torch before it runs."""
    reconstruct = _numpy_reconstruct()
    allowed = [
        np.ndarray,
        np.dtype,
        type(np.dtype(np.uint32)),
        reconstruct,
        (reconstruct, "numpy.core.multiarray._reconstruct"),  # the name numpy 1.x wrote
    ]
    try:
        with torch.serialization.safe_globals(allowed):
            return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError:
        raise StateFileError(
            "it holds objects other than tensors, numbers and containers (a pickle that would run code); "
            "refused unread"
        ) from None


def _numpy_reconstruct() -> Any:
    try:  # numpy >= 2 moved it; pickles name whichever module wrote them, and both resolve to one function
        from numpy._core.multiarray import _reconstruct
    except ImportError:  # pragma: no cover - numpy 1.x
        from numpy.core.multiarray import _reconstruct
    return _reconstruct
