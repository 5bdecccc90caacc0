"""PEFT-format LoRA folders <-> `LoRAAdapter`: `save_peft` (atomic) and `load_peft` (strict, clear errors).

A PEFT LoRA folder holds `adapter_config.json` plus `adapter_model.safetensors` (or the older
`adapter_model.bin`) with keys `base_model.model.<module>.lora_A.weight` ([r, d_in]) and
`.lora_B.weight` ([d_out, r]). Module names in a `LoRAAdapter` are the base model's paths
(`model.layers.0.self_attn.q_proj`), i.e. the key minus the `base_model.model.` prefix.

Unsupported variants are rejected with a message rather than silently mis-loaded: rsLoRA (scale alpha/sqrt(r)
would change every delta), DoRA (magnitude vectors), per-module rank/alpha patterns, LoRA biases,
embedding LoRA and `target_parameters`. Tensors other than LoRA factors (`modules_to_save` copies) are
kept in `metadata["extra_tensors"]` and written back verbatim.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch

from populora.lora.adapter import AdapterError, LoRAAdapter

CONFIG_NAME = "adapter_config.json"

# PEFT 0.21 asks transformers 5's deprecated `is_gradient_checkpointing` whenever it wraps or loads an adapter: a
# FutureWarning on every eval and bench, about code neither populora nor the user controls.
_GC_WARNING = r".*`is_gradient_checkpointing` is deprecated"


@contextmanager
def quiet_peft_deprecation() -> Iterator[None]:
    """Around a PEFT call (`get_peft_model`, `PeftModel.from_pretrained`): that one FutureWarning filtered, by its
    message only; every other warning still shows."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=_GC_WARNING, category=FutureWarning)
        yield


SAFETENSORS_NAME = "adapter_model.safetensors"
BIN_NAME = "adapter_model.bin"
PREFIX = "base_model.model."
_A_SUFFIX = ".lora_A.weight"
_B_SUFFIX = ".lora_B.weight"


def _default_config(adapter: LoRAAdapter, base: str | None, targets: list[str]) -> dict:
    """The config dict PEFT's `LoraConfig(...).to_dict()` writes (via peft when importable, so new keys appear)."""
    try:
        from peft import LoraConfig

        cfg = LoraConfig(
            r=adapter.rank,
            lora_alpha=adapter.alpha,
            target_modules=targets,
            task_type="CAUSAL_LM",
            base_model_name_or_path=base,
            inference_mode=True,
        )
        out = cfg.to_dict()
    except Exception:  # noqa: BLE001 - peft missing or its config API changed: fall back to the stable core keys
        out = {
            "alpha_pattern": {},
            "auto_mapping": None,
            "base_model_name_or_path": base,
            "bias": "none",
            "fan_in_fan_out": False,
            "inference_mode": True,
            "init_lora_weights": True,
            "layers_pattern": None,
            "layers_to_transform": None,
            "lora_alpha": adapter.alpha,
            "lora_dropout": 0.0,
            "modules_to_save": None,
            "peft_type": "LORA",
            "r": adapter.rank,
            "rank_pattern": {},
            "revision": None,
            "target_modules": targets,
            "task_type": "CAUSAL_LM",
            "use_dora": False,
            "use_rslora": False,
        }
    for k, v in list(out.items()):
        if isinstance(v, set):
            out[k] = sorted(v)
        elif hasattr(v, "value") and k in ("peft_type", "task_type"):  # enums -> their string
            out[k] = v.value
    return out


def portable_base(name: str | None) -> tuple[str | None, str | None]:
    """`(base, revision)` for adapter_config.json: a base model folder written as the name any machine resolves
    (`populora.engine.resolve_model`) instead of this machine's absolute path (issue 33). The bundled tiny
    model's folder -> "tiny", the converted smol cache -> "smol", a Hugging Face cache snapshot
    `.../models--ORG--NAME/snapshots/REV` -> ("ORG/NAME", REV), so PEFT's own loaders fetch the same weights.
    Names, hub ids and other folders come back unchanged (revision None)."""
    if not name:
        return name, None
    path = Path(name).expanduser()
    if not path.is_absolute() or not path.is_dir():
        return name, None  # already a name or hub id (or a relative path the user chose)
    parts = path.parts
    if len(parts) >= 3 and parts[-2] == "snapshots" and parts[-3].startswith("models--"):
        repo = parts[-3][len("models--") :].split("--")
        if len(repo) == 2 and all(repo):
            return "/".join(repo), parts[-1]
    from populora.paths import BUNDLED_MODELS, model_cache_dir

    real = path.resolve()
    for bundled, folder in BUNDLED_MODELS.items():
        if real == folder.resolve():
            return bundled, None
    if real == (model_cache_dir() / "smol").resolve():
        return "smol", None
    return name, None


def _alpha_json(alpha: float) -> int | float:
    return int(alpha) if float(alpha).is_integer() else float(alpha)


