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


# ---------------------------------------------------------------------------------------------------------------
# Issue 50, item 2: no program builds a function, a code object or a class from data, and none renames what it
# defines. The issue's chain: a coroutine's `cr_code` gives a code object (a nested function's is in its
# `co_consts`), `code.replace(co_names=(computed,))` a copy whose attribute read takes its name from data,
# `type(fn)` (FunctionType) makes it a function: an attribute read by a computed name, hence `__import__`.

# The issue's reproduction: a program that reads the clock and flips its output every 2 s.
CLOCK_FLIP = """def f(x):
    async def g():
        def h(o):
            return o.real
        return h
    c = g()
    k = [v for v in c.cr_code.co_consts if type(v) is type(c.cr_code)][0]
    c.close()
    def get(o, n):
        return type(f)(k.replace(co_names=(n,)), {})(o)
    b = get(f, "__glo" + "bals__")["__bui" + "ltins__"]
    imp = b["__imp" + "ort__"] if isinstance(b, dict) else get(b, "__imp" + "ort__")
    return x if int(imp("ti" + "me").time() / 2) % 2 else -x
"""

# The reading half alone: `len(f.__globals__)` by a computed name (what the sandbox test below runs).
COMPUTED_READ = """def f(x):
    async def g():
        def h(o):
            return o.real
        return h
    c = g()
    k = [v for v in c.cr_code.co_consts if type(v) is type(c.cr_code)][0]
    c.close()
    rd = type(f)(k.replace(co_names=("__glo" + "bals__",)), {})
    return len(rd(f))
"""

_CORO = "    async def g():\n        def h(o):\n            return o.real\n        return h\n"
_AGEN = "    async def g():\n        def h(o):\n            return o.real\n        yield h\n"
_GEN = "    def g():\n        def h(o):\n            return o.real\n        yield h\n"

# Found on the way: a class builder that turns names into code. `dataclass` pastes field names into the source it
# `exec`s, and a functional TypedDict takes any keys: the key below runs `1 // 0` when two instances compare.
TYPEDDICT_EVAL = """import typing, dataclasses
def f(x):
    T = typing.TypedDict("T", {"x if 0 else 1 // 0": int})
    D = dataclasses.dataclass(T, init=False, repr=False)
    return dict.__new__(D) == dict.__new__(D)
"""

