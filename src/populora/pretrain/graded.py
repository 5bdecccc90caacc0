"""A graded program generator: levels 1..5 of rising complexity, for pretraining the next bundled model.

The bundled model was pretrained on `programs.py` (at most two simple statements, issue 30): too small a world
for a population to push into harder regions. This module draws programs `def f(...)` at five levels; it reuses
`programs.py`'s builder, statement makers, value sampling and in-process execution by import and leaves that
module's output unchanged (the shipped asset and probe sets depend on it).

Levels (statements counted at the top level of f's body, the `return` excluded, after dead ones are pruned):

- 1: 1-2 one-line expressions over small values (`programs.py`'s "easy" level: today's programs).
- 2: 2-3 statements from the whole of `programs.py`'s grammar (comprehensions, accumulator loops, while, if/else).
- 3: 3-4 statements; adds if/elif/else chains, chained string calls, list mutation, nested builtin calls.
- 4: 4-5 statements; adds helper functions defined in f (with branches or loops) and nested calls to them,
  dict building and dict lookups.
- 5: 6-8 statements; adds nested loops with branches inside.

Every program is checked with the project's capability policy (`tasks.policy.parse_program`), run in-process on
its sampled inputs under a step bound (`MAX_STEPS` traced lines and calls; programs that exceed it, raise, or
give long outputs are rejected), and tagged with its level and `diagnostics.features.program_features`.

Probe/train split: `masked_key` is `tasks.masking.program_key` (literals masked, names and structure kept);
`graded_split` hashes the masked key, so a program and all its constant-variants fall on the same side and no
probe program has a masked twin in training.

Size of the space. A level-5 program has 6-8 top-level statements, each drawn from about 20 makers that each
have several shapes (2-12 expression forms, comparison and operator choices, and names that depend on the types
in scope): a conservative 20 masked shapes per statement gives 20^6 = 6.4e7 sequences of six, before parameter
types (5^1..5^3 signatures) and return forms. Measured (masked keys; docs/tiny-model.md): 1,000 draws per
level give 485 / 934 / 992 / 1000 / 1000 distinct masked programs at levels 1-5, and 6,000 draws at levels
3-5 give 5,979 (99.6%): no saturation in sight, consistent with a space far above 10^6 distinct programs.
"""

from __future__ import annotations

import ast
import hashlib
import random
import sys
from collections.abc import Callable
from dataclasses import dataclass, field

from populora.pretrain import programs as P
from populora.tasks.masking import program_key

LEVELS: tuple[int, ...] = (1, 2, 3, 4, 5)
# (fewest, most) top-level statements of f's body per level, return excluded, after pruning dead statements.
STATEMENT_RANGE: dict[int, tuple[int, int]] = {1: (1, 2), 2: (2, 3), 3: (3, 4), 4: (4, 5), 5: (6, 8)}
# Least AST depth (diagnostics.features.ast_depth) per level: statement counts alone let a level-4 program be
# as shallow as a level-3 one; the floor makes depth rise with the level too (rejection sampling on the feature).
MIN_AST_DEPTH: dict[int, int] = {1: 0, 2: 0, 3: 7, 4: 8, 5: 9}
MAX_STEPS = 4_000  # traced lines + calls per run: our loops are bounded, this catches anything that is not
MAX_INPUT_CHARS = 80
SPLITS = ("train", "probe")
PROBE_MOD = 10  # one masked key in ten belongs to the probe split
TASKS = ("code_i", "code_o", "code_f")
HELPER_NAMES = ("g", "h", "p")


class GradedError(ValueError):
    """A bad argument to the graded generator; the message names it and the accepted values."""


# ---------------------------------------------------------------------------------------------------
# New statement makers (levels 3-5). Like programs.py's, each appends lines binding one new name (or returns
# False when nothing in scope fits).


def _st_if_elif(b: P._Builder) -> bool:
    rng = b.rng
    n = b.pick("int")
    s = b.pick("str")
    xs = b.pick("list")
    conds: list[str] = []
    if n:
        conds += [P._cond_on_int(b, n), P._cond_on_int(b, n)]
    if s:
        conds += [f"len({s}) > {rng.randint(2, 5)}", f"'{rng.choice(P.LETTERS)}' in {s}", f"{s} == {s}[::-1]"]
    if xs:
        conds += [f"len({xs}) > {rng.randint(2, 4)}", f"sum({xs}) % 2 == 0", f"{rng.randint(0, 9)} in {xs}"]
    if len(conds) < 2:
        return False
    c1, c2 = rng.sample(conds, 2)
    r = b.fresh("int")
    lines = [
        f"if {c1}:",
        f"    {r} = {P._int_expr(b, rng.randint(1, 2))}",
        f"elif {c2}:",
        f"    {r} = {P._int_expr(b, rng.randint(1, 2))}",
        "else:",
        f"    {r} = {P._int_expr(b, rng.randint(0, 2))}",
    ]
    b.ops.append("if/elif")
    b.lines += lines
    b.bind(r, "int")
    return True


