"""Task families as plugins: the registry, the config key, `populora tasks list`, and the guarded sandbox."""

import pytest
from typer.testing import CliRunner

from populora import tasks
from populora.config import ConfigError, load_config
from populora.sandbox import Limits, Sandbox
from populora.tasks import registry
from populora.tasks.family import FamilyTask, TaskFamily
from populora.tasks.guard import POLICY_VIOLATION, GuardedSandbox, clamp_limits


@pytest.fixture(scope="module")
def sandbox():
    sb = Sandbox(workers=1)
    yield sb
    sb.close()


def test_builtin_families_are_installed_and_azr_is_the_old_tasks():
    found = registry.installed()
    assert found["azr"].task_types == ("code_i", "code_o", "code_f") and found["azr"].source == "populora"
    assert found["arith"].task_types == ("arith",) and found["arith"].ok
    assert found["lists"].task_types == ("lists",) and found["lists"].ok
    azr = registry.get_family("azr")
    # the AZR family hands out the very objects `tasks.get` always did: unchanged behaviour
    for t in ("code_i", "code_o", "code_f"):
        assert azr.task(t) is tasks.get(t) and type(tasks.get(t)).__module__ == "populora.tasks.base"
    from populora.pretrain.probe import load_probe

    assert [p.id for p in azr.probe_items("code_f")] == [p.id for p in load_probe("code_f")]
    assert isinstance(tasks.get("arith"), registry.GuardedTask)
    # a default run keeps exactly AZR's buffers; another family's types come after them
    assert registry.buffer_types(["azr"]) == ("code_i", "code_o", "code_f")
    assert registry.buffer_types(["arith"]) == ("code_i", "code_o", "code_f", "arith")


def test_problems_and_buffers_accept_installed_types_only():
    from populora.tasks.buffers import ProblemBuffer

    p = tasks.Problem("arith", "def f():\n    return 1 + 1\n", ("",), ("2",))
    assert tasks.Problem.from_json(p.to_json()) == p
    assert ProblemBuffer("arith").add(p)
    with pytest.raises(ValueError, match="unknown task 'code_x'"):
        tasks.Problem("code_x", "def f():\n    return 1\n", ("",), ("1",))
    with pytest.raises(ValueError, match="unknown task"):
        ProblemBuffer("code_x")


def test_config_selects_families_by_name():
    assert load_config("tiny").tasks.families == ["azr"]  # the default: behaviour unchanged
    cfg = load_config("tiny", ["tasks.families=azr,arith", "tasks.types=code_o,arith"])
    assert cfg.tasks.types == ["code_o", "arith"]
    with pytest.raises(ConfigError) as err:
        load_config("tiny", ["tasks.families=azr,nope"])
    msg = str(err.value)
    assert "\n" not in msg and "unknown task family 'nope'" in msg and "installed: azr, arith" in msg
    with pytest.raises(ConfigError, match="'arith' is not a task type of tasks.families"):
        load_config("tiny", ["tasks.types=code_o,arith"])  # its family is not selected


def test_tasks_list_shows_name_types_and_package():
    from populora.cli import app

    r = CliRunner().invoke(app, ["tasks", "list"])
    assert r.exit_code == 0, r.output
    rows = {line.split()[0]: line.split() for line in r.output.splitlines()[1:]}
    assert rows["azr"][1:3] == ["code_i,code_o,code_f", "populora"]
    assert rows["arith"][1:3] == ["arith", "populora"]
    assert rows["lists"][1:3] == ["lists", "populora"]


class _Evil(FamilyTask):
    """A plugin task that tries to run an escape in the sandbox it is handed, and to loosen its limits."""

    name = "evil"

    def validate(self, proposals, sandbox):
        self.limits_seen = clamp_limits(Limits(timeout_s=30.0, memory_mb=4096), sandbox.limits)
        return sandbox.run_many(
            [
                ("import os\ndef f():\n    return os.getcwd()\n", "f()"),
                ("def f():\n    return 1\n", "__import__('os').getcwd()"),
                ("def f():\n    return 1\n", "f().__class__"),
                ("def f():\n    return 2\n", "f()"),
            ],
            limits=Limits(timeout_s=30.0, memory_mb=4096),
        )


class _EvilFamily(TaskFamily):
    name = "evil"
    task_types = ("evil",)


def test_a_plugin_task_only_reaches_the_sandbox_through_the_policy(sandbox):
    outs = registry.GuardedTask(_Evil()).validate([], sandbox)
    assert [o.error_type for o in outs[:3]] == [POLICY_VIOLATION] * 3
    assert "os" in outs[0].error_message and "__import__" in outs[1].error_message
    assert outs[3].ok and outs[3].value_repr == "2"  # allowed jobs run, in the run's sandbox
    # a family may tighten the limits, never loosen them
    base = Limits(timeout_s=5.0, memory_mb=512)
    assert clamp_limits(Limits(timeout_s=30.0, memory_mb=4096), base) == base
    assert clamp_limits(Limits(timeout_s=1.0, memory_mb=4096), base).timeout_s == 1.0
    assert not hasattr(GuardedSandbox(sandbox), "sandbox")


def test_broken_or_clashing_plugins_are_listed_not_loaded(monkeypatch):
    fake = [
        ("evil", "x:EvilFamily", "evil-pkg", lambda: _EvilFamily),
        ("azr", "x:Fake", "fake-pkg", lambda: _EvilFamily),  # takes a built-in's name
        (
            "grab",
            "x:Grab",
            "grab-pkg",
            lambda: type("Grab", (TaskFamily,), {"name": "grab", "task_types": ("code_o",)}),
        ),
        ("crash", "x:Crash", "crash-pkg", lambda: 1 / 0),
    ]
    monkeypatch.setattr(registry, "_entry_points", lambda: iter(fake))
    try:
        found = registry.installed(refresh=True)
        assert found["evil"].ok and found["evil"].source == "evil-pkg"
        assert "built-in" in found["azr@fake-pkg"].error and found["azr"].source == "populora"
        assert "belongs to family 'azr'" in found["grab"].error
        assert "ZeroDivisionError" in found["crash"].error
        with pytest.raises(registry.FamilyError, match="broken"):
            registry.get_family("crash")
    finally:
        monkeypatch.undo()
        registry.installed(refresh=True)
