"""Issue 29, item 2: the capability policy must not hand out `eval`. The three bypasses the issue reproduced, and
cases of our own for each class they belong to (underscore attributes, string annotations, string subscripts
of typing, computed format strings, dunder bindings), each refused by `parse_program` with a reason; the
programs that keep what is legitimate in each class still pass. Where a bypass reached the interpreter, the
real sandbox shows what it would have reached: a process without the host's identity."""

from __future__ import annotations

import os

import pytest

from populora.tasks.policy import parse_program

# The issue's three reproductions, as it gave them.
REPRODUCTIONS = {
    "typing_forward_ref": "import typing\ndef f(x):\n"
    '    return typing.Optional["__imp" + "ort__(\'os\').getuid()"].__args__[0]._evaluate({}, {}, frozenset())',
    "singledispatch_register": "import functools\ndef f(x):\n    @functools.singledispatch\n    def g(a):\n"
    '        return 0\n    def h(a: "__imp" + "ort__(\'os\')"):\n        return 1\n    g.register(h)\n    return x',
    "format_traceback_walk": "def f(x):\n    try:\n        1 / 0\n    except Exception as e:\n"
    '        return ("{0._" + "_traceback_" + "_.tb_frame.f_back.f_locals}").format(e)',
}

# Our own cases, by class: (source, the start of the reason).
CASES = {
    # -- underscore attributes (private helpers and reflection dunders), by every way of naming one
    "getattr_private": ("import typing\ndef f(x):\n    return getattr(typing.get_args(x)[0], '_evaluate')", "forbidden attribute: _evaluate"),
    "attr_private": ("import typing\ndef f(x):\n    return typing.get_args(x)[0]._evaluate(None, None, frozenset())", "forbidden attribute: _evaluate"),
    "attrgetter_private": ("import operator\ndef f(x):\n    return operator.attrgetter('_evaluate')(x)", "forbidden attribute: _evaluate"),
    "attrgetter_dotted": ("import operator\ndef f(x):\n    return operator.attrgetter('real._x')(x)", "forbidden attribute: _x"),
    "methodcaller_private": ("from operator import methodcaller\ndef f(x):\n    return methodcaller('_evaluate', {}, {})(x)", "forbidden attribute: _evaluate"),
    "setattr_annotations": ("def f(x):\n    def h(a):\n        return a\n    setattr(h, '__annotations__', {'a': x})\n    return h", "forbidden attribute: __annotations__"),
    "hasattr_private": ("def f(x):\n    return hasattr(x, '_asdict_x')", "forbidden attribute: _asdict_x"),
    "args_dunder": ("import typing\ndef f(x):\n    return typing.List[int].__args__", "forbidden attribute: __args__"),
    "mro_walk": ("def f(x):\n    return (1).__class__.__mro__[-1]", "forbidden attribute"),
    "getstate": ("def f(x):\n    return x.__getstate__()", "forbidden attribute: __getstate__"),
    "generator_frame": ("def f(x):\n    g = (i for i in [x])\n    return g.gi_frame.f_back", "forbidden attribute"),
    "traceback_frame": ("def f(x):\n    try:\n        1 / 0\n    except Exception as e:\n        return e.__traceback__.tb_frame", "forbidden attribute"),
    "name_mangled": ("class A:\n    def __init__(self):\n        self.__k = 1\ndef f(x):\n    return A()._A__k", "forbidden attribute: _A__k"),
    # -- dunder names a program binds: data that library code turns into code or reflection
    "class_annotations_dict": ("from dataclasses import dataclass\n@dataclass\nclass C:\n    __annotations__ = {'a': int}\ndef f(x):\n    return C(x).a", "forbidden name: __annotations__"),
    "dunder_parameter": ("def f(x, __class__=1):\n    return x", "forbidden name: __class__"),
    "wrapped_binding": ("import functools\ndef f(x):\n    def g():\n        return 1\n    __wrapped__ = g\n    return x", "forbidden name: __wrapped__"),
    "type_with_namespace": ("def f(x):\n    C = type('C', (), {'__annot' + 'ations__': {'a': 'x'}})\n    return C", "forbidden call: type()"),
    # -- string annotations (forward references are evaluated as code)
    "param_string_annotation": ("def f(x: 'int'):\n    return x", "forbidden annotation: a string"),
    "return_string_annotation": ("def f(x) -> 'int':\n    return x", "forbidden annotation: a string"),
    "annassign_string": ("def f(x):\n    y: 'list' = [x]\n    return y", "forbidden annotation: a string"),
    "dataclass_string_field": ("from dataclasses import dataclass\n@dataclass\nclass P:\n    a: 'int'\ndef f(x):\n    return P(x).a", "forbidden annotation: a string"),
    "nested_string_annotation": ("from typing import List\ndef f(x: List['int']):\n    return x", "forbidden annotation"),
    "computed_annotation": ("def f(x: print('hi')):\n    return x", "forbidden annotation"),
    "get_type_hints": ("import typing\ndef f(x):\n    return typing.get_type_hints(f)", "forbidden attribute: typing.get_type_hints"),
    "forward_ref_class": ("from typing import ForwardRef\ndef f(x):\n    return ForwardRef('x')", "forbidden attribute: typing.ForwardRef"),
    "singledispatch_without_strings": ("from functools import singledispatch\n@singledispatch\ndef g(a):\n    return 0\ndef f(x):\n    return g(x)", "forbidden attribute: functools.singledispatch"),
    "singledispatchmethod": ("import functools\nclass A:\n    @functools.singledispatchmethod\n    def m(self, a):\n        return a\ndef f(x):\n    return A().m(x)", "forbidden attribute: functools.singledispatchmethod"),
    # -- string subscripts of typing (each holds a ForwardRef)
    "typing_list_string": ("import typing\ndef f(x):\n    return typing.List['x']", "forbidden subscript of typing.List"),
    "typing_alias_import": ("from typing import Optional as O\ndef f(x):\n    return O['x']", "forbidden subscript of typing.Optional"),
    "typing_dict_value_string": ("import typing as t\ndef f(x):\n    return t.Dict[str, 'x']", "forbidden subscript of typing.Dict"),
    "builtin_generic_string": ("def f(x):\n    return list['x']", "forbidden subscript of typing.list"),
    "annotated_string_type": ("import typing\ndef f(x):\n    return typing.Annotated['x', 1]", "forbidden subscript of typing.Annotated"),
    # -- format strings: computed receivers, and literal fields walking into private or escape attributes
    "format_map_computed": ("def f(x):\n    s = '{x.real}'\n    return s.format_map({'x': x})", "forbidden call: .format_map on a computed"),
    "str_format_unbound": ("def f(x):\n    return str.format('{0}', x)", "forbidden call: .format on a computed"),
    "format_variable": ("def f(x):\n    s = '{0.real}'\n    return s.format(x)", "forbidden call: .format on a computed"),
    "fstring_receiver": ("def f(x):\n    return f'{{0.{x}}}'.format(x)", "forbidden call: .format on a computed"),
    "literal_private_field": ("def f(x):\n    return '{0._fields_x}'.format(x)", "forbidden format field"),
    "literal_frame_field": ("def f(x):\n    g = (i for i in [x])\n    return '{0.gi_frame}'.format(g)", "forbidden format field"),
    "literal_index_dunder": ("def f(x):\n    return '{0[__x__]}'.format({'__x__': 1})", "forbidden format field"),
    "nested_spec_field": ("def f(x):\n    return '{0:{1._y}}'.format(x, x)", "forbidden format field"),
    "format_map_literal_walk": ("def f(x):\n    return '{x._y}'.format_map({'x': x})", "forbidden format field"),
    "bound_format_in_map": ("def f(x):\n    return list(map('{0._y}'.format, [x]))", "forbidden format field"),
    "methodcaller_format": ("import operator\ndef f(x):\n    return operator.methodcaller('format', x)('{0.real}')", "forbidden call: methodcaller of format"),
    "getattr_format": ("def f(x):\n    return getattr('{0.real}', 'format')(x)", "forbidden call: getattr of format"),
    "formatter_vformat": ("import string\ndef f(x):\n    return string.Formatter().vformat('{0.real}', [x], {})", "forbidden attribute: string.Formatter"),
    "fstring_spec_dunder": ("def f(x):\n    return f\"{x:{'{0.__class__}'}}\"", "forbidden attribute"),
}  # fmt: skip

