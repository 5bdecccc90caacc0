"""The sandbox contract: exact reprs, statuses, order kept, limits, imports, stdout, isolation report."""

from __future__ import annotations

import ast
import os

import pytest

from populora.sandbox import DEFAULT_PRELOAD, LAZY_MODULES, STATUSES, Limits, Outcome, Sandbox
from populora.sandbox.values import parse_value

VALUES = [
    ("3", 3),
    ("-7", -7),
    ("2**100", 2**100),
    ("0.1 + 0.2", 0.1 + 0.2),
    ("1e300 * 10", 1e301),
    ("-0.0", -0.0),
    ("'a\\'b\"c\\n'", "a'b\"c\n"),
    ("'é ✓'", "é ✓"),
    ("[1, [2, (3,)]]", [1, [2, (3,)]]),
    ("{'k': {1: None}, 2: [True, False]}", {"k": {1: None}, 2: [True, False]}),
    ("{3, 1, 2}", {1, 2, 3}),
    ("()", ()),
    ("(1,)", (1,)),
    ("set()", set()),
    ("{}", {}),
    ("None", None),
    ("True", True),
    ("b'\\x00ab'", b"\x00ab"),
    ("3+4j", 3 + 4j),
    ("frozenset({1, 2})", frozenset({1, 2})),
]


def test_reprs_are_exact_and_parse_back(sandbox: Sandbox) -> None:
    outs = sandbox.run_many([("", expr) for expr, _ in VALUES])
    for (expr, want), out in zip(VALUES, outs, strict=True):
        assert out.status == "ok", (expr, out)
        assert out.value_repr == repr(want), expr
        got = parse_value(out.value_repr)
        assert got == want and type(got) is type(want), expr
        assert out.plain, expr


def test_non_plain_values_are_flagged(sandbox: Sandbox) -> None:
    prog = "class Liar(int):\n    def __repr__(self):\n        return '42'\nclass A:\n    pass\n"
    lie, obj, inf = sandbox.run_many([(prog, "Liar(1)"), (prog, "[A]"), ("", "[float('inf'), float('nan')]")])
    assert (lie.status, lie.value_repr, lie.plain) == ("ok", "42", False)
    assert obj.status == "ok" and not obj.plain and "class" in obj.value_repr
    assert (inf.value_repr, inf.plain) == ("[inf, nan]", True)


def test_program_and_call_semantics(sandbox: Sandbox) -> None:
    prog = "import math\nfrom collections import Counter\n\ndef f(a, b='x'):\n    return math.gcd(a, 12), b * 2\n"
    out = sandbox.run(prog, "f(8, 'a')")
    assert (out.status, out.value_repr, out.error_type) == ("ok", "(4, 'aa')", None)
    assert out.elapsed_s > 0
    assert sandbox.run("if __name__ == '__main__':\n    X = 5\n", "X").value_repr == "5"


def test_errors_carry_the_exception_type(sandbox: Sandbox) -> None:
    outs = sandbox.run_many(
        [
            ("def f(x):\n    return 1 / x", "f(0)"),
            ("def f(:\n", "f()"),
            ("def f():\n    return 1", "g()"),
            ("class Custom(Exception):\n    pass\ndef f():\n    raise Custom('no')", "f()"),
            ("def f():\n    return f()", "f()"),
            ("def f():\n    return input()", "f()"),
        ]
    )
    assert [(o.status, o.error_type) for o in outs] == [
        ("error", "ZeroDivisionError"),
        ("error", "SyntaxError"),
        ("error", "NameError"),
        ("error", "Custom"),
        ("error", "RecursionError"),
        ("error", "EOFError"),
    ]
    assert outs[3].error_message == "Custom: no"
    assert all(o.value_repr is None for o in outs)


