"""`rl.teacher_temperature`: the teachers' proposals sample at their own temperature, the students' answers
at `rl.temperature`; unset, every rollout uses `rl.temperature` (the paper's single setting)."""

import copy

import pytest
import torch
from test_progress import FAST as ONE_STEP  # same folder: pytest puts it on sys.path

from populora.config import ConfigError, load_config
from populora.engine import build
from populora.engine.testing import random_model
from populora.train.trainer import Trainer

FAST = [*ONE_STEP, "rl.temperature=0.6"]  # one fast step on a random model (test_progress.py's settings)


class RecordingEngine:
    """The real engine, with every `generate` call's requests kept in call order."""

    def __init__(self, engine):
        self._engine, self.calls = engine, []

    def generate(self, requests, **kw):
        self.calls.append(list(requests))
        return self._engine.generate(requests, **kw)

    def __getattr__(self, name):
        return getattr(self._engine, name)


@pytest.fixture(scope="module")
def model_tok():
    torch.set_num_threads(1)
    return random_model(seed=0)


def _first_step(model_tok, tmp_path, extra):
    model, tok = model_tok
    eng = RecordingEngine(
        build(model=copy.deepcopy(model), tokenizer=tok, n_slots=4, rank=4, alpha=8, lr=1e-3)
    )
    tr = Trainer(load_config("tiny", FAST + extra), tmp_path / "run", engine=eng, quiet=True)
    try:
        tr.setup()
        tr.fit(0)
        student_request = tr._request(0, "x", 4)
    finally:
        tr.close()
    return eng.calls[0], student_request


@pytest.mark.parametrize(("extra", "teacher_t"), [([], 0.6), (["rl.teacher_temperature=1.0"], 1.0)])
def test_teachers_sample_at_their_temperature(model_tok, tmp_path, extra, teacher_t):
    teacher_calls, student_request = _first_step(model_tok, tmp_path, extra)
    assert len(teacher_calls) == 2 * 3  # 2 matchups x 3 prompts: the step's first call is the proposals
    assert {r.temperature for r in teacher_calls} == {teacher_t}
    assert student_request.temperature == 0.6  # answers (and learnability samples) keep rl.temperature


def test_teacher_temperature_must_be_positive():
    with pytest.raises(ConfigError, match="rl.teacher_temperature"):
        load_config("tiny", ["rl.teacher_temperature=0"])


def test_teacher_temperature_set_and_unset_from_the_command_line():
    assert load_config("tiny", ["rl.teacher_temperature=1"]).rl.teacher_temperature == 1.0
    assert (
        load_config(
            "tiny", ["rl.teacher_temperature=1.0", "rl.teacher_temperature=null"]
        ).rl.teacher_temperature
        is None
    )
    with pytest.raises(ConfigError, match="expected a number or null"):
        load_config("tiny", ["rl.teacher_temperature=hot"])
