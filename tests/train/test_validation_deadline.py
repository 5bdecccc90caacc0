"""Validation has deadlines, as scoring has (issue 50, item 4): a proposal's own budget of sandbox time
(`sandbox.validate_deadline_s`) and one for a whole step's validation (`sandbox.validate_step_deadline_s`), on
the sequential lane and the overlap lane, in population and single mode, counted in metrics.jsonl
(`validate_past_deadline`). Real sandbox; the trainer tests run real steps of a tiny random model whose
teacher rows are replaced by hand-written proposals (the model never writes a slow one on its own).

No timing is asserted: the slow inputs cost about 0.3 s a call here, their projection (11 runs of 10 inputs)
is ~30 s against a 5 s budget, while the fast inputs' whole validation is ~0.05 s of sandbox time."""

import json
import time

import pytest

from populora import tasks
from populora.config import ConfigError, load_config
from populora.engine import Generation, build
from populora.engine.testing import random_model
from populora.sandbox import Limits, Sandbox
from populora.tasks import Invalid, Problem, Proposal
from populora.tasks.base import VALIDATION_DEADLINE, validation_cut
from populora.train.setup import derive_seed
from populora.train.trainer import Trainer

PROGRAM = "def f(n):\n    return sum(range(n))"
SLOW = tuple(str(10_000_000 + k) for k in range(10))  # about 0.3 s a call
FAST = tuple(str(k) for k in range(10))
# Fast in pass 1 (one call per job), slow from the second call in a process on (every later job makes 10).
SLOW_ON_RE_RUNS = "seen = []\n\ndef f(n):\n    seen.append(n)\n    return sum(range(10_000_000)) * 0 + n if len(seen) > 1 else n"


@pytest.fixture(scope="module")
def sandbox():
    with Sandbox(workers=2, limits=Limits(timeout_s=5, memory_mb=256)) as sb:
        yield sb


# ------------------------------------------------------------------------------------------------ the task
def test_a_slow_code_f_proposal_is_cut_by_its_budget_and_a_fast_one_keeps_its_verdict(sandbox):
    """The issue's case: a valid code_f proposal whose inputs make every call slow. With a budget it is
    invalid after pass 1 ('validation would take longer than 5 s'), counted as cut; without one it is valid
    (what main did, after ~30 s of sandbox time). A fast proposal in the same batch is the same Problem."""
    t = tasks.get("code_f", validate_deadline_s=5.0)
    slow, fast = Proposal(PROGRAM, SLOW, "sums"), Proposal(PROGRAM, FAST, "sums")
    cut, ok = t.validate([slow, fast], sandbox)
    assert isinstance(cut, Invalid) and cut.reason.startswith("validation would take longer than 5 s"), cut
    assert validation_cut(cut.reason) and "each input runs 11 times" in cut.reason
    (unbounded,) = tasks.get("code_f", validate_deadline_s=None).validate([fast], sandbox)
    assert isinstance(ok, Problem) and ok == unbounded


def test_a_program_slow_only_on_re_runs_is_cut_at_its_share(sandbox):
    """Pass 1 cannot see every slowness: a program that is fast on its first call in a process and slow after
    passes pass 1's projection, and the re-runs (each job calls it 10 times) time out at their share of the
    budget (5 s / 11 runs) instead of running for 5 x 10 calls x the job limit."""
    t = tasks.get("code_f", validate_deadline_s=5.0)
    (cut,) = t.validate([Proposal(SLOW_ON_RE_RUNS, FAST, "echo")], sandbox)
    assert isinstance(cut, Invalid) and cut.reason.startswith("validation took longer than 5 s"), cut
    assert "share" in cut.reason and validation_cut(cut.reason)
    assert t.budget_share() == pytest.approx(5.0 / 11)


def test_a_passed_step_deadline_cuts_every_proposal_of_every_task_type(sandbox):
    """`validate(until=)` in the past: nothing runs and every well-formed proposal is invalid with the deadline
    reason; a malformed one keeps its own reason (it never needed the sandbox)."""
    code_i = tasks.get("code_i")
    props = [Proposal("def f(x):\n    return x", ("1",)), Proposal("def f(x):\n    return x", ("1", "2"))]
    got = code_i.validate(props, sandbox, until=time.monotonic() - 1.0)
    assert got[0].reason == VALIDATION_DEADLINE and validation_cut(got[0].reason)
    assert not validation_cut(got[1].reason)  # "code_i takes exactly one input"
    (f,) = tasks.get("code_f").validate([Proposal(PROGRAM, FAST, "sums")], sandbox, until=time.monotonic())
    assert isinstance(f, Invalid) and f.reason == VALIDATION_DEADLINE
    assert not validation_cut("input 0: raised ValueError") and not validation_cut(None)


@pytest.mark.parametrize("bad", [0, -1.0, float("nan"), True, "5", 10**6])
def test_a_bad_budget_is_refused_with_the_key_and_range(bad):
    with pytest.raises(ValueError, match=r"validate_deadline_s=\) must be None or a number of seconds"):
        tasks.get("code_f", validate_deadline_s=bad)


