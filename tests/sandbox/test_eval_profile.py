"""The sandbox's evaluation profile (`Sandbox(profile="eval")`): what evalplus lets a solution do (import numpy,
start a thread) with every OS layer of the default profile kept: no fork, no exec, nothing of the host but the
interpreter and numpy's folder. The default (training) profile still refuses threads and numpy."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import populora
from populora.sandbox import EVAL_THREADS, Sandbox

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the namespace layers need root (as in CI)")

THREAD = (
    "import threading\ndef f():\n    box = []\n    t = threading.Thread(target=lambda: box.append(7))\n"
    "    t.start()\n    t.join()\n    return box\n"
)
SRC = Path(populora.__file__).resolve()


@pytest.fixture(scope="module")
def evalbox(eval_sandbox: Sandbox) -> Sandbox:
    return eval_sandbox


def test_every_os_layer_is_kept_and_the_grants_are_reported(evalbox: Sandbox) -> None:
    assert all(evalbox.isolation.values()), evalbox.isolation
    assert evalbox.grants["threads"] == EVAL_THREADS
    assert any(Path(r).name == "numpy" for r in evalbox.grants["import_roots"])


def test_numpy_imports_with_its_lazily_loaded_submodules(evalbox: Sandbox) -> None:
    prog = (
        "import numpy as np\ndef f():\n    a = np.linalg.inv(np.eye(2) * 2).sum() + np.fft.fft([1, 2]).real.sum()\n"
        "    r = np.random.default_rng(0).random()\n"
        "    return float(a), 0 <= r < 1, float(np.polynomial.Polynomial([1, 2])(2)), int(np.ma.array([1, 2]).sum())"
    )
    out = evalbox.run(prog, "f()")
    assert (out.status, out.value_repr) == ("ok", "(3.0, True, 5.0, 3)"), out


def test_a_thread_starts_and_joins(evalbox: Sandbox) -> None:
    out = evalbox.run(THREAD, "f()")
    assert (out.status, out.value_repr) == ("ok", "[7]"), out


def test_a_thread_left_running_dies_with_its_job(evalbox: Sandbox) -> None:
    spin = (
        "import threading\ndef f():\n    threading.Thread(target=lambda: [0 for _ in iter(int, 1)]).start()\n"
    )
    assert evalbox.run(spin + "    return 1\n", "f()").status == "ok"
    # The supervisor kills the job's process (threads included) before the next job: no process of the job
    # uid is left (a job sees only processes of its own uid, hidepid=2), so the next job sees only itself.
    out = evalbox.run("import os\n", "len([p for p in os.listdir('/proc') if p.isdigit()])")
    assert (out.status, out.value_repr) == ("ok", "1"), out


def test_the_thread_limit_is_the_profiles(evalbox: Sandbox) -> None:
    out = evalbox.run("import resource\n", "resource.getrlimit(resource.RLIMIT_NPROC)")
    assert out.value_repr == f"({EVAL_THREADS}, {EVAL_THREADS})", out


@pytest.mark.parametrize(
    "name,program",
    [
        ("fork", "import os\ndef f():\n    return os.fork()"),
        ("subprocess", "import subprocess\ndef f():\n    return subprocess.run(['id']).returncode"),
        (
            "multiprocessing",
            "import multiprocessing\ndef f():\n    multiprocessing.Process(target=print).start()",
        ),
        ("exec", "import os\ndef f():\n    os.execv('/bin/sh', ['sh', '-c', 'true'])"),
        # clone(SIGCHLD) through the raw syscall: a new process, refused by the per-job filter (EAGAIN = 11)
        (
            "raw_clone",
            "import ctypes\ndef f():\n    libc = ctypes.CDLL(None, use_errno=True)\n"
            "    r = libc.syscall(56, 17, 0, 0, 0, 0)\n    if r == 0:\n        libc.syscall(60, 0)\n"
            "    return r, ctypes.get_errno()",
        ),
    ],
)
def test_no_new_process_and_no_exec(evalbox: Sandbox, name: str, program: str) -> None:
    if name == "raw_clone" and os.uname().machine != "x86_64":
        pytest.skip("syscall numbers for x86_64")
    out = evalbox.run(program, "f()")
    if name == "raw_clone":
        assert out.value_repr == "(-1, 11)", out
    else:
        assert out.status == "error" and out.error_type in ("BlockingIOError", "PermissionError"), out


@pytest.mark.parametrize(
    "path",
    [
        "/etc/passwd",
        str(SRC),  # the project's source
        str(SRC.parent / "evaluate" / "data"),  # the benchmark data shipped in the package
        "/work",
    ],
)
def test_nothing_else_of_the_host_is_readable(evalbox: Sandbox, path: str) -> None:
    prog = "import os\ndef f(p):\n    return os.listdir(p) if os.path.isdir(p) else open(p).read(10)"
    out = evalbox.run(prog, f"f({path!r})")
    assert out.status == "error" and out.error_type in ("FileNotFoundError", "PermissionError"), out


def test_site_packages_shows_numpy_only(evalbox: Sandbox) -> None:
    # The folder numpy was found in, as the job sees it (a host path under /tmp is bound elsewhere).
    prog = "import os\nimport numpy\nSITE = os.path.dirname(numpy.__path__[0])\n"
    out = evalbox.run(prog, "os.listdir(SITE)")
    assert out.status == "error" and out.error_type == "PermissionError", out  # traversable, not listable
    out = evalbox.run(prog, "os.path.exists(SITE + '/torch'), os.path.exists(SITE + '/numpy')")
    assert out.value_repr == "(False, True)", out


def test_the_default_profile_still_refuses_threads_and_numpy(sandbox: Sandbox) -> None:
    assert sandbox.grants == {"threads": 0, "import_roots": []}
    out = sandbox.run(THREAD, "f()")
    assert (out.status, out.error_type) == ("error", "RuntimeError"), out
    out = sandbox.run("def f():\n    import numpy\n", "f()")
    assert (out.status, out.error_type) == ("error", "ModuleNotFoundError"), out
    out = sandbox.run("import resource\n", "resource.getrlimit(resource.RLIMIT_NPROC)")
    assert out.status != "ok" or out.value_repr == "(0, 0)", out


def test_bad_profile_options_are_named() -> None:
    with pytest.raises(ValueError, match="profile"):
        Sandbox(workers=1, profile="evaluation")
    with pytest.raises(ValueError, match="not installed"):
        Sandbox(workers=1, import_packages=("no_such_package_populora",))
    with pytest.raises(ValueError, match="top-level"):
        Sandbox(workers=1, import_packages=("numpy.linalg",))


def test_cli_isolation_shows_the_eval_profile() -> None:
    import json

    from typer.testing import CliRunner

    from populora.cli import app

    res = CliRunner().invoke(app, ["sandbox", "isolation", "--profile", "eval"])
    assert res.exit_code == 0, res.output
    info = json.loads(res.output[res.output.index("{") :])
    assert info["profile"] == "eval" and info["grants"]["threads"] == EVAL_THREADS
    assert info["isolation"]["syscall_filter"] and info["isolation"]["minimal_root"]
