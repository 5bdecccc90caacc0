"""The config of a run being resumed: its saved config.yaml plus the few `--set` keys a resume may change, and
the settings that run code, which a run folder may not choose (issue 50)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from populora.config.errors import ConfigError, show
from populora.config.loading import build, merge, parse_override, set_key
from populora.config.model import Config, check_machine
from populora.config.sections import ModelConfig

# Keys that may change when resuming a run: how long it runs, how it checkpoints and how many threads it uses.
# Everything else would change the run's meaning mid-way.
RESUMABLE_KEYS: tuple[str, ...] = (
    "train.steps",
    "train.checkpoint_every",
    "train.keep_checkpoints",
    "train.threads",
    "train.overlap",  # when the sandbox runs, not what it returns
    "dist.workers",  # e.g. resume on the workers left after losing a node: same maths, other layout
    "dist.address",
    # memory settings: the same update up to float rounding, so a run that ran out of memory can continue
    "rl.micro_batch_tokens",
    "rl.activation_checkpointing",
    "rl.share_prompt_forward",  # the same forward, each distinct prompt once: equal up to float rounding
    "model.vllm_gpu_memory_utilization",  # where vLLM's share of the GPU goes: sampling speed, not samples
    "model.vllm_kv_cache_gb",
    "model.vllm_sleep",
    "model.vllm_seeded",  # which samples are drawn, not how they are distributed
)

# Keys whose value makes populora run code that is not its own: the model folder's Python
# (`model.trust_remote_code`) and whatever a Ray cluster sends back (`dist.address`). On --resume they are
# honoured only when this command line gives them (`--set KEY=VALUE`), never from the run folder's
# config.yaml: a run folder is data (issue 50). `model.name` joins them when it names a folder inside the run.
CODE_KEYS: tuple[str, ...] = ("model.trust_remote_code", "dist.address")


def resume_config(
    saved: dict, overrides: list[str] | tuple[str, ...] = (), run_dir: str | Path | None = None
) -> Config:
    """The config of a run being resumed: its saved config (RUN_DIR/config.yaml, loaded) plus `key=value`
    overrides of the keys in `RESUMABLE_KEYS` and `CODE_KEYS` only (and `model.name` repeating the saved
    one); any other key raises ConfigError naming the allowed ones.

    A run folder is data: a setting that would run code (`CODE_KEYS`, a `model.name` inside `run_dir`) is
    taken only from `overrides`; when the saved config turns one on and the command line does not repeat
    it, ConfigError names the `--set` that would (`code_settings_problem`)."""
    raw: dict = {}
    merge(raw, saved, "config")
    saved_model = raw.get("model", {}).get("name", ModelConfig.model_fields["name"].default)
    allowed = RESUMABLE_KEYS + tuple(k for k in CODE_KEYS if k not in RESUMABLE_KEYS)
    given: set[str] = set()
    for text in overrides:
        key, value = parse_override(text)
        if key == "model.name" and _same_model(value, str(saved_model)):
            given.add(key)  # the user confirms the model the run names: nothing changes
            continue
        if key not in allowed:
            raise ConfigError(
                f"--set {key}: cannot change on --resume (only {', '.join(allowed)}); "
                "start a new run to change it."
            )
        set_key(raw, key, value)
        given.add(key)
    cfg = build(raw, check=False)
    problem = code_settings_problem(cfg, given, run_dir)
    if problem:
        raise ConfigError(problem)
    check_machine(cfg)
    return cfg


def _same_model(value: Any, saved: str) -> bool:
    """`--set model.name=VALUE` names the model the run already uses (the same text or the same folder)."""
    if not isinstance(value, str) or not value:
        return False
    if value == saved:
        return True
    a, b = Path(value).expanduser(), Path(saved).expanduser()
    return a.exists() and b.exists() and a.resolve() == b.resolve()


def _inside(name: str, run_dir: str | Path) -> bool:
    """`name` (a model.name) is a path inside the run folder `run_dir` (links resolved)."""
    from populora.paths import NAMED_MODELS

    if name in NAMED_MODELS:
        return False
    try:
        path, root = Path(name).expanduser().resolve(), Path(run_dir).expanduser().resolve()
    except (OSError, RuntimeError, ValueError):
        return False
    return path == root or root in path.parents


def code_settings_problem(cfg: Config, given: set[str], run_dir: str | Path | None = None) -> str | None:
    """Why `cfg` (a resumed run's config) cannot be used as it is, or None: a setting that runs code which
    came from the run folder's config.yaml, not from this command line's `given` keys (one line, the fix)."""
    where = f"{run_dir}/config.yaml" if run_dir is not None else "the run's config.yaml"
    model = show(cfg.model.name)
    if cfg.model.trust_remote_code and "model.trust_remote_code" not in given:
        return (
            f"{where} sets model.trust_remote_code: true, which runs the Python code in model {model}; a run "
            "folder cannot turn that on. If you trust that model, pass --set model.trust_remote_code=true "
            "yourself; else pass --set model.trust_remote_code=false."
        )
    if run_dir is not None and "model.name" not in given and _inside(cfg.model.name, run_dir):
        return (
            f"{where} names model.name {model}, a folder inside the run folder; a run folder cannot choose "
            f"the model it loads. If you trust that folder, pass --set model.name={cfg.model.name} yourself."
        )
    if cfg.dist.workers > 1 and cfg.dist.address and "dist.address" not in given:
        return (
            f"{where} names the Ray cluster dist.address {show(cfg.dist.address)}; joining a cluster runs what "
            "it sends, and a run folder cannot choose it. Pass --set dist.address=ADDRESS yourself (or "
            "--set dist.address= to start Ray locally)."
        )
    return None
