"""`lora.targets` checked against the model's own module names before its weights load.

A wrong module name used to surface after the model had loaded, as a traceback from deep inside the LoRA
injection. Here the model is built from its config.json on the meta device (no weights, no memory, well under a
second even at 7B) and `find_targets` runs on it; a miss becomes one line that lists the linear modules the
model has. Anything that stops the meta build (a hub id not yet downloaded, remote code) skips the check: the
engine build then reports the same miss (`describe_miss`).
"""

from __future__ import annotations

from pathlib import Path

from torch import nn

from populora.lora.adapter import AdapterError
from populora.lora.layers import find_targets


def linear_suffixes(model: nn.Module) -> list[str]:
    """The distinct last name parts of the model's `nn.Linear` modules (output head excluded), in model order."""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    seen: dict[str, None] = {}
    for name, mod in model.named_modules():
        if isinstance(mod, nn.Linear) and mod is not head:
            seen.setdefault(name.rsplit(".", 1)[-1], None)
    return list(seen)


def describe_miss(targets, model: nn.Module) -> str:
    """The one-line error for `lora.targets` that match no linear module of `model`."""
    shown = ",".join(targets) if isinstance(targets, list | tuple) else str(targets)
    names = linear_suffixes(model)
    return (
        f"lora.targets={shown} matches no linear module of {type(model).__name__}; its linear modules are "
        f"{', '.join(names)}; use e.g. --set lora.targets=[{','.join(names[:2])}], attention or all-linear."
    )


def local_model_folder(name: str) -> Path | None:
    """The model folder of `model.name` when it is on this machine without a download ('tiny', 'tiny-flaws', a
    local folder), else None (a hub id: the engine build checks it after the download)."""
    from populora.paths import BUNDLED_MODELS

    if name in BUNDLED_MODELS:
        return BUNDLED_MODELS[name]
    p = Path(name).expanduser()
    return p if (p / "config.json").is_file() else None


def check_targets(folder: str | Path, targets) -> str | None:
    """None when `targets` match a linear module of the model in `folder` (or the check cannot run), else the
    one-line error of `describe_miss`."""
    try:
        import torch
        from transformers import AutoConfig, AutoModelForCausalLM

        config = AutoConfig.from_pretrained(str(folder))
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(config)
    except Exception:  # noqa: BLE001 - the check is a shortcut; the engine build reports the same miss
        return None
    try:
        find_targets(model, targets)
    except AdapterError:
        return describe_miss(targets, model)
    return None