# What stays legitimate in each class.
KEPT = [
    "def f(x):\n    return '{} {:>4} {0.real} {k[a]}'.format(x, x, k={'a': 1})",
    "def f(x):\n    return '{n}'.format_map({'n': x}) + f'{x:>{3}}'",
    "from collections import namedtuple\nP = namedtuple('P', 'a b')\ndef f(x):\n"
    "    p = P(x, 2)._replace(b=3)\n    return p._asdict(), P._fields",
    "class B:\n    def __init__(self, v):\n        self.v = v\nclass A(B):\n    __slots__ = ('w',)\n"
    "    def __init__(self, v):\n        super().__init__(v)\n        self.w = v\n"
    "    def __eq__(self, o):\n        return self.v == o.v\n    __hash__ = object.__hash__\n"
    "def f(x):\n    return A(x) == A(x), len([1]).__add__(1)",
    "from typing import Literal, Optional, Dict, List, Callable, Annotated\n"
    "def f(x: Optional[int], m: Dict[str, List[int]] = None, c: Callable[[int], int] = abs,"
    " k: Literal['a', 'b', -1] = 'a', z: Annotated[int, 'meta'] = 0) -> int | None:\n    return x",
    "from dataclasses import dataclass\n@dataclass\nclass P:\n    a: int\n    b: list[int] | None = None\n"
    "def f(x):\n    return P(x).a",
    "import operator\ndef f(x):\n    return operator.attrgetter('real')(x), getattr(x, 'imag')",
    "def f(x):\n    return type(x).__name__ if False else type(x) is int",
]


