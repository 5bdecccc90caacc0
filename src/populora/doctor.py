"""`populora doctor`: what this machine has against what a run of a preset needs, one line per check.

Checks (issue 51): the NVIDIA driver against the CUDA build of the installed torch and vLLM, the GPUs visible,
the preset's memory plan on this GPU (`populora.engine.memory`) and the fastest memory settings that fit it,
`/dev/shm` against the adapters vLLM reads from there, host RAM against what level-1 sleep pins (or what a CPU
run holds), a C compiler and `Python.h` (vLLM's runtime compiles), and vLLM / Ray / NCCL importable. A check
the preset does not need reads "not needed for this preset" and never fails. `run_checks` returns the lines;
the command prints them, writes `--json FILE`, and exits 1 when a needed check fails.

Everything the machine is asked goes through the `probe_*` functions (tests replace them with fixed versions
and sizes). `preflight_problems` is the subset a GPU run checks before loading anything (`train.setup`).
Heavy imports (torch, vLLM) happen inside functions: `populora --help` stays fast.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

GIB = 2**30
MIB = 2**20
# /dev/shm beyond the adapters: vLLM's and NCCL's own shared-memory segments (Docker's default is 64 MB in all).
SHM_MARGIN_BYTES = 256 * MIB
# Host RAM beyond what sleep pins: the trainer process itself (Python, tokenizer, the sandbox's workers).
RAM_MARGIN_BYTES = 4 * GIB
# The sizes of models the doctor knows without their files (nothing downloaded): config.json's shape and the
# bf16 weights' bytes. Qwen2.5-Coder-7B: bench/configs/qwen2.5-coder-7b.json, 7.62e9 parameters x 2 bytes.
KNOWN_SHAPES: dict[str, tuple[dict, int]] = {
    "Qwen/Qwen2.5-Coder-7B": (
        dict(
            architectures=["Qwen2ForCausalLM"],
            model_type="qwen2",
            hidden_size=3584,
            intermediate_size=18944,
            num_attention_heads=28,
            num_key_value_heads=4,
            num_hidden_layers=28,
            max_position_embeddings=32768,
            max_window_layers=28,
            rms_norm_eps=1e-6,
            rope_theta=1000000.0,
            sliding_window=131072,
            tie_word_embeddings=False,
            use_sliding_window=False,
            vocab_size=152064,
            hidden_act="silu",
            torch_dtype="bfloat16",
        ),
        15_231_233_024,
    ),
}

OK, FAIL, INFO = "ok", "FAIL", "info"
NOT_CHECKED = "not checked"


@dataclass
class Line:
    """One check: `status` ok / FAIL / info (not needed, or only informative), what the machine `has`, what the
    run `needs`, and for a failure the `fix`."""

    name: str
    status: str
    has: str
    needs: str
    fix: str = ""

    def text(self) -> str:
        out = f"{self.status:<4}  {self.name}: {self.has}; needs {self.needs}"
        return out + (f"; fix: {self.fix}" if self.fix else "")


# ------------------------------------------------------------------------------------------------ probes
def probe_driver() -> str | None:
    """The NVIDIA driver version ('580.65.06'), or None (`engine.cuda_driver.probe_driver`)."""
    from populora.engine import cuda_driver

    return cuda_driver.probe_driver()


def _run(cmd: list[str], timeout: float = 20.0) -> str | None:
    from populora.engine.cuda_driver import run

    return run(cmd, timeout)


def probe_gpus() -> list[tuple[str, int]]:
    """(name, total bytes) of each GPU this process can use: torch's view (what the run gets), else nvidia-smi's."""
    try:
        import torch

        if torch.cuda.is_available():
            return [
                (torch.cuda.get_device_name(i), int(torch.cuda.get_device_properties(i).total_memory))
                for i in range(torch.cuda.device_count())
            ]
    except Exception:  # noqa: BLE001 - a broken CUDA install: report what nvidia-smi sees
        pass
    return probe_smi_gpus()


def probe_smi_gpus() -> list[tuple[str, int]]:
    """(name, total bytes) of each GPU nvidia-smi lists (whether or not torch can use them)."""
    out = _run(["nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,noheader,nounits"])
    gpus = []
    for line in (out or "").splitlines():
        name, _, mib = line.rpartition(",")
        if name and mib.strip().isdigit():
            gpus.append((name.strip(), int(mib.strip()) * MIB))
    return gpus


def probe_torch() -> tuple[str, str | None]:
    """(torch's version, its CUDA build: '13.0', or None for a CPU-only build)."""
    import torch

    return torch.__version__, torch.version.cuda


def probe_module(name: str) -> tuple[str | None, str]:
    """(version, '') when `import name` works in a fresh interpreter (this one's), else (None, the error's
    last line). A subprocess: importing vLLM takes seconds and may fail half-way."""
    code = f"import {name}; print(getattr({name}, '__version__', '?'))"
    try:
        out = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False
        )
    except (OSError, subprocess.SubprocessError) as err:
        return None, f"{type(err).__name__}: {err}"
    if out.returncode == 0:
        return out.stdout.strip().splitlines()[-1] if out.stdout.strip() else "?", ""
    lines = [ln for ln in out.stderr.strip().splitlines() if ln.strip()]
    return None, (lines[-1] if lines else f"exit code {out.returncode}")[:200]