def save_peft(
    adapter: LoRAAdapter,
    path: str | os.PathLike,
    base_model_name_or_path: str | None = None,
    target_modules: list[str] | None = None,
) -> Path:
    """Write `adapter` as a PEFT LoRA folder at `path` (replacing it atomically); returns the path.

    `target_modules` defaults to the config the adapter was loaded with, else the module-name suffixes
    (`q_proj`, ...), which is what PEFT writes for `LoraConfig(target_modules=[...])`.
    """
    from safetensors.torch import save_file

    path = Path(path)
    if path.exists() and not path.is_dir():
        raise AdapterError(f"{path} exists and is a file; pass a folder path for the PEFT adapter.")
    _check_finite(adapter, str(path))
    loaded_cfg = adapter.metadata.get("peft_config")
    if target_modules is None:
        if loaded_cfg and loaded_cfg.get("target_modules"):
            target_modules = loaded_cfg["target_modules"]
        else:
            target_modules = sorted({n.rsplit(".", 1)[-1] for n in adapter.modules})
    if isinstance(target_modules, str):  # PEFT also allows a regex string
        targets: list[str] | str = target_modules
    else:
        targets = list(target_modules)
    if loaded_cfg:
        cfg = dict(loaded_cfg)
        if base_model_name_or_path is not None:
            cfg["base_model_name_or_path"] = base_model_name_or_path
    else:
        cfg = _default_config(adapter, base_model_name_or_path, targets)  # type: ignore[arg-type]
    # A named base ("tiny", "smol", a hub id at its revision), not this machine's path: `populora eval` and
    # `resolve_model` turn it back into a folder; plain PEFT takes the base model object (docs/operators.md).
    base, revision = portable_base(cfg.get("base_model_name_or_path"))
    cfg["base_model_name_or_path"] = base
    if revision is not None and not cfg.get("revision"):
        cfg["revision"] = revision
    cfg.update(
        r=adapter.rank,
        lora_alpha=_alpha_json(adapter.alpha),
        target_modules=targets,
        inference_mode=True,
        peft_type="LORA",
    )
    if adapter.metadata.get("lora_dropout") is not None:  # what the engine trained with (lora.dropout)
        cfg["lora_dropout"] = float(adapter.metadata["lora_dropout"])

    tensors: dict[str, torch.Tensor] = {}
    for name, (a, b) in adapter.modules.items():
        tensors[f"{PREFIX}{name}{_A_SUFFIX}"] = a.detach().to("cpu").contiguous()
        tensors[f"{PREFIX}{name}{_B_SUFFIX}"] = b.detach().to("cpu").contiguous()
    for key, t in adapter.metadata.get("extra_tensors", {}).items():
        tensors[key] = t.detach().to("cpu").contiguous()

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.tmp-", dir=path.parent))
    try:
        save_file(tensors, str(tmp / SAFETENSORS_NAME), metadata={"format": "pt"})
        (tmp / CONFIG_NAME).write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
        if path.exists():
            # A directory cannot be renamed over a non-empty one: move the old one aside first, then drop it.
            old = Path(tempfile.mkdtemp(prefix=f".{path.name}.old-", dir=path.parent))
            os.rename(path, old / "x")
            os.rename(tmp, path)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.rename(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return path


def _read_config(path: Path) -> dict:
    cfg_file = path / CONFIG_NAME
    if not cfg_file.is_file():
        raise AdapterError(
            f"{path} has no {CONFIG_NAME}; it is not a PEFT adapter folder "
            "(save one with peft's save_pretrained or populora.lora.peft_io.save_peft)."
        )
    try:
        cfg = json.loads(cfg_file.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise AdapterError(f"{cfg_file} is not valid JSON ({e}); re-save the adapter.") from None
    if not isinstance(cfg, dict):
        raise AdapterError(f"{cfg_file} does not hold a JSON object; re-save the adapter.")
    ptype = cfg.get("peft_type")
    if ptype != "LORA":
        raise AdapterError(f"{path} is a PEFT {ptype!r} adapter, not LORA; only LoRA adapters are supported.")
    if cfg.get("use_rslora"):
        raise AdapterError(
            f"{path} uses rsLoRA (scale alpha/sqrt(r)); unsupported: re-train with use_rslora=False."
        )
    if cfg.get("use_dora"):
        raise AdapterError(f"{path} is a DoRA adapter (use_dora=true); DoRA is unsupported, use plain LoRA.")
    if cfg.get("rank_pattern") or cfg.get("alpha_pattern"):
        raise AdapterError(
            f"{path} sets rank_pattern/alpha_pattern (per-module rank or alpha); unsupported: "
            "all modules must share one r and lora_alpha."
        )
    if cfg.get("lora_bias"):
        raise AdapterError(f"{path} has LoRA biases (lora_bias=true); unsupported.")
    if cfg.get("target_parameters"):
        raise AdapterError(f"{path} targets parameters directly (target_parameters); unsupported.")
    for key in ("r", "lora_alpha"):
        if not isinstance(cfg.get(key), int | float) or isinstance(cfg.get(key), bool) or not cfg[key] > 0:
            raise AdapterError(f"{cfg_file}: {key!r} must be a positive number, got {cfg.get(key)!r}.")
    return cfg


def _read_tensors(path: Path) -> dict[str, torch.Tensor]:
    st, bn = path / SAFETENSORS_NAME, path / BIN_NAME
    if st.is_file():
        from safetensors.torch import load_file

        try:
            return load_file(str(st))
        except Exception as e:  # noqa: BLE001 - safetensors raises several types for truncated/corrupt files
            raise AdapterError(
                f"{st} is corrupt or truncated ({type(e).__name__}: {e}); re-save the adapter."
            ) from None
    if bn.is_file():
        try:
            sd = torch.load(str(bn), map_location="cpu", weights_only=True)
        except Exception as e:  # noqa: BLE001
            raise AdapterError(
                f"{bn} is corrupt or not a tensor dict ({type(e).__name__}); re-save the adapter."
            ) from None
        if not isinstance(sd, dict) or not all(isinstance(v, torch.Tensor) for v in sd.values()):
            raise AdapterError(f"{bn} does not hold a flat dict of tensors; re-save the adapter.")
        return sd
    raise AdapterError(f"{path} has no {SAFETENSORS_NAME} or {BIN_NAME}; the adapter weights are missing.")


def _module_name(key: str) -> str:
    name = key[len(PREFIX) :] if key.startswith(PREFIX) else key
    # Some tools save with the adapter name still in the key (`.lora_A.default.weight`); accept it.
    return name


def load_peft(path: str | os.PathLike, dtype: torch.dtype | None = None) -> LoRAAdapter:
    """Read a PEFT LoRA folder into a `LoRAAdapter` (module names without the `base_model.model.` prefix).

    `metadata` keeps `peft_config` (the folder's config), `source` (the path) and `extra_tensors`
    (non-LoRA tensors such as `modules_to_save` copies), so `save_peft` writes an equivalent folder.
    """
    path = Path(path)
    if not path.exists():
        raise AdapterError(f"adapter folder {path} does not exist.")
    if not path.is_dir():
        raise AdapterError(f"{path} is a file; pass the PEFT adapter folder (holding {CONFIG_NAME}).")
    cfg = _read_config(path)
    sd = _read_tensors(path)

    a_of: dict[str, torch.Tensor] = {}
    b_of: dict[str, torch.Tensor] = {}
    extra: dict[str, torch.Tensor] = {}
    for key, t in sd.items():
        if "lora_magnitude_vector" in key:
            raise AdapterError(f"{path} holds DoRA magnitude vectors ({key}); DoRA is unsupported.")
        if "lora_embedding_A" in key or "lora_embedding_B" in key:
            raise AdapterError(
                f"{path} holds embedding LoRA weights ({key}); only Linear-layer LoRA is supported."
            )
        if ".lora_A." in key or ".lora_B." in key:
            if not key.endswith(".weight"):
                raise AdapterError(
                    f"{path}: unsupported LoRA tensor {key!r} (LoRA biases are not supported)."
                )
            which = ".lora_A." if ".lora_A." in key else ".lora_B."
            name = _module_name(key.split(which)[0])
            (a_of if which == ".lora_A." else b_of)[name] = t
        else:
            extra[key] = t
    if not a_of and not b_of:
        raise AdapterError(f"{path}: no lora_A/lora_B tensors found; is this a LoRA adapter?")
    missing = sorted(set(a_of) ^ set(b_of))
    if missing:
        raise AdapterError(
            f"{path}: module {missing[0]!r} has only one of lora_A/lora_B; the file is incomplete."
        )

    r = int(cfg["r"])
    modules = {}
    for name in sorted(a_of, key=_natural_key):
        a, b = a_of[name], b_of[name]
        if a.dim() != 2 or b.dim() != 2:
            raise AdapterError(
                f"{path}: module {name!r} has non-matrix factors {tuple(a.shape)}, {tuple(b.shape)} "
                "(conv LoRA is unsupported)."
            )
        if a.shape[0] != r or b.shape[1] != r:
            raise AdapterError(
                f"{path}: module {name!r} has A {tuple(a.shape)} and B {tuple(b.shape)}, "
                f"inconsistent with r={r} in {CONFIG_NAME}."
            )
        if dtype is not None:
            a, b = a.to(dtype), b.to(dtype)
        modules[name] = (a, b)
    adapter = LoRAAdapter(
        modules=modules,
        alpha=float(cfg["lora_alpha"]),
        metadata={"peft_config": cfg, "source": str(path), "extra_tensors": extra},
    )
    _check_finite(adapter, str(path))
    return adapter


def _natural_key(name: str) -> list:
    """Sort `layers.10` after `layers.9` so module order follows the model."""
    return [int(p) if p.isdigit() else p for p in name.split(".")]


def _check_finite(adapter: LoRAAdapter, where: str) -> None:
    for name, (a, b) in adapter.modules.items():
        if not (torch.isfinite(a).all() and torch.isfinite(b).all()):
            raise AdapterError(
                f"{where}: module {name!r} contains NaN or Inf values; the adapter is broken "
                "(check the training run that produced it)."
            )