def _st_str_chain(b: P._Builder) -> bool:
    rng = b.rng
    s = b.pick("str")
    strs = b.pick("strs")
    opts: list[tuple[str, str, str]] = []
    if s:
        a, c = rng.choice(P.LETTERS), rng.choice(P.LETTERS)
        sep = rng.choice("-_.")
        opts += [
            (f"'{sep}'.join(w.upper() for w in {s}.split('{a}'))", "str", "split and join"),
            (f"{s}.replace('{a}', '').strip('{c}')", "str", "replace"),
            (f"{s}.lower().count('{a}')", "int", "count"),
            (f"{s}.find('{a}')", "int", "find"),
            (f"{s}.upper()[::-1].replace('{a.upper()}', '{sep}')", "str", "string methods"),
            (f"len(set({s}))", "int", "set"),
            (f"''.join(sorted(set({s})))", "str", "set"),
        ]
    if strs:
        opts += [
            (f"' '.join(sorted({strs}, key=len))", "str", "sorting"),
            (f"sum(len(w) for w in {strs} if '{rng.choice('aeo')}' in w)", "int", "generator"),
            (f"[w.capitalize() for w in {strs} if w]", "strs", "capitalize"),
        ]
    if not opts:
        return False
    expr, typ, op = rng.choice(opts)
    b.assign(expr, typ, op)
    return True


def _st_list_mut(b: P._Builder) -> bool:
    rng = b.rng
    xs = b.pick("list")
    if not xs:
        return False
    n = b.pick("int")
    ys = b.fresh("list")
    lines = [f"{ys} = list({xs})"]
    extra = [
        f"{ys}.append({n if n else rng.randint(0, 9)})",
        f"{ys}.sort()",
        f"{ys}.reverse()",
        f"{ys}.extend([v % {rng.randint(2, 5)} for v in {xs}])",
        f"{ys}.insert(0, len({ys}))",
    ]
    lines += rng.sample(extra, rng.randint(1, 2))
    if rng.random() < 0.4:
        lines += [f"if {ys}:", f"    {ys}.pop()"]
    b.ops.append("list methods")
    b.lines += lines
    b.bind(ys, "list")
    return True


_INT_FNS = ("max", "min", "abs")


def _nested_int(b: P._Builder, depth: int) -> str:
    if depth <= 0:
        return P._int_atom(b)
    fn = b.rng.choice(_INT_FNS)
    inner = _nested_int(b, depth - 1)
    if fn == "abs":
        return f"abs({inner} - {b.rng.randint(1, 9)})"
    return f"{fn}({inner}, {P._int_expr(b, 1)})"


def _st_nested_call(b: P._Builder) -> bool:
    name = b.fresh("int")
    b.lines.append(f"{name} = {_nested_int(b, b.rng.randint(2, 3))}")
    b.ops.append("nested calls")
    b.bind(name, "int")
    return True


def _st_helper_def(b: P._Builder) -> bool:
    rng = b.rng
    free = [h for h in HELPER_NAMES if h not in b.used]
    if not free:
        return False
    h = free[0]
    b.used.add(h)
    k1, k2 = rng.randint(2, 5), rng.randint(0, 6)
    body = rng.choice(
        [
            [f"if v % {k1} == 0:", f"    return v // {k1}", f"return v * {k1} + {k2}"],
            [
                f"if v > {k2}:",
                f"    return v - {k2}",
                f"elif v < -{k1}:",
                f"    return v + {k1}",
                "return v * 2",
            ],
            ["t = 0", f"for i in range(abs(v) % {k1} + 1):", "    t += i", f"return t + {k2}"],
            [f"return max(v, {k1}) - min(v, {k2})"],
            ["t = v", f"while t > {k1 + 4}:", f"    t = t // {k1}", "return t"],
        ]
    )
    b.lines += [f"def {h}(v):", *(f"    {line}" for line in body)]
    b.ops.append("helper function")
    b.bind(h, "fn")
    return True