def probe_vllm_cuda() -> str | None:
    """The CUDA build vLLM's wheel names in its version ('0.32.0+cu130' -> '13.0'); None when it names none
    (vLLM's PyPI wheels are built for the CUDA of the torch they pin)."""
    from importlib import metadata

    try:
        version = metadata.version("vllm")
    except metadata.PackageNotFoundError:
        return None
    m = re.search(r"\+cu(\d+)(\d)\b", version)
    return f"{m.group(1)}.{m.group(2)}" if m else None


def probe_nccl() -> tuple[str | None, str]:
    """(NCCL's version as torch loads it, '') or (None, why)."""
    try:
        import torch
        import torch.distributed as dist

        if not dist.is_available() or not dist.is_nccl_available():
            return None, "this torch has no NCCL backend (a CPU-only build?)"
        v = torch.cuda.nccl.version()
        return ".".join(map(str, v)) if isinstance(v, tuple) else str(v), ""
    except Exception as err:  # noqa: BLE001 - whatever stops it is the answer
        return None, f"{type(err).__name__}: {err}"[:200]


def probe_shm(path: str = "/dev/shm") -> int | None:
    """Free bytes in `path` (None when it does not exist)."""
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def probe_ram() -> tuple[int, int]:
    """(available, total) host memory in bytes, from /proc/meminfo."""
    from populora.engine.memory import available_memory_bytes

    total = 0
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                total = int(line.split()[1]) * 1024
    except OSError:
        pass
    return available_memory_bytes(), total


def probe_compiler() -> str | None:
    """The C compiler Triton and torch.compile would use: $CC, else cc / gcc / clang on PATH."""
    cc = os.environ.get("CC")
    if cc and shutil.which(cc):
        return shutil.which(cc)
    for name in ("cc", "gcc", "clang"):
        found = shutil.which(name)
        if found:
            return found
    return None


def probe_python_h() -> str | None:
    """The path of this Python's `Python.h` (None when the headers are not installed)."""
    for key in ("include", "platinclude"):
        p = Path(sysconfig.get_paths().get(key, "")) / "Python.h"
        if p.is_file():
            return str(p)
    return None


# ------------------------------------------------------------------------------------------------ checks
def driver_cuda(driver: str) -> str | None:
    """The newest CUDA version driver `driver` ships with (`engine.cuda_driver.driver_cuda`)."""
    from populora.engine.cuda_driver import driver_cuda as newest

    return newest(driver)


def driver_problem(driver: str | None, cuda: str | None, what: str = "torch") -> str | None:
    """One line when `driver` is too old for a `what` built for CUDA `cuda`, with both fixes
    (`engine.cuda_driver.driver_problem`); None when new enough or unknown."""
    from populora.engine.cuda_driver import driver_problem as problem

    return problem(driver, cuda, what)


@dataclass
class Needs:
    """What a config asks of the machine."""

    gpu: bool
    gpus: int
    vllm: bool
    ray: bool
    nccl: bool
    sleep: bool
    engines_here: int


def needs_of(cfg: Any, gpus_visible: int) -> Needs:
    """What a run of `cfg` needs here: model.device=auto counts as a GPU run when a GPU is visible."""
    device = cfg.model.device
    gpu = device.startswith("cuda") or (device == "auto" and gpus_visible > 0)
    workers = max(1, int(cfg.dist.workers))
    vllm = cfg.model.backend == "vllm"
    # with dist.address the workers may be spread over nodes: this node needs at least one GPU
    here = 1 if cfg.dist.address else workers
    return Needs(
        gpu=gpu,
        gpus=here if gpu else 0,
        vllm=vllm,
        ray=workers > 1,
        nccl=gpu and workers > 1,
        sleep=gpu and vllm and bool(cfg.model.vllm_sleep),
        engines_here=here,
    )


