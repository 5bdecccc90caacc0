"""Issue 29: no job can take the pool down or learn about the host from /proc, and `plain` never vouches for a
repr the value no longer has. Real sandbox throughout."""

from __future__ import annotations

import ast

import pytest

from populora.config import ConfigError, load_config
from populora.sandbox import Limits, Sandbox
from populora.sandbox.contract import LIMIT_MAX

SPOOF = "class SandboxSetupError(Exception):\n    pass\ndef f():\n    raise SandboxSetupError('fake')\n"


def test_a_job_raising_its_own_sandbox_setup_error_does_not_restart_the_worker(sandbox: Sandbox) -> None:
    before = sandbox.restarts
    outs = sandbox.run_many([(SPOOF, "f()")] * 40)
    assert {(o.status, o.error_type) for o in outs} == {("error", "SandboxSetupError")}
    assert sandbox.restarts == before  # 43 restarts for these 40 jobs before issue 29


def test_a_2000_deep_directory_chain_in_tmp_does_not_break_the_cleaner(sandbox: Sandbox) -> None:
    deep = "import os\ndef f():\n    for _ in range(2000):\n        os.mkdir('d')\n        os.chdir('d')\n    return 1\n"
    before = sandbox.restarts
    outs = sandbox.run_many([(deep, "f()")] * 3 + [("import os\n", "os.listdir('/tmp')")] * 2)
    assert [o.value_repr for o in outs] == ["1", "1", "1", "[]", "[]"], outs
    assert sandbox.restarts == before


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("memory_mb", 2**50),
        ("timeout_s", 1e300),
        ("cpu_s", 1e9),
        ("file_mb", 1e12),
        ("tmp_mb", 10**7),
        ("nofile", 10**9),
        ("max_output_chars", 10**12),
        ("max_stdout_chars", 10**12),
    ],
)
def test_limits_beyond_their_upper_bound_are_refused_with_the_range(field: str, value: float) -> None:
    with pytest.raises(ValueError, match=rf"{field} must be at most {LIMIT_MAX[field]}, got"):
        Limits(**{field: value})


def test_the_upper_bounds_themselves_are_accepted() -> None:
    Limits(**LIMIT_MAX)


def test_sandbox_workers_is_bounded_in_the_config(tmp_path) -> None:
    with pytest.raises(ConfigError, match=r"sandbox.workers: must be in \[1, 256\].*1000000"):
        load_config("tiny", ["sandbox.workers=1000000"])
    with pytest.raises(ValueError, match="between 1 and 256"):
        Sandbox(workers=1_000_000)


PROC = """
import os
def read(path):
    try:
        with open(path, 'rb') as fh:
            return fh.read().decode(errors='replace')
    except OSError as e:
        return type(e).__name__
def f():
    return {
        'pids': sorted(p for p in os.listdir('/proc') if p.isdigit()),
        'me': str(os.getpid()),
        'init_cmdline': read('/proc/1/cmdline'),
        'init_environ': read('/proc/1/environ'),
        'parent_cmdline': read(f'/proc/{os.getppid()}/cmdline') if os.getppid() else '',
        'self_cmdline': read('/proc/self/cmdline'),
        'mountinfo': read('/proc/self/mountinfo'),
        'boot_id': read('/proc/sys/kernel/random/boot_id'),
        'loadavg': read('/proc/loadavg'),
        'uptime': read('/proc/uptime'),
        'kernel_cmdline': read('/proc/cmdline'),
        'hostname': os.uname().nodename,
    }
"""


def test_proc_shows_a_job_nothing_of_the_host_beyond_its_own_process(sandbox: Sandbox) -> None:
    if not (sandbox.isolation["pidns"] and sandbox.isolation["uid_drop"]):
        pytest.skip("needs the PID namespace and the uid drop")
    out = sandbox.run(PROC, "f()")
    assert out.status == "ok", out
    seen = ast.literal_eval(out.value_repr)
    assert seen["pids"] == [seen["me"]]  # not the supervisor (1) nor the template
    assert seen["init_cmdline"] == seen["init_environ"] == "FileNotFoundError"
    assert seen["parent_cmdline"] in ("", "FileNotFoundError")
    assert seen["self_cmdline"].rstrip("\0") == "populora-sandbox"  # no script path, no configuration
    assert seen["boot_id"] == seen["loadavg"] == seen["uptime"] == seen["kernel_cmdline"] == ""
    assert seen["hostname"] == "sandbox"
    for secret in ("/work", "populora/sandbox", "import_roots", "preload", "/home"):
        assert not any(secret in str(v) for v in seen.values()), (secret, seen)


MUTATOR = """
HOLDER = []
class Liar:
    def __repr__(self):
        HOLDER[0] = 5        # the value becomes plain while its repr says something else
        return '7'
def f():
    HOLDER.append(Liar())
    return HOLDER
"""


def test_plain_never_describes_a_value_that_changed_during_repr(sandbox: Sandbox) -> None:
    out = sandbox.run(MUTATOR, "f()")
    assert (out.status, out.value_repr) == ("ok", "[7]"), out
    assert out.plain is False  # the list is [5] now: '[7]' does not describe it
    honest = sandbox.run("def f():\n    return [5]\n", "f()")
    assert (honest.value_repr, honest.plain) == ("[5]", True)
