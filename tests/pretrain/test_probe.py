"""The fixed held-out probe sets: shipped, verified, disjoint from every training source, and scored."""

from __future__ import annotations

import random
import re

import pytest

from populora.pretrain.corpus import build_corpus
from populora.pretrain.probe import (
    PROBE_DIR,
    TASKS,
    ProbeError,
    build_probe,
    load_probe,
    load_probes,
    score_probe,
    write_probe,
)
from populora.pretrain.programs import program_split, sample_code_f, sample_triplet
from populora.pretrain.tasks_render import TasksRenderer
from populora.sandbox import Sandbox
from populora.tasks import get


@pytest.fixture(scope="module")
def sandbox():
    with Sandbox(workers=1) as sb:
        yield sb


@pytest.fixture(scope="module")
def probes():
    return load_probes()


def _programs_in(text: str) -> set[str]:
    return set(re.findall(r"```python\n(.*?)\n```", text, flags=re.S))


def test_probe_sets_ship_with_the_package_and_are_large_distinct_and_held_out(probes):
    for task in TASKS:
        assert (PROBE_DIR / f"{task}.jsonl.gz").stat().st_size < 200_000  # small enough to ship
        ps = probes[task]
        assert len(ps) >= 200
        assert {p.task for p in ps} == {task}
        assert len({p.program for p in ps}) == len(ps)  # one problem per program
        assert all(program_split(p.program) == "heldout" for p in ps)
        assert all(len(p.inputs) == (get("code_f").config.n_inputs if task == "code_f" else 1) for p in ps)


def test_probe_outputs_are_what_the_sandbox_computes(probes, sandbox):
    for task in TASKS:
        t = get(task)
        for p in probes[task][:: max(1, len(probes[task]) // 15)]:
            again = t.problem_from(sandbox, p.program, list(p.inputs), p.message, "check", 0)
            assert again.outputs == p.outputs, p.program
            # The gold answer scores True, so every probe problem is solvable.
            assert t.score(
                p, [t.parse_answer(t.render_answer(t.gold_answer(p), template="compact"))], sandbox
            )


def test_training_sources_never_draw_a_probe_program(probes):
    probe_programs = {p.program for ps in probes.values() for p in ps}
    # The pretraining corpus (the bundled model's seed 0 stream, a sample of it) and other seeds.
    for seed in (0, 1, 7):
        seen: set[str] = set()
        for e in build_corpus(seed, 1500, TasksRenderer()):
            seen |= _programs_in(e.prompt) | _programs_in(e.completion)
            if e.kind == "program":
                seen.add(e.completion.split("\n# f(")[0])
        assert len(seen) > 500
        assert not seen & probe_programs
    # The samplers' default split is "train" (what the trainer's synthetic seeds call).
    rng = random.Random(3)
    assert all(program_split(sample_triplet(rng).program) == "train" for _ in range(400))
    assert all(program_split(sample_code_f(rng)[0].code) == "train" for _ in range(100))
    with pytest.raises(ValueError, match="split"):
        sample_triplet(rng, split="test")


def test_trainer_synthetic_seeds_hold_no_probe_program(probes, sandbox):
    from populora.train.setup import synthetic_seeds

    probe_programs = {p.program for ps in probes.values() for p in ps}
    for seed in (0, 1):
        seeds = synthetic_seeds(40, sandbox, seed)
        assert len(seeds) > 100
        assert not {p.program for p in seeds} & probe_programs


def test_build_probe_is_deterministic_and_round_trips_through_the_file(sandbox, tmp_path):
    a = build_probe("code_o", sandbox, n=6, seed=5)
    b = build_probe("code_o", sandbox, n=6, seed=5)
    assert [p.id for p in a] == [p.id for p in b]
    assert [p.id for p in build_probe("code_o", sandbox, n=6, seed=6)] != [p.id for p in a]
    write_probe(a, tmp_path / "code_o.jsonl.gz")
    first = (tmp_path / "code_o.jsonl.gz").read_bytes()
    write_probe(b, tmp_path / "code_o.jsonl.gz")
    assert (tmp_path / "code_o.jsonl.gz").read_bytes() == first  # same problems, same bytes
    assert [p.id for p in load_probe("code_o", tmp_path)] == [p.id for p in a]
    with pytest.raises(ProbeError, match="rebuild"):
        load_probe("code_i", tmp_path)
    with pytest.raises(ProbeError, match="unknown task"):
        load_probe("code_x")


def test_score_probe_is_the_greedy_accuracy_of_the_slot_per_task(probes, sandbox):
    from populora.engine import GenRequest, build

    engine = build("tiny", n_slots=2, rank=4, alpha=8, seed=0)
    subset = {t: probes[t][:5] for t in TASKS}
    got = score_probe(engine, 1, subset, "compact", {"code_i": 48, "code_o": 48, "code_f": 128}, sandbox)
    assert set(got) == set(TASKS)
    # The same answers one request at a time (no batching, no mixing of task types).
    for task in TASKS:
        t = get(task)
        budget = 128 if task == "code_f" else 48
        ok = []
        for p in subset[task]:
            (g,) = engine.generate(
                [GenRequest(1, t.student_prompt(p, template="compact"), max_new_tokens=budget, temperature=0)]
            )
            ok.append(t.score(p, [t.parse_answer(g.text)], sandbox)[0])
        assert got[task] == sum(ok) / len(ok), task
    # A flat list works too and only reports the task types it holds.
    flat = score_probe(engine, 1, subset["code_o"], "compact", 48, sandbox)
    assert flat == {"code_o": got["code_o"]}
    assert score_probe(engine, 1, [], "compact", 48, sandbox) == {}
    with pytest.raises(ProbeError, match="Sandbox"):
        score_probe(engine, 1, subset["code_o"], "compact", 48, None)