@dataclass
class Sizes:
    """The model's sizes for the checks: `folder` (for the memory plan), base weight bytes, one slot's bytes
    (fp32 weights, grads, AdamW moments: `estimate_memory`), and where they came from."""

    folder: Path | None
    base: int
    slot: int
    source: str


def model_sizes(cfg: Any, scratch: Path) -> Sizes:
    """The sizes of `cfg`'s model without downloading it: a local folder (bundled, a path, the hub cache), else
    a known shape (`KNOWN_SHAPES`: config.json and a sparse file of the weights' size under `scratch`)."""
    from populora.engine.memory import estimate_memory

    name = str(cfg.model.name)
    folder: Path | None = None
    source = ""
    if name in ("tiny", "smol") or Path(name).expanduser().exists():
        try:
            from populora.engine import resolve_model

            folder, source = resolve_model(name), "local"
        except Exception:  # noqa: BLE001 - missing or unconvertible: sizes unknown
            folder = None
    elif name.count("/") == 1:
        try:
            from huggingface_hub import snapshot_download

            folder = Path(snapshot_download(name, revision=cfg.model.revision or None, local_files_only=True))
            if not any(folder.glob("*.safetensors")) and not any(folder.glob("*.bin")):
                folder = None
            else:
                source = "the hub cache"
        except Exception:  # noqa: BLE001 - not in the cache: a known shape, or nothing
            folder = None
        if folder is None and name in KNOWN_SHAPES:
            config, weights = KNOWN_SHAPES[name]
            folder = scratch / "shape"
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "config.json").write_text(json.dumps(config))
            with open(folder / "model.safetensors", "wb") as f:
                f.truncate(weights)  # sparse: no disk used
            source = "its known shape (not downloaded)"
    if folder is None:
        return Sizes(None, 0, 0, f"{name} is not local and its shape is unknown")
    base, slot = estimate_memory(folder, cfg.lora.max_rank(), cfg.lora.targets)
    return Sizes(folder, base, slot, source)


def adapter_bytes(cfg: Any, slot_bytes: int) -> int:
    """Bytes of one engine's adapters as vLLM reads them: every slot in bf16 (a slot's fp32 weights, grads and
    two moments are 16 bytes a parameter; the written adapter 2)."""
    return cfg.n_slots * slot_bytes // 8


def scratch_root() -> tuple[str, str]:
    """(the folder the vLLM engine writes adapters to, how it was chosen), as `engine/vllm.py` chooses it."""
    env = os.environ.get("POPULORA_SCRATCH_DIR")
    if env:
        return env, "POPULORA_SCRATCH_DIR"
    if os.path.isdir("/dev/shm"):
        return "/dev/shm", "default"
    return tempfile.gettempdir(), "no /dev/shm: the temp folder"


def _gib(n: float) -> str:
    return f"{n / GIB:.1f} GiB" if n >= GIB else f"{n / MIB:.0f} MiB"


def check_driver(need: Needs, driver: str | None, torch_cuda: str | None, vllm_cuda: str | None) -> Line:
    builds = f"torch's CUDA {torch_cuda or 'none (CPU-only build)'}" + (
        f", vLLM's CUDA {vllm_cuda}" if vllm_cuda and vllm_cuda != torch_cuda else ""
    )
    has = f"driver {driver or 'none'}, {builds}"
    if not need.gpu:
        return Line("nvidia driver", INFO, has, "nothing (not needed for this preset)")
    if not torch_cuda:
        return Line(
            "nvidia driver",
            FAIL,
            has,
            "a CUDA build of torch",
            "install the GPU set: `pip install -e '.[gpu]' -c constraints/gpu.txt` (docs/engine.md, GPU install)",
        )
    from populora.engine.cuda_driver import min_driver

    wanted = max((min_driver(c) for c in (torch_cuda, vllm_cuda) if c), default=0)
    needs = f"driver >= {wanted} for CUDA {torch_cuda}" if wanted else f"a driver for CUDA {torch_cuda}"
    if driver is None:
        return Line(
            "nvidia driver",
            FAIL,
            has,
            needs,
            f"install NVIDIA driver >= {wanted} (no nvidia-smi, no /proc/driver/nvidia/version)",
        )
    for cuda, what in ((torch_cuda, "torch"), (vllm_cuda, "vLLM")):
        problem = driver_problem(driver, cuda, what)
        if problem:
            why, _, fix = problem.partition("; either ")
            return Line("nvidia driver", FAIL, has, needs, f"either {fix} ({why})")
    return Line("nvidia driver", OK, has, needs)


