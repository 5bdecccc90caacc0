"""The program generator's statement grammar (`populora.pretrain.programs`): the `_Builder` a program is built
in (the names in scope, the lines, the operation words of the message), the int expressions and conditions, the
statement makers (each binds one new variable or declines), their weights (`STATEMENTS`, and for level "easy"
`EASY_STATEMENTS` / `EASY_OPS`), and the final `return` (`_final_return`).

Moved here from `programs.py` unchanged, so the random draws, and the corpora and model asset pinned to them,
are the same; `programs` re-exports every name (`graded.py` builds on `P._Builder`, `P._int_expr`, ...).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from populora.pretrain.vocab import LETTERS, RESULT_NAMES, SIMPLE_RESULT_NAMES, WORDS

# ---------------------------------------------------------------------------------------------------
# Program construction


@dataclass
class _Builder:
    rng: random.Random
    env: list[tuple[str, str]] = field(default_factory=list)  # (name, type) in scope
    lines: list[str] = field(default_factory=list)
    ops: list[str] = field(default_factory=list)  # words for the message
    helpers: list[str] = field(default_factory=list)
    used: set[str] = field(default_factory=set)
    simple: bool = False
    easy: bool = False  # level "easy": single expressions of depth <= 2, no loops (see LEVELS)

    def of(self, typ: str) -> list[str]:
        return [n for n, t in self.env if t == typ]

    def pick(self, typ: str) -> str | None:
        names = self.of(typ)
        if not names:
            return None
        # Prefer recent variables so data flows through the program instead of being dropped.
        return names[-1] if self.rng.random() < 0.6 else self.rng.choice(names)

    def fresh(self, typ: str) -> str:
        pool = RESULT_NAMES[typ]
        candidates = SIMPLE_RESULT_NAMES[typ] if self.simple else self.rng.sample(pool, len(pool))
        for name in candidates:
            if name not in self.used:
                self.used.add(name)
                return name
        i = 2
        while f"{RESULT_NAMES[typ][0]}{i}" in self.used:
            i += 1
        self.used.add(f"{RESULT_NAMES[typ][0]}{i}")
        return f"{RESULT_NAMES[typ][0]}{i}"

    def bind(self, name: str, typ: str) -> None:
        self.env.append((name, typ))

    def assign(self, expr: str, typ: str, op: str) -> str:
        """The line `NAME = expr`, NAME a fresh variable of `typ` then in scope; `op` names the operation for the
        program's message. Draws only what `fresh` draws, so the generator's stream is the same as writing it out."""
        self.ops.append(op)
        name = self.fresh(typ)
        self.lines.append(f"{name} = {expr}")
        self.bind(name, typ)
        return name


def _int_atom(b: _Builder) -> str:
    rng = b.rng
    choices: list[str] = [str(rng.randint(1, 9))]
    for n in b.of("int"):
        choices += [n, n]
    for s in b.of("str"):
        choices.append(f"len({s})")
    for xs in b.of("list"):
        choices += [f"len({xs})", f"sum({xs})"]
    for d in b.of("dict"):
        choices.append(f"len({d})")
    return rng.choice(choices)


def _int_expr(b: _Builder, depth: int) -> str:
    rng = b.rng
    if depth <= 0 or rng.random() < 0.35:
        return _int_atom(b)
    kind = rng.random()
    left = _int_expr(b, depth - 1)
    if kind < 0.55:
        op = rng.choice(["+", "-", "*", "+", "-"])
        right = _int_expr(b, depth - 1) if rng.random() < 0.5 else str(rng.randint(1, 9))
        b.ops.append({"+": "addition", "-": "subtraction", "*": "multiplication"}[op])
        return f"({left} {op} {right})" if depth > 1 else f"{left} {op} {right}"
    if kind < 0.75:
        op = rng.choice(["%", "//"])
        b.ops.append("modulo" if op == "%" else "integer division")
        return f"({left} {op} {rng.randint(2, 7)})" if depth > 1 else f"{left} {op} {rng.randint(2, 7)}"
    if kind < 0.9:
        fn = rng.choice(["max", "min"])
        b.ops.append(fn)
        return f"{fn}({left}, {_int_expr(b, depth - 1)})"
    b.ops.append("abs")
    return f"abs({left})"


def _cond_on_int(b: _Builder, var: str) -> str:
    rng = b.rng
    k = rng.randint(2, 5)
    return rng.choice(
        [
            f"{var} % 2 == 0",
            f"{var} % {k} == 1",
            f"{var} > {rng.randint(0, 9)}",
            f"{var} < {rng.randint(1, 9)}",
            f"{var} != {rng.randint(0, 5)}",
        ]
    )


def _cond_on_char(b: _Builder, var: str) -> str:
    rng = b.rng
    return rng.choice(
        [
            f"{var} in 'aeiou'",
            f"{var} not in 'aeiou'",
            f"{var} == '{rng.choice(LETTERS)}'",
            f"{var} < '{rng.choice('dmn')}'",
            f"{var}.isalpha()",
        ]
    )


# Each statement maker appends lines binding one new variable, or returns False when it does not apply.


def _st_int_expr(b: _Builder) -> bool:
    name = b.fresh("int")
    b.lines.append(f"{name} = {_int_expr(b, b.rng.randint(1, 2 if b.easy else 3))}")
    b.bind(name, "int")
    return True


def _st_str_expr(b: _Builder) -> bool:
    rng = b.rng
    s = b.pick("str")
    n = b.pick("int")
    strs = b.pick("strs")
    options: list[tuple[str, str]] = []
    if s:
        options += [
            (f"{s}[::-1]", "reverse"),
            (f"{s}.upper()", "upper"),
            (f"{s}.replace('{rng.choice(LETTERS)}', '{rng.choice(LETTERS + '-')}')", "replace"),
            (f"{s}[{rng.randint(1, 3)}:]", "slicing"),
            (f"{s}[:{rng.randint(1, 4)}]", "slicing"),
            (f"''.join(sorted({s}))", "sorting"),
            (f"{s} + '{rng.choice(WORDS)}'", "concatenation"),
            (f"{s}[::2]", "slicing"),
            (f"{s}.capitalize()", "capitalize"),
            (f"'{rng.choice('-_.')}'.join({s})", "join"),
        ]
        other = [x for x in b.of("str") if x != s]
        if other:
            options.append((f"{s} + {other[0]}", "concatenation"))
        if n:
            options += [
                (f"{s} * ({n} % 3 + 1)", "repetition"),
                (f"{s}[{n} % 4:]", "slicing"),
                (f"{s} + str({n})", "str conversion"),
            ]
    if n:
        options.append((f"str({n} * {rng.randint(2, 9)})", "str conversion"))
    if strs:
        options += [
            (f"'{rng.choice(' -,')}'.join({strs})", "join"),
            (f"''.join(w[0] for w in {strs} if w)", "join"),
            (f"max({strs}, key=len) if {strs} else ''", "max"),
        ]
    if b.easy:
        options = [(e, o) for e, o in options if o in EASY_OPS]
    if not options:
        return False
    expr, op = rng.choice(options)
    b.assign(expr, "str", op)
    return True


def _st_list_expr(b: _Builder) -> bool:
    rng = b.rng
    xs = b.pick("list")
    s = b.pick("str")
    n = b.pick("int")
    options: list[tuple[str, str]] = []
    if xs:
        v = rng.choice(["v", "x", "e", "i"])
        b.env.append((v, "int"))
        body = _int_expr(b, rng.randint(0, 2))
        cond = _cond_on_int(b, v)
        b.env.pop()
        options += [
            (f"[{body} for {v} in {xs}]", "list comprehension"),
            (f"[{v} for {v} in {xs} if {cond}]", "filtering"),
            (f"[{body} for {v} in {xs} if {cond}]", "list comprehension"),
            (f"sorted({xs})", "sorting"),
            (f"sorted({xs}, reverse=True)", "sorting"),
            (f"{xs}[::-1]", "reverse"),
            (f"{xs}[1:] + {xs}[:1]", "rotation"),
            (f"[{xs}[i] + {xs}[i + 1] for i in range(len({xs}) - 1)]", "pairwise sums"),
        ]
        if n:
            options.append((f"{xs} + [{n}]", "append"))
            options.append((f"{xs}[:{n} % 5 + 1]", "slicing"))
    if s:
        c = rng.choice(["c", "ch"])
        options += [
            (f"[ord({c}) % {rng.randint(5, 12)} for {c} in {s}]", "ord"),
            (f"[i for i, {c} in enumerate({s}) if {_cond_on_char(b, c)}]", "enumerate"),
        ]
    if n:
        options.append((f"list(range({n} % 6 + 1))", "range"))
        options.append((f"[i * i for i in range({n} % 5 + 2)]", "squares"))
    if b.easy:
        options = [(e, o) for e, o in options if o in EASY_OPS]
    if not options:
        return False
    expr, op = rng.choice(options)
    b.assign(expr, "list", op)
    return True


def _st_strs_expr(b: _Builder) -> bool:
    rng = b.rng
    s = b.pick("str")
    strs = b.pick("strs")
    options: list[tuple[str, str]] = []
    if s:
        options += [(f"{s}.split('{rng.choice('aeo')}')", "split"), (f"list({s})", "list conversion")]
    if strs:
        options += [
            (f"sorted({strs})", "sorting"),
            (f"[w.upper() for w in {strs}]", "upper"),
            (f"[w for w in {strs} if len(w) > {rng.randint(2, 4)}]", "filtering"),
            (f"[w[::-1] for w in {strs}]", "reverse"),
        ]
    if not options:
        return False
    expr, op = rng.choice(options)
    b.assign(expr, "strs", op)
    return True


def _st_dict(b: _Builder) -> bool:
    rng = b.rng
    s = b.pick("str")
    xs = b.pick("list")
    strs = b.pick("strs")
    d = b.pick("dict")
    name = b.fresh("dict")
    options: list[tuple[list[str], str]] = []
    if s:
        options.append(
            ([f"{name} = {{}}", f"for c in {s}:", f"    {name}[c] = {name}.get(c, 0) + 1"], "counting")
        )
    if xs:
        options.append(
            (
                [
                    f"{name} = {{}}",
                    f"for i, v in enumerate({xs}):",
                    f"    {name}[str(v % {rng.randint(2, 4)})] = i",
                ],
                "dict",
            )
        )
    if strs:
        options.append(([f"{name} = {{w: len(w) for w in {strs}}}"], "dict comprehension"))
    if d:
        options.append(
            (
                [
                    f"{name} = {{k: v * {rng.randint(2, 5)} for k, v in {d}.items() if v > {rng.randint(0, 4)}}}"
                ],
                "dict comprehension",
            )
        )
    if not options:
        b.used.discard(name)
        return False
    lines, op = rng.choice(options)
    b.ops.append(op)
    b.lines += lines
    b.bind(name, "dict")
    return True


def _st_dict_reduce(b: _Builder) -> bool:
    rng = b.rng
    d = b.pick("dict")
    if not d:
        return False
    options = [
        (f"sum({d}.values())", "int", "sum"),
        (f"sorted({d})", "strs", "sorting"),
        (f"max({d}.values()) if {d} else 0", "int", "max"),
        (f"''.join(k * v for k, v in sorted({d}.items()))", "str", "join"),
        (f"[k for k in sorted({d}) if {d}[k] % 2 == {rng.randint(0, 1)}]", "strs", "filtering"),
        (f"{d}.get('{rng.choice('abcx')}', {rng.randint(0, 3)})", "int", "lookup"),
    ]
    expr, typ, op = rng.choice(options)
    b.assign(expr, typ, op)
    return True


def _st_loop_int(b: _Builder) -> bool:
    rng = b.rng
    xs = b.pick("list")
    s = b.pick("str")
    if not xs and not s:
        return False
    acc = b.fresh("int")
    init = rng.choice(["0", "0", "1"])
    if xs and (not s or rng.random() < 0.6):
        v = rng.choice(["v", "x", "e"])
        b.env.append((v, "int"))
        b.env.append((acc, "int"))
        upd_a = _int_expr(b, rng.randint(0, 1))
        upd_b = _int_expr(b, rng.randint(0, 1))
        cond = _cond_on_int(b, v)
        b.env.pop()
        b.env.pop()
        lines = [f"{acc} = {init}", f"for {v} in {xs}:"]
        if rng.random() < 0.6:
            lines += [
                f"    if {cond}:",
                f"        {acc} += {upd_a}",
                "    else:",
                f"        {acc} {rng.choice(['-=', '+='])} {upd_b}",
            ]
            b.ops += ["loop", "conditional"]
        else:
            lines += [f"    {acc} = {acc} {rng.choice(['+', '-', '*'])} {upd_a}"]
            if "*" in lines[-1]:
                lines[-1] = f"    {acc} = ({acc} * {upd_a}) % 1000"
            b.ops.append("loop")
    else:
        c = rng.choice(["c", "ch"])
        lines = [
            f"{acc} = {init}",
            f"for {c} in {s}:",
            f"    if {_cond_on_char(b, c)}:",
            f"        {acc} += {rng.randint(1, 3)}",
        ]
        if rng.random() < 0.5:
            lines += ["    else:", f"        {acc} -= 1"]
        b.ops += ["loop", "counting"]
    b.lines += lines
    b.bind(acc, "int")
    return True


def _st_loop_str(b: _Builder) -> bool:
    rng = b.rng
    s = b.pick("str")
    strs = b.pick("strs")
    if not s and not strs:
        return False
    out = b.fresh("str")
    if s and (not strs or rng.random() < 0.6):
        c = rng.choice(["c", "ch"])
        then = rng.choice([f"{out} += {c}.upper()", f"{out} = {c} + {out}", f"{out} += {c} * 2"])
        other = rng.choice([f"{out} += {c}", f"{out} = {out} + '{rng.choice(LETTERS)}'", "continue"])
        lines = [
            f"{out} = ''",
            f"for {c} in {s}:",
            f"    if {_cond_on_char(b, c)}:",
            f"        {then}",
            "    else:",
            f"        {other}",
        ]
    else:
        lines = [
            f"{out} = ''",
            f"for w in {strs}:",
            f"    if len(w) > {rng.randint(2, 4)}:",
            f"        {out} += w[0]",
            "    else:",
            f"        {out} += w[-1].upper()",
        ]
    b.ops += ["loop", "string building"]
    b.lines += lines
    b.bind(out, "str")
    return True


def _st_loop_list(b: _Builder) -> bool:
    rng = b.rng
    xs = b.pick("list")
    if not xs:
        return False
    ys = b.fresh("list")
    v = rng.choice(["v", "x"])
    lines = [f"{ys} = []", f"for i, {v} in enumerate({xs}):"]
    kind = rng.random()
    if kind < 0.4:
        lines += [f"    if {v} > i:", f"        {ys}.append({v} - i)", "    else:", f"        {ys}.append(i)"]
        b.ops += ["loop", "enumerate"]
    elif kind < 0.7:
        lines += [f"    if {ys} and {ys}[-1] == {v}:", "        continue", f"    {ys}.append({v})"]
        b.ops += ["loop", "deduplication"]
    else:
        lines += [
            f"    {ys}.insert(0, {v} * {rng.randint(1, 3)})"
            if rng.random() < 0.5
            else f"    {ys}.append({v} + ({ys}[-1] if {ys} else 0))"
        ]
        b.ops += ["loop", "running values"]
    b.lines += lines
    b.bind(ys, "list")
    return True


def _st_while(b: _Builder) -> bool:
    rng = b.rng
    n = b.pick("int")
    if not n:
        return False
    cnt = b.fresh("int")
    cur = b.fresh("int")
    step = rng.choice(
        [
            f"{cur} //= {rng.randint(2, 3)}",
            f"{cur} -= {rng.randint(2, 5)}",
            f"{cur} = {cur} // 2 if {cur} % 2 == 0 else {cur} - 1",
        ]
    )
    lines = [
        f"{cur} = abs({n})",
        f"{cnt} = 0",
        f"while {cur} > {rng.randint(0, 2)} and {cnt} < 50:",
        f"    {step}",
        f"    {cnt} += {rng.choice(['1', '1', '2', cur])}",
    ]
    b.ops += ["while loop"]
    b.lines += lines
    b.bind(cur, "int")
    b.bind(cnt, "int")
    return True


def _st_if_else(b: _Builder) -> bool:
    rng = b.rng
    n = b.pick("int")
    s = b.pick("str")
    xs = b.pick("list")
    conds = []
    if n:
        conds.append(_cond_on_int(b, n))
    if s:
        conds += [f"len({s}) > {rng.randint(2, 5)}", f"'{rng.choice(LETTERS)}' in {s}", f"{s} == {s}[::-1]"]
    if xs:
        conds += [f"len({xs}) > {rng.randint(2, 4)}", f"sum({xs}) % 2 == 0", f"{rng.randint(0, 9)} in {xs}"]
    if not conds:
        return False
    cond = rng.choice(conds)
    r = b.fresh("int")
    lines = [
        f"if {cond}:",
        f"    {r} = {_int_expr(b, rng.randint(1, 2))}",
        "else:",
        f"    {r} = {_int_expr(b, rng.randint(0, 2))}",
    ]
    b.ops.append("conditional")
    b.lines += lines
    b.bind(r, "int")
    return True


def _st_helper(b: _Builder) -> bool:
    rng = b.rng
    xs = b.pick("list")
    if not xs or b.helpers:
        return False
    k1, k2 = rng.randint(2, 5), rng.randint(0, 5)
    body = rng.choice(
        [
            f"return v * {k1} + {k2}",
            f"return v % {k1} + {k2}",
            f"if v % 2 == 0:\n            return v // 2\n        return v * {k1} + 1",
            f"return v - {k2} if v > {k2} else {k2} - v",
        ]
    )
    b.helpers.append(f"    def g(v):\n        {body}")
    ys = b.fresh("list")
    b.lines.append(f"{ys} = [g(v) for v in {xs}]")
    b.ops.append("helper function")
    b.bind(ys, "list")
    return True


STATEMENTS = [
    (_st_int_expr, 3),
    (_st_str_expr, 3),
    (_st_list_expr, 3),
    (_st_strs_expr, 1),
    (_st_dict, 1.5),
    (_st_dict_reduce, 1),
    (_st_loop_int, 2.5),
    (_st_loop_str, 1.5),
    (_st_loop_list, 1.5),
    (_st_while, 1),
    (_st_if_else, 2),
    (_st_helper, 1),
]

# Level "easy": one-line expressions only (no loops, comprehensions, helpers or if/else blocks), ints of
# depth <= 2, and of the string and list expressions only these operations, each traceable in one step.
EASY_OPS = {
    "reverse",
    "upper",
    "replace",
    "slicing",
    "sorting",
    "concatenation",
    "capitalize",
    "repetition",
    "str conversion",
    "append",
    "range",
    "rotation",
}
EASY_STATEMENTS = [(_st_int_expr, 3), (_st_str_expr, 3), (_st_list_expr, 2)]

RETURN_TYPES = {"int", "str", "list", "strs", "dict", "bool"}


def _final_return(b: _Builder) -> str:
    rng = b.rng
    last_name, last_type = b.env[-1]
    if b.easy:
        return last_name  # no extra operation in the return
    r = rng.random()
    if r < 0.65:
        return last_name
    ints = b.of("int")
    if r < 0.8 and last_type == "int" and len(ints) >= 2:
        return f"{last_name} {rng.choice(['+', '-', '*'])} {ints[0]}"
    if r < 0.9 and last_type in ("list", "str"):
        return rng.choice([f"len({last_name})", f"{last_name}[:{rng.randint(2, 5)}]"])
    if last_type == "int":
        return f"({last_name}, {rng.choice(b.env)[0]})"  # a tuple
    return last_name