def _st_call_helper(b: P._Builder) -> bool:
    rng = b.rng
    fns = b.of("fn")
    if not fns:
        return False
    g = rng.choice(fns)
    xs = b.pick("list")
    opts: list[tuple[str, str]] = [
        (f"{g}({P._int_atom(b)})", "int"),
        (f"{g}({g}({P._int_atom(b)}) + 1)", "int"),
    ]
    if len(fns) > 1:
        other = rng.choice([x for x in fns if x != g])
        opts.append((f"{g}({other}({P._int_atom(b)}))", "int"))
    if xs:
        opts += [(f"[{g}(v) for v in {xs}]", "list"), (f"sum({g}(v) for v in {xs})", "int")]
    expr, typ = rng.choice(opts)
    b.assign(expr, typ, "nested calls")
    return True


def _st_dict_build(b: P._Builder) -> bool:
    rng = b.rng
    xs = b.pick("list")
    strs = b.pick("strs")
    s = b.pick("str")
    opts = []
    name = b.fresh("dict")
    if xs:
        k = rng.randint(2, 4)
        opts.append(
            [
                f"{name} = {{}}",
                f"for v in {xs}:",
                f"    key = str(v % {k})",
                f"    {name}[key] = {name}.get(key, 0) + v",
            ]
        )
    if strs:
        opts.append(
            [f"{name} = {{}}", f"for w in {strs}:", f"    {name}[w[:1]] = {name}.get(w[:1], 0) + len(w)"]
        )
    if s:
        opts.append(
            [
                f"{name} = {{}}",
                f"for c in {s}:",
                f"    if c in {name}:",
                f"        {name}[c] += 1",
                "    else:",
                f"        {name}[c] = 1",
            ]
        )
    if not opts:
        b.used.discard(name)
        return False
    b.lines += rng.choice(opts)
    b.ops.append("dict")
    b.bind(name, "dict")
    return True


def _st_nested_loop(b: P._Builder) -> bool:
    rng = b.rng
    xs = b.pick("list")
    s = b.pick("str")
    if not xs and not s:
        return False
    acc = b.fresh("int")
    k = rng.randint(2, 4)
    if xs and (not s or rng.random() < 0.6):
        lines = [
            f"{acc} = 0",
            f"for v in {xs}:",
            f"    if v % {k} == 0:",
            f"        for i in range(v % {k + 2}):",
            f"            {acc} += i",
            f"    elif v > {rng.randint(2, 8)}:",
            f"        {acc} -= v",
            "    else:",
            f"        {acc} += {rng.randint(1, 3)}",
        ]
    else:
        lines = [
            f"{acc} = 0",
            f"for c in {s}:",
            f"    for j in range({k}):",
            f"        if ord(c) % {k} == j:",
            f"            {acc} += j",
        ]
    b.ops += ["nested loops"]
    b.lines += lines
    b.bind(acc, "int")
    return True


_BASE = [m for m in P.STATEMENTS if m[0] is not P._st_helper]  # programs.py's helper lives outside b.lines
_L3 = [(_st_if_elif, 2), (_st_str_chain, 2), (_st_list_mut, 1.5), (_st_nested_call, 1.5)]
_L4 = [(_st_helper_def, 3), (_st_call_helper, 3), (_st_dict_build, 2)]
_L5 = [(_st_nested_loop, 3)]
MAKERS: dict[int, list] = {
    1: list(P.EASY_STATEMENTS),
    2: _BASE,
    3: _BASE + _L3,
    4: _BASE + _L3 + _L4,
    5: _BASE + _L3 + _L4 + _L5,
}


# ---------------------------------------------------------------------------------------------------
# Programs


@dataclass(frozen=True)
class GradedProgram:
    """One program, its level, its structural features, and the working (input, output) pairs it was drawn with."""

    code: str
    param_types: tuple[str, ...]
    message: str
    level: int
    features: dict[str, int] = field(compare=False)
    pairs: tuple[tuple[str, str], ...] = ()


def parse_levels(text: str) -> tuple[int, ...]:
    """`"1-5"`, `"3"`, `"1,1,2,3"` -> the graded levels a corpus draws from (uniformly over the list, so a level
    listed twice is drawn twice as often). Raises GradedError naming the bad part."""
    out: list[int] = []
    for part in str(text).split(","):
        lo, sep, hi = part.strip().partition("-")
        try:
            a, b = int(lo), int(hi) if sep else int(lo)
        except ValueError:
            raise GradedError(f"bad level {part!r}: expected N, N-M or N,M,... with N in {LEVELS}") from None
        if a not in LEVELS or b not in LEVELS or b < a:
            raise GradedError(f"bad level {part!r}: levels are {LEVELS[0]}..{LEVELS[-1]}, low before high")
        out += range(a, b + 1)
    return tuple(out)


