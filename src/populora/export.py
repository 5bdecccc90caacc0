"""`populora export RUN --out DIR`: a run's adapters as Hugging Face Hub-ready PEFT folders with a model card.

Owns choosing the checkpoint (the newest complete one, or ``--checkpoint final|STEP``, `populora.checkpoint_ref`)
and the members (``--best``: per role the highest LCB ``mu - k sigma`` with the run's ``ratings.lcb_k``, the
rule evolution and ``eval --members best`` use; ``--member ID``; ``--all``), copying their PEFT folders out
byte for byte (the adapter config naming a hub base by its id), and writing each one's ``README.md``
model card: Hub metadata (base_model, library_name, license, tags), the base model, rank / alpha / targets, a
summary of the run's config, the member's lineage and rating, and how to load it with PEFT. Reading the run
folder is `populora.evaluate.targets.load_target` (the same member list `populora eval` sees).

The base reference (``base_model_name_or_path`` in adapter_config.json, what
``peft.AutoPeftModelForCausalLM.from_pretrained(DIR)`` loads) must load without the network: a hub id stays the
id; a bundled name (``tiny``, ``smol``) or a local folder becomes the absolute path of the resolved model folder
(`populora.engine.resolve_model`; the bare name "tiny" made PEFT ask the hub, 59 s then a failure offline);
``--base-path`` writes any other path or hub id instead (the card says so).

``--push-to-hub REPO`` uploads the exported folder(s) with ``huggingface_hub.HfApi`` (one member: the repo's
root; several: one subfolder each). The token (``HF_TOKEN`` or ``hf auth login``) is checked before anything
is read or written, so a missing token is one error, not a finished export that then fails.

A run folder is data (issue 50): only the known PEFT files leave it. Each exported folder holds exactly
``adapter_model.safetensors`` (copied byte for byte), ``adapter_config.json`` and ``README.md`` (both written
here); every other file of the adapter folder (PEFT's own README, a stray ``training_args.bin``) stays behind,
and a known file that is a symbolic link, a FIFO or a device is an `ExportError` naming it: a link to a
private key is never copied into a folder meant for the Hub (`populora.safe_files`).

``DIR/<member>/`` is written in a temporary folder and renamed into place, so a failure never leaves half a
folder; an existing non-empty ``DIR/<member>/`` is replaced only with ``--force``. Heavy imports: none.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import typer

from populora import safe_files

# The files of an exported adapter: the weights are copied, the config and the card are written here.
WEIGHTS = "adapter_model.safetensors"
EXPORTED = (WEIGHTS, "adapter_config.json", "README.md")
LICENSE = "apache-2.0"  # populora's own license (pyproject.toml); the base model's license applies as well
# config.yaml keys summarised in the card, in this order (section, key)
CARD_KEYS = (
    ("model", "name"),
    ("population", "mode"),
    ("population", "teachers"),
    ("population", "students"),
    ("train", "steps"),
    ("train", "seed"),
    (
        "lora",
        "rank",
    ),  # an int, or the members' ranks (mixed ranks); the card's adapter table has this member's
    ("lora", "alpha"),
    ("lora", "targets"),  # attention | all-linear | module names; the wrapped modules are in target_modules
    ("rl", "lr"),
    ("rl", "rollouts"),
    ("evolution", "every"),
    ("evolution", "gamma"),
    ("ratings", "lcb_k"),
    ("tasks", "template"),
)
BUNDLED = {
    "tiny": "populora's bundled tiny model",
    "smol": "SmolLM2-135M-Instruct as populora's `smol` model",
}


class ExportError(Exception):
    """The run or the destination cannot be exported as asked; the message names the problem and the fix."""


def _read_yaml(path: Path) -> dict:
    import yaml

    try:
        data = yaml.safe_load(safe_files.read_text(path)) or {}
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise ExportError(f"cannot read {path}: {exc}") from exc
    return data if isinstance(data, dict) else {}


def _is_hub_id(name: str) -> bool:
    return (
        name.count("/") == 1 and not name.startswith((".", "/", "~")) and not Path(name).expanduser().exists()
    )


def choose(
    run_dir: Path, best: bool, member_ids: list[str] | None, every: bool, checkpoint: str | None = None
):
    """(target, members) for the selection flags; exactly one of them (none means ``--best``)."""
    from populora.evaluate.targets import TargetError, load_target, select_members

    if sum([bool(best), bool(member_ids), bool(every)]) > 1:
        raise ExportError("give one of --best, --member ID or --all")
    run_dir = Path(run_dir).expanduser()
    if not (run_dir / "config.yaml").is_file():
        raise ExportError(
            f"{run_dir} is not a run folder (no config.yaml); give the folder `populora train` wrote "
            "(a PEFT folder is already in the Hub's format)"
        )
    try:
        target = load_target(
            run_dir, checkpoint=checkpoint, resolve=False
        )  # the base only names it in the card: nothing downloaded
        spec = ["all"] if every else (member_ids or ["best"])
        chosen = [m for m in select_members(target, spec) if m.id != "base"]
    except TargetError as exc:
        raise ExportError(str(exc)) from exc
    return target, chosen


def _fmt(v) -> str:
    return "–" if v is None else (f"{v:.2f}" if isinstance(v, float) else str(v))


def base_reference(model_name: str, base_path: str | None = None) -> str:
    """What adapter_config.json names as the base: ``base_path`` when given, a hub id as it is, else the
    absolute path of the resolved local model folder (bundled ``tiny`` / ``smol`` or a folder), which loads
    offline. ExportError when the model cannot be resolved here."""
    if base_path:
        p = Path(base_path).expanduser()
        return str(p.resolve()) if p.exists() else base_path
    if _is_hub_id(model_name):
        return model_name
    from populora.engine import EngineError, resolve_model

    try:
        return str(Path(resolve_model(model_name)).resolve())
    except EngineError as exc:
        raise ExportError(
            f"cannot find the base model {model_name!r} here ({exc}); pass --base-path PATH_OR_HUB_ID to name "
            "the base the adapter config should point at"
        ) from None


def model_card(member, cfg: dict, adapter_cfg: dict, run_dir: Path, step: int | None, k: float) -> str:
    """The README.md of one exported adapter (Hub model-card format: YAML front matter, then Markdown)."""
    model_name = str((cfg.get("model") or {}).get("name") or adapter_cfg.get("base_model_name_or_path"))
    hub_base = model_name if _is_hub_id(model_name) else None
    written_base = str(adapter_cfg.get("base_model_name_or_path"))
    front = ["---"]
    if hub_base:
        front.append(f"base_model: {hub_base}")
    front += [
        "library_name: peft",
        f"license: {LICENSE}",
        "tags:",
        *[
            f"  - {t}"
            for t in ("lora", "peft", "populora", "self-play", "reinforcement-learning", member.role)
        ],
        "---",
        "",
    ]
    info = member.info or {}
    targets = adapter_cfg.get("target_modules")
    targets = ", ".join(targets) if isinstance(targets, list) else str(targets)
    base_line = (
        f"[`{hub_base}`](https://huggingface.co/{hub_base})"
        if hub_base
        else f"`{model_name}` ({BUNDLED.get(model_name, 'a local model folder')})"
    )
    lines = [
        f"# {member.id}: a PopuLoRA {member.role} adapter",
        "",
        "A LoRA adapter trained with PopuLoRA (population-based asymmetric self-play RL: teacher adapters "
        "propose code problems, student adapters solve them, a sandbox verifies), exported from run "
        f"`{run_dir.name}`" + (f", checkpoint step {step}." if step is not None else "."),
        "",
        "## Adapter",
        "",
        "| | |",
        "|---|---|",
        f"| base model | {base_line} |",
        f"| rank / alpha | {adapter_cfg.get('r')} / {adapter_cfg.get('lora_alpha')} |",
        f"| target modules | {targets} |",
        f"| role | {member.role} |",
        "",
        "## Rating and lineage",
        "",
        "| | |",
        "|---|---|",
        f"| TrueSkill mu / sigma | {_fmt(member.mu)} / {_fmt(member.sigma)} |",
        f"| LCB mu - {k:g} sigma (ratings.lcb_k) | {_fmt(member.rating)} |",
        f"| games played | {_fmt(info.get('games'))} |",
        f"| born at step | {_fmt(info.get('born_step'))} |",
        f"| made by operator | {info.get('operator') or 'none (an initial member)'} |",
        f"| parents | {', '.join(info.get('parents') or []) or 'none'} |",
        "",
        "Ratings are within the run's population (one TrueSkill environment, ranked within a role); they do "
        "not compare across runs.",
        "",
        "## Training config (summary)",
        "",
        "| key | value |",
        "|---|---|",
    ]
    for section, key in CARD_KEYS:
        value = (cfg.get(section) or {}).get(key) if isinstance(cfg.get(section), dict) else None
        if value is not None:
            lines.append(f"| `{section}.{key}` | `{value}` |")
    load_base = (
        f'AutoModelForCausalLM.from_pretrained("{hub_base}")'
        if hub_base
        else f'AutoModelForCausalLM.from_pretrained(resolve_model("{model_name}"))'
    )
    imports = "" if hub_base else "from populora.engine import resolve_model\n"
    lines += [
        "",
        "The whole resolved config is the run folder's `config.yaml`.",
        "",
        "## Load it",
        "",
        f"`adapter_config.json` names the base as `{written_base}`, so "
        '`peft.AutoPeftModelForCausalLM.from_pretrained("PATH_OR_HUB_ID_OF_THIS_FOLDER")` loads base and '
        "adapter in one call"
        + (
            "."
            if _is_hub_id(written_base)
            else " on this machine, offline. Elsewhere, edit `base_model_name_or_path` in adapter_config.json "
            "to the base's path there (or export with `populora export --base-path PATH_OR_HUB_ID`), or load "
            "the base yourself:"
        ),
        "",
        "```python",
        "from peft import PeftModel",
        "from transformers import AutoModelForCausalLM",
        imports + "",
        f"base = {load_base}",
        'model = PeftModel.from_pretrained(base, "PATH_OR_HUB_ID_OF_THIS_FOLDER")',
        "model = model.merge_and_unload()  # optional: plain weights, as `populora eval` evaluates",
        "```",
        "",
        "## License",
        "",
        f"The adapter weights are released under {LICENSE} (PopuLoRA's license); using them also means "
        "accepting the base model's license.",
        "",
    ]
    return "\n".join(front + lines)


def _adapter_config(member, cfg: dict, base_ref: str | None = None) -> dict:
    """The member's adapter_config.json, its base named by ``base_ref`` (`base_reference`), else by the hub
    id when the run used one."""
    path = member.adapter / "adapter_config.json"
    try:
        adapter_cfg = json.loads(safe_files.read_text(path))
    except safe_files.RunFileError as exc:
        raise ExportError(f"{exc}; export copies only the adapter's own files") from None
    except (OSError, ValueError) as exc:
        raise ExportError(f"cannot read {path} ({type(exc).__name__}); the checkpoint is damaged") from None
    if not isinstance(adapter_cfg, dict):
        raise ExportError(f"{path} is not a JSON object; the checkpoint is damaged")
    name = str((cfg.get("model") or {}).get("name") or "")
    if base_ref is not None:
        adapter_cfg["base_model_name_or_path"] = base_ref  # loads offline (a hub id: anywhere)
    elif _is_hub_id(name):
        adapter_cfg["base_model_name_or_path"] = name  # loadable anywhere, not this machine's cache path
    return adapter_cfg


def _check_adapter(adapter: Path) -> None:
    """ExportError unless `adapter` is a real folder (not a link) whose weights and config are regular files."""
    if adapter.is_symlink() or not adapter.is_dir():
        raise ExportError(
            f"{adapter} is a symbolic link or not a folder; a checkpoint holds its own adapter folders "
            "(export copies only the adapter's own files)"
        )
    for name in (WEIGHTS, "adapter_config.json"):
        try:
            safe_files.check_regular(adapter / name, missing_ok=False)
        except safe_files.RunFileError as exc:
            raise ExportError(f"{exc}; export copies only the adapter's own files") from None
        except FileNotFoundError:
            raise ExportError(
                f"{adapter} has no {name}; export needs a PEFT folder with {WEIGHTS} and adapter_config.json "
                "(the checkpoint is incomplete: pick another with --checkpoint)"
            ) from None


def export(
    run_dir: Path,
    out: Path,
    best: bool = False,
    member_ids: list[str] | None = None,
    every: bool = False,
    force: bool = False,
    checkpoint: str | None = None,
    base_path: str | None = None,
) -> list[Path]:
    """Write ``out/<member>/`` (PEFT files + README.md) for the chosen members; returns the folders."""
    from populora.evaluate.targets import lcb_k

    target, chosen = choose(run_dir, best, member_ids, every, checkpoint)
    run_dir = Path(run_dir).expanduser()
    cfg = _read_yaml(run_dir / "config.yaml")
    model_name = str((cfg.get("model") or {}).get("name") or "")
    base_ref = base_reference(model_name, base_path) if (model_name or base_path) else None
    out = Path(out).expanduser()
    dest_root = out.resolve()
    if dest_root == run_dir.resolve() or run_dir.resolve() in dest_root.parents:
        raise ExportError(f"--out {out} is inside the run folder {run_dir}; export to a folder outside it")
    if out.exists() and not out.is_dir():
        raise ExportError(f"--out {out} is a file; give a folder")
    for m in chosen:
        _check_adapter(m.adapter)  # before anything is written: a link among the known files is refused
        d = out / m.id
        if d.is_dir() and any(d.iterdir()) and not force:
            raise ExportError(f"{d} already exists and is not empty; choose another --out or pass --force")
    step = None
    if target.checkpoint is not None and target.checkpoint.name.startswith("step_"):
        step = int(target.checkpoint.name.removeprefix("step_"))
    k = lcb_k(run_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for m in chosen:
        adapter_cfg = _adapter_config(m, cfg, base_ref)
        tmp = out / f".tmp-{m.id}-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        try:
            try:  # the weights only, as a new regular file; never through a link (safe_files)
                safe_files.copy_regular(m.adapter / WEIGHTS, tmp / WEIGHTS)
            except safe_files.RunFileError as exc:
                raise ExportError(f"{exc}; export copies only the adapter's own files") from None
            (tmp / "adapter_config.json").write_text(
                json.dumps(adapter_cfg, indent=2) + "\n", encoding="utf-8"
            )
            (tmp / "README.md").write_text(
                model_card(m, cfg, adapter_cfg, run_dir, step, k), encoding="utf-8"
            )
            dest = out / m.id
            if dest.exists():
                shutil.rmtree(dest)
            tmp.rename(dest)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        written.append(out / m.id)
    return written


def hub_token() -> str | None:
    """The Hugging Face token: ``HF_TOKEN``, else the one `hf auth login` stored; None when there is none."""
    try:
        from huggingface_hub import get_token
    except ImportError:
        return None
    return get_token()


def push_to_hub(folders: list[Path], repo: str, token: str) -> str:
    """Upload the exported folders to the model repo ``repo`` (created if missing, private=False): one folder
    as the repo's root, several as one subfolder each. Returns the repo's URL."""
    from huggingface_hub import HfApi

    api = HfApi(token=token)
    url = api.create_repo(repo_id=repo, repo_type="model", exist_ok=True)
    for f in folders:
        api.upload_folder(
            repo_id=repo,
            repo_type="model",
            folder_path=str(f),
            path_in_repo="" if len(folders) == 1 else f.name,
            commit_message=f"populora export: {f.name}",
        )
    return str(url)


def register(app: typer.Typer, bench: typer.Typer) -> None:  # noqa: ARG001 - the command modules' signature
    @app.command("export")
    def export_cmd(
        run_dir: Path = typer.Argument(..., help="Run folder (config.yaml + checkpoints/)."),
        out: Path = typer.Option(..., "--out", "-o", help="Folder for the exported adapters: OUT/<member>/."),
        best: bool = typer.Option(
            False,
            "--best",
            help="Per role, the member with the highest LCB mu - k sigma (ratings.lcb_k; default).",
        ),
        member: list[str] = typer.Option(
            None, "--member", "-m", help="Member id(s) to export (repeatable or comma-separated)."
        ),
        every: bool = typer.Option(False, "--all", help="Every member of the newest checkpoint."),
        force: bool = typer.Option(False, "--force", help="Replace existing OUT/<member>/ folders."),
        checkpoint: str = typer.Option(
            None, "--checkpoint", help="latest (default), final or a step number: which checkpoint to export."
        ),
        base_path: str = typer.Option(
            None,
            "--base-path",
            help="Base model path or hub id written as base_model_name_or_path (default: a hub id as it is, "
            "a bundled or local model as the absolute path of its folder here, which loads offline).",
        ),
        push: str = typer.Option(
            None,
            "--push-to-hub",
            help="Also upload to this Hub model repo (USER/NAME); needs HF_TOKEN or `hf auth login`.",
        ),
    ) -> None:
        """Export a run's adapters as Hub-ready PEFT folders, each with a README.md model card."""
        token = None
        if push is not None:
            if not _is_hub_id(push):
                typer.echo(f"error: --push-to-hub {push!r} is not a repo id; give USER/NAME", err=True)
                raise typer.Exit(2)
            token = hub_token()
            if not token:  # before any work: a finished export that then cannot upload is a surprise
                typer.echo(
                    "error: --push-to-hub needs a Hugging Face token: set HF_TOKEN or run `hf auth login` "
                    "(or export without --push-to-hub and upload later with `hf upload`)",
                    err=True,
                )
                raise typer.Exit(2)
        try:
            folders = export(run_dir, out, best, member, every, force, checkpoint, base_path)
        except ExportError as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(2) from None
        for f in folders:
            typer.echo(f"wrote {f} (PEFT adapter + README.md model card)")
        if push is not None and folders and token:
            try:
                url = push_to_hub(folders, push, token)
            except Exception as exc:  # network, permissions: one line, the export itself is kept
                typer.echo(
                    f"error: upload to {push} failed ({type(exc).__name__}: {str(exc)[:300]}); the export is "
                    f"in {out}: upload it with `hf upload {push} {folders[0]}`",
                    err=True,
                )
                raise typer.Exit(1) from None
            typer.echo(f"uploaded to {url}")
        elif folders:
            typer.echo(f"upload one with: hf upload USER/NAME {folders[0]} (or --push-to-hub USER/NAME)")