@pytest.mark.parametrize("key", ["validate_deadline_s", "validate_step_deadline_s"])
@pytest.mark.parametrize("bad", ["0", "-5", "nan", "inf", "100000"])
def test_the_config_keys_are_bounded(key, bad):
    with pytest.raises(ConfigError, match=rf"sandbox.{key}: must be a number of seconds in \(0, 86400\]"):
        load_config("tiny", [f"sandbox.{key}={bad}"])
    assert getattr(load_config("tiny").sandbox, key) == {"validate_deadline_s": 30.0}.get(key, 600.0)


# ------------------------------------------------------------------------------------------------ the trainer
def _trainer(tmp_path, mode: str, overlap: bool, overrides=()) -> Trainer:
    cfg = load_config(
        "tiny",
        [
            f"population.mode={mode}",
            f"train.overlap={str(overlap).lower()}",
            "train.steps=1",
            "train.threads=1",
            "train.checkpoint_every=100",
            "evolution.every=100",
            "tasks.types=[code_f]",
            "tasks.prompts=2",
            "tasks.seed_synthetic=0",
            "tasks.teacher_max_new_tokens=8",
            "tasks.student_max_new_tokens=8",
            "rl.rollouts=2",
            "sandbox.timeout_s=5",
            "diagnostics.probe_every=0",
            *overrides,
        ],
    )
    model, tok = random_model(seed=0)
    engine = build(model=model, tokenizer=tok, n_slots=cfg.n_slots, rank=4, alpha=8, lr=1e-3)
    tr = Trainer(cfg, tmp_path / f"{mode}-{overlap}", engine=engine, quiet=True)
    tr.setup()
    # every code_f prompt shows PROGRAM; the step's first teacher row proposes SLOW inputs, the rest FAST ones
    shown = tasks.get("code_i").problem_from(tr.sandbox, PROGRAM, ["3"])
    tr.buffers.sample_program = lambda rng=None: shown
    real, teacher_seed = tr.engine.generate, derive_seed(cfg.train.seed, 1, "teacher")  # fit's steps: 1..
    code_f = tasks.get("code_f")

    def generate(requests, seed=None, progress=None, on_finish=None):
        if seed != teacher_seed:
            return real(requests, seed=seed, progress=progress, on_finish=on_finish)
        out = []
        for i, req in enumerate(requests):
            text = code_f.render_proposal(PROGRAM, SLOW if i == 0 else FAST, "sums", template="compact")
            ids = tr.engine.tokenizer(text, add_special_tokens=False)["input_ids"]
            out.append(
                Generation(ids, text, [-1.0] * len(ids), "stop", tr.engine.encode(req.prompt), req.slot)
            )
            if on_finish is not None:
                on_finish(i, out[-1])
        return out

    tr.engine.generate = generate
    return tr


def _logs(run) -> tuple[list[dict], list[dict]]:
    def rows(name):
        return [json.loads(line) for line in (run / name).read_text().splitlines()]

    return rows("metrics.jsonl"), rows("problems.jsonl")


@pytest.mark.parametrize("mode", ["population", "single"])
@pytest.mark.parametrize("overlap", [False, True])
def test_a_slow_proposal_is_cut_and_counted_and_the_step_completes(tmp_path, mode, overlap):
    """One slow code_f proposal in a real step (both lanes, both modes): invalid by its budget, counted in
    metrics.jsonl's `validate_past_deadline`, its teacher gets the invalid reward; the fast ones are played."""
    tr = _trainer(tmp_path, mode, overlap, ["sandbox.validate_deadline_s=5"])
    try:
        tr.fit()
    finally:
        tr.close()
    metrics, problems = _logs(tr.run.path)
    assert [m["step"] for m in metrics] == [1] and metrics[0]["validate_past_deadline"] == 1
    assert metrics[0]["score_past_deadline"] == 0
    cut = [p for p in problems if not p["valid"]]
    assert len(cut) == 1 and cut[0]["reason"].startswith("validation would take longer than 5 s"), cut
    assert cut[0]["inputs"] == list(SLOW) and cut[0]["reward"] == tr.cfg.rl.invalid_reward
    assert len(problems) == (2 if mode == "single" else 4) and all(
        p["valid"] for p in problems if p is not cut[0]
    )


@pytest.mark.parametrize("overlap", [False, True])
def test_a_passed_step_deadline_cuts_every_proposal_and_the_step_completes(tmp_path, overlap):
    """A step whose validation deadline has passed before any job ran: every proposal is invalid with the
    deadline reason and counted; nothing is played, and the step still ends with its metrics line."""
    tr = _trainer(tmp_path, "population", overlap, ["sandbox.validate_step_deadline_s=0.000000001"])
    try:
        tr.fit()
    finally:
        tr.close()
    metrics, problems = _logs(tr.run.path)
    assert len(problems) == 4 and all(p["reason"] == VALIDATION_DEADLINE for p in problems)
    assert metrics[0]["validate_past_deadline"] == 4 and metrics[0]["step"] == 1