def is_graded_level(text: str) -> bool:
    """Whether a `--level` value names graded levels (digits) rather than `programs.py`'s easy / full."""
    return bool(str(text)) and str(text)[0].isdigit()


def masked_key(program: str) -> str | None:
    """The program with literals masked (`tasks.masking.program_key`): two programs that differ only in constants
    share it. None when it does not parse."""
    return program_key(program, masked=True)


def graded_split(program: str) -> str:
    """ "probe" or "train", by a stable hash of the masked key (every constant-variant lands on the same side)."""
    key = masked_key(program)
    if key is None:
        raise GradedError("program does not parse; only parsable programs have a split")
    h = int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big")
    return "probe" if h % PROBE_MOD == 0 else "train"


def top_level_statements(program: str) -> int:
    """Statements at the top level of f's body, the final `return` excluded."""
    tree = ast.parse(program)
    fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "f")
    body = fn.body[:-1] if fn.body and isinstance(fn.body[-1], ast.Return) else fn.body
    return len(body)


class _StepLimit(Exception):
    pass


def run_bounded(fn, input_text: str, max_steps: int = MAX_STEPS) -> str | None:
    """`programs.run` (repr of the output, None when it raises or the output is long or not plain data), stopped
    after `max_steps` traced lines and calls (then None too)."""
    steps = 0

    def tracer(frame, event, arg):
        nonlocal steps
        steps += 1
        if steps > max_steps:
            raise _StepLimit
        return tracer

    old = sys.gettrace()
    sys.settrace(tracer)
    try:
        return P.run(fn, input_text)
    except _StepLimit:
        return None  # the bound hit after f returned, while `run` checked a long output (outside its own try)
    finally:
        sys.settrace(old)


def _draft(rng: random.Random, level: int) -> tuple[str, tuple[str, ...], str]:
    """One program at `level` (not yet checked): parameters, statements, return; dead statements pruned."""
    easy = level == 1
    if easy:
        types = [rng.choice(["int", "str", "list"]) for _ in range(rng.choices([1, 2], weights=[3, 1])[0])]
    else:
        n_params = rng.choices([1, 2, 3], weights=[4, 4, 2 if level >= 3 else 1])[0]
        types = [rng.choices(P.TYPES, weights=[3, 3, 3, 1, 1])[0] for _ in range(n_params)]
    b = P._Builder(rng, simple=True, easy=easy)
    params = []
    for typ in types:
        name = next(p for p in P.SIMPLE_PARAM_NAMES[typ] if p not in b.used)
        b.used.add(name)
        params.append(name)
        b.bind(name, typ)
    lo, hi = STATEMENT_RANGE[level]
    # Pruning drops statements whose results never reach the return; draw a few extra at the high levels.
    target = rng.randint(lo, hi) + (0 if level <= 2 else level - 2)
    makers, weights = zip(*MAKERS[level], strict=True)
    stmts: list[tuple[list[str], set[str], list[str]]] = []
    tries = 0
    while len(stmts) < target and tries < 60:
        tries += 1
        n_env, n_lines, n_ops = len(b.env), len(b.lines), len(b.ops)
        if rng.choices(makers, weights=weights)[0](b):
            stmts.append((b.lines[n_lines:], {n for n, _ in b.env[n_env:]}, b.ops[n_ops:]))
    b.env = [(n, t) for n, t in b.env if t != "fn"]  # the return reads a value, never a helper function
    ret = P._final_return(b)
    live = P._names(ret)
    kept = []
    for lines, binds, ops in reversed(stmts):
        if binds & live:
            kept.append((lines, binds, ops))
            live |= P._names("\n".join(lines))
    kept.reverse()
    body = [f"    {line}" for lines, _, _ in kept for line in lines]
    code = "\n".join([f"def f({', '.join(params)}):", *body, f"    return {ret}"])
    words = list(dict.fromkeys(op for _, _, ops in kept for op in ops))[:4]
    message = f"Takes {' and '.join(P.TYPE_WORDS[t] for t in types)}." + (
        f" Uses {', '.join(words)}." if words else ""
    )
    return code, tuple(types), message