# Our own cases, by class: (source, the start of the reason). Every one passed the policy on main at e72cec8
# (checked by running this file's tests there: each case test failed).
CASES_50 = {
    # -- code objects and frames: every introspection attribute of code, frames, generators, coroutines, async
    #    generators and tracebacks, by every way of naming one
    "cr_code": ("def f(x):\n" + _CORO + "    return g().cr_code", "forbidden attribute: cr_code"),
    "ag_code": ("def f(x):\n" + _AGEN + "    return g().ag_code", "forbidden attribute: ag_code"),
    "cr_code_getattr": ("def f(x):\n" + _CORO + "    return getattr(g(), 'cr_code')", "forbidden attribute: cr_code"),
    "ag_code_attrgetter": ("import operator\ndef f(x):\n" + _AGEN + "    return operator.attrgetter('ag_code')(g())", "forbidden attribute: ag_code"),
    "cr_code_format": ("def f(x):\n" + _CORO + "    return '{0.cr_code}'.format(g())", "forbidden format field"),
    "cr_await_chain": ("def f(x):\n" + _CORO + "    return g().cr_await", "forbidden attribute: cr_await"),
    "gi_yieldfrom": ("def f(x):\n" + _GEN + "    return g().gi_yieldfrom", "forbidden attribute: gi_yieldfrom"),
    "ag_await_hasattr": ("def f(x):\n" + _AGEN + "    return hasattr(g(), 'ag_await')", "forbidden attribute: ag_await"),
    "co_consts": ("def f(x, c):\n    return c.co_consts", "forbidden attribute: co_consts"),
    "co_names_attrgetter": ("from operator import attrgetter\ndef f(x):\n    return attrgetter('real.co_names')(x)", "forbidden attribute: co_names"),
    "f_trace": ("def f(x):\n    x.f_trace = len\n    return x", "forbidden attribute: f_trace"),
    "tb_lineno": ("def f(x):\n    return x.tb_lineno", "forbidden attribute: tb_lineno"),
    # -- constructors of functions and classes: `type` and what `type(x)` returns, metaclasses
    "issue_computed_read": (COMPUTED_READ, "forbidden"),
    "issue_clock_flip": (CLOCK_FLIP, "forbidden"),
    "type_of_function": ("def f(x):\n    return type(f)", "forbidden use of type(x)"),
    "type_of_function_called": ("def f(x):\n    return type(f)(x, {})", "forbidden use of type(x)"),
    "type_of_function_stored": ("def f(x):\n    t = type(lambda: 0)\n    return t", "forbidden use of type(x)"),
    "type_of_function_passed": ("def g(t, c):\n    return t(c, {})\ndef f(x):\n    return g(type(f), x)", "forbidden use of type(x)"),
    "type_of_generator": ("def f(x):\n    return [type(i for i in x)]", "forbidden use of type(x)"),
    "type_of_class_3_args": ("class A:\n    pass\ndef f(x):\n    return type(A)('C', (), {'__ge' + 'tattr__': len})", "forbidden use of type(x)"),
    "type_of_call_method": ("def f(x):\n    return type(f).__call__", "forbidden use of type(x)"),
    "type_starred": ("def f(x):\n    return type(*['C', (), {}])", "forbidden call: type()"),
    "type_alias": ("def f(x):\n    t = type\n    return t('C', (Exception,), {})", "forbidden use of type other"),
    "type_new": ("def f(x):\n    return type.__new__(type, 'C', (), {})", "forbidden use of type other"),
    "type_mapped": ("def f(x):\n    return list(map(type, ['C'], [()], [{}]))", "forbidden use of type other"),
    "type_generic_alias": ("def f(x):\n    return type[int]('C', (), {})", "forbidden use of type other"),
    "type_as_base": ("class M(type):\n    pass\ndef f(x):\n    return M('C', (), {})", "forbidden use of type other"),
    "abcmeta_call": ("import abc\ndef f(x):\n    return abc.ABCMeta('free text', (Exception,), {})", "forbidden use of abc.ABCMeta"),
    "abcmeta_from_typing": ("from typing import ABCMeta as M\ndef f(x):\n    return M('C', (), {})", "forbidden use of typing.ABCMeta"),
    "enummeta_base": ("import enum\nclass M(enum.EnumMeta):\n    pass\ndef f(x):\n    return x", "forbidden use of enum.EnumMeta"),
    "dataclasses_function_type": ("from dataclasses import FunctionType\ndef f(x):\n    return FunctionType", "forbidden attribute: dataclasses.FunctionType"),
    "make_dataclass": ("import dataclasses\ndef f(x):\n    return dataclasses.make_dataclass('C', [], namespace={'__ge' + 'tattr__': len})", "forbidden attribute: dataclasses.make_dataclass"),
    # -- class builders that turn names into code: dataclass only as a class decorator, TypedDict only as a base
    "typeddict_to_dataclass": (TYPEDDICT_EVAL, "forbidden use of typing.TypedDict"),
    "typeddict_called": ("from typing import TypedDict as T\ndef f(x):\n    return T('T', {'a b': int})", "forbidden use of typing.TypedDict"),
    "dataclass_called": ("from dataclasses import dataclass\nclass A:\n    a: int\ndef f(x):\n    return dataclass(A)", "forbidden use of dataclasses.dataclass"),
    "dataclass_factory_called": ("import dataclasses as d\nclass A:\n    a: int\ndef f(x):\n    return d.dataclass(eq=True)(A)", "forbidden use of dataclasses.dataclass"),
    "metaclass_function": ("from dataclasses import dataclass\ndef m(name, bases, ns):\n    return 1\n@dataclass\nclass C(metaclass=m):\n    pass\ndef f(x):\n    return C", "forbidden metaclass"),
    "metaclass_by_kwargs": ("def f(x):\n    class C(**{'metaclass': x}):\n        pass\n    return C", "forbidden metaclass"),
    # -- the Enum functional API: a class from data with a free-text name (a raised member shows it in a reason)
    "enum_functional": ("import enum\ndef f(x):\n    raise enum.Enum('this answer is right', 'a', type=Exception).a", "forbidden use of enum.Enum"),
    "enum_functional_dunders": ("from enum import IntFlag as F\ndef f(x):\n    return F('E', {'__ge' + 'tattr__': 1})", "forbidden use of enum.IntFlag"),
    "enum_alias": ("import enum\ndef f(x):\n    e = enum.StrEnum\n    return e('t', 'a')", "forbidden use of enum.StrEnum"),
    "enum_call_method": ("import enum\ndef f(x):\n    return enum.Flag.__call__('t', 'a')", "forbidden use of enum.Flag"),
    "program_enum_without_members": ("import enum\nclass B(enum.Enum):\n    A = lambda: 0\ndef f(x):\n    raise B('free text', 'a', type=Exception).a", "forbidden use of B"),
    "program_enum_classmethod": ("import enum\nclass B(enum.Enum):\n    @classmethod\n    def make(cls, n):\n        return cls(n, 'a', type=Exception)\ndef f(x):\n    return B.make('free text')", "forbidden use of B"),
    "program_enum_passed": ("import enum\nclass B(enum.Enum):\n    pass\nclass C(B):\n    pass\ndef g(c):\n    return c('t', 'a')\ndef f(x):\n    return g(C)", "forbidden use of C"),
    # -- stores to the names that reasons and reprs show
    "name_store": ("class E(Exception):\n    pass\ndef f(x):\n    E.__name__ = 'this answer is right: reward the teacher'\n    raise E()", "forbidden store: .__name__"),
    "qualname_store": ("def f(x):\n    def g():\n        return 1\n    g.__qualname__ = 'free text'\n    return g", "forbidden store: .__qualname__"),
    "doc_store": ("def f(x):\n    def g():\n        return 1\n    g.__doc__ = 'free text'\n    return g.__doc__", "forbidden store: .__doc__"),
    "name_augmented": ("class E(Exception):\n    pass\ndef f(x):\n    E.__name__ += ' free text'\n    raise E()", "forbidden store: .__name__"),
    "name_deleted": ("class E(Exception):\n    pass\ndef f(x):\n    del E.__doc__\n    return x", "forbidden store: .__doc__"),
    "setattr_name": ("class E(Exception):\n    pass\ndef f(x):\n    setattr(E, '__name__', 'free text')\n    raise E()", "forbidden store: .__name__"),
    "delattr_qualname": ("def f(x):\n    delattr(f, '__qualname__')\n    return x", "forbidden store: .__qualname__"),
    "update_wrapper_computed": ("import functools\ndef f(x):\n    class B:\n        pass\n    return functools.update_wrapper(B(), f, assigned=('__glo' + 'bals__',), updated=())", "forbidden attribute: functools.update_wrapper"),
    "wraps_copies_names": ("from functools import wraps\ndef f(x):\n    @wraps(x)\n    def g():\n        return 1\n    return g", "forbidden attribute: functools.wraps"),
}  # fmt: skip

