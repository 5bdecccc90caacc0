"""`rl.student_rewards=shuffled` (train/controls.py): the update gets the step's student rewards permuted;
the teachers' rewards, the ratings and the logged rewards stay real. Hand traces for the permutation and the
rows; one real step of the bundled model for the wiring."""

import random

import pytest
from test_fidelity import _gen, _step_traces, _trainer

from populora.config import load_config
from populora.train.controls import shuffle_student_rewards
from populora.train.records import ProposalTrace
from populora.train.trainer import Trainer


def _answers(rewards_per_trace: list[list[float]]) -> list[ProposalTrace]:
    out = []
    for i, rewards in enumerate(rewards_per_trace):
        tr = ProposalTrace("T0", "S0", "code_o", gen=_gen(0, 4, i))
        tr.answer_rewards = list(rewards)
        out.append(tr)
    return out


def test_the_shuffle_permutes_across_the_whole_step_and_keeps_the_real_rewards():
    real = [[1.0, -0.5, -0.5, -1.0], [1.0, 1.0, -0.5, -0.5], [], [-1.0, 1.0, -0.5, 1.0]]
    traces = _answers(real)
    shuffle_student_rewards(traces, random.Random(3))
    flat_real = [r for rs in real for r in rs]
    flat_train = [r for t in traces for r in t.train_rewards]
    assert sorted(flat_train) == sorted(flat_real)  # the same multiset: the same advantage scale
    assert flat_train != flat_real  # but another assignment
    assert [len(t.train_rewards) for t in traces] == [4, 4, 0, 4]
    assert [t.answer_rewards for t in traces] == real  # logged, rated and the teachers' rho: the real ones
    again = _answers(real)
    shuffle_student_rewards(again, random.Random(3))
    assert [t.train_rewards for t in again] == [t.train_rewards for t in traces]  # deterministic per seed


def test_rows_train_students_on_the_shuffled_rewards_and_teachers_on_the_real_ones(tmp_path):
    tr = _trainer(tmp_path, "shuf", ["rl.whiten_scope=role"], n_slots=4)
    real = _step_traces("T0", "S0", 0, 2)
    flipped = _step_traces("T0", "S0", 0, 2)
    for t in flipped:  # a hand "permutation": every answer reward reversed within the step
        t.train_rewards = None
    flat = [r for t in flipped for r in t.answer_rewards][::-1]
    flipped[0].train_rewards, flipped[1].train_rewards, flipped[2].train_rewards = flat[:4], flat[4:], []
    rows_real, rows_shuf = tr.build_rows(real), tr.build_rows(flipped)
    teacher = [i for i, r in enumerate(rows_real) if r.slot == 0]
    student = [i for i, r in enumerate(rows_real) if r.slot == 2]
    assert len(teacher) == 3 and len(student) == 8
    # role-scoped whitening: the teachers' advantages do not see the students' rewards at all
    assert [rows_shuf[i].advantages for i in teacher] == pytest.approx(
        [rows_real[i].advantages for i in teacher]
    )
    assert [rows_shuf[i].advantages for i in student] != pytest.approx(
        [rows_real[i].advantages for i in student]
    )
    # the first problem's answers now train on rewards averaging +0.62 (real: -0.12), so its right first
    # answer (+1 in both) sits less above its group's baseline
    assert rows_shuf[student[0]].advantages < rows_real[student[0]].advantages
    tr.run.close()


def test_a_real_step_with_shuffled_rewards(tmp_path):
    cfg = load_config(
        "tiny-learn",
        [
            "rl.student_rewards=shuffled",
            "tasks.prompts=6",
            "tasks.seed_synthetic=8",
            "sandbox.workers=1",
            "train.threads=1",
            "diagnostics.probe_every=0",
        ],
    )
    tr = Trainer(cfg, tmp_path / "run", quiet=True)
    tr.setup()
    try:
        res = tr.step(1)
    finally:
        tr.close()
    valid = [t for t in res.traces if t.valid]
    assert valid, "the bundled model proposed no valid problem in 12 proposals"
    flat_real = [r for t in res.traces for r in t.answer_rewards]
    flat_train = [r for t in res.traces for r in t.train_rewards]
    assert sorted(flat_train) == sorted(flat_real) and len(flat_real) == 4 * len(valid)
    for t in valid:  # the teachers' reward is 1 - rho of the real solves (0 when nobody solved)
        rho = sum(t.solves) / len(t.solves)
        assert t.reward == pytest.approx(0.0 if rho == 0 else 1 - rho)
    # the logged student reward is the real mean
    for m, rec in res.record["members"].items():
        if rec["role"] == "student" and rec["reward"] is not None:
            mine = [r for t in res.traces if t.student == m for r in t.answer_rewards]
            assert rec["reward"] == pytest.approx(sum(mine) / len(mine))