@pytest.mark.parametrize("name", sorted(REPRODUCTIONS))
def test_issue_reproductions_are_rejected(name):
    tree, why = parse_program(REPRODUCTIONS[name])
    assert tree is None and why and why.startswith("forbidden"), why


@pytest.mark.parametrize("name", sorted(CASES))
def test_class_cases_are_rejected_with_a_reason(name):
    src, reason = CASES[name]
    tree, why = parse_program(src)
    assert tree is None and why is not None and why.startswith(reason), (name, why)


@pytest.mark.parametrize("src", KEPT)
def test_legitimate_programs_in_each_class_are_kept(src):
    tree, why = parse_program(src)
    assert why is None, why


def test_enough_cases_per_class():
    """The issue asks for cases of our own in every class, at least 25 in all."""
    prefixes = ("forbidden attribute", "forbidden name", "forbidden annotation", "forbidden subscript",
                "forbidden call: .format", "forbidden format field")  # fmt: skip
    assert len(CASES) >= 25
    for p in prefixes:
        assert any(r.startswith(p) for _, r in CASES.values()), p


def test_typing_reproduction_is_contained_in_the_sandbox(attack_sandbox):
    """Run past the policy, the first reproduction does reach `eval` -- inside the sandbox, where `os` is a
    process without the host's identity (the policy is not the boundary; it must just not hand out eval)."""
    out = attack_sandbox.run(REPRODUCTIONS["typing_forward_ref"], "f(0)")
    if out.status == "ok":
        uid = int(out.value_repr)
        assert uid != os.getuid() or os.getuid() != 0, "a job ran with the host's root identity"
    else:
        assert out.status in ("error", "crashed", "timeout"), out