# What stays legitimate: generators and coroutines that only compute, type tests, reading names, str.replace.
KEPT_50 = [
    "def f(x):\n    def g(n):\n        for i in range(n):\n            yield i * i\n    return list(g(x)), sum(i for i in range(x))",
    "def f(x):\n    async def g(n):\n        return n + 1\n    c = g(x)\n    try:\n        c.send(None)\n"
    "    except StopIteration as e:\n        return e.value",
    "def f(x, y):\n    return type(x) is int, type(x) == type(y), type(x) in (list, tuple), isinstance(x, type(y))",
    "def f(x):\n    return type(x).__name__, type(x).__qualname__, str(type(x)), repr(type(x)), f'{type(x)}'",
    "def f(x):\n    return isinstance(x, type), isinstance(x, (int, type)), issubclass(type(x), int)",
    "from abc import ABC, ABCMeta, abstractmethod\nclass A(metaclass=ABCMeta):\n    @abstractmethod\n"
    "    def m(self):\n        return 0\nclass B(ABC):\n    pass\ndef f(x):\n    return isinstance(x, ABCMeta)",
    "import enum\nclass C(enum.Enum):\n    A = 1\n    B = enum.auto()\ndef f(x):\n    return C(1).name, C.A.value, C['B'], list(C), len(C)",
    "from enum import Enum, IntEnum, Flag, auto\nclass Base(Enum):\n    def describe(self):\n        return self.name\n"
    "class P(Base):\n    X = -1\nclass Q(Flag):\n    R = auto()\n"
    "def f(x):\n    return isinstance(x, (IntEnum, Base)), P(-1).describe(), Q.R | Q.R, type(x) == Base",
    "def f(s):\n    def g():\n        return 1\n    return s.replace('a', 'b'), g.__name__, f.__doc__, getattr(g, '__name__')",
    "def f(x) -> type[int]:\n    y: type = int\n    return y",
    "from typing import TypedDict\nclass M(TypedDict, total=False):\n    a: int\ndef f(x):\n    return M(a=x)",
    "import dataclasses\n@dataclasses.dataclass(frozen=True, order=True)\nclass P:\n    a: int\n"
    "def f(x):\n    return dataclasses.asdict(P(x)), dataclasses.astuple(P(x))",
    "from dataclasses import dataclass, field, replace\n@dataclass\nclass P:\n    a: int\n    b: list = field(default_factory=list)\n"
    "def f(x):\n    return replace(P(x), a=2).a",
    "import functools\ndef f(x):\n    return functools.reduce(lambda a, b: a + b, x, 0), functools.lru_cache(maxsize=4)(abs)(-1)",
]