def _io(rng: random.Random, fn, types: tuple[str, ...], level: int, n: int) -> list[tuple[str, str]]:
    pairs: list[tuple[str, str]] = []
    seen: set[str] = set()
    for _ in range(4 * n):
        text = P.input_text([P.random_value(rng, t, small=level == 1) for t in types])
        if text in seen or len(text) > MAX_INPUT_CHARS:
            continue
        seen.add(text)
        out = run_bounded(fn, text)
        if out is not None:
            pairs.append((text, out))
            if len(pairs) == n:
                break
    return pairs


def sample_graded(
    rng: random.Random,
    level: int | None = None,
    split: str = "train",
    n_inputs: int = 1,
    accept: Callable[[str], bool] | None = None,
) -> GradedProgram:
    """Draw one checked program at `level` (None: a level uniformly at random) from `split` ("train" or
    "probe"), with `n_inputs` distinct working inputs. Resamples until the program has the level's number of
    top-level statements, passes the capability policy, and runs on enough inputs within the step bound (for
    `n_inputs` > 2, with at least 3 distinct outputs, so the inputs say something about the function).
    `accept`: a cheap test on the program text, applied first (the misconception drills ask for a feature)."""
    from populora.diagnostics.features import program_features
    from populora.tasks.policy import parse_program

    if level is None:
        level = rng.choice(LEVELS)
    if level not in LEVELS:
        raise GradedError(f"level must be one of {LEVELS}, got {level!r}")
    if split not in SPLITS:
        raise GradedError(f"split must be one of {SPLITS}, got {split!r}")
    lo, hi = STATEMENT_RANGE[level]
    while True:
        code, types, message = _draft(rng, level)
        if accept is not None and not accept(code):
            continue
        if not lo <= top_level_statements(code) <= hi:
            continue
        if graded_split(code) != split:
            continue
        feats = program_features(code)  # before the policy and the runs: the depth floor rejects most
        if feats["ast_depth"] < MIN_AST_DEPTH[level]:
            continue
        tree, _why = parse_program(code, require_params=True)
        if tree is None:
            continue
        fn = P.compile_program(code)
        pairs = _io(rng, fn, types, level, n_inputs)
        if len(pairs) < n_inputs or n_inputs > 2 and len({o for _, o in pairs}) < 3:
            continue
        return GradedProgram(code, types, message, level, feats, tuple(pairs))


def probe_items(
    task: str,
    n: int,
    seed: int = 30_030,
    n_inputs: int = 10,
    sandbox=None,
) -> list[tuple[int, object]]:
    """`n` distinct probe items of `task`, from the probe split, spread evenly across the levels (n // 5 each,
    the remainder to the lowest levels), as (level, item) in level order. An item is a `GradedProgram` (code_f:
    `n_inputs` pairs; code_i / code_o: one); with a `sandbox`, it is the task's `Problem`, validated there
    (programs the task refuses are redrawn). Masked keys are distinct within the set."""
    if task not in TASKS:
        raise GradedError(f"task must be one of {TASKS}, got {task!r}")
    if n < 1:
        raise GradedError(f"n must be >= 1, got {n}")
    t = None
    if sandbox is not None:
        from populora.tasks import get

        t = get(task)
        n_inputs = t.config.n_inputs if task == "code_f" else 1
    k = n_inputs if task == "code_f" else 1
    rng = random.Random(f"{seed}:{task}")
    per = [n // len(LEVELS) + (1 if i < n % len(LEVELS) else 0) for i in range(len(LEVELS))]
    out: list[tuple[int, object]] = []
    seen: set[str] = set()
    for level, count in zip(LEVELS, per, strict=True):
        got = 0
        tries = 0
        while got < count:
            tries += 1
            if tries > 50 * count:
                raise GradedError(f"could only draw {got} of {count} level-{level} {task} probe items")
            prog = sample_graded(rng, level, split="probe", n_inputs=k)
            key = masked_key(prog.code)
            if key in seen:
                continue
            item: object = prog
            if t is not None:
                from populora.tasks import InvalidProblem

                message = prog.message if task == "code_f" else ""
                try:
                    item = t.problem_from(sandbox, prog.code, [i for i, _ in prog.pairs], message, "probe", 0)
                except InvalidProblem:
                    continue
            seen.add(key)
            out.append((level, item))
            got += 1
    return out


__all__ = [
    "LEVELS",
    "MAX_STEPS",
    "PROBE_MOD",
    "STATEMENT_RANGE",
    "GradedError",
    "GradedProgram",
    "graded_split",
    "is_graded_level",
    "parse_levels",
    "masked_key",
    "probe_items",
    "run_bounded",
    "sample_graded",
    "top_level_statements",
]
