import random

import numpy as np
import pytest

from populora.tasks import Problem
from populora.tasks.buffers import IDENTITY_PROGRAM, ProblemBuffer, TaskBuffers, identity_problem


def _p(i, task="code_o", step=None, proposer=None):
    return Problem(
        task, f"def f(x):\n    return x + {i}", ("1",), (str(1 + i),), proposer=proposer, step=step
    )


def test_identity_seed():
    b = TaskBuffers.seeded()
    assert b.sizes() == {"code_i": 1, "code_o": 1, "code_f": 1}
    p = b["code_o"].sample(6, 0)[0]
    assert (
        p.program == IDENTITY_PROGRAM and p.inputs == ('"Hello world"',) and p.outputs == ("'Hello world'",)
    )
    f = identity_problem("code_f")
    assert len(f.inputs) == 6 and f.outputs[2] == "{'a': 1, 'b': 2}" and len(f.hidden) == 3
    assert b.sample_program(random.Random(0)).program == IDENTITY_PROGRAM


def test_fifo_eviction_and_dedup():
    b = ProblemBuffer("code_o", capacity=3)
    assert b.extend(_p(i) for i in range(5)) == 5
    assert [p.outputs[0] for p in b] == ["3", "4", "5"]  # the two oldest were evicted
    assert not b.add(_p(4, proposer="T9")) and len(b) == 3  # same content = same id: no duplicate
    with pytest.raises(ValueError):
        b.add(_p(9, task="code_i"))


def test_sample_without_replacement_and_reproducible():
    b = ProblemBuffer("code_o", problems=[_p(i) for i in range(10)])
    s = b.sample(6, random.Random(1))
    assert len(s) == 6 and len({p.id for p in s}) == 6
    assert [p.id for p in s] == [p.id for p in b.sample(6, random.Random(1))]
    assert len(b.sample(50, np.random.default_rng(0))) == 10
    assert len({p.id for p in b.sample(10, np.random.default_rng(0))}) == 10
    assert b.sample(3, 7) == b.sample(3, 7)


def test_added_since_and_origin():
    b = ProblemBuffer("code_o", problems=[_p(i, step=i, proposer=f"T{i % 2}") for i in range(6)])
    assert [p.step for p in b.added_since(4)] == [4, 5]
    assert {p.proposer for p in b} == {"T0", "T1"}


def test_save_load_round_trip(tmp_path):
    b = TaskBuffers.seeded(capacity=4)
    b.extend([_p(i, step=i, proposer="T0") for i in range(6)])
    b.add(_p(1, task="code_i", step=3, proposer="T1"))
    path = tmp_path / "buffers.jsonl"
    b.save(path)
    c = TaskBuffers.load(path)
    assert c.capacity == 4 and c.sizes() == b.sizes()
    for t in b:
        assert [p.to_json() for p in c[t]] == [p.to_json() for p in b[t]]
    # a line cut by a kill at the end is skipped; a bad line elsewhere is an error naming it
    text = path.read_text()
    path.write_text(text + '{"task": "code_o", "prog')
    assert TaskBuffers.load(path).sizes() == b.sizes()
    lines = text.splitlines()
    path.write_text("\n".join([lines[0], "not json", *lines[1:]]) + "\n")
    with pytest.raises(ValueError, match="line 2"):
        TaskBuffers.load(path)
