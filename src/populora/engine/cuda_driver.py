"""The NVIDIA driver against a CUDA build (issue 51): which driver a CUDA version needs, which CUDA a driver
has, and the one-line problem with both fixes (a newer driver, or wheels built for the driver's CUDA).

Used by `memory.cuda_problem` (why a CUDA torch sees no GPU) and `populora doctor`; imports no torch.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

# The oldest Linux driver each CUDA major version runs on (minor-version compatibility: a 12.x build runs on any
# driver >= 525.60.13, a 13.x build on >= 580; NVIDIA's CUDA Toolkit release notes, "CUDA Driver", table 2).
DRIVER_FOR_CUDA = {13: 580, 12: 525, 11: 450}
# The newest CUDA each driver branch ships with (the same release notes, table 3), for the "matching wheels" fix.
DRIVER_CUDA = (
    (580, "13.0"),
    (575, "12.9"),
    (570, "12.8"),
    (560, "12.6"),
    (555, "12.5"),
    (550, "12.4"),
    (545, "12.3"),
    (535, "12.2"),
    (530, "12.1"),
    (525, "12.0"),
    (520, "11.8"),
    (515, "11.7"),
    (510, "11.6"),
    (470, "11.4"),
    (450, "11.0"),
)
# PyTorch's CUDA wheel indexes (download.pytorch.org/whl/cuXYZ), newest first.
TORCH_CUDA_WHEELS = ("13.0", "12.9", "12.8", "12.6", "11.8")


def run(cmd: list[str], timeout: float = 20.0) -> str | None:
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout if out.returncode == 0 else None


def probe_driver() -> str | None:
    """The NVIDIA driver version ('580.65.06'), from nvidia-smi or /proc/driver/nvidia/version; None if none."""
    out = run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"])
    if out and out.strip():
        return out.strip().splitlines()[0].strip()
    try:
        text = Path("/proc/driver/nvidia/version").read_text()
    except OSError:
        return None
    m = re.search(r"Kernel Module\s+(?:for \S+\s+)?(\d+\.\d+(?:\.\d+)?)", text) or re.search(
        r"\b(\d{3}\.\d+(?:\.\d+)?)\b", text
    )
    return m.group(1) if m else None


def _version_tuple(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", v)[:3])


def driver_cuda(driver: str) -> str | None:
    """The newest CUDA version driver `driver` ships with ('535.104.05' -> '12.2')."""
    major = _version_tuple(driver)[:1]
    for branch, cuda in DRIVER_CUDA:
        if major and major[0] >= branch:
            return cuda
    return None


def driver_problem(driver: str | None, cuda: str | None, what: str = "torch") -> str | None:
    """One line when NVIDIA driver `driver` is too old for a `what` built for CUDA `cuda`, naming both fixes (a
    newer driver, or wheels built for the driver's CUDA); None when it is new enough or either is unknown."""
    if not driver or not cuda:
        return None
    need = min_driver(cuda)
    if not need or _version_tuple(driver)[0] >= need:
        return None
    has = driver_cuda(driver)
    wheel = next(
        (w for w in TORCH_CUDA_WHEELS if has and _version_tuple(w)[0] <= _version_tuple(has)[0]), None
    )
    wheels = (
        f"install torch and vLLM wheels built for CUDA {wheel} (`pip install torch --index-url "
        f"https://download.pytorch.org/whl/cu{wheel.replace('.', '')}` and vLLM's cu{wheel.replace('.', '')} "
        "wheel of the same release)"
        if wheel
        else "install torch and vLLM wheels built for an older CUDA"
    )
    return (
        f"NVIDIA driver {driver} (CUDA {has or '?'}) is older than {what}'s CUDA {cuda} build needs (driver >= "
        f"{need}); either install NVIDIA driver >= {need} or {wheels}"
    )


def min_driver(cuda: str) -> int:
    """The oldest driver branch a CUDA `cuda` build runs on ('13.0' -> 580); 0 when unknown."""
    return DRIVER_FOR_CUDA.get(_version_tuple(cuda)[0], 0)
