"""Screenshots of a report page with headless Chromium (for the docs and for eyeballing a run).

    populora report RUN_DIR --screenshot docs/img/report.png [--screenshot-height 2400]

Needs `chromium` (or `chromium-browser` / `google-chrome`) on PATH; nothing else.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


class ScreenshotError(RuntimeError):
    """No browser, or the browser failed."""


def find_browser() -> str | None:
    return next((p for p in map(shutil.which, BROWSERS) if p), None)


def screenshot(
    html_path: str | Path,
    png_path: str | Path,
    width: int = 1100,
    height: int = 2400,
    timeout_s: float = 120.0,
    compact: bool = True,
) -> Path:
    """Render `html_path` in headless Chromium at `width` x `height` CSS pixels and save the PNG.

    `compact=True` re-encodes it with a 256-colour palette (about 3x smaller, no visible change for these
    flat-colour pages), which keeps screenshots committed to docs/ small.
    """
    browser = find_browser()
    if browser is None:
        raise ScreenshotError("no Chromium found; install it (apt-get install chromium) to take screenshots")
    png_path = Path(png_path).resolve()
    png_path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="populora-chromium-") as profile:
        cmd = [
            browser,
            "--headless",
            "--disable-gpu",
            "--hide-scrollbars",
            "--no-first-run",
            f"--user-data-dir={profile}",
            f"--window-size={width},{height}",
            f"--screenshot={png_path}",
            Path(html_path).resolve().as_uri(),
        ]
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            cmd.insert(1, "--no-sandbox")  # Chromium refuses to run as root with its sandbox
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired as exc:
            raise ScreenshotError(f"Chromium did not finish within {timeout_s:.0f} s") from exc
    if proc.returncode != 0 or not png_path.exists():
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        raise ScreenshotError(f"Chromium failed (exit {proc.returncode}): {tail[0]}")
    if compact:
        from PIL import Image

        with Image.open(png_path) as im:
            rgb = im.convert("RGB")
        rgb.quantize(colors=256, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE).save(
            png_path, optimize=True
        )
    return png_path