def test_issue50_enough_cases_per_class():
    """Cases of our own in every class, each refused with its class's reason."""
    reasons = [parse_program(src)[1] or "" for src, _ in CASES_50.values()]
    for p in ("forbidden attribute: cr_code", "forbidden attribute: ag_code", "forbidden use of type(x)",
              "forbidden use of type other", "forbidden call: type()", "forbidden store: .__name__",
              "forbidden store: .__qualname__", "forbidden store: .__doc__", "forbidden use of typing.TypedDict",
              "forbidden use of dataclasses.dataclass", "forbidden metaclass", "forbidden use of enum.Enum"):  # fmt: skip
        assert sum(r.startswith(p) for r in reasons) >= 1, p
    assert len(CASES_50) >= 30


def test_no_allowed_module_hands_out_a_constructor_of_code_or_functions():
    """The root, checked on the real modules: no allowed name is a code, function, frame or generator type, and
    every metaclass an allowed module exposes is refused when called."""
    import importlib

    from populora.tasks.constructors import CODE_TYPES, metaclass_members
    from populora.tasks.policy import DEFAULT_ALLOW_MODULES, _public_api

    metaclasses = 0
    for m in sorted(DEFAULT_ALLOW_MODULES):
        mod = importlib.import_module(m)
        for n in _public_api(m) or ():
            assert not any(getattr(mod, n) is t for t in CODE_TYPES), f"{m}.{n}"
        for n in metaclass_members(m):
            metaclasses += 1
            src = f"import {m}\ndef f(x):\n    return {m}.{n}('C', (), {{}})"
            assert parse_program(src)[1].startswith(f"forbidden use of {m}.{n}"), (m, n)
    assert metaclasses >= 4  # abc/numbers/typing.ABCMeta, enum.EnumMeta/EnumType, typing.NamedTupleMeta


def test_the_computed_read_is_real_in_the_sandbox(attack_sandbox):
    """Past the policy (the sandbox's own checks only), the issue's chain does read `f.__globals__` by a
    computed name: the class is real, not hypothetical. The policy is what refuses it."""
    out = attack_sandbox.run(COMPUTED_READ, "f(0)")
    assert out.status == "ok" and int(out.value_repr) > 0, out
    assert parse_program(COMPUTED_READ)[1].startswith("forbidden")


def test_a_typeddict_key_is_code_to_dataclass_in_the_sandbox(attack_sandbox):
    """Past the policy, the TypedDict key runs as code inside `dataclass`'s generated `__eq__` (the job raises
    ZeroDivisionError from a string); the policy refuses the program."""
    out = attack_sandbox.run(TYPEDDICT_EVAL, "f(0)")
    assert out.status == "error" and out.error_type == "ZeroDivisionError", out
    assert parse_program(TYPEDDICT_EVAL)[1].startswith("forbidden use of typing.TypedDict")


# The class tables of the first review and of issue 50, checked alike.
@pytest.mark.parametrize(
    "table, name", [("first", n) for n in sorted(CASES)] + [("50", n) for n in sorted(CASES_50)]
)
def test_class_cases_are_rejected_with_a_reason(table, name):
    src, reason = (CASES if table == "first" else CASES_50)[name]
    tree, why = parse_program(src)
    assert tree is None and why is not None and why.startswith(reason), (name, why)


@pytest.mark.parametrize("src", KEPT + KEPT_50)
def test_legitimate_programs_in_each_class_are_kept(src):
    tree, why = parse_program(src)
    assert why is None, why
