"""Shared test settings: deterministic, thread-safe CPU runs, the benchmark/seed data root and a headless Chromium."""

import os
import shutil
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pytest  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The data root every reader uses: $POPULORA_DATA_DIR if set, else the copy shipped in the package."""
    from populora.data import resolve_data_dir

    return resolve_data_dir()


@pytest.fixture(scope="session")
def model_name(tmp_path_factory) -> str:
    """'tiny' when the bundled model resolves, else a random Qwen2 saved to a temp folder."""
    if os.environ.get("POPULORA_TEST_MODEL"):
        return os.environ["POPULORA_TEST_MODEL"]
    from populora.engine import EngineError, resolve_model

    try:
        resolve_model("tiny")
        return "tiny"
    except EngineError:
        from populora.engine.testing import random_model

        model, tok = random_model(seed=0)
        path = Path(tmp_path_factory.mktemp("model"))
        model.save_pretrained(path)
        tok.save_pretrained(path)
        return str(path)


# ------------------------------------------------------------------ a headless Chromium (the report and the docs site)

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")


@pytest.fixture(scope="module")
def chromium_window() -> tuple[int, int]:
    """The Chromium window's width and height in pixels; a test module overrides this fixture for another size."""
    return (1100, 900)  # a laptop-sized window: the docs' config table's key column is narrow there


@pytest.fixture(scope="module")
def chromium_driver(chromium_window):
    """A headless Chromium under selenium, one per test module, with the browser's console log kept
    (`drv.get_log("browser")`). Skips where chromium/chromedriver (`make system-deps`) or selenium (the dev
    extra) is missing."""
    if not CHROMIUM or not CHROMEDRIVER:
        pytest.skip("chromium/chromedriver not installed (`make system-deps` installs them as root)")
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is in the dev extra")
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    width, height = chromium_window
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        f"--window-size={width},{height}",
    ):
        opts.add_argument(arg)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    drv = webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)
    drv.set_page_load_timeout(60)
    yield drv
    drv.quit()


# ------------------------------------------------------------------ parallel runs (`make test` uses pytest-xdist)
#
# `pytest -n 2` hands out whole test files, never single tests: a file's module-scoped fixtures (a trained run
# folder, a model, a sandbox pool) are then built once, by the one worker that runs the file. Two exceptions:
# - tests/dist is one unit: its tests share one local Ray cluster (2 CPUs), and two clusters at once would
#   only compete for the same two cores;
# - the units known to be long go out first (SLOW_FIRST), so that no long file starts last and runs alone.
# Without -n none of this is used and the tests run in file order, as before.

#: Path prefixes of the units that take longest on 2 cores (measured with --durations), longest first.
SLOW_FIRST = (
    "tests/dist/",
    "tests/e2e/test_kill_resume.py",
    "tests/e2e/",
    "tests/train/",
    "tests/experiment/",
    "tests/bench/",
)
#: Folders run as one unit (one worker, one after another).
ONE_UNIT = ("tests/dist/",)


def _unit(nodeid: str) -> str:
    for folder in ONE_UNIT:
        if nodeid.startswith(folder):
            return folder
    return nodeid.split("::", 1)[0]


def _rank(nodeid: str) -> int:
    return next((i for i, p in enumerate(SLOW_FIRST) if nodeid.startswith(p)), len(SLOW_FIRST))


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    from xdist.scheduler import LoadScopeScheduling

    class FileScheduling(LoadScopeScheduling):
        """xdist's per-scope scheduling with a file (or ONE_UNIT folder) as the scope, slow units first."""

        def __init__(self, config, log=None):
            super().__init__(config, log)
            config.option.loadscopereorder = False  # keep the order given below, not "most tests first"

        def _split_scope(self, nodeid: str) -> str:
            return _unit(nodeid)

        def _assign_work_unit(self, node):
            # the queue, not the collection (whose positions the workers' items are addressed by), is sorted:
            # stable, so file order within a rank
            for scope in sorted(self.workqueue, key=_rank):
                self.workqueue.move_to_end(scope)
            super()._assign_work_unit(node)

    return FileScheduling(config, log)
