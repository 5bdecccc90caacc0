"""The report renders in a real headless Chromium: every image decodes and the console stays clean."""

import shutil
import time

import pytest

# `report --screenshot` runs Chromium itself (no chromedriver); the page checks use the chromium_driver fixture
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(scope="module")
def chromium_window() -> tuple[int, int]:
    """The report is read in a taller window than tests/conftest.py's default."""
    return (1100, 1400)


def _check_page(drv, path):
    drv.get(path.resolve().as_uri())
    script = (
        "const imgs = [...document.images];"
        "return [imgs.length, imgs.filter(i => i.complete).length,"
        " imgs.filter(i => i.complete && i.naturalWidth > 0).length];"
    )
    # On a loaded machine the page's load event can come before every data-URI image has decoded: wait until
    # each image has finished (decoded or failed) before counting the good ones.
    for _ in range(100):
        n, done, loaded = drv.execute_script(script)
        if done == n:
            break
        time.sleep(0.1)
    errors = [e for e in drv.get_log("browser") if e["level"] in ("SEVERE", "ERROR")]
    return n, loaded, errors, drv.title


def test_report_renders_in_chromium(chromium_driver, pop_report, single_report, tmp_path):
    from populora.report import write_compare

    for path, min_imgs in ((pop_report, 10), (single_report, 7)):
        n, loaded, errors, title = _check_page(chromium_driver, path)
        assert n >= min_imgs and loaded == n, f"{path}: {loaded}/{n} images loaded"
        assert errors == [], errors
        assert title.startswith("PopuLoRA report")
    cmp = write_compare([pop_report.parent, single_report.parent], tmp_path / "cmp.html")
    n, loaded, errors, _ = _check_page(chromium_driver, cmp)
    assert n == 7 and loaded == 7 and errors == []
    # a broken image would be caught: the check is not vacuous
    bad = tmp_path / "bad.html"
    bad.write_text(
        '<!DOCTYPE html><html><head><link rel="icon" href="data:,"></head>'
        '<body><img src="data:image/png;base64,AAAA"></body></html>'
    )
    n, loaded, _, _ = _check_page(chromium_driver, bad)
    assert n == 1 and loaded == 0


def test_cli_screenshot(single_run, tmp_path):
    if not CHROMIUM:
        pytest.skip("chromium not installed (`make system-deps` installs it as root)")
    from PIL import Image
    from typer.testing import CliRunner

    from populora.cli import app

    png = tmp_path / "shot.png"
    res = CliRunner().invoke(
        app,
        [
            "report",
            str(single_run),
            "--out",
            str(tmp_path / "r.html"),
            "--screenshot",
            str(png),
            "--screenshot-height",
            "600",
        ],
    )
    assert res.exit_code == 0, res.output
    im = Image.open(png).convert("L")
    assert im.size == (1100, 600)
    assert len(im.histogram()) == 256 and sum(1 for c in im.histogram() if c) > 20  # real content, not blank
