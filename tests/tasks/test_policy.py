"""The capability policy, including AZR bug B3 (the banned-import check was bypassable)."""

import pytest

from populora.tasks.policy import DEFAULT_DENY_MODULES, CapabilityPolicy, parse_program

OK = "def f(x):\n    return x\n"


@pytest.mark.parametrize(
    "src,reason",
    [
        ("import os\n" + OK, "forbidden import: os"),
        ("import os.path\n" + OK, "forbidden import: os.path"),
        ("from os import path\n" + OK, "forbidden import: os"),
        ("import sys\n" + OK, "forbidden import: sys"),
        ("import shutil as s\n" + OK, "forbidden import: shutil"),
        ("import subprocess\n" + OK, "forbidden import: subprocess"),
        ("from concurrent.futures import ThreadPoolExecutor\n" + OK, "forbidden import: concurrent.futures"),
        ("def f(x):\n    import random\n    return random.random()", "forbidden import: random"),
        ("def f(x):\n    return __import__('subprocess')", "forbidden name: __import__"),
        ("def f(x):\n    return eval('1')", "forbidden name: eval"),
        ("def f(x):\n    exec('y = 1')\n    return x", "forbidden name: exec"),
        ("def f(x):\n    return open('/etc/passwd').read()", "forbidden name: open"),
        ("def f(x):\n    return globals()", "forbidden name: globals"),
        ("def f(x):\n    return ().__class__.__base__.__subclasses__()", "forbidden attribute: "),
        ("def f(x):\n    return f.__globals__", "forbidden attribute: __globals__"),
        ("def f(x):\n    return getattr(x, '__cl' + 'ass__')", "forbidden call: getattr"),
        ("def f(x):\n    return getattr(x, '__class__')", "forbidden attribute: __class__"),
        (
            "def f(x):\n    import importlib\n    return importlib.import_module('os')",
            "forbidden import: importlib",
        ),
        ("from . import x\n" + OK, "forbidden import: relative import"),
        ("import datetime\n" + OK, "forbidden import: datetime"),
        ("from time import time\n" + OK, "forbidden import: time"),
    ],
)
def test_policy_rejects_capabilities(src, reason):
    tree, why = parse_program(src)
    assert tree is None and why is not None and why.startswith(reason), why


@pytest.mark.parametrize(
    "src",
    [
        OK,
        "import math\nfrom collections import Counter, defaultdict\n" + OK,
        # AZR bug B5: classes with methods and nested helpers are allowed, despite its single-def rule
        "class Acc:\n    def __init__(self):\n        self.t = 0\n    def add(self, v):\n        self.t += v\n"
        "def f(xs):\n    def g(v):\n        return v * 2\n    a = Acc()\n    for x in xs:\n        a.add(g(x))\n"
        "    return a.t",
        "def f(input):\n    return getattr(input, 'real')",
    ],
)
def test_policy_allows_plain_programs(src):
    tree, why = parse_program(src)
    assert why is None and tree is not None


@pytest.mark.parametrize(
    "src,reason",
    [
        ("", "empty program"),
        ("def g(x):\n    return x", "no top-level function f"),
        ("def f(:", "syntax error"),
        ("x = 1", "no top-level function f"),
        ("def f(x)\n  return", "syntax error"),
        ("(" * 300, "syntax error"),
    ],
)
def test_parse_program_shape(src, reason):
    assert parse_program(src)[1].startswith(reason)


def test_require_params_and_configurable_deny_list():
    assert parse_program("def f():\n    return 1", require_params=True)[1] == "f takes no parameters"
    assert {
        "os",
        "sys",
        "subprocess",
        "socket",
        "shutil",
        "threading",
        "multiprocessing",
        "random",
        "time",
        "datetime",
    } <= DEFAULT_DENY_MODULES
    strict = CapabilityPolicy(deny_modules=DEFAULT_DENY_MODULES | {"math"})
    assert parse_program("import math\n" + OK, strict)[1] == "forbidden import: math"
    lax = CapabilityPolicy(deny_modules=frozenset(), allow_modules=None)
    assert parse_program("import os\n" + OK, lax)[1] is None
