"""The fixed probe during training (train/probe.py): what it scores, when, and how it is logged and shown."""

import json

import pytest

from populora import tasks
from populora.config import ConfigError, load_config, to_yaml
from populora.diagnostics.probe import probe_by_role, probe_change
from populora.diagnostics.run import load_run
from populora.diagnostics.schema import check_run
from populora.engine import Generation, build
from populora.engine.testing import random_model
from populora.pretrain.probe import score_probe
from populora.report.html import render_compare, render_report
from populora.sandbox import Sandbox
from populora.train.probe import Prober, probe_subset, score_members
from populora.train.setup import build_engine
from populora.train.trainer import Trainer


@pytest.fixture(scope="module")
def sandbox():
    with Sandbox(workers=1) as sb:
        yield sb


class GoldEngine:
    """Answers probe prompts by slot: slot 0 always right, slot 1 right on every other problem, slot 2 never.

    Only `generate` is used by the scorer; parsing and sandbox scoring stay real."""

    def __init__(self, problems):
        self.answers = {}
        for task, ps in problems.items():
            t = tasks.get(task)
            for i, p in enumerate(ps):
                prompt = t.student_prompt(p, template="compact")
                gold = t.render_answer(t.gold_answer(p), template="compact")
                self.answers[prompt] = (gold, i % 2 == 0)
        self.calls = 0

    def generate(self, requests, seed=None):
        self.calls += 1
        out = []
        for r in requests:
            assert r.temperature == 0.0  # the probe is greedy
            gold, even = self.answers[r.prompt]
            right = r.slot == 0 or (r.slot == 1 and even)
            text = gold if right else "```output\nnot an answer at all\n```"
            out.append(Generation([1], text, [0.0], "stop", slot=r.slot))
        return out


def test_score_members_scores_each_member_on_its_own_answers(sandbox):
    problems = probe_subset(4)
    assert {t: len(ps) for t, ps in problems.items()} == {"code_i": 4, "code_o": 4, "code_f": 4}
    assert problems == probe_subset(4)  # the same subset every time
    engine = GoldEngine(problems)
    acc = score_members(engine, {"S0": 0, "S1": 1, "T0": 2}, problems, sandbox)
    assert engine.calls == 1  # every member's prompts in one mixed-slot batch
    assert acc == {
        "S0": {"code_i": 1.0, "code_o": 1.0, "code_f": 1.0},
        "S1": {"code_i": 0.5, "code_o": 0.5, "code_f": 0.5},
        "T0": {"code_i": 0.0, "code_o": 0.0, "code_f": 0.0},
    }


def test_score_members_agrees_with_the_single_slot_scorer_on_the_bundled_model(sandbox):
    cfg = load_config("tiny", ["population.teachers=1", "population.students=1", "train.threads=1"])
    engine = build_engine(cfg)
    try:
        problems = probe_subset(3)
        many = score_members(engine, {"T0": 0, "S0": 1}, problems, sandbox)
        one = score_probe(engine, 0, problems, "compact", None, sandbox)
    finally:
        engine.close()
    assert many["T0"] == one == many["S0"]  # fresh adapters (B = 0) are the base model


def test_probe_config_keys_are_checked():
    cfg = load_config("tiny", ["diagnostics.probe_every=5", "diagnostics.probe_size=32"])
    assert (cfg.diagnostics.probe_every, cfg.diagnostics.probe_size) == (5, 32)
    assert load_config("tiny").diagnostics.probe_every == 0  # off unless asked for
    with pytest.raises(ConfigError, match="diagnostics.probe_size"):
        load_config("tiny", ["diagnostics.probe_size=0"])
    with pytest.raises(ConfigError, match="diagnostics.probe_every"):
        load_config("tiny", ["diagnostics.probe_every=-1"])
    p = Prober.from_config(cfg)
    assert [s for s in range(11) if p.due(s)] == [0, 5, 10]


def test_trainer_logs_the_probe_at_step_0_and_every_k_steps(tmp_path):
    model, tok = random_model(seed=0)
    cfg = load_config(
        "tiny",
        [
            "train.steps=3",  # evolution at step 2 (never at the final step)
            "train.checkpoint_every=3",
            "train.threads=1",
            "rl.rollouts=1",
            "tasks.prompts=3",
            "tasks.teacher_max_new_tokens=8",
            "tasks.student_max_new_tokens=8",
            "tasks.seed_synthetic=2",
            "sandbox.workers=1",
            "evolution.every=2",
            "diagnostics.probe_every=2",
            "diagnostics.probe_size=2",
        ],
    )
    engine = build(model=model, tokenizer=tok, n_slots=4, rank=4, alpha=8, lr=1e-3)
    tr = Trainer(cfg, tmp_path / "run", engine=engine, quiet=True)
    tr.prober.budget = dict.fromkeys(tr.prober.budget, 4)  # a random model: short answers keep it quick
    tr.setup()
    tr.run.write_config(to_yaml(cfg))
    try:
        tr.fit(0)
        tr.prober.at_start(tr, 0)  # a restart at step 0 keeps the step-0 probe instead of adding one
    finally:
        tr.close()
    run_dir = tmp_path / "run"
    recs = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in recs] == [0, 1, 2, 3]
    assert "members" not in recs[0] and "probe" not in recs[1] and "probe" not in recs[3]
    members = {"T0", "T1", "S0", "S1"}
    assert set(recs[0]["probe"]) == members
    # step 2 evolved: the probe scores the members alive after evolution, children included
    born = {
        e["child"]
        for e in map(json.loads, (run_dir / "events.jsonl").read_text().splitlines())
        if e.get("type") == "evolution"
    }
    replaced = {
        e["replaced"]
        for e in map(json.loads, (run_dir / "events.jsonl").read_text().splitlines())
        if e.get("type") == "evolution"
    }
    assert born and set(recs[2]["probe"]) == (members - replaced) | born
    for rec in (recs[0], recs[2]):
        for accs in rec["probe"].values():
            assert set(accs) == {"code_i", "code_o", "code_f"}
            assert all(0.0 <= a <= 1.0 for a in accs.values())
    assert check_run(run_dir) == []
    run = load_run(run_dir)
    assert run.n_steps == 3 and list(run.probe_steps) == [0, 2]  # the step-0 probe is not a step
    curves = probe_by_role(run)
    assert set(curves) == {"teacher", "student"}
    assert list(curves["student"]["all"].steps) == [0, 2]
    assert probe_change(run, "student") is not None
    page = render_report(run)
    assert 'id="probe"' in page and "Fixed probe" in page and "No probe logged" not in page
    assert 'id="probe"' in render_compare([run, load_run(run_dir, label="again")])


def test_schema_rejects_a_malformed_probe(tmp_path):
    from populora.diagnostics.schema import check_metrics_record

    ok = {"step": 0, "time": 0.0, "mode": "population", "probe": {"S0": {"code_o": 0.5}}}
    assert check_metrics_record(ok) == []
    assert check_metrics_record({**ok, "probe": {"S0": {"code_x": 0.5}}})
    assert check_metrics_record({**ok, "probe": {"S0": {"code_o": 1.5}}})
    assert check_metrics_record({"step": 0, "probe": {"S0": {"code_o": 0.5}}})  # time and mode missing
