"""Misconception atoms: one-statement programs built around one class's feature (issue 49's next pilot).

The graded drills (`flaws.FlawDrill`) draw whole generated programs until one carries the wanted class: about
0.1-0.3 s an item, so a corpus holds a few hundred distinct programs a class, and the pilots' model learnt the
misreadings as facts about those programs rather than as rules. An atom is the class's feature alone in the
generator's own style, `def f(xs):\n    ys = xs[::-1]\n    return ys`, with the names, operands and inputs
drawn afresh each time: thousands of distinct items a class in seconds, so a corpus can say the same misreading
in many programs.

Atoms keep the probe held out: each is drawn until its constant- and name-masked program falls in the graded
generator's "train" split (`graded.graded_split`), the split the misconception probe never reads. The item is
made by the same `code_o_item` / `code_i_item` as a drill's, so it carries exactly its class on the shown input.
"""

from __future__ import annotations

import random

from populora.pretrain.flaws import CLASSES, CODE_I_CLASSES, FlawError, FlawItem, check_classes, task_classes

# Per class: (parameter types, result type, expression over the parameters {p0} {p1} and constants {c0} {c}, the
# message's word). Each expression is a form the class's misreading changes on common inputs.
TEMPLATES: dict[str, list[tuple[tuple[str, ...], str, str, str]]] = {
    "range_end_inclusive": [
        (("int",), "list", "list(range({p0}))", "range"),
        (("int",), "list", "list(range({p0} % {c} + 1))", "range"),
        (("int", "int"), "list", "list(range({p0}, {p1}))", "range"),
        (("int",), "int", "sum(range({p0}))", "range"),
        (("int",), "list", "[i * {c} for i in range({p0})]", "range"),
        (("str",), "list", "list(range(len({p0})))", "range"),
    ],
    "slice_end_inclusive": [
        (("str",), "str", "{p0}[:{c}]", "slicing"),
        (("str",), "str", "{p0}[{c0}:{c}]", "slicing"),
        (("list",), "list", "{p0}[:{c}]", "slicing"),
        (("list",), "list", "{p0}[{c0}:{c}]", "slicing"),
        (("str", "int"), "str", "{p0}[:{p1}]", "slicing"),
        (("list",), "int", "sum({p0}[:{c}])", "slicing"),
    ],
    "reverse_slice_forwards": [
        (("str",), "str", "{p0}[::-1]", "reverse"),
        (("list",), "list", "{p0}[::-1]", "reverse"),
        (("str",), "str", "{p0} + {p0}[::-1]", "reverse"),
        (("strs",), "strs", "{p0}[::-1]", "reverse"),
        (("list",), "list", "{p0}[::-1][:{c}]", "reverse"),
    ],
    "sorted_reverse_ignored": [
        (("list",), "list", "sorted({p0}, reverse=True)", "sorting"),
        (("strs",), "strs", "sorted({p0}, reverse=True)", "sorting"),
        (("str",), "list", "sorted({p0}, reverse=True)", "sorting"),
        (("list",), "list", "sorted({p0}, reverse=True)[:{c}]", "sorting"),
    ],
    "mod_as_quotient": [
        (("int",), "int", "{p0} % {c}", "modulo"),
        (("list",), "list", "[v % {c} for v in {p0}]", "modulo"),
        (("list",), "int", "sum({p0}) % {c}", "modulo"),
        (("str",), "int", "len({p0}) % {c}", "modulo"),
    ],
    "floordiv_rounds": [
        (("int",), "int", "{p0} // {c}", "integer division"),
        (("list",), "list", "[v // {c} for v in {p0}]", "integer division"),
        (("list",), "int", "sum({p0}) // {c}", "integer division"),
        (("str",), "int", "len({p0}) // {c}", "integer division"),
    ],
}


def atom_program(rng: random.Random, flaw: str) -> tuple[str, tuple[str, ...], str]:
    """One atom of `flaw`: (program, parameter types, message), names and constants drawn from the generator's
    vocabulary (`vocab`)."""
    from populora.pretrain import vocab

    types, result, expr, word = rng.choice(TEMPLATES[flaw])
    params: list[str] = []
    for t in types:
        params.append(rng.choice([n for n in vocab.PARAM_NAMES[t] if n not in params]))
    name = rng.choice(vocab.RESULT_NAMES[result])
    text = expr.format(
        **{f"p{i}": p for i, p in enumerate(params)},
        c=rng.randint(2, 5),
        c0=rng.randint(0, 2),
    )
    code = f"def f({', '.join(params)}):\n    {name} = {text}\n    return {name}"
    message = f"Takes {' and '.join(vocab.TYPE_WORDS[t] for t in types)}. Uses {word}."
    return code, tuple(types), message


def sample_atom(
    rng: random.Random, task: str, flaw: str, n_inputs: int = 4, max_tries: int = 200, split: str = "train"
) -> FlawItem:
    """A `task` item ("code_o" or "code_i") on an atom of `flaw` from `split` (the corpus: "train"; the probe:
    "probe"): atoms are redrawn until one is in the split and carries the class on one of `n_inputs` random
    inputs."""
    from populora.pretrain.flaws import _compiled, code_i_item, code_o_item
    from populora.pretrain.graded import MAX_INPUT_CHARS, graded_split, run_bounded
    from populora.pretrain.programs import input_text
    from populora.pretrain.vocab import random_value

    check_classes([flaw])
    allowed = CODE_I_CLASSES if task == "code_i" else CLASSES
    if task not in ("code_o", "code_i") or flaw not in allowed:
        raise FlawError(f"{flaw} has no {task} atom; {task} takes {', '.join(allowed)}")
    make = code_o_item if task == "code_o" else code_i_item
    for _ in range(max_tries):
        code, types, message = atom_program(rng, flaw)
        if graded_split(code) != split:
            continue
        fn = _compiled(code, ())
        pairs = []
        for _ in range(2 * n_inputs):
            text = input_text([random_value(rng, t, small=True) for t in types])
            out = run_bounded(fn, text) if len(text) <= MAX_INPUT_CHARS else None
            if out is not None and all(text != seen for seen, _ in pairs):
                pairs.append((text, out))
            if len(pairs) == n_inputs:
                break
        item = make(code, 1, message, pairs, flaw)
        if item is not None:
            return item
    raise FlawError(f"no {task} atom of {flaw} in the {split} split carrying it in {max_tries} draws")


class AtomDrill:
    """A class-balanced stream of atom items for the corpus (the mix kinds `atoms:code_o` / `atoms:code_i`): each
    draw picks a class uniformly from `classes` (those the task has a form for). Deterministic for a given `rng`."""

    def __init__(self, rng: random.Random, task: str, classes=CLASSES):
        self.classes = task_classes(task, classes)
        self.rng, self.task = rng, task

    def next(self) -> FlawItem:
        return sample_atom(self.rng, self.task, self.rng.choice(self.classes))
