"""A seeded generator of small, deterministic Python programs `def f(...)` and their input/output pairs.

The programs are built from a typed grammar: parameters of a few plain-data types (int, str, list of
ints, list of strs, dict str->int), then 1-4 statements that each bind a new variable from the ones in
scope (expressions of varying depth, comprehensions, accumulator loops, bounded while loops, if/else
blocks, small helper functions), then a `return`. Because we generate them ourselves, they are safe to
execute in-process (`run`), which is what makes building a corpus of millions of tokens take seconds.

Every program also carries a short English `message` (its signature and the operations it uses), the
kind of hint a code_f teacher gives its student.

Modules: `vocab` (types, names, words, random values), `grammar` (the statement makers and the `_Builder`),
and this one (program assembly, the train / heldout split, in-process execution and the samplers). Every name
of the first two is re-exported here.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass

from populora.pretrain.grammar import EASY_STATEMENTS as EASY_STATEMENTS
from populora.pretrain.grammar import STATEMENTS as STATEMENTS
from populora.pretrain.grammar import _Builder as _Builder
from populora.pretrain.grammar import _cond_on_int as _cond_on_int
from populora.pretrain.grammar import _final_return as _final_return
from populora.pretrain.grammar import _int_atom as _int_atom
from populora.pretrain.grammar import _int_expr as _int_expr
from populora.pretrain.grammar import _st_helper as _st_helper
from populora.pretrain.grammar import _st_int_expr as _st_int_expr
from populora.pretrain.vocab import INT_OPS as INT_OPS
from populora.pretrain.vocab import LETTERS as LETTERS
from populora.pretrain.vocab import PARAM_NAMES as PARAM_NAMES
from populora.pretrain.vocab import RESULT_NAMES as RESULT_NAMES
from populora.pretrain.vocab import SIMPLE_PARAM_NAMES as SIMPLE_PARAM_NAMES
from populora.pretrain.vocab import SIMPLE_RESULT_NAMES as SIMPLE_RESULT_NAMES
from populora.pretrain.vocab import TYPE_WORDS as TYPE_WORDS
from populora.pretrain.vocab import TYPES as TYPES
from populora.pretrain.vocab import WORDS as WORDS
from populora.pretrain.vocab import int_op as int_op
from populora.pretrain.vocab import random_value as random_value


def _names(source: str) -> set[str]:
    """Every identifier that appears in the source (a superset of the names it reads; enough for pruning)."""
    import ast

    return {node.id for node in ast.walk(ast.parse(source)) if isinstance(node, ast.Name)}


@dataclass(frozen=True)
class GeneratedProgram:
    """One program with the types of its parameters and a hint message for code_f."""

    code: str
    param_types: tuple[str, ...]
    message: str
    level: str = "full"


NAMES = ("varied", "simple")
# The generator settings the bundled model was pretrained with; every sampler defaults to them, so seeds and
# probes drawn without arguments come from the model's own distribution.
DEFAULT_NAMES = "simple"
MAX_STATEMENTS = 2
# Difficulty levels (statement kinds): "full" is the whole grammar (loops, comprehensions, while, if/else,
# helpers, depth-3 expressions); "easy" is one-line arithmetic / string / list expressions of depth <= 2
# over small ints and short literals. `max_statements` applies at both levels.
LEVELS = ("easy", "full")
DEFAULT_LEVEL = "easy"

# Held-out program space. A stable hash of the program text puts one program in HELDOUT_MOD into the
# "heldout" split (probe sets, the tiny-model bench); pretraining corpora and trainer seeds draw from
# "train" only, so no held-out program can ever appear in them, whatever the seeds.
SPLITS = ("train", "heldout", "any")
HELDOUT_MOD = 10


def program_split(code: str) -> str:
    """ "heldout" or "train": which disjoint part of the program space `code` belongs to."""
    h = int.from_bytes(hashlib.sha256(code.encode()).digest()[:8], "big")
    return "heldout" if h % HELDOUT_MOD == 0 else "train"


def _in_split(code: str, split: str) -> bool:
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    return split == "any" or program_split(code) == split


def sample_program(
    rng: random.Random,
    max_statements: int = MAX_STATEMENTS,
    names: str = DEFAULT_NAMES,
    level: str = DEFAULT_LEVEL,
) -> GeneratedProgram:
    """Draw one program. It may still raise on some inputs; `sample_io` filters those out.
    `names`: "varied" (random names from larger pools) or "simple" (see SIMPLE_PARAM_NAMES).
    `max_statements`: the number of statements is 1..max_statements, each one half as likely as the one
    before (the difficulty knob: a 4 M model can trace one statement, rarely three).
    `level`: which statement kinds may appear (LEVELS)."""
    if names not in NAMES:
        raise ValueError(f"names must be one of {NAMES}, got {names!r}")
    if level not in LEVELS:
        raise ValueError(f"level must be one of {LEVELS}, got {level!r}")
    easy = level == "easy"
    if max_statements < 1:
        raise ValueError(f"max_statements must be >= 1, got {max_statements}")
    if easy:
        n_params = rng.choices([1, 2], weights=[3, 1])[0]
        types = [rng.choice(["int", "str", "list"]) for _ in range(n_params)]
    else:
        n_params = rng.choices([1, 2, 3], weights=[6, 4, 1])[0]
        types = [rng.choices(TYPES, weights=[3, 3, 3, 1, 1])[0] for _ in range(n_params)]
    b = _Builder(rng, simple=names == "simple", easy=easy)
    params: list[str] = []
    for typ in types:
        if b.simple:
            name = next(p for p in SIMPLE_PARAM_NAMES[typ] if p not in b.used)
        else:
            name = rng.choice([p for p in PARAM_NAMES[typ] if p not in b.used])
        b.used.add(name)
        params.append(name)
        b.bind(name, typ)
    # Short programs dominate (a small model can learn to trace them); longer ones keep the shapes varied.
    n_statements = rng.choices(range(1, max_statements + 1), weights=[0.5**k for k in range(max_statements)])[
        0
    ]
    makers, weights = zip(*(EASY_STATEMENTS if easy else STATEMENTS), strict=True)
    # (lines, names it binds, op words) per statement, so dead statements can be pruned below.
    stmts: list[tuple[list[str], set[str], list[str]]] = []
    tries = 0
    while len(stmts) < n_statements and tries < 30:
        tries += 1
        n_env, n_lines, n_ops = len(b.env), len(b.lines), len(b.ops)
        if rng.choices(makers, weights=weights)[0](b):
            stmts.append((b.lines[n_lines:], {n for n, _ in b.env[n_env:]}, b.ops[n_ops:]))
    if not stmts:
        n_env, n_lines, n_ops = len(b.env), len(b.lines), len(b.ops)
        _st_int_expr(b)
        stmts.append((b.lines[n_lines:], {n for n, _ in b.env[n_env:]}, b.ops[n_ops:]))
    ret = _final_return(b)
    live = _names(ret)
    kept: list[tuple[list[str], set[str], list[str]]] = []
    for lines, binds, ops in reversed(stmts):
        if binds & live:
            kept.append((lines, binds, ops))
            live |= _names("\n".join(lines))
    kept.reverse()
    helpers = b.helpers if "g" in live else []
    body = [f"    {line}" for lines, _, _ in kept for line in lines]
    header = f"def f({', '.join(params)}):"
    code = "\n".join([header, *helpers, *body, f"    return {ret}"])
    words = list(dict.fromkeys(op for _, _, ops in kept for op in ops))[:4]
    arg_words = " and ".join(TYPE_WORDS[t] for t in types)
    message = f"Takes {arg_words}." + (f" Uses {', '.join(words)}." if words else "")
    return GeneratedProgram(code=code, param_types=tuple(types), message=message, level=level)


# ---------------------------------------------------------------------------------------------------
# Execution (in-process: these are our own generated programs)

_PLAIN = (int, str, list, dict, tuple, bool, type(None))


def _plain(value: object, depth: int = 0) -> bool:
    if depth > 4 or not isinstance(value, _PLAIN) or isinstance(value, float):
        return False
    if isinstance(value, list | tuple):
        return all(_plain(v, depth + 1) for v in value)
    if isinstance(value, dict):
        return all(_plain(k, depth + 1) and _plain(v, depth + 1) for k, v in value.items())
    return True


def compile_program(code: str):
    """Exec the program source and return its `f`."""
    namespace: dict[str, object] = {}
    exec(compile(code, "<generated>", "exec"), namespace)  # noqa: S102 - our own generated code
    return namespace["f"]


def run(fn, input_text: str, max_repr: int = 120) -> str | None:
    """`repr(f(*args))` for the argument text, or None if it raises or the output is not small plain data."""
    try:
        args = eval(f"({input_text},)", {})  # noqa: S307 - literal text we generated
        value = fn(*args)
    except Exception:
        return None
    if not _plain(value):
        return None
    out = repr(value)
    if len(out) > max_repr or isinstance(value, int) and abs(value) > 10**6:
        return None
    return out


def input_text(values: list[object]) -> str:
    return ", ".join(repr(v) for v in values)


def sample_io(
    rng: random.Random, prog: GeneratedProgram, n: int, fn=None, max_tries: int | None = None
) -> list[tuple[str, str]]:
    """Up to `n` distinct (input text, output repr) pairs for the program."""
    fn = fn or compile_program(prog.code)
    pairs: list[tuple[str, str]] = []
    seen: set[str] = set()
    for _ in range(max_tries or 4 * n):
        text = input_text([random_value(rng, t, small=prog.level == "easy") for t in prog.param_types])
        if text in seen or len(text) > 80:
            continue
        seen.add(text)
        out = run(fn, text)
        if out is not None:
            pairs.append((text, out))
            if len(pairs) == n:
                break
    return pairs


@dataclass(frozen=True)
class Triplet:
    program: str
    input: str
    output: str
    message: str


def sample_triplet(
    rng: random.Random,
    names: str = DEFAULT_NAMES,
    max_statements: int = MAX_STATEMENTS,
    split: str = "train",
    level: str = DEFAULT_LEVEL,
) -> Triplet:
    """A program with one working input and its output (resamples until one works), from `split`."""
    while True:
        prog = sample_program(rng, max_statements, names, level)
        if not _in_split(prog.code, split):
            continue
        pairs = sample_io(rng, prog, 1)
        if pairs:
            return Triplet(prog.code, pairs[0][0], pairs[0][1], prog.message)


def sample_code_f(
    rng: random.Random,
    n_inputs: int = 10,
    names: str = DEFAULT_NAMES,
    max_statements: int = MAX_STATEMENTS,
    split: str = "train",
    level: str = DEFAULT_LEVEL,
) -> tuple[GeneratedProgram, list[tuple[str, str]]]:
    """A program with `n_inputs` distinct working inputs, for code_f examples, from `split`."""
    while True:
        prog = sample_program(rng, max_statements, names, level)
        if not _in_split(prog.code, split):
            continue
        pairs = sample_io(rng, prog, n_inputs)
        # Outputs that are all the same teach nothing about the function; require some variety.
        if len(pairs) == n_inputs and len({o for _, o in pairs}) >= min(3, n_inputs):
            return prog, pairs