def check_gpus(need: Needs, gpus: list[tuple[str, int]], smi: list[tuple[str, int]]) -> Line:
    has = ", ".join(f"{n} ({_gib(b)})" for n, b in gpus) if gpus else "none"
    has = f"{len(gpus)} visible" + (f": {has}" if gpus else "")
    if not need.gpu:
        return Line("gpus", INFO, has, "none (not needed for this preset)")
    needs = f"{need.gpus} GPU{'s' if need.gpus > 1 else ''}"
    if len(gpus) >= need.gpus:
        return Line("gpus", OK, has, needs)
    if smi and not gpus:
        fix = (
            f"nvidia-smi lists {len(smi)} but torch sees none: check the driver line, and "
            f"CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')!r}"
        )
    elif gpus:
        fix = f"set dist.workers={len(gpus)}, or run on a node with {need.gpus} GPUs (or spread with dist.address)"
    else:
        fix = "run on a GPU node, or use model.device=cpu (model.backend=hf)"
    return Line("gpus", FAIL, has, needs, fix)


def check_plan_line(cfg: Any, need: Needs, sizes: Sizes, gpus: list[tuple[str, int]]) -> list[Line]:
    """The memory plan on this GPU (the smallest visible) and the fastest settings that fit it (info)."""
    if not need.gpu:
        return [Line("memory plan", INFO, "CPU run", "no GPU plan (host RAM below)")]
    if sizes.folder is None:
        return [Line("memory plan", INFO, sizes.source, "the model's config.json for a plan")]
    from populora.config import ConfigError
    from populora.engine.memory import check_plan, fastest_settings, memory_plan

    dtype = "bfloat16" if cfg.model.dtype == "auto" else cfg.model.dtype
    plan = memory_plan(cfg, sizes.folder, dtype)
    sizes_seen = sorted({b for _, b in gpus}) or [80 * 10**9, 141 * 10**9]
    lines = []
    for total in sizes_seen[:1] if gpus else sizes_seen:
        sampling, training = plan.peaks(total)
        t = plan.terms(total)
        needs = (
            f"sampling {_gib(sampling)}, train step {_gib(training)} (base {_gib(t['base'])}, slots "
            f"{_gib(t['slots'])}, activations {_gib(t['activations'])} for {plan.tokens} tokens"
            f"{' checkpointed' if plan.checkpointing else ''}, vLLM {_gib(t['vllm'])}"
            f"{' asleep' if plan.sleeps else ''}, CUDA contexts {_gib(t['contexts'])}, reserve {_gib(t['reserve'])})"
        )
        label = f"a {total / 1e9:.0f} GB GPU" + ("" if gpus else " (none visible: the usual sizes)")
        try:
            check_plan(plan, total, label)
            status, fix = (OK if gpus else INFO), ""
        except ConfigError as err:
            status, fix = (FAIL if gpus else INFO), str(err)
        lines.append(Line("memory plan", status, label, needs, fix))
        best = fastest_settings(cfg, sizes.folder, total, dtype)
        if best is None:
            has = "no setting of rl.activation_checkpointing / model.vllm_sleep fits"
        else:
            current = {
                "rl.activation_checkpointing": cfg.rl.activation_checkpointing,
                "model.vllm_sleep": cfg.model.vllm_sleep,
            }
            changes = [f"--set {k}={str(v).lower()}" for k, v in best.items() if current[k] != v]
            has = " ".join(changes) if changes else "the config's own (nothing to change)"
        lines.append(Line("memory settings", INFO, has, f"the fastest that fit {label}"))
    return lines