def test_run_many_keeps_order_with_mixed_outcomes(sandbox: Sandbox) -> None:
    slow = ("import time\ndef f(x):\n    time.sleep(0.3)\n    return x", "f({})")
    fast = ("def f(x):\n    return x * 10", "f({})")
    jobs = [(p, c.format(i)) for i in range(40) for p, c in [slow if i % 13 == 0 else fast]]
    jobs[5] = ("def f():\n    raise ValueError", "f()")
    outs = sandbox.run_many(jobs)
    assert len(outs) == 40
    for i, out in enumerate(outs):
        if i == 5:
            assert out.error_type == "ValueError"
        else:
            assert out.value_repr == str(i if i % 13 == 0 else i * 10)
    assert sandbox.run_many([]) == []


def test_reprs_of_sets_and_hashes_are_reproducible_across_workers(sandbox: Sandbox) -> None:
    prog = "def f():\n    return {'pear', 'apple', 'fig', 'kiwi', 'plum'}, hash('abc')"
    outs = sandbox.run_many([(prog, "f()")] * 12)
    assert len({o.value_repr for o in outs}) == 1


def test_every_preloaded_and_lazy_module_imports_in_a_job(sandbox: Sandbox) -> None:
    names = [m for m in DEFAULT_PRELOAD + LAZY_MODULES if not m.startswith("_")]
    prog = "".join(f"import {m}\n" for m in names)
    out = sandbox.run(
        prog + "def f():\n    return math.comb(5, 2), statistics.mean([1, 2, 3]), queue.Queue().qsize()",
        "f()",
    )
    assert (out.status, out.value_repr) == ("ok", "(10, 2, 0)")
    assert set(DEFAULT_PRELOAD) <= set(sandbox.preloaded)
    # A lazy module is imported only for the jobs that name it, and is then seeded afresh like any import.
    rand = sandbox.run_many([("import random\n", "random.random()")] * 2)
    assert rand[0].status == "ok" and rand[0].value_repr != rand[1].value_repr
    assert (
        sandbox.run("import sys\n", "'random' in sys.modules or 'threading' in sys.modules").value_repr
        == "False"
    )
    # Lazily loaded parts of the stdlib that model programs reach: strptime, Counter.most_common, codecs.
    out = sandbox.run(
        "import datetime, collections\n",
        "(datetime.datetime.strptime('2024-01-02', '%Y-%m-%d')"
        ".day, collections.Counter('abca').most_common(1), 'é'.encode('latin-1'))",
    )
    assert out.value_repr == "(2, [('a', 2)], b'\\xe9')", out


def test_stdout_is_captured_and_bounded(sandbox: Sandbox) -> None:
    out = sandbox.run("print('hello')\nimport sys\nprint('err', file=sys.stderr)", "1")
    assert out.stdout == "hello\nerr\n" and out.value_repr == "1"
    out = sandbox.run("for i in range(100000):\n    print(i)", "'done'", Limits(max_stdout_chars=50))
    assert out.status == "ok" and out.value_repr == "'done'" and len(out.stdout) == 50


def test_output_limit_rejects_never_truncates(sandbox: Sandbox) -> None:
    lim = Limits(max_output_chars=10)
    ok, over = sandbox.run_many([("", "'x' * 8"), ("", "'x' * 9")], limits=lim)
    assert (ok.status, ok.value_repr) == ("ok", "'xxxxxxxx'")
    assert (over.status, over.value_repr, over.error_type) == ("output_limit", None, "OutputLimit")


def test_limits_apply_per_call(sandbox: Sandbox) -> None:
    out = sandbox.run("import time\n", "time.sleep(2)", Limits(timeout_s=0.3))
    assert out.status == "timeout" and 0.3 <= out.elapsed_s < 3.0
    out = sandbox.run("", "len(bytearray(150 * 2**20))", Limits(memory_mb=100))
    assert out.status == "memory"
    assert sandbox.run("", "len(bytearray(150 * 2**20))", Limits(memory_mb=400)).value_repr == str(
        150 * 2**20
    )


