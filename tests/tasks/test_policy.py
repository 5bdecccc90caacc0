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


# Issue 13, item 3: the policy is an allow-list; the deny-list bypasses through allowed modules are rejected.
@pytest.mark.parametrize(
    "src",
    [
        "import collections\ndef f(x):\n    return collections._sys.modules['os'].getcwd()",
        "import typing\ndef f(x):\n    return typing.sys.modules",
        "import dataclasses\ndef f(x):\n    return dataclasses.inspect.stack()",
        "import codecs\ndef f(x):\n    return codecs.open('/etc/passwd').read()",
        "import codecs\ndef f(x):\n    return codecs.builtins.exec('1')",
        "import operator\ndef f(x):\n    return operator.attrgetter('__cl' + 'ass__')(x)",
        "import operator\ndef f(x):\n    return operator.attrgetter('__class__')(x)",
        "import operator\ndef f(x):\n    return operator.attrgetter('real.__class__')(x)",
        "from operator import attrgetter\ndef f(x):\n    return attrgetter('__cl' + 'ass__')(x)",
        "from operator import methodcaller\ndef f(x):\n    return methodcaller('__reduce_ex__', 2)(x)",
        "import operator\ndef f(x):\n    g = operator.attrgetter\n    return g('__class__')(x)",
        "import collections as c\ndef f(x):\n    m = c\n    return m._sys",
        "from collections import _sys\ndef f(x):\n    return _sys",
        "from typing import sys\ndef f(x):\n    return sys",
        "from collections import *\ndef f(x):\n    return x",
        "import functools\ndef f(x):\n    return functools.__builtins__",
        "import typing\ndef f(x):\n    return typing.get_type_hints(x)",
        "import string\ndef f(x):\n    return string.Formatter().get_field('0.real', [x], {})",
        "def f(x):\n    g = getattr\n    return g(x, 'real')",
        "def f(x):\n    return '{0.__class__}'.format(x)",
        "def f(x):\n    return input()",
        "def f(x):\n    return dir(x)",
        "def f(x):\n    return random.random()",
        "import pprint\ndef f(x):\n    return x",
        "import uuid\ndef f(x):\n    return uuid.uuid4()",
        "import json\ndef f(x):\n    return json.load(x)",
    ],
)
def test_allow_list_rejects_bypasses(src):
    tree, why = parse_program(src)
    assert tree is None and why and why.startswith("forbidden"), why


@pytest.mark.parametrize(
    "src",
    [
        "import collections\ndef f(x):\n    return collections.Counter(x).most_common(1)",
        "import collections.abc\ndef f(x):\n    return isinstance(x, collections.abc.Sequence)",
        "from collections.abc import Mapping\ndef f(x):\n    return isinstance(x, Mapping)",
        "import operator\ndef f(x):\n    return sorted(x, key=operator.attrgetter('real'))",
        "from operator import itemgetter\ndef f(x):\n    return sorted(x, key=itemgetter(0))",
        "import re, math, itertools, functools, heapq, bisect, string\ndef f(x):\n    return math.gcd(x, 6)",
        "from dataclasses import dataclass\n@dataclass\nclass P:\n    a: int\ndef f(x):\n    return P(x).a",
        "from typing import List\ndef f(x: List[int]) -> int:\n    return sum(x)",
        "def f(x):\n    try:\n        return 1 // x\n    except ZeroDivisionError as e:\n        return str(e)",
        "def f(x):\n    match x:\n        case [a, *rest]:\n            return a, rest\n        case {'k': v, **kw}:\n"
        "            return v\n    return None",
        "def f(x):\n    return id(x) > 0 and hash(7) == 7",
        "def f(input):\n    return [input for _ in range(2)]",
        "def f(x):\n    global seen\n    seen = x\n    return seen",
    ],
)
def test_allow_list_keeps_plain_programs(src):
    tree, why = parse_program(src)
    assert why is None, why


def test_prompt_banned_list_is_consistent_with_the_policy():
    """Every module the prompt names as banned is refused by the policy, and none of them is allowed."""
    from populora.tasks.base import PROMPT_BANNED
    from populora.tasks.policy import DEFAULT_ALLOW_MODULES

    for m in PROMPT_BANNED:
        assert m not in DEFAULT_ALLOW_MODULES
        assert parse_program(f"import {m}\n" + OK)[1].startswith(f"forbidden import: {m}")
    assert not DEFAULT_ALLOW_MODULES & DEFAULT_DENY_MODULES


def test_prompt_states_the_allow_list():
    from populora import tasks

    text = tasks.get("code_o").banned_text()
    assert text.startswith("os, sys") and "only these may be imported: abc, array" in text
    assert "collections" in text and "random" not in text.split("imported:")[1]


# Issue 50, item 2: the rules that keep a program from building code or renaming what it defines hold with the
# allow-lists switched off too (the corpus is tests/sandbox/test_attacks_policy.py).
@pytest.mark.parametrize(
    "src,reason",
    [
        (
            "def f(x):\n    async def g():\n        return 1\n    return g().cr_code",
            "forbidden attribute: cr_code",
        ),
        ("def f(x):\n    return type(f)", "forbidden use of type(x)"),
        ("def f(x):\n    t = type\n    return t('C', (), {})", "forbidden use of type other"),
        ("def f(x):\n    f.__name__ = 'free text'\n    return x", "forbidden store: .__name__"),
        ("import abc\ndef f(x):\n    return abc.ABCMeta('C', (), {})", "forbidden use of abc.ABCMeta"),
    ],
)
def test_code_building_rules_hold_without_the_allow_lists(src, reason):
    lax = CapabilityPolicy(deny_modules=frozenset(), allow_modules=None, allow_names=None)
    for policy in (lax, CapabilityPolicy()):
        tree, why = parse_program(src, policy)
        assert tree is None and why is not None and why.startswith(reason), why