def check_shm(cfg: Any, need: Needs, sizes: Sizes, free: int | None, root: tuple[str, str]) -> Line:
    folder, how = root
    has = f"{folder} ({how}): " + ("missing" if free is None else f"{free / MIB:.0f} MiB free")
    if not need.vllm:
        return Line("adapter folder", INFO, has, "nothing (no vLLM in this preset)")
    adapters = adapter_bytes(cfg, sizes.slot) * need.engines_here
    want = adapters + SHM_MARGIN_BYTES
    needs = (
        f"{want / MIB:.0f} MiB ({need.engines_here} engine{'s' if need.engines_here > 1 else ''} x "
        f"{adapter_bytes(cfg, sizes.slot) / MIB:.0f} MiB of bf16 adapters + {SHM_MARGIN_BYTES // MIB} MiB for "
        "vLLM's and NCCL's segments)"
    )
    if free is not None and free >= want:
        return Line("adapter folder", OK, has, needs)
    fix = (
        f"give /dev/shm {max(1, -(-want // GIB))} GiB (`docker run --shm-size={max(1, -(-want // GIB))}g`, or "
        "`mount -o remount,size=8G /dev/shm`), or write adapters to disk: "
        "`export POPULORA_SCRATCH_DIR=/tmp` (or another folder with room)"
    )
    return Line("adapter folder", FAIL, has, needs, fix)


def check_ram(cfg: Any, need: Needs, sizes: Sizes, ram: tuple[int, int]) -> Line:
    available, total = ram
    has = f"{_gib(available)} available of {_gib(total)}"
    if need.sleep:
        pinned = sizes.base + adapter_bytes(cfg, sizes.slot)
        want = need.engines_here * pinned + RAM_MARGIN_BYTES
        needs = (
            f"{_gib(want)} ({need.engines_here} worker{'s' if need.engines_here > 1 else ''} x {_gib(pinned)} "
            f"pinned by vLLM's level-1 sleep + {_gib(RAM_MARGIN_BYTES)})"
        )
        fix = "a node with more RAM, fewer workers per node, or --set model.vllm_sleep=false (memory settings line)"
    elif not need.gpu:
        from populora.engine.vllm import held_bytes

        held = held_bytes(sizes.folder, "cpu") if need.vllm and sizes.folder else 0
        want = sizes.base + cfg.n_slots * sizes.slot + held
        needs = f"{_gib(want)} (the model, {cfg.n_slots} adapter slots" + (
            ", vLLM's copy and KV cache)" if held else ")"
        )
        fix = "fewer slots (population.teachers / students), a smaller model, or a GPU"
    else:
        return Line("host ram", INFO, has, "nothing pinned (model.vllm_sleep is off or no vLLM)")
    if sizes.folder is None:
        return Line("host ram", INFO, has, f"unknown ({sizes.source})")
    return Line("host ram", OK if available >= want else FAIL, has, needs, "" if available >= want else fix)


def check_build_tools(need: Needs, cc: str | None, python_h: str | None) -> list[Line]:
    why = "vLLM's runtime compiles (Triton, torch.compile)"
    if not need.vllm or not need.gpu:
        return [
            Line("c compiler", INFO, cc or "none", "nothing (not needed for this preset)"),
            Line("Python.h", INFO, python_h or "none", "nothing (not needed for this preset)"),
        ]
    py = f"{sys.version_info.major}.{sys.version_info.minor}"
    return [
        Line(
            "c compiler",
            OK if cc else FAIL,
            cc or "none on PATH",
            f"one for {why}",
            "" if cc else "`apt-get install -y build-essential` (or set CC)",
        ),
        Line(
            "Python.h",
            OK if python_h else FAIL,
            python_h or f"missing for Python {py}",
            f"the headers for {why}",
            "" if python_h else f"`apt-get install -y python{py}-dev` (or your distribution's python-devel)",
        ),
    ]


def check_modules(
    need: Needs, vllm: tuple[str | None, str], ray: tuple[str | None, str], nccl: tuple[str | None, str]
) -> list[Line]:
    out = []
    rows = (
        (
            "vllm",
            vllm,
            need.vllm,
            "`pip install -e '.[gpu]' -c constraints/gpu.txt` (docs/engine.md, GPU install)",
        ),
        ("ray", ray, need.ray, "`pip install -e '.[dist]'` or the GPU set"),
        ("nccl", nccl, need.nccl, "a CUDA build of torch (it ships NCCL)"),
    )
    for name, (version, error), needed, fix in rows:
        has = version if version else ("not checked" if error == NOT_CHECKED else f"not importable ({error})")
        if not needed:
            out.append(Line(name, INFO, has, "nothing (not needed for this preset)"))
        else:
            out.append(Line(name, OK if version else FAIL, has, "importable", "" if version else fix))
    return out