def test_limits_validate() -> None:
    with pytest.raises(ValueError, match="timeout_s"):
        Limits(timeout_s=0)
    with pytest.raises(ValueError, match="memory_mb"):
        Limits(memory_mb=1)
    with pytest.raises(ValueError, match="max_output_chars"):
        Limits(max_output_chars=0)
    with pytest.raises(ValueError, match="workers"):
        Sandbox(workers=0)


def test_outcome_contract() -> None:
    o = Outcome(status="ok", value_repr="1", error_type=None, elapsed_s=0.5)
    assert o.ok and set(STATUSES) == {"ok", "error", "timeout", "memory", "output_limit", "crashed"}
    assert o.to_dict()["value_repr"] == "1"


def test_isolation_report(sandbox: Sandbox, is_root: bool) -> None:
    iso = sandbox.isolation
    assert {"netns", "mountns_readonly_root", "private_tmp", "uid_drop", "rlimits"} <= set(iso)
    assert iso["rlimits"] and iso["clean_env"]
    if is_root:  # the machines this project runs on (sandbox-notes.md): every layer is available
        assert all(iso.values()), iso
    out = sandbox.run("import os\n", "(os.getuid(), os.getcwd(), os.listdir('.'), sorted(os.environ))")
    uid, cwd, listing, env = ast.literal_eval(out.value_repr)
    assert listing == [] and "PYTHONHASHSEED" not in env and env == ["HOME", "LANG", "PATH", "TMPDIR"]
    if iso["uid_drop"]:
        assert uid == 65534 and cwd == "/tmp"


def test_workers_are_fresh_interpreters_even_after_torch(is_root: bool) -> None:
    import torch  # noqa: F401  (the trainer has imported torch when it creates its Sandbox)

    with Sandbox(workers=2) as sb:
        assert sb.run("", "6 * 7").value_repr == "42"
        for pid in sb.worker_pids:
            with open(f"/proc/{pid}/maps") as fh:
                maps = fh.read()
            assert "torch" not in maps  # a fork of this process would have libtorch mapped
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                argv = fh.read().split(b"\0")
            exe = argv[0].decode()
            assert os.path.realpath(exe) == exe and "shims" not in exe


def test_bad_job_arguments_are_refused_in_the_caller(sandbox: Sandbox) -> None:
    with pytest.raises(TypeError, match="pairs"):
        sandbox.run_many([("def f(): pass", None)])  # type: ignore[list-item]
    with pytest.raises(TypeError, match="pairs"):
        sandbox.run_many(["f()"])  # type: ignore[list-item]


def test_without_namespaces_jobs_still_get_fresh_directories_and_limits() -> None:
    with Sandbox(workers=1, isolate=False) as sb:
        assert not sb.isolation["netns"] and not sb.isolation["uid_drop"] and sb.isolation["rlimits"]
        first, second = sb.run_many(
            [
                ("open('x', 'w').write('hi')\nimport os\n", "(os.getcwd(), os.listdir('.'))"),
                ("import os\n", "(os.getcwd(), os.listdir('.'))"),
            ]
        )
        d1, files1 = ast.literal_eval(first.value_repr)
        d2, files2 = ast.literal_eval(second.value_repr)
        assert files1 == ["x"] and files2 == [] and d1 != d2
        assert not os.path.exists(d1)  # removed after the job
        assert sb.run("import time\n", "time.sleep(5)", Limits(timeout_s=0.3)).status == "timeout"


def test_cli_run_prints_the_outcome_as_json(tmp_path) -> None:
    import json

    from typer.testing import CliRunner

    from populora.cli import app

    prog = tmp_path / "prog.py"
    prog.write_text("def f(x):\n    print('hi')\n    return [x, x]\n")
    res = CliRunner().invoke(app, ["sandbox", "run", str(prog), "--call", "f(2)", "--timeout", "3"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert (out["status"], out["value_repr"], out["stdout"], out["plain"]) == ("ok", "[2, 2]", "hi\n", True)
    res = CliRunner().invoke(app, ["sandbox", "run", str(tmp_path / "missing.py"), "--call", "f(2)"])
    assert res.exit_code == 2 and "not a file" in res.output