def run_checks(cfg: Any) -> list[Line]:
    """Every check for `cfg` on this machine, in the order printed."""
    gpus = probe_gpus()
    smi = probe_smi_gpus() if not gpus else gpus
    need = needs_of(cfg, len(gpus))
    torch_version, torch_cuda = probe_torch()
    scratch = Path(tempfile.mkdtemp(prefix="populora-doctor-"))
    try:
        sizes = model_sizes(cfg, scratch)
        lines = [check_driver(need, probe_driver(), torch_cuda, probe_vllm_cuda() if need.vllm else None)]
        lines.append(check_gpus(need, gpus, smi))
        lines += check_plan_line(cfg, need, sizes, gpus)
        lines.append(check_shm(cfg, need, sizes, probe_shm(scratch_root()[0]), scratch_root()))
        lines.append(check_ram(cfg, need, sizes, probe_ram()))
        lines += check_build_tools(need, probe_compiler(), probe_python_h())
        skip = (None, NOT_CHECKED)
        lines += check_modules(
            need,
            probe_module("vllm") if need.vllm else skip,
            probe_module("ray") if need.ray else skip,
            probe_nccl() if need.nccl else skip,
        )
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return lines


def preflight_problems(cfg: Any, folder: Path) -> list[str]:
    """The doctor's lines a GPU run fails on before loading anything (`train.setup.preflight`, one process on
    this machine): the driver against torch's and vLLM's CUDA builds, the adapter folder, host RAM for sleep,
    the C compiler and Python.h. Each failure as one line with its fix; [] when the run can go."""
    from populora.engine.memory import estimate_memory

    need = needs_of(cfg, 1)
    if not need.gpu:
        return []
    base, slot = estimate_memory(folder, cfg.lora.max_rank(), cfg.lora.targets)
    sizes = Sizes(Path(folder), base, slot, "local")
    _, torch_cuda = probe_torch()
    lines = [check_driver(need, probe_driver(), torch_cuda, probe_vllm_cuda() if need.vllm else None)]
    lines.append(check_shm(cfg, need, sizes, probe_shm(scratch_root()[0]), scratch_root()))
    lines.append(check_ram(cfg, need, sizes, probe_ram()))
    lines += check_build_tools(need, probe_compiler(), probe_python_h())
    return [f"{ln.name}: {ln.has}; needs {ln.needs}; fix: {ln.fix}" for ln in lines if ln.status == FAIL]


def report(lines: list[Line]) -> str:
    """The lines as printed: one per check, then the verdict."""
    failed = [ln for ln in lines if ln.status == FAIL]
    verdict = (
        "the run can go"
        if not failed
        else f"{len(failed)} check{'s' if len(failed) > 1 else ''} failed: {', '.join(ln.name for ln in failed)}"
    )
    return "\n".join([ln.text() for ln in lines] + [verdict])


def register(app: Any, bench: Any) -> None:  # noqa: ARG001 - the command-module signature
    import typer

    @app.command("doctor")
    def doctor_cmd(
        preset: str = typer.Option(
            None,
            "--preset",
            "-p",
            help="Preset name (tiny, smol, paper-7b, ...) or a YAML file; default tiny.",
        ),
        config_file: Path = typer.Option(
            None, "--config", "-c", help="A YAML file shaped like a preset (optionally `base: PRESET`)."
        ),
        set_: list[str] = typer.Option([], "--set", "-s", help="Override a config key (repeatable)."),
        json_out: Path = typer.Option(None, "--json", help="Also write the lines as JSON to FILE."),
    ) -> None:
        """What this machine has against what a run of the preset needs, one line each; exit 1 if a needed
        check fails (docs/doctor.md)."""
        from populora.config import ConfigError
        from populora.config_sources import resolve

        try:
            resolved = resolve(preset, config_file, list(set_))
        except ConfigError as err:
            typer.echo(f"error: {err}", err=True)
            raise typer.Exit(2) from None
        lines = run_checks(resolved.cfg)
        typer.echo(f"populora doctor: {resolved.label}")
        typer.echo(report(lines))
        failed = any(ln.status == FAIL for ln in lines)
        if json_out is not None:
            json_out.parent.mkdir(parents=True, exist_ok=True)
            data = dict(
                config=resolved.label,
                ok=not failed,
                command=" ".join(["populora", "doctor", *sys.argv[2:]]),
                checks=[asdict(ln) for ln in lines],
            )
            json_out.write_text(json.dumps(data, indent=1) + "\n")
        raise typer.Exit(1 if failed else 0)


__all__ = [
    "Line",
    "driver_problem",
    "preflight_problems",
    "probe_driver",
    "register",
    "report",
    "run_checks",
]
